//! The plan is the cut, and the undo restores every byte, over node
//! directories written on the simulated disk under crash plans with
//! record sizes from 1 byte to 2 pages (and over logs the engine
//! reclaimed and rewrote), then damaged (a bit flip, a zeroed page at
//! any alignment, a truncation) anywhere in the log.
//! Invariants: the real repair's recovery plans exactly the printed cut
//! (its check refuses otherwise) and ends the log at the printed
//! offset; every file the real repair changes, creates or removes is
//! one the plan listed, so restoring the listed files' copies and
//! removing the new ones gives back the directory byte for byte.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::too_many_lines,
    reason = "test code: a panic is a failed assertion"
)]

mod reclaimed;
use reclaimed::rewritten;

use std::collections::BTreeMap;

/// Each group's entries: (index, bytes).
type Served = BTreeMap<u64, Vec<(u64, Vec<u8>)>>;

use quorumlog_io::{CrashPlan, SimFs, Tear};
use quorumlog_log::inspect::inspect_log_dir;
use quorumlog_raft::{ClusterId, DirectoryId, Epoch, Meta, NodeId, Offset};

use super::*;

const DIR: &str = "/node";

/// Appends `records` to `group` at `at` and waits for them to be
/// durable.
fn append_durable(group: &quorumlog_raft::Group, at: Offset, epoch: Epoch, records: &[Vec<u8>]) {
    let info = group.append(at, epoch, records).unwrap();
    group.wait_durable(info.next_offset).unwrap();
}

fn options() -> NodeOptions {
    NodeOptions {
        background: false,
        ..NodeOptions::with_segment_bytes(64 << 10)
    }
}

/// Every file under `dir` with its bytes.
fn tree(fs: &dyn FileSystem, dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs.list(&d).unwrap() {
            let p = d.join(&e.name);
            if e.is_dir {
                stack.push(p);
            } else {
                let bytes = fs.open(&p, OpenMode::Read).unwrap().read_to_end().unwrap();
                out.insert(p, bytes);
            }
        }
    }
    out
}

/// A node of groups 1 and 2, entries of sizes from `seed`, crashed.
fn node(seed: u64) -> SimFs {
    let disk = SimFs::new(seed);
    let fs: SharedFs = Arc::new(disk.clone());
    let meta = Meta::new(ClusterId(5), NodeId(3), DirectoryId(7));
    Node::format(&fs, Path::new(DIR), meta, &options()).unwrap();
    let expect = Identity::node(ClusterId(5), NodeId(3));
    let (n, _) = Node::open(&fs, Path::new(DIR), &expect, &options()).unwrap();
    for g in [1, 2] {
        n.create_group(g, Offset(0)).unwrap();
    }
    let mut rng = quorumlog_io::SimRng::new(seed);
    let mut next = [0u64; 2];
    for i in 0..24u64 {
        let size = usize::try_from(1 + rng.below(8192)).unwrap();
        let g = usize::try_from(i % 2).unwrap();
        let group = n.group(g as u64 + 1).unwrap();
        append_durable(
            &group,
            Offset(next[g]),
            Epoch(1),
            &[vec![b'a' + (i % 26) as u8; size]],
        );
        next[g] += 1;
    }
    if seed % 3 == 0 {
        n.close().unwrap();
        return disk.crash_with(CrashPlan::KeepAll);
    }
    drop(n);
    let plans = [
        CrashPlan::LoseUnsynced,
        CrashPlan::Torn(Tear::Garbage),
        CrashPlan::Random,
    ];
    disk.crash_with(plans[usize::try_from(seed % 3).unwrap()])
}

/// Damages the log of `disk`: a bit flip, a zeroed page or a
/// truncation somewhere in a segment's data. Returns the file and the
/// bytes `[from, to)` made wrong.
fn damage(disk: &SimFs, seed: u64) -> (PathBuf, u64, u64) {
    let segs = inspect_log_dir(disk, &Path::new(DIR).join("log"), Walk::Raw).unwrap();
    let seg = &segs[usize::try_from(seed % segs.len() as u64).unwrap()];
    let span = seg.data_end.saturating_sub(32).max(1);
    let at = 32 + (seed.wrapping_mul(0x9E37_79B9) % span);
    let to = match seed % 3 {
        0 => {
            disk.flip_bit(&seg.file, at * 8).unwrap();
            at + 1
        }
        1 => {
            disk.corrupt_durable(&seg.file, at, &[0; 4096]).unwrap();
            at + 4096
        }
        _ => {
            let f = disk.open(&seg.file, OpenMode::ReadWrite).unwrap();
            f.set_len(at).unwrap();
            f.sync_all().unwrap();
            u64::MAX
        }
    };
    (seg.file.clone(), at, to)
}

/// Calls `each` with every batch of the log, its segment's file and
/// its node header (read without the checksum), if it has one.
fn each_batch(
    fs: &dyn FileSystem,
    mut each: impl FnMut(
        &Path,
        &quorumlog_log::inspect::BatchInfo,
        Option<quorumlog_raft::inspect::NodeRecordInfo>,
    ),
) {
    for s in inspect_log_dir(fs, &Path::new(DIR).join("log"), Walk::Raw).unwrap() {
        let bytes = fs
            .open(&s.file, OpenMode::Read)
            .unwrap()
            .read_to_end()
            .unwrap();
        for b in &s.batches {
            each(&s.file, b, crate::verify::node_header(&bytes, b.position));
        }
    }
}

/// Each batch of the log: its file, position, end, offset and the
/// group its node header names.
fn batches(fs: &dyn FileSystem) -> Vec<(PathBuf, u64, u64, u64, Option<u64>)> {
    let mut out = Vec::new();
    each_batch(fs, |file, b, h| {
        let end = b.position + u64::from(b.bytes);
        out.push((
            file.to_path_buf(),
            b.position,
            end,
            b.base_offset.0,
            h.map(|h| h.group),
        ));
    });
    out
}

/// The cut `repair` plans on `fs`, if any: `None` also where the
/// engine refuses to cut in reclaimable bytes.
fn planned_cut(fs: &SharedFs, seed: u64) -> Option<Plan> {
    let expect = Identity::node(ClusterId(5), NodeId(3));
    match plan(fs, Path::new(DIR), &expect, &options()) {
        Ok(p) => p,
        Err(e) if e.contains("in reclaimable bytes") => None,
        Err(e) => panic!("seed {seed}: {e}"),
    }
}

/// Invariants: `verify` and `repair` never disagree (harmful damage in
/// the log named exactly when a cut is planned), and the first problem `verify`
/// names in a segment is the first damaged batch's: its file, its
/// offset, its group, at most its first damaged byte and no earlier
/// than the batch before it ends.
#[test]
fn verify_names_the_damaged_batch_and_its_group_exactly_when_repair_cuts() {
    let dir = Path::new(DIR);
    let (mut named, mut several_named, mut unnamed) = (0, 0, 0);
    for seed in 1..=600u64 {
        let disk = node(seed);
        let intact = batches(&disk);
        let (file, from, _) = damage(&disk, seed);
        let fs: SharedFs = Arc::new(disk.clone());
        let found = crate::verify::findings(&fs, dir).unwrap();
        let in_log: Vec<_> = found
            .iter()
            .filter(|f| f.file.extension().is_some_and(|e| e == "log"))
            .collect();
        let planned = planned_cut(&fs, seed);
        assert_eq!(
            planned.is_some(),
            in_log.iter().any(|f| !f.harmless()),
            "seed {seed}: verify found {found:?}, repair planned {:?}",
            planned.as_ref().map(|p| &p.dropped)
        );
        let Some(p) = in_log.first() else { continue };
        let (i, first) = intact
            .iter()
            .enumerate()
            // The first batch the damage reaches, or (a flip in sync
            // padding) the one after it, whose offset that place holds.
            .find(|(_, b)| b.0 == file && b.2 > from)
            .unwrap_or_else(|| panic!("seed {seed}: {p:?} but no batch was damaged"));
        let prev_end = if i > 0 && intact[i - 1].0 == file {
            intact[i - 1].2
        } else {
            32
        };
        assert_eq!(
            (&p.file, p.offset),
            (&file, Some(first.3)),
            "seed {seed}: {found:?}"
        );
        // The group: named by what survived (the batch's own header,
        // the checkpoint's runs), else the groups whose entries the
        // damage took, the first damaged batch's among them.
        match (p.group, &p.groups[..]) {
            (Some(g), _) => assert_eq!(Some(g), first.4, "seed {seed}: {found:?}"),
            (None, several) if !several.is_empty() => {
                // Each named group had entries the damage reached.
                let reached = |g: u64| intact[i..].iter().any(|b| b.4 == Some(g));
                assert!(
                    several.iter().all(|g| reached(*g)),
                    "seed {seed}: {found:?}"
                );
                // And the first damaged batch's group among them.
                assert!(
                    first.4.is_some_and(|g| several.contains(&g)),
                    "seed {seed}: {found:?}, first damaged {first:?}"
                );
                several_named += 1;
            }
            (None, _) => unnamed += 1,
        }
        let at = p.position.unwrap();
        assert!(
            (prev_end..=first.1.max(from)).contains(&at),
            "seed {seed}: at {at}, not in {prev_end}..={}",
            first.1.max(from)
        );
        named += 1;
    }
    eprintln!("named {named}: {several_named} with the groups it reached, {unnamed} without");
    assert!(named >= 150, "only {named} of 600 damages named");
    assert_eq!(unnamed, 0, "damage named without its group");
}

#[test]
fn the_plan_is_the_cut_and_its_changes_are_every_change() {
    let expect = Identity::node(ClusterId(5), NodeId(3));
    let dir = Path::new(DIR);
    let mut cuts = 0;
    // Append-only logs, then logs the engine reclaimed and rewrote.
    let disks = (1..=600u64)
        .map(|seed| (seed, node(seed)))
        .chain((1..=120u64).map(|seed| (10_000 + seed, rewritten(seed))));
    for (seed, disk) in disks {
        let _ = damage(&disk, seed);
        let fs: SharedFs = Arc::new(disk.clone());
        let before = tree(fs.as_ref(), dir);
        let planned = planned_cut(&fs, seed);
        assert_eq!(
            tree(fs.as_ref(), dir),
            before,
            "seed {seed}: the plan wrote"
        );
        let Some(planned) = planned else { continue };
        cuts += 1;
        let mut seen = None;
        let done = Node::repair_truncate_at_corruption(&fs, dir, &expect, &options(), &mut |p| {
            seen = Some(p);
            if p == planned.recovery {
                Ok(())
            } else {
                Err(quorumlog_log::Error::OpenRefused)
            }
        });
        let done = done.unwrap_or_else(|e| {
            panic!(
                "seed {seed}: planned {:?}, saw {seen:?}: {e}",
                planned.recovery
            )
        });
        assert_eq!(
            done.log_end, planned.dropped.from_offset,
            "seed {seed}: the log ends where the plan said"
        );
        // The undo: the listed files back as they were, the new ones
        // removed.
        let after = tree(fs.as_ref(), dir);
        let listed: BTreeMap<&PathBuf, bool> =
            planned.changes.files.iter().map(|(p, b)| (p, *b)).collect();
        for p in before.keys().chain(after.keys()) {
            if before.get(p) != after.get(p) {
                assert!(
                    listed.contains_key(p),
                    "seed {seed}: {} changed unlisted",
                    p.display()
                );
            }
        }
        let mut undone = after.clone();
        for (p, below) in &listed {
            if *below {
                undone.insert((*p).clone(), before[*p].clone());
            } else {
                undone.remove(*p);
            }
        }
        assert_eq!(
            undone, before,
            "seed {seed}: the undo does not restore every byte"
        );
    }
    eprintln!("cuts {cuts}");
    assert!(cuts >= 150, "only {cuts} of 600 damages needed a cut");
}
