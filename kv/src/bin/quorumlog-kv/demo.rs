//! `quorumlog-kv demo`: three node processes on loopback, each with its
//! own data directory, `P` partitions of three replicas; many clients
//! write through each partition's leader while readers read acknowledged
//! keys back (linearizable reads: each must return the acknowledged
//! value). Mid-stream the controller's leader is killed (SIGKILL; it also
//! leads about a third of the partitions), new leaders are elected,
//! partition 0 is moved off the dead node while it is down, the node
//! restarts and catches up, and partition 0 moves back onto it. At the end
//! every acknowledged write must read back from every replica of its
//! partition.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use quorumlog_kv::client::partitioned::{alter, list, views, PartitionedClient};
use quorumlog_kv::client::{dump_partition, status};
use quorumlog_kv::error::{Error, Result};
use quorumlog_kv::server::partition_of;
use quorumlog_kv_harness::history::{Calls, Outcome};
use quorumlog_kv_harness::processes::Processes;

/// Deadline of one status or dump call the demo makes.
const CALL: Duration = Duration::from_secs(2);

/// The demo's partitions by default: one led by each node at the start
/// (the placement gives each node the first replica of one), so the kill
/// moves a third of the leadership, the controller's included, while
/// each partition still carries about a third of the 64 writers in each
/// Raft round. More partitions cost this two-core machine throughput
/// (measured: 8 partitions ran at two thirds of 3's rate).
pub(crate) const PARTITIONS: u32 = 3;

fn soon() -> tokio::time::Instant {
    tokio::time::Instant::now() + CALL
}

/// An index below `n` from `state` (a xorshift step).
pub(crate) fn pick(state: &mut u64, n: usize) -> usize {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    usize::try_from(*state % (n.max(1) as u64)).unwrap_or(0)
}

/// How the demo runs.
#[derive(Debug, Clone)]
pub(crate) struct DemoArgs {
    /// Total seconds of writing (split around the kill and the restart).
    pub(crate) seconds: u64,
    /// Partitions.
    pub(crate) partitions: u32,
    /// Concurrent clients.
    pub(crate) clients: usize,
    /// Readers of acknowledged keys beside them.
    pub(crate) readers: usize,
    /// Where the three data directories go (a fresh one is made inside).
    pub(crate) dir: PathBuf,
    /// Arguments passed to every node (an A/B run's knob).
    pub(crate) node_args: Vec<String>,
}

/// What the demo measured.
#[derive(Debug, Clone, Default)]
pub(crate) struct Report {
    /// Partitions.
    pub(crate) partitions: u32,
    /// Writes acknowledged.
    pub(crate) acked: usize,
    /// Writes per second over the whole run.
    pub(crate) writes_per_sec: f64,
    /// Median commit latency (ms).
    pub p50_ms: f64,
    /// 99th percentile commit latency (ms).
    pub p99_ms: f64,
    /// From the kill until a new leader was known (ms).
    pub(crate) new_leader_ms: u64,
    /// The restarted node: opening its store (ms), and until it had
    /// applied everything committed when it started (ms).
    pub(crate) restart_open_ms: u64,
    /// See `restart_open_ms`.
    pub(crate) restart_caught_up_ms: u64,
    /// Partition 0 moved off the killed node, and back onto it once it
    /// restarted: how long each took (ms; `None`: not done in 30 s).
    pub(crate) moved_away_ms: Option<u64>,
    /// See `moved_away_ms`.
    pub(crate) moved_back_ms: Option<u64>,
    /// Acknowledged writes missing or wrong, per node.
    pub(crate) missing: BTreeMap<u64, usize>,
    /// Linearizable reads of acknowledged keys during the run.
    pub(crate) reads: usize,
    /// Of those, reads that did not return the acknowledged value.
    pub(crate) reads_wrong: usize,
    /// Per node at the end: its log's sync rounds since it (re)started,
    /// and their p50/p99 latency (ms, the upper bounds of the histogram
    /// buckets holding them; `LogStats::sync_latency`).
    pub(crate) syncs: BTreeMap<u64, (u64, Option<f64>, Option<f64>)>,
}

impl Report {
    /// Every acknowledged write read back from every node.
    pub(crate) fn passed(&self) -> bool {
        self.acked > 0
            && self.missing.values().all(|m| *m == 0)
            && self.reads_wrong == 0
            && self.moved_away_ms.is_some()
            && self.moved_back_ms.is_some()
    }

    /// Prints the figures and the verdict; returns [`Report::passed`].
    pub(crate) fn print(&self) -> bool {
        println!();
        println!("writes acknowledged     {}", self.acked);
        println!("writes/s                {:.0}", self.writes_per_sec);
        println!(
            "commit latency p50/p99  {:.2} / {:.2} ms",
            self.p50_ms, self.p99_ms
        );
        println!("partitions              {}", self.partitions);
        println!("time to new leaders     {} ms", self.new_leader_ms);
        println!(
            "restarted node          store opened in {} ms, caught up in {} ms",
            self.restart_open_ms, self.restart_caught_up_ms
        );
        let ms = |v: Option<u64>| v.map_or_else(|| "not done".to_string(), |v| format!("{v} ms"));
        println!(
            "partition 0 moved       off the dead node in {}, back in {}",
            ms(self.moved_away_ms),
            ms(self.moved_back_ms)
        );
        println!("missing per node        {:?}", self.missing);
        println!(
            "reads (linearizable)    {} of acknowledged keys, {} wrong",
            self.reads, self.reads_wrong
        );
        let ms = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v}"));
        for (id, (n, p50, p99)) in &self.syncs {
            println!(
                "node {id} syncs           {n} rounds, p50/p99 <= {} / {} ms",
                ms(*p50),
                ms(*p99)
            );
        }
        let ok = self.passed();
        println!(
            "check                   {}",
            if ok { "PASS" } else { "FAIL" }
        );
        ok
    }
}

/// Whether every partition below `partitions` has a leader other than
/// `exclude`, by the views of the nodes other than `exclude`.
pub(crate) async fn partitions_led(p: &Processes, exclude: Option<u64>, partitions: u32) -> bool {
    let nodes: Vec<String> = p
        .peers()
        .iter()
        .filter(|(id, _)| Some(*id) != exclude)
        .map(|(_, a)| a.clone())
        .collect();
    let mut led = std::collections::BTreeSet::new();
    for v in views(&nodes, soon()).await.into_values().flatten() {
        for p in v.partitions.iter().filter(|p| p.leading) {
            led.insert(p.partition);
        }
    }
    (0..partitions).all(|p| led.contains(&p))
}

/// Waits until [`partitions_led`], within `limit`.
pub(crate) async fn wait_partitions(
    p: &Processes,
    exclude: Option<u64>,
    partitions: u32,
    limit: Duration,
) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if partitions_led(p, exclude, partitions).await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// The controller's leader all reachable nodes agree on (`exclude`
/// ignored).
async fn leader(p: &Processes, exclude: Option<u64>) -> Option<u64> {
    let mut seen = Vec::new();
    for (id, addr) in p.peers() {
        if Some(*id) == exclude {
            continue;
        }
        seen.push(status(addr, soon()).await.ok().and_then(|s| s.leader));
    }
    let first = seen.first().copied().flatten()?;
    (seen.iter().all(|l| *l == Some(first)) && Some(first) != exclude).then_some(first)
}

/// The controller's leader every reachable node agrees on, within
/// `limit`.
pub(crate) async fn wait_leader(
    p: &Processes,
    exclude: Option<u64>,
    limit: Duration,
) -> Option<u64> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if let Some(l) = leader(p, exclude).await {
            return Some(l);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

#[derive(Default)]
struct Acks {
    values: BTreeMap<String, String>,
    /// The highest log index of an acknowledged write.
    last_index: u64,
    latencies_us: Vec<u64>,
    /// Acknowledged keys in order (readers pick from them).
    keys: Vec<String>,
}

fn spawn_writers(
    partitions: u32,
    clients: usize,
    nodes: &[String],
    stop: &Arc<std::sync::atomic::AtomicBool>,
    acks: &Arc<Mutex<Acks>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..clients)
        .map(|c| {
            let mut w = PartitionedClient::new(nodes, partitions);
            let (stop, acks) = (Arc::clone(stop), Arc::clone(acks));
            tokio::spawn(async move {
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let (key, value) = (format!("c{c}-{n}"), format!("v{c}-{n}"));
                    let t0 = Instant::now();
                    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
                    if let Ok(index) = w.put(&key, &value, deadline).await {
                        let us = u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX);
                        let mut a = acks.lock().unwrap_or_else(PoisonError::into_inner);
                        a.keys.push(key.clone());
                        a.values.insert(key, value);
                        a.last_index = a.last_index.max(index);
                        a.latencies_us.push(us);
                    }
                    n += 1;
                }
            })
        })
        .collect()
}

/// Readers until `stop`: each reads an acknowledged key through the
/// leader (linearizable) and compares it with the acknowledged value (keys
/// are written once). Returns (reads, wrong) per reader.
fn spawn_readers(
    partitions: u32,
    readers: usize,
    nodes: &[String],
    stop: &Arc<std::sync::atomic::AtomicBool>,
    acks: &Arc<Mutex<Acks>>,
) -> Vec<tokio::task::JoinHandle<(usize, usize)>> {
    (0..readers)
        .map(|r| {
            let mut c = PartitionedClient::new(nodes, partitions);
            let (stop, acks) = (Arc::clone(stop), Arc::clone(acks));
            tokio::spawn(async move {
                let (mut reads, mut wrong) = (0, 0);
                let mut seed = 0x9e37_79b9_7f4a_7c15_u64 ^ (r as u64 + 1);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let picked = {
                        let a = acks.lock().unwrap_or_else(PoisonError::into_inner);
                        let i = pick(&mut seed, a.keys.len());
                        a.keys
                            .get(i)
                            .and_then(|k| a.values.get(k).map(|v| (k.clone(), v.clone())))
                    };
                    let Some((key, value)) = picked else {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    };
                    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
                    if let Ok(read) = c.get(&key, deadline).await {
                        reads += 1;
                        if read.value.as_deref() != Some(value.as_str()) {
                            wrong += 1;
                            println!(
                                "wrong read: {key} = {:?} from node {} at {}, acknowledged {value}",
                                read.value, read.node, read.applied
                            );
                        }
                    }
                }
                (reads, wrong)
            })
        })
        .collect()
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss,
        reason = "an index into a non-empty list, and a latency for display"
    )]
    let ms = {
        let i = (((sorted.len() - 1) as f64) * p).round() as usize;
        sorted.get(i).copied().unwrap_or(0) as f64 / 1000.0
    };
    ms
}

/// A client of every partition whose calls a history records.
pub(crate) struct Recorded(pub PartitionedClient);

impl Calls for Recorded {
    fn id(&self) -> u64 {
        self.0.id()
    }

    async fn put(&mut self, key: &str, value: &str, deadline: tokio::time::Instant) -> Outcome {
        match self.0.put(key, value, deadline).await {
            Ok(_) => Outcome::Ok(None),
            Err(Error::Failed { .. }) => Outcome::Failed,
            Err(_) => Outcome::Unknown,
        }
    }

    async fn get(&mut self, key: &str, deadline: tokio::time::Instant) -> Outcome {
        match self.0.get(key, deadline).await {
            Ok(read) => Outcome::Ok(read.value),
            Err(_) => Outcome::Failed,
        }
    }
}

fn say(t0: Instant, what: &str) {
    println!("[{:5.1}s] {what}", t0.elapsed().as_secs_f64());
}

/// Moves partition `p` to `target` and waits until the controller lists
/// no reassignment of it; the time it took (ms), `None` past `limit`.
async fn move_partition(
    nodes: &[String],
    p: u32,
    target: Vec<u64>,
    limit: Duration,
) -> Option<u64> {
    let t0 = Instant::now();
    let deadline = tokio::time::Instant::now() + limit;
    match alter(nodes, vec![(p, target)], deadline).await {
        Ok(Ok(_)) => {}
        _ => return None,
    }
    while t0.elapsed() < limit {
        if let Ok(l) = list(nodes, vec![p], soon()).await {
            if l.is_empty() {
                return u64::try_from(t0.elapsed().as_millis()).ok();
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// Per partition: its leader's applied index and its voters, by the
/// views of the nodes that answer.
async fn partition_states(nodes: &[String]) -> BTreeMap<u32, (u64, Vec<u64>)> {
    let mut out = BTreeMap::new();
    for v in views(nodes, soon()).await.into_values().flatten() {
        for p in v.partitions.into_iter().filter(|p| p.leading) {
            out.insert(p.partition, (p.applied.unwrap_or(0), p.voters));
        }
    }
    out
}

/// Every node's applied index per partition it hosts.
async fn applied_by_node(cluster: &Processes) -> BTreeMap<(u64, u32), u64> {
    let mut out = BTreeMap::new();
    for (id, addr) in cluster.peers() {
        let v = views(std::slice::from_ref(addr), soon()).await;
        for view in v.into_values().flatten() {
            for p in view.partitions {
                out.insert((*id, p.partition), p.applied.unwrap_or(0));
            }
        }
    }
    out
}

/// Checks every acknowledged write on every replica of its partition,
/// each replica first given time to apply what its leader applied.
async fn check_replicas(
    cluster: &Processes,
    partitions: u32,
    values: &BTreeMap<String, String>,
) -> BTreeMap<u64, usize> {
    let nodes = cluster.addrs();
    let states = partition_states(&nodes).await;
    let mut missing: BTreeMap<u64, usize> =
        cluster.peers().iter().map(|(id, _)| (*id, 0)).collect();
    for (p, (goal, voters)) in &states {
        for id in voters {
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(20) {
                let applied = applied_by_node(cluster).await;
                if applied.get(&(*id, *p)).copied().unwrap_or(0) >= *goal {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let data = dump_partition(&cluster.addr(*id), *p, soon())
                .await
                .unwrap_or_default();
            let bad = values
                .iter()
                .filter(|(k, _)| partition_of(k, partitions) == *p)
                .filter(|(k, v)| data.get(*k) != Some(*v))
                .count();
            *missing.entry(*id).or_default() += bad;
        }
    }
    for p in 0..partitions {
        if !states.contains_key(&p) {
            // No leader at the end: count its writes missing everywhere.
            let lost = values
                .keys()
                .filter(|k| partition_of(k, partitions) == p)
                .count();
            for m in missing.values_mut() {
                *m += lost;
            }
        }
    }
    missing
}

fn ms(t: Instant) -> u64 {
    u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Restarts node `id` and waits until each of its partitions applied what
/// its leader had applied at the restart: (store open ms, caught up ms).
async fn restart(cluster: &mut Processes, id: u64) -> Result<(u64, u64)> {
    let goals = partition_states(&cluster.addrs()).await;
    let restarted_at = Instant::now();
    cluster
        .spawn(id)
        .map_err(|e| Error::io(format!("restart node {id}"), e))?;
    let addr = cluster.addr(id);
    let (mut open_ms, mut caught_up_ms) = (0, 0);
    while restarted_at.elapsed() < Duration::from_secs(30) {
        if let Ok(s) = status(&addr, soon()).await {
            open_ms = s.open_ms;
            let applied = applied_by_node(cluster).await;
            let behind = goals.iter().any(|(p, (goal, voters))| {
                voters.contains(&id) && applied.get(&(id, *p)).copied().unwrap_or(0) < *goal
            });
            if !behind {
                caught_up_ms = ms(restarted_at);
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok((open_ms, caught_up_ms))
}

/// Runs the demo (see the module documentation).
///
/// # Errors
/// The cluster could not be started or did not elect leaders.
#[expect(
    clippy::too_many_lines,
    reason = "one story told in order: start, write, kill, move, restart, move back, check"
)]
pub(crate) async fn run(exe: &Path, args: &DemoArgs) -> Result<Report> {
    let t0 = Instant::now();
    let p_count = args.partitions.max(1);
    let base = args
        .dir
        .join(format!("quorumlog-kv-demo-{}", std::process::id()));
    std::fs::create_dir_all(&base).map_err(|e| Error::io(base.display().to_string(), e))?;
    let mut cluster = Processes::new(exe, &base, 3).map_err(|e| Error::io("ports", e))?;
    cluster.extra = vec!["--partitions".into(), p_count.to_string()];
    cluster.extra.extend(args.node_args.iter().cloned());
    for id in 1..=3 {
        cluster
            .spawn(id)
            .map_err(|e| Error::io(format!("start node {id}"), e))?;
    }
    say(
        t0,
        &format!(
            "3 nodes started, {p_count} partitions of 3 replicas, data in {}",
            base.display()
        ),
    );
    let no_leader = |what: &str| Error::Timeout { last: what.into() };
    let victim = wait_leader(&cluster, None, Duration::from_secs(30))
        .await
        .ok_or_else(|| no_leader("no controller leader elected"))?;
    if !wait_partitions(&cluster, None, p_count, Duration::from_secs(30)).await {
        return Err(no_leader("a partition without a leader"));
    }
    say(
        t0,
        &format!(
            "every partition has a leader; {} clients writing",
            args.clients
        ),
    );
    let nodes = cluster.addrs();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let acks = Arc::new(Mutex::new(Acks::default()));
    let writers = spawn_writers(p_count, args.clients, &nodes, &stop, &acks);
    let readers = spawn_readers(p_count, args.readers, &nodes, &stop, &acks);
    let written = |acks: &Arc<Mutex<Acks>>| {
        acks.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values
            .len()
    };
    let phase = Duration::from_secs(args.seconds.max(3) / 3);
    let write_start = Instant::now();
    tokio::time::sleep(phase).await;
    say(
        t0,
        &format!(
            "{} writes acknowledged; SIGKILL node {victim} (the controller's leader)",
            written(&acks)
        ),
    );
    let killed_at = Instant::now();
    cluster.kill(victim);
    if !wait_partitions(&cluster, Some(victim), p_count, Duration::from_secs(30)).await {
        return Err(no_leader("no new leaders after the kill"));
    }
    let new_leader_ms = ms(killed_at);
    say(t0, &format!("every partition led again after {new_leader_ms} ms; partition 0 moves off node {victim}"));
    let others: Vec<u64> = (1..=3).filter(|i| *i != victim).collect();
    let live: Vec<String> = others.iter().map(|i| cluster.addr(*i)).collect();
    let moved_away_ms = move_partition(&live, 0, others.clone(), Duration::from_secs(30)).await;
    say(
        t0,
        &format!("partition 0 on {others:?} after {moved_away_ms:?} ms; writing on"),
    );
    tokio::time::sleep(phase / 2).await;
    say(
        t0,
        &format!(
            "{} writes acknowledged; restarting node {victim}",
            written(&acks)
        ),
    );
    let (restart_open_ms, restart_caught_up_ms) = restart(&mut cluster, victim).await?;
    say(t0, &format!("node {victim} back: store opened in {restart_open_ms} ms, caught up in {restart_caught_up_ms} ms; partition 0 moves back"));
    let moved_back_ms = move_partition(&nodes, 0, vec![1, 2, 3], Duration::from_secs(30)).await;
    say(
        t0,
        &format!("partition 0 on [1, 2, 3] after {moved_back_ms:?} ms"),
    );
    tokio::time::sleep(phase / 2).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in writers {
        let _ = w.await;
    }
    let (mut reads, mut reads_wrong) = (0, 0);
    for r in readers {
        if let Ok((n, w)) = r.await {
            reads += n;
            reads_wrong += w;
        }
    }
    let elapsed = write_start.elapsed();
    let (values, mut lat) = {
        let a = acks.lock().unwrap_or_else(PoisonError::into_inner);
        (a.values.clone(), a.latencies_us.clone())
    };
    say(
        t0,
        &format!(
            "{} writes acknowledged; checking every replica",
            values.len()
        ),
    );
    if !wait_partitions(&cluster, None, p_count, Duration::from_secs(30)).await {
        return Err(no_leader("a partition without a leader at the end"));
    }
    let missing = check_replicas(&cluster, p_count, &values).await;
    let mut syncs = BTreeMap::new();
    for (id, addr) in cluster.peers() {
        if let Ok(st) = status(addr, soon()).await {
            syncs.insert(*id, (st.syncs, st.sync_p50_ms, st.sync_p99_ms));
        }
    }
    lat.sort_unstable();
    #[expect(clippy::cast_precision_loss, reason = "a rate for display")]
    let writes_per_sec = values.len() as f64 / elapsed.as_secs_f64();
    let report = Report {
        partitions: p_count,
        acked: values.len(),
        writes_per_sec,
        p50_ms: percentile(&lat, 0.50),
        p99_ms: percentile(&lat, 0.99),
        new_leader_ms,
        restart_open_ms,
        restart_caught_up_ms,
        moved_away_ms,
        moved_back_ms,
        missing,
        reads,
        reads_wrong,
        syncs,
    };
    drop(cluster);
    let _ = std::fs::remove_dir_all(&base);
    Ok(report)
}
