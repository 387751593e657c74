//! What a region's asynchronous work reports to its Ready loop, and how:
//! the events, the loop's waker, and the channel ends an asynchronous
//! fetch uses. Below both the storage and the persister.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

use raft::eraftpb::Message;
use raft::GetEntriesContext;

/// A read the fetch thread runs.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

/// What the Ready loop is told, in order per region.
#[derive(Debug)]
pub enum Event {
    /// Every Ready of `region` up to `number` is durable: call
    /// `on_persist_ready(number)`, then send `messages` (the Ready's
    /// `persisted_messages`).
    Persisted {
        /// The region.
        region: u64,
        /// The Ready's number.
        number: u64,
        /// Messages that could leave only after persistence.
        messages: Vec<Message>,
    },
    /// An asynchronous fetch finished: call `on_entries_fetched(context)`.
    Fetched {
        /// The region.
        region: u64,
        /// The context `entries` was called with.
        context: GetEntriesContext,
    },
    /// The region's store failed (a sync or a read): it is poisoned, and
    /// nothing of its later Readies is reported persisted.
    Failed {
        /// The region.
        region: u64,
        /// What failed.
        error: crate::Error,
    },
}

/// Where a region's asynchronous fetches go ([`crate::AsyncPersister`]).
#[derive(Clone)]
pub(crate) struct Fetcher {
    pub(crate) jobs: Sender<Job>,
    pub(crate) events: Sender<Event>,
    pub(crate) waker: Arc<Mutex<Option<crate::Waker>>>,
    pub(crate) wake_pending: Arc<std::sync::atomic::AtomicBool>,
}

impl std::fmt::Debug for Fetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetcher").finish_non_exhaustive()
    }
}

pub(crate) fn wake(waker: Option<&Waker>, pending: &AtomicBool) {
    if let Some(w) = waker {
        if !pending.swap(true, Ordering::AcqRel) {
            w();
        }
    }
}

/// Called after each event is queued (from a sync thread: keep it short).
pub type Waker = Arc<dyn Fn() + Send + Sync>;
