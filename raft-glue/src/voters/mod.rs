//! The voter set and its reassignment, as control records in the log
//! (`KIP-853`'s voter records, `KIP-455`'s reassignment semantics).
//!
//! - A [`VoterSet`] is the complete set of voters, each a (node id,
//!   directory id) pair with an optional endpoint. A node that comes back
//!   with an empty disk has a new directory id: it is not the voter it was.
//! - A [`Reassignment`] is the durable state of a change of the set:
//!   original, target, `adding = target − original`, `removing = original −
//!   target` (by voter identity), whether it is a rollback (a cancelled
//!   reassignment returning to the set before it), and when it started.
//! - [`ControlHistory`] keeps both by offset: the state in force at any
//!   offset, the latest (used at once, as in single-server changes) and the
//!   committed (below the high watermark). Suffix truncation rolls it back;
//!   a prefix cut keeps the state in force at the new log start.
//! - [`next_step`] is the leader's pure state machine: from the replicas'
//!   fetch progress and the high watermark, the next voter-set change to
//!   append (one at a time), and when to finish or resign.
//!
//! Record layout (inside a control batch, little-endian):
//!
//! ```text
//! voter set      "QLCV" version u8 (1) count u32
//!                count × (node id u64, directory id u128, endpoint length u16, endpoint UTF-8)
//! reassignment   "QLCR" version u8 (1) active u8 (0 | 1)
//!                if active: rollback u8, started ms u64, original (a voter-set body), target (a voter-set body)
//! ```
//!
//! Other control records (leader changes, snapshot markers) do not start
//! with these magics and are ignored here.

mod history;
mod plan;
mod record;

pub use history::{ControlHistory, ControlState};
pub use plan::{
    next_step, plan_cancel, plan_reassignment, status, AddingReplica, ReassignmentStatus, Step,
    StepInput,
};
pub use record::{
    ControlRecord, Reassignment, VoterEntry, VoterError, VoterSet, MAX_ENDPOINT_BYTES, MAX_VOTERS,
    MAX_VOTER_SET_BYTES,
};
