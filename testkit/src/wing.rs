//! [`WingTest`]: what the tests ask of a `KRaft` wing beyond its door,
//! each through the door (an append and its wait, an entry's epoch read
//! back, a plain suffix truncation as the follower's divergence point).

use quorumlog_checkpoint::{ClusterId, Epoch, Offset};
use quorumlog_log::AppendInfo;
use quorumlog_raft::kraft::KraftReplica;
use quorumlog_raft::{Identity, Isolation, Result};

/// The tests' shorthands over [`KraftReplica`]'s door.
pub trait WingTest {
    /// [`KraftReplica::append_as_leader`], then
    /// [`KraftReplica::wait_durable`] to the records' end.
    ///
    /// # Errors
    /// The append's or the wait's.
    fn append_durable<R: AsRef<[u8]>>(&self, epoch: Epoch, records: &[R]) -> Result<AppendInfo>;

    /// The epoch of the entry at `offset`, read back (`None` outside the
    /// log).
    fn epoch_at(&self, offset: Offset) -> Option<Epoch>;

    /// The largest epoch at or below `epoch` and where its entries end
    /// (of an empty log, the purged entry's before it), read back whole.
    fn end_offset_for_epoch(&self, epoch: Epoch) -> Option<(Epoch, Offset)>;

    /// Truncates the log to `offset`, through the follower's truncation
    /// to a divergence point (the entry before `offset` agreeing).
    ///
    /// # Errors
    /// The wing's refusals (below the commit point).
    fn truncate_to(&self, offset: Offset) -> Result<()>;

    /// The identity a reopen expects, in `cluster`.
    fn identity_in(&self, cluster: ClusterId) -> Identity;
}

impl WingTest for KraftReplica {
    fn append_durable<R: AsRef<[u8]>>(&self, epoch: Epoch, records: &[R]) -> Result<AppendInfo> {
        let info = self.append_as_leader(epoch, records)?;
        self.wait_durable(info.next_offset)?;
        Ok(info)
    }

    fn epoch_at(&self, offset: Offset) -> Option<Epoch> {
        let next = Offset(offset.0.checked_add(1)?);
        self.read_entries(offset, next, 0, Isolation::Uncommitted)
            .ok()?
            .first()
            .map(|e| e.epoch)
    }

    fn end_offset_for_epoch(&self, epoch: Epoch) -> Option<(Epoch, Offset)> {
        let x = self.extent();
        let mut found = x
            .last_purged
            .filter(|(o, e)| o.0 + 1 == x.start.0 && *e <= epoch)
            .map(|(_, e)| (e, x.start));
        let entries = self
            .read_entries(x.start, x.queued_end, u64::MAX, Isolation::Uncommitted)
            .unwrap_or_default();
        for e in entries.iter().take_while(|e| e.epoch <= epoch) {
            found = Some((e.epoch, Offset(e.offset.0 + 1)));
        }
        found
    }

    fn truncate_to(&self, offset: Offset) -> Result<()> {
        let epoch = offset
            .0
            .checked_sub(1)
            .and_then(|o| self.epoch_at(Offset(o)))
            .unwrap_or(Epoch(0));
        self.truncate_to_diverging(offset, epoch).map(|_| ())
    }

    fn identity_in(&self, cluster: ClusterId) -> Identity {
        let me = self.me();
        Identity {
            cluster_id: cluster,
            node_id: me.node_id,
            directory_id: Some(me.directory_id),
        }
    }
}
