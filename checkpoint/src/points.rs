//! The single-value checkpoints: recovery point, high watermark, log start
//! offset.
//!
//! Bodies:
//! ```text
//! recovery-point     offset u64 | segment base offset u64 | byte position u64
//! high-watermark     offset u64
//! log-start-offset   offset u64
//! ```

use crate::error::CorruptionKind;
use crate::format::{magic, Reader, Writer};
use crate::small_file::SmallFile;
use crate::types::Offset;

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

/// The first offset still in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogStartOffset(pub Offset);

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
        self.0 .0.to_le_bytes().to_vec()
    }

    fn decode_body(body: &[u8]) -> Result<Self, CorruptionKind> {
        decode_offset(body).map(LogStartOffset)
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
        let ls = LogStartOffset(Offset(5));
        assert_eq!(LogStartOffset::decode(&ls.encode()).unwrap(), ls);
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        flips_detected(&RecoveryPoint {
            offset: Offset(100),
            segment: Offset(64),
            position: 4096,
        });
        flips_detected(&HighWatermark(Offset(77)));
        flips_detected(&LogStartOffset(Offset(5)));
    }

    #[test]
    fn one_kind_never_decodes_as_another() {
        let hw = HighWatermark(Offset(1)).encode();
        assert!(matches!(
            LogStartOffset::decode(&hw),
            Err(CorruptionKind::BadMagic { .. })
        ));
    }

    #[test]
    fn recovery_point_with_segment_above_offset_is_malformed() {
        let mut w = Writer::new();
        w.u64(1).u64(2).u64(0);
        assert!(RecoveryPoint::decode_body(&w.finish()).is_err());
    }
}
