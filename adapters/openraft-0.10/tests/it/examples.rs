//! The adapter's examples run as tests, so CI runs what the guide points
//! to: `examples/cluster.rs` (docs/embedding.md §2), three nodes of two
//! groups on real directories. Invariant: every acknowledged write is read
//! back on every node after a follower's restart and after the whole
//! cluster's (the example returns an error naming the first missing key).

#[path = "../../examples/cluster.rs"]
#[allow(
    unreachable_pub,
    reason = "an example's items, public where it runs alone"
)]
mod cluster;

#[test]
fn the_guides_cluster_example_reads_back_every_write_after_restarts() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(cluster::run(tmp.path())).unwrap();
}
