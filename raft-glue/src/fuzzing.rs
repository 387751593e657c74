//! Fuzz-target logic, kept in the library so plain `cargo test` runs it
//! over a fixed corpus and CI needs no fuzzer: the node's two decoders
//! (`groups.ckpt` and the node record header).

/// Decodes `bytes` as a node checkpoint and as a node record header.
/// Never panics on any input, except to report a decoder bug: a header
/// that does not re-encode to `bytes`, a checkpoint that re-encodes to
/// another length or does not round-trip again (its groups may be in any
/// order). Returns how many of the two accepted it.
///
/// # Panics
/// On a decoder bug: a value decoded from bytes it does not re-encode to.
pub fn decode_node(bytes: &[u8]) -> usize {
    let mut accepted = 0;
    if let Ok(c) = crate::node::ckpt::ckpt_decode(bytes) {
        // Groups may come in any order (version 1 files were first written
        // in hash order); re-encoded they are in id order, and a second
        // round trip must change nothing.
        let once = crate::node::ckpt::ckpt_encode(&c);
        assert_eq!(
            once.len(),
            bytes.len(),
            "a node checkpoint re-encodes to another length"
        );
        let again =
            crate::node::ckpt::ckpt_decode(&once).map(|c| crate::node::ckpt::ckpt_encode(&c));
        assert_eq!(
            again.as_deref(),
            Ok(once.as_slice()),
            "a node checkpoint does not round-trip"
        );
        accepted += 1;
    }
    if let Ok(h) = crate::node::record::Header::decode(bytes) {
        assert_eq!(
            h.encode().as_slice(),
            bytes,
            "a node record header is not canonical"
        );
        accepted += 1;
    }
    accepted
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed corpus: a valid checkpoint and header, then every
    /// one-byte change and every cut of them.
    fn corpus() -> Vec<Vec<u8>> {
        let mut seeds = vec![
            crate::node::ckpt::ckpt_sample(),
            crate::node::ckpt::record_sample(),
        ];
        let mut out = Vec::new();
        for s in seeds.drain(..) {
            for i in 0..s.len() {
                for bit in [0x01u8, 0x80] {
                    let mut b = s.clone();
                    if let Some(x) = b.get_mut(i) {
                        *x ^= bit;
                    }
                    out.push(b);
                }
                out.push(s.get(..i).unwrap_or_default().to_vec());
            }
            out.push(s);
        }
        out
    }

    #[test]
    fn the_corpus_never_panics_and_the_valid_inputs_decode() {
        let corpus = corpus();
        let accepted = corpus.iter().filter(|b| decode_node(b) > 0).count();
        // The two valid seeds at least; a flipped bit inside the
        // checkpoint is caught by its checksums, not every header flip.
        assert!(accepted >= 2, "{accepted}");
        assert_eq!(decode_node(&crate::node::ckpt::ckpt_sample()), 1);
        assert_eq!(decode_node(&crate::node::ckpt::record_sample()), 1);
    }
}
