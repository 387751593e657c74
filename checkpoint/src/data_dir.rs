//! Formatting and opening a data directory, and the durable writes of its
//! small files.
//!
//! Layout (see `docs/format.md`):
//! ```text
//! <dir>/meta                              identity; written last by format
//! <dir>/lock                              flock'ed while open
//! <dir>/quorum-state                      election state
//! <dir>/checkpoints/{recovery-point, high-watermark, log-start-offset, epoch-map}
//! <dir>/log/                              segments (the log crate)
//! <dir>/snapshots/                        snapshots (the snapshot crate)
//! ```
//!
//! Invariants:
//! - `open` never creates a data directory: no valid `meta`, no open.
//! - `meta` is written last by `format`, so a crash during format leaves a
//!   directory that `open` refuses and `format` completes.
//! - The quorum state in memory is always the durable one: it changes only
//!   after its atomic replace returned `Ok`.
//! - After any failed write the directory is poisoned: every later write
//!   fails with `Poisoned` until it is reopened (docs/design.md invariant 6).

mod checks;
mod files;

pub use files::{
    format, format_with, read_meta, read_small_file, verify_small_files, SmallFileCheck,
};

use checks::{check_formattable, check_identity, check_small_body, lock, read_checkpoints};

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use quorumlog_io::{parent_dir, FileSystem, LockGuard};

use crate::app_metadata::{AppMetadata, VoterHistoryFile};
use crate::epoch_map::EpochMap;
use crate::error::{CorruptionKind, Error, Location, NotFormattedReason, Result};
use crate::meta::Meta;
use crate::points::{HighWatermark, LogStartOffset, RecoveryPoint};
use crate::quorum_state::QuorumState;
use crate::small_file::{self, SmallFile, TEMP_SUFFIX};
use crate::types::{ClusterId, DirectoryId, Epoch, NodeId, Offset};

/// A file system shared by every component of one data directory.
pub type SharedFs = Arc<dyn FileSystem>;

/// The sub-directory holding checkpoint files.
pub const CHECKPOINTS_DIR: &str = "checkpoints";
/// The sub-directory holding log segments.
pub const LOG_DIR: &str = "log";
/// The sub-directory holding snapshots.
pub const SNAPSHOTS_DIR: &str = "snapshots";
/// The lock file.
pub const LOCK_FILE: &str = "lock";

/// What `open` expects of the directory's identity. Default: anything.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenOptions {
    /// Fail with `IdentityMismatch` unless the directory belongs to this
    /// cluster. Default: not checked.
    pub expected_cluster_id: Option<ClusterId>,
    /// Fail with `IdentityMismatch` unless the directory belongs to this
    /// node. Default: not checked.
    pub expected_node_id: Option<NodeId>,
    /// Fail with `IdentityMismatch` unless the directory is this one (the
    /// id minted when it was formatted: a replaced disk has another).
    /// Default: not checked.
    pub expected_directory_id: Option<DirectoryId>,
}

/// The checkpoint values found at open (and kept current by the writes).
/// `None` means the file was missing or corrupt: see [`OpenReport`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Checkpoints {
    /// Where recovery may start scanning. `None`: scan everything.
    pub recovery_point: Option<RecoveryPoint>,
    /// The commit offset. `None`: unknown until the Raft layer supplies it.
    pub high_watermark: Option<HighWatermark>,
    /// The first offset in the log. `None`: rebuild from the segments.
    pub log_start_offset: Option<LogStartOffset>,
    /// Epoch start offsets. `None`: rebuild from the segments.
    pub epoch_map: Option<EpochMap>,
}

/// A checkpoint file that could not be trusted at open, and what was done
/// instead of trusting it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Degraded {
    /// The file.
    pub file: PathBuf,
    /// What was wrong ([`CorruptionKind::Missing`] if absent).
    pub problem: CorruptionKind,
    /// What the engine does instead.
    pub consequence: &'static str,
}

/// What `open` found that was not as a clean close leaves it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// Checkpoint files ignored because missing or corrupt.
    pub degraded: Vec<Degraded>,
    /// Temporary files of interrupted replaces, removed.
    pub stale_temps_removed: Vec<PathBuf>,
}

#[derive(Debug)]
struct State {
    election: QuorumState,
    app_metadata: Option<AppMetadata>,
    voter_history: Option<VoterHistoryFile>,
    checkpoints: Checkpoints,
    poisoned: Option<quorumlog_io::Failure>,
}

/// An open, locked data directory.
#[derive(Debug)]
pub struct DataDir {
    fs: SharedFs,
    dir: PathBuf,
    meta: Meta,
    report: OpenReport,
    state: Mutex<State>,
    /// Whether a log holds this directory (one writer per data directory,
    /// in this process too; the file lock covers other processes).
    log_claimed: Arc<AtomicBool>,
    _lock: Box<dyn LockGuard>,
}

/// The claim a log holds on its data directory while it is open; dropping
/// it releases the directory for the next log.
#[derive(Debug)]
pub struct LogClaim {
    claimed: Arc<AtomicBool>,
}

impl Drop for LogClaim {
    fn drop(&mut self) {
        self.claimed.store(false, Ordering::Release);
    }
}

impl DataDir {
    /// Opens and locks the formatted data directory `dir`, removes temps of
    /// interrupted replaces, and loads the quorum state and checkpoints.
    ///
    /// # Errors
    /// `NotFormatted` if `dir` or its meta file is missing or invalid (never
    /// initialises anything); `IdentityMismatch` if `options` expect another
    /// cluster or node; `Locked` if it is already open; `Corruption` if the
    /// quorum state or a sub-directory is missing or invalid (the quorum
    /// state never defaults to epoch 0); `Io` on I/O failure. Missing or
    /// corrupt checkpoints are not errors: see [`DataDir::report`].
    pub fn open(fs: SharedFs, dir: &Path, options: &OpenOptions) -> Result<DataDir> {
        let not_formatted = |reason| Error::NotFormatted {
            dir: dir.to_path_buf(),
            reason,
        };
        if !fs.exists(dir)? {
            return Err(not_formatted(NotFormattedReason::NoDirectory));
        }
        let meta = match small_file::read::<Meta>(fs.as_ref(), dir) {
            Ok(Some(m)) => m,
            Ok(None) => return Err(not_formatted(NotFormattedReason::NoMeta)),
            Err(Error::Corruption { kind, .. }) => {
                return Err(not_formatted(NotFormattedReason::InvalidMeta(kind)))
            }
            Err(e) => return Err(e),
        };
        check_identity(dir, &meta, options)?;
        let lock = lock(fs.as_ref(), dir)?;
        for sub in [CHECKPOINTS_DIR, LOG_DIR, SNAPSHOTS_DIR] {
            let path = dir.join(sub);
            if !fs.exists(&path)? {
                return Err(Error::Corruption {
                    at: Location::file(path),
                    kind: CorruptionKind::Missing,
                });
            }
        }
        let mut report = OpenReport::default();
        for d in [dir.to_path_buf(), dir.join(CHECKPOINTS_DIR)] {
            for name in small_file::remove_stale_temps(fs.as_ref(), &d)? {
                report.stale_temps_removed.push(d.join(name));
            }
        }
        let quorum_state = small_file::read::<QuorumState>(fs.as_ref(), dir)?.ok_or_else(|| {
            Error::Corruption {
                at: Location::file(small_file::path_of::<QuorumState>(dir)),
                kind: CorruptionKind::Missing,
            }
        })?;
        let checkpoints = read_checkpoints(fs.as_ref(), dir, &mut report)?;
        // Optional, but a damaged one is never taken for absent.
        let app_metadata = small_file::read::<AppMetadata>(fs.as_ref(), dir)?;
        let voter_history = small_file::read::<VoterHistoryFile>(fs.as_ref(), dir)?;
        Ok(DataDir {
            fs,
            dir: dir.to_path_buf(),
            meta,
            report,
            state: Mutex::new(State {
                election: quorum_state,
                app_metadata,
                voter_history,
                checkpoints,
                poisoned: None,
            }),
            log_claimed: Arc::new(AtomicBool::new(false)),
            _lock: lock,
        })
    }

    /// Claims the directory for one log. A second claim while the first is
    /// held fails, so two logs in one process cannot both append to the
    /// same segment files.
    ///
    /// # Errors
    /// `LogAlreadyOpen` while another claim is held.
    pub fn claim_log(&self) -> Result<LogClaim> {
        if self
            .log_claimed
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(Error::LogAlreadyOpen {
                dir: self.dir.clone(),
            });
        }
        Ok(LogClaim {
            claimed: Arc::clone(&self.log_claimed),
        })
    }

    fn lock_state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The directory holding log segments.
    pub fn log_dir(&self) -> PathBuf {
        self.dir.join(LOG_DIR)
    }

    /// The directory holding snapshots.
    pub fn snapshots_dir(&self) -> PathBuf {
        self.dir.join(SNAPSHOTS_DIR)
    }

    /// The file system the directory lives on.
    pub fn fs(&self) -> &SharedFs {
        &self.fs
    }

    /// The directory's identity.
    pub fn meta(&self) -> Meta {
        self.meta
    }

    /// What open found degraded or cleaned up.
    pub fn report(&self) -> &OpenReport {
        &self.report
    }

    /// The durable quorum state.
    pub fn quorum_state(&self) -> QuorumState {
        self.lock_state().election.clone()
    }

    /// The checkpoint values: as found at open, updated by every successful
    /// write since.
    pub fn checkpoints(&self) -> Checkpoints {
        self.lock_state().checkpoints.clone()
    }

    /// Whether an earlier write failed.
    pub fn is_poisoned(&self) -> bool {
        self.lock_state().poisoned.is_some()
    }

    /// The failure that poisoned the directory, if one did.
    pub fn poisoned(&self) -> Option<quorumlog_io::Failure> {
        self.lock_state().poisoned
    }

    /// Poisons the directory with `failure` (a component sharing it failed:
    /// the log, a snapshot), unless it is poisoned already; every later
    /// write is refused. Returns the failure it is poisoned with.
    pub fn poison(&self, failure: quorumlog_io::Failure) -> quorumlog_io::Failure {
        *self.lock_state().poisoned.get_or_insert(failure)
    }

    /// The application's metadata (`app-metadata`), if ever written.
    pub fn app_metadata(&self) -> Option<Vec<u8>> {
        self.lock_state().app_metadata.as_ref().map(|m| m.0.clone())
    }

    /// Replaces the application's metadata atomically (temp, sync, rename,
    /// directory sync): after a crash it holds the old bytes or the new,
    /// never a mix.
    ///
    /// # Errors
    /// `TooLarge` above 1 MiB (nothing written); `Io` (which
    /// poisons the data directory); `Poisoned`.
    pub fn write_app_metadata(&self, bytes: &[u8]) -> Result<()> {
        check_small_body("application metadata", bytes)?;
        let value = AppMetadata(bytes.to_vec());
        let mut st = self.lock_state();
        self.write_locked(&mut st, &value)?;
        st.app_metadata = Some(value);
        Ok(())
    }

    /// The Raft layer's voter-history cache (`voter-history`), if ever
    /// written.
    pub fn voter_history(&self) -> Option<Vec<u8>> {
        self.lock_state()
            .voter_history
            .as_ref()
            .map(|m| m.0.clone())
    }

    /// Replaces the voter-history cache atomically, as
    /// [`DataDir::write_app_metadata`].
    ///
    /// # Errors
    /// `TooLarge` above 1 MiB (nothing written); `Io` (which poisons the
    /// data directory); `Poisoned`.
    pub fn write_voter_history(&self, bytes: &[u8]) -> Result<()> {
        check_small_body("voter history", bytes)?;
        let value = VoterHistoryFile(bytes.to_vec());
        let mut st = self.lock_state();
        self.write_locked(&mut st, &value)?;
        st.voter_history = Some(value);
        Ok(())
    }

    /// Makes `next` the durable quorum state. When this returns `Ok`, every
    /// later open sees `next` or a later state (invariant 5); only then may
    /// the vote or leadership be announced.
    ///
    /// # Errors
    /// `EpochRegression`, `VoteConflict` or `LeaderConflict` (nothing
    /// written); `Poisoned` after an earlier failure; `Io` if a write or sync
    /// fails, which poisons the directory.
    pub fn persist_quorum_state(&self, next: &QuorumState) -> Result<()> {
        let mut st = self.lock_state();
        st.election.check_transition(next)?;
        self.write_locked(&mut st, next)?;
        tracing::info!(
            target: "quorumlog::election",
            dir = %self.dir.display(),
            from_epoch = st.election.epoch.0,
            epoch = next.epoch.0,
            leader = ?next.leader,
            voted = ?next.voted,
            "election state persisted"
        );
        st.election = next.clone();
        Ok(())
    }

    /// Durably replaces the recovery point.
    ///
    /// # Errors
    /// `Poisoned` after an earlier failure; `Io` (which poisons).
    pub fn write_recovery_point(&self, rp: RecoveryPoint) -> Result<()> {
        let mut st = self.lock_state();
        self.write_locked(&mut st, &rp)?;
        st.checkpoints.recovery_point = Some(rp);
        Ok(())
    }

    /// Durably removes the recovery point, so that the log's next open
    /// verifies every segment from the first (an operator's repair, which
    /// must find damage anywhere, however old).
    ///
    /// # Errors
    /// `Poisoned` after an earlier failure; `Io` (which poisons).
    pub fn forget_recovery_point(&self) -> Result<()> {
        let mut st = self.lock_state();
        if let Some(f) = st.poisoned {
            return Err(Error::Poisoned {
                op: f.op,
                kind: f.kind,
            });
        }
        let path = small_file::path_of::<RecoveryPoint>(&self.dir);
        let removed = match self.fs.remove_file(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            r => r,
        }
        .and_then(|()| self.fs.sync_dir(parent_dir(&path)));
        if let Err(e) = removed {
            let e = Error::Io(e);
            st.poisoned = Some(e.failure());
            return Err(e);
        }
        st.checkpoints.recovery_point = None;
        Ok(())
    }

    /// Durably replaces the high watermark.
    ///
    /// # Errors
    /// `Poisoned` after an earlier failure; `Io` (which poisons).
    pub fn write_high_watermark(&self, offset: Offset) -> Result<()> {
        let mut st = self.lock_state();
        let hw = HighWatermark(offset);
        self.write_locked(&mut st, &hw)?;
        st.checkpoints.high_watermark = Some(hw);
        Ok(())
    }

    /// Durably raises the high watermark to `offset`; a lower or equal
    /// `offset` writes nothing. Returns the durable value after the call.
    /// (The check and the replace are one step under the directory's lock,
    /// so a concurrent writer of a higher value is never undone.)
    ///
    /// # Errors
    /// `Poisoned` after an earlier failure; `Io` (which poisons).
    pub fn raise_high_watermark(&self, offset: Offset) -> Result<Offset> {
        let mut st = self.lock_state();
        if let Some(current) = st.checkpoints.high_watermark.filter(|h| h.0 >= offset) {
            return Ok(current.0);
        }
        let hw = HighWatermark(offset);
        self.write_locked(&mut st, &hw)?;
        st.checkpoints.high_watermark = Some(hw);
        Ok(offset)
    }

    /// Durably replaces the log start offset, with the epoch of the entry
    /// just below it when known.
    ///
    /// # Errors
    /// `Poisoned` after an earlier failure; `Io` (which poisons).
    pub fn write_log_start_offset(
        &self,
        offset: Offset,
        purged_epoch: Option<Epoch>,
    ) -> Result<()> {
        let mut st = self.lock_state();
        let ls = LogStartOffset {
            offset,
            purged_epoch: purged_epoch.filter(|_| offset > Offset(0)),
        };
        self.write_locked(&mut st, &ls)?;
        st.checkpoints.log_start_offset = Some(ls);
        Ok(())
    }

    /// Durably replaces the epoch map.
    ///
    /// # Errors
    /// `Poisoned` after an earlier failure; `Io` (which poisons).
    pub fn write_epoch_map(&self, map: &EpochMap) -> Result<()> {
        let mut st = self.lock_state();
        self.write_locked(&mut st, map)?;
        st.checkpoints.epoch_map = Some(map.clone());
        Ok(())
    }

    fn write_locked<F: SmallFile>(&self, st: &mut State, value: &F) -> Result<()> {
        if let Some(f) = st.poisoned {
            return Err(Error::Poisoned {
                op: f.op,
                kind: f.kind,
            });
        }
        small_file::write(self.fs.as_ref(), &self.dir, value).inspect_err(|e| {
            if e.is_io() {
                tracing::error!(target: "quorumlog::checkpoint", dir = %self.dir.display(), error = %e, "the data directory is poisoned");
                st.poisoned = Some(e.failure());
            }
        })
    }
}
