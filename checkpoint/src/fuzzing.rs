//! Fuzz-target logic, kept in the library so plain `cargo test` runs it over a
//! fixed corpus and CI needs no fuzzer.

use crate::epoch_map::EpochMap;
use crate::meta::Meta;
use crate::points::{HighWatermark, LogStartOffset, RecoveryPoint};
use crate::quorum_state::QuorumState;
use crate::small_file::SmallFile;

fn check<F: SmallFile>(bytes: &[u8]) -> bool {
    match F::decode(bytes) {
        Ok(v) => {
            // Valid only if it re-encodes identically (canonical encoding).
            assert_eq!(v.encode(), bytes, "{} decoded non-canonical bytes", F::NAME);
            true
        }
        Err(_) => false,
    }
}

/// Decodes `bytes` as every kind of small file. Never panics on any input,
/// except to report a decoded value that does not re-encode to `bytes`.
/// Returns how many kinds accepted it (at most one: magics differ).
///
/// # Panics
/// On a decoder bug: a value decoded from bytes it does not re-encode to, or
/// bytes accepted by two kinds.
pub fn decode_checkpoint(bytes: &[u8]) -> usize {
    let accepted = [
        check::<Meta>(bytes),
        check::<QuorumState>(bytes),
        check::<RecoveryPoint>(bytes),
        check::<HighWatermark>(bytes),
        check::<LogStartOffset>(bytes),
        check::<EpochMap>(bytes),
    ]
    .iter()
    .filter(|&&a| a)
    .count();
    assert!(accepted <= 1, "bytes accepted as two kinds of file");
    accepted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Vote;
    use crate::types::{ClusterId, DirectoryId, Epoch, NodeId, Offset};

    /// The committed corpus: one valid file of each kind, then every
    /// single-byte corruption and truncation of each (a few thousand inputs).
    fn corpus() -> Vec<Vec<u8>> {
        let mut em = EpochMap::new();
        em.assign(Epoch(1), Offset(0)).unwrap();
        em.assign(Epoch(4), Offset(9)).unwrap();
        let valid = vec![
            Meta::new(ClusterId(1), NodeId(2), DirectoryId(3)).encode(),
            QuorumState {
                epoch: Epoch(7),
                leader: Some(NodeId(1)),
                voted: Some(Vote {
                    node_id: NodeId(1),
                    directory_id: DirectoryId(5),
                }),
            }
            .encode(),
            RecoveryPoint {
                offset: Offset(3),
                segment: Offset(0),
                position: 99,
            }
            .encode(),
            HighWatermark(Offset(8)).encode(),
            LogStartOffset {
                offset: Offset(2),
                purged_epoch: Some(crate::types::Epoch(1)),
            }
            .encode(),
            em.encode(),
        ];
        let mut out = valid.clone();
        for v in &valid {
            for i in 0..v.len() {
                let mut b = v.clone();
                b[i] = b[i].wrapping_add(0x5B);
                out.push(b);
                out.push(v[..i].to_vec());
            }
        }
        out.push(vec![0xFF; 64]);
        out
    }

    #[test]
    fn corpus_never_panics_and_only_valid_files_decode() {
        let corpus = corpus();
        let accepted: usize = corpus.iter().map(|b| decode_checkpoint(b)).sum();
        assert_eq!(accepted, 6, "exactly the six valid files decode");
    }
}
