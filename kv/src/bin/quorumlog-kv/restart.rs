//! `quorumlog-kv restart-time`: how long restarts take with many entries
//! since the last snapshot. Three node processes of one partition (snapshots only every
//! million entries) take `entries` writes from 64 clients; all three are
//! killed (`SIGKILL`); then node 1 restarts alone (measured: until it
//! answers a status call, and how far it re-applied), is killed again, and
//! all three restart together (measured: until a write is acknowledged).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use quorumlog_kv::client::status;
use quorumlog_kv_harness::processes::Processes;

use crate::demo::wait_leader;
use quorumlog_kv::client::partitioned::{views, PartitionedClient};
use quorumlog_kv::error::{Error, Result};

/// What a restart-time run measured.
#[derive(Debug, Clone, Default)]
pub(crate) struct RestartReport {
    /// Entries written before the kill.
    pub(crate) entries: u64,
    /// Node 1 alone: from its start until it accepted a connection (ms).
    pub(crate) listening_ms: u64,
    /// Node 1 alone: from its start until it answered a status call (ms).
    pub(crate) alone_ms: u64,
    /// Its store's open (ms), as it reported.
    pub(crate) open_ms: u64,
    /// The index its state machine had applied when it answered.
    pub(crate) applied: u64,
    /// All three together: from their start until a write was
    /// acknowledged (ms).
    pub(crate) writes_again_ms: u64,
}

impl RestartReport {
    /// Prints the figures.
    pub(crate) fn print(&self) {
        println!();
        println!("entries since the last snapshot  {}", self.entries);
        println!(
            "one node restarted alone         accepts connections after {} ms, answers after {} \
             ms (store opened in {} ms), re-applied to index {}",
            self.listening_ms, self.alone_ms, self.open_ms, self.applied
        );
        println!(
            "whole cluster restarted          writes again after {} ms",
            self.writes_again_ms
        );
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

async fn fill(p: &Processes, entries: u64) {
    let count = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..64)
        .map(|c| {
            let count = Arc::clone(&count);
            let mut w = PartitionedClient::new(&p.addrs(), 1);
            tokio::spawn(async move {
                let mut i = 0;
                while count.load(Ordering::Relaxed) < entries {
                    let deadline = Instant::now() + Duration::from_secs(10);
                    if w.put(&format!("k{c}-{i}"), "value-of-some-length", deadline)
                        .await
                        .is_ok()
                    {
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                    i += 1;
                }
            })
        })
        .collect();
    for t in tasks {
        let _ = t.await;
    }
}

/// Partition 0's applied index on the node at `addr`.
async fn applied_of(addr: &str) -> u64 {
    views(&[addr.to_string()], Instant::now() + Duration::from_secs(2))
        .await
        .into_values()
        .flatten()
        .flat_map(|v| v.partitions)
        .find(|v| v.partition == 0)
        .and_then(|v| v.applied)
        .unwrap_or(0)
}

/// Runs the measurement; `exe` is this program.
///
/// # Errors
/// A node could not start; no leader; no write after the restart.
pub(crate) async fn run(exe: &Path, dir: &Path, entries: u64) -> Result<RestartReport> {
    let base: PathBuf = dir.join(format!("quorumlog-kv-restart-{}", std::process::id()));
    std::fs::create_dir_all(&base).map_err(|e| Error::io(base.display().to_string(), e))?;
    let mut p = Processes::new(exe, &base, 3).map_err(|e| Error::io("ports", e))?;
    // One partition: the whole log in one group, as a single Raft group's.
    p.extra = ["--partitions", "1", "--snapshot-every", "1000000"]
        .map(String::from)
        .to_vec();
    for id in 1..=3 {
        p.spawn(id)
            .map_err(|e| Error::io(format!("start node {id}"), e))?;
    }
    wait_leader(&p, None, Duration::from_secs(20))
        .await
        .ok_or_else(|| Error::Timeout {
            last: "no leader elected".into(),
        })?;
    fill(&p, entries).await;
    // Let the followers apply, then kill everything at once.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for id in 1..=3 {
        p.kill(id);
    }
    let t = Instant::now();
    p.spawn(1).map_err(|e| Error::io("restart node 1", e))?;
    while tokio::net::TcpStream::connect(p.addr(1)).await.is_err() {
        if t.elapsed() > Duration::from_secs(60) {
            return Err(Error::Timeout {
                last: "node 1 never listened".into(),
            });
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let listening_ms = ms(t.elapsed());
    let s = loop {
        if let Ok(s) = status(&p.addr(1), Instant::now() + Duration::from_secs(1)).await {
            break s;
        }
        if t.elapsed() > Duration::from_secs(60) {
            return Err(Error::Timeout {
                last: "node 1 never answered".into(),
            });
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let alone_ms = ms(t.elapsed());
    let applied = applied_of(&p.addr(1)).await;
    p.kill(1);
    let t = Instant::now();
    for id in 1..=3 {
        p.spawn(id)
            .map_err(|e| Error::io(format!("restart node {id}"), e))?;
    }
    PartitionedClient::new(&p.addrs(), 1)
        .put("after", "1", Instant::now() + Duration::from_secs(60))
        .await?;
    let writes_again_ms = ms(t.elapsed());
    drop(p);
    if std::env::var_os("QUORUMLOG_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(&base);
    } else {
        println!("kept {}", base.display());
    }
    Ok(RestartReport {
        entries,
        listening_ms,
        alone_ms,
        open_ms: s.open_ms,
        applied,
        writes_again_ms,
    })
}
