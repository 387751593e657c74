//! The shape of a crate's sources, read from the files: how long each is
//! and which modules name which. A module may name its ancestors and its
//! descendants; between two sibling modules (children of one parent) the
//! names must not go both ways, directly or around a longer loop (an
//! import cycle). Names are read from every `crate::`, `super::` and
//! `self::` path outside comments, `use` trees whole, and a name the
//! crate root re-exports (`pub use a::b::{X, Y}` in `lib.rs`) counts as
//! naming the module it comes from.

#![allow(
    clippy::indexing_slicing,
    clippy::expect_used,
    clippy::too_many_lines,
    reason = "test machinery over source text: a panic is a failed check"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file below `dir`, sorted.
///
/// # Panics
/// On a directory that cannot be read.
pub fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = e.expect("a directory entry").path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The files below `dir` longer than `max` lines, with their lengths.
///
/// # Panics
/// On a file that cannot be read.
pub fn long_files(dir: &Path, max: usize) -> Vec<(PathBuf, usize)> {
    rust_files(dir)
        .into_iter()
        .filter_map(|f| {
            let n = std::fs::read_to_string(&f)
                .expect("a source file")
                .lines()
                .count();
            (n > max).then_some((f, n))
        })
        .collect()
}

/// The module path of a library source file (`a/b.rs`, `a/b/mod.rs`:
/// `a::b`; `lib.rs`: the root); `None` for the binaries' files.
fn module_of(src: &Path, file: &Path) -> Option<Vec<String>> {
    let rel = file.strip_prefix(src).ok()?.with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.first().is_some_and(|p| p == "bin" || p == "main") {
        return None;
    }
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    Some(parts)
}

/// Every path a `use` tree starting at `text` names (`a::{b, c::d}`:
/// `a::b`, `a::c::d`), each after `prefix`; returns the bytes read.
pub fn use_tree(text: &str, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
    let bytes = text.as_bytes();
    let mut path = prefix.to_vec();
    let mut i = 0;
    loop {
        let start = i;
        while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
            i += 1;
        }
        if i > start {
            path.push(text[start..i].to_string());
        }
        if text[i..].starts_with("::{") {
            i += 3;
            loop {
                while i < bytes.len() && bytes[i].is_ascii_whitespace() {
                    i += 1;
                }
                if i >= bytes.len() {
                    return i;
                }
                if bytes[i] == b'}' {
                    return i + 1;
                }
                i += use_tree(&text[i..], &path, out).max(1);
                while i < bytes.len() && (bytes[i].is_ascii_whitespace() || bytes[i] == b',') {
                    i += 1;
                }
            }
        } else if text[i..].starts_with("::") {
            i += 2;
        } else {
            out.push(path);
            return i;
        }
    }
}

/// The paths module `me`'s source names, absolute from the crate root.
pub fn named(text: &str, me: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let code: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    for (at, _) in code.match_indices("crate::") {
        use_tree(&code[at + "crate::".len()..], &[], &mut out);
    }
    for (at, _) in code.match_indices("self::") {
        use_tree(&code[at + "self::".len()..], me, &mut out);
    }
    for (at, _) in code.match_indices("super::") {
        if code[..at].ends_with("super::") {
            continue;
        }
        let mut up = 1;
        let mut rest = &code[at + "super::".len()..];
        while let Some(r) = rest.strip_prefix("super::") {
            up += 1;
            rest = r;
        }
        let parent = &me[..me.len().saturating_sub(up)];
        use_tree(rest, parent, &mut out);
    }
    out
}

/// The sibling modules that name each other around a loop, one line per
/// loop found (empty: no import cycle). `src` is a library's `src/`.
///
/// # Panics
/// On a file that cannot be read.
pub fn import_cycles(src: &Path) -> Vec<String> {
    let files = rust_files(src);
    let modules: BTreeMap<Vec<String>, PathBuf> = files
        .iter()
        .filter_map(|f| module_of(src, f).map(|m| (m, f.clone())))
        .collect();
    // What the root re-exports, by name: the module it comes from.
    let mut reexported: BTreeMap<String, Vec<String>> = BTreeMap::new();
    if let Ok(lib) = std::fs::read_to_string(src.join("lib.rs")) {
        for (at, _) in lib.match_indices("pub use ") {
            let mut paths = Vec::new();
            use_tree(&lib[at + "pub use ".len()..], &[], &mut paths);
            for p in paths {
                if let Some((name, from)) = p.split_last() {
                    reexported.insert(name.clone(), from.to_vec());
                }
            }
        }
    }
    let resolve = |path: &[String]| -> Vec<String> {
        let mut path = path.to_vec();
        if let Some(first) = path.first() {
            if !modules.contains_key(&vec![first.clone()]) {
                if let Some(from) = reexported.get(first) {
                    path.splice(0..1, from.iter().cloned());
                }
            }
        }
        (0..=path.len())
            .rev()
            .map(|n| path[..n].to_vec())
            .find(|m| modules.contains_key(m))
            .unwrap_or_default()
    };
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (me, file) in &modules {
        let text = std::fs::read_to_string(file).expect("a source file");
        for path in named(&text, me) {
            let to = resolve(&path);
            let common = me.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if common == me.len() || common == to.len() {
                continue; // an ancestor or a descendant
            }
            edges
                .entry(me[..=common].to_vec())
                .or_default()
                .insert(to[..=common].to_vec());
        }
    }
    // A loop: a sibling that reaches itself.
    let mut found = BTreeSet::new();
    for start in edges.keys() {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<Vec<String>> = edges[start].iter().cloned().collect();
        while let Some(m) = stack.pop() {
            if &m == start {
                let mut members: Vec<String> = vec![start.join("::")];
                members.extend(
                    seen.iter()
                        .filter(|s: &&Vec<String>| {
                            edges.get(*s).is_some_and(|n| reaches(&edges, n, start))
                        })
                        .map(|s| s.join("::")),
                );
                members.sort();
                found.insert(members.join(" <-> "));
                break;
            }
            if seen.insert(m.clone()) {
                stack.extend(edges.get(&m).into_iter().flatten().cloned());
            }
        }
    }
    found.into_iter().collect()
}

fn reaches(
    edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
    from: &BTreeSet<Vec<String>>,
    target: &Vec<String>,
) -> bool {
    let mut seen = BTreeSet::new();
    let mut stack: Vec<&Vec<String>> = from.iter().collect();
    while let Some(m) = stack.pop() {
        if m == target {
            return true;
        }
        if seen.insert(m.clone()) {
            stack.extend(edges.get(m).into_iter().flatten());
        }
    }
    false
}
