//! The model's checks after every step: every group's state, and reads in
//! every budget shape against the read model.

#[allow(
    clippy::wildcard_imports,
    reason = "a child module: the parent's items and imports, as it sees them"
)]
use super::*;

/// Random reads of each group against the model (see
/// [`crate::read_model`]).
pub(super) fn check_reads(rng: &mut SimRng, w: &World, m: &Model, what: &str) {
    for (id, gm) in &m.groups {
        let g = &w.handles[id];
        let size = |b: &[u8]| b.len() as u64;
        for _ in 0..4 {
            // The log's writer may make queued entries readable while we
            // read: a read counts when the readable end held still across it.
            let mut log = ModelLog {
                start: gm.start,
                entries: &gm.entries,
                readable_end: g.extent().end.0,
                commit: gm.hw,
            };
            let q = random_read(rng, &log, size);
            let isolation = if q.committed {
                Isolation::Committed
            } else {
                Isolation::Uncommitted
            };
            let got = loop {
                let got = match g.read_entries(Offset(q.from), Offset(q.to), q.max_bytes, isolation)
                {
                    Ok(es) => {
                        assert!(es.iter().all(|e| !e.control), "{what}: a control entry");
                        Some(
                            es.into_iter()
                                .map(|e| (e.offset.0, e.epoch.0, e.bytes))
                                .collect::<Vec<_>>(),
                        )
                    }
                    Err(Error::OffsetOutOfRange { .. }) => None,
                    Err(e) => panic!("{what}: group {id} {q:?}: {e}"),
                };
                let after = g.extent().end.0;
                if after == log.readable_end {
                    break got;
                }
                log.readable_end = after;
            };
            check_read(&log, &q, got, size, &format!("{what}: group {id}"));
        }
    }
}

pub(super) fn check(w: &World, m: &Model, what: &str) {
    assert_eq!(
        w.node().groups(),
        m.groups.keys().copied().collect::<Vec<_>>(),
        "{what}: groups"
    );
    for (id, gm) in &m.groups {
        let g = &w.handles[id];
        assert_eq!(g.extent().start.0, gm.start, "{what}: group {id} start");
        assert_eq!(g.extent().queued_end.0, gm.end(), "{what}: group {id} end");
        assert_eq!(
            g.extent().high_watermark.map(|h| h.0),
            gm.hw,
            "{what}: group {id} hw"
        );
        let readable = g.extent().end.0;
        assert!(
            readable <= gm.end() && readable >= gm.start,
            "{what}: group {id} readable end"
        );
        let got = g
            .read_entries(
                Offset(gm.start),
                Offset(readable),
                u64::MAX,
                Isolation::Uncommitted,
            )
            .unwrap();
        assert_eq!(
            got.len() as u64,
            readable - gm.start,
            "{what}: group {id} entries"
        );
        for (e, (epoch, bytes)) in got.iter().zip(&gm.entries) {
            assert_eq!(
                (e.epoch.0, &e.bytes),
                (*epoch, bytes),
                "{what}: group {id} entry {}",
                e.offset.0
            );
        }
        // A bounded read returns whole entries from `from`, at least one.
        if readable > gm.start {
            let from = gm.start + (readable - gm.start) / 2;
            let few = g
                .read_entries(Offset(from), Offset(readable), 1, Isolation::Uncommitted)
                .unwrap();
            assert_eq!(few.len(), 1, "{what}: group {id} bounded read");
            assert_eq!(
                few[0].offset.0, from,
                "{what}: group {id} bounded read offset"
            );
        }
        assert_eq!(g.quorum_state(), gm.vote, "{what}: group {id} vote");
        assert_eq!(g.app_metadata(), gm.meta, "{what}: group {id} metadata");
        assert!(
            g.extent().flushed.0 >= gm.durable.min(gm.end()),
            "{what}: group {id} flushed"
        );
    }
}
