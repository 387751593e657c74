//! `quorumlog import`: a one-group store's directory (the previous layout)
//! brought over into a new group of a node's directory, on the golden
//! store directories of format 2 (closed cleanly, and crashed with
//! appends in flight). Invariants: the group holds exactly what the store
//! held (entries, log start, election state, high watermark, snapshot);
//! `Node::open` on a store's directory is refused naming this command and
//! changes nothing.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use quorumlog_checkpoint::read_meta;
use quorumlog_io::RealFs;
use quorumlog_raft::{Error, Identity, Isolation, Node, NodeOptions, Offset, SharedFs};

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

fn golden(which: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testkit/golden/format-2")
        .join(which)
}

fn identity(fs: &SharedFs, dir: &Path) -> Identity {
    Identity::of(&read_meta(fs.as_ref(), dir).unwrap().unwrap())
}

fn tree(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                todo.push(e.path());
            } else if e.file_name() != "lock" {
                // The lock file (its holder's pid) is made by every open
                // that gets as far as taking the lock: not data.
                out.push((e.path(), std::fs::read(e.path()).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// `Node::open` on store directory `dir` is refused naming the import,
/// and changes nothing.
fn refused_unchanged(fs: &SharedFs, dir: &Path, which: &str) {
    // The node refuses the store's directory, naming the import, and
    // changes nothing.
    let before = tree(dir);
    let r = Node::open(fs, dir, &identity(fs, dir), &NodeOptions::default()).map(|_| ());
    let Err(e @ Error::WrongLayout { .. }) = r else {
        panic!("{which}: {r:?}");
    };
    assert!(e.to_string().contains("quorumlog import"), "{e}");
    let after = tree(dir);
    let names = |t: &[(PathBuf, Vec<u8>)]| t.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>();
    assert_eq!(names(&before), names(&after), "{which}");
    for ((p, a), (_, b)) in before.iter().zip(&after) {
        assert!(a == b, "{which}: a refused open changed {}", p.display());
    }
}

/// Group `g` holds what the golden workload wrote (the testkit's golden
/// test checks every byte of it; here, that the command moved it all).
fn holds_the_golden_workload(g: &quorumlog_raft::Group, which: &str) {
    let x = g.extent();
    assert_eq!(x.start, Offset(0), "{which}");
    assert!((500..=520).contains(&x.end.0), "{which}: end {}", x.end.0);
    let got = g
        .read_entries(Offset(0), x.end, u64::MAX, Isolation::Uncommitted)
        .unwrap();
    assert_eq!(got.len() as u64, x.end.0, "{which}");
    assert!(got
        .iter()
        .all(|e| e.epoch.0 == if e.offset.0 < 280 { 1 } else { 2 }));
    assert_eq!(x.high_watermark, Some(Offset(450)), "{which}");
    assert_eq!(g.quorum_state().epoch.0, 2, "{which}");
    let id = x.latest_snapshot.unwrap();
    assert_eq!((id.end_offset.0, id.epoch.0), (200, 1), "{which}");
    assert_eq!(
        g.app_metadata().as_deref(),
        Some(&b"golden app metadata"[..])
    );
}

#[test]
fn a_golden_store_is_imported_into_a_group_and_a_node_open_refuses_it_naming_import() {
    let fs: SharedFs = Arc::new(RealFs::new());
    for which in ["clean", "crashed"] {
        let tmp = tempfile::tempdir().unwrap();
        let (store_dir, node_dir) = (tmp.path().join("store"), tmp.path().join("node"));
        copy_dir(&golden(which), &store_dir);

        refused_unchanged(&fs, &store_dir, which);
        let bin = env!("CARGO_BIN_EXE_quorumlog");
        let o = Command::new(bin)
            .args([
                "format",
                node_dir.to_str().unwrap(),
                "--cluster-id",
                "9",
                "--node-id",
                "1",
            ])
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
        let o = Command::new(bin)
            .args([
                "import",
                store_dir.to_str().unwrap(),
                node_dir.to_str().unwrap(),
                "--group",
                "4",
            ])
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{which}: {o:?}");
        assert!(said.contains("as group 4"), "{said}");

        let (node, _) = Node::open(
            &fs,
            &node_dir,
            &identity(&fs, &node_dir),
            &NodeOptions::default(),
        )
        .unwrap();
        let g = node.group(4).unwrap();
        holds_the_golden_workload(&g, which);
        drop(g);
        node.close().unwrap();
    }
}
