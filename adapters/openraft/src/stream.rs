//! [`SnapshotStream`]: openraft's snapshot data as quorumlog snapshot files,
//! never a whole snapshot in memory.
//!
//! - **Sending** (the leader's `get_current_snapshot`): the stream is a
//!   28-byte header (`QLST`, the snapshot's end offset, epoch and file
//!   size, little-endian) followed by the snapshot file as it is on disk,
//!   read in place chunk by chunk as openraft seeks and reads.
//! - **Receiving** (a follower's `begin_receiving_snapshot`): the header
//!   tells the snapshot's id and size, which openraft 0.9 only gives at the
//!   end; from then on every chunk openraft writes goes straight into the
//!   store's install ([`quorumlog_raft::Group::install_snapshot`]),
//!   durable as it is written. A transfer that starts again after a
//!   restart resumes the install: bytes the install already holds are
//!   skipped. [`SnapshotStream::finish_received`] verifies and publishes
//!   it.
//! - **Memory**: a plain buffer, for state machines without snapshot files.
//!
//! Each chunk's read or write is a short blocking call on the task that
//! polls it (one positioned read or one write and sync).
//!
//! 0.9 only: 0.9 moves snapshot data as a byte stream; 0.10 hands the
//! network a whole `Snapshot`.

use std::io::{Cursor, SeekFrom};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use quorumlog_raft::{Epoch, Group, GroupInstall, Offset, SnapshotId, SnapshotInfo};
use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};

const MAGIC: &[u8; 4] = b"QLST";
/// The header before the snapshot file.
pub const HEADER_BYTES: u64 = 28;
/// The most bytes one read returns.
const MAX_READ: usize = 1 << 20;

/// Snapshot data for openraft (see the module documentation).
#[derive(Debug)]
pub enum SnapshotStream {
    /// A snapshot of this store being sent.
    Sending {
        /// The store holding it.
        store: Arc<Group>,
        /// The snapshot.
        id: SnapshotId,
        /// Its file's size.
        size: u64,
        /// The stream position.
        pos: u64,
    },
    /// A snapshot being received into this store.
    Receiving(Box<Receiving>),
    /// In memory.
    Memory(Cursor<Vec<u8>>),
}

/// A snapshot being received ([`SnapshotStream::Receiving`]).
#[derive(Debug)]
pub struct Receiving {
    store: Arc<Group>,
    header: Vec<u8>,
    install: Option<GroupInstall>,
    /// The snapshot is here already: the rest is read past.
    present: Option<SnapshotId>,
    pos: u64,
}

impl SnapshotStream {
    /// The stream of snapshot `id` of `store`.
    ///
    /// # Errors
    /// The snapshot is not there, or unreadable.
    pub fn sending(store: Arc<Group>, id: SnapshotId) -> std::io::Result<SnapshotStream> {
        let size = store
            .snapshot(id)
            .map(|s| s.info().size_bytes)
            .map_err(std::io::Error::other)?;
        Ok(SnapshotStream::Sending {
            store,
            id,
            size,
            pos: 0,
        })
    }

    /// A stream receiving a snapshot into `store`.
    pub fn receiving(store: Arc<Group>) -> SnapshotStream {
        SnapshotStream::Receiving(Box::new(Receiving {
            store,
            header: Vec::new(),
            install: None,
            present: None,
            pos: 0,
        }))
    }

    /// Verifies and publishes a received snapshot (the log is then made
    /// to continue it); returns it.
    ///
    /// # Errors
    /// Not a receiving stream, or incomplete; the store's install errors
    /// (a snapshot that does not verify is not published).
    pub fn finish_received(self) -> std::io::Result<SnapshotId> {
        let SnapshotStream::Receiving(r) = self else {
            return Err(std::io::Error::other("not a received snapshot"));
        };
        if let Some(id) = r.present {
            return Ok(id);
        }
        let install = r
            .install
            .ok_or_else(|| std::io::Error::other("the snapshot's header never arrived"))?;
        let info: SnapshotInfo = install.finish().map_err(std::io::Error::other)?;
        Ok(info.id)
    }

    fn header(id: SnapshotId, size: u64) -> Vec<u8> {
        let mut h = Vec::with_capacity(28);
        h.extend_from_slice(MAGIC);
        h.extend_from_slice(&id.end_offset.0.to_le_bytes());
        h.extend_from_slice(&id.epoch.0.to_le_bytes());
        h.extend_from_slice(&size.to_le_bytes());
        h
    }
}

impl Receiving {
    /// Takes `buf`, written at the stream position.
    fn write(&mut self, buf: &[u8]) -> std::io::Result<()> {
        let mut buf = buf;
        if self.pos < HEADER_BYTES {
            let want = usize::try_from(HEADER_BYTES - self.pos).unwrap_or(0);
            let take = want.min(buf.len());
            self.header
                .extend_from_slice(buf.get(..take).unwrap_or_default());
            self.pos += take as u64;
            buf = buf.get(take..).unwrap_or_default();
            if self.header.len() as u64 == HEADER_BYTES {
                self.begin()?;
            }
        }
        if buf.is_empty() || self.present.is_some() {
            self.pos += buf.len() as u64;
            return Ok(());
        }
        let install = self
            .install
            .as_mut()
            .ok_or_else(|| std::io::Error::other("snapshot data before its header"))?;
        let at = self.pos - HEADER_BYTES;
        let have = install.position();
        if at > have {
            return Err(std::io::Error::other(format!(
                "snapshot chunk at {at}, the install expects {have}"
            )));
        }
        // Bytes below what the install holds are durable already (a
        // transfer started again after a restart): skipped.
        let skip = usize::try_from(have - at).unwrap_or(usize::MAX);
        if let Some(rest) = buf.get(skip..).filter(|r| !r.is_empty()) {
            install
                .write_chunk(have, rest)
                .map_err(std::io::Error::other)?;
        }
        self.pos += buf.len() as u64;
        Ok(())
    }

    /// The header is complete: the install starts, or resumes.
    fn begin(&mut self) -> std::io::Result<()> {
        let h = &self.header;
        let field = |at: usize| -> u64 {
            h.get(at..at + 8)
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .map_or(0, u64::from_le_bytes)
        };
        if h.get(..4) != Some(MAGIC.as_slice()) {
            return Err(std::io::Error::other("not a quorumlog snapshot stream"));
        }
        let id = SnapshotId {
            end_offset: Offset(field(4)),
            epoch: Epoch(field(12)),
        };
        let size = field(20);
        if self.store.snapshot(id).is_ok() {
            self.present = Some(id);
            return Ok(());
        }
        self.install = Some(
            self.store
                .install_snapshot(id, size)
                .map_err(std::io::Error::other)?,
        );
        Ok(())
    }
}

impl AsyncRead for SnapshotStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            SnapshotStream::Sending {
                store,
                id,
                size,
                pos,
            } => {
                let want = buf.remaining().min(MAX_READ);
                if *pos < HEADER_BYTES {
                    let h = Self::header(*id, *size);
                    let from = usize::try_from(*pos).unwrap_or(0);
                    let part = h.get(from..).unwrap_or_default();
                    let n = part.len().min(want);
                    buf.put_slice(part.get(..n).unwrap_or_default());
                    *pos += n as u64;
                    return Poll::Ready(Ok(()));
                }
                let at = *pos - HEADER_BYTES;
                if at >= *size {
                    return Poll::Ready(Ok(()));
                }
                let chunk = store
                    .snapshot(*id)
                    .and_then(|s| s.read_chunk(at, want))
                    .map_err(std::io::Error::other)?;
                buf.put_slice(&chunk);
                *pos += chunk.len() as u64;
                Poll::Ready(Ok(()))
            }
            SnapshotStream::Receiving(_) => Poll::Ready(Err(std::io::Error::other(
                "a snapshot being received is not read",
            ))),
            SnapshotStream::Memory(c) => Pin::new(c).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for SnapshotStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            SnapshotStream::Receiving(r) => Poll::Ready(r.write(buf).map(|()| buf.len())),
            SnapshotStream::Sending { .. } => Poll::Ready(Err(std::io::Error::other(
                "a snapshot being sent is not written",
            ))),
            SnapshotStream::Memory(c) => Pin::new(c).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        // Every received chunk is durable when written.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl AsyncSeek for SnapshotStream {
    fn start_seek(self: Pin<&mut Self>, to: SeekFrom) -> std::io::Result<()> {
        let (pos, end) = match self.get_mut() {
            SnapshotStream::Sending { pos, size, .. } => (pos, HEADER_BYTES + *size),
            SnapshotStream::Receiving(r) => {
                let end = r
                    .install
                    .as_ref()
                    .map_or(r.pos, |i| HEADER_BYTES + i.total_size());
                (&mut r.pos, end)
            }
            SnapshotStream::Memory(c) => return Pin::new(c).start_seek(to),
        };
        let target = match to {
            SeekFrom::Start(n) => Some(n),
            SeekFrom::End(d) => end.checked_add_signed(d),
            SeekFrom::Current(d) => pos.checked_add_signed(d),
        };
        *pos = target.ok_or_else(|| std::io::Error::other("seek out of range"))?;
        Ok(())
    }

    fn poll_complete(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<u64>> {
        match self.get_mut() {
            SnapshotStream::Sending { pos, .. } => Poll::Ready(Ok(*pos)),
            SnapshotStream::Receiving(r) => Poll::Ready(Ok(r.pos)),
            SnapshotStream::Memory(c) => Pin::new(c).poll_complete(cx),
        }
    }
}
