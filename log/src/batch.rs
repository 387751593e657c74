//! Encoding batches, and verified views of batches read back.
//!
//! Invariants: an encoded batch verifies; a [`BatchRef`] is only ever made
//! from bytes whose CRC, structure and base offset were checked; decoding
//! hostile bytes never panics and never allocates beyond [`MAX_BATCH_BYTES`].

use std::borrow::Cow;

use quorumlog_checkpoint::{Epoch, Offset};

use quorumlog_io::codec::u32_len;

use crate::error::{CorruptionKind, Error, Result};
use crate::format::{
    BatchHeader, Salt, BATCH_HEADER_BYTES, COMPRESSION_NONE, COMPRESSION_ZSTD, RECORD_PREFIX_BYTES,
};
use crate::options::Compression;

/// Batches of at least this many bytes are encoded with a page of room
/// for their sync padding.
const PAD_IN_PLACE_FROM: u64 = 64 << 10;

/// The hard upper bound of a batch's uncompressed size, whatever the options.
pub(crate) const MAX_BATCH_BYTES: u64 = 64 << 20;

/// The uncompressed encoded size of a batch of `records`.
pub(crate) fn encoded_len<R: AsRef<[u8]>>(records: &[R]) -> u64 {
    let body: usize = records
        .iter()
        .map(|r| RECORD_PREFIX_BYTES + r.as_ref().len())
        .sum();
    (BATCH_HEADER_BYTES + body) as u64
}

/// The offset after `count` records starting at `base`.
///
/// # Errors
/// `OffsetOverflow` if it does not fit in a `u64` (offsets never wrap).
pub(crate) fn next_offset_after(base: Offset, count: u64) -> Result<Offset> {
    base.0
        .checked_add(count)
        .map(Offset)
        .ok_or(Error::OffsetOverflow {
            base,
            records: count,
        })
}

/// How batches are encoded: compression and the size limits, set once
/// (from [`LogOptions`](crate::LogOptions)) so the two byte counts cannot be
/// swapped at a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchEncoder {
    /// Compression of the records section.
    pub compression: Compression,
    /// Records sections smaller than this are stored uncompressed.
    pub threshold_bytes: u64,
    /// The largest encoded batch accepted (and never above
    /// [`MAX_BATCH_BYTES`]).
    pub max_bytes: u64,
    /// Encode control batches (flag bit 2).
    pub control: bool,
}

impl BatchEncoder {
    /// The encoder `options` describe.
    pub(crate) fn from_options(options: &crate::LogOptions) -> Self {
        BatchEncoder {
            compression: options.compression,
            threshold_bytes: options.compression_threshold_bytes,
            max_bytes: options.max_batch_bytes,
            control: false,
        }
    }

    /// The same encoder, for control batches.
    pub(crate) fn control(self) -> Self {
        BatchEncoder {
            control: true,
            ..self
        }
    }

    /// Encodes one batch into `out` (cleared first) and returns its header.
    /// The CRC is unsalted ([`Salt::NONE`]): the writer salts it for the
    /// segment it lands in ([`Salt::restamp`]).
    ///
    /// # Errors
    /// `EmptyBatch` for no records; `BatchTooLarge` above the maximum;
    /// `OffsetOverflow` if the records' offsets would pass `u64::MAX`.
    pub(crate) fn encode<R: AsRef<[u8]>>(
        &self,
        out: &mut Vec<u8>,
        base_offset: Offset,
        epoch: Epoch,
        records: &[R],
    ) -> Result<BatchHeader> {
        let unplaced = self.encode_unplaced(std::mem::take(out), epoch, records)?;
        let (header, bytes) = unplaced.place(base_offset)?;
        *out = bytes;
        Ok(header)
    }

    /// Encodes one batch whose base offset is not known yet, into `out`
    /// (cleared first): the records section (compressed if chosen) and its
    /// CRC, the expensive part, with no lock held. [`Unplaced::place`] then
    /// stamps the offset and finishes the CRC in constant time.
    ///
    /// # Errors
    /// `EmptyBatch` for no records; `BatchTooLarge` above the maximum.
    pub(crate) fn encode_unplaced<R: AsRef<[u8]>>(
        &self,
        out: Vec<u8>,
        epoch: Epoch,
        records: &[R],
    ) -> Result<Unplaced> {
        let len = encoded_len(records);
        self.encode_unplaced_with(out, epoch, records.len(), len, |i, out| {
            if let Some(r) = records.get(i) {
                out.extend_from_slice(r.as_ref());
            }
            Ok(())
        })
    }

    /// [`BatchEncoder::encode_unplaced`] of `count` records that `write`
    /// encodes straight into the batch body (record `i` appended to the
    /// buffer it is given): a caller's own record encoding is the only
    /// copy of its value before the batch. `len_hint` is the batch's
    /// expected size, for the buffer's first allocation.
    ///
    /// # Errors
    /// `EmptyBatch`; `BatchTooLarge` above the maximum (checked on what
    /// `write` produced); `RecordEncoding` if `write` fails.
    pub(crate) fn encode_unplaced_with(
        &self,
        mut out: Vec<u8>,
        epoch: Epoch,
        count: usize,
        len_hint: u64,
        mut write: impl FnMut(usize, &mut Vec<u8>) -> std::io::Result<()>,
    ) -> Result<Unplaced> {
        if count == 0 {
            return Err(Error::EmptyBatch);
        }
        let max = self.max_bytes.min(MAX_BATCH_BYTES);
        let Ok(count) = u32::try_from(count) else {
            return Err(Error::BatchTooLarge {
                bytes: len_hint,
                max,
            });
        };
        if len_hint > max {
            return Err(Error::BatchTooLarge {
                bytes: len_hint,
                max,
            });
        }
        out.clear();
        // Room for the batch; for a large one, also a page of sync padding
        // after it (a round of one batch is padded in place, where a
        // reallocation would copy the batch). A small batch is not given
        // the page: a round of many batches joins them anyway, and a
        // page reserved for each made their allocations 20 times larger
        // (W7: 100 of 256 bytes per round).
        let padding = if len_hint >= PAD_IN_PLACE_FROM {
            crate::format::PAGE_BYTES
        } else {
            0
        };
        out.reserve(usize::try_from(len_hint + padding).unwrap_or(0));
        out.resize(BATCH_HEADER_BYTES, 0);
        for i in 0..usize::try_from(count).unwrap_or(usize::MAX) {
            let at = out.len();
            out.extend_from_slice(&[0; RECORD_PREFIX_BYTES]);
            write(i, &mut out).map_err(Error::RecordEncoding)?;
            let len = out.len() - at - RECORD_PREFIX_BYTES;
            if (out.len() as u64) > max {
                return Err(Error::BatchTooLarge {
                    bytes: out.len() as u64,
                    max,
                });
            }
            // Lossless: the batch is below MAX_BATCH_BYTES.
            quorumlog_io::codec::copy_into(&mut out, at, &u32_len(len).to_le_bytes());
        }
        let records_len = out.len() - BATCH_HEADER_BYTES;
        let mut flags = COMPRESSION_NONE;
        if let Compression::Zstd { level } = self.compression {
            if records_len as u64 >= self.threshold_bytes {
                let section = out.get(BATCH_HEADER_BYTES..).unwrap_or_default();
                if let Ok(z) = zstd::bulk::compress(section, level) {
                    if z.len() < records_len {
                        out.truncate(BATCH_HEADER_BYTES);
                        out.extend_from_slice(&z);
                        flags = COMPRESSION_ZSTD;
                    }
                }
            }
        }
        if self.control {
            flags |= crate::format::FLAG_CONTROL;
        }
        let payload_crc = crc32c::crc32c(out.get(BATCH_HEADER_BYTES..).unwrap_or_default());
        Ok(Unplaced {
            header: BatchHeader {
                crc: 0,
                batch_len: u32_len(out.len()),
                flags,
                base_offset: Offset(0),
                epoch,
                record_count: count,
                records_len: u32_len(records_len),
            },
            payload_crc,
            bytes: out,
        })
    }
}

/// A batch encoded without its base offset (see
/// [`BatchEncoder::encode_unplaced`]).
#[derive(Debug)]
pub(crate) struct Unplaced {
    header: BatchHeader,
    /// CRC32C of the payload (bytes after the header).
    payload_crc: u32,
    bytes: Vec<u8>,
}

impl Unplaced {
    /// The batch's epoch.
    pub(crate) fn epoch(&self) -> Epoch {
        self.header.epoch
    }

    /// The encoded size, header included.
    pub(crate) fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Gives the batch its base offset: writes the header and its CRC
    /// (unsalted), combined with the payload's without reading it again.
    ///
    /// # Errors
    /// `OffsetOverflow` if the records' offsets would pass `u64::MAX`.
    pub(crate) fn place(self, base_offset: Offset) -> Result<(BatchHeader, Vec<u8>)> {
        let Unplaced {
            mut header,
            payload_crc,
            mut bytes,
        } = self;
        next_offset_after(base_offset, u64::from(header.record_count))?;
        header.base_offset = base_offset;
        header.crc = 0;
        let head = header.to_bytes();
        // The CRC covers the payload, then the header's bytes [8, 40): the
        // header goes last so that placing a batch costs 32 bytes of CRC.
        header.crc = crc32c::crc32c_append(payload_crc, head.get(8..).unwrap_or_default());
        quorumlog_io::codec::copy_into(&mut bytes, 0, &header.to_bytes());
        debug_assert!(header.verify(&bytes, Salt::NONE).is_ok());
        Ok((header, bytes))
    }
}

/// Checks a record section's structure: exactly `count` length-prefixed
/// records filling it.
fn check_records(section: &[u8], count: u32) -> Result<(), CorruptionKind> {
    let mut rest = section;
    for _ in 0..count {
        let Some((len, tail)) = rest.split_first_chunk::<4>() else {
            return Err(CorruptionKind::Malformed("record section ends early"));
        };
        let len = u32::from_le_bytes(*len) as usize;
        let Some(after) = tail.get(len..) else {
            return Err(CorruptionKind::Malformed("record longer than its section"));
        };
        rest = after;
    }
    if rest.is_empty() {
        Ok(())
    } else {
        Err(CorruptionKind::Malformed("bytes after the last record"))
    }
}

/// Verifies a whole batch (header included) of a segment salted `salt`:
/// CRC, flags, record structure. Returns the parsed header.
///
/// # Errors
/// The [`CorruptionKind`] found.
pub(crate) fn verify_batch(bytes: &[u8], salt: Salt) -> Result<BatchHeader, CorruptionKind> {
    let header = BatchHeader::parse(bytes)?;
    if bytes.len() != header.batch_len as usize {
        return Err(crate::format::truncated(
            bytes.len(),
            header.batch_len as usize,
        ));
    }
    header.verify(bytes, salt)?;
    if u64::from(header.records_len) > MAX_BATCH_BYTES {
        return Err(CorruptionKind::Malformed(
            "records section over the maximum",
        ));
    }
    if header.compression() == COMPRESSION_NONE {
        let section = bytes.get(BATCH_HEADER_BYTES..).unwrap_or_default();
        check_records(section, header.record_count)?;
    }
    Ok(header)
}

/// A verified batch, borrowed from a read buffer.
#[derive(Debug, Clone, Copy)]
pub struct BatchRef<'a> {
    header: BatchHeader,
    bytes: &'a [u8],
}

impl<'a> BatchRef<'a> {
    /// Wraps bytes already verified by [`verify_batch`].
    pub(crate) fn new(header: BatchHeader, bytes: &'a [u8]) -> Self {
        BatchRef { header, bytes }
    }

    /// A batch in its portable form ([`BatchRef::raw`]) that the caller has
    /// verified already (`DurableLog::append_raw` verifies every batch it
    /// accepts): its header parsed, its checksum not checked again.
    ///
    /// # Errors
    /// A header that does not parse, or a length that is not the batch's.
    pub fn from_verified_raw(bytes: &'a [u8]) -> Result<BatchRef<'a>, CorruptionKind> {
        let header = BatchHeader::parse(bytes)?;
        if bytes.len() != header.batch_len as usize {
            return Err(crate::format::truncated(
                bytes.len(),
                header.batch_len as usize,
            ));
        }
        Ok(BatchRef::new(header, bytes))
    }

    /// Offset of the first record.
    pub fn base_offset(&self) -> Offset {
        self.header.base_offset
    }

    /// Offset after the last record.
    pub fn next_offset(&self) -> Offset {
        self.header.next_offset()
    }

    /// Epoch of every record.
    pub fn epoch(&self) -> Epoch {
        self.header.epoch
    }

    /// Whether this is a control batch (leader change, voter set, snapshot
    /// markers), never user records.
    pub fn is_control(&self) -> bool {
        self.header.is_control()
    }

    /// Number of records.
    pub fn record_count(&self) -> u32 {
        self.header.record_count
    }

    /// The batch in its portable form: as stored, with its CRC unsalted
    /// (for shipping to a follower, which verifies it and appends it without
    /// re-encoding: `DurableLog::append_raw`).
    pub fn raw(&self) -> &'a [u8] {
        self.bytes
    }

    /// The records, in offset order: borrowed when the batch is not
    /// compressed, decompressed (and checked) otherwise.
    ///
    /// # Errors
    /// `Corruption`-kind `Decompress` or `Malformed` for a compressed payload
    /// that is not what its header declares.
    pub fn records(&self) -> Result<Records<'a>, CorruptionKind> {
        let payload = self.bytes.get(BATCH_HEADER_BYTES..).unwrap_or_default();
        let section: Cow<'a, [u8]> = if self.header.compression() == COMPRESSION_ZSTD {
            let want = self.header.records_len as usize;
            let out =
                zstd::bulk::decompress(payload, want).map_err(|_| CorruptionKind::Decompress)?;
            if out.len() != want {
                return Err(CorruptionKind::Decompress);
            }
            check_records(&out, self.header.record_count)?;
            Cow::Owned(out)
        } else {
            Cow::Borrowed(payload)
        };
        Ok(Records {
            section,
            pos: 0,
            left: self.header.record_count,
        })
    }

    /// The records, copied out.
    ///
    /// # Errors
    /// As [`BatchRef::records`].
    pub fn to_vecs(&self) -> Result<Vec<Vec<u8>>, CorruptionKind> {
        let mut recs = self.records()?;
        let mut out = Vec::with_capacity(self.header.record_count as usize);
        while let Some(r) = recs.next_record() {
            out.push(r.to_vec());
        }
        Ok(out)
    }
}

/// The records of one batch (structure already checked).
#[derive(Debug)]
pub struct Records<'a> {
    section: Cow<'a, [u8]>,
    pos: usize,
    left: u32,
}

impl Records<'_> {
    /// The next record, borrowed from this iterator.
    pub fn next_record(&mut self) -> Option<&[u8]> {
        if self.left == 0 {
            return None;
        }
        let s = self.section.get(self.pos..)?;
        let (len, tail) = s.split_first_chunk::<4>()?;
        let len = u32::from_le_bytes(*len) as usize;
        let rec = tail.get(..len)?;
        self.pos += RECORD_PREFIX_BYTES + len;
        self.left -= 1;
        Some(rec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(records: &[&[u8]], compression: Compression) -> Vec<u8> {
        let mut out = Vec::new();
        BatchEncoder {
            compression,
            threshold_bytes: 0,
            max_bytes: 1 << 20,
            control: false,
        }
        .encode(&mut out, Offset(10), Epoch(3), records)
        .unwrap();
        out
    }

    #[test]
    fn round_trip_plain_and_compressed() {
        let big = vec![7u8; 5000];
        let recs: Vec<&[u8]> = vec![b"a", b"", &big, b"last"];
        for c in [Compression::None, Compression::Zstd { level: 1 }] {
            let bytes = encode(&recs, c);
            let h = verify_batch(&bytes, Salt::NONE).unwrap();
            assert_eq!(h.base_offset, Offset(10));
            assert_eq!(h.next_offset(), Offset(14));
            let b = BatchRef::new(h, &bytes);
            let got = b.to_vecs().unwrap();
            let want: Vec<Vec<u8>> = recs.iter().map(|r| r.to_vec()).collect();
            assert_eq!(got, want);
            if c != Compression::None {
                assert!(bytes.len() < 1000, "compressed: {}", bytes.len());
            }
        }
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        for c in [Compression::None, Compression::Zstd { level: 1 }] {
            let bytes = encode(&[b"hello", b"world", &[9u8; 300]], c);
            for bit in 0..bytes.len() * 8 {
                let mut bad = bytes.clone();
                bad[bit / 8] ^= 1 << (bit % 8);
                assert!(verify_batch(&bad, Salt::NONE).is_err(), "{c:?} bit {bit}");
            }
        }
    }

    #[test]
    fn control_batches_are_flagged_and_the_previous_version_is_refused() {
        let enc = BatchEncoder {
            compression: Compression::None,
            threshold_bytes: 0,
            max_bytes: 1 << 20,
            control: false,
        };
        let mut out = Vec::new();
        let h = enc
            .control()
            .encode(&mut out, Offset(4), Epoch(2), &[b"leader change"])
            .unwrap();
        let back = verify_batch(&out, Salt::NONE).unwrap();
        assert!(h.is_control() && back.is_control());
        enc.encode(&mut out, Offset(4), Epoch(2), &[b"user"])
            .unwrap();
        assert!(!verify_batch(&out, Salt::NONE).unwrap().is_control());
        // A version-2 batch (before the control flag): refused explicitly,
        // even with a valid CRC.
        out[12] = 2;
        let fields = &out[8..BATCH_HEADER_BYTES];
        let crc = crc32c::crc32c_append(crc32c::crc32c(&out[BATCH_HEADER_BYTES..]), fields);
        out[4..8].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            verify_batch(&out, Salt::NONE),
            Err(CorruptionKind::UnsupportedVersion {
                found: 2,
                supported: 3
            })
        );
    }

    #[test]
    fn a_batch_verifies_only_under_its_own_salt() {
        let mut bytes = encode(&[b"hello", b"world"], Compression::None);
        let mut h = verify_batch(&bytes, Salt::NONE).unwrap();
        let (old, new) = (Salt(0x1111_2222_3333_4444), Salt(0x5555_6666_7777_8888));
        old.restamp(Salt::NONE, &mut h, &mut bytes);
        assert!(verify_batch(&bytes, Salt::NONE).is_err());
        assert_eq!(verify_batch(&bytes, old).unwrap(), h);
        // A stale batch left by the file's earlier life (salt `old`) is
        // not a batch of its new life.
        assert!(matches!(
            verify_batch(&bytes, new),
            Err(CorruptionKind::ChecksumMismatch { .. })
        ));
        new.restamp(old, &mut h, &mut bytes);
        assert_eq!(verify_batch(&bytes, new).unwrap(), h);
    }

    #[test]
    fn bad_appends_are_typed() {
        let mut out = Vec::new();
        let none: [&[u8]; 0] = [];
        assert!(matches!(
            BatchEncoder {
                compression: Compression::None,
                threshold_bytes: 0,
                max_bytes: 100,
                control: false
            }
            .encode(&mut out, Offset(0), Epoch(0), &none),
            Err(Error::EmptyBatch)
        ));
        assert!(matches!(
            BatchEncoder {
                compression: Compression::None,
                threshold_bytes: 0,
                max_bytes: 100,
                control: false
            }
            .encode(&mut out, Offset(0), Epoch(0), &[[0u8; 200]]),
            Err(Error::BatchTooLarge { .. })
        ));
    }

    #[test]
    fn hostile_headers_never_panic() {
        let mut bytes = encode(&[b"x"], Compression::None);
        bytes[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(verify_batch(&bytes, Salt::NONE).is_err());
        assert!(verify_batch(&bytes[..10], Salt::NONE).is_err());
        assert!(verify_batch(&[], Salt::NONE).is_err());
    }
}
