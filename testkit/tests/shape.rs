//! The shape of the libraries, the CLI and the benchmarks (the key-value
//! service keeps its own layers test): no source file over 600 lines, and
//! no import cycle between sibling modules.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "test code: a panic is a failed assertion"
)]

use std::path::{Path, PathBuf};

use quorumlog_testkit::shape::{import_cycles, long_files, named, use_tree};

const CRATES: &[&str] = &[
    "io",
    "checkpoint",
    "log",
    "snapshot",
    "raft-glue",
    "adapters/openraft",
    "adapters/openraft-0.10",
    "adapters/raft-rs",
    "cli",
    "benches",
    "testkit",
    "kv-harness",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Invariant: every source file of these crates is at most 600 lines.
#[test]
fn no_source_file_is_over_600_lines() {
    let long: Vec<String> = CRATES
        .iter()
        .flat_map(|c| long_files(&root().join(c).join("src"), 600))
        .map(|(f, n)| format!("{}: {n} lines", f.display()))
        .collect();
    assert!(
        long.is_empty(),
        "files over 600 lines:\n{}",
        long.join("\n")
    );
}

/// Invariant: no two sibling modules of a library name each other, by
/// any path.
#[test]
fn no_library_has_an_import_cycle() {
    let cycles: Vec<String> = CRATES
        .iter()
        .flat_map(|c| {
            import_cycles(&root().join(c).join("src"))
                .into_iter()
                .map(move |l| format!("{c}: {l}"))
        })
        .collect();
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

/// Invariant: the check finds a cycle where there is one (the service's
/// server modules name each other today), and none in a tree without.
#[test]
fn the_cycle_check_finds_cycles() {
    let kv = import_cycles(&root().join("kv").join("src"));
    assert!(
        kv.iter().any(|l| l.contains("server::host")),
        "the service's known loop not found: {kv:?}"
    );
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::write(src.join("lib.rs"), "mod a;\nmod b;\npub use a::A;\n").unwrap();
    std::fs::write(src.join("a.rs"), "pub struct A;\n").unwrap();
    std::fs::write(src.join("b.rs"), "use crate::A;\n").unwrap();
    assert!(import_cycles(src).is_empty());
    // `a` naming `b` back, through the root's re-export above.
    std::fs::write(src.join("a.rs"), "pub struct A;\nuse super::b::B;\n").unwrap();
    std::fs::write(src.join("b.rs"), "use crate::A;\npub struct B;\n").unwrap();
    assert_eq!(import_cycles(src), vec!["a <-> b".to_string()]);
}

/// Invariant: `use` trees are read whole, and `super::` resolves upward.
#[test]
fn use_trees_are_read_whole() {
    let mut out = Vec::new();
    use_tree("a::{b, c::{d, E}}, x", &[], &mut out);
    let got: Vec<String> = out.iter().map(|p| p.join("::")).collect();
    assert_eq!(got, ["a::b", "a::c::d", "a::c::E"]);
    let me = vec!["node".to_string(), "group".to_string()];
    let got: Vec<String> = named(
        "use super::super::kraft::X;\n// crate::no\nlet _ = crate::log::Y;",
        &me,
    )
    .iter()
    .map(|p| p.join("::"))
    .collect();
    assert_eq!(got, ["log::Y", "kraft::X"]);
}
