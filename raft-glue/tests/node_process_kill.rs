//! Process-kill test of a node on a real file system: a child process
//! runs 48 groups in one node (8 writer threads, each owning 6 groups),
//! with the background checkpoints and reclamation on (1 MiB segments, a
//! checkpoint every 256 KiB, rewrites once the log passes 1.5 times its
//! live bytes), and prints every acknowledgement on a pipe: durable
//! entries (by `append_durable` or by `on_durable` completions), votes,
//! and truncations and purges (announced before they start and
//! acknowledged when they return). Group 0 never purges, so its old
//! entries are rewritten forward. The parent kills the child with SIGKILL
//! after a random number of acknowledgements, reopens the node and checks
//! every group:
//! - every acknowledged entry is there, byte-identical (CRC32C), unless an
//!   announced truncation or purge removed it;
//! - no entry past an acknowledged truncation is an old one;
//! - every acknowledged vote is there (its epoch or a later one).
//!
//! A refused open counts as a violation like a lost entry: a kill does
//! not damage the disk. `QUORUMLOG_NODE_KILLS=N` sets the kills (default
//! 10); `QUORUMLOG_NODE_KILL_SEED=S` replays a run.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    clippy::too_many_lines,
    clippy::many_single_char_names,
    clippy::similar_names,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{mpsc, Arc};

use quorumlog_checkpoint::{
    ClusterId, DirectoryId, Epoch, Meta, NodeId, Offset, QuorumState, SharedFs, Vote,
};
use quorumlog_io::{RealFs, SimRng};
use quorumlog_log::LogOptions;
use quorumlog_raft::Purge;
use quorumlog_raft::{Identity, Isolation, Node, NodeOptions};
use quorumlog_testkit::fresh_seed;
use quorumlog_testkit::AppendDurable;

const CHILD_ENV: &str = "QUORUMLOG_NODE_KILL_CHILD_DIR";
const GROUPS: u64 = 48;
const WRITERS: u64 = 8;

fn meta() -> Meta {
    Meta::new(ClusterId(1), NodeId(1), DirectoryId(2))
}

fn options() -> NodeOptions {
    NodeOptions {
        log: LogOptions {
            segment_size_bytes: 1 << 20,
            max_batch_bytes: 64 << 10,
            ..LogOptions::default()
        },
        checkpoint_every_bytes: 256 << 10,
        garbage_percent: 150,
        ..NodeOptions::default()
    }
}

fn vote(epoch: u64) -> QuorumState {
    QuorumState {
        epoch: Epoch(epoch),
        leader: None,
        voted: Some(Vote {
            node_id: NodeId(1),
            directory_id: DirectoryId(2),
        }),
    }
}

/// Prints `line` before the call it announces starts: straight to the
/// pipe (a line still queued for the printer would die with the child).
fn announce(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

/// One writer of the child: its groups, forever.
fn writer(node: &Node, w: u64, seed: u64, tx: &mpsc::Sender<String>) {
    let mut rng = SimRng::new(seed);
    let groups: Vec<_> = (0..GROUPS)
        .filter(|g| g % WRITERS == w)
        .map(|g| (g, node.group(g).unwrap()))
        .collect();
    // Per group, the truncations so far: a completion of an entry appended
    // before one may arrive after it is announced.
    let mut gens: BTreeMap<u64, u64> = BTreeMap::new();
    loop {
        let k = rng.index(groups.len());
        let (id, g) = &groups[k];
        let id = *id;
        let gen = *gens.entry(id).or_default();
        let epoch = g.quorum_state().epoch.0.max(1);
        match rng.below(40) {
            0 => {
                let next = epoch + 1;
                g.persist_quorum_state(&vote(next)).unwrap();
                tx.send(format!("VOTE {id} {next}")).unwrap();
            }
            1 => {
                // A conflicting suffix: cut a few entries above the start.
                let (start, end) = (g.extent().start.0, g.extent().queued_end.0);
                if end > start + 4 {
                    let to = end - 1 - rng.below(3);
                    announce(&format!("TRUNCATING {id} {to} {}", gen + 1));
                    gens.insert(id, gen + 1);
                    g.truncate_to(Offset(to)).unwrap();
                    tx.send(format!("TRUNC {id} {to}")).unwrap();
                }
            }
            2 if id != 0 => {
                let (start, end) = (g.extent().start.0, g.extent().queued_end.0);
                if end > start + 40 {
                    let to = end - 20;
                    let e = g.epoch_at(Offset(to - 1)).unwrap();
                    announce(&format!("PURGING {id} {to}"));
                    g.purge(Purge::To {
                        offset: Offset(to),
                        epoch: e,
                    })
                    .unwrap();
                }
            }
            _ => {
                let at = g.extent().queued_end.0;
                let n = 1 + rng.index(3);
                let records: Vec<Vec<u8>> = (0..n)
                    .map(|_| {
                        let mut v = vec![0u8; 1 + rng.index(3000)];
                        rng.fill(&mut v);
                        v
                    })
                    .collect();
                let crcs: Vec<u32> = records.iter().map(|r| crc32c::crc32c(r)).collect();
                if rng.below(2) == 0 {
                    g.append_durable(Offset(at), Epoch(epoch), &records)
                        .unwrap();
                    for (i, c) in crcs.iter().enumerate() {
                        tx.send(format!("ACK {id} {} {c} {gen}", at + i as u64))
                            .unwrap();
                    }
                } else {
                    let info = g.append(Offset(at), Epoch(epoch), &records).unwrap();
                    let tx = tx.clone();
                    g.on_durable(
                        info.next_offset,
                        Box::new(move |r| {
                            if r.is_ok() {
                                for (i, c) in crcs.iter().enumerate() {
                                    let _ =
                                        tx.send(format!("ACK {id} {} {c} {gen}", at + i as u64));
                                }
                            }
                        }),
                    );
                }
            }
        }
    }
}

/// The child: runs the writers until killed. Does nothing unless started
/// by the parent.
#[test]
fn child_role() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let seed: u64 = std::env::var("QUORUMLOG_NODE_KILL_CHILD_SEED")
        .unwrap()
        .parse()
        .unwrap();
    let fs: SharedFs = Arc::new(RealFs::new());
    let (node, _) = Node::open(&fs, Path::new(&dir), &Identity::of(&meta()), &options()).unwrap();
    let node = Arc::new(node);
    // The harness printed `test child_role ... ` without a newline: end
    // that line before any acknowledgement.
    announce("START");
    let (tx, rx) = mpsc::channel::<String>();
    for w in 0..WRITERS {
        let (node, tx) = (Arc::clone(&node), tx.clone());
        std::thread::spawn(move || writer(&node, w, seed ^ (w << 40), &tx));
    }
    drop(tx);
    for line in rx {
        // Locked per line: announcements are printed between.
        announce(&line);
    }
}

#[derive(Default)]
struct Acked {
    /// Per group: offset -> CRC of what was acknowledged durable there.
    entries: BTreeMap<u64, BTreeMap<u64, u32>>,
    /// Per group: the highest acknowledged vote epoch.
    votes: BTreeMap<u64, u64>,
    /// Per group: announced truncations (the generation after, the point).
    truncations: BTreeMap<u64, Vec<(u64, u64)>>,
    /// Per group: the highest announced purge point.
    purged: BTreeMap<u64, u64>,
}

impl Acked {
    fn line(&mut self, line: &str) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let n = |i: usize| -> u64 { f[i].parse().unwrap() };
        match f.first().copied() {
            Some("ACK") => {
                let (g, o, gen) = (n(1), n(2), n(4));
                // An entry a later truncation or purge may have removed
                // (its completion came after the announcement).
                let cut = self
                    .truncations
                    .get(&g)
                    .is_some_and(|t| t.iter().any(|&(after, to)| after > gen && o >= to));
                if cut || self.purged.get(&g).is_some_and(|p| o < *p) {
                    return;
                }
                self.entries
                    .entry(g)
                    .or_default()
                    .insert(o, u32::try_from(n(3)).unwrap());
            }
            Some("VOTE") => {
                let v = self.votes.entry(n(1)).or_default();
                *v = (*v).max(n(2));
            }
            // In doubt from the moment it starts: forget what it may cut.
            Some("TRUNCATING") => {
                if let Some(m) = self.entries.get_mut(&n(1)) {
                    m.retain(|o, _| *o < n(2));
                }
                self.truncations.entry(n(1)).or_default().push((n(3), n(2)));
            }
            Some("PURGING") => {
                if let Some(m) = self.entries.get_mut(&n(1)) {
                    m.retain(|o, _| *o >= n(2));
                }
                let p = self.purged.entry(n(1)).or_default();
                *p = (*p).max(n(2));
            }
            _ => {}
        }
    }
}

fn check(dir: &Path, acked: &Acked) -> Result<u64, String> {
    let fs: SharedFs = Arc::new(RealFs::new());
    let (node, report) = Node::open(&fs, dir, &Identity::of(&meta()), &options())
        .map_err(|e| format!("open refused: {e}"))?;
    let report = (report.checkpoint_position, report.replayed_batches);
    let mut checked = 0;
    for id in 0..GROUPS {
        let g = node.group(id).map_err(|e| format!("group {id}: {e}"))?;
        let (start, end) = (g.extent().start.0, g.extent().end.0);
        let got = g
            .read_entries(Offset(start), Offset(end), u64::MAX, Isolation::Uncommitted)
            .map_err(|e| format!("group {id} read: {e}"))?;
        if got.len() as u64 != end - start {
            return Err(format!(
                "group {id}: {} entries in [{start}, {end})",
                got.len()
            ));
        }
        for (o, crc) in acked.entries.get(&id).into_iter().flatten() {
            if *o < start {
                return Err(format!(
                    "group {id}: acknowledged {o} below the start {start} (end {end}, last purged {:?}, {report:?})",
                    g.extent().last_purged
                ));
            }
            let Some(e) = got.get(usize::try_from(o - start).unwrap()) else {
                return Err(format!("group {id}: acknowledged {o} lost (end {end})"));
            };
            if crc32c::crc32c(&e.bytes) != *crc {
                return Err(format!("group {id}: entry {o} differs"));
            }
            checked += 1;
        }
        if let Some(v) = acked.votes.get(&id) {
            if g.quorum_state().epoch.0 < *v {
                return Err(format!("group {id}: vote {v} lost"));
            }
        }
    }
    Ok(checked)
}

#[test]
fn killed_nodes_keep_every_acknowledged_entry_of_every_group() {
    let seed = std::env::var("QUORUMLOG_NODE_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(fresh_seed);
    let kills: u64 = std::env::var("QUORUMLOG_NODE_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    eprintln!("node process kill: seed {seed}, {kills} kills");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("node");
    let fs: SharedFs = Arc::new(RealFs::new());
    Node::format(&fs, &dir, meta(), &options()).unwrap();
    {
        let (node, _) = Node::open(&fs, &dir, &Identity::of(&meta()), &options()).unwrap();
        for g in 0..GROUPS {
            node.create_group(g, Offset(1)).unwrap();
        }
        node.close().unwrap();
    }
    let mut rng = SimRng::new(seed);
    let mut acked = Acked::default();
    let exe = std::env::current_exe().unwrap();
    let mut total = 0;
    let mut history: Vec<String> = Vec::new();
    for k in 0..kills {
        let mut child = Command::new(&exe)
            .args(["child_role", "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, &dir)
            .env("QUORUMLOG_NODE_KILL_CHILD_SEED", (seed ^ k).to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let stop_after = 300 + rng.below(3000);
        let mut seen = 0;
        let mut lines = BufReader::new(out).lines();
        let relevant = |line: &str| {
            ["ACK", "VOTE", "TRUNCATING", "TRUNC", "PURGING"]
                .iter()
                .any(|p| line.starts_with(p))
        };
        for line in lines.by_ref() {
            let Ok(line) = line else { break };
            if !relevant(&line) {
                continue;
            }
            acked.line(&line);
            history.push(format!("{k}: {line}"));
            seen += 1;
            if seen >= stop_after {
                break;
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();
        // Everything it printed before it died counts (announcements too).
        for line in lines.map_while(Result::ok) {
            if relevant(&line) {
                acked.line(&line);
                history.push(format!("{k} (after kill): {line}"));
            }
        }
        match check(&dir, &acked) {
            Ok(n) => total += n,
            Err(e) => {
                if let Ok(dump) = std::env::var("QUORUMLOG_NODE_KILL_DUMP") {
                    for h in &history {
                        if h.contains(&format!(" {dump} ")) {
                            eprintln!("{h}");
                        }
                    }
                }
                panic!("seed {seed}, kill {k} after {seen} acknowledgements: {e}")
            }
        }
    }
    eprintln!("{kills} kills: {total} acknowledged entries checked, 0 lost or changed");
}
