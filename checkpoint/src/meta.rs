//! `meta`: the data directory's identity, written once by `format`.
//!
//! Body (40 bytes): `cluster_id u128 | node_id u64 | directory_id u128`.
//! The format version is the envelope's version.

use crate::error::CorruptionKind;
use crate::format::{magic, Reader, Writer, VERSION};
use crate::small_file::SmallFile;
use crate::types::{ClusterId, DirectoryId, NodeId};

/// The identity of a data directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// The on-disk format version the directory was formatted with.
    pub format_version: u16,
    /// The cluster the directory belongs to.
    pub cluster_id: ClusterId,
    /// The node that owns the directory.
    pub node_id: NodeId,
    /// Minted at format time; a re-formatted disk gets a new one.
    pub directory_id: DirectoryId,
}

impl Meta {
    /// A meta record of the current format version.
    pub fn new(cluster_id: ClusterId, node_id: NodeId, directory_id: DirectoryId) -> Self {
        Meta {
            format_version: VERSION,
            cluster_id,
            node_id,
            directory_id,
        }
    }
}

impl SmallFile for Meta {
    const MAGIC: [u8; 4] = magic::META;
    const NAME: &'static str = "meta";

    fn encode_body(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.u128(self.cluster_id.0)
            .u64(self.node_id.0)
            .u128(self.directory_id.0);
        w.finish()
    }

    fn decode_body(body: &[u8]) -> Result<Self, CorruptionKind> {
        let mut r = Reader::new(body);
        let meta = Meta {
            format_version: VERSION,
            cluster_id: ClusterId(r.u128()?),
            node_id: NodeId(r.u64()?),
            directory_id: DirectoryId(r.u128()?),
        };
        r.finish()?;
        if meta.directory_id.0 == 0 {
            return Err(CorruptionKind::Malformed("directory id is zero"));
        }
        Ok(meta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Meta {
        Meta::new(ClusterId(0xC1), NodeId(3), DirectoryId(0xD1D1))
    }

    #[test]
    fn round_trip() {
        let m = sample();
        assert_eq!(Meta::decode(&m.encode()).unwrap(), m);
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        let bytes = sample().encode();
        for bit in 0..bytes.len() * 8 {
            let mut bad = bytes.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(Meta::decode(&bad).is_err(), "bit {bit}");
        }
    }
}
