//! Every openraft 0.10 `Config` this repository builds (examples, tests,
//! the service, the guide) goes through `quorumlog_openraft10::raft_config`,
//! so none can leave leader restoration on; and no file turns it on.
//! Invariant: a program copied from this repository is safe to run.

use std::path::{Path, PathBuf};

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if p.is_dir() {
            if name != "target" && !name.starts_with('.') {
                files(&p, out);
            }
        } else if p.extension().is_some_and(|e| e == "rs" || e == "md") {
            out.push(p);
        }
    }
}

#[test]
fn every_openraft_config_is_built_by_raft_config() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut all = Vec::new();
    files(&root, &mut all);
    let this = Path::new(file!()).file_name().unwrap();
    let mut checked = 0;
    for p in all {
        if p.ends_with("src/config.rs") || p.file_name() == Some(this) {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(
            !text.contains("enable_leader_restore: Some(true)"),
            "{} turns leader restoration on",
            p.display()
        );
        let builds = text.contains("Config {")
            || text.contains("Config::default()")
            || text.contains("openraft::Raft::new");
        if text.contains("openraft10") && builds {
            assert!(
                text.contains("raft_config("),
                "{} builds an openraft 0.10 Config without quorumlog_openraft10::raft_config",
                p.display()
            );
            checked += 1;
        }
    }
    assert!(
        checked >= 8,
        "only {checked} files build a Config: is the scan looking?"
    );
}
