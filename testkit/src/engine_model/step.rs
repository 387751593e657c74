//! One random call of the engine model, with the caller's mistakes, checked
//! against the model as it returns.

#[allow(
    clippy::wildcard_imports,
    reason = "a child module: the parent's items and imports, as it sees them"
)]
use super::*;

pub(super) fn step(rng: &mut SimRng, w: &mut World, m: &mut Model, next_id: &mut u64) -> String {
    let mut op = rng.below(20);
    if m.one_group && op == 1 {
        op = 2; // one group: never dropped
    }
    if op == 0 || m.groups.is_empty() {
        // Create: a new id, or a mistake (an existing or a dropped one).
        let id = match rng.below(4) {
            0 if !m.dropped.is_empty() => *m.dropped.iter().next().unwrap(),
            1 if !m.groups.is_empty() => pick(rng, m).unwrap(),
            _ if m.one_group && *next_id >= 1 => 1,
            _ => {
                *next_id += 1;
                *next_id
            }
        };
        let start = rng.below(3);
        let r = w.node().create_group(id, Offset(start));
        if m.dropped.contains(&id) {
            assert!(
                matches!(r, Err(Error::GroupDropped { group }) if group == id),
                "{r:?}"
            );
        } else if m.groups.contains_key(&id) {
            assert!(
                matches!(r, Err(Error::GroupExists { group }) if group == id),
                "{r:?}"
            );
        } else {
            r.unwrap();
            m.all_durable();
            m.groups.insert(
                id,
                GModel {
                    start,
                    durable: start,
                    ..GModel::default()
                },
            );
            w.handles.insert(id, Arc::new(w.node().group(id).unwrap()));
        }
        return format!("create {id} at {start}");
    }
    let id = pick(rng, m).unwrap();
    let g = &w.handles[&id];
    let gm = m.groups.get_mut(&id).unwrap();
    let end = gm.end();
    match op {
        1 => {
            // Drop: refused while a handle is open, then done.
            assert!(matches!(
                w.node().drop_group(id),
                Err(Error::GroupInUse { .. })
            ));
            w.handles.remove(&id);
            w.node().drop_group(id).unwrap();
            m.groups.remove(&id);
            m.dropped.insert(id);
            m.all_durable();
            assert!(matches!(
                w.node().group(id),
                Err(Error::GroupDropped { .. })
            ));
            format!("drop {id}")
        }
        2..=6 => {
            // An append; sometimes at the wrong offset or in an older epoch.
            let mut epoch = gm.last_epoch().max(gm.vote.epoch.0).max(1);
            if rng.below(6) == 0 {
                epoch += 1;
            }
            let mistake = rng.below(8);
            let base = match mistake {
                0 if end > gm.start => end - 1,
                1 => end + 1,
                _ => end,
            };
            if mistake == 2 && gm.last_epoch() > 1 {
                epoch = gm.last_epoch() - 1;
            }
            let empty = gm.entries.is_empty() && gm.snapshot.is_none();
            if mistake == 3 && empty {
                // Offsets that would wrap: an empty log's restart point
                // two below the end of the offset space, three entries.
                let base = u64::MAX - 1;
                let r = g.append_durable(Offset(base), Epoch(epoch), &[b"x", b"y", b"z"]);
                assert!(
                    matches!(
                        r,
                        Err(Error::Log(quorumlog_log::Error::OffsetOverflow { .. }))
                    ),
                    "{r:?}"
                );
                return format!("append {id} 3 at {base}: would wrap, refused");
            }
            let records = records(rng, w, id, base, 5);
            let n = records.len();
            let queued = rng.below(2) == 0;
            let r = if queued {
                g.append(Offset(base), Epoch(epoch), &records)
            } else {
                g.append_durable(Offset(base), Epoch(epoch), &records)
            };
            let restart = gm.entries.is_empty() && base > end && gm.snapshot.is_none();
            if base != end && !restart {
                assert!(
                    matches!(
                        r,
                        Err(Error::Log(quorumlog_log::Error::NonContiguous { .. }))
                    ),
                    "{r:?}"
                );
            } else if epoch < gm.last_epoch() && !restart {
                assert!(
                    matches!(
                        r,
                        Err(Error::Log(quorumlog_log::Error::EpochRegression { .. }))
                    ),
                    "{r:?}"
                );
            } else {
                r.unwrap();
                if restart {
                    gm.pre_restart = Some(gm.start);
                    gm.start = base;
                    gm.durable = base;
                    if let Some(h) = gm.hw {
                        gm.hw = Some(h.max(base));
                    }
                }
                for rec in records {
                    gm.entries.push((epoch, rec));
                }
            }
            format!("append {id} {n} at {base} in {epoch} queued {queued}")
        }
        7 => {
            let x = rng.below(end + 3);
            let r = g.set_high_watermark(Offset(x));
            if x > end {
                assert!(r.is_err());
            } else if gm.hw.is_some_and(|h| x < h) {
                assert!(
                    matches!(r, Err(Error::HighWatermarkBackwards { .. })),
                    "{r:?}"
                );
            } else {
                r.unwrap();
                gm.hw = Some(x.max(gm.start));
                gm.set_hw = gm.hw;
            }
            format!("set_hw {id} {x}")
        }
        8 | 9 => {
            let x = gm.start + rng.below(end - gm.start + 2);
            let floor = gm
                .hw
                .unwrap_or(0)
                .max(gm.snapshot.map_or(0, |s| s.end_offset.0));
            let r = g.truncate_to(Offset(x));
            if x < floor {
                assert!(matches!(r, Err(Error::BelowHighWatermark { .. })), "{r:?}");
            } else {
                r.unwrap();
                if x < end {
                    gm.entries.truncate((x - gm.start) as usize);
                    m.all_durable();
                }
            }
            format!("truncate {id} {x}")
        }
        10 => {
            // Purge, sometimes past the end (a restart).
            let x = gm.start + rng.below(end - gm.start + 3);
            let epoch = gm.epoch_at(x.wrapping_sub(1)).unwrap_or(gm.last_epoch());
            let in_log = x > gm.start && x <= end;
            if in_log && rng.below(6) == 0 {
                // A mistake: a stale log id, the right offset in another
                // epoch than the log's.
                let wrong = epoch + 1;
                let r = g.purge(Purge::To {
                    offset: Offset(x),
                    epoch: Epoch(wrong),
                });
                let refused = gm.snapshot.is_some_and(|s| x > s.end_offset.0);
                assert!(
                    matches!(r, Err(Error::PurgeEpochMismatch { .. }))
                        || refused && matches!(r, Err(Error::MissingSnapshot { .. })),
                    "{r:?}"
                );
                return format!("purge {id} {x} in {wrong}: not the log's epoch, refused");
            }
            let r = g.purge(Purge::To {
                offset: Offset(x),
                epoch: Epoch(epoch),
            });
            if x > gm.start && gm.snapshot.is_some_and(|s| x > s.end_offset.0) {
                // A mistake: past every snapshot, refused.
                assert!(matches!(r, Err(Error::MissingSnapshot { .. })), "{r:?}");
                return format!("purge {id} {x} refused");
            }
            r.unwrap();
            if x > gm.start {
                gm.purged = Some((x, epoch));
                if x > end {
                    gm.entries.clear();
                    gm.start = x;
                    gm.hw = Some(gm.hw.map_or(x, |h| h.max(x)));
                } else {
                    gm.entries.drain(..(x - gm.start) as usize);
                    gm.start = x;
                    if gm.hw.is_some_and(|h| h < x) {
                        gm.hw = Some(x);
                    }
                }
                m.all_durable();
            }
            format!("purge {id} {x}")
        }
        11 => {
            let fired = Arc::new(Mutex::new(None));
            let f = Arc::clone(&fired);
            g.on_durable(
                Offset(end),
                Box::new(move |r| *f.lock().unwrap() = Some(r.map(|o| o.0))),
            );
            let got = g.wait_durable(Offset(end)).unwrap();
            assert_eq!(got.0, end);
            gm.durable = gm.durable.max(end);
            gm.pre_restart = None;
            assert!(g.extent().flushed.0 >= end);
            format!("wait_durable {id} {end}")
        }
        12 => {
            // A vote: a new epoch, the same one again, a second vote, an old one.
            let cur = gm.vote.epoch.0;
            let epoch = (cur + 2).saturating_sub(rng.below(4));
            let candidate = 1 + rng.below(3);
            let next = QuorumState {
                epoch: Epoch(epoch),
                leader: None,
                voted: Some(Vote {
                    node_id: NodeId(candidate),
                    directory_id: DirectoryId(9),
                }),
            };
            let r = g.persist_quorum_state(&next);
            let ok = gm.vote.check_transition(&next).is_ok();
            assert_eq!(r.is_ok(), ok, "vote {next:?} over {:?}: {r:?}", gm.vote);
            if ok {
                gm.vote = next;
                m.all_durable();
            }
            format!("vote {id} epoch {epoch} for {candidate} -> {ok}")
        }
        13 => {
            // A wait at the end makes every record the group queued
            // durable: the high watermark queued by its last set included.
            g.wait_durable(Offset(u64::MAX)).unwrap();
            let x = g.extent();
            let got = x.durable_high_watermark.map(|o| o.0);
            if let Some(p) = got {
                assert!(
                    gm.persisted.is_none_or(|q| p >= q),
                    "persisted hw moved back"
                );
                assert!(
                    p <= gm.hw.unwrap_or(0).max(gm.start),
                    "persisted hw {p} past {:?}",
                    gm.hw
                );
                gm.persisted = Some(p);
            }
            // Every set watermark was queued: after the wait it is durable
            // (a purge, a restart or an install may have raised it further,
            // in memory only).
            if let Some(h) = gm.set_hw {
                assert!(
                    got.is_some_and(|p| p >= h.min(x.queued_end.0)),
                    "a set watermark {h} not durable after a wait at the end: {got:?}"
                );
            }
            format!("persist_hw {id} -> {got:?}")
        }
        14 => {
            let bytes = vec![id as u8; rng.index(30)];
            g.write_app_metadata(&bytes).unwrap();
            gm.meta = Some(bytes);
            m.all_durable();
            format!("metadata {id}")
        }
        15 => {
            // A snapshot at the watermark, then cleaning below it.
            let at = gm.hw.unwrap_or(gm.start);
            let epoch = gm.epoch_at(at.wrapping_sub(1));
            let Some(epoch) = epoch.filter(|_| at > gm.start) else {
                return format!("no snapshot {id}");
            };
            let id_s = SnapshotId {
                end_offset: Offset(at),
                epoch: Epoch(epoch),
            };
            if gm.snapshot.is_some_and(|s| s >= id_s) {
                return format!("no newer snapshot {id}");
            }
            let mut wr = g
                .create_snapshot(Offset(at), Epoch(epoch), b"m", WriterOptions::default())
                .unwrap();
            wr.write(&[id as u8; 100]).unwrap();
            wr.freeze().unwrap();
            gm.snapshot = Some(id_s);
            if rng.below(2) == 0 {
                let to = gm.start + rng.below(at - gm.start + 1);
                let s = g.purge(Purge::Covered { up_to: Offset(to) }).unwrap().0;
                if s > gm.start {
                    gm.purged = Some((s, gm.epoch_at(s - 1).unwrap()));
                    gm.entries.drain(..(s - gm.start) as usize);
                    gm.start = s;
                    m.all_durable();
                }
            }
            format!("snapshot {id} at {at}")
        }
        16 => {
            // Install another group's latest snapshot here.
            let Some(src) = pick(rng, m).filter(|s| *s != id) else {
                return "no install".into();
            };
            let Some(sid) = m.groups[&src].snapshot else {
                return "no install".into();
            };
            let gm = m.groups.get_mut(&id).unwrap();
            if gm.snapshot.is_some_and(|s| s >= sid) {
                return "no newer install".into();
            }
            let s = &w.handles[&src];
            let total = s.snapshot(sid).map(|s| s.info().size_bytes).unwrap();
            if sid.end_offset.0 < gm.start {
                let r = g.install_snapshot(sid, total);
                assert!(matches!(r, Err(Error::SnapshotRefused { .. })), "{r:?}");
                return "install below the log start refused".into();
            }
            let last = sid.end_offset.0 - 1;
            // The group keeps its log if it continues the snapshot.
            let keeps = if last < gm.start {
                gm.entries.first().is_none_or(|e| e.0 >= sid.epoch.0)
            } else {
                gm.epoch_at(last) == Some(sid.epoch.0)
            };
            if !keeps && gm.hw.unwrap_or(gm.start) > sid.end_offset.0 {
                let r = g.install_snapshot(sid, total);
                assert!(matches!(r, Err(Error::SnapshotRefused { .. })), "{r:?}");
                return "install conflicting with committed entries refused".into();
            }
            let mut inst = g.install_snapshot(sid, total).unwrap();
            let mut pos = 0;
            while pos < total {
                let chunk = s.snapshot(sid).and_then(|s| s.read_chunk(pos, 64)).unwrap();
                inst.write_chunk(pos, &chunk).unwrap();
                pos += chunk.len() as u64;
            }
            inst.finish().unwrap();
            if !keeps {
                gm.entries.clear();
                gm.start = sid.end_offset.0;
                gm.purged = Some((gm.start, sid.epoch.0));
                gm.hw = Some(gm.hw.map_or(gm.start, |h| h.max(gm.start)));
                m.all_durable();
            } else {
                let to = sid.end_offset.0.min(gm.end()).max(gm.start);
                gm.hw = Some(gm.hw.map_or(to, |h| h.max(to)));
            }
            m.groups.get_mut(&id).unwrap().snapshot = Some(sid);
            format!("install {src}'s {sid:?} into {id} keeps {keeps}")
        }
        17 => {
            // Handle mistakes: a second handle, an unknown group.
            assert!(matches!(w.node().group(id), Err(Error::GroupInUse { .. })));
            assert!(matches!(
                w.node().group(u64::MAX),
                Err(Error::UnknownGroup { .. })
            ));
            "handle mistakes".into()
        }
        18 => write_batch(rng, w, m),
        _ => {
            // Checkpoint and reclamation (rewrites, freed segments).
            w.node().maintain().unwrap();
            m.all_durable();
            let space = w.node().stats().space;
            format!("maintain -> {space:?}")
        }
    }
}
