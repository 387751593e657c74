//! `quorumlog-kv`: run a node, talk to one, run the demo or the soak.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use quorumlog_kv::{client, demo, node, proto, soak, Error};
use tokio::time::Instant;

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
        /// The cluster's id (a directory of another cluster is refused).
        #[arg(long)]
        cluster: u128,
        /// Its data directory (formatted if blank or absent).
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
        /// Entries between snapshots.
        #[arg(long, default_value_t = quorumlog_kv::SNAPSHOT_EVERY)]
        snapshot_every: u64,
        /// Milliseconds between persists of the commit point (0: only at
        /// segment rolls and clean close; a restart then re-applies less).
        #[arg(long, default_value_t = 100)]
        commit_persist_ms: u64,
        /// Serve Prometheus metrics on this address (`GET /metrics`).
        #[arg(long)]
        metrics_addr: Option<String>,
    },
    /// Writes `key = value` through the leader (applied once, retried
    /// until the deadline).
    Put {
        /// Any node's address.
        #[arg(long)]
        addr: String,
        /// Seconds until the call gives up.
        #[arg(long, default_value_t = 10)]
        timeout: u64,
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
    /// Reads a key: linearizable, through the leader; `--stale` reads the
    /// addressed node's own state (and prints the index it had applied).
    Get {
        /// Any node's address (the node read with `--stale`).
        #[arg(long)]
        addr: String,
        /// Seconds until the call gives up.
        #[arg(long, default_value_t = 10)]
        timeout: u64,
        /// Read the addressed node's own state machine, possibly behind.
        #[arg(long)]
        stale: bool,
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
    /// The partitioned service: many partitions per node, each its own
    /// Raft group, and reassignment across partitions.
    Part {
        #[command(subcommand)]
        cmd: quorumlog_kv::parts::cli::PartCmd,
    },
    /// Three node processes, a leader kill, a restart, and the check.
    Demo {
        /// Seconds of writing.
        #[arg(long, default_value_t = 30)]
        seconds: u64,
        /// Concurrent clients.
        #[arg(long, default_value_t = 64)]
        clients: usize,
        /// Readers reading acknowledged keys back (linearizable).
        #[arg(long, default_value_t = 8)]
        readers: usize,
        /// Parent directory for the data directories.
        #[arg(long, default_value_os_t = std::env::temp_dir())]
        dir: PathBuf,
        /// Arguments for every node, after `--` (for example
        /// `-- --commit-persist-ms 0`).
        #[arg(last = true)]
        node_args: Vec<String>,
    },
    /// Restart times with many entries since the last snapshot: one node
    /// alone, and the whole cluster after a kill of all three.
    RestartTime {
        /// Entries written before the kill.
        #[arg(long, default_value_t = 100_000)]
        entries: u64,
        /// Parent directory for the data directories.
        #[arg(long, default_value_os_t = std::env::temp_dir())]
        dir: PathBuf,
    },
    /// Three node processes under SIGKILL and SIGSTOP, clients on a few
    /// keys, and the whole history checked for linearizability.
    Soak {
        /// Seconds of load and faults.
        #[arg(long, default_value_t = 120)]
        seconds: u64,
        /// Concurrent clients.
        #[arg(long, default_value_t = 16)]
        clients: usize,
        /// Keys they share.
        #[arg(long, default_value_t = 8)]
        keys: usize,
        /// The nemesis's seed (default: from the clock).
        #[arg(long)]
        seed: Option<u64>,
        /// Parent directory for the data directories.
        #[arg(long, default_value_os_t = std::env::temp_dir())]
        dir: PathBuf,
    },
}

fn parse_peers(s: &str) -> Result<Vec<(u64, String)>, Error> {
    parse_peers_text(s).map_err(|reason| Error::Refused(proto::Refusal::Refused { reason }))
}

fn parse_peers_text(s: &str) -> Result<Vec<(u64, String)>, String> {
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

/// This binary's path: the demo, the soak and the restart measurement
/// start it as their nodes.
fn this_program() -> Result<PathBuf, Error> {
    std::env::current_exe().map_err(|e| Error::io("this program", e))
}

fn deadline(seconds: u64) -> Instant {
    Instant::now() + std::time::Duration::from_secs(seconds)
}

/// Runs `command`; `Ok(false)` is a failed check.
async fn run(command: Cmd) -> Result<bool, Error> {
    match command {
        Cmd::Node {
            id,
            cluster,
            dir,
            listen,
            peers,
            init,
            snapshot_every,
            commit_persist_ms,
            metrics_addr,
        } => {
            let peers = parse_peers(&peers)?;
            node::run(node::NodeArgs {
                id,
                cluster,
                dir,
                listen,
                peers,
                init,
                snapshot_every,
                commit_persist: (commit_persist_ms > 0)
                    .then(|| std::time::Duration::from_millis(commit_persist_ms)),
                metrics_addr,
            })
            .await
            .map(|()| true)
        }
        c @ (Cmd::Put { .. } | Cmd::Get { .. } | Cmd::Status { .. }) => client_call(c).await,
        Cmd::Reassign {
            addr,
            target,
            peers,
            cancel,
        } => reassign(&addr, target, peers, cancel).await,
        Cmd::Reassignments { addr } => reassignments(&addr).await,
        Cmd::Part { cmd } => quorumlog_kv::parts::cli::run(cmd).await,
        c @ (Cmd::Demo { .. } | Cmd::Soak { .. }) => checks(c).await,
        Cmd::RestartTime { entries, dir } => {
            let exe = this_program()?;
            quorumlog_kv::restart::run(&exe, &dir, entries)
                .await?
                .print();
            Ok(true)
        }
    }
}

/// `put`, `get`, `status`: one client call.
async fn client_call(command: Cmd) -> Result<bool, Error> {
    match command {
        Cmd::Put {
            addr,
            timeout,
            key,
            value,
        } => {
            let index = client::Client::new(vec![addr])
                .put(&key, &value, deadline(timeout))
                .await?;
            println!("applied at index {index}");
            Ok(true)
        }
        Cmd::Get {
            addr,
            timeout,
            stale,
            key,
        } => {
            let mut c = client::Client::new(vec![addr.clone()]);
            let read = if stale {
                c.get_stale(&addr, &key, deadline(timeout)).await?
            } else {
                c.get(&key, deadline(timeout)).await?
            };
            println!("{}", read.value.as_deref().unwrap_or("(none)"));
            if stale {
                println!("(node {}, applied index {})", read.node, read.applied);
            }
            Ok(true)
        }
        Cmd::Status { addr } => {
            let s = client::status(&addr, deadline(5)).await?;
            println!("{s:?}");
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// `demo` and `soak`: a run of node processes, checked.
async fn checks(command: Cmd) -> Result<bool, Error> {
    match command {
        Cmd::Demo {
            seconds,
            clients,
            readers,
            dir,
            node_args,
        } => {
            let exe = this_program()?;
            let args = demo::DemoArgs {
                seconds,
                clients,
                readers,
                dir,
                node_args,
            };
            Ok(demo::run(&exe, &args).await?.print())
        }
        Cmd::Soak {
            seconds,
            clients,
            keys,
            seed,
            dir,
        } => {
            let exe = this_program()?;
            let seed = seed.unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_secs())
            });
            let args = soak::SoakArgs {
                seconds,
                clients,
                keys,
                dir,
                seed,
            };
            Ok(soak::run(&exe, &args).await?.print())
        }
        _ => Ok(false),
    }
}

/// `reassign`: the request, sent to the leader.
async fn reassign(
    addr: &str,
    target: Option<String>,
    peers: Option<String>,
    cancel: bool,
) -> Result<bool, Error> {
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
            let id: u64 = id.trim().parse().map_err(|_| {
                Error::Refused(proto::Refusal::Refused {
                    reason: format!("bad id {id}"),
                })
            })?;
            let addr = peers.iter().find(|(i, _)| *i == id).map(|(_, a)| a.clone());
            t.push((id, addr));
        }
        Some(t)
    };
    match client::to_leader(addr, &proto::Request::Reassign(target), deadline(10)).await? {
        proto::Response::Reassign(Ok(())) => {
            println!("accepted");
            Ok(true)
        }
        proto::Response::Reassign(Err(e)) => Err(e.into()),
        _ => Err(Error::Protocol { addr: addr.into() }),
    }
}

/// `reassignments`: the leader's listing.
async fn reassignments(addr: &str) -> Result<bool, Error> {
    match client::to_leader(addr, &proto::Request::Reassignments, deadline(10)).await? {
        proto::Response::Reassignments(Ok(text)) => {
            println!("{text}");
            Ok(true)
        }
        proto::Response::Reassignments(Err(e)) => Err(e.into()),
        _ => Err(Error::Protocol { addr: addr.into() }),
    }
}
