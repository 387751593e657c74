//! The checks a data directory's format and open make before they change anything: identity, formattability, the lock, degradable checkpoints, small-file sizes.

#[allow(
    clippy::wildcard_imports,
    reason = "a child module: the parent's private items, as it sees them"
)]
use super::*;
use quorumlog_io::OpenMode;

/// Accepts an empty directory, or one holding only what an interrupted
/// format leaves (its sub-directories, checkpoint files, temps, the lock).
pub(super) fn check_formattable(fs: &dyn FileSystem, dir: &Path) -> Result<()> {
    let not_empty = |entry: String| Error::NotEmpty {
        dir: dir.to_path_buf(),
        entry,
    };
    for entry in fs.list(dir)? {
        let ours = matches!(
            entry.name.as_str(),
            "meta.tmp" | "quorum-state" | "quorum-state.tmp" | LOCK_FILE
        ) || (entry.is_dir
            && matches!(
                entry.name.as_str(),
                CHECKPOINTS_DIR | LOG_DIR | SNAPSHOTS_DIR
            ));
        if !ours {
            return Err(not_empty(entry.name));
        }
        if entry.is_dir && entry.name != CHECKPOINTS_DIR {
            if let Some(inner) = fs.list(&dir.join(&entry.name))?.into_iter().next() {
                return Err(not_empty(format!("{}/{}", entry.name, inner.name)));
            }
        }
        if entry.name == CHECKPOINTS_DIR {
            for inner in fs.list(&dir.join(CHECKPOINTS_DIR))? {
                let base = inner.name.trim_end_matches(TEMP_SUFFIX);
                let known = [
                    RecoveryPoint::NAME,
                    HighWatermark::NAME,
                    LogStartOffset::NAME,
                    EpochMap::NAME,
                ]
                .iter()
                .any(|n| n.strip_prefix("checkpoints/") == Some(base));
                if inner.is_dir || !known {
                    return Err(not_empty(format!("{CHECKPOINTS_DIR}/{}", inner.name)));
                }
            }
        }
    }
    Ok(())
}

pub(super) fn lock(fs: &dyn FileSystem, dir: &Path) -> Result<Box<dyn LockGuard>> {
    let path = dir.join(LOCK_FILE);
    fs.lock(&path).map_err(|e| {
        if e.kind() == io::ErrorKind::WouldBlock {
            Error::Locked {
                dir: dir.to_path_buf(),
                holder: lock_holder(fs, &path),
            }
        } else {
            Error::Io(e)
        }
    })
}

/// The pid a lock holder wrote into the lock file, if it wrote one (the
/// real file system's lock does; it is informative only).
fn lock_holder(fs: &dyn FileSystem, path: &Path) -> Option<u32> {
    let bytes = fs.open(path, OpenMode::Read).ok()?.read_to_end().ok()?;
    std::str::from_utf8(&bytes).ok()?.trim().parse().ok()
}

/// Reads the checkpoint files; a missing or corrupt one degrades (noted in
/// `report`) instead of failing the open.
pub(super) fn read_checkpoints(
    fs: &dyn FileSystem,
    dir: &Path,
    report: &mut OpenReport,
) -> Result<Checkpoints> {
    Ok(Checkpoints {
        recovery_point: read_degradable(fs, dir, "recovery scans the whole log", report)?,
        high_watermark: read_degradable(
            fs,
            dir,
            "high watermark unknown until the Raft layer supplies it",
            report,
        )?,
        log_start_offset: read_degradable(
            fs,
            dir,
            "log start offset rebuilt from the segments",
            report,
        )?,
        epoch_map: read_degradable(fs, dir, "epoch map rebuilt from the segments", report)?,
    })
}

/// Reads a degradable checkpoint: a missing or corrupt file is reported and
/// replaced by `None`, never trusted.
pub(super) fn read_degradable<F: SmallFile>(
    fs: &dyn FileSystem,
    dir: &Path,
    consequence: &'static str,
    report: &mut OpenReport,
) -> Result<Option<F>> {
    let file = small_file::path_of::<F>(dir);
    let problem = match small_file::read::<F>(fs, dir) {
        Ok(Some(v)) => return Ok(Some(v)),
        Ok(None) => CorruptionKind::Missing,
        Err(Error::Corruption { kind, .. }) => kind,
        Err(e) => return Err(e),
    };
    report.degraded.push(Degraded {
        file,
        problem,
        consequence,
    });
    Ok(None)
}

pub(super) fn check_identity(dir: &Path, meta: &Meta, options: &OpenOptions) -> Result<()> {
    if let Some(expected) = options.expected_cluster_id {
        if expected != meta.cluster_id {
            return Err(Error::IdentityMismatch {
                dir: dir.to_path_buf(),
                field: "cluster id",
                expected: expected.to_string(),
                found: meta.cluster_id.to_string(),
            });
        }
    }
    if let Some(expected) = options.expected_node_id {
        if expected != meta.node_id {
            return Err(Error::IdentityMismatch {
                dir: dir.to_path_buf(),
                field: "node id",
                expected: expected.to_string(),
                found: meta.node_id.to_string(),
            });
        }
    }
    if let Some(expected) = options.expected_directory_id {
        if expected != meta.directory_id {
            return Err(Error::IdentityMismatch {
                dir: dir.to_path_buf(),
                field: "directory id",
                expected: expected.to_string(),
                found: meta.directory_id.to_string(),
            });
        }
    }
    Ok(())
}

/// Refuses a small file's body above 1 MiB (before anything is written).
pub(super) fn check_small_body(what: &'static str, bytes: &[u8]) -> Result<()> {
    if bytes.len() > crate::format::MAX_BODY_BYTES {
        return Err(Error::TooLarge {
            what,
            bytes: bytes.len(),
            max: crate::format::MAX_BODY_BYTES,
        });
    }
    Ok(())
}
