//! An operator's units: epochs as the Raft implementation that wrote them
//! means them, votes as a node, times as ISO-8601.
//!
//! Which Raft wrote a group is not on disk (its application metadata is
//! the adapter's own encoding), so `--raft` says it, and `auto` (the
//! default) reads an epoch of 2^32 or more as openraft's (`term << 32 |
//! node id`: its leader id, which no other wing's epoch reaches) and any
//! other as the epoch itself.

use std::sync::OnceLock;

use quorumlog_raft::{QuorumState, Voter};
use serde_json::{json, Value};

/// The Raft implementation whose epochs are shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum Implementation {
    /// openraft for epochs of 2^32 or more, the epoch itself otherwise.
    #[default]
    Auto,
    /// openraft: the epoch is its leader id, `term << 32 | node id`.
    Openraft,
    /// raft-rs: the epoch is the term.
    RaftRs,
    /// The `KRaft`-style wing: the epoch is the leader epoch.
    Kraft,
}

static RAFT: OnceLock<Implementation> = OnceLock::new();

/// Sets the reading of epochs for this run (the first call wins).
pub(crate) fn set_raft(r: Implementation) {
    let _ = RAFT.set(r);
}

fn raft() -> Implementation {
    RAFT.get().copied().unwrap_or_default()
}

/// `base`'s fields, then `more`'s (both JSON objects; anything else in
/// `more` is ignored).
pub(crate) fn merged(mut base: Value, more: Value) -> Value {
    if let (Some(b), Value::Object(m)) = (base.as_object_mut(), more) {
        b.extend(m);
    }
    base
}

/// How `epoch` reads: (term, leader node) for openraft's, the term for
/// raft-rs's, `None` for an epoch shown as itself.
pub(crate) fn decoded(epoch: u64) -> (Option<u64>, Option<u64>) {
    match raft() {
        Implementation::Openraft => (Some(epoch >> 32), Some(epoch & 0xFFFF_FFFF)),
        Implementation::Auto if epoch >> 32 != 0 => (Some(epoch >> 32), Some(epoch & 0xFFFF_FFFF)),
        Implementation::RaftRs => (Some(epoch), None),
        Implementation::Auto | Implementation::Kraft => (None, None),
    }
}

/// An epoch for people: `term 1 (leader node 1)`, `term 7`, `epoch 7`.
pub(crate) fn epoch(epoch: u64) -> String {
    match decoded(epoch) {
        (Some(t), Some(n)) => format!("term {t} (leader node {n})"),
        (Some(t), None) => format!("term {t}"),
        _ => format!("epoch {epoch}"),
    }
}

/// An epoch's JSON fields: `epoch` as stored, and `term` and
/// `leader_node` where the epoch encodes them.
pub(crate) fn epoch_json(epoch: u64) -> Value {
    let (term, node) = decoded(epoch);
    json!({"epoch": epoch, "term": term, "leader_node": node})
}

/// A vote for people: `node 3` (and its directory id when it has one).
pub(crate) fn voter(v: &Voter) -> String {
    if v.directory_id.0 == 0 {
        format!("node {}", v.node_id.0)
    } else {
        format!("node {} (directory {:032x})", v.node_id.0, v.directory_id.0)
    }
}

/// A group's election state for people.
pub(crate) fn quorum_state(q: &QuorumState) -> String {
    let leader = q
        .leader
        .map_or_else(|| "none".to_string(), |l| format!("node {}", l.0));
    let voted = q.voted.as_ref().map_or_else(|| "none".to_string(), voter);
    format!("{}, leader {leader}, voted for {voted}", epoch(q.epoch.0))
}

/// A group's election state as JSON fields.
pub(crate) fn quorum_state_json(q: &QuorumState) -> Value {
    merged(
        epoch_json(q.epoch.0),
        json!({
            "leader": q.leader.map(|l| l.0),
            "voted_for": q.voted.as_ref().map(|v| v.node_id.0),
            "voted_directory_id": q.voted.as_ref().map(|v| format!("{:032x}", v.directory_id.0)),
        }),
    )
}

/// Milliseconds after the Unix epoch as ISO-8601 UTC,
/// `2026-12-04T12:00:00.123Z`.
pub(crate) fn iso8601_ms(ms: u64) -> String {
    let secs = ms / 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX / 2);
    let rem = secs % 86_400;
    // Days to a civil date (proleptic Gregorian), by 400-year eras.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Invariant: known instants print as ISO-8601 UTC.
    #[test]
    fn times_print_as_iso8601() {
        assert_eq!(iso8601_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(iso8601_ms(1_796_385_600_123), "2026-12-04T12:00:00.123Z");
        assert_eq!(iso8601_ms(4_107_542_399_999), "2100-02-28T23:59:59.999Z");
    }

    /// Invariant: an openraft epoch reads as its term and leader node.
    #[test]
    fn openraft_epochs_read_as_term_and_node() {
        assert_eq!(epoch(4_294_967_297), "term 1 (leader node 1)");
        assert_eq!(epoch(7), "epoch 7");
    }
}
