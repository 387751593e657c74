//! `quorumlog-kv`: run a node, talk to one, run the demo or the soak.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use quorumlog_kv::Error;

mod cli;
mod demo;
mod restart;
mod soak;

#[derive(Parser)]
#[command(
    version,
    about = "A replicated key-value store: openraft over quorumlog"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// The service: a node, client calls and administration.
    #[command(flatten)]
    Service(cli::PartCmd),
    /// Three node processes, a leader kill, a restart, and the check.
    Demo {
        /// Seconds of writing.
        #[arg(long, default_value_t = 30)]
        seconds: u64,
        /// Partitions (each of three replicas).
        #[arg(long, default_value_t = demo::PARTITIONS)]
        partitions: u32,
        /// Concurrent clients.
        #[arg(long, default_value_t = 64)]
        clients: usize,
        /// Readers reading acknowledged keys back (linearizable).
        #[arg(long, default_value_t = 8)]
        readers: usize,
        /// Parent directory for the data directories.
        #[arg(long, default_value_os_t = std::env::temp_dir())]
        dir: PathBuf,
        /// Arguments for every node, after `--` (for example
        /// `-- --commit-persist-ms 0`).
        #[arg(last = true)]
        node_args: Vec<String>,
    },
    /// Restart times with many entries since the last snapshot: one node
    /// alone, and the whole cluster after a kill of all three.
    RestartTime {
        /// Entries written before the kill.
        #[arg(long, default_value_t = 100_000)]
        entries: u64,
        /// Parent directory for the data directories.
        #[arg(long, default_value_os_t = std::env::temp_dir())]
        dir: PathBuf,
    },
    /// Three node processes under SIGKILL and SIGSTOP, clients on a few
    /// keys, and the whole history checked for linearizability.
    Soak {
        /// Seconds of load and faults.
        #[arg(long, default_value_t = 120)]
        seconds: u64,
        /// Partitions (the keys spread over them).
        #[arg(long, default_value_t = 4)]
        partitions: u32,
        /// Concurrent clients.
        #[arg(long, default_value_t = 16)]
        clients: usize,
        /// Keys they share.
        #[arg(long, default_value_t = 8)]
        keys: usize,
        /// The nemesis's seed (default: from the clock).
        #[arg(long)]
        seed: Option<u64>,
        /// Parent directory for the data directories.
        #[arg(long, default_value_os_t = std::env::temp_dir())]
        dir: PathBuf,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // A node runs every task on one thread: its log's flusher is a thread
    // of its own and nothing of a node blocks long, and with two workers
    // the tasks of a write (the Raft core, replication, the connections)
    // woke each other across threads. Measured with 64 clients: 8–22 %
    // less CPU per write, 3–22 % more writes/s at 1 and 64 partitions
    // The thread also leads the node's
    // sync rounds before it parks (`node_runtime`). Clients, the demo and
    // the soak keep the multi-threaded runtime.
    let rt = if let Cmd::Service(cli::PartCmd::Node {
        sync_on_flusher, ..
    }) = cli.command
    {
        if sync_on_flusher {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
        } else {
            quorumlog_kv::server::host::node_runtime()
        }
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
    };
    match rt {
        Ok(rt) => rt.block_on(main_async(cli)),
        Err(e) => {
            eprintln!("error: the async runtime: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Logging, then the command.
async fn main_async(cli: Cli) -> std::process::ExitCode {
    // Logs (openraft's included) to standard error, filtered by RUST_LOG;
    // nothing by default.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    match run(cli.command).await {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// This binary's path: the demo, the soak and the restart measurement
/// start it as their nodes.
fn this_program() -> Result<PathBuf, Error> {
    std::env::current_exe().map_err(|e| Error::io("this program", e))
}

/// Runs `command`; `Ok(false)` is a failed check.
async fn run(command: Cmd) -> Result<bool, Error> {
    match command {
        Cmd::Service(cmd) => cli::run(cmd).await,
        c @ (Cmd::Demo { .. } | Cmd::Soak { .. }) => checks(c).await,
        Cmd::RestartTime { entries, dir } => {
            let exe = this_program()?;
            restart::run(&exe, &dir, entries).await?.print();
            Ok(true)
        }
    }
}

/// `demo` and `soak`: a run of node processes, checked.
async fn checks(command: Cmd) -> Result<bool, Error> {
    match command {
        Cmd::Demo {
            seconds,
            partitions,
            clients,
            readers,
            dir,
            node_args,
        } => {
            let exe = this_program()?;
            let args = demo::DemoArgs {
                seconds,
                partitions,
                clients,
                readers,
                dir,
                node_args,
            };
            Ok(demo::run(&exe, &args).await?.print())
        }
        Cmd::Soak {
            seconds,
            partitions,
            clients,
            keys,
            seed,
            dir,
        } => {
            let exe = this_program()?;
            let seed = seed.unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_secs())
            });
            let args = soak::SoakArgs {
                seconds,
                partitions,
                clients,
                keys,
                dir,
                seed,
            };
            Ok(soak::run(&exe, &args).await?.print())
        }
        _ => Ok(false),
    }
}
