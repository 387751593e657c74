//! Fuzz-target logic, in the library so `cargo test` runs it over a fixed
//! corpus and CI needs no fuzzer.

use crate::batch::{verify_batch, BatchRef};
use crate::format::{
    decode_index, decode_segment_header, encode_index, encode_segment_header, Salt,
};

/// Arbitrary bytes as a batch (and as an index file and a segment header):
/// never panics, never allocates beyond what the input justifies (the batch
/// limit is checked before any allocation), and accepts only what
/// re-encodes to the same bytes. Returns whether a batch was accepted.
///
/// # Panics
/// On a decoder bug: an accepted value whose re-encoding differs.
pub fn decode_batch(bytes: &[u8]) -> bool {
    walk_segment_bytes(bytes);
    if let Ok((h, entries)) = decode_index(bytes) {
        assert_eq!(encode_index(&h, &entries), bytes, "index re-encodes");
    }
    if let Ok((base, salt)) = decode_segment_header(bytes) {
        assert_eq!(
            Some(&encode_segment_header(base, salt)[..]),
            bytes.get(..32),
            "segment header re-encodes"
        );
    }
    // Unsalted: what the encoder produces, before a segment salts it.
    let Ok(h) = verify_batch(bytes, Salt::NONE) else {
        return false;
    };
    let b = BatchRef::new(h, bytes);
    // Records of an accepted batch decode (uncompressed ones were checked by
    // `verify_batch`; compressed ones may still be refused, never panic).
    if let Ok(records) = b.to_vecs() {
        if h.compression() == crate::format::COMPRESSION_NONE {
            let mut again = Vec::new();
            let h2 = crate::batch::BatchEncoder {
                compression: crate::options::Compression::None,
                threshold_bytes: u64::MAX,
                max_bytes: u64::MAX,
                control: false,
            }
            .encode(&mut again, h.base_offset, h.epoch, &records)
            .ok();
            assert!(h2.is_some(), "an accepted batch re-encodes");
            assert_eq!(again, bytes, "an accepted batch re-encodes identically");
        }
    }
    true
}

/// Arbitrary bytes as the data of a segment, walked by the one batch walker
/// from each of the first positions and end to end: it never panics, never
/// reads past its limit, and what it returns is where it says.
///
/// # Panics
/// On a walker bug.
fn walk_segment_bytes(bytes: &[u8]) {
    use crate::segment::walk::{batch, slot, BufSource, DataEnd, Slot};
    use quorumlog_checkpoint::Offset;
    let limit = bytes.len() as u64;
    let mut src = BufSource {
        buf: bytes,
        start: 0,
    };
    for pos in 0..limit.min(64) {
        let Ok(found) = slot(&mut src, pos, DataEnd(limit)) else {
            continue;
        };
        match found {
            Slot::Header { position, header } => {
                assert!(
                    position >= pos && position < limit,
                    "header inside the limit"
                );
                assert!(position == pos || position % crate::format::PAGE_BYTES == 0);
                if let Ok(Ok(b)) = batch(
                    &mut src,
                    position,
                    &header,
                    header.base_offset,
                    DataEnd(limit),
                    Salt::NONE,
                ) {
                    assert_eq!(b.len(), header.batch_len as usize);
                }
            }
            Slot::Invalid { position, .. } => assert!(position >= pos && position < limit),
            Slot::End | Slot::NeedMore => {}
        }
    }
    // End to end, as recovery's scan would.
    let mut pos = 0;
    let mut expected: Option<Offset> = None;
    while let Ok(Slot::Header { position, header }) = slot(&mut src, pos, DataEnd(limit)) {
        let want = expected.unwrap_or(header.base_offset);
        let Ok(Ok(b)) = batch(
            &mut src,
            position,
            &header,
            want,
            DataEnd(limit),
            Salt::NONE,
        ) else {
            break;
        };
        let next = position + b.len() as u64;
        assert!(next > pos, "the walk advances");
        pos = next;
        expected = Some(header.next_offset());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::BatchEncoder;
    use crate::options::Compression;
    use quorumlog_checkpoint::{Epoch, Offset};

    /// The committed corpus: valid batches (plain, zstd), then every
    /// single-byte change and truncation of each.
    fn corpus() -> Vec<Vec<u8>> {
        let mut valid = Vec::new();
        for c in [Compression::None, Compression::Zstd { level: 1 }] {
            let mut out = Vec::new();
            BatchEncoder {
                compression: c,
                threshold_bytes: 0,
                max_bytes: 1 << 20,
                control: false,
            }
            .encode(
                &mut out,
                Offset(7),
                Epoch(2),
                &[b"ab".as_slice(), b"", &[3u8; 300]],
            )
            .unwrap();
            valid.push(out);
        }
        valid.push(encode_segment_header(Offset(9), Salt(0x5eed_0001_0000_0001)).to_vec());
        let mut out = valid.clone();
        for v in &valid {
            for i in 0..v.len() {
                let mut b = v.clone();
                b[i] = b[i].wrapping_add(0x3D);
                out.push(b);
                out.push(v[..i].to_vec());
            }
        }
        out.push(vec![0xFF; 100]);
        // Segment images: a batch ending 5 bytes before a page boundary,
        // sync padding, the next batch on the next page; and the same with
        // a non-zero byte in the padding.
        let mut first = Vec::new();
        BatchEncoder {
            compression: Compression::None,
            threshold_bytes: u64::MAX,
            max_bytes: 1 << 20,
            control: false,
        }
        .encode(&mut first, Offset(0), Epoch(1), &[vec![1u8; 4096 - 44 - 5]])
        .unwrap();
        let mut second = Vec::new();
        BatchEncoder {
            compression: Compression::None,
            threshold_bytes: u64::MAX,
            max_bytes: 1 << 20,
            control: false,
        }
        .encode(&mut second, Offset(1), Epoch(1), &[b"second"])
        .unwrap();
        let mut image = first;
        image.resize(4096, 0);
        image.extend_from_slice(&second);
        out.push(image.clone());
        image[4093] = 1;
        out.push(image);
        out
    }

    #[test]
    fn corpus_never_panics_and_only_valid_batches_decode() {
        let accepted = corpus().iter().filter(|b| decode_batch(b)).count();
        assert_eq!(accepted, 2, "exactly the two valid batches");
    }
}
