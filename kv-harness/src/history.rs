//! A recorded history of client operations: each with the client, the key,
//! what it did, when it was invoked and when it completed (nanoseconds on
//! one monotonic clock), and its outcome. [`crate::check()`] decides whether
//! a history is linearizable.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::time::Instant;

/// What an operation did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// A write of this value.
    Put(String),
    /// A read.
    Get,
}

/// How an operation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Completed: a write acknowledged (`None`), or a read and the value it
    /// returned (`None`: the key had no value).
    Ok(Option<String>),
    /// Certainly had no effect (a write refused before it could apply, a
    /// read that returned nothing).
    Failed,
    /// May or may not have taken effect (a write whose answer was lost):
    /// it may take effect at any time after its invocation.
    Unknown,
}

/// One operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    /// The client that issued it.
    pub client: u64,
    /// The key.
    pub key: String,
    /// What it did.
    pub action: Action,
    /// When it was invoked (ns).
    pub call: u64,
    /// When it completed (ns; for `Unknown`, when the client gave up).
    pub ret: u64,
    /// Its outcome.
    pub outcome: Outcome,
}

/// Records operations from many tasks (clones share the record).
#[derive(Debug, Clone)]
pub struct Recorder {
    t0: Instant,
    ops: Arc<Mutex<Vec<Op>>>,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}

impl Recorder {
    /// An empty record; its clock starts now.
    pub fn new() -> Recorder {
        Recorder {
            t0: Instant::now(),
            ops: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Now, on the record's clock (ns).
    pub fn now(&self) -> u64 {
        u64::try_from(self.t0.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Adds an operation.
    pub fn record(&self, op: Op) {
        self.ops
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(op);
    }

    /// Every operation recorded so far.
    pub fn ops(&self) -> Vec<Op> {
        self.ops
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// What a recorded client does: its calls, each with the outcome a
/// history records.
pub trait Calls: Send {
    /// The client's id in the history.
    fn id(&self) -> u64;
    /// Writes `key = value` by `deadline`: `Ok(None)` if acknowledged,
    /// `Failed` if it certainly did not apply, `Unknown` otherwise.
    fn put(
        &mut self,
        key: &str,
        value: &str,
        deadline: Instant,
    ) -> impl std::future::Future<Output = Outcome> + Send;
    /// Reads `key` linearizably by `deadline`: `Ok(value)`, or `Failed`
    /// (a read that returned nothing had no effect).
    fn get(
        &mut self,
        key: &str,
        deadline: Instant,
    ) -> impl std::future::Future<Output = Outcome> + Send;
}

/// Puts `key = value` through `client` by `deadline`, and records it.
pub async fn record_put<C: Calls>(
    client: &mut C,
    history: &Recorder,
    key: String,
    value: String,
    deadline: Instant,
) {
    let call = history.now();
    let outcome = client.put(&key, &value, deadline).await;
    history.record(Op {
        client: client.id(),
        key,
        action: Action::Put(value),
        call,
        ret: history.now(),
        outcome,
    });
}

/// Reads `key` linearizably through `client` by `deadline`, and records
/// it.
pub async fn record_get<C: Calls>(
    client: &mut C,
    history: &Recorder,
    key: String,
    deadline: Instant,
) {
    let call = history.now();
    let outcome = client.get(&key, deadline).await;
    history.record(Op {
        client: client.id(),
        key,
        action: Action::Get,
        call,
        ret: history.now(),
        outcome,
    });
}
