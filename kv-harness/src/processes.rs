//! Node processes of a cluster on loopback, each with its own data
//! directory and log file: started, killed (`SIGKILL`), paused
//! (`SIGSTOP`) and resumed, and killed when dropped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Node processes on loopback, each with its own data directory under a
/// base directory; killed (SIGKILL) when dropped.
pub struct Processes {
    exe: PathBuf,
    base: PathBuf,
    peers: Vec<(u64, String)>,
    /// Nodes `1..=initial` form the cluster (node 1 initializes it).
    initial: u64,
    children: BTreeMap<u64, Child>,
    /// Arguments every node gets besides its own.
    pub extra: Vec<String>,
    /// The subcommand that runs a node (`node`; `part node` for the
    /// partitioned service).
    pub subcommand: Vec<String>,
    /// Every initial node gets `--init` on its first start (the
    /// partitioned service), not only node 1.
    pub init_every: bool,
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl Processes {
    /// Nodes `1..=members` of a new cluster (not started), on free ports.
    ///
    /// # Errors
    /// No free port.
    pub fn new(exe: &Path, base: &Path, members: u64) -> std::io::Result<Processes> {
        let mut peers = Vec::new();
        for id in 1..=members {
            peers.push((id, format!("127.0.0.1:{}", free_port()?)));
        }
        Ok(Processes {
            exe: exe.to_path_buf(),
            base: base.to_path_buf(),
            peers,
            initial: members,
            children: BTreeMap::new(),
            extra: Vec::new(),
            subcommand: vec!["node".into()],
            init_every: true,
        })
    }

    /// A node outside the initial cluster (not started); returns its
    /// address.
    ///
    /// # Errors
    /// No free port.
    pub fn add(&mut self, id: u64) -> std::io::Result<String> {
        let addr = format!("127.0.0.1:{}", free_port()?);
        self.peers.push((id, addr.clone()));
        Ok(addr)
    }

    /// Node `id`'s address.
    pub fn addr(&self, id: u64) -> String {
        self.peers
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, a)| a.clone())
            .unwrap_or_default()
    }

    /// Starts node `id`'s process (its standard error is appended to
    /// `node-<id>.log`).
    ///
    /// # Errors
    /// The process cannot start.
    pub fn spawn(&mut self, id: u64) -> std::io::Result<()> {
        let peers: Vec<String> = self
            .peers
            .iter()
            .filter(|(i, _)| *i <= self.initial)
            .map(|(i, a)| format!("{i}={a}"))
            .collect();
        // Appended: a restarted node's log follows its earlier runs'.
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.base.join(format!("node-{id}.log")))?;
        let mut cmd = Command::new(&self.exe);
        cmd.args(&self.subcommand)
            .args(["--id", &id.to_string()])
            .arg("--dir")
            .arg(self.base.join(format!("node-{id}")))
            .args(["--listen", &self.addr(id)])
            .args(["--peers", &peers.join(",")])
            .args(["--cluster", "7"])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(log);
        if id == 1 || (self.init_every && id <= self.initial) {
            cmd.arg("--init");
        }
        self.children.insert(id, cmd.spawn()?);
        Ok(())
    }

    /// Kills node `id`'s process (SIGKILL).
    pub fn kill(&mut self, id: u64) {
        if let Some(mut c) = self.children.remove(&id) {
            let _ = c.kill(); // SIGKILL
            let _ = c.wait();
        }
    }

    /// Whether node `id`'s process runs (started and not killed).
    pub fn running(&self, id: u64) -> bool {
        self.children.contains_key(&id)
    }

    /// Every node: id and address.
    pub fn peers(&self) -> &[(u64, String)] {
        &self.peers
    }

    /// Every member's address.
    pub fn addrs(&self) -> Vec<String> {
        self.peers.iter().map(|(_, a)| a.clone()).collect()
    }

    /// Stops (`SIGSTOP`) or continues (`SIGCONT`) node `id`'s process.
    pub fn pause(&self, id: u64, stop: bool) {
        if let Some(c) = self.children.get(&id) {
            if let Ok(pid) = libc::pid_t::try_from(c.id()) {
                let signal = if stop { libc::SIGSTOP } else { libc::SIGCONT };
                // SAFETY: `kill` takes a pid and a signal number and touches
                // no memory of ours; the pid is our own child's, not reaped.
                unsafe {
                    libc::kill(pid, signal);
                }
            }
        }
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        let ids: Vec<u64> = self.children.keys().copied().collect();
        for id in ids {
            self.kill(id);
        }
    }
}
