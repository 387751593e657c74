//! `quorumlog`: the operator's command line for a quorumlog data
//! directory. `format` makes one; `dump` and `verify` read one without
//! opening it (no lock, no repair, no write), so they show a directory
//! exactly as a crash or a bad disk left it.
//!
//! Exit codes: 0 when all is well, 1 when damage was found, 2 when the
//! command could not run (bad arguments, not a data directory, I/O).

mod dump;
mod info;
mod verify;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use quorumlog_io::{FileSystem, RealFs};
use quorumlog_raft::{ClusterId, DirectoryId, Meta, Node, NodeId, NodeOptions, SharedFs};

/// The operator's command line for quorumlog data directories.
#[derive(Debug, Parser)]
#[command(name = "quorumlog", version)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
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
    },
    /// Prints the log's batches (and with `--records`, their records),
    /// decoding a node's records: group, kind, group offset.
    Dump {
        /// The data directory.
        dir: PathBuf,
        /// Only the batches of this group (a node's directory).
        #[arg(long)]
        group: Option<u64>,
        /// The first log offset shown.
        #[arg(long)]
        from: Option<u64>,
        /// The log offset after the last one shown.
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
    },
    /// Prints DIR's identity and, per group, its log offsets, high
    /// watermark and election state, as the directory holds them (read
    /// without opening it).
    Info {
        /// The data directory.
        dir: PathBuf,
    },
    /// Prints the election state of DIR's groups (or of one).
    QuorumState {
        /// The data directory.
        dir: PathBuf,
        /// Only this group.
        #[arg(long)]
        group: Option<u64>,
    },
    /// Reads every segment of the log and checks every batch; prints each
    /// problem with its file, position and offset; exits 1 on any.
    Verify {
        /// The data directory.
        dir: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let fs: SharedFs = Arc::new(RealFs::new());
    let result = match cli.cmd {
        Cmd::Format {
            dir,
            cluster_id,
            node_id,
        } => format(&fs, &dir, cluster_id, node_id),
        Cmd::Dump {
            dir,
            group,
            from,
            to,
            records,
            json,
            raw,
        } => formatted(fs.as_ref(), &dir).and_then(|()| {
            dump::run(
                fs.as_ref(),
                &dir,
                &dump::Filter {
                    group,
                    from,
                    to,
                    records,
                    json,
                    raw,
                },
            )
        }),
        Cmd::Info { dir } => {
            formatted(fs.as_ref(), &dir).and_then(|()| info::run(&fs, &dir, None, true))
        }
        Cmd::QuorumState { dir, group } => {
            formatted(fs.as_ref(), &dir).and_then(|()| info::run(&fs, &dir, group, false))
        }
        Cmd::Verify { dir } => {
            formatted(fs.as_ref(), &dir).and_then(|()| verify::run(fs.as_ref(), &dir))
        }
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// `format`: a node's directory. Ok(true) when formatted.
fn format(fs: &SharedFs, dir: &Path, cluster: u128, node: u64) -> Result<bool, String> {
    let meta = Meta::new(ClusterId(cluster), NodeId(node), DirectoryId::random());
    Node::format(fs, dir, meta, &NodeOptions::default())
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    println!(
        "formatted {}: cluster {cluster}, node {node}, directory id {:032x}",
        dir.display(),
        meta.directory_id.0
    );
    Ok(true)
}

/// Refuses a directory that is not a formatted data directory, saying how
/// to make one (the reading commands never format anything).
fn formatted(fs: &dyn FileSystem, dir: &Path) -> Result<(), String> {
    let has = |p: &Path| fs.exists(p).map_err(|e| format!("{}: {e}", p.display()));
    if !has(dir)? {
        return Err(format!("{} does not exist", dir.display()));
    }
    if !has(&dir.join("meta"))? {
        return Err(format!(
            "{} is not a quorumlog data directory (no meta file): NotFormatted; \
             make one with `quorumlog format {} --cluster-id ID --node-id ID`",
            dir.display(),
            dir.display()
        ));
    }
    Ok(())
}
