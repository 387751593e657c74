//! `groups.ckpt`: every group's state as of one position of the shared
//! log, so a reopen replays only the log written after it.
//!
//! Layout (little-endian; docs/format.md, "The node checkpoint"):
//! ```text
//! magic       [u8; 4] "QLGC"
//! version     u32     (1)
//! body length u64
//! body CRC32C u32
//! header CRC  u32     (CRC32C of the 20 bytes before it)
//! body:
//!   position  u64      replay starts here (every record below is folded in)
//!   groups    u64      count, then per group:
//!     id u64, start u64, end u64,
//!     purged u8 (0/1), purged offset u64, purged epoch u64,
//!     hw u8 (0/1), hw u64,
//!     vote length u32, vote (the quorum-state body),
//!     metadata u8 (0/1), metadata length u32, metadata,
//!     runs u64, runs × (offset u64, shared u64, epoch u64, count u32, bytes u32)
//!   dropped   u64      count, then the dropped ids (u64 each, ascending)
//! ```
//! Written by atomic replace (temp file, sync, rename, directory sync)
//! only once the log is durable up to `position`.

use std::collections::{BTreeSet, VecDeque};

use quorumlog_checkpoint::{Epoch, Offset, QuorumState, SmallFile};
use quorumlog_io::codec::{Reader, Writer};

use std::path::Path;

use quorumlog_checkpoint::SharedFs;
use quorumlog_io::OpenMode;

use super::index::{GroupState, IdMap, Run};
use super::record::Header;
#[cfg(test)]
use super::record::Kind;
use super::NODE_EPOCH;
use crate::error::{Error, Result};

/// The file's name in the data directory.
pub(crate) const FILE_NAME: &str = "groups.ckpt";
const MAGIC: [u8; 4] = *b"QLGC";
const VERSION: u32 = 1;
const HEADER_BYTES: usize = 24;

/// What a checkpoint holds.
#[derive(Debug, Default)]
pub(crate) struct Checkpoint {
    pub(crate) position: u64,
    pub(crate) groups: IdMap<GroupState>,
    pub(crate) dropped: BTreeSet<u64>,
}

/// Encodes the checkpoint of `groups` and `dropped` at `position`.
pub(crate) fn encode<'a>(
    position: u64,
    groups: impl ExactSizeIterator<Item = (&'a u64, &'a GroupState)>,
    dropped: &BTreeSet<u64>,
) -> Vec<u8> {
    let mut w = Writer::new();
    w.u64(position).u64(groups.len() as u64);
    // In id order: the same state always encodes to the same bytes.
    let mut groups: Vec<_> = groups.collect();
    groups.sort_unstable_by_key(|(id, _)| **id);
    for (&id, g) in groups {
        w.u64(id).u64(g.start).u64(g.end);
        match g.last_purged {
            Some((o, e)) => w.u8(1).u64(o.0).u64(e.0),
            None => w.u8(0).u64(0).u64(0),
        };
        // The watermark in memory: the log is durable to `position`, which
        // covers every entry below `end`.
        match g.hw {
            Some(h) => w.u8(1).u64(h),
            None => w.u8(0).u64(0),
        };
        let vote = g.vote.encode_body();
        w.u32(quorumlog_io::codec::u32_len(vote.len())).bytes(&vote);
        match &g.app_meta {
            Some(m) => w.u8(1).u32(quorumlog_io::codec::u32_len(m.len())).bytes(m),
            None => w.u8(0).u32(0),
        };
        let live: Vec<&Run> = g.runs.iter().filter(|r| r.end() > g.start).collect();
        w.u64(live.len() as u64);
        for r in live {
            w.u64(r.offset)
                .u64(r.shared)
                .u64(r.epoch)
                .u32(r.count)
                .u32(r.bytes);
        }
    }
    w.u64(dropped.len() as u64);
    for id in dropped {
        w.u64(*id);
    }
    let body = w.finish();
    let mut out = Writer::with_capacity(HEADER_BYTES + body.len());
    out.bytes(&MAGIC)
        .u32(VERSION)
        .u64(body.len() as u64)
        .u32(crc32c::crc32c(&body));
    let head_crc = crc32c::crc32c(out.as_slice());
    out.u32(head_crc).bytes(&body);
    out.finish()
}

/// Decodes a checkpoint file.
///
/// # Errors
/// What is wrong, as a phrase (the caller names the file).
pub(crate) fn decode(bytes: &[u8]) -> Result<Checkpoint, &'static str> {
    let short = |_| "checkpoint ends early";
    let mut head_reader = Reader::new(bytes);
    let head = bytes
        .get(..HEADER_BYTES - 4)
        .ok_or("checkpoint header ends early")?;
    let hr = &mut head_reader;
    if hr.array::<4>().map_err(short)? != MAGIC {
        return Err("not a node checkpoint (bad magic)");
    }
    if hr.u32().map_err(short)? != VERSION {
        return Err("unknown node checkpoint version");
    }
    let len = hr.u64().map_err(short)?;
    let body_crc = hr.u32().map_err(short)?;
    if hr.u32().map_err(short)? != crc32c::crc32c(head) {
        return Err("node checkpoint header checksum mismatch");
    }
    let body = hr.rest();
    if u64::try_from(body.len()).ok() != Some(len) {
        return Err("node checkpoint length does not match its header");
    }
    if crc32c::crc32c(body) != body_crc {
        return Err("node checkpoint body checksum mismatch");
    }
    let mut r = Reader::new(body);
    let mut out = Checkpoint {
        position: r.u64().map_err(short)?,
        ..Checkpoint::default()
    };
    let groups = r.u64().map_err(short)?;
    // Any order: version 1 files were first written in hash order (the
    // golden node directories hold such files); written in id order now.
    for _ in 0..groups {
        let (id, g) = decode_group(&mut r)?;
        if out.groups.insert(id, g).is_some() {
            return Err("node checkpoint names a group twice");
        }
    }
    let dropped = r.u64().map_err(short)?;
    for _ in 0..dropped {
        let id = r.u64().map_err(short)?;
        if out.dropped.last().is_some_and(|l| id <= *l) {
            return Err("node checkpoint dropped ids not in ascending order");
        }
        out.dropped.insert(id);
    }
    if r.remaining() != 0 {
        return Err("node checkpoint has trailing bytes");
    }
    Ok(out)
}

/// One group's entry of the checkpoint body.
fn decode_group(r: &mut Reader<'_>) -> Result<(u64, GroupState), &'static str> {
    let short = |_| "checkpoint ends early";
    let id = r.u64().map_err(short)?;
    let (start, end) = (r.u64().map_err(short)?, r.u64().map_err(short)?);
    if start > end {
        return Err("node checkpoint group starts after its end");
    }
    let mut g = GroupState::new(start);
    g.end = end;
    g.durable_end = end;
    let (purged, po, pe) = (
        r.u8().map_err(short)?,
        r.u64().map_err(short)?,
        r.u64().map_err(short)?,
    );
    // Canonical: an absent value is written as zeros, and read only so.
    if !flag(purged)? && (po, pe) != (0, 0) {
        return Err("node checkpoint has a purge point without its flag");
    }
    g.last_purged = flag(purged)?.then_some((Offset(po), Epoch(pe)));
    let (has_hw, hv) = (r.u8().map_err(short)?, r.u64().map_err(short)?);
    if !flag(has_hw)? && hv != 0 {
        return Err("node checkpoint has a watermark without its flag");
    }
    g.hw = flag(has_hw)?.then_some(hv);
    g.durable_hw = g.hw;
    let vlen = r.u32().map_err(short)? as usize;
    let vote = r.bytes(vlen).map_err(short)?;
    g.vote = QuorumState::decode_body(vote).map_err(|_| "node checkpoint vote does not decode")?;
    if g.vote.encode_body() != vote {
        return Err("node checkpoint vote is not canonical");
    }
    let (has_meta, mlen) = (r.u8().map_err(short)?, r.u32().map_err(short)? as usize);
    let meta = r.bytes(mlen).map_err(short)?;
    if !flag(has_meta)? && !meta.is_empty() {
        return Err("node checkpoint has metadata without its flag");
    }
    g.app_meta = flag(has_meta)?.then(|| meta.to_vec());
    g.runs = decode_runs(r, start, end)?;
    Ok((id, g))
}

/// A group's runs, which must cover `[start, end)` exactly.
fn decode_runs(r: &mut Reader<'_>, start: u64, end: u64) -> Result<VecDeque<Run>, &'static str> {
    let short = |_| "checkpoint ends early";
    let runs = r.u64().map_err(short)?;
    if runs > r.remaining() as u64 / 32 {
        return Err("node checkpoint claims more runs than it holds");
    }
    let mut list = VecDeque::with_capacity(usize::try_from(runs).unwrap_or(0));
    let mut next = None;
    for _ in 0..runs {
        let run = Run {
            offset: r.u64().map_err(short)?,
            shared: r.u64().map_err(short)?,
            epoch: r.u64().map_err(short)?,
            count: r.u32().map_err(short)?,
            bytes: r.u32().map_err(short)?,
        };
        // Only live runs are written, each continuing the one before.
        if run.count == 0
            || run.shared == 0
            || run.offset.checked_add(u64::from(run.count)).is_none()
            || run.shared.checked_add(u64::from(run.count)).is_none()
            || run.end() <= start
            || next.is_some_and(|n| n != run.offset)
        {
            return Err("node checkpoint runs do not cover the group's log");
        }
        next = Some(run.end());
        list.push_back(run);
    }
    let covered = match (list.front(), next) {
        (Some(first), Some(n)) => first.offset <= start && n == end,
        _ => start == end,
    };
    if !covered {
        return Err("node checkpoint runs do not cover the group's log");
    }
    Ok(list)
}

fn flag(b: u8) -> Result<bool, &'static str> {
    match b {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err("node checkpoint flag is neither 0 nor 1"),
    }
}

// --- The checkpoint file, and telling a node's directory from others. ---

/// Writes `bytes` as the node checkpoint of `dir` by atomic replace. On a
/// full disk it waits (`NoSpace`: the previous checkpoint in place, the
/// next open replays more, nothing poisoned).
pub(super) fn write_checkpoint_file(fs: &SharedFs, dir: &Path, bytes: &[u8]) -> Result<()> {
    Ok(quorumlog_checkpoint::replace_file(
        fs.as_ref(),
        &dir.join(FILE_NAME),
        bytes,
    )?)
}

/// Reads and decodes the node checkpoint of the directory `dir` (the
/// open's reader and the inspectors'). No file: `WrongLayout`, a one-group
/// store's directory.
pub(crate) fn read_checkpoint(fs: &SharedFs, dir: &Path) -> Result<Checkpoint> {
    let bytes = match fs.open(&dir.join(FILE_NAME), OpenMode::Read) {
        Ok(f) => f.read_to_end().map_err(|e| Error::Checkpoint(e.into()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // Told apart by what the log holds, not by the file alone: a
            // node that lost its checkpoint is damage, never a store; a
            // store only where its log holds its records.
            return Err(match log_holds(fs, dir)? {
                LogHolds::Node => Error::NodeCorrupt {
                    group: None,
                    offset: Offset(0),
                    what: "the node checkpoint (groups.ckpt) is missing, but the log holds node records",
                },
                LogHolds::Store => Error::WrongLayout {
                    path: dir.to_path_buf(),
                    found: "a one-group store's directory (previous format: bring it over with `quorumlog import`)",
                    expected: "a node's directory",
                },
                LogHolds::Nothing => Error::WrongLayout {
                    path: dir.to_path_buf(),
                    found: "a directory with a meta file but no node checkpoint (groups.ckpt) and no log records (an interrupted format, or another layout)",
                    expected: "a node's directory",
                },
            });
        }
        Err(e) => return Err(Error::Checkpoint(e.into())),
    };
    decode(&bytes).map_err(|what| Error::NodeCorrupt {
        group: None,
        offset: Offset(0),
        what,
    })
}

/// Whether the first batch of `dir`'s log is a node record (a node batch's
/// first record is a node record header, in the node's batch epoch): read
/// only, nothing changed. An empty log holds none.
pub(super) fn log_holds_node_records(fs: &SharedFs, dir: &Path) -> Result<bool> {
    Ok(log_holds(fs, dir)? == LogHolds::Node)
}

/// What a directory's log holds, by its first batch.
#[derive(Debug, PartialEq, Eq)]
enum LogHolds {
    /// A node's records.
    Node,
    /// Another layout's records (a one-group store's).
    Store,
    /// No batch at all (no log directory, no segment, empty segments).
    Nothing,
}

fn log_holds(fs: &SharedFs, dir: &Path) -> Result<LogHolds> {
    use quorumlog_log::inspect::{batch_records, walk_segments, Walk};
    let log = dir.join("log");
    if !fs.exists(&log).map_err(|e| Error::Checkpoint(e.into()))? {
        return Ok(LogHolds::Nothing);
    }
    let mut holds = LogHolds::Nothing;
    walk_segments::<_, Error>(fs.as_ref(), &log, Walk::Stop, |s, file, _| {
        let Some(b) = s.batches.first() else {
            return Ok(s.problems.is_empty());
        };
        let start = usize::try_from(b.position).unwrap_or(usize::MAX);
        let raw = file.get(start..start.saturating_add(b.bytes as usize));
        let node = b.epoch == NODE_EPOCH
            && raw
                .and_then(|raw| batch_records(raw).ok())
                .and_then(|r| r.first().map(|h| Header::decode(h).is_ok()))
                .unwrap_or(false);
        holds = if node {
            LogHolds::Node
        } else {
            LogHolds::Store
        };
        Ok(false)
    })?;
    Ok(holds)
}

/// Decodes a node checkpoint file (fuzzing).
#[cfg(any(test, feature = "__fuzzing"))]
pub(crate) fn ckpt_decode(bytes: &[u8]) -> std::result::Result<Checkpoint, &'static str> {
    decode(bytes)
}

/// Encodes a decoded node checkpoint again (fuzzing).
#[cfg(any(test, feature = "__fuzzing"))]
pub(crate) fn ckpt_encode(c: &Checkpoint) -> Vec<u8> {
    encode(c.position, c.groups.iter(), &c.dropped)
}

/// A valid checkpoint: two groups, one with runs, a vote, a purge point,
/// a watermark and metadata; a dropped id (fuzzing corpus).
#[cfg(test)]
pub(crate) fn ckpt_sample() -> Vec<u8> {
    let mut groups = IdMap::default();
    let mut g = GroupState::new(3);
    let run = Run {
        offset: 3,
        shared: 5,
        epoch: 2,
        count: 4,
        bytes: 90,
    };
    let _ = g.append(run);
    g.hw = Some(5);
    g.app_meta = Some(b"m".to_vec());
    g.last_purged = Some((Offset(3), Epoch(1)));
    groups.insert(7, g);
    groups.insert(9, GroupState::new(1));
    encode(40, groups.iter(), &[4].into())
}

/// A valid node record header (fuzzing corpus).
#[cfg(test)]
pub(crate) fn record_sample() -> Vec<u8> {
    Header {
        kind: Kind::Purge,
        group: 7,
        offset: 11,
        epoch: 2,
        control: false,
    }
    .encode()
    .to_vec()
}

/// Whether `dir` holds a node (its checkpoint file exists, or its log
/// holds node records).
pub(crate) fn is_node_dir(fs: &SharedFs, dir: &Path) -> bool {
    fs.exists(&dir.join(FILE_NAME)).unwrap_or(false)
        || log_holds_node_records(fs, dir).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorumlog_checkpoint::DirectoryId;
    use quorumlog_checkpoint::{NodeId, Vote};

    #[test]
    fn a_checkpoint_round_trips_and_every_flipped_byte_is_refused() {
        let mut groups = IdMap::default();
        let mut g = GroupState::new(3);
        g.append(Run {
            offset: 3,
            shared: 5,
            epoch: 2,
            count: 4,
            bytes: 90,
        })
        .unwrap();
        g.hw = Some(5);
        g.vote = QuorumState {
            epoch: Epoch(2),
            leader: Some(NodeId(1)),
            voted: Some(Vote {
                node_id: NodeId(1),
                directory_id: DirectoryId(9),
            }),
        };
        g.app_meta = Some(b"membership".to_vec());
        g.last_purged = Some((Offset(3), Epoch(1)));
        groups.insert(7, g);
        groups.insert(8, GroupState::new(0));
        let dropped: BTreeSet<u64> = [2, 4].into();
        let bytes = encode(99, groups.iter(), &dropped);
        let c = decode(&bytes).unwrap();
        assert_eq!(c.position, 99);
        assert_eq!(c.dropped, dropped);
        let g = &c.groups[&7];
        assert_eq!((g.start, g.end, g.hw), (3, 7, Some(5)));
        assert_eq!(g.vote, groups[&7].vote);
        assert_eq!(g.app_meta.as_deref(), Some(&b"membership"[..]));
        assert_eq!(g.runs, groups[&7].runs);
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 1;
            assert!(decode(&b).is_err(), "byte {i}");
        }
        assert!(decode(&bytes[..bytes.len() - 1]).is_err());
    }
}
