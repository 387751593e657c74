//! One Ready loop pass over many regions of one node
//! ([`AsyncPersister::pass`]): several Readies of each region in one
//! pass, on the simulated disk with a slow sync.
//!
//! Invariants:
//! - every Ready persisted through a pass is reported exactly once, and
//!   per region in Ready order (raft-rs requires `on_persist_ready` in
//!   order);
//! - a Ready is reported only once its entries are durable (the group's
//!   durable end covers its last entry when the report arrives);
//!   reporting a pass before its round is durable
//!   (`report_before_durable`) is caught by this check; a pass whose
//!   Readies need no sync is reported after every pass before it;
//! - a pass refuses a region of another node (its one completion covers
//!   one shared log).
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use quorumlog_io::SimFs;
use quorumlog_raft::SharedFs;
use quorumlog_raftrs::{AsyncPersister, Event, RegionStorage};
use raft::eraftpb::ConfState;
use raft::{Config, RawNode, Storage};

const REGIONS: u64 = 4;

fn config() -> Config {
    Config {
        id: 1,
        election_tick: 10,
        heartbeat_tick: 3,
        max_inflight_msgs: 256,
        ..Config::default()
    }
}

/// What a region's persisted Readies must show when reported: its number
/// and the last entry index it wrote (0 for none).
#[derive(Default)]
struct Expect {
    /// Ready number → the last index it wrote, in issue order.
    issued: BTreeMap<u64, u64>,
    reported: Vec<u64>,
}

/// Runs `turns` turns of proposals on `REGIONS` single-voter regions of
/// one node; each turn is one pass holding several Readies per region.
/// Returns, per region, the Ready numbers issued and reported.
fn run(early: bool, turns: usize) -> Vec<Expect> {
    let sim = SimFs::new(7);
    sim.set_sync_delay(Duration::from_micros(300));
    let fs: SharedFs = Arc::new(sim);
    common::format(&fs, Path::new("/p"), 1);
    let node = common::open(&fs, Path::new("/p"), 1);
    let persister = AsyncPersister::new();
    persister.report_before_durable(early);
    let mut raws: Vec<RawNode<RegionStorage>> = (1..=REGIONS)
        .map(|r| {
            let s = common::region(&node, r, 1);
            s.initialize_with_conf_state(ConfState::from((vec![1], vec![])))
                .unwrap();
            let mut raw = RawNode::with_default_logger(&config(), s).unwrap();
            raw.campaign().unwrap();
            raw
        })
        .collect();
    let mut expect: Vec<Expect> = (0..REGIONS).map(|_| Expect::default()).collect();
    for turn in 0..turns {
        let mut pass = persister.pass();
        for (k, raw) in raws.iter_mut().enumerate() {
            for i in 0..3 {
                let _ = raw.propose(vec![], vec![u8::try_from(turn % 256).unwrap(), i]);
                // Several Readies of one region in the pass.
                while raw.has_ready() {
                    let mut rd = raw.ready();
                    let last = rd.entries().last().map_or(0, |e| e.index);
                    expect[k].issued.insert(rd.number(), last);
                    let _ = pass.persist(raw.store(), &mut rd).unwrap();
                    let applied = rd.take_committed_entries().last().map(|e| e.index);
                    raw.advance_append_async(rd);
                    if let Some(a) = applied {
                        raw.advance_apply_to(a);
                    }
                }
            }
        }
        pass.finish();
        if turn % 3 == 2 {
            persister.lead_round();
        }
        drain(&persister, &mut raws, &mut expect, Duration::ZERO);
    }
    // Everything outstanding is reported once the rounds end.
    persister.lead_round();
    drain(
        &persister,
        &mut raws,
        &mut expect,
        Duration::from_millis(200),
    );
    expect
}

/// Takes the events so far (waiting up to `quiet` for more), checking
/// each report against what its Ready wrote and the disk.
fn drain(
    persister: &AsyncPersister,
    raws: &mut [RawNode<RegionStorage>],
    expect: &mut [Expect],
    quiet: Duration,
) {
    loop {
        let e = if quiet.is_zero() {
            match persister.try_events().next() {
                Some(e) => e,
                None => return,
            }
        } else {
            match persister.recv_timeout(quiet) {
                Ok(e) => e,
                Err(_) => return,
            }
        };
        let Event::Persisted { region, number, .. } = e else {
            panic!("unexpected event {e:?}");
        };
        let k = usize::try_from(region - 1).unwrap();
        let raw = &mut raws[k];
        let durable = raw.store().store().extent().flushed.0;
        let wrote = expect[k].issued.get(&number).copied();
        let wrote = wrote.unwrap_or_else(|| panic!("region {region}: Ready {number} never issued"));
        assert!(
            wrote < durable,
            "region {region}: Ready {number} reported with its entry {wrote} not durable (durable below {durable})"
        );
        if let Some(&prev) = expect[k].reported.last() {
            assert!(
                number > prev,
                "region {region}: Ready {number} reported after Ready {prev}"
            );
        }
        expect[k].reported.push(number);
        raw.on_persist_ready(number);
    }
}

#[test]
fn a_pass_reports_every_ready_once_in_order_once_durable() {
    let expect = run(false, 30);
    for (k, e) in expect.iter().enumerate() {
        let issued: Vec<u64> = e.issued.keys().copied().collect();
        assert_eq!(
            e.reported,
            issued,
            "region {}: reported Readies differ from those persisted",
            k + 1
        );
        assert!(issued.len() > 30, "region {}: too few Readies", k + 1);
    }
}

#[test]
fn a_pass_reported_before_its_round_is_durable_is_caught() {
    let caught = std::panic::catch_unwind(|| run(true, 30)).is_err();
    assert!(
        caught,
        "a pass reported before its round was durable passed the durability check"
    );
}

#[test]
fn a_pass_refuses_a_region_of_another_node() {
    let fs: SharedFs = Arc::new(SimFs::new(3));
    common::format(&fs, Path::new("/a"), 1);
    common::format(&fs, Path::new("/b"), 2);
    let (a, b) = (
        common::open(&fs, Path::new("/a"), 1),
        common::open(&fs, Path::new("/b"), 2),
    );
    let mut raws: Vec<RawNode<RegionStorage>> = [(&a, 1u64), (&b, 2)]
        .into_iter()
        .map(|(node, id)| {
            let s = common::region(node, 1, 1);
            s.initialize_with_conf_state(ConfState::from((vec![id], vec![])))
                .unwrap();
            let cfg = Config { id, ..config() };
            let mut raw = RawNode::with_default_logger(&cfg, s).unwrap();
            raw.campaign().unwrap();
            raw
        })
        .collect();
    let persister = AsyncPersister::new();
    let mut pass = persister.pass();
    let mut rd = raws[0].ready();
    pass.persist(raws[0].store(), &mut rd).unwrap();
    let mut rd = raws[1].ready();
    let refused = pass.persist(raws[1].store(), &mut rd).unwrap_err();
    assert!(refused.to_string().contains("another node"), "{refused}");
    assert_eq!(
        raws[1].store().last_index().unwrap(),
        0,
        "the refused Ready wrote"
    );
}

/// A loop that never sleeps never calls `lead_round`: under
/// `SyncPolicy::CallerLed` nothing else leads its rounds (but the
/// flusher's backstop, after 5 ms), so the persister does, at the second
/// pass in a row that needs one. Invariants: when that pass's `finish`
/// returns, both passes are durable; both are reported, in Ready order.
/// Without the persister's lead, the durability check fails (checked).
#[test]
fn a_busy_loop_leads_every_other_pass() {
    let fs: SharedFs = Arc::new(SimFs::new(5));
    common::format(&fs, Path::new("/busy"), 1);
    let node = common::open(&fs, Path::new("/busy"), 1);
    let s = common::region(&node, 1, 1);
    s.initialize_with_conf_state(ConfState::from((vec![1], vec![])))
        .unwrap();
    let mut raw = RawNode::with_default_logger(&config(), s).unwrap();
    raw.campaign().unwrap();
    let persister = AsyncPersister::new();
    let one_pass = |raw: &mut RawNode<RegionStorage>, numbers: &mut Vec<(u64, bool)>, data: u8| {
        raw.propose(vec![], vec![data]).unwrap();
        let mut pass = persister.pass();
        while raw.has_ready() {
            let mut rd = raw.ready();
            numbers.push((rd.number(), rd.must_sync()));
            pass.persist(raw.store(), &mut rd).unwrap();
            let applied = rd.take_committed_entries().last().map(|e| e.index);
            raw.advance_append_async(rd);
            if let Some(a) = applied {
                raw.advance_apply_to(a);
            }
        }
        pass.finish();
    };
    for round in 0..5u8 {
        let mut numbers = Vec::new();
        one_pass(&mut raw, &mut numbers, round * 2);
        one_pass(&mut raw, &mut numbers, round * 2 + 1);
        let synced: Vec<u64> = numbers.iter().filter(|n| n.1).map(|n| n.0).collect();
        assert!(
            synced.len() >= 2,
            "round {round}: two passes needing a sync"
        );
        let extent = raw.store().store().extent();
        assert_eq!(
            extent.flushed, extent.queued_end,
            "round {round}: the second pass's finish did not lead both passes' round"
        );
        let all: Vec<u64> = numbers.iter().map(|n| n.0).collect();
        let mut reported = Vec::new();
        while reported.len() < all.len() {
            // Reported by the round it led, or by a backstop round's
            // completion still firing on the flusher.
            match persister.recv_timeout(Duration::from_secs(30)) {
                Ok(Event::Persisted { number, .. }) => {
                    raw.on_persist_ready(number);
                    reported.push(number);
                }
                other => panic!("round {round}: unexpected {other:?}"),
            }
        }
        assert_eq!(reported, all, "round {round}: every Ready, in order");
    }
}
