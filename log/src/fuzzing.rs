//! Fuzz-target logic, in the library so `cargo test` runs it over a fixed
//! corpus and CI needs no fuzzer.

use crate::batch::{verify_batch, BatchRef};
use crate::format::{decode_index, decode_segment_header, encode_index, encode_segment_header};

/// Arbitrary bytes as a batch (and as an index file and a segment header):
/// never panics, never allocates beyond what the input justifies (the batch
/// limit is checked before any allocation), and accepts only what
/// re-encodes to the same bytes. Returns whether a batch was accepted.
///
/// # Panics
/// On a decoder bug: an accepted value whose re-encoding differs.
pub fn decode_batch(bytes: &[u8]) -> bool {
    if let Ok((h, entries)) = decode_index(bytes) {
        assert_eq!(encode_index(&h, &entries), bytes, "index re-encodes");
    }
    if let Ok(base) = decode_segment_header(bytes) {
        assert_eq!(
            &encode_segment_header(base)[..],
            &bytes[..32],
            "segment header re-encodes"
        );
    }
    let Ok(h) = verify_batch(bytes) else {
        return false;
    };
    let b = BatchRef::new(h, bytes);
    // Records of an accepted batch decode (uncompressed ones were checked by
    // `verify_batch`; compressed ones may still be refused, never panic).
    if let Ok(records) = b.to_vecs() {
        if h.compression() == crate::format::COMPRESSION_NONE {
            let mut again = Vec::new();
            let h2 = crate::batch::encode_into(
                &mut again,
                h.base_offset,
                h.epoch,
                &records,
                crate::options::Compression::None,
                u64::MAX,
                u64::MAX,
            )
            .ok();
            assert!(h2.is_some(), "an accepted batch re-encodes");
            assert_eq!(again, bytes, "an accepted batch re-encodes identically");
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::encode_into;
    use crate::options::Compression;
    use quorumlog_checkpoint::{Epoch, Offset};

    /// The committed corpus: valid batches (plain, zstd), then every
    /// single-byte change and truncation of each.
    fn corpus() -> Vec<Vec<u8>> {
        let mut valid = Vec::new();
        for c in [Compression::None, Compression::Zstd { level: 1 }] {
            let mut out = Vec::new();
            encode_into(
                &mut out,
                Offset(7),
                Epoch(2),
                &[b"ab".as_slice(), b"", &[3u8; 300]],
                c,
                0,
                1 << 20,
            )
            .unwrap();
            valid.push(out);
        }
        valid.push(encode_segment_header(Offset(9)).to_vec());
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
        out
    }

    #[test]
    fn corpus_never_panics_and_only_valid_batches_decode() {
        let accepted = corpus().iter().filter(|b| decode_batch(b)).count();
        assert_eq!(accepted, 2, "exactly the two valid batches");
    }
}
