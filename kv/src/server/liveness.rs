//! Quiet partitions: no partition runs a Raft timer. A partition with
//! nothing to write sends nothing; a node tells each other node, once
//! every [`BEAT`], that it is alive and which partitions it leads (one
//! small message per pair of nodes for all their partitions), and a
//! follower starts an election only when no live node claims its
//! partition.
//!
//! - **Leaders** send no heartbeats of their own (openraft's ticker is
//!   off: `enable_tick = false`). Entries and the commit point still go
//!   out as soon as there are any, so a write to a quiet partition is
//!   replicated at once: nothing has to wake first.
//! - **Followers** keep, per partition, when a leader was last known to
//!   be alive: a beat younger than [`DEAD`] from a node that leads the
//!   partition in a term at least the follower's. Once that is older than
//!   a timeout drawn between [`ELECT_MIN`] and twice it, the follower runs
//!   a Pre-Vote and then an election (openraft's `trigger().elect`).
//! - **Safety does not depend on any of this.** Raft's terms and votes
//!   keep one leader per term whatever the timers do, and a linearizable
//!   read never trusts a lease: the leader confirms it still leads with a
//!   heartbeat round to a quorum for each read (a read index). A leader
//!   that was deposed while its partition was quiet finds out on its next
//!   write or read, which then fail (certainly not applied) or go to the
//!   new leader. Timers only decide how soon a dead leader is replaced.
//! - **Clients** that ask a node which does not lead a partition are sent
//!   to the node whose beats claim it ([`Liveness::leader_of`]), whatever
//!   that node's own replica believes: a removed replica that was never
//!   retired, or one that lost track of its leader, redirects at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use openraft10::async_runtime::WatchReceiver;
use openraft10::ServerState;

use crate::server::host::{Host, Partition};
use crate::server::CONTROLLER;
use crate::wire::{NodeRequest, Request, Response};

/// How often a node beats to each other node.
pub const BEAT: Duration = Duration::from_millis(250);

/// How old the last beat of a node may be for it to count as alive.
pub const DEAD: Duration = Duration::from_secs(1);

/// The shortest silence after which a follower runs an election (each
/// draws its own between this and twice this, anew after each).
pub const ELECT_MIN: Duration = Duration::from_secs(1);

/// What a node heard from the others, and each partition's election timer.
#[derive(Debug, Default)]
pub struct Liveness {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    heard: HashMap<u64, Heard>,
    timers: HashMap<u32, Timer>,
    rng: u64,
}

#[derive(Debug)]
struct Heard {
    at: Instant,
    leads: HashMap<u32, u64>,
}

#[derive(Debug, Clone, Copy)]
struct Timer {
    since: Instant,
    after: Duration,
}

impl State {
    /// A timeout between [`ELECT_MIN`] and twice it (xorshift, seeded
    /// from the process's random hasher keys).
    fn draw(&mut self) -> Duration {
        if self.rng == 0 {
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(u64::from(std::process::id()));
            self.rng = h.finish() | 1;
        }
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let spread = u64::try_from(ELECT_MIN.as_millis()).unwrap_or(1000);
        ELECT_MIN + Duration::from_millis(self.rng % spread.max(1))
    }

    fn alive(&self, p: u32, term: u64, now: Instant) -> bool {
        self.heard
            .values()
            .any(|h| now.duration_since(h.at) < DEAD && h.leads.get(&p).is_some_and(|t| *t >= term))
    }
}

impl Liveness {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a beat of node `from`, leading `leads`.
    pub fn heard(&self, from: u64, leads: &[(u32, u64)]) {
        self.heard_at(from, leads, Instant::now());
    }

    fn heard_at(&self, from: u64, leads: &[(u32, u64)], at: Instant) {
        let leads = leads.iter().copied().collect();
        self.lock().heard.insert(from, Heard { at, leads });
    }

    /// Whether node `node` beat within [`DEAD`].
    pub fn node_alive(&self, node: u64) -> bool {
        let now = Instant::now();
        self.lock()
            .heard
            .get(&node)
            .is_some_and(|h| now.duration_since(h.at) < DEAD)
    }

    /// The live node whose beats claim partition `p` in the highest term.
    pub fn leader_of(&self, p: u32) -> Option<u64> {
        let now = Instant::now();
        self.lock()
            .heard
            .iter()
            .filter(|(_, h)| now.duration_since(h.at) < DEAD)
            .filter_map(|(id, h)| h.leads.get(&p).map(|t| (*t, *id)))
            .max()
            .map(|(_, id)| id)
    }

    /// Whether partition `p`'s follower, in term `term`, should run an
    /// election now: no live leader for longer than its timeout. Restarts
    /// the timer when a leader is alive (`leading` or `alive`) or when it
    /// answers yes.
    fn due(&self, p: u32, term: u64, quiet: bool, now: Instant) -> bool {
        let mut s = self.lock();
        let alive = !quiet || s.alive(p, term, now);
        let after = match s.timers.get(&p) {
            Some(t) if !alive && now.duration_since(t.since) < t.after => return false,
            Some(t) if !alive => t.after,
            _ => Duration::ZERO,
        };
        let fresh = s.draw();
        s.timers.insert(
            p,
            Timer {
                since: now,
                after: fresh,
            },
        );
        !alive && after > Duration::ZERO
    }
}

/// The partitions (and the controller) this node leads, with their terms.
pub fn leading(host: &Host) -> Vec<(u32, u64)> {
    let mut parts = host.hosted();
    parts.push((CONTROLLER, host.controller.clone()));
    parts
        .iter()
        .filter_map(|(p, part)| {
            let m = part.raft.server_metrics();
            let m = m.borrow_watched();
            (m.state == ServerState::Leader).then_some((*p, m.vote.leader_id.term))
        })
        .collect()
}

/// Beats to every other node and runs the elections that are due, every
/// [`BEAT`], until the host stops.
pub async fn run(host: Arc<Host>) {
    let mut tick = tokio::time::interval(BEAT);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if host.stopped() {
            return;
        }
        let leads = leading(&host);
        for peer in host.router.peers() {
            if peer != host.id {
                tokio::spawn(beat(Arc::clone(&host), peer, leads.clone()));
            }
        }
        let mut parts = host.hosted();
        parts.push((CONTROLLER, host.controller.clone()));
        let now = Instant::now();
        for (p, part) in parts {
            if election_due(&host, p, &part, now) {
                tokio::spawn(elect(Arc::clone(&host), p));
            }
        }
    }
}

async fn beat(host: Arc<Host>, peer: u64, leads: Vec<(u32, u64)>) {
    let req = Request::Node(NodeRequest::Beat {
        from: host.id,
        leads,
    });
    if let Ok(Response::Beat(theirs)) = host.router.call(peer, req, BEAT * 2).await {
        host.liveness.heard(peer, &theirs);
    }
}

fn election_due(host: &Host, p: u32, part: &Partition, now: Instant) -> bool {
    let m = part.raft.server_metrics();
    let m = m.borrow_watched();
    let voter = m
        .membership_config
        .membership()
        .voter_ids()
        .any(|v| v == host.id);
    let quiet = m.state != ServerState::Leader && voter;
    host.liveness.due(p, m.vote.leader_id.term, quiet, now)
}

/// A Pre-Vote, then an election if a quorum would grant it (the
/// partition's gate held: never into a Raft shutting down).
async fn elect(host: Arc<Host>, p: u32) {
    if let Some((part, _open)) = host.enter(p).await {
        tracing::debug!("partition {p}: no live leader, electing");
        let _ = part.raft.trigger().elect(true).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Invariant: a follower elects only after its timeout without a live
    /// leader in its term, never while one beats, and a beat of an older
    /// term does not count.
    #[test]
    fn a_follower_elects_only_after_silence() {
        let l = Liveness::default();
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert!(!l.due(7, 3, true, at(0)), "the first look starts the timer");
        assert!(!l.due(7, 3, true, at(900)));
        assert!(l.due(7, 3, true, at(2000)), "silent past the timeout");
        assert!(!l.due(7, 3, true, at(2010)), "the timer restarted");
        l.heard_at(2, &[(7, 3)], at(3000));
        assert!(!l.due(7, 3, true, at(3900)), "alive: the timer restarts");
        assert!(!l.due(7, 3, true, at(4400)), "dead, but 500 ms of silence");
        assert!(l.due(7, 3, true, at(6000)), "2.1 s of silence");
        l.heard_at(2, &[(7, 2)], at(7000));
        assert!(l.due(7, 3, true, at(8100)), "an older term is no leader");
        assert!(!l.due(7, 3, false, at(20_000)), "a leader never elects");
        l.heard_at(3, &[(7, 4)], at(20_000));
        assert!(
            !l.due(7, 3, true, at(20_500)),
            "a newer term's leader is alive"
        );
        l.heard(9, &[(5, 1)]);
        l.heard(8, &[(5, 2)]);
        assert_eq!(l.leader_of(5), Some(8), "the highest term's claim");
        assert_eq!(l.leader_of(6), None);
    }
}
