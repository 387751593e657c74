//! The client: requests to one node's address, writes sent to the leader
//! (following a node's redirect), one connection per address.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use tokio::net::TcpStream;

use crate::proto::{read_frame, write_frame, Put, PutError, Request, Response, Status};

/// Sends `req` to `addr` on a fresh connection.
///
/// # Errors
/// I/O.
pub async fn request(addr: &str, req: &Request) -> std::io::Result<Response> {
    let mut s = TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    write_frame(&mut s, req).await?;
    read_frame(&mut s).await
}

/// A node's status.
///
/// # Errors
/// I/O, or an unexpected answer.
pub async fn status(addr: &str) -> std::io::Result<Status> {
    match request(addr, &Request::Status).await? {
        Response::Status(s) => Ok(s),
        _ => Err(std::io::Error::other("unexpected answer")),
    }
}

/// Sends an admin request to the leader: asks `addr` for the leader and
/// its address, then sends `req` there (retrying while an election runs).
///
/// # Errors
/// No leader within ten seconds; I/O.
pub async fn to_leader(addr: &str, req: &Request) -> Result<Response, String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let s = status(addr).await.map_err(|e| format!("{addr}: {e}"))?;
        let leader = s.leader.and_then(|l| {
            s.nodes
                .iter()
                .find(|(i, _)| *i == l)
                .map(|(_, a)| a.clone())
        });
        if let Some(l) = leader {
            match request(&l, req).await {
                Ok(Response::Reassign(Err(e)) | Response::Reassignments(Err(e)))
                    if e == "not the leader" && tokio::time::Instant::now() < deadline => {}
                Ok(r) => return Ok(r),
                Err(e) if tokio::time::Instant::now() >= deadline => return Err(e.to_string()),
                Err(_) => {}
            }
        } else if tokio::time::Instant::now() >= deadline {
            return Err("no leader".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every key and value a node applied.
///
/// # Errors
/// I/O, or an unexpected answer.
pub async fn dump(addr: &str) -> std::io::Result<BTreeMap<String, String>> {
    match request(addr, &Request::Dump).await? {
        Response::Dump(d) => Ok(d),
        _ => Err(std::io::Error::other("unexpected answer")),
    }
}

/// A node's own value for `key`.
///
/// # Errors
/// I/O, or an unexpected answer.
pub async fn get(addr: &str, key: &str) -> std::io::Result<Option<String>> {
    match request(addr, &Request::Get(key.to_string())).await? {
        Response::Get(v) => Ok(v),
        _ => Err(std::io::Error::other("unexpected answer")),
    }
}

/// A writer that finds the leader and keeps a connection to it.
#[derive(Debug)]
pub struct Writer {
    nodes: Vec<String>,
    leader: Option<String>,
    next: usize,
    conns: HashMap<String, TcpStream>,
}

impl Writer {
    /// A writer to the cluster of `nodes` (addresses).
    pub fn new(nodes: Vec<String>) -> Self {
        Writer {
            nodes,
            leader: None,
            next: 0,
            conns: HashMap::new(),
        }
    }

    async fn send(&mut self, addr: &str, req: &Request) -> std::io::Result<Response> {
        if !self.conns.contains_key(addr) {
            let s = TcpStream::connect(addr).await?;
            s.set_nodelay(true)?;
            self.conns.insert(addr.to_string(), s);
        }
        let Some(s) = self.conns.get_mut(addr) else {
            return Err(std::io::Error::other("no connection"));
        };
        let r = async {
            write_frame(s, req).await?;
            read_frame(s).await
        }
        .await;
        if r.is_err() {
            self.conns.remove(addr);
        }
        r
    }

    /// Writes `key = value`, acknowledged once committed and applied by
    /// the leader; retries through leader changes until `deadline`.
    /// Returns the write's log index.
    ///
    /// # Errors
    /// `TimedOut` if no leader acknowledged it in time.
    pub async fn put(
        &mut self,
        key: &str,
        value: &str,
        deadline: tokio::time::Instant,
    ) -> std::io::Result<u64> {
        let req = Request::Put(Put {
            key: key.to_string(),
            value: value.to_string(),
        });
        while tokio::time::Instant::now() < deadline {
            let addr = if let Some(a) = &self.leader {
                a.clone()
            } else {
                self.next = (self.next + 1) % self.nodes.len().max(1);
                self.nodes.get(self.next).cloned().unwrap_or_default()
            };
            match self.send(&addr, &req).await {
                Ok(Response::Put(Ok(index))) => {
                    self.leader = Some(addr);
                    return Ok(index);
                }
                Ok(Response::Put(Err(PutError::NotLeader(Some((_, leader)))))) => {
                    self.leader = Some(leader);
                }
                _ => {
                    self.leader = None;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
        Err(std::io::Error::from(std::io::ErrorKind::TimedOut))
    }
}
