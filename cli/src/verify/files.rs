//! The files beside the log, each verified as its reader verifies it:
//! published snapshots end to end, the small files; and the summary line.

#[allow(
    clippy::wildcard_imports,
    reason = "a child module: the parent's items and imports, as it sees them"
)]
use super::*;

/// The last line: counts, bytes, the read rate and the problems.
pub(super) fn print_summary(t: &Tally, t0: Instant, segments: usize, snapshots: usize) {
    if t.quiet {
        return;
    }
    let secs = t0.elapsed().as_secs_f64().max(1e-6);
    #[expect(clippy::cast_precision_loss, reason = "a rate for people")]
    let rate = t.bytes as f64 / secs / 1e6;
    if t.json {
        say!(
            "{}",
            json!({
                "type": "summary", "segments": segments, "snapshots": snapshots,
                "batches": t.batches, "bytes": t.bytes, "seconds": secs, "mb_per_s": rate,
                "problems": t.problems,
            })
        );
    } else {
        say!(
            "{} segments, {} snapshots, {} batches, {} bytes read in {secs:.2} s ({rate:.0} MB/s): {} problems",
            segments,
            snapshots,
            t.batches,
            t.bytes,
            t.problems
        );
    }
}

/// Every published snapshot, read whole and checked.
pub(super) fn snapshots_read(
    fs: &dyn FileSystem,
    snapshots: &[(Option<u64>, PathBuf)],
    t: &mut Tally,
) {
    for (group, path) in snapshots {
        match describe_snapshot(fs, path) {
            Ok(d) => {
                t.bytes += d.total_len;
                t.done(
                    path,
                    "snapshot",
                    &format!(
                        "snapshot {}, {} chunks, {} bytes of state",
                        d.id,
                        d.chunks.len(),
                        d.data_len
                    ),
                    &json!({"group": group, "end_offset": d.id.end_offset.0,
                            "epoch": d.id.epoch.0, "chunks": d.chunks.len(), "problems": 0}),
                );
            }
            Err(e) => {
                let position = match &e {
                    quorumlog_snapshot::Error::Corruption {
                        at: quorumlog_snapshot::Location::File { position, .. },
                        ..
                    } => Some(*position),
                    _ => None,
                };
                let f = Finding {
                    file: path.clone(),
                    position,
                    offset: None,
                    group: *group,
                    groups: Vec::new(),
                    what: e.to_string(),
                    cost: None,
                    rebuilt: false,
                };
                t.found(&f);
                t.done(
                    path,
                    "snapshot",
                    "damaged",
                    &json!({"group": group, "problems": 1}),
                );
            }
        }
    }
}

/// The small files.
pub(super) fn small_files(fs: &SharedFs, dir: &Path, t: &mut Tally) {
    for c in verify_small_files(fs.as_ref(), dir) {
        if let Err(e) = c.result {
            t.found(&Finding {
                file: c.path,
                position: None,
                offset: None,
                group: None,
                groups: Vec::new(),
                what: e.to_string(),
                cost: None,
                rebuilt: false,
            });
        }
    }
}
/// The published snapshot files: a store's in `snapshots/`, a node's in
/// `snapshots/<group>/` (with the group).
pub(crate) fn snapshot_files(
    fs: &dyn FileSystem,
    dir: &Path,
) -> Result<Vec<(Option<u64>, PathBuf)>, String> {
    let list = |d: &Path| fs.list(d).map_err(|e| format!("{}: {e}", d.display()));
    if !fs.exists(dir).unwrap_or(false) {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for e in list(dir)? {
        if e.is_dir {
            let Ok(group) = e.name.parse::<u64>() else {
                continue;
            };
            let sub = dir.join(&e.name);
            for f in list(&sub)? {
                if !f.is_dir && f.name.ends_with(".snapshot") {
                    out.push((Some(group), sub.join(&f.name)));
                }
            }
        } else if e.name.ends_with(".snapshot") {
            out.push((None, dir.join(&e.name)));
        }
    }
    out.sort();
    Ok(out)
}
