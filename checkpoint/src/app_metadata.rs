//! `app-metadata`: what a Raft library must persist beside the log and the
//! election state (openraft's last purged log id and membership, raft-rs's
//! `ConfState`), as opaque bytes in one checksummed record replaced
//! atomically, like the quorum state. Optional: absent until first written.
//!
//! Body: the bytes as given (at most 1 MiB).

use crate::error::CorruptionKind;
use crate::format::magic;
use crate::small_file::SmallFile;

/// The application's metadata: opaque bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AppMetadata(pub Vec<u8>);

impl SmallFile for AppMetadata {
    const MAGIC: [u8; 4] = magic::APP_METADATA;
    const NAME: &'static str = "app-metadata";

    fn encode_body(&self) -> Vec<u8> {
        self.0.clone()
    }

    fn decode_body(body: &[u8]) -> Result<Self, CorruptionKind> {
        Ok(AppMetadata(body.to_vec()))
    }
}

/// `voter-history`: the Raft layer's cache of its voter-set records by
/// offset (so that an open need not scan the whole log for them), opaque
/// here; like the application metadata, one checksummed record replaced
/// atomically, absent until first written. The Raft layer verifies it
/// against the log at open: it is never the only copy of anything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VoterHistoryFile(pub Vec<u8>);

impl SmallFile for VoterHistoryFile {
    const MAGIC: [u8; 4] = magic::VOTER_HISTORY;
    const NAME: &'static str = "voter-history";

    fn encode_body(&self) -> Vec<u8> {
        self.0.clone()
    }

    fn decode_body(body: &[u8]) -> Result<Self, CorruptionKind> {
        Ok(VoterHistoryFile(body.to_vec()))
    }
}
