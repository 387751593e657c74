//! The `quorumlog` binary driven as a process on real directories, damaged
//! ones included: output and exit codes. Invariants: the reading commands
//! never change a directory; every damaged batch is reported with its file,
//! position and offset, and makes `verify` exit 1; a directory that is not
//! formatted is refused with the command that makes one.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::many_single_char_names,
    clippy::too_many_lines,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use quorumlog_raft::kraft::StateAt;
use quorumlog_testkit::WingTest;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use quorumlog_io::RealFs;
use quorumlog_raft::{
    options::WriterOptions, ClusterId, Epoch, Identity, Isolation, Node, NodeId, NodeOptions,
    Offset, QuorumState, SharedFs,
};
use quorumlog_testkit::AppendDurable;

/// The binary under test: this build's, or `QUORUMLOG_BIN` (to show that a
/// regression test fails on another build).
fn bin() -> std::ffi::OsString {
    std::env::var_os("QUORUMLOG_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_quorumlog").into())
}

fn quorumlog(args: &[&str]) -> Output {
    Command::new(bin()).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap()
}

/// Runs `quorumlog args`, which must be refused (exit 2) saying `want`.
fn refused(args: &[&str], want: &str) {
    let o = quorumlog(args);
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert!(text(&o).contains(want), "missing {want:?} in {}", text(&o));
}

/// Formats node directory `dir` with the binary as cluster 5, node
/// `node`, which must succeed; returns what it printed.
fn formatted(dir: &Path, node: u64) -> String {
    let n = node.to_string();
    let args = vec![
        "format",
        dir.to_str().unwrap(),
        "--cluster-id",
        "5",
        "--node-id",
        &n,
    ];
    let o = quorumlog(&args);
    assert_eq!(code(&o), 0, "{}", text(&o));
    text(&o)
}

/// Opens the node directory `dir` (cluster 5, node 3) with 1 MiB
/// segments.
fn open_node(dir: &Path) -> Node {
    let fs: SharedFs = Arc::new(RealFs::new());
    let expect = Identity::node(ClusterId(5), NodeId(3));
    Node::open(&fs, dir, &expect, &NodeOptions::with_segment_bytes(1 << 20))
        .unwrap()
        .0
}

/// A node directory formatted by the binary, with groups 7 and 9 holding
/// `n` entries each (one batch per entry, alternating), closed cleanly.
fn node_dir(n: u64) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("node");
    let said = formatted(&dir, 3);
    assert!(said.contains("cluster 5, node 3"), "{said}");
    let node = open_node(&dir);
    for g in [7, 9] {
        node.create_group(g, Offset(0)).unwrap();
    }
    let (a, b) = (node.group(7).unwrap(), node.group(9).unwrap());
    for i in 0..n {
        a.append_durable(Offset(i), Epoch(2), &[format!("seven-{i}").as_bytes()])
            .unwrap();
        b.append_durable(Offset(i), Epoch(2), &[format!("nine-{i}").as_bytes()])
            .unwrap();
    }
    // Group 7 learns epoch 3's leader (node 3) and commits to 3.
    a.persist_quorum_state(&QuorumState {
        epoch: Epoch(3),
        leader: Some(NodeId(3)),
        voted: None,
    })
    .unwrap();
    a.set_high_watermark(Offset(3.min(n))).unwrap();
    a.wait_durable(Offset(u64::MAX)).unwrap();
    drop((a, b));
    node.close().unwrap();
    tmp
}

/// A node directory (cluster 5, node 3) whose shared log spans several
/// 1 MiB segments: groups 7 and 9 with 400 entries of 2 KiB each (batches
/// of 10), group 7 with a high watermark of 100 and a snapshot there
/// (metadata `voters`, state `state-bytes`); closed cleanly.
fn rich_node_dir() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("node");
    formatted(&dir, 3);
    let node = open_node(&dir);
    for g in [7, 9] {
        node.create_group(g, Offset(0)).unwrap();
    }
    let (a, b) = (node.group(7).unwrap(), node.group(9).unwrap());
    for i in 0..40u64 {
        for (g, name) in [(&a, "seven"), (&b, "nine")] {
            let records: Vec<Vec<u8>> = (0..10u64)
                .map(|j| {
                    format!("{name}-{}-", i * 10 + j)
                        .into_bytes()
                        .into_iter()
                        .chain(std::iter::repeat_n(b'x', 2048))
                        .collect()
                })
                .collect();
            g.append_durable(Offset(i * 10), Epoch(2), &records)
                .unwrap();
        }
    }
    a.set_high_watermark(Offset(100)).unwrap();
    a.wait_durable(Offset(u64::MAX)).unwrap();
    let mut w = a
        .create_snapshot(Offset(100), Epoch(2), b"voters", WriterOptions::default())
        .unwrap();
    w.write(b"state-bytes").unwrap();
    w.freeze().unwrap();
    drop((a, b));
    node.close().unwrap();
    tmp
}

/// Every file under `dir`, with its bytes.
fn tree(dir: &Path) -> std::collections::BTreeMap<std::path::PathBuf, Vec<u8>> {
    tree_of(dir, false)
}

/// Every file under `dir` (the lock file too, with `all`), with its bytes.
fn tree_of(dir: &Path, all: bool) -> std::collections::BTreeMap<std::path::PathBuf, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().unwrap() != "lock" || all {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// Flips one byte of `path` at `at`; returns the file as it was.
fn flip(path: &Path, at: usize) -> Vec<u8> {
    let before = std::fs::read(path).unwrap();
    let mut bytes = before.clone();
    bytes[at] ^= 0x5a;
    std::fs::write(path, &bytes).unwrap();
    before
}

fn the_snapshot(tmp: &Path) -> std::path::PathBuf {
    let d = tmp.join("node/snapshots/00000000000000000007");
    std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "snapshot"))
        .unwrap()
}

fn json_lines(o: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn segment(tmp: &Path) -> std::path::PathBuf {
    tmp.join("node/log/00000000000000000000.log")
}

#[test]
fn dump_shows_every_groups_batches_and_records_and_filters_by_group() {
    let tmp = node_dir(5);
    let d = tmp.path().join("node");
    let d = d.to_str().unwrap();
    let before = std::fs::read(segment(tmp.path())).unwrap();

    let o = quorumlog(&["dump", d, "--json"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let lines = json_lines(&o);
    let entries: Vec<_> = lines
        .iter()
        .filter(|v| v["type"] == "batch" && v["kind"] == "Entries")
        .collect();
    assert_eq!(entries.len(), 10, "{}", text(&o));
    for g in [7, 9] {
        let offsets: Vec<u64> = entries
            .iter()
            .filter(|v| v["group"] == g)
            .map(|v| v["group_offset"].as_u64().unwrap())
            .collect();
        assert_eq!(offsets, vec![0, 1, 2, 3, 4], "group {g}");
    }
    assert!(lines
        .iter()
        .any(|v| v["type"] == "batch" && v["kind"] == "Create" && v["group"] == 9));

    let o = quorumlog(&["dump", d, "--group", "9", "--records"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("record 3: 6 bytes: nine-3"), "{t}");
    assert!(!t.contains("seven-"), "another group's records shown: {t}");
    assert!(!t.contains("group 7 "), "{t}");

    // The reading commands change nothing.
    let o = quorumlog(&["verify", d]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert!(text(&o).contains(": 0 problems"), "{}", text(&o));
    assert_eq!(std::fs::read(segment(tmp.path())).unwrap(), before);
}

#[test]
fn a_damaged_batch_is_reported_with_its_place_and_raw_walks_on() {
    let tmp = node_dir(6);
    let d = tmp.path().join("node");
    let d = d.to_str().unwrap();
    let o = quorumlog(&["dump", d, "--json"]);
    let batches: Vec<_> = json_lines(&o)
        .into_iter()
        .filter(|v| v["type"] == "batch")
        .collect();
    // A batch in the middle: later ones verify, so it is damage, not a
    // torn tail.
    let victim = &batches[batches.len() / 2];
    let (pos, offset, group) = (
        victim["position"].as_u64().unwrap(),
        victim["offset"].as_u64().unwrap(),
        victim["group"].as_u64().unwrap(),
    );
    let path = segment(tmp.path());
    let mut bytes = std::fs::read(&path).unwrap();
    let at = usize::try_from(pos).unwrap() + 45;
    bytes[at] ^= 0x5a;
    std::fs::write(&path, &bytes).unwrap();

    let o = quorumlog(&["verify", d]);
    assert_eq!(code(&o), 1, "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains(&format!(
            "00000000000000000000.log at {pos} (offset {offset}, group {group}): checksum mismatch"
        )),
        "{t}"
    );
    assert!(t.contains(": 1 problems"), "{t}");
    // `info` shows the groups as of before the damage, and where it is.
    let o = quorumlog(&["info", d]);
    assert_eq!(code(&o), 1, "{}", text(&o));
    assert!(
        text(&o).contains(&format!(
            "intact to {offset} (damage at {} byte {pos} (offset {offset}",
            path.display()
        )),
        "{}",
        text(&o)
    );

    // Without --raw the dump stops at the damage; with it, it goes on.
    let stop = quorumlog(&["dump", d, "--json"]);
    assert_eq!(code(&stop), 1);
    let raw = quorumlog(&["dump", d, "--json", "--raw"]);
    assert_eq!(code(&raw), 1);
    let count = |o: &Output| {
        json_lines(o)
            .iter()
            .filter(|v| v["type"] == "batch")
            .count()
    };
    assert_eq!(count(&stop), batches.len() / 2);
    assert_eq!(
        count(&raw),
        batches.len() - 1,
        "every batch but the damaged one"
    );
    let problem = json_lines(&raw)
        .into_iter()
        .find(|v| v["type"] == "problem")
        .unwrap();
    assert_eq!(problem["position"].as_u64(), Some(pos));
    assert!(problem["skipped"].as_u64().unwrap() > 0);
}

#[test]
fn a_directory_that_is_not_formatted_is_refused_with_the_way_to_format_it() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().to_str().unwrap();
    for cmd in ["dump", "verify"] {
        let o = quorumlog(&[cmd, d]);
        assert_eq!(code(&o), 2, "{}", text(&o));
        let t = text(&o);
        assert!(t.contains("is empty, not a data directory yet"), "{t}");
        assert!(t.contains(&format!("quorumlog format {d}")), "{t}");
    }
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        0,
        "nothing written"
    );

    // A second format of a formatted directory is refused.
    let node = tmp.path().join("n");
    let n = node.to_str().unwrap();
    assert_eq!(
        code(&quorumlog(&[
            "format",
            n,
            "--cluster-id",
            "1",
            "--node-id",
            "1"
        ])),
        0
    );
    let o = quorumlog(&["format", n, "--cluster-id", "1", "--node-id", "1"]);
    assert_eq!(code(&o), 2);
    assert!(
        text(&o).to_lowercase().contains("formatted"),
        "{}",
        text(&o)
    );
}

#[test]
fn info_and_quorum_state_show_each_group_as_the_directory_holds_it() {
    let tmp = node_dir(5);
    let d = tmp.path().join("node");
    let d = d.to_str().unwrap();
    let o = quorumlog(&["info", d]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("cluster 5, node 3, directory id "), "{t}");
    assert!(t.contains("2 groups, 0 dropped"), "{t}");
    assert!(
        t.contains("group 7: log [0, 5), high watermark 3, epoch 3, leader node 3, voted for none"),
        "{t}"
    );
    assert!(
        t.contains("group 9: log [0, 5), high watermark none, epoch 0, leader none"),
        "{t}"
    );

    let o = quorumlog(&["quorum-state", d, "--group", "7"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "group 7: epoch 3, leader node 3, voted for none"
    );
    // JSON: one object per group, documented fields.
    let o = quorumlog(&["quorum-state", d, "--json"]);
    let v = json_lines(&o);
    assert_eq!(v.len(), 2, "{}", text(&o));
    assert_eq!(
        (
            &v[0]["type"],
            &v[0]["group"],
            &v[0]["epoch"],
            &v[0]["leader"]
        ),
        (
            &serde_json::json!("group"),
            &serde_json::json!(7),
            &serde_json::json!(3),
            &serde_json::json!(3)
        )
    );
    let o = quorumlog(&["info", d, "--json"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let v = json_lines(&o);
    assert_eq!(v[0]["type"], "node");
    assert_eq!(v[0]["intact_to"], 25);
    assert!(v
        .iter()
        .any(|l| l["type"] == "group" && l["log_end"] == 5 && l["group"] == 9));
    assert!(v.iter().any(|l| l["type"] == "segment"));
    assert!(v.iter().any(|l| l["type"] == "disk_use"));
    let o = quorumlog(&["quorum-state", d, "--group", "42"]);
    assert_eq!(code(&o), 2);
    assert!(text(&o).contains("no group 42"), "{}", text(&o));
}

#[test]
fn verify_reads_every_kind_of_file_and_names_the_damage_in_each() {
    let tmp = rich_node_dir();
    let dir = tmp.path().join("node");
    let d = dir.to_str().unwrap();
    let o = quorumlog(&["verify", d]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let t = text(&o);
    assert!(t.contains(" 1 snapshots, "), "{t}");
    assert!(!t.contains(" 1 segments"), "several segments expected: {t}");
    assert!(t.contains(": 0 problems"), "{t}");
    let before = tree(&dir);

    // One damaged file at a time, each named with where and what, and
    // each making verify exit 1 (3 for an index: the open rebuilds it,
    // harmless); the reading command changes nothing.
    let snapshot = the_snapshot(tmp.path());
    let cases: Vec<(std::path::PathBuf, usize, &str, i32)> = vec![
        (snapshot.clone(), 60, "(group 7)", 1),
        (
            dir.join("log/00000000000000000000.index"),
            50,
            "00000000000000000000.index",
            3,
        ),
        (dir.join("groups.ckpt"), 30, "groups.ckpt", 1),
        (dir.join("quorum-state"), 10, "quorum-state", 1),
        (dir.join("meta"), 12, "meta", 1),
    ];
    for (path, at, says, exit) in cases {
        let was = flip(&path, at);
        let o = quorumlog(&["verify", d]);
        let t = text(&o);
        assert_eq!(code(&o), exit, "{}: {t}", path.display());
        let line = t
            .lines()
            .find(|l| l.starts_with("DAMAGED"))
            .unwrap_or_else(|| panic!("no problem named for {}: {t}", path.display()));
        assert!(line.contains(says), "{line}");
        assert!(t.contains(": 1 problems"), "{t}");
        std::fs::write(&path, was).unwrap();
    }
    assert_eq!(tree(&dir), before, "verify changed the directory");
}

#[test]
fn dump_snapshot_describes_a_verified_file_and_refuses_a_damaged_one() {
    let tmp = rich_node_dir();
    let snapshot = the_snapshot(tmp.path());
    let f = snapshot.to_str().unwrap();
    let o = quorumlog(&["dump-snapshot", f, "--chunks"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("(end offset 100, epoch 2), verified"), "{t}");
    assert!(t.contains("11 bytes of state in 1 chunks"), "{t}");
    assert!(
        t.contains(&format!("metadata: 6 bytes {}", "766f74657273")),
        "{t}"
    );
    assert!(t.contains("chunk 0 at "), "{t}");

    let o = quorumlog(&["dump-snapshot", f, "--json"]);
    let v = &json_lines(&o)[0];
    assert_eq!(v["end_offset"], 100);
    assert_eq!(v["data_len"], 11);
    assert_eq!(v["compression"], "none");
    assert_eq!(v["total_len"], std::fs::metadata(&snapshot).unwrap().len());

    flip(&snapshot, 60);
    let o = quorumlog(&["dump-snapshot", f]);
    assert_eq!(code(&o), 1, "{}", text(&o));
    assert!(text(&o).starts_with("DAMAGED"), "{}", text(&o));
    let o = quorumlog(&["dump-snapshot", "/nonexistent/x.snapshot"]);
    assert_eq!(code(&o), 2, "{}", text(&o));
}

#[test]
fn info_shows_snapshots_segments_and_what_pins_them_the_pool_and_disk_use() {
    let tmp = rich_node_dir();
    let dir = tmp.path().join("node");
    let o = quorumlog(&["info", dir.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("last close: clean"), "{t}");
    assert!(
        t.contains("group 7: log [0, 400), high watermark 100"),
        "{t}"
    );
    assert!(t.contains("  snapshots: 100"), "{t}");
    assert!(t.contains("  snapshots: none"), "group 9 has none: {t}");
    assert!(t.contains("segments:"), "{t}");
    assert!(
        t.contains("00000000000000000000.log: offsets [0, ")
            && t.contains("pinned by the oldest live entries of groups 7, 9"),
        "{t}"
    );
    assert!(t.contains("; the active segment"), "{t}");
    assert!(t.contains("recycled pool: "), "{t}");
    let disk = t.lines().find(|l| l.starts_with("disk use: ")).unwrap();
    let total: u64 = tree_of(&dir, true).values().map(|b| b.len() as u64).sum();
    assert!(
        disk.starts_with(&format!("disk use: {total} bytes")),
        "{disk} (files hold {total})"
    );
}

#[test]
fn a_foreign_cluster_id_is_refused_showing_both_ids() {
    let tmp = node_dir(2);
    let d = tmp.path().join("node");
    let d = d.to_str().unwrap();
    for cmd in ["info", "verify", "dump"] {
        let o = quorumlog(&[cmd, d, "--cluster-id", "6"]);
        assert_eq!(code(&o), 2, "{}", text(&o));
        assert!(
            text(&o).contains("belongs to cluster 5, not cluster 6"),
            "{}",
            text(&o)
        );
    }
    assert_eq!(code(&quorumlog(&["info", d, "--cluster-id", "5"])), 0);
}

#[test]
fn repair_shows_what_it_drops_changes_nothing_without_yes_keeps_copies_and_can_be_undone() {
    let tmp = rich_node_dir();
    let dir = tmp.path().join("node");
    let d = dir.to_str().unwrap();
    // Damage a batch in the middle of the first (sealed) segment.
    let o = quorumlog(&["dump", d, "--json"]);
    let first: Vec<_> = json_lines(&o)
        .into_iter()
        .filter(|v| {
            v["type"] == "batch" && v["offset"].as_u64().unwrap() < 200 && v["kind"] == "Entries"
        })
        .collect();
    let victim = &first[first.len() / 2];
    let pos = usize::try_from(victim["position"].as_u64().unwrap()).unwrap();
    let cut_at = victim["offset"].as_u64().unwrap();
    let seg = segment(tmp.path());
    let original = flip(&seg, pos + 100);
    assert_eq!(code(&quorumlog(&["verify", d])), 1);
    let damaged = tree(&dir);

    // Without --yes: the plan, and nothing changed.
    let o = quorumlog(&["repair", d, "--truncate-at-corruption"]);
    assert_eq!(code(&o), 1, "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains(&format!("first corruption: {} at {pos}", seg.display())),
        "{t}"
    );
    assert!(
        t.contains(&format!("the cut: the log ends at offset {cut_at}")),
        "{t}"
    );
    assert!(
        t.contains("  group 7: ") && t.contains("  group 9: "),
        "{t}"
    );
    assert!(t.contains("entries ") && t.contains(" in epochs 2"), "{t}");
    assert!(t.contains("nothing changed"), "{t}");
    assert_eq!(
        tree(&dir),
        damaged,
        "repair without --yes changed the directory"
    );

    // A running node's directory is refused, naming its holder.
    {
        let fs: SharedFs = Arc::new(RealFs::new());
        let side = tmp.path().join("unused");
        let held = quorumlog_checkpoint::DataDir::open(
            fs,
            &dir,
            &quorumlog_checkpoint::OpenOptions::default(),
        )
        .unwrap();
        let o = quorumlog(&[
            "repair",
            d,
            "--truncate-at-corruption",
            "--yes",
            "--side-dir",
            side.to_str().unwrap(),
        ]);
        assert_eq!(code(&o), 2, "{}", text(&o));
        assert!(
            text(&o).contains(&format!(
                "the node is running (pid {}): stop it first; nothing was read, copied or changed",
                std::process::id()
            )),
            "{}",
            text(&o)
        );
        assert!(!side.exists(), "a refused repair copied");
        drop(held);
    }

    // With --yes: copies first, then the cut it printed.
    let before_all = tree_of(&dir, true);
    let side = tmp.path().join("side");
    let yes = |side: &Path| {
        quorumlog(&[
            "repair",
            d,
            "--truncate-at-corruption",
            "--yes",
            "--side-dir",
            side.to_str().unwrap(),
        ])
    };
    let o = yes(&side);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains(&format!("cut: the log now ends at offset {cut_at}")),
        "{t}"
    );
    assert!(
        t.contains("  group 7: its log ended at 400, now at "),
        "{t}"
    );
    assert!(t.contains("the node opens again"), "{t}");
    assert_eq!(
        std::fs::read(side.join("files/log/00000000000000000000.log")).unwrap(),
        damaged[&seg]
    );
    // Invariant: the printed undo restores every byte of the directory
    // (the lock file and every index file included) and removes every file
    // the repair made.
    let undo = t
        .lines()
        .find_map(|l| l.strip_prefix("to undo, with the node stopped and before it runs again: "))
        .unwrap();
    let st = Command::new("sh").arg("-c").arg(undo).status().unwrap();
    assert!(st.success());
    let after_undo = tree_of(&dir, true);
    let differ: Vec<_> = before_all
        .keys()
        .chain(after_undo.keys())
        .filter(|k| before_all.get(*k) != after_undo.get(*k))
        .collect();
    assert!(
        differ.is_empty(),
        "the undo left these files different: {differ:?}"
    );
    let o = quorumlog(&["verify", d]);
    assert_eq!(
        code(&o),
        1,
        "the undo did not restore the damage: {}",
        text(&o)
    );

    // Again, and the node opens and verifies.
    let o = yes(&tmp.path().join("side2"));
    assert_eq!(code(&o), 0, "{}", text(&o));
    let o = quorumlog(&["verify", d]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    {
        let node = open_node(&dir);
        for g in [7, 9] {
            let group = node.group(g).unwrap();
            let (start, end) = (group.extent().start, group.extent().end);
            assert!(end.0 < 400, "group {g} kept entries past the cut");
            let entries = group
                .read_entries(start, end, u64::MAX, Isolation::Uncommitted)
                .unwrap();
            assert_eq!(
                entries.len() as u64,
                end.0 - start.0,
                "group {g}: a prefix, every entry readable"
            );
        }
        // Group 7's snapshot covers [0, 100): its log restarts there.
        assert_eq!(node.group(7).unwrap().extent().start, Offset(100));
        node.close().unwrap();
    }
    drop(original);
}

#[test]
fn recover_quorum_rewrites_a_lost_majoritys_voters_offline_and_says_what_it_overrides() {
    use quorumlog_raft::kraft::voters::{VoterEntry, VoterSet};
    use quorumlog_raft::{kraft::KraftReplica, Voter};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let d = dir.to_str().unwrap();
    formatted(&dir, 1);
    let fs: SharedFs = Arc::new(RealFs::new());
    let expect = Identity::node(ClusterId(5), NodeId(1));
    let me = quorumlog_checkpoint::read_meta(fs.as_ref(), &dir)
        .unwrap()
        .unwrap()
        .directory_id;
    let voter = |n: u64, dir: u128| VoterEntry {
        voter: Voter {
            node_id: NodeId(n),
            directory_id: quorumlog_raft::DirectoryId(dir),
        },
        endpoint: None,
    };
    // A three-voter quorum whose two other voters are lost.
    let epoch = {
        let (r, _) = KraftReplica::open(
            &fs,
            &dir,
            &expect,
            &NodeOptions::with_segment_bytes(1 << 20),
        )
        .unwrap();
        let epoch = {
            let mut e = r.election();
            let epoch = e.become_candidate().unwrap();
            e.become_leader().unwrap();
            epoch
        };
        r.append_voter_set(
            epoch,
            VoterSet::new(vec![voter(1, me.0), voter(2, 22), voter(3, 33)]).unwrap(),
        )
        .unwrap();
        r.append_durable(epoch, &[b"a", b"b"]).unwrap();
        r.close().unwrap();
        epoch
    };
    let mine = format!("1:{:032x}", me.0);

    let o = quorumlog(&["recover-quorum", d, "--voters", "2:16,3:21"]);
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert!(
        text(&o).contains("must include this replica (node 1"),
        "{}",
        text(&o)
    );

    let before = tree(&dir);
    let o = quorumlog(&["recover-quorum", d, "--voters", &mine]);
    assert_eq!(code(&o), 1, "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains(&format!(
            "takes epoch {} as its own leader, without a quorum (now: epoch {}, leader 1)",
            epoch.0 + 1,
            epoch.0
        )),
        "{t}"
    );
    assert!(
        t.contains("entries only the lost replicas held are gone for good"),
        "{t}"
    );
    assert!(t.contains("nothing changed"), "{t}");
    assert_eq!(tree(&dir), before, "the plan changed the directory");

    // A running replica's directory is refused, naming its holder.
    {
        let held = quorumlog_checkpoint::DataDir::open(
            fs.clone(),
            &dir,
            &quorumlog_checkpoint::OpenOptions::default(),
        )
        .unwrap();
        let o = quorumlog(&["recover-quorum", d, "--voters", &mine, "--yes"]);
        assert_eq!(code(&o), 2, "{}", text(&o));
        assert!(
            text(&o).contains(&format!("the node is running (pid {})", std::process::id())),
            "{}",
            text(&o)
        );
        drop(held);
    }
    assert_eq!(tree(&dir), before);

    let o = quorumlog(&["recover-quorum", d, "--voters", &mine, "--yes"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert!(
        text(&o).contains(&format!(
            "rewritten: epoch {} (was {})",
            epoch.0 + 1,
            epoch.0
        )),
        "{}",
        text(&o)
    );
    let (r, _) = KraftReplica::open(
        &fs,
        &dir,
        &expect,
        &NodeOptions::with_segment_bytes(1 << 20),
    )
    .unwrap();
    let voters: Vec<u64> = r
        .control_state(StateAt::Latest)
        .voters
        .unwrap()
        .voters()
        .map(|v| v.node_id.0)
        .collect();
    assert_eq!(voters, vec![1], "the new set is in force");
    let e = r.election();
    assert_eq!(e.epoch().0, epoch.0 + 1);
    assert_eq!(e.leader(), Some(NodeId(1)));
    drop(e);
    r.close().unwrap();
}

openraft10::declare_raft_types!(
    /// openraft's default types with string entries, as an application's.
    pub Tc:
        D = String,
        R = String,
);

type TcEntry = <Tc as openraft10::RaftTypeConfig>::Entry;

fn tc_id(
    term: u64,
    node: u64,
    index: u64,
) -> openraft10::LogId<openraft10::impls::leader_id_adv::LeaderId<u64, u64>> {
    openraft10::LogId::new(
        openraft10::impls::leader_id_adv::LeaderId {
            term,
            node_id: node,
        },
        index,
    )
}

/// A node directory (cluster 5, node 3) whose group 4 holds an openraft
/// group of three voters {1, 2, 3} (membership at 0, `v1`..`v20` by node
/// 2 in term 2, committed to 15, node 2's vote) and whose group 9 holds
/// raw records.
fn openraft_node_dir() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("node");
    formatted(&dir, 3);
    let node = open_node(&dir);
    node.create_group(4, Offset(0)).unwrap();
    node.create_group(9, Offset(0)).unwrap();
    for i in 0..5 {
        node.group(9)
            .unwrap()
            .append_durable(Offset(i), Epoch(1), &[format!("nine-{i}").as_bytes()])
            .unwrap();
    }
    write_openraft_group(Arc::new(node.group(4).unwrap()));
    node.close().unwrap();
    tmp
}

/// Writes the openraft group of [`openraft_node_dir`] into `store`.
fn write_openraft_group(store: Arc<quorumlog_raft::Group>) {
    use openraft10::entry::RaftEntry;
    use openraft10::storage::{IOFlushed, RaftLogStorage};
    use openraft10::type_config::alias::OneshotOf;
    use openraft10::type_config::async_runtime::Oneshot;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut log = quorumlog_openraft10::LogStore::<Tc>::new(store, 3).unwrap();
        let nodes: std::collections::BTreeMap<u64, openraft10::BasicNode> = (1..=3)
            .map(|n| {
                (
                    n,
                    openraft10::BasicNode {
                        addr: format!("h{n}"),
                    },
                )
            })
            .collect();
        let m = openraft10::Membership::new(vec![nodes.keys().copied().collect()], nodes).unwrap();
        let mut entries = vec![TcEntry::new_membership(tc_id(1, 1, 0), m)];
        entries.extend((1..=20).map(|i| TcEntry::new_normal(tc_id(2, 2, i), format!("v{i}"))));
        let (tx, rx) = OneshotOf::<Tc>::channel();
        log.append(entries, IOFlushed::signal(tx)).await.unwrap();
        rx.await.unwrap().unwrap();
        log.save_vote(&openraft10::Vote::new_committed(2, 2))
            .await
            .unwrap();
        log.save_committed(Some(tc_id(2, 2, 15))).await.unwrap();
    });
}

#[test]
fn recover_quorum_rewrites_an_openraft_groups_voters_in_a_nodes_directory() {
    use openraft10::entry::RaftEntry;
    use openraft10::storage::RaftLogReader;
    let tmp = openraft_node_dir();
    let dir = tmp.path().join("node");
    let d = dir.to_str().unwrap();
    let before = tree(&dir);

    // The group must be named, and be there.
    refused(
        &["recover-quorum", d, "--voters", "3=h3"],
        "name one with --group G",
    );
    refused(
        &["recover-quorum", d, "--group", "5", "--voters", "3=h3"],
        "no group 5 on this node (its groups: [4, 9])",
    );
    // A group of raw records is no openraft group: refused before writing.
    refused(
        &[
            "recover-quorum",
            d,
            "--group",
            "9",
            "--voters",
            "3=h3",
            "--yes",
        ],
        "not an openraft 0.10 group",
    );
    // The new voters must hold this replica; `KRaft`-style voters are no
    // openraft voters.
    refused(
        &[
            "recover-quorum",
            d,
            "--group",
            "4",
            "--voters",
            "1=h1,2=h2",
            "--yes",
        ],
        "must include this replica (node 3)",
    );
    refused(
        &[
            "recover-quorum",
            d,
            "--group",
            "4",
            "--voters",
            "3:1",
            "--yes",
        ],
        "an openraft voter is ID=ADDR",
    );
    assert_eq!(tree(&dir), before, "a refusal changed the directory");

    // The plan says what it overrides and changes nothing.
    let o = quorumlog(&["recover-quorum", d, "--group", "4", "--voters", "3=h3"]);
    assert_eq!(code(&o), 1, "{}", text(&o));
    let t = text(&o);
    for want in [
        "group 4: an openraft group",
        "takes term 3 as its own leader, without a quorum (now: vote term 2 for node 2, committed)",
        "the voters in force: {1, 2, 3}, from the log's entry 0",
        "the log ends at index 20; the commit point on file is 15",
        "it appends the voters [3] at index 21",
        "entries only the lost replicas held are gone for good",
        "nothing changed",
    ] {
        assert!(t.contains(want), "missing {want:?} in {t}");
    }
    assert_eq!(tree(&dir), before, "the plan changed the directory");

    // A running node's directory is refused, naming its holder.
    {
        let held = open_node(&dir);
        let o = quorumlog(&[
            "recover-quorum",
            d,
            "--group",
            "4",
            "--voters",
            "3=h3",
            "--yes",
        ]);
        assert_eq!(code(&o), 2, "{}", text(&o));
        assert!(
            text(&o).contains(&format!("the node is running (pid {})", std::process::id())),
            "{}",
            text(&o)
        );
        held.close().unwrap();
    }

    let o = quorumlog(&[
        "recover-quorum",
        d,
        "--group",
        "4",
        "--voters",
        "3=h3",
        "--yes",
    ]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert!(
        text(&o)
            .contains("rewritten: vote term 3 for node 3, committed; the voters {3} at index 21"),
        "{}",
        text(&o)
    );

    // What openraft reads on restart: the vote, the old entries intact,
    // the new membership last; the other group untouched.
    let node = open_node(&dir);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let door = Arc::new(node.group(4).unwrap());
        let mut log = quorumlog_openraft10::LogStore::<Tc>::new(door, 3).unwrap();
        assert_eq!(
            log.read_vote().await.unwrap(),
            Some(openraft10::Vote::new_committed(3, 3))
        );
        let got = log.try_get_log_entries(0..30).await.unwrap();
        assert_eq!(got.len(), 22);
        for (i, e) in got.iter().enumerate().skip(1).take(20) {
            match &e.payload {
                openraft10::EntryPayload::Normal(v) => assert_eq!(v, &format!("v{i}")),
                other => panic!("entry {i}: {other:?}"),
            }
        }
        let last = &got[21];
        assert_eq!(last.log_id(), tc_id(3, 3, 21));
        let m = last.get_membership().unwrap();
        assert_eq!(m.voter_ids().collect::<Vec<_>>(), vec![3]);
    });
    drop(rt);
    let raw = node.group(9).unwrap();
    assert_eq!(raw.extent().end, Offset(5));
    drop(raw);
    node.close().unwrap();
}

/// A one-group directory of the previous layout: recover-quorum refuses
/// it, naming the import, and nothing changes.
#[test]
fn recover_quorum_refuses_a_directory_of_the_previous_layout() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let d = dir.to_str().unwrap();
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testkit/golden/format-2/clean");
    quorumlog_testkit::copy_dir(&golden, &dir);
    let before = tree(&dir);
    refused(
        &["recover-quorum", d, "--group", "4", "--voters", "3=h3"],
        "quorumlog import STORE NODE --group G",
    );
    refused(
        &["recover-quorum", d, "--voters", "1:0601de11", "--yes"],
        "quorumlog import STORE NODE --group G",
    );
    assert_eq!(tree(&dir), before, "a refusal changed the directory");
}

/// A node directory of group 1 with records of `sizes` bytes, each
/// appended and synced alone (so each batch is followed by sync padding to
/// the next page), closed cleanly.
fn padded_node_dir(sizes: &[usize]) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("node");
    formatted(&dir, 3);
    let node = open_node(&dir);
    node.create_group(1, Offset(0)).unwrap();
    let g = node.group(1).unwrap();
    for (i, &n) in sizes.iter().enumerate() {
        g.append_durable(Offset(i as u64), Epoch(1), &[vec![b'r'; n].as_slice()])
            .unwrap();
    }
    drop(g);
    node.close().unwrap();
    tmp
}

/// Issue 41, bug 1. Invariant: sync padding of any length (1 to 39 bytes
/// included, fewer than a batch header) is padding to `verify`, as it is to
/// an open: a directory written by ordinary use is never called damaged.
#[test]
fn verify_reads_sync_padding_a_few_bytes_short_of_a_page_as_padding() {
    let mut short = 0;
    for size in (3990..=4070).step_by(3) {
        let tmp = padded_node_dir(&[size, 10, 10]);
        let dir = tmp.path().join("node");
        let d = dir.to_str().unwrap();
        let batches = json_lines(&quorumlog(&["dump", d, "--json"]));
        let gap = batches
            .iter()
            .filter(|v| v["type"] == "batch")
            .map(|v| {
                let end = v["position"].as_u64().unwrap() + v["bytes"].as_u64().unwrap();
                end.next_multiple_of(4096) - end
            })
            .find(|g| (1..40).contains(g));
        short += usize::from(gap.is_some());
        let o = quorumlog(&["verify", d]);
        assert_eq!(code(&o), 0, "record of {size} bytes: {}", text(&o));
        let node = open_node(&dir);
        let g = node.group(1).unwrap();
        let read = g
            .read_entries(Offset(0), Offset(3), u64::MAX, Isolation::Uncommitted)
            .unwrap();
        assert_eq!(read.len(), 3);
        drop(g);
        node.close().unwrap();
    }
    assert!(
        short > 0,
        "no case put a batch 1 to 39 bytes short of a page"
    );
}

/// Issue 41, bugs 2 and 3. Invariants: a zeroed page where a batch starts
/// on a page boundary is damage when the clean close's index says data
/// follows (`verify` exits 1 naming the file, the offset and the group);
/// `repair` prints that cut and performs exactly it.
#[test]
fn a_zeroed_page_at_a_batch_start_is_named_and_repair_performs_the_cut_it_prints() {
    let tmp = padded_node_dir(&[100; 8]);
    let dir = tmp.path().join("node");
    let d = dir.to_str().unwrap();
    let batches: Vec<_> = json_lines(&quorumlog(&["dump", d, "--json"]))
        .into_iter()
        .filter(|v| v["type"] == "batch" && v["kind"] == "Entries")
        .collect();
    let victim = &batches[5];
    let pos = victim["position"].as_u64().unwrap();
    assert_eq!(pos % 4096, 0, "each synced batch starts a page");
    let offset = victim["offset"].as_u64().unwrap();
    // The last two batches zeroed: nothing valid follows, only the clean
    // close vouches for them.
    let seg = segment(tmp.path());
    let mut bytes = std::fs::read(&seg).unwrap();
    let pos = usize::try_from(pos).unwrap();
    bytes[pos..pos + 3 * 4096].fill(0);
    std::fs::write(&seg, &bytes).unwrap();

    let o = quorumlog(&["verify", d]);
    assert_eq!(code(&o), 1, "{}", text(&o));
    let t = text(&o);
    assert!(t.contains(&format!("DAMAGED {}", seg.display())), "{t}");
    assert!(t.contains(&format!("(offset {offset}")), "{t}");
    assert!(t.contains("says it reaches offset"), "{t}");

    let o = quorumlog(&["repair", d, "--truncate-at-corruption"]);
    assert_eq!(code(&o), 1, "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains(&format!("the cut: the log ends at offset {offset};")),
        "{t}"
    );
    assert!(
        t.contains("  group 1: its log ends at index 5 (was 8)"),
        "{t}"
    );
    let side = tmp.path().join("side");
    let o = quorumlog(&[
        "repair",
        d,
        "--truncate-at-corruption",
        "--yes",
        "--side-dir",
        side.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let node = open_node(&dir);
    assert_eq!(node.group(1).unwrap().extent().end, Offset(5));
    node.close().unwrap();
    assert_eq!(code(&quorumlog(&["verify", d])), 0);
}

/// Issue 41, bug 2 on an intact directory. Invariant: `repair` finds
/// nothing to cut where an open finds nothing, and changes nothing.
#[test]
fn repair_of_an_intact_padded_directory_cuts_nothing() {
    let tmp = padded_node_dir(&[4019, 4019, 10, 4000]);
    let dir = tmp.path().join("node");
    let before = tree_of(&dir, true);
    let o = quorumlog(&[
        "repair",
        dir.to_str().unwrap(),
        "--truncate-at-corruption",
        "--yes",
    ]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert!(text(&o).contains("nothing to repair"), "{}", text(&o));
    assert_eq!(tree_of(&dir, true), before);
}

/// Invariant: a reader that closes the pipe early ends every reading
/// command quietly (no panic, nothing on standard error) with the status a
/// process killed by SIGPIPE reports, 141.
#[test]
fn a_closed_pipe_ends_every_reading_command_quietly() {
    let tmp = rich_node_dir();
    let dir = tmp.path().join("node");
    let d = dir.to_str().unwrap();
    let snap = the_snapshot(tmp.path());
    let s = snap.to_str().unwrap();
    let commands: [&[&str]; 10] = [
        &["dump", d, "--records"],
        &["dump", d, "--json"],
        &["info", d],
        &["info", d, "--json"],
        &["quorum-state", d],
        &["quorum-state", d, "--json"],
        &["verify", d],
        &["verify", d, "--json"],
        &["dump-snapshot", s, "--chunks"],
        &["dump-snapshot", s, "--json"],
    ];
    for args in commands {
        // The reader is gone before the command starts.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let o = Command::new(bin())
            .args(args)
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(141), "{args:?}: {}", text(&o));
        assert!(o.stderr.is_empty(), "{args:?}: {}", text(&o));
    }
}

/// Invariants: `quorum-state` of a node without groups says so; openraft's
/// epochs (`term << 32 | node`) read as term and leader node, and `--raft`
/// names the reading; votes read as a node.
#[test]
fn epochs_and_votes_read_in_the_raft_implementations_terms() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("node");
    formatted(&dir, 3);
    let d = dir.to_str().unwrap();
    let o = quorumlog(&["quorum-state", d]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert!(text(&o).contains("no groups"), "{}", text(&o));

    let node = open_node(&dir);
    node.create_group(1, Offset(0)).unwrap();
    node.create_group(2, Offset(0)).unwrap();
    let voter = quorumlog_raft::Voter {
        node_id: NodeId(1),
        directory_id: quorumlog_raft::DirectoryId(0),
    };
    node.group(1)
        .unwrap()
        .persist_quorum_state(&QuorumState {
            epoch: Epoch((1 << 32) | 1),
            leader: Some(NodeId(1)),
            voted: Some(voter),
        })
        .unwrap();
    node.group(2)
        .unwrap()
        .persist_quorum_state(&QuorumState {
            epoch: Epoch(7),
            leader: None,
            voted: Some(voter),
        })
        .unwrap();
    node.close().unwrap();
    let o = quorumlog(&["quorum-state", d]);
    let t = text(&o);
    assert!(
        t.contains("group 1: term 1 (leader node 1), leader node 1, voted for node 1"),
        "{t}"
    );
    assert!(
        t.contains("group 2: epoch 7, leader none, voted for node 1"),
        "{t}"
    );
    let o = quorumlog(&["quorum-state", d, "--raft", "raft-rs", "--group", "2"]);
    assert!(text(&o).contains("group 2: term 7,"), "{}", text(&o));
    let v = json_lines(&quorumlog(&["quorum-state", d, "--json", "--group", "1"]));
    assert_eq!(
        (
            &v[0]["epoch"],
            &v[0]["term"],
            &v[0]["leader_node"],
            &v[0]["voted_for"]
        ),
        (
            &serde_json::json!(4_294_967_297_u64),
            &serde_json::json!(1),
            &serde_json::json!(1),
            &serde_json::json!(1)
        )
    );
}

/// Invariants: with `--group`, `dump --from/--to` are the group's own
/// indexes; snapshot times are ISO-8601; `verify --json` ends with a
/// summary object.
#[test]
fn dump_ranges_are_group_indexes_and_times_are_iso8601() {
    let tmp = node_dir(6);
    let dir = tmp.path().join("node");
    let d = dir.to_str().unwrap();
    let v = json_lines(&quorumlog(&[
        "dump", d, "--json", "--group", "9", "--from", "2", "--to", "4",
    ]));
    let shown: Vec<u64> = v
        .iter()
        .filter(|l| l["type"] == "batch")
        .map(|l| l["group_offset"].as_u64().unwrap())
        .collect();
    assert_eq!(shown, [2, 3]);

    let tmp = rich_node_dir();
    let snap = the_snapshot(tmp.path());
    let o = quorumlog(&["dump-snapshot", snap.to_str().unwrap()]);
    let t = text(&o);
    let created = t
        .split("created ")
        .nth(1)
        .and_then(|r| r.split(';').next())
        .unwrap();
    assert!(
        created.len() == 24 && created.starts_with("20") && created.ends_with('Z'),
        "{t}"
    );
    let v = json_lines(&quorumlog(&[
        "dump-snapshot",
        snap.to_str().unwrap(),
        "--json",
    ]));
    assert_eq!(v[0]["created"], created);
    let d = tmp.path().join("node");
    let o = quorumlog(&["verify", d.to_str().unwrap(), "--json"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let v = json_lines(&o);
    let last = v.last().unwrap();
    assert_eq!(
        (&last["type"], &last["problems"]),
        (&serde_json::json!("summary"), &serde_json::json!(0))
    );
    assert!(v
        .iter()
        .any(|l| l["type"] == "file" && l["kind"] == "segment"));
}

/// One regression per diagnosis, in the order they are made: a path that
/// is a file; an empty directory (the only one given the `format` hint);
/// another program's directory; a `meta` of another kind (its magic as
/// text); a `meta` of ours beside no node checkpoint and no log records
/// (not called the previous layout). No message names a Rust variant or
/// an `Option`, and nothing is written anywhere.
#[test]
fn each_wrong_directory_is_diagnosed_for_what_it_is() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let no_rust = |t: &str| {
        for leak in ["Some(", "None", "NotFormatted", "WrongLayout", "[1"] {
            assert!(!t.contains(leak), "{leak} in {t}");
        }
    };
    // A file.
    let file = root.join("afile");
    std::fs::write(&file, b"x").unwrap();
    let f = file.to_str().unwrap();
    for cmd in ["info", "verify", "dump"] {
        let o = quorumlog(&[cmd, f]);
        assert_eq!(code(&o), 2);
        assert!(
            text(&o).contains("is a file, not a data directory"),
            "{}",
            text(&o)
        );
        no_rust(&text(&o));
    }
    // An empty directory: the format hint.
    let empty = root.join("empty");
    std::fs::create_dir(&empty).unwrap();
    let o = quorumlog(&["info", empty.to_str().unwrap()]);
    assert!(
        text(&o).contains("is empty") && text(&o).contains("quorumlog format"),
        "{}",
        text(&o)
    );
    // Another program's directory: no hint to format it.
    let other = root.join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("data.db"), b"theirs").unwrap();
    let o = quorumlog(&["info", other.to_str().unwrap()]);
    assert_eq!(code(&o), 2);
    let t = text(&o);
    assert!(
        t.contains("no quorumlog meta file") && !t.contains("quorumlog format"),
        "{t}"
    );
    no_rust(&t);
    // A meta file of another kind: named by its magic, as text.
    std::fs::write(other.join("meta"), b"ELF!0123456789abcdef0123456789").unwrap();
    std::fs::create_dir(other.join("log")).unwrap();
    let o = quorumlog(&["info", other.to_str().unwrap()]);
    let t = text(&o);
    assert!(t.contains("magic \"ELF!\""), "{t}");
    assert!(
        !t.contains("previous format") && !t.contains("I/O error"),
        "{t}"
    );
    no_rust(&t);
    // Our meta, no node checkpoint, an empty log: not the previous layout.
    let half = root.join("half");
    formatted(&half, 3);
    std::fs::remove_file(half.join("groups.ckpt")).unwrap();
    for f in std::fs::read_dir(half.join("log")).unwrap() {
        std::fs::remove_file(f.unwrap().path()).unwrap();
    }
    let o = quorumlog(&["info", half.to_str().unwrap()]);
    let t = text(&o);
    assert_eq!(code(&o), 2, "{t}");
    assert!(
        t.contains("no node checkpoint") && !t.contains("previous format"),
        "{t}"
    );
    no_rust(&t);
    // Refused import: the target node's directory unchanged, byte for byte.
    let node = root.join("node");
    formatted(&node, 3);
    let before = tree_of(&node, true);
    let o = quorumlog(&[
        "import",
        other.to_str().unwrap(),
        node.to_str().unwrap(),
        "--group",
        "1",
    ]);
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert_eq!(
        tree_of(&node, true),
        before,
        "a refused import changed the node"
    );
}

/// Every command beside a node that holds the lock and writes: the
/// reading commands warn that it runs and report no damage (over many
/// runs, while segments fill, roll and are reclaimed), the writing ones
/// refuse at once, naming its pid, and copy nothing.
#[test]
fn every_command_beside_a_running_writing_node() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("node");
    let d = dir.to_str().unwrap();
    formatted(&dir, 3);
    let fs: SharedFs = Arc::new(RealFs::new());
    let expect = Identity::node(ClusterId(5), NodeId(3));
    let options = NodeOptions {
        checkpoint_every_bytes: 256 << 10,
        ..NodeOptions::with_segment_bytes(64 << 10)
    };
    let node = Arc::new(Node::open(&fs, &dir, &expect, &options).unwrap().0);
    for g in [1, 2] {
        node.create_group(g, Offset(0)).unwrap();
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (node, stop) = (Arc::clone(&node), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut next = [0u64; 2];
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let g = usize::try_from(i % 2).unwrap();
                let group = node.group(g as u64 + 1).unwrap();
                let fill = b'a' + u8::try_from(i % 26).unwrap();
                let rec = vec![fill; 1 + usize::try_from(i * 37 % 3000).unwrap()];
                group
                    .append_durable(Offset(next[g]), Epoch(1), &[rec])
                    .unwrap();
                next[g] += 1;
                if next[g] % 50 == 0 {
                    let to = next[g] - 10;
                    group
                        .purge(quorumlog_raft::Purge::To {
                            offset: Offset(to),
                            epoch: Epoch(1),
                        })
                        .unwrap();
                }
                i += 1;
            }
        })
    };
    let pid = std::process::id();
    let running = format!("node running (pid {pid})");
    let mut runs = 0;
    for _ in 0..8 {
        for args in [
            vec!["verify", d],
            vec!["info", d],
            vec!["quorum-state", d],
            vec!["dump", d, "--records"],
        ] {
            let o = quorumlog(&args);
            let t = text(&o);
            assert_eq!(code(&o), 0, "{args:?}: {t}");
            assert!(t.contains(&running), "{args:?}: {t}");
            assert!(!t.contains("DAMAGED"), "{args:?}: {t}");
            runs += 1;
        }
    }
    let side = tmp.path().join("side");
    for args in [
        vec![
            "repair",
            d,
            "--truncate-at-corruption",
            "--yes",
            "--side-dir",
            side.to_str().unwrap(),
        ],
        vec![
            "recover-quorum",
            d,
            "--voters",
            "3:00000000000000000000000000000001",
            "--yes",
        ],
        vec!["import", d, d, "--group", "5"],
    ] {
        let o = quorumlog(&args);
        let t = text(&o);
        assert_eq!(code(&o), 2, "{args:?}: {t}");
        assert!(
            t.contains(&format!("the node is running (pid {pid})")),
            "{args:?}: {t}"
        );
        assert!(!side.exists(), "{args:?} copied");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    Arc::try_unwrap(node).ok().unwrap().close().unwrap();
    eprintln!("{runs} reading runs beside the node");
}

/// dump: an unknown or dropped group and an empty range are refused;
/// only segments holding the range print; `--print-data` shows openraft
/// entries as their kind and data; `format --segment-bytes` makes
/// segments of that size and says what the empty node takes.
#[test]
fn dump_refuses_what_it_cannot_show_and_decodes_what_raft_wrote() {
    let tmp = openraft_node_dir();
    let dir = tmp.path().join("node");
    let d = dir.to_str().unwrap();
    refused(
        &["dump", d, "--group", "77"],
        "no group 77 (its groups: 4, 9)",
    );
    refused(
        &["dump", d, "--from", "9", "--to", "3"],
        "empty range [9, 3)",
    );
    refused(
        &["dump", d, "--from", "3", "--to", "3"],
        "empty range [3, 3)",
    );
    let o = quorumlog(&["dump", d, "--group", "4", "--print-data"]);
    let t = text(&o);
    assert_eq!(code(&o), 0, "{t}");
    assert!(t.contains("openraft membership"), "{t}");
    assert!(t.contains("openraft normal") && t.contains("v20"), "{t}");
    // Only segments holding the range.
    let rich = rich_node_dir();
    let r = rich.path().join("node");
    let all = text(&quorumlog(&["dump", r.to_str().unwrap()]));
    let segments = all.lines().filter(|l| l.starts_with("segment ")).count();
    assert!(segments > 1, "{all}");
    let one = text(&quorumlog(&[
        "dump",
        r.to_str().unwrap(),
        "--from",
        "0",
        "--to",
        "1",
    ]));
    assert_eq!(
        one.lines().filter(|l| l.starts_with("segment ")).count(),
        1,
        "{one}"
    );
    let g = text(&quorumlog(&[
        "dump",
        r.to_str().unwrap(),
        "--group",
        "7",
        "--from",
        "0",
        "--to",
        "10",
    ]));
    assert_eq!(
        g.lines().filter(|l| l.starts_with("segment ")).count(),
        1,
        "{g}"
    );
    // format --segment-bytes.
    let small = tmp.path().join("small");
    let o = quorumlog(&[
        "format",
        small.to_str().unwrap(),
        "--cluster-id",
        "5",
        "--node-id",
        "3",
        "--segment-bytes",
        "65536",
    ]);
    let t = text(&o);
    assert_eq!(code(&o), 0, "{t}");
    assert!(
        t.contains("the empty node takes") && t.contains("segments of 65536 bytes"),
        "{t}"
    );
    let seg = std::fs::read_dir(small.join("log"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "log"))
        .unwrap();
    assert_eq!(std::fs::metadata(seg).unwrap().len(), 65536);
    refused(
        &[
            "format",
            tmp.path().join("tiny").to_str().unwrap(),
            "--cluster-id",
            "5",
            "--node-id",
            "3",
            "--segment-bytes",
            "10",
        ],
        "--segment-bytes 10",
    );
}
