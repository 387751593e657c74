//! `quorumlog info` and `quorumlog quorum-state`: a node directory's
//! identity, groups, segments, snapshots and disk use, read without
//! opening it (`quorumlog_raft::inspect::inspect_node` and the log's read-only
//! walk).

use crate::out::say;
use std::collections::BTreeMap;
use std::path::Path;

use quorumlog_checkpoint::read_meta;
use quorumlog_io::FileSystem;
use quorumlog_log::inspect::{inspect_log_dir, Walk};
use quorumlog_raft::{
    inspect::inspect_node, inspect::GroupSummary, inspect::NodeSummary, SharedFs,
};
use quorumlog_snapshot::SnapshotId;
use serde_json::json;

use crate::units;

/// Prints the groups (all, or `only`); with `whole`, everything `info`
/// shows; with `json`, one JSON object per line. Ok(false) when the walk
/// met damage.
pub(crate) fn run(
    fs: &SharedFs,
    dir: &Path,
    only: Option<u64>,
    whole: bool,
    json: bool,
) -> Result<bool, String> {
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", dir.display());
    let node = inspect_node(fs, dir).map_err(|e| at(&e))?;
    if whole {
        identity(fs.as_ref(), dir, &node, json)?;
    }
    let shown: Vec<&GroupSummary> = node
        .groups
        .iter()
        .filter(|g| only.is_none_or(|o| g.group == o))
        .collect();
    if let (Some(o), true) = (only, shown.is_empty()) {
        return Err(format!("{}: no group {o}", dir.display()));
    }
    if shown.is_empty() && !whole && !json {
        say!("{}: no groups", dir.display());
    }
    for g in shown {
        group_line(g, whole, json);
        if whole {
            snapshots(fs.as_ref(), dir, g.group, json)?;
        }
    }
    if whole {
        segments(fs.as_ref(), dir, &node, json)?;
        disk_use(fs.as_ref(), dir, json)?;
    }
    Ok(node.damage.is_none())
}

fn identity(fs: &dyn FileSystem, dir: &Path, node: &NodeSummary, json: bool) -> Result<(), String> {
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", dir.display());
    let meta = read_meta(fs, dir)
        .map_err(|e| at(&e))?
        .ok_or_else(|| at(&"no meta file"))?;
    let has = |name: &str| fs.exists(&dir.join("log").join(name)).unwrap_or(false);
    let (clean, intent) = (has("clean"), has("truncation.intent"));
    if json {
        let damage = node.damage.as_ref().map(|d| {
            json!({"file": d.file.display().to_string(), "position": d.position,
                   "offset": d.offset.map(|o| o.0), "what": d.what,
                   "group": d.offset.and_then(|o| node.group_at(o))})
        });
        say!(
            "{}",
            json!({
                "type": "node", "dir": dir.display().to_string(),
                "cluster_id": meta.cluster_id.0.to_string(), "node_id": meta.node_id.0,
                "directory_id": format!("{:032x}", meta.directory_id.0),
                "format_version": meta.format_version, "clean_close": clean,
                "truncation_pending": intent,
                "checkpoint_offset": node.checkpoint_position.0, "intact_to": node.log_end.0,
                "damage": damage, "groups": node.groups.len(), "dropped_groups": node.dropped,
            })
        );
        return Ok(());
    }
    say!(
        "{}: cluster {}, node {}, directory id {:032x}, format version {}",
        dir.display(),
        meta.cluster_id.0,
        meta.node_id.0,
        meta.directory_id.0,
        meta.format_version
    );
    let close = if clean {
        "clean (the next open replays nothing it has not checked)".to_string()
    } else {
        format!(
            "not clean: the next open recovers, replaying the log from the checkpoint at {}",
            node.checkpoint_position.0
        )
    };
    say!("last close: {close}");
    if intent {
        say!("an interrupted truncation is pending: the next open completes it");
    }
    let damage = node.damage.as_ref().map_or_else(String::new, |d| {
        let group = d
            .offset
            .and_then(|o| node.group_at(o))
            .map_or_else(String::new, |g| format!(", group {g}"));
        let offset = d
            .offset
            .map_or_else(String::new, |o| format!(" (offset {o}{group})"));
        format!(
            " (damage at {} byte {}{offset}: {}; run `quorumlog verify`)",
            d.file.display(),
            d.position,
            d.what
        )
    });
    say!(
        "shared log: checkpoint at {}, intact to {}{damage}; {} groups, {} dropped",
        node.checkpoint_position.0,
        node.log_end.0,
        node.groups.len(),
        node.dropped.len()
    );
    Ok(())
}

fn group_line(g: &GroupSummary, whole: bool, json: bool) {
    let q = &g.quorum_state;
    if json {
        let mut v = units::merged(
            json!({"type": "group", "group": g.group}),
            units::quorum_state_json(q),
        );
        if whole {
            v = units::merged(
                v,
                json!({"log_start": g.start.0, "log_end": g.end.0,
                       "high_watermark": g.high_watermark.map(|h| h.0),
                       "app_metadata": g.app_metadata}),
            );
        }
        say!("{v}");
        return;
    }
    if whole {
        let hw = g
            .high_watermark
            .map_or_else(|| "none".to_string(), |h| h.0.to_string());
        say!(
            "group {}: log [{}, {}), high watermark {hw}, {}",
            g.group,
            g.start.0,
            g.end.0,
            units::quorum_state(q)
        );
    } else {
        say!("group {}: {}", g.group, units::quorum_state(q));
    }
}

/// A group's published snapshots and the installs in flight
/// (`<end>-<epoch>-<total>.install`: bytes received of the total).
fn snapshots(fs: &dyn FileSystem, dir: &Path, group: u64, json: bool) -> Result<(), String> {
    let sub = dir.join("snapshots").join(format!("{group:020}"));
    if !fs.exists(&sub).unwrap_or(false) {
        return Ok(());
    }
    let io = |e: std::io::Error| format!("{}: {e}", sub.display());
    let mut published = Vec::new();
    let mut installs = Vec::new();
    for e in fs.list(&sub).map_err(io)? {
        let size = fs
            .open(&sub.join(&e.name), quorumlog_io::OpenMode::Read)
            .and_then(|f| f.len())
            .map_err(io)?;
        if let Some(id) = e
            .name
            .strip_suffix(".snapshot")
            .and_then(SnapshotId::parse_stem)
        {
            if json {
                say!(
                    "{}",
                    json!({"type": "snapshot", "group": group, "end_offset": id.end_offset.0,
                           "epoch": id.epoch.0, "bytes": size, "file": sub.join(&e.name).display().to_string()})
                );
            }
            published.push(format!("{id} ({size} bytes)"));
        } else if let Some((id, total)) = e.name.strip_suffix(".install").and_then(|s| {
            let (id, total) = s.rsplit_once('-')?;
            Some((SnapshotId::parse_stem(id)?, total.parse::<u64>().ok()?))
        }) {
            if json {
                say!(
                    "{}",
                    json!({"type": "install", "group": group, "end_offset": id.end_offset.0,
                           "epoch": id.epoch.0, "bytes_on_disk": size, "total_bytes": total})
                );
            }
            installs.push(format!("{id} ({size} of {total} bytes on disk)"));
        }
    }
    if json {
        return Ok(());
    }
    published.sort();
    say!(
        "  snapshots: {}",
        if published.is_empty() {
            "none".to_string()
        } else {
            published.join(", ")
        }
    );
    if !installs.is_empty() {
        say!("  installs in flight: {}", installs.join(", "));
    }
    Ok(())
}

/// Each segment with its offsets, size and what keeps it: segments are
/// deleted only below the checkpoint's position and every group's oldest
/// live entry. Then the recycled pool.
fn segments(fs: &dyn FileSystem, dir: &Path, node: &NodeSummary, json: bool) -> Result<(), String> {
    let log = dir.join("log");
    let segs =
        inspect_log_dir(fs, &log, Walk::Stop).map_err(|e| format!("{}: {e}", log.display()))?;
    let keep_from = node.keep_from().0;
    if !json {
        say!("segments:");
    }
    let bases: Vec<u64> = segs.iter().map(|s| s.base_offset.0).collect();
    for (i, s) in segs.iter().enumerate() {
        let next = bases.get(i + 1).copied();
        let end = next.unwrap_or(s.end_offset.0);
        let within = |o: u64| o >= s.base_offset.0 && next.is_none_or(|n| o < n);
        let mut pins: Vec<String> = Vec::new();
        if within(node.checkpoint_position.0) {
            pins.push(format!(
                "the checkpoint's replay (from {})",
                node.checkpoint_position.0
            ));
        }
        let groups: Vec<String> = node
            .groups
            .iter()
            .filter(|g| g.oldest_live.is_some_and(|o| within(o.0)))
            .map(|g| g.group.to_string())
            .collect();
        if !groups.is_empty() {
            pins.push(format!(
                "the oldest live entries of groups {}",
                groups.join(", ")
            ));
        }
        let why = if next.is_none() {
            "the active segment".to_string()
        } else if end <= keep_from {
            "reclaimable (nothing live: the next checkpoint deletes it)".to_string()
        } else if pins.is_empty() {
            "kept: later than what pins the log".to_string()
        } else {
            format!("pinned by {}", pins.join("; "))
        };
        let name = crate::dump::file_name(&s.file);
        if json {
            say!(
                "{}",
                json!({"type": "segment", "file": name, "base_offset": s.base_offset.0,
                       "end_offset": end, "bytes": s.size, "data_bytes": s.data_end,
                       "active": next.is_none(), "reclaimable": next.is_some() && end <= keep_from,
                       "why": why})
            );
        } else {
            say!(
                "  {name}: offsets [{}, {end}), {} bytes ({} of data); {why}",
                s.base_offset.0,
                s.size,
                s.data_end
            );
        }
    }
    pool(fs, &log, json)
}

/// The recycled pool and the prepared next segment.
fn pool(fs: &dyn FileSystem, log: &Path, json: bool) -> Result<(), String> {
    let mut pool = (0usize, 0u64);
    let mut prepared = false;
    for e in fs
        .list(log)
        .map_err(|e| format!("{}: {e}", log.display()))?
    {
        if e.name.starts_with("recycled-") && e.name.ends_with(".segment") {
            let len = fs
                .open(&log.join(&e.name), quorumlog_io::OpenMode::Read)
                .and_then(|f| f.len())
                .map_err(|e| e.to_string())?;
            pool = (pool.0 + 1, pool.1 + len);
        }
        prepared |= e.name == "next.prepared";
    }
    if json {
        say!(
            "{}",
            json!({"type": "pool", "files": pool.0, "bytes": pool.1, "next_prepared": prepared})
        );
        return Ok(());
    }
    say!(
        "recycled pool: {} files, {} bytes; next segment prepared: {}",
        pool.0,
        pool.1,
        if prepared { "yes" } else { "no" }
    );
    Ok(())
}

/// Bytes on disk under `dir`, by top-level part.
fn disk_use(fs: &dyn FileSystem, dir: &Path, json: bool) -> Result<(), String> {
    fn walk(fs: &dyn FileSystem, d: &Path, files: &mut usize) -> Result<u64, String> {
        let mut total = 0;
        for e in fs.list(d).map_err(|e| format!("{}: {e}", d.display()))? {
            let p = d.join(&e.name);
            if e.is_dir {
                total += walk(fs, &p, files)?;
            } else {
                *files += 1;
                total += fs
                    .open(&p, quorumlog_io::OpenMode::Read)
                    .and_then(|f| f.len())
                    .map_err(|e| format!("{}: {e}", p.display()))?;
            }
        }
        Ok(total)
    }
    let mut parts: BTreeMap<String, u64> = BTreeMap::new();
    let mut files = 0usize;
    for e in fs
        .list(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
    {
        let p = dir.join(&e.name);
        let bytes = if e.is_dir {
            walk(fs, &p, &mut files)?
        } else {
            files += 1;
            fs.open(&p, quorumlog_io::OpenMode::Read)
                .and_then(|f| f.len())
                .map_err(|e| format!("{}: {e}", p.display()))?
        };
        let key = if e.is_dir {
            e.name.clone()
        } else {
            "small files".to_string()
        };
        *parts.entry(key).or_default() += bytes;
    }
    let total: u64 = parts.values().sum();
    if json {
        say!(
            "{}",
            json!({"type": "disk_use", "bytes": total, "files": files, "parts": parts})
        );
        return Ok(());
    }
    let each: Vec<String> = parts.iter().map(|(k, v)| format!("{k} {v}")).collect();
    say!(
        "disk use: {total} bytes in {files} files ({})",
        each.join(", ")
    );
    Ok(())
}
