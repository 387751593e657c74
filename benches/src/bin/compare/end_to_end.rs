//! E1 and E2: the Raft libraries' clusters, each store in rotation.

#[allow(
    clippy::wildcard_imports,
    reason = "a child module: the parent's items and imports, as it sees them"
)]
use super::*;

/// E1: the three-node openraft 0.10 cluster persisted by quorumlog,
/// raft-log, raft-engine and memory, with 1, 16 and 256 clients and 64 B and 4 KiB values; the
/// stores' order rotates between configurations. Then the many-groups run:
/// 16 groups per node, 256 clients spread over them.
pub(super) fn run_e1(
    args: &Args,
    base: &Path,
    rows: &mut Vec<Row>,
    extra: &mut String,
) -> Result<(), BenchError> {
    use quorumlog_benches::e1::{run, E1Store, Limit};
    use std::fmt::Write as _;
    let stores: Vec<E1Store> = [
        E1Store::Quorumlog,
        E1Store::RaftLog,
        E1Store::RaftEngine,
        E1Store::Memory,
    ]
    .into_iter()
    .filter(|s| selected(args, s.name()))
    .collect();
    // `QUORUMLOG_E1=c256-64B` (for example) runs one configuration.
    let only = std::env::var("QUORUMLOG_E1").ok();
    let _ = writeln!(
        extra,
        "\nE1 (three-node openraft 0.10 cluster in one process; writes/s, p50/p99 client latency):"
    );
    let mut k = 0;
    for clients in [1usize, 16, 256] {
        for size in [64usize, 4096] {
            let name = format!("E1-c{clients}-{}", if size == 64 { "64B" } else { "4KiB" });
            if only.as_ref().is_some_and(|o| !name.ends_with(o.as_str())) {
                continue;
            }
            let mut got = Vec::new();
            for store in stores
                .iter()
                .cycle()
                .skip(k % stores.len().max(1))
                .take(stores.len())
            {
                let store = *store;
                let dir = base.join(format!("{name}-{}", store.name()));
                let (r, took) = run(store, &dir, clients, size, Limit::Seconds(args.seconds))?;
                let _ = std::fs::remove_dir_all(&dir);
                rows.push(Row {
                    workload: name.clone(),
                    system: store.name().into(),
                    m: Measured {
                        entries: r.writes,
                        bytes: r.writes * size as u64,
                        seconds: took.as_secs_f64(),
                        usage: Usage::default(),
                    },
                });
                got.push((store, r));
            }
            k += 1;
            let rate = |s: E1Store| e1_rate(&got, s);
            let _ = writeln!(
                extra,
                "{name:<13} quorumlog / raft-log = {:.2}x; / raft-engine = {:.2}x; / memory = {:.2}x; {}",
                rate(E1Store::Quorumlog) / rate(E1Store::RaftLog),
                rate(E1Store::Quorumlog) / rate(E1Store::RaftEngine),
                rate(E1Store::Quorumlog) / rate(E1Store::Memory),
                e1_latencies(&got)
            );
        }
    }
    let name = "E1-g16-c256-64B";
    if only.as_ref().is_none_or(|o| name.ends_with(o.as_str())) {
        run_e1_groups(args, base, rows, extra, name)?;
    }
    Ok(())
}

/// E2: three raft-rs nodes persisted by quorumlog (asynchronous
/// persistence), raft-engine (one batch per loop pass, as `TiKV`) and
/// `MemStorage`, 1 and 1,000 regions, 1 and 256 proposals in flight per
/// node; `args.rounds` interleaved rounds (the systems' order rotates),
/// each system's median round reported.
pub(super) fn run_e2(
    args: &Args,
    base: &Path,
    rows: &mut Vec<Row>,
    extra: &mut String,
) -> Result<(), BenchError> {
    use quorumlog_benches::e1::E1Result;
    use quorumlog_benches::e2::{run, E2Store};
    use std::fmt::Write as _;
    let stores: Vec<E2Store> = [E2Store::Quorumlog, E2Store::RaftEngine, E2Store::Memory]
        .into_iter()
        .filter(|s| selected(args, s.name()))
        .collect();
    // `QUORUMLOG_E2=r1000-f256` (for example) runs one configuration.
    let only = std::env::var("QUORUMLOG_E2").ok();
    let _ = writeln!(
        extra,
        "\nE2 (three raft-rs nodes in one process; proposals/s, p50/p99 commit latency; median of {} rounds):",
        args.rounds
    );
    let mut k = 0;
    for regions in [1u64, 1000] {
        for in_flight in [1usize, 256] {
            let name = format!("E2-r{regions}-f{in_flight}");
            if only.as_ref().is_some_and(|o| !name.ends_with(o.as_str())) {
                continue;
            }
            let mut got: Vec<(E2Store, Vec<E1Result>)> =
                stores.iter().map(|s| (*s, Vec::new())).collect();
            for _ in 0..args.rounds {
                for i in 0..stores.len() {
                    let j = (i + k) % stores.len();
                    let (store, results) = got.get_mut(j).ok_or("no such system")?;
                    let dir = base.join(format!("{name}-{}", store.name()));
                    let r = run(*store, &dir, regions, in_flight, args.seconds)?;
                    let _ = std::fs::remove_dir_all(&dir);
                    results.push(r);
                }
                k += 1;
            }
            let median: Vec<(E2Store, E1Result)> = got
                .into_iter()
                .map(|(s, mut rs)| {
                    rs.sort_by(|a, b| a.writes_per_s.total_cmp(&b.writes_per_s));
                    (s, rs.get(rs.len() / 2).copied().unwrap_or_default())
                })
                .collect();
            for (s, r) in &median {
                rows.push(Row {
                    workload: name.clone(),
                    system: s.name().into(),
                    m: Measured {
                        entries: r.writes,
                        bytes: r.writes * 64,
                        seconds: args.seconds,
                        usage: Usage::default(),
                    },
                });
            }
            let _ = writeln!(extra, "{}", e2_line(&name, &median));
        }
    }
    Ok(())
}

/// One E2 configuration's report line: the ratios, then each system's
/// proposals/s and p50/p99 commit latency.
pub(super) fn e2_line(
    name: &str,
    median: &[(
        quorumlog_benches::e2::E2Store,
        quorumlog_benches::e1::E1Result,
    )],
) -> String {
    use quorumlog_benches::e2::E2Store;
    let rate = |s: E2Store| {
        median
            .iter()
            .find(|(x, _)| *x == s)
            .map_or(0.0, |(_, r)| r.writes_per_s)
    };
    let lat = latencies(median.iter().map(|(s, r)| (s.name(), r)));
    let mut cpu = String::new();
    #[expect(clippy::cast_precision_loss, reason = "ratios for display")]
    for (s, r) in median {
        let per = |x: f64| x / r.writes.max(1) as f64;
        let _ = write!(
            cpu,
            " {} {:.1} us, {:.2} switches;",
            s.name(),
            per(r.usage.cpu.as_secs_f64() * 1e6),
            per(r.usage.switches as f64)
        );
    }
    format!(
        "{name:<14} quorumlog / raft-engine = {:.2}x; / memory = {:.2}x; {lat}\n{name:<14} CPU per \
         committed proposal (median round):{cpu}",
        rate(E2Store::Quorumlog) / rate(E2Store::RaftEngine),
        rate(E2Store::Quorumlog) / rate(E2Store::Memory),
    )
}

/// E1's many-groups run: 16 groups on the same three nodes, 256 clients
/// spread over them, 64-byte values.
pub(super) fn run_e1_groups(
    args: &Args,
    base: &Path,
    rows: &mut Vec<Row>,
    extra: &mut String,
    name: &str,
) -> Result<(), BenchError> {
    use quorumlog_benches::e1::{groups, E1Store};
    use std::fmt::Write as _;
    let mut got = Vec::new();
    for store in groups::SYSTEMS
        .into_iter()
        .filter(|s| selected(args, s.name()))
    {
        let dir = base.join(format!("{name}-{}", store.name()));
        let r = groups::run(store, &dir, 16, 256, 64, args.seconds)?;
        let _ = std::fs::remove_dir_all(&dir);
        rows.push(Row {
            workload: name.into(),
            system: store.name().into(),
            m: Measured {
                entries: r.writes,
                bytes: r.writes * 64,
                seconds: args.seconds,
                usage: Usage::default(),
            },
        });
        got.push((store, r));
    }
    let rate = |s: E1Store| e1_rate(&got, s);
    let _ = writeln!(
        extra,
        "{name:<15} (16 groups per node) quorumlog / raft-log = {:.2}x; / memory = {:.2}x; {}",
        rate(E1Store::Quorumlog) / rate(E1Store::RaftLog),
        rate(E1Store::Quorumlog) / rate(E1Store::Memory),
        e1_latencies(&got)
    );
    Ok(())
}

/// `store`'s writes/s among `got` (0 if it did not run).
pub(super) fn e1_rate(
    got: &[(
        quorumlog_benches::e1::E1Store,
        quorumlog_benches::e1::E1Result,
    )],
    store: quorumlog_benches::e1::E1Store,
) -> f64 {
    got.iter()
        .find(|(x, _)| *x == store)
        .map_or(0.0, |(_, r)| r.writes_per_s)
}

/// Each system's writes/s and p50/p99 client latency, for the report.
pub(super) fn e1_latencies(
    got: &[(
        quorumlog_benches::e1::E1Store,
        quorumlog_benches::e1::E1Result,
    )],
) -> String {
    latencies(got.iter().map(|(s, r)| (s.name(), r)))
}
/// `name rate/s p50/p99 ms` for each system, joined.
#[expect(clippy::cast_precision_loss, reason = "latencies for display")]
pub(super) fn latencies<'a>(
    got: impl Iterator<Item = (&'static str, &'a quorumlog_benches::e1::E1Result)>,
) -> String {
    got.map(|(name, r)| {
        format!(
            "{} {:.0}/s {:.2}/{:.2} ms",
            name,
            r.writes_per_s,
            r.p50_us as f64 / 1e3,
            r.p99_us as f64 / 1e3
        )
    })
    .collect::<Vec<_>>()
    .join("; ")
}
