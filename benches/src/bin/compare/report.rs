//! The comparison table: each row's rate, the best peer, and the ratios.

#[allow(
    clippy::wildcard_imports,
    reason = "a child module: the parent's private items, as it sees them"
)]
use super::*;

pub(super) fn report(
    rows: &[Row],
    ratios: &[(String, f64)],
    args: &Args,
    extra: &str,
    backend: &str,
) {
    let mut workloads: Vec<&str> = Vec::new();
    for r in rows {
        if !workloads.contains(&r.workload.as_str()) {
            workloads.push(&r.workload);
        }
    }
    if args.csv {
        println!("workload,system,entries_per_s,mb_per_s");
        for r in rows {
            println!(
                "{},{},{:.1},{:.2}",
                r.workload,
                r.system,
                r.m.entries_per_s(),
                r.m.mb_per_s()
            );
        }
        for w in &workloads {
            if let Some((_, r)) = peer_ratio(rows, ratios, w) {
                println!("ratio,{w},{r:.3}");
            }
        }
        return;
    }
    println!("quorumlog I/O backend: {backend}");
    println!(
        "{:<9} {:<18} {:>14} {:>10}",
        "workload", "system", "entries/s", "MB/s"
    );
    for r in rows {
        println!(
            "{:<9} {:<18} {:>14.0} {:>10.1}",
            r.workload,
            r.system,
            r.m.entries_per_s(),
            r.m.mb_per_s()
        );
    }
    println!();
    for w in &workloads {
        let q = rate(rows, w, "quorumlog");
        let mut parts = Vec::new();
        if let Some((peer, r)) = peer_ratio(rows, ratios, w) {
            parts.push(format!("quorumlog / best peer ({peer}) = {r:.2}x"));
        }
        // The physical limit: the better of the two raw ways of writing.
        let raw = [
            ("raw", rate(rows, w, "raw")),
            ("raw-direct", rate(rows, w, "raw-direct")),
        ]
        .into_iter()
        .filter_map(|(n, r)| r.map(|r| (n, r)))
        .max_by(|a, b| a.1.total_cmp(&b.1));
        if let (Some(q), Some((name, raw))) = (q, raw) {
            parts.push(format!("quorumlog / raw limit ({name}) = {:.2}x", q / raw));
        }
        if !parts.is_empty() {
            println!("{w:<9} {}", parts.join("; "));
        }
    }
    if !extra.is_empty() {
        print!("{extra}");
    }
}

fn best_peer(rows: &[Row], workload: &str) -> Option<(String, f64)> {
    rows.iter()
        .filter(|r| r.workload == workload && (r.system == "raft-engine" || r.system == "okaywal"))
        .map(|r| (r.system.clone(), r.m.entries_per_s()))
        .max_by(|a, b| a.1.total_cmp(&b.1))
}

fn rate(rows: &[Row], workload: &str, system: &str) -> Option<f64> {
    rows.iter()
        .find(|r| r.workload == workload && r.system == system)
        .map(|r| r.m.entries_per_s())
}

/// quorumlog / best peer for `workload`: the median over rounds where the
/// workload ran in rounds, else from the rows.
fn peer_ratio(rows: &[Row], ratios: &[(String, f64)], workload: &str) -> Option<(String, f64)> {
    let (peer, p) = best_peer(rows, workload)?;
    if let Some((_, r)) = ratios.iter().find(|(w, _)| w == workload) {
        return Some((peer, *r));
    }
    Some((peer, rate(rows, workload, "quorumlog")? / p))
}
