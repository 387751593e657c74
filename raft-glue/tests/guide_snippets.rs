//! The embedding guide's code is compiled code: every Rust code block of
//! docs/embedding.md is an excerpt, line for line (indentation aside), of
//! a Rust source file of the repository that CI builds and runs (an
//! example or a test). A snippet edited in the guide alone, or code changed
//! under a snippet, fails here and names the block.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a panic is a failed assertion"
)]

use std::fs;
use std::path::{Path, PathBuf};

/// The repository's root (this crate is one level below it).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Every `.rs` file under `dir`, build output and hidden folders aside.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "target" {
            continue;
        }
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A text's non-blank lines, trimmed.
fn lines(text: &str) -> Vec<&str> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect()
}

/// The Rust code blocks of a markdown text, each with its first line number.
fn rust_blocks(md: &str) -> Vec<(usize, String)> {
    let (mut blocks, mut open) = (Vec::new(), None::<(usize, String)>);
    for (i, line) in md.lines().enumerate() {
        let fence = line.trim_start();
        match &mut open {
            None if fence.starts_with("```rust") => open = Some((i + 1, String::new())),
            Some(_) if fence.starts_with("```") => blocks.push(open.take().unwrap()),
            Some((_, text)) => {
                text.push_str(line);
                text.push('\n');
            }
            None => {}
        }
    }
    assert!(open.is_none(), "an unclosed code block");
    blocks
}

/// Whether `needle` occurs as consecutive lines of `hay`.
fn contains(hay: &[&str], needle: &[&str]) -> bool {
    needle.is_empty() || hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn every_guide_snippet_is_an_excerpt_of_compiled_code() {
    let root = root();
    let mut files = Vec::new();
    sources(&root, &mut files);
    let texts: Vec<(PathBuf, String)> = files
        .into_iter()
        .map(|p| {
            let t = fs::read_to_string(&p).unwrap();
            (p, t)
        })
        .collect();
    let guide = fs::read_to_string(root.join("docs/embedding.md")).unwrap();
    let blocks = rust_blocks(&guide);
    assert!(blocks.len() >= 4, "the guide's snippets were not found");
    for (line, block) in &blocks {
        let want = lines(block);
        let found = texts
            .iter()
            .find(|(_, t)| contains(&lines(t), &want))
            .map(|(p, _)| p.strip_prefix(&root).unwrap().display().to_string());
        assert!(
            found.is_some(),
            "docs/embedding.md:{line}: this snippet is not an excerpt of any source file:\n{block}"
        );
    }
}

#[test]
fn the_excerpt_check_refuses_an_edited_line() {
    let hay = lines("let a = 1;\n    let b = 2;\n\nlet c = 3;\n");
    assert!(contains(&hay, &lines("let b = 2;\nlet c = 3;")));
    assert!(!contains(&hay, &lines("let b = 2;\nlet c = 4;")));
    assert!(!contains(&hay, &lines("let a = 1;\nlet c = 3;")));
}
