//! `quorumlog`: the operator's command line for a quorumlog data
//! directory. `format` makes one; `dump` and `verify` read one without
//! opening it (no lock, no repair, no write), so they show a directory
//! exactly as a crash or a bad disk left it.
//!
//! Exit codes: 0 when all is well, 1 when damage was found (for `verify`:
//! damage that costs something), 2 when the command could not run (bad
//! arguments, not a data directory, I/O), 3 when `verify` found only
//! harmless damage (reclaimable bytes, an index the open rebuilds).

mod data;
mod dump;
mod import;
mod info;
mod out;
mod recover;
mod repair;
mod snapshot;
mod units;
mod verify;

use std::path::{Path, PathBuf};

use out::say;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use quorumlog_checkpoint::read_meta;
use quorumlog_io::{FileSystem, RealFs};
use quorumlog_raft::{ClusterId, DirectoryId, Meta, Node, NodeId, NodeOptions, SharedFs};

/// The operator's command line for quorumlog data directories.
#[derive(Debug, Parser)]
#[command(name = "quorumlog", version)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// How the epochs a command prints read.
#[derive(Debug, clap::Args)]
struct RaftArgs {
    /// How epochs read: `auto` shows an epoch of 2^32 or more as openraft's
    /// term and leader node, any other as the epoch.
    #[arg(long, value_enum, default_value_t)]
    raft: units::Implementation,
}

/// The data directory a command reads or changes.
#[derive(Debug, clap::Args)]
struct DirArgs {
    /// The data directory.
    dir: PathBuf,
    /// Refuse unless the directory belongs to this cluster (guards against
    /// a path that names another cluster's disk).
    #[arg(long)]
    cluster_id: Option<u128>,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Formats DIR as a node's data directory (one shared log for any
    /// number of groups), with a new random directory id.
    Format {
        /// The directory (made if absent; it must be empty otherwise).
        dir: PathBuf,
        /// The cluster's id.
        #[arg(long)]
        cluster_id: u128,
        /// This node's id.
        #[arg(long)]
        node_id: u64,
        /// The size of each log segment file, preallocated in full (the
        /// node is then opened with the same size: it is an open option,
        /// `NodeOptions::with_segment_bytes`).
        #[arg(long, default_value_t = 128 << 20)]
        segment_bytes: u64,
    },
    /// Prints the log's batches (and with `--records`, their records),
    /// decoding a node's records: group, kind, group offset.
    Dump {
        #[command(flatten)]
        at: DirArgs,
        #[command(flatten)]
        epochs: RaftArgs,
        /// Only the batches of this group (a node's directory); `--from`
        /// and `--to` are then the group's own Raft indexes.
        #[arg(long)]
        group: Option<u64>,
        /// The first offset shown: the shared log's, or with `--group` the
        /// group's index.
        #[arg(long)]
        from: Option<u64>,
        /// The offset after the last one shown (as `--from`).
        #[arg(long)]
        to: Option<u64>,
        /// Each record too.
        #[arg(long)]
        records: bool,
        /// JSON lines, one per batch, record and problem.
        #[arg(long)]
        json: bool,
        /// Walk on past damage to the next batch that verifies, marking
        /// what was skipped.
        #[arg(long)]
        raw: bool,
        /// Each group entry decoded as the Raft library that wrote it
        /// encoded it (raft-rs, openraft 0.10: the entry's kind and the
        /// application's bytes, printable text as text); implies
        /// `--records`.
        #[arg(long)]
        print_data: bool,
    },
    /// Verifies one snapshot file end to end and prints what it holds:
    /// id, compression, creation time, metadata, sizes and checksums.
    DumpSnapshot {
        /// The snapshot file (`<end>-<epoch>.snapshot`, or an install's
        /// file once complete).
        file: PathBuf,
        /// Every chunk too: position, sizes, checksum.
        #[arg(long)]
        chunks: bool,
        /// JSON lines.
        #[arg(long)]
        json: bool,
    },
    /// Prints DIR's identity and, per group, its log offsets, high
    /// watermark and election state, as the directory holds them (read
    /// without opening it).
    Info {
        #[command(flatten)]
        at: DirArgs,
        #[command(flatten)]
        epochs: RaftArgs,
        /// JSON lines, one object per line.
        #[arg(long)]
        json: bool,
    },
    /// Prints the election state of DIR's groups (or of one).
    QuorumState {
        #[command(flatten)]
        at: DirArgs,
        #[command(flatten)]
        epochs: RaftArgs,
        /// Only this group.
        #[arg(long)]
        group: Option<u64>,
        /// JSON lines, one object per group.
        #[arg(long)]
        json: bool,
    },
    /// Reads every segment of the log and checks every batch; prints each
    /// problem with its file, position, offset and what it costs (live
    /// data, or reclaimable bytes nothing needs); exits 1 on damage that
    /// costs something, 3 when every problem is harmless.
    Verify {
        #[command(flatten)]
        at: DirArgs,
        /// JSON lines: one per file verified, one per problem, a summary.
        #[arg(long)]
        json: bool,
    },
    /// Cuts the log at its first corruption of live data, for a replica
    /// that will fetch the rest from its leader (damage only in
    /// reclaimable bytes is never cut). Shows what it would drop (groups,
    /// offsets, epochs, bytes) and changes nothing without `--yes`; then
    /// copies every file it changes into a side directory first and says
    /// how to undo. Refuses a running node's directory.
    Repair {
        #[command(flatten)]
        at: DirArgs,
        /// The only repair there is: cut at the first corruption.
        #[arg(long, required = true)]
        truncate_at_corruption: bool,
        /// Do it (without: only show what would be dropped).
        #[arg(long)]
        yes: bool,
        /// Where to keep the copies (default: beside DIR,
        /// `DIR.repair-<unix seconds>`).
        #[arg(long)]
        side_dir: Option<PathBuf>,
    },
    /// Brings a one-group store's directory (the previous layout, which
    /// `Node::open` refuses) over into a new group of a node's directory,
    /// offline: its entries, log start, election state, metadata, high
    /// watermark and latest snapshot. The store is only read.
    Import {
        /// The store's directory.
        store_dir: PathBuf,
        /// The node's directory (`quorumlog format` makes one).
        node_dir: PathBuf,
        /// The new group's id.
        #[arg(long)]
        group: u64,
    },
    /// Rewrites the voter set of a quorum that lost its majority, offline,
    /// on one surviving replica: it takes a term (an epoch) above every
    /// one on file as its own leader and appends the new voters. An
    /// openraft 0.10 group or the `KRaft`-style wing's group, in a node's
    /// directory. Says what it
    /// overrides; changes nothing without `--yes`; refuses a running
    /// replica's directory.
    RecoverQuorum {
        #[command(flatten)]
        at: DirArgs,
        /// The openraft group (the `KRaft` wing's is its own group: leave
        /// it out).
        #[arg(long)]
        group: Option<u64>,
        /// The new voters, this replica among them: `ID=ADDR,...` for an
        /// openraft group (ADDR as its network dials the node), or
        /// `NODE_ID:DIRECTORY_ID_HEX,...` for the `KRaft`-style wing.
        #[arg(long, required = true)]
        voters: String,
        /// Do it.
        #[arg(long)]
        yes: bool,
    },
}

#[expect(clippy::too_many_lines, reason = "one arm per command")]
fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Cmd::Dump { epochs, .. } | Cmd::Info { epochs, .. } | Cmd::QuorumState { epochs, .. } =
        &cli.cmd
    {
        units::set_raft(epochs.raft);
    }
    let fs: SharedFs = Arc::new(RealFs::new());
    let result = match cli.cmd {
        Cmd::Format {
            dir,
            cluster_id,
            node_id,
            segment_bytes,
        } => status(format(&fs, &dir, cluster_id, node_id, segment_bytes)),
        Cmd::Dump {
            at,
            group,
            from,
            to,
            records,
            json,
            raw,
            print_data,
            ..
        } => status(reading(fs.as_ref(), &at).and_then(|running| {
            out::settled(passes(running), || {
                dump::run(
                    &fs,
                    &at.dir,
                    &dump::Filter {
                        group,
                        from,
                        to,
                        records,
                        json,
                        raw,
                        data: print_data,
                    },
                )
            })
        })),
        Cmd::DumpSnapshot { file, chunks, json } => {
            status(snapshot::run(fs.as_ref(), &file, chunks, json))
        }
        Cmd::Info { at, json, .. } => status(reading(fs.as_ref(), &at).and_then(|running| {
            out::settled(passes(running), || {
                info::run(&fs, &at.dir, None, true, json)
            })
        })),
        Cmd::QuorumState {
            at, group, json, ..
        } => status(reading(fs.as_ref(), &at).and_then(|running| {
            out::settled(passes(running), || {
                info::run(&fs, &at.dir, group, false, json)
            })
        })),
        Cmd::Verify { at, json } => reading(fs.as_ref(), &at)
            .and_then(|running| verify::run(&fs, &at.dir, json, running.is_some()))
            .map(|v| match v {
                verify::Verdict::Clean => 0,
                verify::Verdict::Damaged => 1,
                verify::Verdict::Harmless => 3,
            }),
        Cmd::Import {
            store_dir,
            node_dir,
            group,
        } => status(
            writing(
                fs.as_ref(),
                &DirArgs {
                    dir: node_dir.clone(),
                    cluster_id: None,
                },
            )
            .and_then(|()| match running(fs.as_ref(), &store_dir)? {
                Some(pid) => Err(format!(
                    "{}: a process (pid {pid}) has it open: stop it first; nothing changed",
                    store_dir.display()
                )),
                None => import::run(&fs, &store_dir, &node_dir, group),
            }),
        ),
        Cmd::RecoverQuorum {
            at,
            group,
            voters,
            yes,
        } => status(
            writing(fs.as_ref(), &at)
                .and_then(|()| recover::run(&fs, &at.dir, group, &voters, yes)),
        ),
        Cmd::Repair {
            at, yes, side_dir, ..
        } => status(
            writing(fs.as_ref(), &at)
                .and_then(|()| repair::run(&fs, &at.dir, yes, side_dir.as_deref())),
        ),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// A command's exit status: 0 when all is well, 1 when it found damage
/// or changed nothing it was asked to.
fn status(r: Result<bool, String>) -> Result<u8, String> {
    r.map(|ok| u8::from(!ok))
}

/// `format`: a node's directory (a `KRaft` replica's too: its group is
/// made at its first open), with segments of `segment_bytes`. Ok(true)
/// when formatted; says what disk the empty node takes.
fn format(
    fs: &SharedFs,
    dir: &Path,
    cluster: u128,
    node: u64,
    segment_bytes: u64,
) -> Result<bool, String> {
    let meta = Meta::new(ClusterId(cluster), NodeId(node), DirectoryId::random());
    let options = NodeOptions::with_segment_bytes(segment_bytes);
    options
        .log
        .validate()
        .map_err(|e| format!("--segment-bytes {segment_bytes}: {e}"))?;
    Node::format(fs, dir, meta, &options).map_err(|e| format!("{}: {e}", dir.display()))?;
    say!(
        "formatted {}: cluster {cluster}, node {node}, directory id {:032x}",
        dir.display(),
        meta.directory_id.0
    );
    let (files, allocated) = disk_use(dir);
    say!(
        "the empty node takes {allocated} bytes of disk in {files} files: segments of {segment_bytes} bytes \
         are preallocated whole (open it with the same size: NodeOptions::with_segment_bytes)"
    );
    Ok(true)
}

/// Files under `dir` and the bytes of disk they take (allocated blocks).
fn disk_use(dir: &Path) -> (usize, u64) {
    use std::os::unix::fs::MetadataExt as _;
    let (mut files, mut bytes) = (0, 0);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => stack.push(e.path()),
                Ok(m) => {
                    files += 1;
                    bytes += m.blocks() * 512;
                }
                Err(_) => {}
            }
        }
    }
    (files, bytes)
}

/// The pid of the process holding `dir`'s lock (a node running on it),
/// found without taking the lock.
fn running(fs: &dyn FileSystem, dir: &Path) -> Result<Option<u32>, String> {
    let lock = dir.join(quorumlog_checkpoint::LOCK_FILE);
    fs.lock_holder(&lock)
        .map_err(|e| format!("{}: {e}", lock.display()))
}

/// A reading command's check: the directory as [`formatted`] wants it,
/// and a warning (on stderr) when a node is running on it. Returns the
/// running node's pid.
fn reading(fs: &dyn FileSystem, at: &DirArgs) -> Result<Option<u32>, String> {
    formatted(fs, at)?;
    let pid = running(fs, &at.dir)?;
    if let Some(pid) = pid {
        eprintln!(
            "warning: {}: node running (pid {pid}): figures may be moving",
            at.dir.display()
        );
    }
    Ok(pid)
}

/// How many passes a reading command may make: beside a running node,
/// up to three (its files move under a pass), else one.
fn passes(running: Option<u32>) -> usize {
    if running.is_some() {
        3
    } else {
        1
    }
}

/// A writing command's check: the directory as [`formatted`] wants it,
/// and no node running on it (refused before anything is read or copied).
fn writing(fs: &dyn FileSystem, at: &DirArgs) -> Result<(), String> {
    formatted(fs, at)?;
    match running(fs, &at.dir)? {
        Some(pid) => Err(format!(
            "{}: the node is running (pid {pid}): stop it first; nothing was read, copied or changed",
            at.dir.display()
        )),
        None => Ok(()),
    }
}

/// Refuses what is not a formatted data directory, diagnosing in order:
/// a path that does not exist; one that is a file; an empty directory
/// (then, and only then, the way to format it); a directory without our
/// `meta` file (another program's: no hint to format it); a `meta` that is
/// not ours or is damaged. Then a directory of another cluster than
/// `--cluster-id`, showing both ids.
fn formatted(fs: &dyn FileSystem, at: &DirArgs) -> Result<(), String> {
    let dir = at.dir.as_path();
    let shown = dir.display();
    let has = |p: &Path| fs.exists(p).map_err(|e| format!("{}: {e}", p.display()));
    if !has(dir)? {
        return Err(format!("{shown} does not exist"));
    }
    // The command line runs on the real file system: a file is a file.
    if dir.is_file() {
        return Err(format!("{shown} is a file, not a data directory"));
    }
    let entries = fs.list(dir).map_err(|e| format!("{shown}: {e}"))?;
    if entries.is_empty() {
        return Err(format!(
            "{shown} is empty, not a data directory yet: make one with \
             `quorumlog format {shown} --cluster-id ID --node-id ID`"
        ));
    }
    if !has(&dir.join("meta"))? {
        return Err(format!(
            "{shown} holds files but no quorumlog meta file: not a quorumlog data directory \
             (another program's? check the path)"
        ));
    }
    // A meta file of another kind is refused here; a damaged one of ours
    // is damage, for `verify` to report.
    if let Err(
        e @ quorumlog_checkpoint::Error::Corruption {
            kind: quorumlog_checkpoint::CorruptionKind::BadMagic { .. },
            ..
        },
    ) = read_meta(fs, dir)
    {
        return Err(format!(
            "{shown} is not a quorumlog data directory: its meta file is another kind of file ({e})"
        ));
    }
    if let Some(expected) = at.cluster_id {
        let meta = read_meta(fs, dir)
            .map_err(|e| format!("{shown}: {e}"))?
            .ok_or_else(|| format!("{shown}: no meta file"))?;
        if meta.cluster_id.0 != expected {
            return Err(format!(
                "{} belongs to cluster {}, not cluster {expected} (--cluster-id): \
                 a foreign cluster's directory; check the path",
                dir.display(),
                meta.cluster_id.0
            ));
        }
    }
    Ok(())
}
