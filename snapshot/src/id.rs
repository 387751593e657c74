//! Snapshot identities: what a snapshot covers, and a published one's size.

use quorumlog_checkpoint::{Epoch, Offset};

/// The identity of a snapshot: it holds the state of every record below
/// `end_offset`, the last of which has `epoch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SnapshotId {
    /// Offset after the last record covered.
    pub end_offset: Offset,
    /// Epoch of the last record covered.
    pub epoch: Epoch,
}

impl std::fmt::Display for SnapshotId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.end_offset, self.epoch)
    }
}

impl SnapshotId {
    /// The file stem: `<end_offset:20>-<epoch:20>`.
    pub fn stem(&self) -> String {
        format!("{:020}-{:020}", self.end_offset.0, self.epoch.0)
    }

    /// Parses a stem made by [`SnapshotId::stem`].
    pub fn parse_stem(stem: &str) -> Option<SnapshotId> {
        let (a, b) = stem.split_once('-')?;
        let digits = |s: &str| s.len() == 20 && s.bytes().all(|c| c.is_ascii_digit());
        if !digits(a) || !digits(b) {
            return None;
        }
        Some(SnapshotId {
            end_offset: Offset(a.parse().ok()?),
            epoch: Epoch(b.parse().ok()?),
        })
    }
}

/// A published snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// Its id.
    pub id: SnapshotId,
    /// Its file size in bytes.
    pub size_bytes: u64,
}
