//! V1 (1,000 groups voting at once) and R6's directories (filled, then
//! reopened after a kill).

#[allow(
    clippy::wildcard_imports,
    reason = "a child module: the parent's items and imports, as it sees them"
)]
use super::*;

/// What V1 measured.
#[derive(Debug, Clone, Copy, Default)]
pub struct Votes {
    /// Milliseconds for all the votes to be durable.
    pub ms: f64,
    /// Syncs they used (quorumlog's node; none counted for the stores).
    pub syncs: Option<u64>,
}

pub(super) fn vote(epoch: u64) -> QuorumState {
    QuorumState {
        epoch: Epoch(epoch),
        leader: None,
        voted: Some(Vote {
            node_id: NodeId(2),
            directory_id: DirectoryId(3),
        }),
    }
}

/// Runs `f` on every item of `0..n` from 64 threads at once.
pub(super) fn on_64_threads(
    n: usize,
    f: impl Fn(usize) -> Result<(), BenchError> + Sync,
) -> Result<(), BenchError> {
    let next = AtomicU64::new(0);
    std::thread::scope(|s| -> Result<(), BenchError> {
        let hs: Vec<_> = (0..64)
            .map(|_| {
                s.spawn(|| -> Result<(), BenchError> {
                    loop {
                        let i = usize::try_from(next.fetch_add(1, Ordering::Relaxed))?;
                        if i >= n {
                            return Ok(());
                        }
                        f(i)?;
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().map_err(|_| "a worker thread panicked")??;
        }
        Ok(())
    })
}

/// Every one of `slots` persists a vote at once (64 threads), through the
/// group's door: a vote record of its node's shared log.
/// Returns the milliseconds.
pub(super) fn vote_all(slots: &[Mutex<(Group, u64)>]) -> Result<f64, BenchError> {
    let t = Instant::now();
    on_64_threads(slots.len(), |i| {
        let slot = slots.get(i).ok_or("no such slot")?;
        Ok(lock(slot).0.persist_quorum_state(&vote(1))?)
    })?;
    Ok(t.elapsed().as_secs_f64() * 1e3)
}

/// V1 on a node: `groups` groups each persist a vote at once, from 64
/// threads.
///
/// # Errors
/// The node's.
pub fn votes_node(dir: &Path, groups: usize) -> Result<Votes, BenchError> {
    let sys = NodeSystem::open(dir, groups, &NodeOptions::default())?;
    let before = sys.node.stats().syncs;
    let ms = vote_all(&sys.groups)?;
    Ok(Votes {
        ms,
        syncs: Some(sys.node.stats().syncs - before),
    })
}

/// V1 on one store per group (a vote is a small-file replace).
///
/// # Errors
/// The stores'.
pub fn votes_per_dir(dir: &Path, groups: usize) -> Result<Votes, BenchError> {
    let sys = PerDirectory::open(dir, groups)?;
    Ok(Votes {
        ms: vote_all(&sys.stores)?,
        syncs: None,
    })
}

/// R6's fill: `bytes` of live log in `groups` groups (16 entries of 1 KiB
/// per append, round-robin), durable at the end; what a node that then
/// crashes leaves. Runs in a child process that the caller kills.
///
/// # Errors
/// The node's.
pub fn fill_node(dir: &Path, groups: usize, bytes: u64) -> Result<(), BenchError> {
    let sys = NodeSystem::open(dir, groups, &NodeOptions::default())?;
    let records: Vec<Vec<u8>> = (0..16).map(|i| payload(1, i, 1024)).collect();
    let mut written = 0u64;
    let mut g = 0usize;
    while written < bytes {
        let slot = sys.groups.get(g).ok_or("no group")?;
        let mut st = lock(slot);
        let at = st.1;
        st.0.append(Offset(at), Epoch(1), &records)?;
        st.1 += 16;
        if written % (64 << 20) < 16 << 10 {
            st.0.wait_durable(Offset(at + 16))?;
        }
        drop(st);
        written += 16 << 10;
        g = (g + 1) % groups;
    }
    for slot in &sys.groups {
        let st = lock(slot);
        st.0.wait_durable(Offset(st.1))?;
    }
    Ok(())
}

/// R6's fill for raft-engine: the same data in `groups` regions.
///
/// # Errors
/// raft-engine's.
pub fn fill_engine(dir: &Path, groups: usize, bytes: u64) -> Result<(), BenchError> {
    let engine = TunedEngine::open(dir, 0)?;
    let records: Vec<Vec<u8>> = (0..16).map(|i| payload(1, i, 1024)).collect();
    let mut next = vec![1u64; groups];
    let mut written = 0u64;
    let mut g = 0usize;
    while written < bytes {
        let at = next.get(g).copied().unwrap_or(1);
        let entries: Vec<_> = records
            .iter()
            .zip(at..)
            .map(|(r, i)| bench_entry(i, r))
            .collect();
        let mut batch = raft_engine::LogBatch::with_capacity(16);
        batch.add_entries::<BenchEntries>(g as u64 + 1, &entries)?;
        engine
            .engine()
            .write(&mut batch, written % (64 << 20) < 16 << 10)?;
        if let Some(n) = next.get_mut(g) {
            *n += 16;
        }
        written += 16 << 10;
        g = (g + 1) % groups;
    }
    engine.engine().sync()?;
    Ok(())
}

/// Opens the node of `dir` (after a crash) and reads one entry of every
/// group; returns the milliseconds and the batches replayed.
///
/// # Errors
/// The node's.
pub fn reopen_node(dir: &Path) -> Result<(f64, u64), BenchError> {
    let fs: SharedFs = Arc::new(RealFs::new());
    let t = Instant::now();
    let (node, report) = Node::open(&fs, dir, &Identity::of(&meta()), &NodeOptions::default())?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let ids = node.groups();
    if let Some(id) = ids.first() {
        let g = node.group(*id)?;
        let e = g.read_entries(
            g.extent().start,
            Offset(g.extent().start.0 + 1),
            1 << 20,
            quorumlog_raft::Isolation::Uncommitted,
        )?;
        if e.is_empty() {
            return Err("a recovered group is empty".into());
        }
    }
    Ok((ms, report.replayed_batches))
}

/// Opens the raft-engine of `dir` (after a crash); returns the
/// milliseconds.
///
/// # Errors
/// raft-engine's.
pub fn reopen_engine(dir: &Path) -> Result<f64, BenchError> {
    let t = Instant::now();
    let engine = TunedEngine::open(dir, 0)?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    if engine.engine().first_index(1).is_none() {
        return Err("a recovered region is empty".into());
    }
    Ok(ms)
}
