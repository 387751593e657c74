//! The client. Every call has one deadline that covers connecting,
//! sending and waiting for the answer, every retry included.
//!
//! - Writes go to the leader (following redirects) and carry a request id
//!   ([`RequestId`]): a retry after a lost answer is applied once and
//!   answered with the first result. A write that certainly did not apply
//!   (every attempt refused before it could, or never sent) fails with
//!   [`Error::Failed`]; one that may have applied ends at its deadline with
//!   [`Error::Unknown`].
//! - Reads are linearizable (the leader confirms it leads and has applied
//!   the commit point of that moment), or stale on request (any node, the
//!   answer carrying the index it was read at).
//!
//! The transport is a parameter ([`Transport`]): TCP ([`Tcp`]) for real
//! nodes, the in-process cluster's router in tests.

pub mod partitioned;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::wire::Status;
use crate::wire::{
    read_frame, write_frame, GroupRequest, NodeRequest, Put, Read, Refusal, Request, RequestId,
    Response,
};

/// A failed call: `sent` if the request may have reached the node (an
/// answer lost after sending), not if it certainly did not (no connection).
#[derive(Debug)]
pub struct CallError {
    /// The request may have been delivered.
    pub sent: bool,
    /// What failed.
    pub error: std::io::Error,
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({})",
            self.error,
            if self.sent {
                "maybe delivered"
            } else {
                "not sent"
            }
        )
    }
}

/// How a client reaches a node by address.
pub trait Transport: Send {
    /// Sends `req` to `addr` and waits for the answer, all by `deadline`.
    fn call(
        &mut self,
        addr: &str,
        req: &Request,
        deadline: Instant,
    ) -> impl Future<Output = Result<Response, CallError>> + Send;
}

/// TCP, one kept connection per address (dropped after an error).
#[derive(Debug, Default)]
pub struct Tcp {
    conns: HashMap<String, TcpStream>,
}

fn timed_out() -> std::io::Error {
    std::io::Error::from(std::io::ErrorKind::TimedOut)
}

impl Transport for Tcp {
    async fn call(
        &mut self,
        addr: &str,
        req: &Request,
        deadline: Instant,
    ) -> Result<Response, CallError> {
        if !self.conns.contains_key(addr) {
            let s = tokio::time::timeout_at(deadline, TcpStream::connect(addr))
                .await
                .unwrap_or_else(|_| Err(timed_out()))
                .map_err(|error| CallError { sent: false, error })?;
            s.set_nodelay(true)
                .map_err(|error| CallError { sent: false, error })?;
            self.conns.insert(addr.to_string(), s);
        }
        let Some(s) = self.conns.get_mut(addr) else {
            return Err(CallError {
                sent: false,
                error: std::io::Error::other("no connection"),
            });
        };
        let r = tokio::time::timeout_at(deadline, async {
            write_frame(s, req).await?;
            read_frame(s).await
        })
        .await
        .unwrap_or_else(|_| Err(timed_out()));
        if r.is_err() {
            // A late answer must never be read as the next call's.
            self.conns.remove(addr);
        }
        r.map_err(|error| CallError { sent: true, error })
    }
}

/// One call to `addr` over a fresh TCP connection, by `deadline`.
///
/// # Errors
/// `Timeout` at the deadline; `Io`.
pub async fn request(addr: &str, req: &Request, deadline: Instant) -> Result<Response> {
    Tcp::default()
        .call(addr, req, deadline)
        .await
        .map_err(|e| match e.error.kind() {
            std::io::ErrorKind::TimedOut => Error::Timeout {
                last: format!("{addr}: {e}"),
            },
            _ => Error::io(addr, e.error),
        })
}

/// A node's status, by `deadline`.
///
/// # Errors
/// As [`request`]; `Protocol`.
pub async fn status(addr: &str, deadline: Instant) -> Result<Status> {
    match request(addr, &Request::Node(NodeRequest::Status), deadline).await? {
        Response::Status(s) => Ok(s),
        _ => Err(Error::Protocol { addr: addr.into() }),
    }
}

/// Every key and value partition `partition`'s replica on node `addr`
/// applied, by `deadline`.
///
/// # Errors
/// As [`request`]; `Protocol` (also for a node that does not host it).
pub async fn dump_partition(
    addr: &str,
    partition: u32,
    deadline: Instant,
) -> Result<BTreeMap<String, String>> {
    let req = Request::group(partition, GroupRequest::Dump);
    match request(addr, &req, deadline).await? {
        Response::Dump(d) => Ok(d),
        _ => Err(Error::Protocol { addr: addr.into() }),
    }
}

/// Waits a little before a retry, never past `deadline`.
async fn pause(deadline: Instant) {
    tokio::time::sleep_until(deadline.min(Instant::now() + Duration::from_millis(20))).await;
}

/// A random client id (the clock and the process id, mixed).
fn random_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish()
}

/// A client of the cluster at `nodes` (addresses): finds the leader and
/// keeps a connection to it. One call at a time (`&mut self`): its
/// requests are numbered in order, which is what deduplication relies on.
#[derive(Debug)]
pub struct Client<T: Transport = Tcp> {
    transport: T,
    nodes: Vec<String>,
    leader: Option<String>,
    next: usize,
    id: u64,
    seq: u64,
    partition: u32,
}

impl Client<Tcp> {
    /// A TCP client of the cluster at `nodes`.
    pub fn new(nodes: Vec<String>) -> Self {
        Client::with_transport(nodes, Tcp::default())
    }
}

impl<T: Transport> Client<T> {
    /// A client over `transport`.
    pub fn with_transport(nodes: Vec<String>, transport: T) -> Self {
        Client {
            transport,
            nodes,
            leader: None,
            next: 0,
            id: random_id(),
            seq: 0,
            partition: 0,
        }
    }

    /// A client of partition `partition` of the partitioned service
    /// (its requests tagged with it).
    #[must_use]
    pub fn of_partition(mut self, partition: u32) -> Self {
        self.partition = partition;
        self
    }

    fn wrap(&self, body: GroupRequest) -> Request {
        Request::group(self.partition, body)
    }

    /// This client's id (in its requests' ids).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The node to try: the leader if known, else the next in turn.
    fn target(&mut self) -> String {
        if let Some(a) = &self.leader {
            return a.clone();
        }
        self.next = (self.next + 1) % self.nodes.len().max(1);
        self.nodes.get(self.next).cloned().unwrap_or_default()
    }

    /// Follows a refusal: the leader named, or another node.
    fn redirect(&mut self, leader: Option<(u64, String)>) {
        self.leader = leader.map(|(_, a)| a);
    }

    /// Writes `key = value`, acknowledged once committed and applied by
    /// the leader; retries (same request id) through leader changes until
    /// `deadline`. Returns the index of the entry that applied it.
    ///
    /// # Errors
    /// `Failed` if it certainly did not apply; `Unknown` if an attempt may
    /// have applied it and none was answered by the deadline.
    pub async fn put(&mut self, key: &str, value: &str, deadline: Instant) -> Result<u64> {
        self.seq += 1;
        let req = self.wrap(GroupRequest::Put(Put {
            key: key.to_string(),
            value: value.to_string(),
            request: Some(RequestId {
                client: self.id,
                seq: self.seq,
            }),
        }));
        let mut maybe_applied = false;
        let mut last = String::from("no attempt before the deadline");
        loop {
            if Instant::now() >= deadline {
                return Err(if maybe_applied {
                    Error::Unknown { last }
                } else {
                    Error::Failed { last }
                });
            }
            let addr = self.target();
            match self.transport.call(&addr, &req, deadline).await {
                Ok(Response::Put(Ok(index))) => {
                    self.leader = Some(addr);
                    return Ok(index);
                }
                // Refused before it was appended there (or cut from that
                // node's log by a newer leader's: never committed).
                Ok(Response::Put(Err(Refusal::NotLeader { leader }))) => {
                    last = format!("{addr}: not the leader");
                    let known = leader.is_some();
                    self.redirect(leader);
                    if !known {
                        pause(deadline).await;
                    }
                }
                Ok(Response::Put(Err(r))) => {
                    maybe_applied = true;
                    last = format!("{addr}: {r}");
                    self.leader = None;
                    pause(deadline).await;
                }
                Ok(_) => {
                    maybe_applied = true;
                    last = format!("{addr}: unexpected answer");
                    self.leader = None;
                }
                Err(e) => {
                    maybe_applied |= e.sent;
                    last = format!("{addr}: {e}");
                    self.leader = None;
                    pause(deadline).await;
                }
            }
        }
    }

    /// Reads `key` linearizably: from the leader, once it confirmed with a
    /// quorum that it leads and applied the commit point of that moment;
    /// retries through leader changes until `deadline`.
    ///
    /// # Errors
    /// `Timeout` without such an answer by the deadline.
    pub async fn get(&mut self, key: &str, deadline: Instant) -> Result<Read> {
        let req = self.wrap(GroupRequest::Get {
            key: key.to_string(),
            stale: false,
        });
        let mut last = String::from("no attempt before the deadline");
        loop {
            if Instant::now() >= deadline {
                return Err(Error::Timeout { last });
            }
            let addr = self.target();
            match self.transport.call(&addr, &req, deadline).await {
                Ok(Response::Get(Ok(read))) => {
                    self.leader = Some(addr);
                    return Ok(read);
                }
                Ok(Response::Get(Err(Refusal::NotLeader { leader }))) => {
                    last = format!("{addr}: not the leader");
                    let known = leader.is_some();
                    self.redirect(leader);
                    if !known {
                        pause(deadline).await;
                    }
                }
                Ok(Response::Get(Err(r))) => {
                    last = format!("{addr}: {r}");
                    self.leader = None;
                    pause(deadline).await;
                }
                Ok(_) => return Err(Error::Protocol { addr }),
                Err(e) => {
                    last = format!("{addr}: {e}");
                    self.leader = None;
                    pause(deadline).await;
                }
            }
        }
    }

    /// Reads `key` from node `addr`'s own state machine, without any
    /// leader check (possibly behind: the answer names the index applied).
    ///
    /// # Errors
    /// `Timeout`, `Io`, or the node's refusal.
    pub async fn get_stale(&mut self, addr: &str, key: &str, deadline: Instant) -> Result<Read> {
        let req = self.wrap(GroupRequest::Get {
            key: key.to_string(),
            stale: true,
        });
        match self.transport.call(addr, &req, deadline).await {
            Ok(Response::Get(r)) => r.map_err(Error::from),
            Ok(_) => Err(Error::Protocol { addr: addr.into() }),
            Err(e) if e.error.kind() == std::io::ErrorKind::TimedOut => Err(Error::Timeout {
                last: format!("{addr}: {e}"),
            }),
            Err(e) => Err(Error::io(addr, e.error)),
        }
    }
}
