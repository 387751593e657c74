//! Repairs and `verify` over logs the engine reclaimed and rewrote: damage is
//! classified by what it costs.

#[allow(
    clippy::wildcard_imports,
    reason = "a child module: the parent's items and imports, as it sees them"
)]
use super::*;

/// A node of groups 1, 2 and 3 on small segments whose log the
/// engine reclaimed and rewrote: groups 1 and 2 purged as they go,
/// group 3 kept whole, so old segments hold superseded copies and
/// batches below their groups' starts beside live ones. Closed, or
/// crashed by `seed`'s plan.
pub(super) fn rewritten(seed: u64) -> SimFs {
    let disk = SimFs::new(seed);
    let fs: SharedFs = Arc::new(disk.clone());
    let options = NodeOptions {
        background: false,
        garbage_percent: 120,
        ..NodeOptions::with_segment_bytes(16 << 10)
    };
    let meta = Meta::new(ClusterId(5), NodeId(3), DirectoryId(7));
    Node::format(&fs, Path::new(DIR), meta, &options).unwrap();
    let expect = Identity::node(ClusterId(5), NodeId(3));
    let (n, _) = Node::open(&fs, Path::new(DIR), &expect, &options).unwrap();
    for g in [1, 2, 3] {
        n.create_group(g, Offset(0)).unwrap();
    }
    let mut rng = quorumlog_io::SimRng::new(seed);
    let mut next = [0u64; 3];
    let steps = 90 + rng.below(90);
    for i in 0..steps {
        let g = usize::try_from(rng.below(3)).unwrap();
        let size = usize::try_from(1 + rng.below(1500)).unwrap();
        let group = n.group(g as u64 + 1).unwrap();
        let fill = b'a' + u8::try_from(i % 26).unwrap();
        append_durable(&group, Offset(next[g]), Epoch(1), &[vec![fill; size]]);
        next[g] += 1;
        if g < 2 && rng.below(4) == 0 && next[g] > 2 {
            let to = next[g] - rng.below(3);
            group
                .purge(quorumlog_raft::Purge::To {
                    offset: Offset(to),
                    epoch: Epoch(1),
                })
                .unwrap();
        }
        if rng.below(12) == 0 {
            n.maintain().unwrap();
        }
    }
    n.maintain().unwrap();
    if seed % 2 == 0 {
        n.close().unwrap();
        return disk.crash_with(CrashPlan::KeepAll);
    }
    drop(n);
    disk.crash_with(CrashPlan::LoseUnsynced)
}

/// Every group's entries as a node opened on `disk` after a crash
/// serves them (on an overlay: nothing is written to `disk`) (its clean marker removed: the open reads all it
/// would read after a crash), or why it cannot.
fn served(disk: &SimFs) -> Result<Served, String> {
    let below: SharedFs = Arc::new(disk.clone());
    let fs: SharedFs = Arc::new(Overlay::new(below));
    let _ = fs.remove_file(&Path::new(DIR).join("log").join("clean"));
    let expect = Identity::node(ClusterId(5), NodeId(3));
    let options = NodeOptions {
        background: false,
        ..NodeOptions::with_segment_bytes(16 << 10)
    };
    let (n, _) = Node::open(&fs, Path::new(DIR), &expect, &options).map_err(|e| e.to_string())?;
    let mut out = BTreeMap::new();
    for g in n.groups() {
        let group = n.group(g).map_err(|e| e.to_string())?;
        let x = group.extent();
        let entries = group
            .read_entries(
                x.start,
                x.end,
                u64::MAX,
                quorumlog_raft::Isolation::Uncommitted,
            )
            .map_err(|e| e.to_string())?;
        out.insert(
            g,
            entries.into_iter().map(|e| (e.offset.0, e.bytes)).collect(),
        );
    }
    Ok(out)
}

/// Each entry's serving copy: the batch at the highest shared offset
/// holding it (a rewrite's copy is later than the one it replaces),
/// as (group, index) -> the shared offset of its batch.
fn serving(fs: &dyn FileSystem) -> BTreeMap<(u64, u64), u64> {
    let mut out = BTreeMap::new();
    each_batch(fs, |_, b, h| {
        let Some(h) = h.filter(|h| h.kind == "Entries" || h.kind == "Rewrite") else {
            return;
        };
        for k in 0..u64::from(b.record_count.saturating_sub(1)) {
            let at = out.entry((h.group, h.offset + k)).or_insert(0);
            *at = (*at).max(b.base_offset.0);
        }
    });
    out
}

/// Invariants, over logs the engine reclaimed and rewrote, each with
/// one bit flipped in one batch anywhere:
/// - `verify` calls the damage harmless exactly when a node opened
///   after a crash opens and serves every entry as before
///   (reclaimable bytes: superseded copies, batches below their
///   groups' starts, segments the next checkpoint deletes); live
///   otherwise;
/// - `repair` changes nothing for harmless damage (not a byte);
/// - for live damage, the real repair makes the printed cut, and keeps
///   of each group exactly the entries before the first one whose
///   serving copy the cut removes: it never removes an entry that an
///   intact copy before the cut serves, and every entry left is the
///   one served before, byte for byte.
///
/// On the code before (the repair scanned from the log's start and cut
/// at the first damage, and `verify` did not classify), the first
/// reclaimable damage fails it.
#[test]
fn damage_is_classified_by_what_it_costs_and_repair_never_cuts_for_reclaimable_bytes() {
    let expect = Identity::node(ClusterId(5), NodeId(3));
    let dir = Path::new(DIR);
    let (mut harmless, mut live) = (0, 0);
    let seeds = 240u64;
    let only: Option<u64> = std::env::var("QUORUMLOG_SEED")
        .ok()
        .and_then(|s| s.parse().ok());
    for seed in 1..=seeds {
        if only.is_some_and(|o| o != seed) {
            continue;
        }
        let disk = rewritten(seed);
        let before = served(&disk).unwrap();
        let serve = serving(&disk);
        let all = batches(&disk);
        let mut rng = quorumlog_io::SimRng::new(seed ^ 0x5eed);
        let b = &all[usize::try_from(rng.below(all.len() as u64)).unwrap()];
        let at = b.1 + rng.below(b.2 - b.1);
        disk.flip_bit(&b.0, at * 8 + rng.below(8)).unwrap();
        let fs: SharedFs = Arc::new(disk.clone());
        let found = crate::verify::findings(&fs, dir).unwrap();
        let in_log: Vec<_> = found
            .iter()
            .filter(|f| f.file.starts_with(dir.join("log")))
            .collect();
        if in_log.is_empty() {
            let segs = inspect_log_dir(fs.as_ref(), &dir.join("log"), Walk::Raw).unwrap();
            for s in &segs {
                eprintln!(
                    "{} base {} end {} data_end {} problems {:?}",
                    s.file.display(),
                    s.base_offset.0,
                    s.end_offset.0,
                    s.data_end,
                    s.problems
                );
            }
            eprintln!(
                "{:?}",
                fs.list(&dir.join("log"))
                    .unwrap()
                    .iter()
                    .map(|e| e.name.clone())
                    .collect::<Vec<_>>()
            );
            eprintln!(
                "{:?}",
                quorumlog_raft::inspect::inspect_node(&fs, dir).map(|s| (
                    s.checkpoint_position,
                    s.replay_from,
                    s.log_end
                ))
            );
        }
        assert!(
            !in_log.is_empty(),
            "seed {seed}: a flipped bit unseen: {b:?} at {at}: {found:?}"
        );
        let classified = in_log.iter().all(|f| f.harmless());
        let after = served(&disk);
        let truth = after.as_ref() == Ok(&before);
        assert_eq!(
            classified,
            truth,
            "seed {seed}: flip in batch at offset {} (group {:?}): verify says {:?}; a node {}",
            b.3,
            b.4,
            in_log.iter().map(ToString::to_string).collect::<Vec<_>>(),
            match &after {
                Ok(a) if a == &before => "serves every entry".to_string(),
                Ok(_) => "serves other entries".to_string(),
                Err(e) => format!("fails: {e}"),
            }
        );
        let tree_before = tree(fs.as_ref(), dir);
        if classified {
            harmless += 1;
            // The engine's own repair (an embedder's) cuts no group
            // either, or refuses, changing nothing.
            let overlay: SharedFs = Arc::new(Overlay::new(Arc::clone(&fs)));
            let r = Node::repair_truncate_at_corruption(
                &overlay,
                dir,
                &expect,
                &options(),
                &mut |_| Ok(()),
            );
            match r {
                Ok(r) => assert!(
                    r.groups_cut.is_empty(),
                    "seed {seed}: cut {:?}",
                    r.groups_cut
                ),
                Err(quorumlog_raft::Error::CutInReclaimable { .. }) => {}
                Err(e) => panic!("seed {seed}: {e}"),
            }
            let side = Path::new("/side");
            assert!(run(&fs, dir, true, Some(side)).unwrap());
            assert_eq!(
                tree(fs.as_ref(), dir),
                tree_before,
                "seed {seed}: repair wrote"
            );
            continue;
        }
        live += 1;
        let planned = plan(&fs, dir, &expect, &options())
            .unwrap()
            .unwrap_or_else(|| panic!("seed {seed}: live damage, no cut planned"));
        assert_eq!(
            tree(fs.as_ref(), dir),
            tree_before,
            "seed {seed}: the plan wrote"
        );
        let done = Node::repair_truncate_at_corruption(&fs, dir, &expect, &options(), &mut |p| {
            if p == planned.recovery {
                Ok(())
            } else {
                Err(quorumlog_log::Error::OpenRefused)
            }
        })
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let cut = done.log_end.0;
        assert_eq!(cut, planned.dropped.from_offset.0, "seed {seed}");
        let kept = served(&disk).unwrap_or_else(|e| panic!("seed {seed}: after repair: {e}"));
        for (g, entries) in &before {
            let expected: Vec<&(u64, Vec<u8>)> = entries
                .iter()
                .take_while(|(i, _)| serve.get(&(*g, *i)).is_some_and(|s| *s < cut))
                .collect();
            let now: Vec<&(u64, Vec<u8>)> =
                kept.get(g).map(|v| v.iter().collect()).unwrap_or_default();
            assert_eq!(
                now.len(),
                expected.len(),
                "seed {seed}: group {g} keeps {} entries, {} are served before the cut at {cut}",
                now.len(),
                expected.len()
            );
            assert_eq!(now, expected, "seed {seed}: group {g}'s entries changed");
        }
    }
    eprintln!("{harmless} harmless, {live} live of {seeds}");
    assert!(harmless >= seeds / 10, "only {harmless} harmless damages");
    assert!(live >= seeds / 10, "only {live} live damages");
}
