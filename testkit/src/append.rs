//! [`AppendDurable`]: a test's shorthand for a group's one append followed
//! by its wait (the door has one append, queued; a test that reads back
//! at once wants it written and durable).

use quorumlog_checkpoint::{Epoch, Offset};
use quorumlog_log::AppendInfo;
use quorumlog_raft::Group;

/// Appends and waits until the entries are durable (and readable).
pub trait AppendDurable {
    /// [`Group::append`] of `records`, then [`Group::wait_durable`] to
    /// their end.
    ///
    /// # Errors
    /// The append's or the wait's.
    fn append_durable<R: AsRef<[u8]>>(
        &self,
        base_offset: Offset,
        epoch: Epoch,
        records: &[R],
    ) -> quorumlog_raft::Result<AppendInfo>;
}

impl AppendDurable for Group {
    fn append_durable<R: AsRef<[u8]>>(
        &self,
        base_offset: Offset,
        epoch: Epoch,
        records: &[R],
    ) -> quorumlog_raft::Result<AppendInfo> {
        let info = self.append(base_offset, epoch, records)?;
        self.wait_durable(info.next_offset)?;
        Ok(info)
    }
}
