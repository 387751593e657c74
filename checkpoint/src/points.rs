//! The single-value checkpoints: recovery point, high watermark, log start
//! offset.
//!
//! Bodies:
//! ```text
//! recovery-point     offset u64 | segment base offset u64 | byte position u64
//! high-watermark     offset u64
//! log-start-offset   offset u64 [| purged epoch u64]
//! ```

use crate::error::CorruptionKind;
use crate::format::{magic, Reader, Writer};
use crate::small_file::SmallFile;
use crate::types::{Epoch, Offset};

/// Everything below `offset` was durable and verified when this was written;
/// recovery resumes scanning segment `segment` at byte `position`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecoveryPoint {
    /// The first offset not covered.
    pub offset: Offset,
    /// The base offset of the segment holding `offset`.
    pub segment: Offset,
    /// The byte position in that segment where `offset`'s batch starts.
    pub position: u64,
}

/// The commit offset supplied by the Raft layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HighWatermark(pub Offset);

/// The first offset still in the log, with the epoch of the entry just
/// below it when it was deleted with a known epoch (so a Raft library's
/// "last purged log id" survives any purge point).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogStartOffset {
    /// The first offset in the log.
    pub offset: Offset,
    /// The epoch of the entry at `offset - 1`, if known (the 8-byte body
    /// written before it existed, or a start nothing was deleted below,
    /// carries none).
    pub purged_epoch: Option<Epoch>,
}

impl SmallFile for RecoveryPoint {
    const MAGIC: [u8; 4] = magic::RECOVERY_POINT;
    const NAME: &'static str = "checkpoints/recovery-point";

    fn encode_body(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.u64(self.offset.0).u64(self.segment.0).u64(self.position);
        w.finish()
    }

    fn decode_body(body: &[u8]) -> Result<Self, CorruptionKind> {
        let mut r = Reader::new(body);
        let rp = RecoveryPoint {
            offset: Offset(r.u64()?),
            segment: Offset(r.u64()?),
            position: r.u64()?,
        };
        r.finish()?;
        if rp.segment > rp.offset {
            return Err(CorruptionKind::Malformed("segment base above the offset"));
        }
        Ok(rp)
    }
}

fn decode_offset(body: &[u8]) -> Result<Offset, CorruptionKind> {
    let mut r = Reader::new(body);
    let o = Offset(r.u64()?);
    r.finish()?;
    Ok(o)
}

impl SmallFile for HighWatermark {
    const MAGIC: [u8; 4] = magic::HIGH_WATERMARK;
    const NAME: &'static str = "checkpoints/high-watermark";

    fn encode_body(&self) -> Vec<u8> {
        self.0 .0.to_le_bytes().to_vec()
    }

    fn decode_body(body: &[u8]) -> Result<Self, CorruptionKind> {
        decode_offset(body).map(HighWatermark)
    }
}

impl SmallFile for LogStartOffset {
    const MAGIC: [u8; 4] = magic::LOG_START_OFFSET;
    const NAME: &'static str = "checkpoints/log-start-offset";

    fn encode_body(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.u64(self.offset.0);
        if let Some(e) = self.purged_epoch {
            w.u64(e.0);
        }
        w.finish()
    }

    fn decode_body(body: &[u8]) -> Result<Self, CorruptionKind> {
        let mut r = Reader::new(body);
        let offset = Offset(r.u64()?);
        let purged_epoch = if r.remaining() == 0 {
            None
        } else {
            Some(Epoch(r.u64()?))
        };
        r.finish()?;
        if purged_epoch.is_some() && offset == Offset(0) {
            return Err(CorruptionKind::Malformed("a purged epoch below offset 0"));
        }
        Ok(LogStartOffset {
            offset,
            purged_epoch,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flips_detected<F: SmallFile>(v: &F) {
        let bytes = v.encode();
        for bit in 0..bytes.len() * 8 {
            let mut bad = bytes.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(F::decode(&bad).is_err(), "{} bit {bit}", F::NAME);
        }
    }

    #[test]
    fn round_trips() {
        let rp = RecoveryPoint {
            offset: Offset(100),
            segment: Offset(64),
            position: 4096,
        };
        assert_eq!(RecoveryPoint::decode(&rp.encode()).unwrap(), rp);
        let hw = HighWatermark(Offset(77));
        assert_eq!(HighWatermark::decode(&hw.encode()).unwrap(), hw);
        for purged_epoch in [None, Some(Epoch(3))] {
            let ls = LogStartOffset {
                offset: Offset(5),
                purged_epoch,
            };
            assert_eq!(LogStartOffset::decode(&ls.encode()).unwrap(), ls);
        }
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        flips_detected(&RecoveryPoint {
            offset: Offset(100),
            segment: Offset(64),
            position: 4096,
        });
        flips_detected(&HighWatermark(Offset(77)));
        flips_detected(&LogStartOffset {
            offset: Offset(5),
            purged_epoch: Some(Epoch(2)),
        });
    }

    #[test]
    fn one_kind_never_decodes_as_another() {
        let hw = HighWatermark(Offset(1)).encode();
        assert!(matches!(
            LogStartOffset::decode(&hw),
            Err(CorruptionKind::BadMagic { .. })
        ));
    }

    /// The body written before the purged epoch existed (8 bytes) is read
    /// as a start with no known purged epoch; any other length is refused.
    #[test]
    fn log_start_bodies_of_both_lengths_and_no_other() {
        let mut w = Writer::new();
        w.u64(9);
        assert_eq!(
            LogStartOffset::decode_body(&w.finish()).unwrap(),
            LogStartOffset {
                offset: Offset(9),
                purged_epoch: None
            }
        );
        for len in [0usize, 4, 12, 20, 24] {
            assert!(
                LogStartOffset::decode_body(&vec![1u8; len]).is_err(),
                "{len} bytes"
            );
        }
        let mut w = Writer::new();
        w.u64(0).u64(1);
        assert!(LogStartOffset::decode_body(&w.finish()).is_err());
    }

    #[test]
    fn recovery_point_with_segment_above_offset_is_malformed() {
        let mut w = Writer::new();
        w.u64(1).u64(2).u64(0);
        assert!(RecoveryPoint::decode_body(&w.finish()).is_err());
    }
}
