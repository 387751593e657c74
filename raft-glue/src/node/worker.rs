//! The node's background thread and its lifetime: a checkpoint when due
//! and reclamation, every 100 ms and when an append passes the checkpoint
//! interval; it runs while the node or any group handle does (each holds
//! one count of [`Signal`]), and the last handle to go stops it and waits
//! for it, so nothing of the node is in use once the last handle drops.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use super::Inner;

/// The background thread's stop flag, wake-up and handle, and how many
/// handles (the node and its groups) keep it running: the last to go
/// stops it and waits for it, so that nothing of the node is in use once
/// the last handle is dropped (the directory can be opened again at once).
#[derive(Debug, Default)]
pub(crate) struct Signal {
    stop: Mutex<bool>,
    wake: Condvar,
    handles: std::sync::atomic::AtomicUsize,
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Signal {
    pub(super) fn stop(&self) {
        *self.stop.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.wake.notify_all();
    }

    pub(super) fn set_worker(&self, h: std::thread::JoinHandle<()>) {
        *self.worker.lock().unwrap_or_else(PoisonError::into_inner) = Some(h);
    }

    /// Stops the background thread and waits for it to end.
    pub(crate) fn stop_and_join(&self) {
        self.stop();
        let h = self
            .worker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(h) = h {
            let _ = h.join();
        }
    }

    /// One more handle keeps the node running.
    pub(crate) fn acquire(&self) {
        self.handles.fetch_add(1, Ordering::AcqRel);
    }

    /// A handle went; the last stops the background thread and waits for
    /// it, except on the log's flusher (a completion that drops the last
    /// handle): the thread may be waiting for a round that flusher runs
    /// next, so it is only stopped, and ends on its own.
    pub(crate) fn release(&self) {
        if self.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            if std::thread::current().name() == Some("quorumlog-flusher") {
                self.stop();
            } else {
                self.stop_and_join();
            }
        }
    }

    /// Waits up to `timeout` for a wake-up; whether to stop.
    fn wait(&self, timeout: std::time::Duration) -> bool {
        let stop = self.stop.lock().unwrap_or_else(PoisonError::into_inner);
        if *stop {
            return true;
        }
        let (stop, _) = self
            .wake
            .wait_timeout(stop, timeout)
            .unwrap_or_else(PoisonError::into_inner);
        *stop
    }

    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }
}

/// Stops the background thread when dropped.
#[derive(Debug)]
pub(crate) struct StopOnDrop(pub(crate) Arc<Signal>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// The background thread: every 100 ms, and when an append passes the
/// checkpoint interval, a checkpoint if due and reclamation; it ends when
/// stopped or when the node and every group handle are gone.
pub(super) fn background(inner: &std::sync::Weak<Inner>, signal: &Signal) {
    while !signal.wait(std::time::Duration::from_millis(100)) {
        let Some(inner) = inner.upgrade() else {
            return;
        };
        inner.tick();
    }
}
