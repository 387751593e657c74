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
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use quorumlog_io::RealFs;
use quorumlog_raft::{
    ClusterId, Epoch, Identity, Node, NodeId, NodeOptions, Offset, QuorumState, SharedFs,
};

fn quorumlog(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_quorumlog"))
        .args(args)
        .output()
        .unwrap()
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

/// A node directory formatted by the binary, with groups 7 and 9 holding
/// `n` entries each (one batch per entry, alternating), closed cleanly.
fn node_dir(n: u64) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("node");
    let d = dir.to_str().unwrap();
    let o = quorumlog(&["format", d, "--cluster-id", "5", "--node-id", "3"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert!(text(&o).contains("cluster 5, node 3"), "{}", text(&o));
    let fs: SharedFs = Arc::new(RealFs::new());
    let expect = Identity::node(ClusterId(5), NodeId(3));
    let options = NodeOptions::default();
    let (node, _) = Node::open(&fs, &dir, &expect, &options).unwrap();
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
    a.persist_high_watermark().unwrap();
    drop((a, b));
    node.close().unwrap();
    tmp
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
    let (pos, offset) = (
        victim["position"].as_u64().unwrap(),
        victim["offset"].as_u64().unwrap(),
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
            "00000000000000000000.log at {pos} (offset {offset}): checksum mismatch"
        )),
        "{t}"
    );
    assert!(t.contains(": 1 problems"), "{t}");
    // `info` shows the groups as of before the damage, and says so.
    let o = quorumlog(&["info", d]);
    assert_eq!(code(&o), 1, "{}", text(&o));
    assert!(
        text(&o).contains("(damage after: run `quorumlog verify`)"),
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
        assert!(t.contains("NotFormatted"), "{t}");
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
        t.contains("group 7: log [0, 5), high watermark 3, epoch 3, leader 3, voted none"),
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
        "group 7: epoch 3, leader 3, voted none"
    );
    let o = quorumlog(&["quorum-state", d, "--group", "42"]);
    assert_eq!(code(&o), 2);
    assert!(text(&o).contains("no group 42"), "{}", text(&o));
}
