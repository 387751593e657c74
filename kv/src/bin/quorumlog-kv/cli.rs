//! The partitioned service's command line (`quorumlog-kv part …`): run a
//! node, write and read keys, see every partition, and reassign replicas
//! across partitions as Kafka's reassignment tool does (`alter`, `list`,
//! `cancel`, `reassign --plan FILE [--verify | --cancel]`, `--throttle`).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use clap::Subcommand;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use quorumlog_kv::client::partitioned::{self as client, PartitionedClient};
use quorumlog_kv::error::{Error, Result};
use quorumlog_kv::server::host::{self, HostArgs};
use quorumlog_kv::wire::admin::{describe, prometheus};
use quorumlog_kv::wire::admin::{AlterError, Control};
use quorumlog_kv::wire::Refusal;

/// The service's commands: a node, client calls, administration.
#[derive(Debug, Subcommand)]
pub(crate) enum PartCmd {
    /// Runs a node of the partitioned service until killed.
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
        /// Every node, `id=addr` separated by commas.
        #[arg(long)]
        peers: String,
        /// Partitions (at creation).
        #[arg(long, default_value_t = quorumlog_kv::server::PARTITIONS)]
        partitions: u32,
        /// Replicas per partition (at creation).
        #[arg(long, default_value_t = quorumlog_kv::server::REPLICATION)]
        replication: usize,
        /// Create the cluster on the first start (every node of it).
        #[arg(long)]
        init: bool,
        /// Reassignment throttle, bytes/s per node (0: none).
        #[arg(long, default_value_t = 0)]
        throttle: u64,
        /// Entries between a partition's snapshots.
        #[arg(long, default_value_t = quorumlog_kv::SNAPSHOT_EVERY)]
        snapshot_every: u64,
        /// The shared log's segment size in bytes (0: the log's default,
        /// 128 MiB with two prepared ahead; smaller: none prepared ahead).
        #[arg(long, default_value_t = 0)]
        segment_bytes: u64,
        /// Serve the storage's metrics for Prometheus on this address.
        #[arg(long)]
        metrics_addr: Option<String>,
        /// Run the log's sync rounds on its flusher thread, not on the
        /// node's own thread before it parks: more writes/s with one
        /// partition (7–13 % measured), fewer with 4 to 64 (17–42 %).
        #[arg(long)]
        sync_on_flusher: bool,
    },
    /// Writes `key = value` through its partition's leader.
    Put {
        /// Node addresses, separated by commas.
        #[arg(long)]
        nodes: String,
        /// Partitions.
        #[arg(long, default_value_t = quorumlog_kv::server::PARTITIONS)]
        partitions: u32,
        /// Seconds before the put gives up (its outcome then unknown).
        #[arg(long, default_value_t = 10)]
        timeout: u64,
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
    /// Reads a key, linearizably, from its partition's leader.
    Get {
        /// Node addresses, separated by commas.
        #[arg(long)]
        nodes: String,
        /// Partitions.
        #[arg(long, default_value_t = quorumlog_kv::server::PARTITIONS)]
        partitions: u32,
        /// The key.
        key: String,
    },
    /// Every partition: leader, voters, learners, high watermark, lag
    /// per replica.
    Status {
        /// Node addresses, separated by commas.
        #[arg(long)]
        nodes: String,
    },
    /// Alters reassignments: `--target P=1,2,3` per partition (any
    /// number; `P=` cancels P's), accepted or refused as a whole.
    Alter {
        /// Node addresses, separated by commas.
        #[arg(long)]
        nodes: String,
        /// `partition=replica,replica,…` (empty: cancel).
        #[arg(long = "target", required = true)]
        targets: Vec<String>,
    },
    /// Cancels reassignments (rollback to the set before the first call).
    Cancel {
        /// Node addresses, separated by commas.
        #[arg(long)]
        nodes: String,
        /// Every reassignment in progress.
        #[arg(
            long,
            conflicts_with = "partitions",
            required_unless_present = "partitions"
        )]
        all: bool,
        /// The partitions whose reassignment to cancel.
        partitions: Vec<u32>,
    },
    /// Lists reassignments in progress (all, or the partitions named).
    List {
        /// Node addresses, separated by commas.
        #[arg(long)]
        nodes: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// The partitions (all if none).
        partitions: Vec<u32>,
    },
    /// A reassignment plan file, as Kafka's tool takes it:
    /// `{"version":1,"partitions":[{"partition":0,"replicas":[3,4,5]}]}`.
    /// Executes it, or verifies it (`--verify`: what is done, what is
    /// pending; removes the throttle once all is done), or cancels it.
    Reassign {
        /// Node addresses, separated by commas.
        #[arg(long)]
        nodes: String,
        /// The plan file.
        #[arg(long)]
        plan: PathBuf,
        /// Report what is done and pending instead of executing.
        #[arg(long, conflicts_with = "cancel")]
        verify: bool,
        /// Cancel the plan's partitions' reassignments.
        #[arg(long)]
        cancel: bool,
        /// Set every node's reassignment throttle (bytes/s) first.
        #[arg(long)]
        throttle: Option<u64>,
    },
    /// Writes from many clients for a while; prints the aggregate
    /// writes/s (the scaling measurement).
    Load {
        /// Node addresses, separated by commas.
        #[arg(long)]
        nodes: String,
        /// Partitions.
        #[arg(long, default_value_t = quorumlog_kv::server::PARTITIONS)]
        partitions: u32,
        /// Concurrent clients.
        #[arg(long, default_value_t = 64)]
        clients: usize,
        /// Seconds of writing.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// Value size in bytes.
        #[arg(long, default_value_t = 64)]
        value_bytes: usize,
    },
    /// Sets every node's reassignment throttle (bytes/s; 0: none).
    Throttle {
        /// Node addresses, separated by commas.
        #[arg(long)]
        nodes: String,
        /// Bytes per second of catch-up traffic per node.
        bytes_per_sec: u64,
    },
    /// The cluster's metrics, in Prometheus's text format.
    Metrics {
        /// Node addresses, separated by commas.
        #[arg(long)]
        nodes: String,
    },
}

/// A reassignment plan file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Plan {
    /// The format's version (1).
    #[serde(default = "one")]
    pub(crate) version: u32,
    /// The targets.
    pub(crate) partitions: Vec<PlanEntry>,
}

fn one() -> u32 {
    1
}

/// One partition's target in a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PlanEntry {
    /// The partition.
    pub(crate) partition: u32,
    /// Its target replicas.
    pub(crate) replicas: Vec<u64>,
}

fn nodes_of(s: &str) -> Vec<String> {
    s.split(',')
        .filter(|x| !x.is_empty())
        .map(str::to_string)
        .collect()
}

fn refused(reason: String) -> Error {
    Error::Refused(Refusal::Refused { reason })
}

fn deadline(seconds: u64) -> Instant {
    Instant::now() + Duration::from_secs(seconds)
}

/// Parses `P=1,2,3` (empty after `=`: a cancel).
///
/// # Errors
/// A malformed target.
pub(crate) fn parse_target(s: &str) -> Result<(u32, Vec<u64>)> {
    let (p, set) = s
        .split_once('=')
        .ok_or_else(|| refused(format!("bad target {s}: expected PARTITION=ID,ID,…")))?;
    let p = p
        .trim()
        .parse()
        .map_err(|_| refused(format!("bad partition in {s}")))?;
    let set = set
        .split(',')
        .filter(|x| !x.trim().is_empty())
        .map(|x| {
            x.trim()
                .parse()
                .map_err(|_| refused(format!("bad id in {s}")))
        })
        .collect::<Result<Vec<u64>>>()?;
    Ok((p, set))
}

/// Reads a plan file.
///
/// # Errors
/// The file cannot be read or is not a plan.
pub(crate) fn read_plan(path: &std::path::Path) -> Result<Plan> {
    let text =
        std::fs::read_to_string(path).map_err(|e| Error::io(path.display().to_string(), e))?;
    serde_json::from_str(&text).map_err(|e| refused(format!("{}: not a plan: {e}", path.display())))
}

fn print_alter(r: std::result::Result<u64, Vec<(u32, AlterError)>>) -> bool {
    match r {
        Ok(g) => {
            println!("accepted (generation {g})");
            true
        }
        Err(refusals) => {
            println!("refused, nothing changed:");
            for (p, e) in refusals {
                println!("  partition {p}: {e}");
            }
            false
        }
    }
}

/// Runs `cmd`; `Ok(false)` is a refused request or a failed check.
///
/// # Errors
/// A node or controller that did not answer; bad arguments.
pub(crate) async fn run(cmd: PartCmd) -> Result<bool> {
    match cmd {
        c @ PartCmd::Node { .. } => run_node(c).await,
        c @ (PartCmd::Put { .. } | PartCmd::Get { .. } | PartCmd::Status { .. }) => {
            run_client(c).await
        }
        c => run_admin(c).await,
    }
}

/// `node`.
async fn run_node(cmd: PartCmd) -> Result<bool> {
    match cmd {
        PartCmd::Node {
            id,
            cluster,
            dir,
            listen,
            peers,
            partitions,
            replication,
            init,
            throttle,
            snapshot_every,
            segment_bytes,
            metrics_addr,
            // The runtime's choice (`main`).
            sync_on_flusher: _,
        } => {
            let peers = peers
                .split(',')
                .map(|p| {
                    let (id, addr) = p
                        .split_once('=')
                        .ok_or_else(|| refused(format!("bad peer {p}")))?;
                    let id = id.parse().map_err(|_| refused(format!("bad id in {p}")))?;
                    Ok((id, addr.to_string()))
                })
                .collect::<Result<Vec<(u64, String)>>>()?;
            host::run(HostArgs {
                id,
                cluster,
                dir,
                listen,
                peers,
                partitions,
                replication,
                init,
                throttle,
                snapshot_every,
                segment_bytes,
                metrics_addr,
            })
            .await
            .map(|()| true)
        }
        _ => Ok(false),
    }
}

/// `reassign --plan`.
async fn run_plan(cmd: PartCmd) -> Result<bool> {
    match cmd {
        PartCmd::Reassign {
            nodes,
            plan,
            verify,
            cancel,
            throttle,
        } => {
            let nodes = nodes_of(&nodes);
            let plan = read_plan(&plan)?;
            if let Some(t) = throttle {
                client::throttle(&nodes, t, deadline(10)).await?;
                println!("throttle: {t} bytes/s on every node");
            }
            if verify {
                return verify_plan(&nodes, &plan).await;
            }
            let targets = plan
                .partitions
                .iter()
                .map(|e| {
                    (
                        e.partition,
                        if cancel {
                            Vec::new()
                        } else {
                            e.replicas.clone()
                        },
                    )
                })
                .collect();
            Ok(print_alter(
                client::alter(&nodes, targets, deadline(10)).await?,
            ))
        }
        _ => Ok(false),
    }
}

/// `put`, `get`, `status`.
async fn run_client(cmd: PartCmd) -> Result<bool> {
    match cmd {
        PartCmd::Put {
            nodes,
            partitions,
            timeout,
            key,
            value,
        } => {
            let index = PartitionedClient::new(&nodes_of(&nodes), partitions)
                .put(&key, &value, deadline(timeout))
                .await?;
            println!(
                "partition {}: applied at index {index}",
                quorumlog_kv::server::partition_of(&key, partitions)
            );
            Ok(true)
        }
        PartCmd::Get {
            nodes,
            partitions,
            key,
        } => {
            let read = PartitionedClient::new(&nodes_of(&nodes), partitions)
                .get(&key, deadline(10))
                .await?;
            println!("{}", read.value.as_deref().unwrap_or("(none)"));
            Ok(true)
        }
        PartCmd::Status { nodes } => {
            print!("{}", status_text(&nodes_of(&nodes)).await);
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// The reassignment commands and the metrics.
async fn run_admin(cmd: PartCmd) -> Result<bool> {
    match cmd {
        PartCmd::Alter { nodes, targets } => {
            let targets = targets
                .iter()
                .map(|t| parse_target(t))
                .collect::<Result<Vec<_>>>()?;
            Ok(print_alter(
                client::alter(&nodes_of(&nodes), targets, deadline(10)).await?,
            ))
        }
        PartCmd::Cancel {
            nodes,
            all,
            partitions,
        } => {
            let nodes = nodes_of(&nodes);
            let r = if all {
                client::control(&nodes, Control::CancelAll, deadline(10)).await?
            } else {
                let targets = partitions.into_iter().map(|p| (p, Vec::new())).collect();
                client::alter(&nodes, targets, deadline(10)).await?
            };
            Ok(print_alter(r))
        }
        PartCmd::List {
            nodes,
            json,
            partitions,
        } => {
            let l = client::list(&nodes_of(&nodes), partitions, deadline(10)).await?;
            if json {
                let text =
                    serde_json::to_string_pretty(&l).map_err(|e| refused(format!("json: {e}")))?;
                println!("{text}");
            } else {
                println!("{}", describe(&l));
            }
            Ok(true)
        }
        c @ PartCmd::Reassign { .. } => run_plan(c).await,
        PartCmd::Load {
            nodes,
            partitions,
            clients,
            seconds,
            value_bytes,
        } => load(&nodes_of(&nodes), partitions, clients, seconds, value_bytes).await,
        PartCmd::Throttle {
            nodes,
            bytes_per_sec,
        } => {
            client::throttle(&nodes_of(&nodes), bytes_per_sec, deadline(10)).await?;
            println!("throttle: {bytes_per_sec} bytes/s on every node");
            Ok(true)
        }
        PartCmd::Metrics { nodes } => {
            let m = client::metrics(&nodes_of(&nodes), deadline(5)).await;
            print!("{}", prometheus(&m));
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// `load`: `clients` writers of unique keys for `seconds`; prints the
/// acknowledged writes per second and the failures.
async fn load(
    nodes: &[String],
    partitions: u32,
    clients: usize,
    seconds: u64,
    value_bytes: usize,
) -> Result<bool> {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let t0 = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let (nodes, stop) = (nodes.to_vec(), std::sync::Arc::clone(&stop));
            tokio::spawn(async move {
                let mut client = PartitionedClient::new(&nodes, partitions);
                let value = "v".repeat(value_bytes);
                let (mut ok, mut failed) = (0u64, 0u64);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let key = format!("load-{c}-{ok}-{failed}");
                    match client.put(&key, &value, deadline(10)).await {
                        Ok(_) => ok += 1,
                        Err(_) => failed += 1,
                    }
                }
                (ok, failed)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut ok, mut failed) = (0, 0);
    for t in tasks {
        if let Ok((o, f)) = t.await {
            ok += o;
            failed += f;
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    #[expect(clippy::cast_precision_loss, reason = "a count of writes")]
    let rate = ok as f64 / secs;
    println!(
        "partitions {partitions} clients {clients}: {ok} writes in {secs:.1} s = {rate:.0} writes/s ({failed} failed)"
    );
    Ok(failed == 0)
}

/// `--verify`: per partition of the plan, done or pending; the throttle
/// removed once all are done. `Ok(false)` while any is pending.
async fn verify_plan(nodes: &[String], plan: &Plan) -> Result<bool> {
    let listing = client::list(nodes, Vec::new(), deadline(10)).await?;
    let views = client::views(nodes, deadline(5)).await;
    let mut all_done = true;
    for e in &plan.partitions {
        let target: BTreeSet<u64> = e.replicas.iter().copied().collect();
        if let Some(l) = listing.iter().find(|l| l.partition == e.partition) {
            all_done = false;
            println!(
                "partition {}: in progress ({} of {} adding replicas promoted)",
                e.partition,
                l.adding
                    .iter()
                    .filter(|a| a.state == quorumlog_kv::wire::admin::AddingState::Promoted)
                    .count(),
                l.adding.len()
            );
            continue;
        }
        let voters: Option<BTreeSet<u64>> = views
            .values()
            .flatten()
            .flat_map(|v| v.partitions.iter())
            .filter(|v| v.partition == e.partition && v.leading)
            .max_by_key(|v| v.term)
            .map(|v| v.voters.iter().copied().collect());
        match voters {
            Some(v) if v == target => println!("partition {}: complete", e.partition),
            Some(v) => {
                all_done = false;
                println!(
                    "partition {}: not in progress, replicas {v:?} (not the plan's {target:?})",
                    e.partition
                );
            }
            None => {
                all_done = false;
                println!("partition {}: no leader answered", e.partition);
            }
        }
    }
    if all_done {
        client::throttle(nodes, 0, deadline(10)).await?;
        println!("all complete; throttle removed");
    }
    Ok(all_done)
}

/// Every partition, a line each: leader, voters, learners, the leader's
/// high watermark and each replica's lag.
pub(crate) async fn status_text(nodes: &[String]) -> String {
    let views = client::views(nodes, deadline(5)).await;
    let mut by_partition: std::collections::BTreeMap<
        u32,
        Vec<&quorumlog_kv::wire::admin::PartitionView>,
    > = std::collections::BTreeMap::new();
    let mut out = String::new();
    for (addr, v) in &views {
        match v {
            None => {
                let _ = writeln!(out, "{addr}: no answer");
            }
            Some(v) => {
                for p in &v.partitions {
                    by_partition.entry(p.partition).or_default().push(p);
                }
            }
        }
    }
    for (p, seen) in by_partition {
        let leader = seen.iter().filter(|v| v.leading).max_by_key(|v| v.term);
        match leader {
            Some(l) => {
                let lags: Vec<String> = l
                    .lags
                    .iter()
                    .map(|x| {
                        format!(
                            "{}:{}",
                            x.node,
                            x.entries.map_or("?".into(), |e| e.to_string())
                        )
                    })
                    .collect();
                let _ = writeln!(
                    out,
                    "partition {p}: leader {} term {}, voters {:?}, learners {:?}, hw {}, lag {}",
                    l.leader.unwrap_or(0),
                    l.term,
                    l.voters,
                    l.learners,
                    l.applied.map_or(0, |a| a + 1),
                    lags.join(" ")
                );
            }
            None => {
                let _ = writeln!(out, "partition {p}: no leader");
            }
        }
    }
    out
}
