//! `quorumlog-kv`: run a node, talk to one, or run the demo.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use quorumlog_kv::{client, demo, node, proto};

#[derive(Parser)]
#[command(
    version,
    about = "A replicated key-value store: openraft over quorumlog"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Runs a node until killed.
    Node {
        /// This node's id.
        #[arg(long)]
        id: u64,
        /// Its data directory (formatted on first start).
        #[arg(long)]
        dir: PathBuf,
        /// Address to listen on.
        #[arg(long)]
        listen: String,
        /// Every member, `id=addr` separated by commas.
        #[arg(long)]
        peers: String,
        /// Initialize the cluster with the peers on first start.
        #[arg(long)]
        init: bool,
    },
    /// Writes `key = value` through the leader.
    Put {
        /// A node's address.
        #[arg(long)]
        addr: String,
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
    /// Reads a key from one node.
    Get {
        /// A node's address.
        #[arg(long)]
        addr: String,
        /// The key.
        key: String,
    },
    /// Shows one node's Raft state.
    Status {
        /// A node's address.
        #[arg(long)]
        addr: String,
    },
    /// Reassigns the voters (KIP-455 semantics): `--target 1,2,4` starts a
    /// reassignment (replacing a pending one), `--cancel` rolls the pending
    /// one back. Returns once the request is committed; the leader then
    /// drives it (`reassignments` shows the progress).
    Reassign {
        /// Any node's address (the request goes to the leader).
        #[arg(long)]
        addr: String,
        /// The target voters' ids, separated by commas.
        #[arg(long, conflicts_with = "cancel", required_unless_present = "cancel")]
        target: Option<String>,
        /// Addresses of target nodes not yet members, `id=addr` by commas.
        #[arg(long)]
        peers: Option<String>,
        /// Cancel the pending reassignment.
        #[arg(long)]
        cancel: bool,
    },
    /// Lists the reassignment in progress: every replica, adding ones with
    /// their state and lag, removing ones.
    Reassignments {
        /// Any node's address (the listing comes from the leader).
        #[arg(long)]
        addr: String,
    },
    /// Three node processes, a leader kill, a restart, and the check.
    Demo {
        /// Seconds of writing.
        #[arg(long, default_value_t = 30)]
        seconds: u64,
        /// Concurrent clients.
        #[arg(long, default_value_t = 64)]
        clients: usize,
        /// Parent directory for the data directories.
        #[arg(long, default_value_os_t = std::env::temp_dir())]
        dir: PathBuf,
    },
}

fn parse_peers(s: &str) -> Result<Vec<(u64, String)>, String> {
    s.split(',')
        .map(|p| {
            let (id, addr) = p.split_once('=').ok_or_else(|| format!("bad peer {p}"))?;
            Ok((
                id.parse().map_err(|_| format!("bad id in {p}"))?,
                addr.to_string(),
            ))
        })
        .collect()
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // Logs (openraft's included) to standard error, filtered by RUST_LOG;
    // nothing by default.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    match run(cli.command).await {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Runs `command`; `Ok(false)` is a failed check.
async fn run(command: Cmd) -> Result<bool, String> {
    match command {
        Cmd::Node {
            id,
            dir,
            listen,
            peers,
            init,
        } => {
            let peers = parse_peers(&peers)?;
            node::run(node::NodeArgs {
                id,
                dir,
                listen,
                peers,
                init,
            })
            .await
            .map(|()| true)
        }
        Cmd::Put { addr, key, value } => {
            let mut w = client::Writer::new(vec![addr]);
            let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
            w.put(&key, &value, deadline)
                .await
                .map(|_| true)
                .map_err(|e| e.to_string())
        }
        Cmd::Get { addr, key } => {
            let v = client::get(&addr, &key).await.map_err(|e| e.to_string())?;
            println!("{}", v.unwrap_or_else(|| "(none)".into()));
            Ok(true)
        }
        Cmd::Status { addr } => {
            let s = client::status(&addr).await.map_err(|e| e.to_string())?;
            println!("{s:?}");
            Ok(true)
        }
        Cmd::Reassign {
            addr,
            target,
            peers,
            cancel,
        } => reassign(&addr, target, peers, cancel).await,
        Cmd::Reassignments { addr } => reassignments(&addr).await,
        Cmd::Demo {
            seconds,
            clients,
            dir,
        } => {
            let exe = std::env::current_exe().map_err(|e| e.to_string())?;
            let args = demo::DemoArgs {
                seconds,
                clients,
                dir,
            };
            Ok(demo::run(&exe, &args).await?.print())
        }
    }
}

/// `reassign`: the request, sent to the leader.
async fn reassign(
    addr: &str,
    target: Option<String>,
    peers: Option<String>,
    cancel: bool,
) -> Result<bool, String> {
    let target = if cancel {
        None
    } else {
        let peers = peers
            .as_deref()
            .map(parse_peers)
            .transpose()?
            .unwrap_or_default();
        let ids = target.unwrap_or_default();
        let mut t = Vec::new();
        for id in ids.split(',').filter(|x| !x.is_empty()) {
            let id: u64 = id.trim().parse().map_err(|_| format!("bad id {id}"))?;
            let addr = peers.iter().find(|(i, _)| *i == id).map(|(_, a)| a.clone());
            t.push((id, addr));
        }
        Some(t)
    };
    match client::to_leader(addr, &proto::Request::Reassign(target)).await? {
        proto::Response::Reassign(Ok(())) => {
            println!("accepted");
            Ok(true)
        }
        proto::Response::Reassign(Err(e)) => Err(e),
        _ => Err("unexpected answer".into()),
    }
}

/// `reassignments`: the leader's listing.
async fn reassignments(addr: &str) -> Result<bool, String> {
    match client::to_leader(addr, &proto::Request::Reassignments).await? {
        proto::Response::Reassignments(Ok(text)) => {
            println!("{text}");
            Ok(true)
        }
        proto::Response::Reassignments(Err(e)) => Err(e),
        _ => Err("unexpected answer".into()),
    }
}
