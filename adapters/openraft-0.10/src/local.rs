//! An in-process network for many Raft groups: [`LocalRouter`] holds every
//! Raft of every node in one process, by (node, group), and implements
//! `openraft-multi`'s `GroupRouter`; openraft-multi's `GroupNetworkAdapter`
//! binds each of a group's connections to its group ([`LocalRouter::factory`]).
//! For tests, examples and simulations (a one-group cluster is any one
//! group id).
//!
//! A deployment implements `GroupRouter` over its own transport in the same
//! shape: one connection per peer node, shared by every group, each call
//! naming its group. A snapshot sent between processes travels as chunks of
//! [`SnapshotFile::read_chunk`](crate::SnapshotFile::read_chunk) into
//! [`SnapshotFiles::receive`]; here [`LocalRouter::insert_files`] copies it
//! the same way ([`SnapshotFiles::copy_in`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use openraft10::error::{NetworkError, RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft10::network::RPCOption;
use openraft10::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft10::storage::RaftStateMachine;
use openraft10::type_config::alias::{SnapshotMetaOf, SnapshotOf, VoteOf};
use openraft10::{Raft, RaftNetworkFactory, RaftTypeConfig};
use openraft_multi::{GroupNetworkAdapter, GroupRouter};

use crate::mapping::EpochLeaderId;
use crate::snapshot::{SnapshotData, SnapshotFiles};

/// How a node takes in a snapshot the leader sends: the sender's data in,
/// the receiver's out (for snapshot files: copied chunk by chunk into the
/// receiver's store and finished there).
pub type Receive<C, SD> =
    Arc<dyn Fn(&SnapshotMetaOf<C>, SD) -> std::io::Result<SD> + Send + Sync + 'static>;

/// A Raft and how it takes in snapshots (`None`: the data as sent).
struct Entry<C: RaftTypeConfig, SM: RaftStateMachine<C>> {
    raft: Raft<C, SM>,
    receive: Option<Receive<C, SM::SnapshotData>>,
}

/// Rafts by (node, group).
type Rafts<C, SM> = BTreeMap<(u64, u64), Entry<C, SM>>;

/// Every Raft in the process, by (node, group).
pub struct LocalRouter<C: RaftTypeConfig, SM: RaftStateMachine<C>> {
    rafts: Arc<Mutex<Rafts<C, SM>>>,
}

impl<C: RaftTypeConfig, SM: RaftStateMachine<C>> Clone for LocalRouter<C, SM> {
    fn clone(&self) -> Self {
        LocalRouter {
            rafts: Arc::clone(&self.rafts),
        }
    }
}

impl<C: RaftTypeConfig, SM: RaftStateMachine<C>> Default for LocalRouter<C, SM> {
    fn default() -> Self {
        LocalRouter {
            rafts: Arc::new(Mutex::new(BTreeMap::new())),
        }
    }
}

#[derive(Debug)]
struct Down;

impl std::fmt::Display for Down {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("no such node or group (down)")
    }
}

impl std::error::Error for Down {}

impl<C: RaftTypeConfig, SM: RaftStateMachine<C>> LocalRouter<C, SM> {
    fn rafts(&self) -> MutexGuard<'_, Rafts<C, SM>> {
        self.rafts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Group `group`'s Raft on `node` answers from now on.
    pub fn insert(&self, node: u64, group: u64, raft: Raft<C, SM>) {
        self.rafts().insert(
            (node, group),
            Entry {
                raft,
                receive: None,
            },
        );
    }

    /// As [`LocalRouter::insert`], the node taking in snapshots with `receive`.
    pub fn insert_receiving(
        &self,
        node: u64,
        group: u64,
        raft: Raft<C, SM>,
        receive: Receive<C, SM::SnapshotData>,
    ) {
        let receive = Some(receive);
        self.rafts().insert((node, group), Entry { raft, receive });
    }

    /// As [`LocalRouter::insert`], the node taking in snapshots into
    /// `files` (its state machine's, [`crate::FileMachine::files`]), copied
    /// chunk by chunk and verified before openraft installs them.
    pub fn insert_files(&self, node: u64, group: u64, raft: Raft<C, SM>, files: SnapshotFiles)
    where
        SM: RaftStateMachine<C, SnapshotData = SnapshotData>,
        C::LeaderId: EpochLeaderId,
    {
        let chunk = files.options.chunk_bytes;
        let receive: Receive<C, SnapshotData> =
            Arc::new(move |meta, from| files.copy_in::<C>(meta, &from, chunk));
        self.insert_receiving(node, group, raft, receive);
    }

    /// Calls to `node`'s `group` fail from now on (the node is down).
    pub fn remove(&self, node: u64, group: u64) -> Option<Raft<C, SM>> {
        self.rafts().remove(&(node, group)).map(|e| e.raft)
    }

    /// Group `group`'s Raft on `node`.
    pub fn get(&self, node: u64, group: u64) -> Option<Raft<C, SM>> {
        self.rafts().get(&(node, group)).map(|e| e.raft.clone())
    }

    /// Every Raft.
    pub fn all(&self) -> Vec<Raft<C, SM>> {
        self.rafts().values().map(|e| e.raft.clone()).collect()
    }

    /// The network factory of `group`'s Rafts.
    pub fn factory(&self, group: u64) -> LocalFactory<C, SM> {
        LocalFactory {
            router: self.clone(),
            group,
        }
    }
}

impl<C, SM> GroupRouter<C, u64> for LocalRouter<C, SM>
where
    C: RaftTypeConfig<NodeId = u64>,
    SM: RaftStateMachine<C>,
{
    type SnapshotData = SM::SnapshotData;

    async fn append_entries(
        &self,
        target: u64,
        group_id: u64,
        rpc: AppendEntriesRequest<C>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<C>, RPCError<C>> {
        let raft = self
            .get(target, group_id)
            .ok_or_else(|| RPCError::Unreachable(Unreachable::new(&Down)))?;
        raft.append_entries(rpc)
            .await
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))
    }

    async fn vote(
        &self,
        target: u64,
        group_id: u64,
        rpc: VoteRequest<C>,
        _option: RPCOption,
    ) -> Result<VoteResponse<C>, RPCError<C>> {
        let raft = self
            .get(target, group_id)
            .ok_or_else(|| RPCError::Unreachable(Unreachable::new(&Down)))?;
        raft.vote(rpc)
            .await
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))
    }

    async fn pre_vote(
        &self,
        _target: u64,
        _group_id: u64,
        rpc: VoteRequest<C>,
        _option: RPCOption,
    ) -> Result<VoteResponse<C>, RPCError<C>> {
        // Pre-vote not served: granted, so elections take the normal path.
        Ok(VoteResponse::new(rpc.vote, None, true))
    }

    async fn full_snapshot(
        &self,
        target: u64,
        group_id: u64,
        vote: VoteOf<C>,
        snapshot: SnapshotOf<C, SM::SnapshotData>,
        _cancel: impl std::future::Future<Output = ReplicationClosed> + Send + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<C>, StreamingError<C>> {
        let (raft, receive) = self
            .rafts()
            .get(&(target, group_id))
            .map(|e| (e.raft.clone(), e.receive.clone()))
            .ok_or_else(|| StreamingError::Unreachable(Unreachable::new(&Down)))?;
        let snapshot = match receive {
            None => snapshot,
            Some(receive) => {
                // The receiver finishes the transfer before openraft sees
                // it: a transfer that fails is a failed RPC, retried.
                let data = receive(&snapshot.meta, snapshot.snapshot)
                    .map_err(|e| StreamingError::Network(NetworkError::new(&e)))?;
                SnapshotOf::<C, SM::SnapshotData> {
                    meta: snapshot.meta,
                    snapshot: data,
                }
            }
        };
        raft.install_full_snapshot(vote, snapshot)
            .await
            .map_err(|e| StreamingError::Network(NetworkError::new(&e)))
    }
}

/// One group's network factory: each connection bound to (target, group).
pub struct LocalFactory<C: RaftTypeConfig, SM: RaftStateMachine<C>> {
    router: LocalRouter<C, SM>,
    group: u64,
}

impl<C, SM> RaftNetworkFactory<C> for LocalFactory<C, SM>
where
    C: RaftTypeConfig<NodeId = u64>,
    SM: RaftStateMachine<C>,
{
    type Network = GroupNetworkAdapter<C, u64, LocalRouter<C, SM>>;

    async fn new_client(&mut self, target: u64, _node: &C::Node) -> Self::Network {
        GroupNetworkAdapter::new(self.router.clone(), target, self.group)
    }
}
