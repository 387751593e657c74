//! quorumlog's node: regions over one node's groups, persisted
//! asynchronously, the loop leading its rounds.

#[allow(
    clippy::wildcard_imports,
    reason = "a child module: the parent's items and imports, as it sees them"
)]
use super::*;

/// Node `id`'s directory in `dir` with `regions` regions (a group each,
/// from index 1), formatted and opened.
pub(super) fn quorumlog_node(
    id: u64,
    dir: &Path,
    regions: u64,
) -> Result<(Node, Vec<RegionStorage>), BenchError> {
    let err = |e: &dyn std::fmt::Display| BenchError::from(e.to_string());
    // `QUORUMLOG_E2_PWRITE=1`: pwrite + fdatasync instead of io_uring.
    let fs: SharedFs = if std::env::var("QUORUMLOG_E2_PWRITE").is_ok() {
        Arc::new(RealFs::with_backend(quorumlog_io::IoBackend::Pwrite)?)
    } else {
        Arc::new(RealFs::new())
    };
    let d = dir.join(format!("node-{id}"));
    std::fs::create_dir_all(&d)?;
    let meta = Meta::new(ClusterId(1), NodeId(id), DirectoryId(u128::from(id) + 1));
    // The Ready loop leads its rounds (`AsyncPersister::lead_round`):
    // nothing hands a round to the log's flusher.
    let options = NodeOptions {
        sync: quorumlog_log::SyncPolicy::CallerLed,
        ..NodeOptions::default()
    };
    Node::format(&fs, &d, meta, &options).map_err(|e| err(&e))?;
    let (node, _) = Node::open(&fs, &d, &Identity::of(&meta), &options).map_err(|e| err(&e))?;
    let mut storages = Vec::new();
    for r in 0..regions {
        node.create_group(r, Offset(1)).map_err(|e| err(&e))?;
        let g = Arc::new(node.group(r).map_err(|e| err(&e))?);
        let s = RegionStorage::open(g, r).map_err(|e| err(&e))?;
        s.initialize_with_conf_state(voters())
            .map_err(|e| err(&e))?;
        storages.push(s);
    }
    Ok((node, storages))
}

/// The persister's events: persisted Readies (their messages leave now)
/// and fetched entries.
pub(super) fn quorumlog_events(
    c: &mut Common<RegionStorage>,
    persister: &AsyncPersister,
) -> Result<bool, BenchError> {
    let mut any = false;
    for e in persister.try_events() {
        any = true;
        match e {
            Event::Persisted {
                region,
                number,
                messages,
            } => {
                if let Some(raw) = c.region(region) {
                    raw.on_persist_ready(number);
                }
                c.send(messages, region);
            }
            Event::Fetched { region, context } => {
                if let Some(raw) = c.region(region) {
                    raw.on_entries_fetched(context);
                }
            }
            Event::Failed { error, .. } => return Err(BenchError::from(error.to_string())),
        }
    }
    Ok(any)
}

pub(super) fn quorumlog_loop(
    id: u64,
    dir: &Path,
    regions: u64,
    net: &Net,
    target: usize,
    stats: Arc<Stats>,
) -> Result<(), BenchError> {
    let err = |e: &dyn std::fmt::Display| BenchError::from(e.to_string());
    let (node, storages) = quorumlog_node(id, dir, regions)?;
    let persister = AsyncPersister::new();
    if let Some(w) = net.senders.get(usize::try_from(id - 1)?).cloned() {
        let w = Mutex::new(w);
        persister.set_waker(Arc::new(move || {
            let _ = w
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .send(Mail::Wake);
        }));
    }
    let mut c = Common::new(id, raw_nodes(id, storages)?, net, target, stats);
    let mut seen = vec![0; c.raws.len()];
    let mut idle = false;
    while !c.stopped() {
        if idle {
            // Nothing to do but wait for persistence: lead the round.
            persister.lead_round();
        }
        c.receive(idle);
        c.tick();
        c.propose();
        idle = true;
        // One pass: every region's Ready, one completion for all.
        let mut pass = persister.pass();
        for r in 0..c.raws.len() {
            let Some(raw) = c.raws.get_mut(r).filter(|raw| raw.has_ready()) else {
                continue;
            };
            idle = false;
            let mut rd = raw.ready();
            let w = pass.persist(raw.store(), &mut rd).map_err(|e| err(&e))?;
            let committed = rd.take_committed_entries();
            c.note_role(r, &rd);
            if let Some(raw) = c.raws.get_mut(r) {
                raw.advance_append_async(rd);
                if let Some(e) = committed.last() {
                    raw.advance_apply_to(e.index);
                }
            }
            c.send(w.messages, r as u64);
            c.apply(r, &committed);
        }
        pass.finish();
        if quorumlog_events(&mut c, &persister)? {
            idle = false;
        }
        for (r, to) in c.to_compact(&mut seen) {
            if let Some(raw) = c.raws.get(r) {
                raw.store().compact(to).map_err(|e| err(&e))?;
            }
        }
    }
    c.finish();
    drop(c);
    drop(persister);
    let _ = node.close();
    Ok(())
}
