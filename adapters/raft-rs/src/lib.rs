#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

mod error;
mod event;
mod persist;
mod storage;

pub use error::{Error, Result};
pub use event::{Event, Waker};
pub use persist::{AsyncPersister, Pass, Written};
pub use storage::{RegionStorage, CACHE_ENTRIES};
