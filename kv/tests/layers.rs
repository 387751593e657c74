//! The library's modules form layers, each naming only those below it:
//! `error` and `wire` (the protocol) at the bottom, then `machine`,
//! `net`, `replica`, `server`, and `client` beside the server; the
//! in-process `cluster` (a feature, for tests and benchmarks) on top.
//! Invariant: no module names one above it or beside it, so the module
//! import graph has no cycle. Read from the sources: every `crate::` path
//! (in `use` trees too) and every `super::` path outside comments.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use quorumlog_testkit::shape::named;

/// The top-level modules, bottom first; a module may name those at a
/// lower index only. Modules on one line are beside each other (neither
/// names the other).
const LAYERS: &[&[&str]] = &[
    &["wire"],
    &["error"],
    &["machine"],
    &["net"],
    &["replica"],
    &["server", "client"],
    &["cluster"],
];

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "bin") {
                files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module path of a source file (`a/b.rs` and `a/b/mod.rs`: `a::b`).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

fn layer_of(top: &str) -> Option<(usize, usize)> {
    LAYERS
        .iter()
        .enumerate()
        .find_map(|(i, l)| l.iter().position(|m| *m == top).map(|j| (i, j)))
}

#[test]
fn every_module_names_only_the_layers_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut wrong = Vec::new();
    for file in &all {
        let me = module_of(&src, file);
        let Some(top) = me.first() else {
            continue; // lib.rs: the crate's front door names everything.
        };
        let Some((layer, _)) = layer_of(top) else {
            wrong.push(format!("{}: module {top} is in no layer", file.display()));
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap();
        for path in named(&text, &me) {
            let Some(to) = path.first() else { continue };
            if to == top {
                continue;
            }
            if layer_of(to).is_none() {
                // A module outside the layers is wrong; anything else is
                // an item of the crate root (a re-export).
                if src.join(format!("{to}.rs")).exists() || src.join(to).is_dir() {
                    wrong.push(format!("{}: names {to}, in no layer", file.display()));
                }
                continue;
            }
            edges.entry(top.clone()).or_default().insert(to.clone());
            let (to_layer, _) = layer_of(to).unwrap();
            if to_layer >= layer {
                wrong.push(format!(
                    "{}: {top} names {} (not below it)",
                    file.display(),
                    path.join("::")
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "layering broken:\n{}", wrong.join("\n"));
    // The order above implies no cycle; say what the graph is.
    eprintln!("{edges:?}");
}

/// Invariant: the parser of `use` trees (the one `testkit::shape` reads
/// every crate with) finds every path here (the check above is only as
/// good as it).
#[test]
fn use_trees_are_read_whole() {
    let me = vec!["server".to_string(), "admin".to_string()];
    let got = named(
        "use crate::wire::{a, b::{c, D}};\n// crate::x\nlet _ = super::host::Host; crate::net::Router::new()",
        &me,
    );
    let got: Vec<String> = got.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        got,
        vec![
            "wire::a",
            "wire::b::c",
            "wire::b::D",
            "net::Router::new",
            "server::host::Host"
        ]
    );
}
