//! The partitioned service's client: each key goes to its partition
//! ([`crate::wire::partition_of`]), through a [`Client`] per partition that
//! finds and follows that partition's leader (redirects, retries with the
//! same request id, one deadline per call), and the admin calls that go
//! to the controller's leader.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use std::sync::Arc;

use crate::client::{CallError, Client, Tcp, Transport};
use crate::error::{Error, Result};
use crate::wire::admin::{AlterError, Control};
use crate::wire::admin::{Listing, Metrics, NodeView};
use crate::wire::partition_of;
use crate::wire::{NodeRequest, Read, Refusal, Request, Response};

/// A client of every partition: one session per partition (its own
/// leader, its own request ids), one transport for all of them (a TCP
/// connection per node, not per partition and node). One call at a
/// time.
#[derive(Debug)]
pub struct PartitionedClient<T: Transport = Tcp> {
    clients: Vec<Client<Shared<T>>>,
}

/// One transport shared by a [`PartitionedClient`]'s sessions (they take
/// turns: the client makes one call at a time).
#[derive(Debug)]
pub struct Shared<T>(Arc<tokio::sync::Mutex<T>>);

impl<T: Transport> Transport for Shared<T> {
    async fn call(
        &mut self,
        addr: &str,
        req: &Request,
        deadline: Instant,
    ) -> std::result::Result<Response, CallError> {
        self.0.lock().await.call(addr, req, deadline).await
    }
}

impl PartitionedClient<Tcp> {
    /// A TCP client of the `partitions` partitions at `nodes`.
    pub fn new(nodes: &[String], partitions: u32) -> Self {
        PartitionedClient::with_transport(nodes, partitions, Tcp::default())
    }
}

impl<T: Transport> PartitionedClient<T> {
    /// A client over `transport`, shared by its partitions' sessions.
    pub fn with_transport(nodes: &[String], partitions: u32, transport: T) -> Self {
        let shared = Arc::new(tokio::sync::Mutex::new(transport));
        PartitionedClient {
            clients: (0..partitions.max(1))
                .map(|p| {
                    let t = Shared(Arc::clone(&shared));
                    Client::with_transport(nodes.to_vec(), t).of_partition(p)
                })
                .collect(),
        }
    }

    /// This client's id in a history: its first partition's session's.
    pub fn id(&self) -> u64 {
        self.clients.first().map_or(0, Client::id)
    }

    fn of(&mut self, key: &str) -> Result<&mut Client<Shared<T>>> {
        let n = u32::try_from(self.clients.len()).unwrap_or(1);
        let p = partition_of(key, n) as usize;
        self.clients.get_mut(p).ok_or(Error::Failed {
            last: format!("no client of partition {p}"),
        })
    }

    /// Writes `key = value` (see [`Client::put`]).
    ///
    /// # Errors
    /// As [`Client::put`].
    pub async fn put(&mut self, key: &str, value: &str, deadline: Instant) -> Result<u64> {
        self.of(key)?.put(key, value, deadline).await
    }

    /// Reads `key` linearizably (see [`Client::get`]).
    ///
    /// # Errors
    /// As [`Client::get`].
    pub async fn get(&mut self, key: &str, deadline: Instant) -> Result<Read> {
        self.of(key)?.get(key, deadline).await
    }

    /// Reads `key` from node `addr`'s own replica of its partition.
    ///
    /// # Errors
    /// As [`Client::get_stale`].
    pub async fn get_stale(&mut self, addr: &str, key: &str, deadline: Instant) -> Result<Read> {
        self.of(key)?.get_stale(addr, key, deadline).await
    }
}

/// Sends `req` to the controller's leader among `nodes` by `deadline`,
/// following redirects, retrying while there is none.
///
/// # Errors
/// `Timeout` without an answer from a leader.
pub async fn to_controller(nodes: &[String], req: &Request, deadline: Instant) -> Result<Response> {
    let mut last = String::from("no node answered");
    let mut next: Option<String> = None;
    let mut i = 0;
    loop {
        if Instant::now() >= deadline {
            return Err(Error::Timeout { last });
        }
        let addr = next.take().unwrap_or_else(|| {
            i += 1;
            nodes
                .get(i % nodes.len().max(1))
                .cloned()
                .unwrap_or_default()
        });
        match crate::client::request(&addr, req, deadline).await {
            Ok(
                Response::Control(Err(Refusal::NotLeader { leader }))
                | Response::List(Err(Refusal::NotLeader { leader })),
            ) => {
                last = format!("{addr}: not the controller's leader");
                next = leader.map(|(_, a)| a);
                if next.is_none() {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            Ok(Response::Control(Err(r)) | Response::List(Err(r))) => {
                last = format!("{addr}: {r}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok(r) => return Ok(r),
            Err(e) => {
                last = e.to_string();
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Alters the reassignments of any number of partitions at once (an
/// empty target cancels): the generation given, or every refusal.
///
/// # Errors
/// As [`to_controller`]; `Protocol`.
pub async fn alter(
    nodes: &[String],
    targets: Vec<(u32, Vec<u64>)>,
    deadline: Instant,
) -> Result<Result<u64, Vec<(u32, AlterError)>>> {
    control(nodes, Control::Alter { targets, now_ms: 0 }, deadline).await
}

/// Sends a controller change.
///
/// # Errors
/// As [`to_controller`]; `Protocol`.
pub async fn control(
    nodes: &[String],
    c: Control,
    deadline: Instant,
) -> Result<Result<u64, Vec<(u32, AlterError)>>> {
    match to_controller(nodes, &Request::Node(NodeRequest::Control(c)), deadline).await? {
        Response::Control(Ok(r)) => Ok(r),
        _ => Err(Error::Protocol {
            addr: "the controller".into(),
        }),
    }
}

/// The reassignments in progress (of `partitions`, or all).
///
/// # Errors
/// As [`to_controller`]; `Protocol`.
pub async fn list(
    nodes: &[String],
    partitions: Vec<u32>,
    deadline: Instant,
) -> Result<Vec<Listing>> {
    match to_controller(
        nodes,
        &Request::Node(NodeRequest::List { partitions }),
        deadline,
    )
    .await?
    {
        Response::List(Ok(l)) => Ok(l),
        _ => Err(Error::Protocol {
            addr: "the controller".into(),
        }),
    }
}

/// Every node's view of its partitions (`None`: it did not answer).
pub async fn views(nodes: &[String], deadline: Instant) -> BTreeMap<String, Option<NodeView>> {
    let mut out = BTreeMap::new();
    for addr in nodes {
        let v =
            match crate::client::request(addr, &Request::Node(NodeRequest::Partitions), deadline)
                .await
            {
                Ok(Response::Partitions(v)) => Some(v),
                _ => None,
            };
        out.insert(addr.clone(), v);
    }
    out
}

/// What [`health`] found: the partitions no answering node leads, and the
/// voters (partition, node) whose node does not host their partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Health {
    /// Partitions without a leader among the answering nodes.
    pub unled: Vec<u32>,
    /// (partition, node): a voter, by its leader, whose node answers and
    /// does not host the partition, or does not answer.
    pub unhosted: Vec<(u32, u64)>,
}

impl Health {
    /// Every partition led and every voter hosted.
    pub fn ok(&self) -> bool {
        self.unled.is_empty() && self.unhosted.is_empty()
    }
}

/// Asks every node of `nodes` its partitions: which of `partitions` have
/// no leader, and which voters' nodes do not host their partition (a
/// node that does not answer hosts nothing).
pub async fn health(nodes: &[String], partitions: u32, deadline: Instant) -> Health {
    let views: Vec<NodeView> = views(nodes, deadline)
        .await
        .into_values()
        .flatten()
        .collect();
    let hosted: std::collections::BTreeSet<(u64, u32)> = views
        .iter()
        .flat_map(|n| n.partitions.iter().map(move |p| (n.node, p.partition)))
        .collect();
    let led = crate::wire::admin::leaders(&views);
    Health {
        unled: (0..partitions).filter(|p| !led.contains_key(p)).collect(),
        unhosted: led
            .iter()
            .flat_map(|(p, l)| l.voters.iter().map(move |n| (*p, *n)))
            .filter(|(p, n)| !hosted.contains(&(*n, *p)))
            .collect(),
    }
}

/// Every answering node's metrics.
pub async fn metrics(nodes: &[String], deadline: Instant) -> Vec<Metrics> {
    let mut out = Vec::new();
    for addr in nodes {
        if let Ok(Response::Metrics(m)) =
            crate::client::request(addr, &Request::Node(NodeRequest::Metrics), deadline).await
        {
            out.push(m);
        }
    }
    out
}

/// Sets every node's reassignment throttle.
///
/// # Errors
/// A node that did not answer by `deadline`.
pub async fn throttle(nodes: &[String], bytes_per_sec: u64, deadline: Instant) -> Result<()> {
    for addr in nodes {
        // A node starting up answers within the deadline.
        loop {
            let r = crate::client::request(
                addr,
                &Request::Node(NodeRequest::Throttle { bytes_per_sec }),
                deadline,
            )
            .await;
            match r {
                Ok(_) => break,
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }
    Ok(())
}
