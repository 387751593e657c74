//! Formatting a data directory, and reading its small files without opening
//! it (the tools' view).

#[allow(
    clippy::wildcard_imports,
    reason = "a child module: the parent's items and imports, as it sees them"
)]
use super::*;

/// Formats `dir` for node `node_id` of cluster `cluster_id`, with a fresh
/// random directory id. See [`format_with`].
///
/// # Errors
/// As [`format_with`].
pub fn format(fs: &SharedFs, dir: &Path, cluster_id: ClusterId, node_id: NodeId) -> Result<Meta> {
    format_with(
        fs,
        dir,
        Meta::new(cluster_id, node_id, DirectoryId::random()),
    )
}

/// Formats `dir` with the identity `meta`: creates the sub-directories, an
/// initial quorum state (epoch 0, no leader, no vote), initial checkpoints,
/// and finally the meta file. Every step is durable before the next. A
/// directory left by a format interrupted by a crash is formatted again.
///
/// # Errors
/// `InvalidIdentity` for a zero directory id (nothing written);
/// `AlreadyFormatted` if `dir` has a valid meta file; `NotEmpty` if it holds
/// anything an interrupted format cannot have left; `Locked` if it is open;
/// `Io` on any I/O failure.
pub fn format_with(fs: &SharedFs, dir: &Path, meta: Meta) -> Result<Meta> {
    // Checked before anything is written: `open` refuses a zero directory
    // id, so `format` must never write one.
    if meta.directory_id.0 == 0 {
        return Err(Error::InvalidIdentity {
            field: "directory id",
            why: "must not be zero",
        });
    }
    if !fs.exists(dir)? {
        fs.create_dir_all(dir)?;
    }
    // The directory's own entry (and its ancestors'), whoever created it:
    // a caller's `create_dir_all` is not durable until each parent is
    // synced, and a format that a power cut undoes whole brings the node
    // back blank, with a new directory id, as if its disk were replaced.
    sync_ancestors(fs.as_ref(), dir)?;
    match small_file::read::<Meta>(fs.as_ref(), dir) {
        Ok(Some(_)) => {
            return Err(Error::AlreadyFormatted {
                dir: dir.to_path_buf(),
            })
        }
        Ok(None) => {}
        // A damaged meta is never overwritten: it may guard real data.
        Err(e) => return Err(e),
    }
    check_formattable(fs.as_ref(), dir)?;
    let _lock = lock(fs.as_ref(), dir)?;
    for sub in [CHECKPOINTS_DIR, LOG_DIR, SNAPSHOTS_DIR] {
        fs.create_dir_all(&dir.join(sub))?;
    }
    fs.sync_dir(dir)?;
    small_file::write(fs.as_ref(), dir, &QuorumState::default())?;
    small_file::write(fs.as_ref(), dir, &RecoveryPoint::default())?;
    small_file::write(fs.as_ref(), dir, &HighWatermark::default())?;
    small_file::write(fs.as_ref(), dir, &LogStartOffset::default())?;
    small_file::write(fs.as_ref(), dir, &EpochMap::new())?;
    small_file::write(fs.as_ref(), dir, &meta)?;
    Ok(meta)
}

/// The identity in `dir`'s meta file, read without opening the directory
/// (no lock, nothing written): for inspectors. `None` when there is no
/// meta file.
///
/// # Errors
/// `Corruption` for a meta file that does not verify; `Io`.
pub fn read_meta(fs: &dyn FileSystem, dir: &Path) -> Result<Option<Meta>> {
    small_file::read::<Meta>(fs, dir)
}

/// One small file of `dir`, read and verified without opening the
/// directory (no lock, nothing written): for inspectors. `None` when the
/// file is absent.
///
/// # Errors
/// `Corruption` for a file that does not verify; `Io`.
pub fn read_small_file<F: SmallFile>(fs: &dyn FileSystem, dir: &Path) -> Result<Option<F>> {
    small_file::read::<F>(fs, dir)
}

/// One small file as [`verify_small_files`] found it.
#[derive(Debug)]
pub struct SmallFileCheck {
    /// The file.
    pub path: PathBuf,
    /// `Ok(true)` present and valid, `Ok(false)` absent, `Err` what is
    /// wrong with it.
    pub result: Result<bool>,
}

/// Reads and verifies every small file a data directory may hold (meta,
/// quorum state, app metadata, voter history and the checkpoints) without
/// opening it: for inspectors. Absence is reported, not judged: which
/// files a directory needs depends on its layout (a node's directory keeps
/// its groups' state in its log).
pub fn verify_small_files(fs: &dyn FileSystem, dir: &Path) -> Vec<SmallFileCheck> {
    fn one<F: SmallFile>(fs: &dyn FileSystem, dir: &Path) -> SmallFileCheck {
        SmallFileCheck {
            path: small_file::path_of::<F>(dir),
            result: small_file::read::<F>(fs, dir).map(|f| f.is_some()),
        }
    }
    vec![
        one::<Meta>(fs, dir),
        one::<QuorumState>(fs, dir),
        one::<AppMetadata>(fs, dir),
        one::<VoterHistoryFile>(fs, dir),
        one::<RecoveryPoint>(fs, dir),
        one::<HighWatermark>(fs, dir),
        one::<LogStartOffset>(fs, dir),
        one::<EpochMap>(fs, dir),
    ]
}

/// Syncs every directory above `dir`, nearest first, so that `dir`'s
/// path survives a power cut.
fn sync_ancestors(fs: &dyn FileSystem, dir: &Path) -> Result<()> {
    let mut at = dir;
    loop {
        let parent = parent_dir(at);
        fs.sync_dir(parent)?;
        if parent == at || parent.parent().is_none() {
            return Ok(());
        }
        at = parent;
    }
}
