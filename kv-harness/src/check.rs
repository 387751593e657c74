//! A linearizability checker for a key-value history: each key is a
//! register, checked on its own (linearizability is compositional), by the
//! Wing & Gong search with Lowe's memoisation, as Porcupine does it.
//!
//! The search walks the operations' invocation and completion events in
//! time order. At an invocation it tries to linearize that operation next
//! (the register's state allows its output, and the set of operations
//! linearized with the resulting state was not tried before); at the
//! completion of an operation not yet linearized it backtracks. The
//! history is linearizable if every operation is placed.
//!
//! Outcomes ([`Outcome`]):
//! - a `Failed` operation had no effect: it is left out;
//! - an `Unknown` write may take effect at any time after its invocation:
//!   its completion is at infinity. One whose value no read returned is left
//!   out (it can always be placed after everything else); one whose value
//!   no other write wrote completes, for the search, when the first read
//!   that returned its value completes (it must take effect before that
//!   read does). Both keep the search small when many answers were lost;
//! - an `Unknown` read returned nothing: it is left out.
//!
//! Ties (an operation completing at the instant another is invoked) count as
//! concurrent.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::history::{Action, Op, Outcome};

/// Search steps allowed per key before the checker gives up (a history
/// it cannot decide is reported as such, never as linearizable).
pub const MAX_STEPS: u64 = 50_000_000;

/// One key's history that is not linearizable (or that the checker could
/// not decide within [`MAX_STEPS`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The key.
    pub key: String,
    /// Operations on it that were checked.
    pub ops: usize,
    /// The operation the search could never get past, and the state the
    /// register had in the longest linearized prefix.
    pub detail: String,
    /// The search gave up (undecided), rather than proving a violation.
    pub undecided: bool,
}

/// What [`check`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Keys checked.
    pub keys: usize,
    /// Operations checked (after dropping those without effect).
    pub ops: usize,
    /// Operations in the history.
    pub recorded: usize,
    /// Keys whose history is not linearizable or undecided.
    pub violations: Vec<Violation>,
}

impl Report {
    /// Every key's history is linearizable.
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }
}

/// Checks every key's history in `ops`.
pub fn check(ops: &[Op]) -> Report {
    let mut by_key: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in ops {
        by_key.entry(op.key.as_str()).or_default().push(op);
    }
    let mut report = Report {
        recorded: ops.len(),
        ..Report::default()
    };
    for (key, ops) in by_key {
        report.keys += 1;
        let (n, result) = check_register(&ops);
        report.ops += n;
        if let Err((detail, undecided)) = result {
            report.violations.push(Violation {
                key: key.to_string(),
                ops: n,
                detail,
                undecided,
            });
        }
    }
    report
}

/// An operation as the search sees it: values numbered (0: no value).
#[derive(Debug, Clone, Copy)]
struct Entry {
    call: u64,
    ret: u64,
    /// A write of this value, or a read returning it.
    write: bool,
    value: u32,
    /// Index into the key's original operations (for the report).
    source: usize,
}

/// Per value: how many writes wrote it, and the earliest completion of a
/// read that returned it. A write of unknown outcome whose value no read
/// returned is left out; one whose value only it wrote must take effect
/// before the first read of it completes, which bounds it.
fn bounds<'a>(ops: &[&'a Op]) -> (HashMap<&'a str, usize>, HashMap<&'a str, u64>) {
    let mut writers: HashMap<&str, usize> = HashMap::new();
    let mut first_read: HashMap<&str, u64> = HashMap::new();
    for op in ops {
        match (&op.action, &op.outcome) {
            (Action::Get, Outcome::Ok(Some(v))) => {
                let t = first_read.entry(v.as_str()).or_insert(op.ret);
                *t = (*t).min(op.ret);
            }
            (Action::Put(v), Outcome::Ok(_) | Outcome::Unknown) => {
                *writers.entry(v.as_str()).or_insert(0) += 1;
            }
            _ => {}
        }
    }
    (writers, first_read)
}

/// Checks one register's history; returns the operations checked and the
/// verdict (`Err((detail, undecided))`).
fn check_register(ops: &[&Op]) -> (usize, Result<(), (String, bool)>) {
    let mut values: HashMap<String, u32> = HashMap::new();
    let mut number = |v: Option<&String>| -> u32 {
        match v {
            None => 0,
            Some(s) => {
                let next = u32::try_from(values.len() + 1).unwrap_or(u32::MAX);
                *values.entry(s.clone()).or_insert(next)
            }
        }
    };
    let (writers, first_read) = bounds(ops);
    let mut entries = Vec::new();
    for (source, op) in ops.iter().enumerate() {
        let e = match (&op.action, &op.outcome) {
            (_, Outcome::Failed) | (Action::Get, Outcome::Unknown) => continue,
            (Action::Put(v), Outcome::Unknown) => {
                let Some(read_by) = first_read.get(v.as_str()) else {
                    continue;
                };
                let unique = writers.get(v.as_str()) == Some(&1);
                Entry {
                    call: op.call,
                    ret: if unique {
                        (*read_by).max(op.call)
                    } else {
                        u64::MAX
                    },
                    write: true,
                    value: number(Some(v)),
                    source,
                }
            }
            (Action::Put(v), Outcome::Ok(_)) => Entry {
                call: op.call,
                ret: op.ret,
                write: true,
                value: number(Some(v)),
                source,
            },
            (Action::Get, Outcome::Ok(v)) => Entry {
                call: op.call,
                ret: op.ret,
                write: false,
                value: number(v.as_ref()),
                source,
            },
        };
        entries.push(e);
    }
    let n = entries.len();
    let result = search(&entries).map_err(|(stuck, state, undecided)| {
        let detail = match stuck {
            Some(i) => {
                let op = entries.get(i).and_then(|e| ops.get(e.source));
                format!(
                    "cannot place {op:?}; the longest linearized prefix leaves the value {}",
                    value_name(&values, state)
                )
            }
            None => "no operation could be placed".into(),
        };
        (detail, undecided)
    });
    (n, result)
}

fn value_name(values: &HashMap<String, u32>, id: u32) -> String {
    if id == 0 {
        return "absent".into();
    }
    values
        .iter()
        .find(|(_, v)| **v == id)
        .map_or_else(|| format!("#{id}"), |(k, _)| format!("{k:?}"))
}

/// One event in the doubly linked list the search walks.
#[derive(Debug, Clone, Copy)]
struct Event {
    op: usize,
    call: bool,
    prev: usize,
    next: usize,
    /// For a call: its completion event.
    partner: usize,
}

const NIL: usize = usize::MAX;

struct List {
    ev: Vec<Event>,
}

impl List {
    fn get(&self, i: usize) -> Event {
        self.ev.get(i).copied().unwrap_or(Event {
            op: NIL,
            call: false,
            prev: NIL,
            next: NIL,
            partner: NIL,
        })
    }

    fn set_next(&mut self, i: usize, next: usize) {
        if let Some(e) = self.ev.get_mut(i) {
            e.next = next;
        }
    }

    fn set_prev(&mut self, i: usize, prev: usize) {
        if let Some(e) = self.ev.get_mut(i) {
            e.prev = prev;
        }
    }

    fn unlink(&mut self, i: usize) {
        let e = self.get(i);
        self.set_next(e.prev, e.next);
        self.set_prev(e.next, e.prev);
    }

    fn relink(&mut self, i: usize) {
        let e = self.get(i);
        self.set_next(e.prev, i);
        self.set_prev(e.next, i);
    }

    /// Takes a call and its completion out of the list.
    fn lift(&mut self, call: usize) {
        let partner = self.get(call).partner;
        self.unlink(call);
        self.unlink(partner);
    }

    /// Puts them back (the reverse of [`List::lift`]).
    fn unlift(&mut self, call: usize) {
        let partner = self.get(call).partner;
        self.relink(partner);
        self.relink(call);
    }
}

impl List {
    /// The events of `entries` in time order, linked, after a head
    /// sentinel (event 0); each call knows its completion.
    fn build(entries: &[Entry]) -> List {
        let n = entries.len();
        // Events: (time, completion after invocation at a tie, op).
        let mut order: Vec<(u64, bool, usize)> = Vec::with_capacity(2 * n);
        for (i, e) in entries.iter().enumerate() {
            order.push((e.call, false, i));
            order.push((e.ret, true, i));
        }
        order.sort_unstable();
        // Event 0 is the head sentinel; events 1..=2n in time order.
        let mut list = List {
            ev: Vec::with_capacity(2 * n + 1),
        };
        list.ev.push(Event {
            op: NIL,
            call: false,
            prev: NIL,
            next: 1,
            partner: NIL,
        });
        let mut call_at = vec![0usize; n];
        let mut ret_at = vec![0usize; n];
        for (k, (_, is_ret, op)) in order.iter().enumerate() {
            let at = k + 1;
            list.ev.push(Event {
                op: *op,
                call: !is_ret,
                prev: k,
                next: if at == 2 * n { NIL } else { at + 1 },
                partner: NIL,
            });
            if let Some(slot) = if *is_ret {
                ret_at.get_mut(*op)
            } else {
                call_at.get_mut(*op)
            } {
                *slot = at;
            }
        }
        for op in 0..n {
            let (c, r) = (
                call_at.get(op).copied().unwrap_or(0),
                ret_at.get(op).copied().unwrap_or(0),
            );
            if let Some(e) = list.ev.get_mut(c) {
                e.partner = r;
            }
        }
        list
    }
}

type Stuck = (Option<usize>, u32, bool);

/// The search; `Err((the op it got stuck on, the state then, undecided))`.
fn search(entries: &[Entry]) -> Result<(), Stuck> {
    let n = entries.len();
    if n == 0 {
        return Ok(());
    }
    let mut list = List::build(entries);
    // The set of linearized operations, as a Zobrist hash: each operation
    // has a random 128-bit key and the set is the XOR of its members' keys
    // (updated in O(1) per step). A collision could only prune a path the
    // search did not take, so it could report a violation that is not one
    // (with 128 bits, never in practice), never accept a bad history.
    let keys: Vec<u128> = {
        let mut x = 0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c834_u128;
        (0..n)
            .map(|_| {
                x ^= x << 23;
                x ^= x >> 17;
                x ^= x << 26;
                x
            })
            .collect()
    };
    let key = |op: usize| keys.get(op).copied().unwrap_or(0);
    let mut linearized = 0u128;
    let mut seen: HashSet<(u128, u32)> = HashSet::new();
    let mut stack: Vec<(usize, u32)> = Vec::new();
    let mut state = 0u32;
    let mut best: (usize, Option<usize>, u32) = (0, None, 0);
    let mut steps = 0u64;
    let mut at = list.get(0).next;
    loop {
        steps += 1;
        if steps > MAX_STEPS {
            return Err((best.1, best.2, true));
        }
        if at == NIL {
            return Ok(());
        }
        let ev = list.get(at);
        let Some(entry) = entries.get(ev.op) else {
            return Ok(());
        };
        if ev.call {
            let (ok, next) = if entry.write {
                (true, entry.value)
            } else {
                (entry.value == state, state)
            };
            let mut placed = false;
            if ok && seen.insert((linearized ^ key(ev.op), next)) {
                linearized ^= key(ev.op);
                stack.push((at, state));
                state = next;
                list.lift(at);
                placed = true;
                at = list.get(0).next;
            }
            if !placed {
                at = ev.next;
            }
        } else {
            // The completion of an operation not placed yet.
            if entry.ret == u64::MAX {
                // Only writes of unknown outcome remain: they go last.
                return Ok(());
            }
            if stack.len() >= best.0 {
                best = (stack.len(), Some(ev.op), state);
            }
            let Some((call, prev)) = stack.pop() else {
                return Err((best.1, best.2, false));
            };
            linearized ^= key(list.get(call).op);
            state = prev;
            list.unlift(call);
            at = list.get(call).next;
        }
    }
}
