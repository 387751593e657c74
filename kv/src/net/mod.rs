//! Node to node: one TCP connection per peer, shared by every partition's
//! Raft, the controller's and the node's own calls (hosting a replica,
//! controller changes, liveness beats).
//!
//! - **Many requests in flight.** Each call gets an id; the answers come
//!   back in whatever order the peer finishes them and are matched by id.
//!   A call that times out forgets its id (a late answer is dropped).
//! - **Batched frames.** A connection's writer takes every request queued
//!   at the moment it is ready to write and sends them in one frame; the
//!   peer's writer does the same with its answers. The messages of many
//!   partitions that leave in the same instant cost one `write` and one
//!   `read` a side, not one per partition.
//! - **Order per partition** is openraft's: it sends a partition's appends
//!   to one target one at a time (`stream_append`'s sequential default),
//!   so a peer may answer the requests of one frame in any order.
//! - A connection that fails fails every call it carries (`Unreachable` to
//!   openraft, which retries); the next call opens a new one.
//!
//! The routing follows openraft-multi's shape: [`Router`] implements
//! [`GroupRouter`] for `(target, partition)`, and each partition's Raft
//! gets a [`GroupNetworkAdapter`] per target from [`PartitionNetwork`].

pub mod throttle;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use openraft10::error::{NetworkError, RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft10::network::{RPCOption, RaftNetworkFactory};
use openraft10::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft10::type_config::alias::{SnapshotOf, VoteOf};
use openraft10::BasicNode;
use openraft_multi::{GroupNetworkAdapter, GroupRouter};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use crate::machine::KvSnapshot;
use crate::wire::{
    GroupRequest, Request, Response, SnapshotChunk, SnapshotStep, TypeConfig, MAX_FRAME,
};
use throttle::Throttle;

/// Bytes of a snapshot per request.
pub const SNAPSHOT_CHUNK: usize = 1 << 20;

/// The top bit of a frame's length marks a batch frame: a `u32` count,
/// then that many `(u64 id, message)` pairs, each in `bincode`. A frame
/// without it is one plain message (a client's request or its answer).
const BATCH: u32 = 1 << 31;

/// Most bytes of requests a writer puts in one frame (it always takes at
/// least one request, whatever its size).
const BATCH_BYTES: usize = 4 << 20;

/// A frame read from a connection.
#[derive(Debug)]
pub enum Frame<T> {
    /// One message, answered in order.
    Plain(T),
    /// Messages with ids, answered by id in any order.
    Batch(Vec<(u64, T)>),
}

/// Reads one frame, plain or batch.
///
/// # Errors
/// I/O (`UnexpectedEof` when the peer closed); an oversized frame; bytes
/// that do not decode.
pub async fn read_any<R, T>(r: &mut R) -> std::io::Result<Frame<T>>
where
    R: tokio::io::AsyncRead + Unpin,
    T: serde::de::DeserializeOwned,
{
    let mut len = [0u8; 4];
    r.read_exact(&mut len).await?;
    let len = u32::from_le_bytes(len);
    let (batch, len) = (len & BATCH != 0, len & !BATCH);
    if len > MAX_FRAME {
        return Err(std::io::Error::other("frame too large"));
    }
    let mut buf = vec![0u8; len as usize];
    r.read_exact(&mut buf).await?;
    if !batch {
        return bincode::deserialize(&buf)
            .map(Frame::Plain)
            .map_err(std::io::Error::other);
    }
    let mut cursor = std::io::Cursor::new(&buf[..]);
    let count: u32 = bincode::deserialize_from(&mut cursor).map_err(std::io::Error::other)?;
    // At least 9 bytes an item: a count beyond that is a corrupt frame.
    let mut items = Vec::with_capacity((count as usize).min(buf.len() / 9));
    for _ in 0..count {
        items.push(bincode::deserialize_from(&mut cursor).map_err(std::io::Error::other)?);
    }
    Ok(Frame::Batch(items))
}

/// Encodes a batch frame of `items` into `buf` (cleared first).
///
/// # Errors
/// A message `bincode` cannot encode; a frame over the limit.
pub fn encode_batch<'a, T, I>(buf: &mut Vec<u8>, items: I) -> std::io::Result<()>
where
    T: serde::Serialize + 'a,
    I: IntoIterator<Item = (u64, &'a T)>,
{
    buf.clear();
    buf.extend_from_slice(&[0; 8]);
    let mut count = 0u32;
    for (id, msg) in items {
        bincode::serialize_into(&mut *buf, &(id, msg)).map_err(std::io::Error::other)?;
        count += 1;
    }
    let len = u32::try_from(buf.len() - 4)
        .ok()
        .filter(|l| *l <= MAX_FRAME)
        .ok_or_else(|| std::io::Error::other("frame too large"))?;
    buf.splice(
        0..8,
        (len | BATCH)
            .to_le_bytes()
            .into_iter()
            .chain(count.to_le_bytes()),
    );
    Ok(())
}

type Reply = oneshot::Sender<std::io::Result<Response>>;

/// One connection to a peer: a writer task batching what callers queue,
/// a reader task completing callers by id.
#[derive(Debug)]
struct Conn {
    queue: mpsc::UnboundedSender<(u64, Request)>,
    pending: Mutex<HashMap<u64, Reply>>,
    dead: AtomicBool,
}

impl Conn {
    fn open(addr: String) -> Arc<Conn> {
        let (queue, rx) = mpsc::unbounded_channel();
        let conn = Arc::new(Conn {
            queue,
            pending: Mutex::new(HashMap::new()),
            dead: AtomicBool::new(false),
        });
        tokio::spawn(run_conn(addr, rx, Arc::clone(&conn)));
        conn
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Reply>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks the connection dead and fails every call on it.
    fn fail(&self, rx: &mut mpsc::UnboundedReceiver<(u64, Request)>, e: &std::io::Error) {
        self.dead.store(true, Ordering::SeqCst);
        rx.close();
        while rx.try_recv().is_ok() {}
        for (_, reply) in self.pending().drain() {
            let _ = reply.send(Err(std::io::Error::new(e.kind(), e.to_string())));
        }
    }
}

async fn run_conn(addr: String, mut rx: mpsc::UnboundedReceiver<(u64, Request)>, conn: Arc<Conn>) {
    let stream = async {
        let s = TcpStream::connect(&addr).await?;
        s.set_nodelay(true)?;
        Ok::<_, std::io::Error>(s)
    };
    let stream = match tokio::time::timeout(Duration::from_secs(2), stream).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return conn.fail(&mut rx, &e),
        Err(_) => return conn.fail(&mut rx, &std::io::ErrorKind::TimedOut.into()),
    };
    let (rd, wr) = stream.into_split();
    let e = tokio::select! {
        e = write_requests(wr, &mut rx) => e,
        e = read_answers(rd, &conn) => e,
    };
    conn.fail(&mut rx, &e);
}

/// Sends what callers queue, everything queued at once in one frame.
async fn write_requests(
    mut wr: OwnedWriteHalf,
    rx: &mut mpsc::UnboundedReceiver<(u64, Request)>,
) -> std::io::Error {
    let mut batch = Vec::new();
    let mut buf = Vec::new();
    let mut busy = false;
    loop {
        let Some(first) = rx.recv().await else {
            return std::io::Error::other("connection closed");
        };
        batch.push(first);
        // While frames carry several requests (many partitions sending),
        // let the tasks that are ready run first: what they send in this
        // instant joins the frame. A lone sender is not kept waiting.
        if busy {
            tokio::task::yield_now().await;
        }
        let mut bytes = 0;
        while bytes < BATCH_BYTES {
            match rx.try_recv() {
                Ok(item) => {
                    bytes += approximate_size(&item.1);
                    batch.push(item);
                }
                Err(_) => break,
            }
        }
        if let Err(e) = encode_batch(&mut buf, batch.iter().map(|(id, r)| (*id, r))) {
            return e;
        }
        busy = batch.len() > 1;
        batch.clear();
        if let Err(e) = wr.write_all(&buf).await {
            return e;
        }
    }
}

/// A cheap size estimate of a request (its entries and snapshot bytes).
fn approximate_size(req: &Request) -> usize {
    match req {
        Request::Group {
            body: GroupRequest::Append(a),
            ..
        } => 64 + a.entries.len() * 128,
        Request::Group {
            body: GroupRequest::Snapshot(c),
            ..
        } => 64 + c.bytes.len(),
        _ => 64,
    }
}

/// Completes the callers of the answers the peer sends.
async fn read_answers(mut rd: OwnedReadHalf, conn: &Conn) -> std::io::Error {
    loop {
        match read_any::<_, Response>(&mut rd).await {
            Ok(Frame::Batch(items)) => {
                let mut pending = conn.pending();
                for (id, resp) in items {
                    if let Some(reply) = pending.remove(&id) {
                        let _ = reply.send(Ok(resp));
                    }
                }
            }
            Ok(Frame::Plain(_)) => return std::io::Error::other("a plain answer to a batch"),
            Err(e) => return e,
        }
    }
}

/// Every connection of a node to its peers, and where its peers are.
#[derive(Debug, Clone)]
pub struct Router {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    addrs: RwLock<HashMap<u64, String>>,
    conns: Mutex<HashMap<String, Arc<Conn>>>,
    next_id: AtomicU64,
    throttle: Arc<Throttle>,
}

impl Router {
    /// A router with no connections yet; partitions' traffic to replicas
    /// being added passes `throttle`.
    pub fn new(throttle: Arc<Throttle>) -> Self {
        Router {
            inner: Arc::new(Inner {
                addrs: RwLock::new(HashMap::new()),
                conns: Mutex::new(HashMap::new()),
                next_id: AtomicU64::new(1),
                throttle,
            }),
        }
    }

    /// The node's reassignment throttle.
    pub fn throttle(&self) -> &Arc<Throttle> {
        &self.inner.throttle
    }

    /// Records where node `id` listens.
    pub fn learn(&self, id: u64, addr: &str) {
        let known = self
            .inner
            .addrs
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
            .is_some_and(|a| a == addr);
        if !known {
            self.inner
                .addrs
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(id, addr.to_string());
        }
    }

    /// Where node `id` listens, if known.
    pub fn addr(&self, id: u64) -> Option<String> {
        self.inner
            .addrs
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
            .cloned()
    }

    /// Every node whose address it knows.
    pub fn peers(&self) -> Vec<u64> {
        self.inner
            .addrs
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .copied()
            .collect()
    }

    fn conn(&self, addr: &str) -> Arc<Conn> {
        let mut conns = self
            .inner
            .conns
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match conns.get(addr) {
            Some(c) if !c.dead.load(Ordering::SeqCst) => Arc::clone(c),
            _ => {
                let c = Conn::open(addr.to_string());
                conns.insert(addr.to_string(), Arc::clone(&c));
                c
            }
        }
    }

    /// Sends `req` to the node at `addr` and waits at most `ttl` for its
    /// answer.
    ///
    /// # Errors
    /// The connection failed or the answer did not come in time.
    pub async fn call_addr(
        &self,
        addr: &str,
        req: Request,
        ttl: Duration,
    ) -> std::io::Result<Response> {
        let conn = self.conn(addr);
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        conn.pending().insert(id, tx);
        if conn.queue.send((id, req)).is_err() {
            conn.pending().remove(&id);
            return Err(std::io::Error::other("connection closed"));
        }
        match tokio::time::timeout(ttl, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(std::io::Error::other("connection closed")),
            Err(_) => {
                conn.pending().remove(&id);
                Err(std::io::ErrorKind::TimedOut.into())
            }
        }
    }

    /// As [`Router::call_addr`], to node `target`.
    ///
    /// # Errors
    /// As [`Router::call_addr`]; no address known for `target`.
    pub async fn call(
        &self,
        target: u64,
        req: Request,
        ttl: Duration,
    ) -> std::io::Result<Response> {
        let addr = self
            .addr(target)
            .ok_or_else(|| std::io::Error::other(format!("no address of node {target}")))?;
        self.call_addr(&addr, req, ttl).await
    }

    /// A Raft request of `partition` to `target`, through the throttle when
    /// `target` is a replica being added. A peer that does not host the
    /// partition is an error (openraft retries).
    async fn partition_call(
        &self,
        target: u64,
        partition: u32,
        req: GroupRequest,
        option: &RPCOption,
    ) -> std::io::Result<Response> {
        let throttle = &self.inner.throttle;
        if throttle.applies(partition, target) {
            let bytes = bincode::serialized_size(&req).unwrap_or(0);
            throttle.take(bytes).await;
        }
        let req = Request::Group {
            partition,
            body: req,
        };
        match self.call(target, req, option.hard_ttl()).await? {
            Response::NotHosted(p) => Err(std::io::Error::other(format!(
                "node {target} does not host partition {p}"
            ))),
            r => Ok(r),
        }
    }
}

fn unreachable(e: &std::io::Error) -> RPCError<TypeConfig> {
    RPCError::Unreachable(Unreachable::new(e))
}

fn unexpected() -> RPCError<TypeConfig> {
    RPCError::Network(NetworkError::new(&std::io::Error::other(
        "unexpected response",
    )))
}

type Rpc<T> = Result<T, RPCError<TypeConfig>>;

/// A vote's or a pre-vote's answer, as openraft takes it.
fn vote_reply(answer: std::io::Result<Response>) -> Rpc<VoteResponse<TypeConfig>> {
    match answer {
        Ok(Response::Vote(r)) => r.map_err(|e| RPCError::Network(NetworkError::new(&e))),
        Ok(_) => Err(unexpected()),
        Err(e) => Err(unreachable(&e)),
    }
}

impl GroupRouter<TypeConfig, u32> for Router {
    type SnapshotData = KvSnapshot;

    async fn append_entries(
        &self,
        target: u64,
        partition: u32,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Rpc<AppendEntriesResponse<TypeConfig>> {
        match self
            .partition_call(target, partition, GroupRequest::Append(rpc), &option)
            .await
        {
            Ok(Response::Append(r)) => r.map_err(|e| RPCError::Network(NetworkError::new(&e))),
            Ok(_) => Err(unexpected()),
            Err(e) => Err(unreachable(&e)),
        }
    }

    async fn vote(
        &self,
        target: u64,
        partition: u32,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Rpc<VoteResponse<TypeConfig>> {
        let answer = self.partition_call(target, partition, GroupRequest::Vote(rpc), &option);
        vote_reply(answer.await)
    }

    async fn pre_vote(
        &self,
        target: u64,
        partition: u32,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Rpc<VoteResponse<TypeConfig>> {
        let answer = self.partition_call(target, partition, GroupRequest::PreVote(rpc), &option);
        vote_reply(answer.await)
    }

    async fn full_snapshot(
        &self,
        target: u64,
        partition: u32,
        vote: VoteOf<TypeConfig>,
        snapshot: SnapshotOf<TypeConfig, KvSnapshot>,
        _cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let mut peer = PartitionPeer {
            router: self,
            target,
            partition,
        };
        send_snapshot(&mut peer, vote, &snapshot, &option).await
    }

    async fn transfer_leader(
        &self,
        target: u64,
        partition: u32,
        req: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Rpc<TransferLeaderResponse<TypeConfig>> {
        match self
            .partition_call(
                target,
                partition,
                GroupRequest::TransferLeader(req),
                &option,
            )
            .await
        {
            Ok(Response::TransferLeader(r)) => {
                r.map_err(|e| RPCError::Network(NetworkError::new(&std::io::Error::other(e))))
            }
            Ok(_) => Err(unexpected()),
            Err(e) => Err(unreachable(&e)),
        }
    }
}

struct PartitionPeer<'a> {
    router: &'a Router,
    target: u64,
    partition: u32,
}

impl Call for PartitionPeer<'_> {
    async fn call(&mut self, req: GroupRequest, option: &RPCOption) -> std::io::Result<Response> {
        self.router
            .partition_call(self.target, self.partition, req, option)
            .await
    }
}

/// Makes each partition's Raft its network to each target: the node's
/// [`Router`] bound to the partition and target.
#[derive(Debug, Clone)]
pub struct PartitionNetwork {
    /// The partition.
    pub partition: u32,
    /// The node's router.
    pub router: Router,
}

impl RaftNetworkFactory<TypeConfig> for PartitionNetwork {
    type Network = GroupNetworkAdapter<TypeConfig, u32, Router>;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> Self::Network {
        self.router.learn(target, &node.addr);
        GroupNetworkAdapter::new(self.router.clone(), target, self.partition)
    }
}

/// A peer that answers requests: what [`send_snapshot`] sends through.
pub trait Call {
    /// Sends `req`, returns the answer.
    fn call(
        &mut self,
        req: GroupRequest,
        option: &RPCOption,
    ) -> impl Future<Output = std::io::Result<Response>> + Send;
}

/// Sends `snapshot` to `peer`, chunk by chunk from where the follower
/// asks: the first request carries no bytes and learns where the
/// follower's durable copy ends; the last makes it verify the file and
/// install it.
///
/// # Errors
/// A call that fails or a follower's refusal (the leader starts again
/// later); the leader's snapshot file gone (a newer one replaced it).
pub async fn send_snapshot<P: Call>(
    peer: &mut P,
    vote: VoteOf<TypeConfig>,
    snapshot: &SnapshotOf<TypeConfig, KvSnapshot>,
    option: &RPCOption,
) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
    let size = snapshot.snapshot.size();
    let mut position = 0;
    let mut bytes = Vec::new();
    let failed = |e: &dyn std::fmt::Display| {
        StreamingError::Network(NetworkError::new(&std::io::Error::other(e.to_string())))
    };
    loop {
        let req = GroupRequest::Snapshot(SnapshotChunk {
            vote,
            meta: snapshot.meta.clone(),
            size,
            position,
            bytes: std::mem::take(&mut bytes),
        });
        match peer.call(req, option).await {
            Ok(Response::Snapshot(Ok(SnapshotStep::Installed(r)))) => return Ok(r),
            Ok(Response::Snapshot(Ok(SnapshotStep::Next(at)))) => {
                position = at;
                bytes = snapshot
                    .snapshot
                    .read_chunk(at, SNAPSHOT_CHUNK)
                    .map_err(|e| failed(&e))?;
                if bytes.is_empty() {
                    return Err(failed(&"the snapshot file ended before its size"));
                }
            }
            Ok(Response::Snapshot(Err(refused))) => return Err(failed(&refused)),
            Ok(_) => return Err(failed(&"unexpected response")),
            Err(e) => return Err(StreamingError::Unreachable(Unreachable::new(&e))),
        }
    }
}

/// The writer half of a served connection: answers of plain requests in
/// order, answers of batched ones by id, batched as they finish.
#[derive(Debug)]
pub enum Answer {
    /// The answer to a plain request.
    Plain(Response),
    /// The answer to request `id` of a batch.
    Tagged(u64, Response),
}

/// Writes the answers `rx` yields to `wr`: each plain one in its own
/// frame, every tagged one ready at the moment in one batch frame.
///
/// # Errors
/// I/O.
pub async fn write_answers<W>(
    mut wr: W,
    mut rx: mpsc::UnboundedReceiver<Answer>,
) -> std::io::Result<()>
where
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut tagged: Vec<(u64, Response)> = Vec::new();
    let mut buf = Vec::new();
    let mut busy = false;
    while let Some(first) = rx.recv().await {
        // As the requests' writer does: wait one turn only while answers
        // come several at a time.
        if busy {
            tokio::task::yield_now().await;
        }
        let mut next = Some(first);
        let mut answers = 0;
        while let Some(answer) = next.take() {
            match answer {
                Answer::Plain(r) => {
                    flush_tagged(&mut wr, &mut tagged, &mut buf).await?;
                    crate::wire::write_frame(&mut wr, &r).await?;
                }
                Answer::Tagged(id, r) => tagged.push((id, r)),
            }
            answers += 1;
            next = rx.try_recv().ok();
        }
        busy = answers > 1;
        flush_tagged(&mut wr, &mut tagged, &mut buf).await?;
    }
    Ok(())
}

async fn flush_tagged<W>(
    wr: &mut W,
    tagged: &mut Vec<(u64, Response)>,
    buf: &mut Vec<u8>,
) -> std::io::Result<()>
where
    W: tokio::io::AsyncWrite + Unpin,
{
    if tagged.is_empty() {
        return Ok(());
    }
    encode_batch(buf, tagged.iter().map(|(id, r)| (*id, r)))?;
    tagged.clear();
    wr.write_all(buf).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::NodeRequest;

    /// A peer that answers each batch in reverse order (and the first
    /// request of each frame after the rest), echoing the number each
    /// request carries.
    async fn reversing_peer() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut rd, mut wr) = conn.into_split();
                    let mut buf = Vec::new();
                    while let Ok(Frame::Batch(items)) = read_any::<_, Request>(&mut rd).await {
                        let answers: Vec<(u64, Response)> = items
                            .into_iter()
                            .rev()
                            .map(|(id, req)| match req {
                                Request::Node(NodeRequest::Throttle { bytes_per_sec }) => {
                                    (id, Response::Beat(vec![(0, bytes_per_sec)]))
                                }
                                _ => (id, Response::NotHosted(0)),
                            })
                            .collect();
                        encode_batch(&mut buf, answers.iter().map(|(id, r)| (*id, r))).unwrap();
                        wr.write_all(&buf).await.unwrap();
                    }
                });
            }
        });
        addr
    }

    /// Invariant: with many calls in flight on one connection, answered
    /// out of order, each caller gets the answer to its own request.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn answers_reach_their_own_callers() {
        let addr = reversing_peer().await;
        let router = Router::new(Arc::new(Throttle::new(0)));
        let calls: Vec<_> = (0..200u64)
            .map(|n| {
                let (router, addr) = (router.clone(), addr.clone());
                tokio::spawn(async move {
                    let req = Request::Node(NodeRequest::Throttle { bytes_per_sec: n });
                    let r = router.call_addr(&addr, req, Duration::from_secs(10)).await;
                    (n, r.unwrap())
                })
            })
            .collect();
        for c in calls {
            let (n, r) = c.await.unwrap();
            match r {
                Response::Beat(v) => assert_eq!(v, vec![(0, n)], "call {n} got another's answer"),
                other => panic!("call {n}: {other:?}"),
            }
        }
        let conns = router.inner.conns.lock().unwrap().len();
        assert_eq!(conns, 1, "one connection to the peer");
    }

    /// Invariant: a batch frame decodes to the requests encoded, in order,
    /// and a plain frame stays plain.
    #[tokio::test]
    async fn batch_frames_round_trip() {
        let reqs = [
            Request::Node(NodeRequest::Status),
            Request::Node(NodeRequest::Throttle { bytes_per_sec: 9 }),
        ];
        let mut buf = Vec::new();
        encode_batch(
            &mut buf,
            reqs.iter().enumerate().map(|(i, r)| (i as u64 + 5, r)),
        )
        .unwrap();
        match read_any::<_, Request>(&mut &buf[..]).await.unwrap() {
            Frame::Batch(items) => {
                assert_eq!(items.len(), 2);
                assert_eq!(items[0].0, 5);
                assert!(matches!(
                    items[1],
                    (6, Request::Node(NodeRequest::Throttle { bytes_per_sec: 9 }))
                ));
            }
            Frame::Plain(_) => panic!("a batch read as plain"),
        }
        let mut plain = Vec::new();
        crate::wire::write_frame(&mut plain, &Request::group(0, GroupRequest::Dump))
            .await
            .unwrap();
        assert!(matches!(
            read_any::<_, Request>(&mut &plain[..]).await.unwrap(),
            Frame::Plain(Request::Group {
                body: GroupRequest::Dump,
                ..
            })
        ));
    }

    /// Invariant: a connection that fails fails its calls (no caller
    /// waits forever), and the next call opens a new one.
    #[tokio::test]
    async fn a_dead_peer_fails_calls_at_once() {
        let router = Router::new(Arc::new(Throttle::new(0)));
        let addr = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        };
        let r = router
            .call_addr(
                &addr,
                Request::Node(NodeRequest::Status),
                Duration::from_secs(30),
            )
            .await;
        assert!(r.is_err());
        let peer = reversing_peer().await;
        let r = router
            .call_addr(
                &peer,
                Request::Node(NodeRequest::Throttle { bytes_per_sec: 1 }),
                Duration::from_secs(10),
            )
            .await;
        assert!(matches!(r, Ok(Response::Beat(_))));
    }
}
