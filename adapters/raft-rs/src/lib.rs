#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

mod error;
mod persist;
mod storage;

pub use error::{Error, Result};
pub use persist::{AsyncPersister, Event, Pass, Waker, Written};
pub use storage::{RegionStorage, CACHE_ENTRIES};
