//! The linearizability checker (`quorumlog_kv_harness::check`) against histories
//! whose answer is known. Invariants: every planted anomaly (a stale read,
//! a lost acknowledged write, a read of a value never written, a read
//! going back in time, a write that failed yet was read) is rejected and
//! names its key; valid concurrent histories, with lost answers
//! (`Unknown`) and failed writes among them, are accepted, up to tens of
//! thousands of operations on one key. Random histories are built from a
//! known linearization (so they are valid), then one violation is planted
//! where real-time order forces it. Seeded: `QUORUMLOG_CHECK_SEEDS=N`
//! (default 40), `QUORUMLOG_CHECK_SEED=s` replays one.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::cast_possible_truncation,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use quorumlog_io::SimRng;
use quorumlog_kv_harness::check;
use quorumlog_kv_harness::history::{Action, Op, Outcome};

fn put(key: &str, v: &str, call: u64, ret: u64, outcome: Outcome) -> Op {
    Op {
        client: 0,
        key: key.into(),
        action: Action::Put(v.into()),
        call,
        ret,
        outcome,
    }
}

fn ok_put(v: &str, call: u64, ret: u64) -> Op {
    put("k", v, call, ret, Outcome::Ok(None))
}

fn get(v: Option<&str>, call: u64, ret: u64) -> Op {
    Op {
        client: 1,
        key: "k".into(),
        action: Action::Get,
        call,
        ret,
        outcome: Outcome::Ok(v.map(String::from)),
    }
}

fn rejected(ops: &[Op]) -> bool {
    let r = check(ops);
    !r.ok() && r.violations.iter().all(|v| !v.undecided)
}

#[test]
fn planted_anomalies_are_rejected() {
    // A stale read: b was acknowledged before the read began.
    assert!(rejected(&[
        ok_put("a", 0, 10),
        ok_put("b", 20, 30),
        get(Some("a"), 40, 50)
    ]));
    // A lost acknowledged write.
    assert!(rejected(&[ok_put("a", 0, 10), get(None, 20, 30)]));
    // A value never written.
    assert!(rejected(&[ok_put("a", 0, 10), get(Some("z"), 20, 30)]));
    // Back in time: b was read, then the older a.
    assert!(rejected(&[
        ok_put("a", 0, 10),
        ok_put("b", 20, 100),
        get(Some("b"), 30, 40),
        get(Some("a"), 50, 60)
    ]));
    // Back in time to the initial value.
    assert!(rejected(&[
        ok_put("a", 0, 100),
        get(Some("a"), 10, 20),
        get(None, 30, 40)
    ]));
    // A write that certainly failed, yet read.
    assert!(rejected(&[
        put("k", "a", 0, 10, Outcome::Failed),
        get(Some("a"), 20, 30)
    ]));
    // A write of unknown outcome read, then the state before it.
    assert!(rejected(&[
        put("k", "a", 0, 10, Outcome::Unknown),
        get(Some("a"), 20, 30),
        get(None, 40, 50)
    ]));
}

#[test]
fn valid_concurrent_histories_are_accepted() {
    // A read concurrent with a write sees either value.
    assert!(check(&[
        ok_put("a", 0, 100),
        get(None, 10, 20),
        get(Some("a"), 30, 40)
    ])
    .ok());
    // Ties are concurrent.
    assert!(check(&[ok_put("a", 0, 10), get(Some("a"), 10, 20)]).ok());
    // A lost answer: the write may take effect any time after its call.
    assert!(check(&[
        put("k", "a", 0, 10, Outcome::Unknown),
        get(None, 20, 30),
        get(Some("a"), 500, 510)
    ])
    .ok());
    // ... or never.
    assert!(check(&[put("k", "a", 0, 10, Outcome::Unknown), get(None, 20, 30)]).ok());
    // A failed write and failed reads carry no information.
    assert!(check(&[
        put("k", "a", 0, 10, Outcome::Failed),
        get(None, 20, 30),
        Op {
            outcome: Outcome::Failed,
            ..get(None, 40, 50)
        }
    ])
    .ok());
    assert!(check(&[]).ok());
}

#[test]
fn keys_are_checked_apart_and_the_bad_one_is_named() {
    let mut ops = vec![ok_put("a", 0, 10), get(Some("a"), 20, 30)];
    ops.push(put("other", "x", 0, 10, Outcome::Ok(None)));
    ops.push(Op {
        key: "other".into(),
        ..get(None, 20, 30)
    });
    let r = check(&ops);
    assert_eq!(r.keys, 2);
    assert_eq!(r.violations.len(), 1);
    assert_eq!(r.violations[0].key, "other");
    assert!(!r.violations[0].detail.is_empty());
}

/// A valid history of `n` operations on key `k`: a sequence of writes
/// and reads at known points (10 apart), each given an interval around its
/// point up to `span` wide on each side (so up to `span / 5` overlap);
/// some writes lose their answer (`Unknown`), some extra writes fail and
/// are never applied.
fn valid_history(rng: &mut SimRng, n: usize, span: u64) -> Vec<Op> {
    let mut ops = Vec::new();
    let mut current: Option<String> = None;
    for i in 0..n {
        let point = 1_000_000 + 10 * i as u64;
        let call = point - rng.below(span);
        let ret = point + rng.below(span);
        if rng.below(2) == 0 {
            let v = format!("v{i}");
            let outcome = if rng.below(20) == 0 {
                Outcome::Unknown
            } else {
                Outcome::Ok(None)
            };
            current = Some(v.clone());
            ops.push(put("k", &v, call, ret, outcome));
        } else {
            ops.push(get(current.as_deref(), call, ret));
        }
        if rng.below(30) == 0 {
            ops.push(put("k", &format!("failed{i}"), call, ret, Outcome::Failed));
        }
    }
    ops
}

/// Plants a stale read: a read changed to return the value of a write
/// that real time orders before another completed write, itself before
/// the read. Returns false if the history has no such triple.
fn plant_stale_read(ops: &mut [Op], rng: &mut SimRng) -> bool {
    let writes: Vec<usize> = (0..ops.len())
        .filter(|i| {
            matches!(ops[*i].action, Action::Put(_)) && ops[*i].outcome == Outcome::Ok(None)
        })
        .collect();
    let reads: Vec<usize> = (0..ops.len())
        .filter(|i| ops[*i].action == Action::Get)
        .collect();
    let start = rng.index(reads.len().max(1));
    for r in reads.iter().cycle().skip(start).take(reads.len()) {
        let read_call = ops[*r].call;
        // A completed write m before the read, and a write j before m.
        for m in &writes {
            if ops[*m].ret >= read_call {
                continue;
            }
            let m_call = ops[*m].call;
            if let Some(j) = writes.iter().find(|j| ops[**j].ret < m_call) {
                let Action::Put(v) = ops[*j].action.clone() else {
                    continue;
                };
                ops[*r].outcome = Outcome::Ok(Some(v));
                return true;
            }
        }
    }
    false
}

#[test]
fn random_valid_histories_pass_and_a_planted_stale_read_fails() {
    let env = |k: &str| std::env::var(k).ok().and_then(|s| s.parse::<u64>().ok());
    let seeds: Vec<u64> = if let Some(s) = env("QUORUMLOG_CHECK_SEED") {
        vec![s]
    } else {
        let base = quorumlog_testkit::fresh_seed();
        let n = env("QUORUMLOG_CHECK_SEEDS").unwrap_or(40);
        eprintln!("checker: base seed {base}, {n} seeds");
        (0..n).map(|i| base.wrapping_add(i)).collect()
    };
    let mut planted = 0;
    for seed in seeds {
        let mut rng = SimRng::new(seed);
        let n = 50 + rng.index(400);
        let span = 1 + rng.below(80);
        let mut ops = valid_history(&mut rng, n, span);
        let r = check(&ops);
        assert!(r.ok(), "seed {seed}: a valid history rejected: {r:?}");
        if plant_stale_read(&mut ops, &mut rng) {
            planted += 1;
            assert!(rejected(&ops), "seed {seed}: a planted stale read accepted");
        }
    }
    assert!(planted > 0, "no history had room for a stale read");
}

#[test]
fn a_long_history_on_one_key_is_decided() {
    // 20,000 operations, about 16 overlapping at a time.
    let mut rng = SimRng::new(7);
    let ops = valid_history(&mut rng, 20_000, 80);
    let r = check(&ops);
    assert!(r.ok(), "{:?}", r.violations);
    assert!(r.ops >= 19_000);
}
