//! `dump --print-data`: a group's entry as the Raft library that wrote it
//! encoded it, told apart by the entry's own fields (its index must be
//! the record's offset, its term the batch's epoch), never guessed from a
//! flag:
//!
//! - raft-rs writes each entry as its protobuf `Entry` (`entry_type` 1,
//!   `term` 2, `index` 3, `data` 4, `context` 6);
//! - openraft 0.10 writes `bincode` of its `Entry`: the log id (the
//!   leader id, `term` and `node_id` with the advanced leader id or
//!   `term` alone with the standard one, then `index`, each a
//!   little-endian `u64`), then the payload's variant as a little-endian
//!   `u32` (0 blank, 1 normal with the application's data after it, 2 a
//!   membership).
//!
//! What neither reads as is shown as bytes. The application's bytes print
//! as text when printable, as hex otherwise.

/// One entry's reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Data<'a> {
    /// Who wrote it and what kind of entry it is: `raft-rs normal`,
    /// `openraft membership`, `bytes`, …
    pub(crate) kind: &'static str,
    /// The application's bytes (the whole record for `bytes`).
    pub(crate) data: &'a [u8],
}

/// Reads `record`, the entry at group index `index` of a batch in epoch
/// `epoch`.
pub(crate) fn read(record: &[u8], index: u64, epoch: u64) -> Data<'_> {
    raft_rs(record, index, epoch)
        .or_else(|| openraft(record, index, epoch))
        .unwrap_or(Data {
            kind: "bytes",
            data: record,
        })
}

/// The bytes for people: printable ASCII as it is, any other byte as
/// `\xNN` (so text reads as text); at most `max` bytes, then `…`.
pub(crate) fn shown(bytes: &[u8], max: usize) -> String {
    let head = bytes.get(..max).unwrap_or(bytes);
    let mut s = head.escape_ascii().to_string();
    if bytes.len() > head.len() {
        s.push('…');
    }
    s
}

/// A protobuf varint at the front of `b`: its value and the rest.
fn varint(b: &[u8]) -> Option<(u64, &[u8])> {
    let mut v = 0u64;
    for (i, byte) in b.iter().enumerate().take(10) {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((v, b.get(i + 1..)?));
        }
    }
    None
}

/// raft-rs's protobuf `Entry`, if `record` is one at `index` in `epoch`.
fn raft_rs(record: &[u8], index: u64, epoch: u64) -> Option<Data<'_>> {
    let (mut kind, mut term, mut at) = (0u64, 0u64, 0u64);
    let mut data: &[u8] = &[];
    let mut rest = record;
    while !rest.is_empty() {
        let (key, r) = varint(rest)?;
        let (field, wire) = (key >> 3, key & 7);
        rest = match wire {
            0 => {
                let (v, r) = varint(r)?;
                match field {
                    1 => kind = v,
                    2 => term = v,
                    3 => at = v,
                    5 => {}
                    _ => return None,
                }
                r
            }
            2 => {
                let (len, r) = varint(r)?;
                let len = usize::try_from(len).ok()?;
                let (bytes, r) = (r.get(..len)?, r.get(len..)?);
                match field {
                    4 => data = bytes,
                    6 => {}
                    _ => return None,
                }
                r
            }
            _ => return None,
        };
    }
    let kind = match kind {
        0 => "raft-rs normal",
        1 => "raft-rs conf change",
        2 => "raft-rs conf change v2",
        _ => return None,
    };
    (at == index && term == epoch).then_some(Data { kind, data })
}

/// A little-endian `u64` at `at` of `b`.
fn le64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// openraft 0.10's `bincode` `Entry`, if `record` is one at `index` in
/// `epoch` (the advanced leader id's epoch is `term << 32 | node_id`).
fn openraft(record: &[u8], index: u64, epoch: u64) -> Option<Data<'_>> {
    let advanced = le64(record, 0)? << 32 | le64(record, 8)? == epoch && le64(record, 16)? == index;
    let standard = le64(record, 0)? == epoch && le64(record, 8)? == index;
    let at = match (advanced, standard) {
        (true, _) => 24,
        (false, true) => 16,
        (false, false) => return None,
    };
    let tag = u32::from_le_bytes(record.get(at..at + 4)?.try_into().ok()?);
    let rest = record.get(at + 4..)?;
    let (kind, data) = match tag {
        0 if rest.is_empty() => ("openraft blank", rest),
        1 => ("openraft normal", rest),
        2 => ("openraft membership", rest),
        _ => return None,
    };
    Some(Data { kind, data })
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        reason = "test code: a panic is a failed assertion"
    )]

    use super::*;

    /// openraft 0.10's entry with the advanced leader id, `String` data.
    type Entry = openraft10::Entry<
        openraft10::impls::leader_id_adv::LeaderId<u64, u64>,
        openraft10::EntryPayload<String, u64, openraft10::BasicNode>,
    >;

    /// Invariant: an entry openraft 0.10's adapter encodes reads back as
    /// its kind and its application's bytes, at its index and epoch only.
    #[test]
    fn openraft_entries_read_as_written() {
        let leader = openraft10::impls::leader_id_adv::LeaderId {
            term: 3,
            node_id: 2,
        };
        let e = Entry {
            log_id: openraft10::LogId::new(leader, 17),
            payload: openraft10::EntryPayload::Normal("set k v".into()),
        };
        let bytes = quorumlog_openraft10::mapping::encode_entry(&e).unwrap();
        let epoch = 3 << 32 | 2;
        let d = read(&bytes, 17, epoch);
        assert_eq!(d.kind, "openraft normal");
        // bincode's string: its length, then its bytes.
        assert_eq!(d.data.get(8..), Some(&b"set k v"[..]));
        assert_eq!(read(&bytes, 18, epoch).kind, "bytes");
        let blank = Entry {
            log_id: openraft10::LogId::new(leader, 17),
            payload: openraft10::EntryPayload::Blank,
        };
        let bytes = quorumlog_openraft10::mapping::encode_entry(&blank).unwrap();
        assert_eq!(read(&bytes, 17, epoch).kind, "openraft blank");
    }

    /// Invariant: raft-rs's protobuf entry reads back as its kind and
    /// data, at its index and term only.
    #[test]
    fn raft_rs_entries_read_as_written() {
        use protobuf::Message as _;
        let e = raft::eraftpb::Entry {
            entry_type: raft::eraftpb::EntryType::EntryConfChange,
            term: 5,
            index: 9,
            data: b"ab".to_vec().into(),
            context: b"c".to_vec().into(),
            ..Default::default()
        };
        let bytes = e.write_to_bytes().unwrap();
        let d = read(&bytes, 9, 5);
        assert_eq!(d.kind, "raft-rs conf change");
        assert_eq!(d.data, b"ab");
        assert_eq!(read(&bytes, 9, 6).kind, "bytes");
        let normal = raft::eraftpb::Entry {
            term: 5,
            index: 9,
            data: b"x".to_vec().into(),
            ..Default::default()
        };
        let bytes = normal.write_to_bytes().unwrap();
        assert_eq!(read(&bytes, 9, 5).kind, "raft-rs normal");
        assert_eq!(shown(b"x\x00", 64), "x\\x00");
        assert_eq!(shown(b"hello", 3), "hel…");
    }
}
