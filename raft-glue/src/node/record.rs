//! The node log's record header: the first record of every batch in a
//! node's shared log names the group and what the batch does to it.
//!
//! Layout (little-endian, 28 bytes; docs/format.md, "Node records"):
//! ```text
//! version   u8   (1)
//! kind      u8   (see `Kind`)
//! flags     u16  (bit 0: control entries; the other bits 0)
//! group     u64
//! offset    u64  the group offset the record is about
//! epoch     u64  the group epoch it carries (0 when none)
//! ```
//! An `Entries` or `Rewrite` batch holds the group's entries at
//! `offset..` as its records 1..; a `Vote` or `AppMetadata` batch holds
//! one more record, the state's bytes. The shared log's own batch
//! header, CRC and placement checks cover all of it.

/// The header's version byte.
pub(crate) const RECORD_VERSION: u8 = 1;

/// Encoded size of a [`Header`].
pub(crate) const HEADER_BYTES: usize = 28;

/// What a node record does to its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The group exists from now on, its log empty at `offset`.
    Create,
    /// The group is gone; its id is never used again.
    Drop,
    /// Entries appended at `offset` in `epoch`.
    Entries,
    /// A copy of live entries at `offset` in `epoch`, moved forward out of
    /// an old segment; it replaces the older copy.
    Rewrite,
    /// A suffix truncation: the group's log ends at `offset`.
    Truncate,
    /// A prefix purge: the group's log starts at `offset`, the entry at
    /// `offset - 1` being in `epoch`.
    Purge,
    /// The group's log restarts, empty, at `offset` (a snapshot install
    /// whose last entry the log does not hold; a purge past the end).
    Reset,
    /// The group's election state, in the record after the header.
    Vote,
    /// The group's high watermark, made durable, is `offset`.
    HighWatermark,
    /// The group's application metadata, in the record after the header.
    AppMetadata,
}

impl Kind {
    fn code(self) -> u8 {
        match self {
            Kind::Create => 1,
            Kind::Drop => 2,
            Kind::Entries => 3,
            Kind::Rewrite => 4,
            Kind::Truncate => 5,
            Kind::Purge => 6,
            Kind::Reset => 7,
            Kind::Vote => 8,
            Kind::HighWatermark => 9,
            Kind::AppMetadata => 10,
        }
    }

    fn from_code(code: u8) -> Option<Kind> {
        Some(match code {
            1 => Kind::Create,
            2 => Kind::Drop,
            3 => Kind::Entries,
            4 => Kind::Rewrite,
            5 => Kind::Truncate,
            6 => Kind::Purge,
            7 => Kind::Reset,
            8 => Kind::Vote,
            9 => Kind::HighWatermark,
            10 => Kind::AppMetadata,
            _ => return None,
        })
    }
}

/// A node record's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) kind: Kind,
    pub(crate) group: u64,
    pub(crate) offset: u64,
    pub(crate) epoch: u64,
    /// Entries (or their rewrite) that are control records of the group's
    /// protocol (the `KRaft` wing's voter sets), never user records.
    pub(crate) control: bool,
}

impl Header {
    /// The header's bytes.
    pub(crate) fn encode(&self) -> [u8; HEADER_BYTES] {
        // Written in place: one per append, no allocation.
        let mut out = [0u8; HEADER_BYTES];
        let fields: [&[u8]; 6] = [
            &[RECORD_VERSION],
            &[self.kind.code()],
            &u16::from(self.control).to_le_bytes(),
            &self.group.to_le_bytes(),
            &self.offset.to_le_bytes(),
            &self.epoch.to_le_bytes(),
        ];
        let mut at = 0;
        for f in fields {
            quorumlog_io::codec::copy_into(&mut out, at, f);
            at += f.len();
        }
        out
    }

    /// Decodes a header record.
    ///
    /// # Errors
    /// What is wrong with it, as a phrase.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Header, &'static str> {
        let Some(fixed) = bytes.first_chunk::<HEADER_BYTES>() else {
            return Err("node record header shorter than 28 bytes");
        };
        if bytes.len() != HEADER_BYTES {
            return Err("node record header longer than 28 bytes");
        }
        let [version, kind, r0, r1, rest @ ..] = *fixed;
        if version != RECORD_VERSION {
            return Err("unknown node record version");
        }
        if r0 > 1 || r1 != 0 {
            return Err("node record flags unknown");
        }
        let kind = Kind::from_code(kind).ok_or("unknown node record kind")?;
        let word = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(rest.get(i * 8..i * 8 + 8).unwrap_or(&[0; 8]));
            u64::from_le_bytes(b)
        };
        Ok(Header {
            kind,
            group: word(0),
            offset: word(1),
            epoch: word(2),
            control: r0 == 1,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips_and_a_flipped_byte_is_refused_or_changes_the_value() {
        let kinds = [
            Kind::Create,
            Kind::Drop,
            Kind::Entries,
            Kind::Rewrite,
            Kind::Truncate,
            Kind::Purge,
            Kind::Reset,
            Kind::Vote,
            Kind::HighWatermark,
            Kind::AppMetadata,
        ];
        for kind in kinds {
            let h = Header {
                kind,
                group: 0x0102_0304_0506_0708,
                offset: 77,
                epoch: 9,
                control: kind == Kind::Entries,
            };
            let bytes = h.encode();
            assert_eq!(Header::decode(&bytes), Ok(h));
            for i in 0..HEADER_BYTES {
                let mut b = bytes;
                b[i] ^= 0x40;
                assert_ne!(Header::decode(&b), Ok(h), "byte {i}");
            }
        }
        assert!(Header::decode(&[1; 27]).is_err());
        assert!(Header::decode(&[1; 29]).is_err());
    }
}

/// What a node batch's first record (its header) says: for inspectors
/// (`quorumlog dump`), which read a node's log without opening it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRecordInfo {
    /// The group it belongs to.
    pub group: u64,
    /// What it is: `Create`, `Drop`, `Entries`, `Rewrite`, `Truncate`,
    /// `Purge`, `Reset`, `Vote`, `HighWatermark` or `AppMetadata`.
    pub kind: String,
    /// The group offset it names (its first entry's for entries).
    pub offset: u64,
    /// The epoch it names (entries, purges, resets).
    pub epoch: u64,
}

/// Decodes a node batch's header record.
///
/// # Errors
/// What is wrong with it, as a phrase.
pub fn describe_node_record(header: &[u8]) -> Result<NodeRecordInfo, &'static str> {
    let h = Header::decode(header)?;
    Ok(NodeRecordInfo {
        group: h.group,
        kind: format!("{:?}", h.kind),
        offset: h.offset,
        epoch: h.epoch,
    })
}
