//! A node crashed on a full disk opens on that still-full disk (issue 38).
//!
//! Invariants protected:
//! - the open of a node stopped uncleanly succeeds on a full disk: the
//!   recovery checkpoint it would write waits (the next open scans the same
//!   tail again: recovery is idempotent), every acknowledged entry is
//!   readable, and no temporary file is left behind;
//! - an `ENOSPC` at any single file operation of that open that takes
//!   space (every create, write, length change, allocation, rename) is
//!   survived the same way (a sync's `ENOSPC`, thin provisioning's "the
//!   data never reached the disk", is a device failure and poisons:
//!   invariant 6);
//! - on the still-full disk a write is refused with a typed error that
//!   says how much space it waits for, nothing is written and nothing is
//!   poisoned; once space is freed the same write is taken, and a reopen
//!   finds everything.
//!
//! (Before: the open failed writing `checkpoints/epoch-map.tmp` and left
//! it behind, 0 bytes; the node could not open until space was freed.)
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use std::path::Path;
use std::sync::Arc;

use quorumlog_checkpoint::{ClusterId, DirectoryId, Epoch, Meta, NodeId, Offset, SharedFs};
use quorumlog_io::{CrashPlan, FaultKind, FaultOp, SimFs};
use quorumlog_raft::{Error, Identity, Isolation, Node, NodeOpenReport, NodeOptions};
use quorumlog_testkit::{dir_image, AppendDurable};

const DIR: &str = "/node";
const ENTRIES: u64 = 300;

fn meta() -> Meta {
    Meta::new(ClusterId(1), NodeId(1), DirectoryId(2))
}

fn options() -> NodeOptions {
    NodeOptions {
        background: false,
        ..NodeOptions::with_segment_bytes(64 << 10)
    }
}

fn entry(group: u64, i: u64) -> Vec<u8> {
    format!("group {group} entry {i} ").repeat(8).into_bytes()
}

/// A node with two groups, `ENTRIES` acknowledged entries each (several
/// segments), stopped without a close: the disk as the power cut left it.
fn crashed(seed: u64) -> SimFs {
    let disk = SimFs::new(seed);
    let fs: SharedFs = Arc::new(disk.clone());
    Node::format(&fs, Path::new(DIR), meta(), &options()).unwrap();
    let (node, _) = Node::open(&fs, Path::new(DIR), &Identity::of(&meta()), &options()).unwrap();
    for g in [1, 2] {
        node.create_group(g, Offset(1)).unwrap();
        let group = node.group(g).unwrap();
        for i in 1..=ENTRIES {
            group
                .append_durable(Offset(i), Epoch(1), &[entry(g, i)])
                .unwrap();
        }
        group.set_high_watermark(Offset(ENTRIES)).unwrap();
    }
    disk.crash_after(0);
    drop(node);
    disk.crash_with(CrashPlan::LoseUnsynced)
}

fn open(disk: &SimFs) -> Result<(Node, NodeOpenReport), Error> {
    let fs: SharedFs = Arc::new(disk.clone());
    Node::open(&fs, Path::new(DIR), &Identity::of(&meta()), &options())
}

/// Every acknowledged entry of both groups reads back, and `extra` more
/// of group 1.
fn check_entries(node: &Node, extra: u64) {
    for g in [1, 2] {
        let group = node.group(g).unwrap();
        let end = ENTRIES + 1 + if g == 1 { extra } else { 0 };
        let got = group
            .read_entries(Offset(1), Offset(end), u64::MAX, Isolation::Uncommitted)
            .unwrap();
        assert_eq!(got.len() as u64, end - 1, "group {g}");
        for e in &got {
            assert_eq!(
                e.bytes,
                entry(g, e.offset.0),
                "group {g} offset {}",
                e.offset.0
            );
        }
    }
}

fn no_temp_files(disk: &SimFs) {
    let image = dir_image(disk, Path::new(DIR)).unwrap();
    let tmp: Vec<_> = image
        .keys()
        .filter(|p| p.extension().is_some_and(|x| x == "tmp"))
        .collect();
    assert!(tmp.is_empty(), "temporary files left behind: {tmp:?}");
}

#[test]
fn a_node_crashed_on_a_full_disk_opens_on_it_and_takes_writes_once_space_is_freed() {
    let disk = crashed(1);
    disk.set_full(true);
    let (node, report) = open(&disk).unwrap();
    assert!(report.log.checkpoint_deferred, "{report:?}");
    check_entries(&node, 0);
    no_temp_files(&disk);

    // Still full: refused, typed, with the space it waits for; nothing
    // written, nothing poisoned.
    let g1 = node.group(1).unwrap();
    let before = g1.extent();
    let at = Offset(ENTRIES + 1);
    let r = g1.append(at, Epoch(1), &[entry(1, at.0)]);
    let Err(Error::Log(quorumlog_log::Error::NoSpace { needed })) = r else {
        panic!("{r:?}");
    };
    assert!(needed >= options().log.segment_size_bytes, "{needed}");
    assert!(r.unwrap_err().to_string().contains("free space"));
    assert_eq!(g1.extent(), before, "nothing written");
    assert!(node.poisoned().is_none());
    no_temp_files(&disk);

    // Space freed: the same write is taken, and everything survives a
    // reopen.
    disk.set_full(false);
    g1.append_durable(at, Epoch(1), &[entry(1, at.0)]).unwrap();
    drop(g1);
    node.close().unwrap();
    let (node, report) = open(&disk).unwrap();
    assert!(report.log.clean, "{report:?}");
    check_entries(&node, 1);
    node.close().unwrap();
}

#[test]
fn an_enospc_at_any_file_operation_of_the_open_is_survived() {
    let ops = [
        FaultOp::Create,
        FaultOp::Write,
        FaultOp::SetLen,
        FaultOp::Allocate,
        FaultOp::Rename,
    ];
    let mut fired = 0;
    for op in ops {
        for nth in 1..=12 {
            let disk = crashed(10 + nth);
            disk.inject_fault(op, nth, FaultKind::Enospc);
            let r = open(&disk);
            let (node, report) = r.unwrap_or_else(|e| panic!("{op:?} #{nth}: {e}"));
            fired += u64::from(report.log.checkpoint_deferred);
            check_entries(&node, 0);
            no_temp_files(&disk);
            // Dropped, not closed: a fault the open did not reach would
            // fire in the close instead.
            drop(node);
        }
    }
    assert!(
        fired > 0,
        "no injected ENOSPC reached the open's checkpoint"
    );
}

/// The same on a real file system: a small tmpfs filled to the last byte
/// while the node is stopped uncleanly. It needs to mount one (root, and a
/// kernel that allows it); where it cannot, it says so and checks nothing.
#[test]
fn a_node_crashed_on_a_full_tmpfs_opens_on_it() {
    let Some(mount) = Tmpfs::mount(16 << 20) else {
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    };
    let dir = mount.path().join("node");
    let fs: SharedFs = Arc::new(quorumlog_raft::RealFs::new());
    let options = NodeOptions {
        background: false,
        ..NodeOptions::with_segment_bytes(1 << 20)
    };
    fs.create_dir_all(&dir).unwrap();
    Node::format(&fs, &dir, meta(), &options).unwrap();
    let open = || Node::open(&fs, &dir, &Identity::of(&meta()), &options);
    {
        let (node, _) = open().unwrap();
        node.create_group(1, Offset(1)).unwrap();
        let g = node.group(1).unwrap();
        for i in 1..=ENTRIES {
            g.append_durable(Offset(i), Epoch(1), &[entry(1, i)])
                .unwrap();
        }
        // Stopped without a close: no clean marker, no checkpoint.
    }
    let filler = mount.path().join("filler");
    fill(&filler);
    let (node, report) = open().unwrap();
    assert!(report.log.checkpoint_deferred, "{report:?}");
    let g = node.group(1).unwrap();
    let got = g
        .read_entries(
            Offset(1),
            Offset(ENTRIES + 1),
            u64::MAX,
            Isolation::Uncommitted,
        )
        .unwrap();
    assert_eq!(got.len() as u64, ENTRIES);
    let temps: Vec<_> = walk(&dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|x| x == "tmp"))
        .collect();
    assert!(temps.is_empty(), "{temps:?}");
    let at = Offset(ENTRIES + 1);
    let r = g.append(at, Epoch(1), &[entry(1, at.0)]);
    assert!(
        matches!(r, Err(Error::Log(quorumlog_log::Error::NoSpace { .. }))),
        "{r:?}"
    );
    assert!(node.poisoned().is_none());
    std::fs::remove_file(&filler).unwrap();
    g.append_durable(at, Epoch(1), &[entry(1, at.0)]).unwrap();
    drop(g);
    node.close().unwrap();
    let (node, _) = open().unwrap();
    let got = node
        .group(1)
        .unwrap()
        .read_entries(
            Offset(1),
            Offset(ENTRIES + 2),
            u64::MAX,
            Isolation::Uncommitted,
        )
        .unwrap();
    assert_eq!(got.len() as u64, ENTRIES + 1);
    node.close().unwrap();
}

/// Fills the file system of `path` to the last byte, with that file.
fn fill(path: &Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).unwrap();
    let block = vec![7u8; 4096];
    while f.write_all(&block).is_ok() {}
    while f.write_all(&[7u8]).is_ok() {}
    let _ = f.sync_all();
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// A tmpfs mounted on a temporary directory, unmounted when dropped.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount(bytes: u64) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().ok()?;
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Tmpfs(dir))
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.0.path())
            .status();
    }
}
