//! The error type of the checkpoint crate.

use std::io;
use std::path::PathBuf;

use crate::types::{Epoch, NodeId, Offset, Vote};

/// What is wrong with bytes that failed verification: one structured kind
/// for every file of a data directory (small files, log segments, index
/// files, intents, snapshots). The log and snapshot crates re-export it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CorruptionKind {
    /// The file is missing although the directory must have it.
    #[error("file is missing")]
    Missing,
    /// Fewer bytes than the structure needs.
    #[error("truncated: {len} bytes, at least {needed} needed")]
    Truncated {
        /// Bytes present.
        len: u64,
        /// Bytes required.
        needed: u64,
    },
    /// The file is longer than its header says.
    #[error("{len} bytes where the header says {expected}")]
    TrailingBytes {
        /// Bytes present.
        len: u64,
        /// Bytes the header accounts for.
        expected: u64,
    },
    /// The structure does not start with the magic of its kind.
    #[error(
        "magic \"{}\" where \"{}\" belongs (not this kind of file)",
        magic_text(*found),
        magic_text(*expected)
    )]
    BadMagic {
        /// The magic of this kind of structure.
        expected: [u8; 4],
        /// The four bytes found.
        found: [u8; 4],
    },
    /// The stored CRC32C does not match the contents.
    #[error("checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    ChecksumMismatch {
        /// The checksum stored.
        stored: u32,
        /// The checksum of the bytes read.
        computed: u32,
    },
    /// A valid structure of a version this build cannot read.
    #[error("unsupported version {found} (this build reads {supported})")]
    UnsupportedVersion {
        /// The version found.
        found: u16,
        /// The version this build reads.
        supported: u16,
    },
    /// The checksum matched but the contents break a rule of the format.
    #[error("malformed: {0}")]
    Malformed(&'static str),
    /// A snapshot file does not end with a valid footer (unfinished or cut).
    #[error("no footer")]
    NoFooter,
    /// An intact batch holds other offsets than its place requires: a batch
    /// copied or written to the wrong place, or a stale index.
    #[error("misplaced batch: expected base offset {expected}, found {found}")]
    Misplaced {
        /// The offset this position must start with.
        expected: Offset,
        /// The base offset in the batch.
        found: Offset,
    },
    /// A batch whose epoch is older than the batch before it.
    #[error("epoch {found} after epoch {previous}")]
    EpochOrder {
        /// The previous batch's epoch.
        previous: Epoch,
        /// This batch's epoch.
        found: Epoch,
    },
    /// Invalid bytes followed by valid batches: not a torn tail.
    #[error("invalid batch followed by valid data at position {valid_at}")]
    ValidDataFollows {
        /// Where the later valid batch starts.
        valid_at: u64,
    },
    /// Offsets missing between two segments.
    #[error("segment ends at offset {end} but the next segment starts at {next_base}")]
    Gap {
        /// Where this segment's data ends.
        end: Offset,
        /// The next segment's base offset.
        next_base: Offset,
    },
    /// A segment is shorter than the recovery point says was durable.
    #[error("segment is {len} bytes but the recovery point is at byte {recovery_position}")]
    ShorterThanRecoveryPoint {
        /// The segment file's length.
        len: u64,
        /// The recovery point's byte position.
        recovery_position: u64,
    },
    /// The recovery point names a segment that does not exist.
    #[error("the recovery point's segment is missing")]
    MissingSegment,
    /// The data ends before a position that something durable says it
    /// reaches (the recovery point, or the index written by a clean close).
    #[error("the data ends at offset {end} but {by} says it reaches offset {claimed}")]
    DataEndsEarly {
        /// The offset after the last batch that verifies.
        end: Offset,
        /// The offset the data must reach.
        claimed: Offset,
        /// Who says so.
        by: &'static str,
    },
    /// A compressed payload that does not decompress to its declared size.
    #[error("payload does not decompress")]
    Decompress,
}

impl CorruptionKind {
    /// `Truncated` from a short read of a cursor.
    pub fn short(s: quorumlog_io::codec::Short) -> Self {
        CorruptionKind::Truncated {
            len: s.remaining as u64,
            needed: s.needed as u64,
        }
    }
}

/// Where damage was found, in any file of a data directory: the one
/// location type of every crate's `Corruption` error.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Location {
    /// A byte of a file (a small file, an index file, an intent, a
    /// snapshot); 0 when the whole file is concerned.
    File {
        /// The file.
        path: PathBuf,
        /// The byte position.
        position: u64,
    },
    /// A byte of a log segment, where `offset` was expected (or found).
    Segment {
        /// The segment's base offset.
        segment: Offset,
        /// The byte position in the segment file.
        position: u64,
        /// The offset expected (or found) there.
        offset: Offset,
    },
}

impl Location {
    /// The byte position.
    pub fn position(&self) -> u64 {
        match self {
            Location::File { position, .. } | Location::Segment { position, .. } => *position,
        }
    }

    /// A whole file.
    pub fn file(path: impl Into<PathBuf>) -> Location {
        Location::File {
            path: path.into(),
            position: 0,
        }
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::File { path, position } => {
                write!(f, "{} at byte {position}", path.display())
            }
            Location::Segment {
                segment,
                position,
                offset,
            } => write!(f, "segment {segment} at byte {position} (offset {offset})"),
        }
    }
}

/// Why a directory is not a usable data directory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NotFormattedReason {
    /// The directory does not exist (a disk that failed to mount?).
    #[error("the directory does not exist")]
    NoDirectory,
    /// The directory has no meta file.
    #[error("it has no meta file")]
    NoMeta,
    /// The meta file exists but is not valid.
    #[error("its meta file is invalid: {0}")]
    InvalidMeta(CorruptionKind),
}

/// Errors of the checkpoint crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An I/O error; its message names the operation and the path.
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    /// An identity `format` cannot write (nothing written).
    #[error("invalid {field}: {why}")]
    InvalidIdentity {
        /// The field.
        field: &'static str,
        /// Why.
        why: &'static str,
    },
    /// A value too large for its file (nothing written).
    #[error("{what} of {bytes} bytes exceeds the maximum of {max}")]
    TooLarge {
        /// What.
        what: &'static str,
        /// Its size.
        bytes: usize,
        /// The maximum.
        max: usize,
    },
    /// `open` of a directory that was never formatted (or lost its meta).
    /// quorumlog never initialises a directory by itself: an empty directory
    /// may be a disk that failed to mount.
    #[error("{dir} is not a quorumlog data directory: {reason}")]
    NotFormatted {
        /// The directory.
        dir: PathBuf,
        /// What is missing or invalid.
        reason: NotFormattedReason,
    },
    /// `format` of a directory that already has a valid meta file.
    #[error("{dir} is already formatted")]
    AlreadyFormatted {
        /// The directory.
        dir: PathBuf,
    },
    /// `format` of a directory holding files that are not ours.
    #[error("{dir} is not empty (found {entry:?}); refusing to format it")]
    NotEmpty {
        /// The directory.
        dir: PathBuf,
        /// The first foreign entry found.
        entry: String,
    },
    /// The directory is open elsewhere (another process or handle).
    #[error("{dir} is locked by another open instance{}", holder.map_or_else(String::new, |p| format!(" (process {p})")))]
    Locked {
        /// The directory.
        dir: PathBuf,
        /// The holder's pid, when it wrote one into the lock file.
        holder: Option<u32>,
    },
    /// The meta file belongs to another cluster or node than expected.
    #[error("{dir} belongs to {field} {found}, expected {expected}")]
    IdentityMismatch {
        /// The directory.
        dir: PathBuf,
        /// `"cluster id"`, `"node id"` or `"directory id"`.
        field: &'static str,
        /// The expected value.
        expected: String,
        /// The value in the meta file.
        found: String,
    },
    /// A file failed verification.
    #[error("corrupt {at}: {kind}")]
    Corruption {
        /// Where.
        at: Location,
        /// What is wrong.
        kind: CorruptionKind,
    },
    /// A quorum-state update would move the epoch backwards.
    #[error("quorum state epoch would regress from {current} to {proposed}")]
    EpochRegression {
        /// The durable epoch.
        current: Epoch,
        /// The epoch asked for.
        proposed: Epoch,
    },
    /// A quorum-state update would change the vote already cast in an epoch.
    #[error("epoch {epoch} already has vote {existing:?}; refusing {proposed:?}")]
    VoteConflict {
        /// The epoch.
        epoch: Epoch,
        /// The durable vote.
        existing: Vote,
        /// The vote asked for.
        proposed: Option<Vote>,
    },
    /// A quorum-state update would change the known leader of an epoch.
    #[error("epoch {epoch} already has leader {existing}; refusing {proposed:?}")]
    LeaderConflict {
        /// The epoch.
        epoch: Epoch,
        /// The durable leader.
        existing: NodeId,
        /// The leader asked for.
        proposed: Option<NodeId>,
    },
    /// A second log opened on a data directory whose log is already open in
    /// this process (one writer per data directory).
    #[error("the log of {dir} is already open in this process")]
    LogAlreadyOpen {
        /// The data directory.
        dir: PathBuf,
    },
    /// An epoch-map update that would break its ordering.
    #[error(
        "epoch map: epoch {epoch} at offset {offset} after epoch {last_epoch} at {last_offset}"
    )]
    EpochOrder {
        /// The epoch asked for.
        epoch: Epoch,
        /// Its start offset.
        offset: Offset,
        /// The latest epoch in the map.
        last_epoch: Epoch,
        /// The latest epoch's start offset.
        last_offset: Offset,
    },
    /// The disk is full: the new version of `path` was never written (its
    /// temporary file is removed; the previous version is intact). Not a
    /// failure of the device: nothing is poisoned, and the write succeeds
    /// once space is freed.
    #[error("no space left to write {path} ({bytes} bytes): free disk space and retry")]
    NoSpace {
        /// The file not written.
        path: PathBuf,
        /// Its size.
        bytes: u64,
    },
    /// A write or sync failed earlier; nothing more is written until the
    /// directory is reopened.
    #[error("poisoned by an earlier failure: {op} failed ({kind:?})")]
    Poisoned {
        /// The operation that failed first.
        op: &'static str,
        /// What it reported.
        kind: io::ErrorKind,
    },
}

impl Error {
    /// Whether this is an I/O failure (or the poisoning one left): the
    /// errors that poison, as opposed to refusals and bad input.
    pub fn is_io(&self) -> bool {
        matches!(self, Error::Io(_) | Error::Poisoned { .. })
    }

    /// The failure to record when this error poisons a component.
    pub fn failure(&self) -> quorumlog_io::Failure {
        match self {
            Error::Io(e) => quorumlog_io::Failure::of(e),
            Error::Poisoned { op, kind } => quorumlog_io::Failure { op, kind: *kind },
            _ => quorumlog_io::Failure {
                op: "checkpoint",
                kind: io::ErrorKind::Other,
            },
        }
    }
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Four magic bytes as text: printable ASCII as it is, any other byte as
/// `\xNN`.
pub(crate) fn magic_text(m: [u8; 4]) -> String {
    m.iter()
        .map(|b| {
            if b.is_ascii_graphic() || *b == b' ' {
                char::from(*b).to_string()
            } else {
                format!("\\x{b:02x}")
            }
        })
        .collect()
}
