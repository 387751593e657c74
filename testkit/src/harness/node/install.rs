//! Snapshot installs in the harness: chunks sent from the model leader, through the snapshot store.

#[allow(
    clippy::wildcard_imports,
    reason = "a child module: the parent's private items, as it sees them"
)]
use super::*;

/// Sends up to `chunks` chunks of 700 bytes of `bytes` from `from` with
/// `write`; returns where the transfer stands, or `None` if a write failed.
fn send_chunks(
    from: u64,
    bytes: &[u8],
    chunks: u8,
    mut write: impl FnMut(u64, &[u8]) -> bool,
) -> Option<usize> {
    let mut pos = usize::try_from(from).unwrap_or(usize::MAX);
    for _ in 0..chunks {
        if pos >= bytes.len() {
            break;
        }
        let end = (pos + 700).min(bytes.len());
        if !write(pos as u64, &bytes[pos..end]) {
            return None;
        }
        pos = end;
    }
    Some(pos)
}

pub(super) fn install(n: &mut Node, m: &mut Model, chunks: u8, finish: bool) -> bool {
    let Some((id, bytes)) = leader_snapshot(m) else {
        return true;
    };
    if n.store.latest().is_some_and(|l| l.id >= id) {
        return true;
    }
    let Ok(mut install) = n.store.begin_install(id, bytes.len() as u64) else {
        return false;
    };
    let start = install.position();
    let Some(pos) = send_chunks(start, &bytes, chunks, |at, c| {
        install.write_chunk(at, c).is_ok()
    }) else {
        return false;
    };
    if finish && pos == bytes.len() {
        m.snapshots.insert(id, state_below(m, id.end_offset.0));
        return install.finish().is_ok();
    }
    true
}
