//! The fold: a group's state is the fold of its records in log order, and
//! the same function applies a record when it is placed (`Inner::place`)
//! and when an open replays the log after the checkpoint, so runtime and
//! recovery cannot disagree.
//!
//! Invariants, checked here: the fold's end only grows (each batch once,
//! in log order); a group's runs are contiguous (`GroupState::append`);
//! the watermarks never move back; a record whose offsets would wrap is
//! damage; the checkpoint's position lies inside the log.

use quorumlog_checkpoint::{Epoch, Offset, QuorumState, SmallFile};
use quorumlog_log::DurableLog;

use super::index::{GroupState, Run};
use super::record::{Header, Kind};
use super::NodeState;
use crate::error::{Error, Result};

/// Folds the batches of `log` from `from` into `state`. Returns the
/// batches and bytes read.
pub(super) fn replay(log: &DurableLog, state: &mut NodeState, from: u64) -> Result<(u64, u64)> {
    let (mut batches, mut bytes) = (0u64, 0u64);
    let mut at = Offset(from);
    let end = log.log_end_offset();
    while at < end {
        let read = log.read(at, 8 << 20)?;
        let Some(next) = read.next_offset() else {
            break;
        };
        for b in read.iter() {
            if b.next_offset() <= at {
                continue;
            }
            let base = b.base_offset().0;
            let corrupt = |what| Error::NodeCorrupt {
                group: None,
                offset: Offset(base),
                what,
            };
            let mut records = b
                .records()
                .map_err(|_| corrupt("a node batch's records do not decode"))?;
            let head = records
                .next_record()
                .ok_or_else(|| corrupt("a node batch without its header"))?;
            let h = Header::decode(head).map_err(corrupt)?;
            let payload = records.next_record();
            let len = u32::try_from(b.raw().len()).unwrap_or(u32::MAX);
            fold(state, &h, base, b.record_count() - 1, len, payload).map_err(|what| {
                Error::NodeCorrupt {
                    group: Some(h.group),
                    offset: Offset(h.offset),
                    what,
                }
            })?;
            batches += 1;
            bytes += u64::from(len);
        }
        at = next;
    }
    Ok((batches, bytes))
}

/// Applies one node record (its batch at shared offset `base`, with
/// `count` records after the header) to the state: the one fold, at
/// runtime and at recovery.
///
/// # Errors
/// What breaks the format's rules, as a phrase.
/// Refuses a checkpoint at `position` outside a log of `[start, end]`.
pub(super) fn check_position(position: u64, start: u64, end: u64) -> Result<()> {
    if position < start {
        return Err(Error::NodeCorrupt {
            group: None,
            offset: Offset(position),
            what: "the checkpoint is older than the log's start",
        });
    }
    if position > end {
        return Err(Error::NodeCorrupt {
            group: None,
            offset: Offset(position),
            what: "the log ends before the checkpoint's position",
        });
    }
    Ok(())
}

/// Checks each group's live runs against the shared log's start: every
/// entry a group holds must be in the log, or covered by the group's
/// latest snapshot (a crash may lose entries a snapshot already holds;
/// the group's open then continues from the snapshot). Anything else means
/// the log lost what the group needs (a cut or a lost segment): refused,
/// naming the group and its first missing entry, before anything is
/// changed. `snapshot_end` reads a group's latest snapshot's end without
/// changing anything; it is asked only of a group with missing entries.
pub(super) fn check_runs<'a>(
    groups: impl IntoIterator<Item = (&'a u64, &'a GroupState)>,
    log_start: u64,
    snapshot_end: impl Fn(u64) -> Option<u64>,
) -> Result<()> {
    for (id, g) in groups {
        let mut live = g.runs.iter().filter(|r| r.end() > g.start);
        let Some(first) = live.clone().next() else {
            continue;
        };
        let at = first.offset.max(g.start);
        if first.shared_at(at) >= log_start {
            continue;
        }
        // The group offset where its entries in the log begin again.
        let lost_end = live
            .find(|r| r.shared_end() > log_start)
            .map_or(g.end, |r| {
                let from = r.offset.max(g.start);
                from + log_start
                    .saturating_sub(r.shared_at(from))
                    .min(u64::from(r.count))
            });
        if snapshot_end(*id).is_some_and(|end| end >= lost_end) {
            continue;
        }
        return Err(Error::NodeCorrupt {
            group: Some(*id),
            offset: Offset(at),
            what: "the group's entries start below the shared log's start, and no snapshot covers them",
        });
    }
    Ok(())
}

pub(crate) fn fold(
    st: &mut NodeState,
    h: &Header,
    base: u64,
    count: u32,
    bytes: u32,
    payload: Option<&[u8]>,
) -> std::result::Result<(), &'static str> {
    // The fold's end only grows: each batch once, in log order (`count`
    // counts its records after the header). Read from a directory, a batch
    // out of order is damage; placed at run time, a bug (`place`).
    if base < st.folded_end {
        return Err("a batch before the end of those already folded");
    }
    st.folded_end = base + 1 + u64::from(count);
    if h.kind == Kind::Create {
        if st.groups.contains_key(&h.group) || st.dropped.contains(&h.group) {
            return Err("a group created twice");
        }
        st.groups.insert(h.group, GroupState::new(h.offset));
        return Ok(());
    }
    if h.kind == Kind::Drop {
        if st.groups.remove(&h.group).is_none() {
            return Err("a drop of a group that does not exist");
        }
        st.dropped.insert(h.group);
        st.queued_hw.remove(&h.group);
        return Ok(());
    }
    let g = st
        .groups
        .get_mut(&h.group)
        .ok_or("a record of a group that does not exist")?;
    if matches!(h.kind, Kind::Entries | Kind::Rewrite)
        && h.offset.checked_add(u64::from(count)).is_none()
    {
        // Offsets never wrap: an append that would is refused before it is
        // written, so such a record is damage.
        return Err("entries whose offsets pass the offset space");
    }
    match h.kind {
        Kind::Create | Kind::Drop => {}
        Kind::Entries => {
            if count == 0 {
                return Err("an entries batch without entries");
            }
            g.append(Run {
                offset: h.offset,
                shared: base + 1,
                epoch: h.epoch,
                count,
                bytes: Run::bytes_field(u64::from(bytes), h.control),
            })
            .map_err(|_| "entries that do not continue the group's log")?;
        }
        Kind::Rewrite => rewrite_fold(
            g,
            Run {
                offset: h.offset,
                shared: base + 1,
                epoch: h.epoch,
                count,
                bytes: Run::bytes_field(u64::from(bytes), h.control),
            },
        ),
        Kind::Truncate => g.truncate(h.offset),
        Kind::Purge => g.purge(h.offset, Epoch(h.epoch)),
        Kind::Reset => g.reset(h.offset, Some(Epoch(h.epoch))),
        Kind::Vote => {
            let body = payload.ok_or("a vote record without its state")?;
            g.vote = QuorumState::decode_body(body).map_err(|_| "a vote that does not decode")?;
        }
        Kind::HighWatermark => fold_high_watermark(g, h.offset),
        Kind::AppMetadata => {
            g.app_meta = Some(
                payload
                    .ok_or("a metadata record without its bytes")?
                    .to_vec(),
            );
        }
    }
    Ok(())
}

/// A high watermark record's fold: both watermarks rise to `offset`
/// (clamped to the log), never back.
fn fold_high_watermark(g: &mut GroupState, offset: u64) {
    let before = (g.durable_hw, g.hw);
    let h = offset.min(g.end);
    g.durable_hw = Some(g.durable_hw.map_or(h, |d| d.max(h)));
    g.hw = Some(g.hw.map_or(h, |d| d.max(h)));
    assert!(
        g.durable_hw >= before.0 && g.hw >= before.1,
        "a high watermark record never moves the watermark back"
    );
}

/// A rewrite's fold: its copy replaces the older one where the entries
/// are still in the log (a rewrite of entries since purged or truncated
/// moves nothing).
fn rewrite_fold(g: &mut GroupState, run: Run) {
    let (a, b) = (run.offset.max(g.start), run.end().min(g.end));
    if a < b {
        let mut clipped = run;
        clipped.shared = run.shared_at(a);
        clipped.offset = a;
        clipped.count = u32::try_from(b - a).unwrap_or(0);
        g.relocate(clipped);
    }
}
