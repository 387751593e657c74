//! Test tooling of the key-value service, outside its library: node
//! processes ([`processes::Processes`]), recorded histories of client
//! operations ([`history`]) and a linearizability checker ([`check()`]).
//! The service's binary (its demo and soak) and its tests use it.

pub mod check;
pub mod history;
pub mod processes;

pub use check::check;
