//! Test tooling of the key-value service, outside its library: node
//! processes ([`processes::Processes`]), recorded histories of client
//! operations ([`history`]) and a linearizability checker ([`check()`]).
//! The service's binary (its demo and soak) and its tests use it.

pub mod check;
pub mod history;
pub mod processes;

pub use check::check;

/// The runtime the service's tests run their clients and in-process
/// clusters on: two worker threads (the machines CI runs on have two
/// cores), every driver enabled.
///
/// # Errors
/// The runtime's, if its threads cannot start.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
}
