//! Bad input: every small file, truncated, bit-flipped, of the wrong kind, of
//! a future version, or garbage, gives a typed error naming the file. The
//! quorum state fails open (it never defaults to epoch 0); the checkpoints
//! degrade to "unknown" and are reported, never trusted.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use std::path::Path;

use common::{both, overwrite, read_all};
/// The small-file format version (docs/format.md).
const VERSION: u16 = 1;

use quorumlog_checkpoint::{
    format, ClusterId, CorruptionKind, DataDir, Error, Location, NodeId, OpenOptions, SharedFs,
};

const CHECKPOINT_FILES: [&str; 4] = [
    "checkpoints/recovery-point",
    "checkpoints/high-watermark",
    "checkpoints/log-start-offset",
    "checkpoints/epoch-map",
];

/// The damaged variants of a valid file, each with the kind of corruption
/// it must be reported as.
type Case = (&'static str, Vec<u8>, fn(&CorruptionKind) -> bool);

fn damaged(valid: &[u8]) -> Vec<Case> {
    let mut flipped = valid.to_vec();
    let last = flipped.len() - 5;
    flipped[last] ^= 0x10;
    let mut wrong_magic = valid.to_vec();
    wrong_magic[..4].copy_from_slice(b"ZZZZ");
    let mut future = valid.to_vec();
    future[4..6].copy_from_slice(&(VERSION + 1).to_le_bytes());
    let n = future.len();
    let crc = crc32c::crc32c(&future[..n - 4]);
    future[n - 4..].copy_from_slice(&crc.to_le_bytes());
    vec![
        ("truncated", valid[..valid.len() / 2].to_vec(), |k| {
            matches!(k, CorruptionKind::Truncated { .. })
        }),
        ("empty", Vec::new(), |k| {
            matches!(k, CorruptionKind::Truncated { .. })
        }),
        ("bit-flipped", flipped, |k| {
            matches!(k, CorruptionKind::ChecksumMismatch { .. })
        }),
        ("wrong magic", wrong_magic, |k| {
            matches!(k, CorruptionKind::BadMagic { .. })
        }),
        ("future version", future, |k| {
            matches!(k, CorruptionKind::UnsupportedVersion { .. })
        }),
        ("garbage", vec![0xA5; 300], |k| {
            matches!(k, CorruptionKind::BadMagic { .. })
        }),
    ]
}

fn fresh(fs: &SharedFs, dir: &Path) {
    if !fs.exists(&dir.join("meta")).unwrap() {
        format(fs, dir, ClusterId(1), NodeId(1)).unwrap();
    }
}

#[test]
fn unreadable_quorum_state_fails_open_naming_the_file() {
    both(|fs, dir| {
        fresh(&fs, dir);
        let path = dir.join("quorum-state");
        let valid = read_all(fs.as_ref(), &path);
        for (what, bytes, expected) in damaged(&valid) {
            overwrite(fs.as_ref(), &path, &bytes);
            match DataDir::open(fs.clone(), dir, &OpenOptions::default()) {
                Err(Error::Corruption { at, kind }) => {
                    assert_eq!(at, Location::file(&path), "{what}");
                    assert!(expected(&kind), "{what}: {kind}");
                }
                other => panic!("{what}: open must fail, got {other:?}"),
            }
        }
        fs.remove_file(&path).unwrap();
        let e = DataDir::open(fs.clone(), dir, &OpenOptions::default()).unwrap_err();
        assert!(
            matches!(&e, Error::Corruption { kind: CorruptionKind::Missing, at } if *at == Location::file(&path)),
            "{e}"
        );
        overwrite(fs.as_ref(), &path, &valid);
        DataDir::open(fs.clone(), dir, &OpenOptions::default()).unwrap();
    });
}

#[test]
fn damaged_checkpoints_degrade_and_are_reported() {
    both(|fs, dir| {
        fresh(&fs, dir);
        for name in CHECKPOINT_FILES {
            let path = dir.join(name);
            let valid = read_all(fs.as_ref(), &path);
            let mut cases = damaged(&valid);
            cases.push(("missing", Vec::new(), |k| *k == CorruptionKind::Missing));
            for (what, bytes, expected) in cases {
                if what == "missing" {
                    fs.remove_file(&path).unwrap();
                } else {
                    overwrite(fs.as_ref(), &path, &bytes);
                }
                let dd = DataDir::open(fs.clone(), dir, &OpenOptions::default()).unwrap();
                let report = dd.report();
                assert_eq!(report.degraded.len(), 1, "{name} {what}");
                let d = &report.degraded[0];
                assert_eq!(d.file, path);
                assert!(expected(&d.problem), "{name} {what}: {}", d.problem);
                let cp = dd.checkpoints();
                let untrusted = match name {
                    "checkpoints/recovery-point" => cp.recovery_point.is_none(),
                    "checkpoints/high-watermark" => cp.high_watermark.is_none(),
                    "checkpoints/log-start-offset" => cp.log_start_offset.is_none(),
                    _ => cp.epoch_map.is_none(),
                };
                assert!(
                    untrusted,
                    "{name} {what}: a damaged checkpoint must not be trusted"
                );
                drop(dd);
                overwrite(fs.as_ref(), &path, &valid);
            }
        }
    });
}

#[test]
fn a_file_of_another_kind_in_place_is_detected() {
    both(|fs, dir| {
        fresh(&fs, dir);
        let hw = read_all(fs.as_ref(), &dir.join("checkpoints/high-watermark"));
        overwrite(fs.as_ref(), &dir.join("checkpoints/log-start-offset"), &hw);
        let dd = DataDir::open(fs.clone(), dir, &OpenOptions::default()).unwrap();
        assert!(matches!(
            dd.report().degraded[0].problem,
            CorruptionKind::BadMagic { .. }
        ));
    });
}

#[test]
fn stale_temps_are_removed_at_open() {
    both(|fs, dir| {
        fresh(&fs, dir);
        overwrite(fs.as_ref(), &dir.join("quorum-state.tmp"), b"half");
        overwrite(fs.as_ref(), &dir.join("checkpoints/epoch-map.tmp"), b"half");
        let dd = DataDir::open(fs.clone(), dir, &OpenOptions::default()).unwrap();
        assert_eq!(dd.report().stale_temps_removed.len(), 2);
        assert!(!fs.exists(&dir.join("quorum-state.tmp")).unwrap());
        assert!(!fs.exists(&dir.join("checkpoints/epoch-map.tmp")).unwrap());
    });
}
