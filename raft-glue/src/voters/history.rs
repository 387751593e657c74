//! The control state in force after a prefix of the log, and its history
//! by offset (rolled back by truncation, folded at prefix cuts).

use std::collections::BTreeMap;

use quorumlog_checkpoint::Offset;
use quorumlog_io::codec::{u32_len, Reader};

use super::record::{ControlRecord, Reassignment, VoterSet};

/// The voter set and reassignment in force after some prefix of the log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ControlState {
    /// The voter set (none before the first voter-set record).
    pub voters: Option<VoterSet>,
    /// The reassignment in progress.
    pub reassignment: Option<Reassignment>,
}

impl ControlState {
    fn apply(&mut self, rec: &ControlRecord) {
        match rec {
            ControlRecord::VoterSet(s) => self.voters = Some(s.clone()),
            ControlRecord::Reassignment(r) => self.reassignment.clone_from(r),
        }
    }

    /// Encodes the state as a record sequence (a voter set, then a
    /// reassignment), for snapshots and the history file.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for rec in [
            self.voters.clone().map(ControlRecord::VoterSet),
            Some(ControlRecord::Reassignment(self.reassignment.clone())),
        ]
        .into_iter()
        .flatten()
        {
            let bytes = rec.encode();
            out.extend_from_slice(&u32_len(bytes.len()).to_le_bytes());
            out.extend_from_slice(&bytes);
        }
        out
    }

    /// Decodes [`ControlState::encode`]'s bytes.
    pub fn decode(bytes: &[u8]) -> Option<ControlState> {
        let mut r = Reader::new(bytes);
        let mut st = ControlState::default();
        while r.remaining() > 0 {
            let len = usize::try_from(r.u32().ok()?).ok()?;
            st.apply(&ControlRecord::decode(r.bytes(len).ok()?)?);
        }
        Some(st)
    }
}

/// The control records by offset, above a base state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ControlHistory {
    /// The offset the base state is in force at (the log start, or a
    /// snapshot's end), and that state.
    base: (Offset, ControlState),
    /// Records at offsets at or above the base offset.
    records: BTreeMap<Offset, ControlRecord>,
}

impl ControlHistory {
    /// A history starting at `offset` in `state`.
    pub fn new(offset: Offset, state: ControlState) -> ControlHistory {
        ControlHistory {
            base: (offset, state),
            records: BTreeMap::new(),
        }
    }

    /// The base offset.
    pub fn base_offset(&self) -> Offset {
        self.base.0
    }

    /// The state in force at the base offset.
    pub fn base_state(&self) -> &ControlState {
        &self.base.1
    }

    /// The records, in offset order.
    pub fn records(&self) -> impl Iterator<Item = (Offset, &ControlRecord)> {
        self.records.iter().map(|(o, r)| (*o, r))
    }

    /// Notes record `rec` at `offset` (at or above the base).
    pub fn record(&mut self, offset: Offset, rec: ControlRecord) {
        if offset >= self.base.0 {
            self.records.insert(offset, rec);
        }
    }

    /// The state in force at `offset`: every record at or below it
    /// applied (a record is in force from its own offset on).
    pub fn state_at(&self, offset: Offset) -> ControlState {
        let mut st = self.base.1.clone();
        for (_, rec) in self.records.range(..=offset) {
            st.apply(rec);
        }
        st
    }

    /// The latest state (every record applied).
    pub fn latest(&self) -> ControlState {
        self.state_at(Offset(u64::MAX))
    }

    /// The state committed below `high_watermark`.
    pub fn committed(&self, high_watermark: Offset) -> ControlState {
        match high_watermark.0.checked_sub(1) {
            Some(last) => self.state_at(Offset(last)),
            None => self.base.1.clone(),
        }
    }

    /// The offset of the latest voter-set record, if any is in the history
    /// (not the base).
    pub fn latest_voter_change(&self) -> Option<Offset> {
        self.records
            .iter()
            .rev()
            .find(|(_, r)| matches!(r, ControlRecord::VoterSet(_)))
            .map(|(o, _)| *o)
    }

    /// The latest record of any kind, if any.
    pub fn latest_change(&self) -> Option<Offset> {
        self.records.keys().next_back().copied()
    }

    /// Suffix truncation: records at or above `offset` are gone.
    pub fn truncate_to(&mut self, offset: Offset) {
        self.records.split_off(&offset);
    }

    /// Prefix cut: the state in force just below `start` becomes the base.
    pub fn cut_prefix(&mut self, start: Offset) {
        if start <= self.base.0 {
            return;
        }
        let keep = self.records.split_off(&start);
        for rec in self.records.values() {
            self.base.1.apply(rec);
        }
        self.records = keep;
        self.base.0 = start;
    }

    /// Restart at `offset` in `state` (a log restarted at a snapshot).
    pub fn restart(&mut self, offset: Offset, state: ControlState) {
        *self = ControlHistory::new(offset, state);
    }
}
