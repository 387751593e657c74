//! The segment files read once each, two reader threads ahead of the walk.

#[allow(
    clippy::wildcard_imports,
    reason = "a child module: the parent's items and imports, as it sees them"
)]
use super::*;

/// Walks the segment files of `dir` in offset order, each read once (a
/// reader thread reads the next while this one is checked, into buffers
/// kept for them all), each judged as recovery judges it (a sealed one
/// must reach the next one's base; the last one's end against the
/// directory's [`Claims`]). `each` gets the walk, the file's bytes and
/// whether it is sealed (not the last), and returns whether to go on. A
/// file at the front gone since the listing is skipped: a running node
/// reclaimed it.
///
/// # Errors
/// `Io` listing or reading the directory; what `each` returns.
pub fn walk_segments<F, E>(
    fs: &dyn FileSystem,
    dir: &Path,
    walk: Walk,
    mut each: F,
) -> std::result::Result<(), E>
where
    F: FnMut(SegmentReport, &[u8], bool) -> std::result::Result<bool, E>,
    E: From<crate::Error>,
{
    let files = segment_files(fs, dir)?;
    let claims = Claims::read(fs, dir, files.last().map(|(b, _)| *b))?;
    std::thread::scope(|scope| {
        // Reader threads read the next files while this one is checked:
        // the copies out of the page cache and the checksums overlap.
        let paths: Vec<&Path> = files.iter().map(|(_, p)| p.as_path()).collect();
        let mut full = Vec::new();
        let mut empty = Vec::new();
        for k in 0..READERS {
            let (full_tx, full_rx) = std::sync::mpsc::sync_channel::<Result<Vec<u8>>>(0);
            let (empty_tx, empty_rx) = std::sync::mpsc::channel::<Vec<u8>>();
            full.push(full_rx);
            empty.push(empty_tx);
            let paths = paths.clone();
            scope.spawn(move || {
                for i in (k..paths.len()).step_by(READERS) {
                    // The disk reads this reader's next file meanwhile.
                    if let Some(next) = paths.get(i + READERS) {
                        if let Ok(f) = fs.open(next, OpenMode::Read) {
                            let _ = f.len().map(|len| f.will_need(0, len));
                        }
                    }
                    let mut buf = empty_rx.try_recv().unwrap_or_default();
                    let read = paths.get(i).map_or(Ok(()), |p| read_whole(fs, p, &mut buf));
                    // A file gone since the listing is the walk's to judge;
                    // any other failure ends this reader.
                    let failed = read.as_ref().is_err_and(|e| !vanished(e));
                    if full_tx.send(read.map(|()| buf)).is_err() || failed {
                        return;
                    }
                }
            });
        }
        let mut prev_epoch = None;
        let mut delivered = false;
        for (i, (base, path)) in files.iter().enumerate() {
            let Some(Ok(read)) = full.get(i % READERS).map(std::sync::mpsc::Receiver::recv) else {
                break;
            };
            let buf = match read {
                // Segments at the front gone since the listing: a running
                // node reclaimed them (it deletes only the log's prefix).
                Err(e) if !delivered && vanished(&e) => continue,
                r => r?,
            };
            delivered = true;
            let next = files.get(i + 1);
            let end = match next {
                Some((next_base, _)) => SegmentEnd::Sealed(*next_base),
                None => SegmentEnd::Last(claims),
            };
            let report = inspect_segment(path, *base, &buf, walk, end, prev_epoch);
            prev_epoch = report.last_epoch.or(prev_epoch);
            let go_on = each(report, &buf, next.is_some())?;
            if let Some(back) = empty.get(i % READERS) {
                let _ = back.send(buf);
            }
            if !go_on {
                break;
            }
        }
        Ok(())
    })
}

/// Whether `e` is a file's absence.
fn vanished(e: &crate::Error) -> bool {
    matches!(e, crate::Error::Io(io) if io.kind() == std::io::ErrorKind::NotFound)
}

/// Threads reading segment files ahead of the walk.
const READERS: usize = 2;

/// Reads the file at `path` whole into `buf`, kept from file to file:
/// a buffer per segment spent more time faulting its pages in and
/// unmapping them than reading.
fn read_whole(fs: &dyn FileSystem, path: &Path, buf: &mut Vec<u8>) -> Result<()> {
    let f = fs.open(path, OpenMode::Read)?;
    let len = usize::try_from(f.len()?).unwrap_or(usize::MAX);
    let _ = f.will_need(0, len as u64);
    // Every byte is read over: no need to zero a buffer kept from before.
    buf.resize(len, 0);
    f.read_exact_at(buf, 0)?;
    Ok(())
}
