//! The commit point: raised in memory as the entries are written, made
//! durable at most every [`COMMIT_PERSIST_EVERY`].

#[allow(
    clippy::wildcard_imports,
    reason = "a child module: the parent's items and imports, as it sees them"
)]
use super::*;

/// The commit point openraft gave: openraft saves one up to what it
/// *submitted* to the log, which may be ahead of what the log has written;
/// none of it is dropped: the store's watermark rises to it as the entries
/// are written.
#[derive(Debug, Default)]
pub(super) struct Commit {
    /// The log end the latest `save_committed` asks for (its index + 1;
    /// 0: none yet). Only grows.
    pub(super) target: AtomicU64,
    /// A persist of the watermark is scheduled.
    pub(super) pending: AtomicBool,
}

/// Raises `store`'s watermark towards `commit`'s target, as far as the log
/// is written; returns whether it moved.
pub(super) fn raise_commit(store: &Group, commit: &Commit) -> quorumlog_raft::Result<bool> {
    let target = commit.target.load(Ordering::Acquire);
    let x = store.extent();
    let to = Offset(target).min(x.end);
    if target == 0 || x.high_watermark.is_some_and(|h| h >= to) {
        return Ok(false);
    }
    match store.set_high_watermark(to) {
        Ok(()) => Ok(true),
        // Raised past `to` meanwhile (a snapshot of applied entries,
        // `SnapshotFiles::save_built`, or another completion).
        Err(_) if store.extent().high_watermark.is_some_and(|h| h >= to) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Schedules a persist of the watermark `every` from now on `runtime`'s
/// blocking pool, unless one is scheduled (`None`: never).
pub(super) fn schedule_persist(
    store: &Weak<Group>,
    commit: &Arc<Commit>,
    every: Option<std::time::Duration>,
    runtime: &tokio::runtime::Handle,
) {
    let Some(every) = every else {
        return;
    };
    if commit.pending.swap(true, Ordering::AcqRel) {
        return;
    }
    // Weak: a pending persist never keeps a store from closing.
    let (store, commit) = (Weak::clone(store), Arc::clone(commit));
    runtime.spawn(async move {
        tokio::time::sleep(every).await;
        // Cleared first: a commit from now on schedules the next one.
        commit.pending.store(false, Ordering::Release);
        if let Some(store) = store.upgrade() {
            // A failure poisons the store; openraft sees it at its next
            // call.
            let _ = tokio::task::spawn_blocking(move || store.wait_durable(Offset(u64::MAX))).await;
        }
    });
}
