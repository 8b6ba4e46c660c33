//! The key-value layer: [`KVWorker`], [`KVServer`], request handlers, the slicer, timestamps.

mod carrier;
pub mod keycache;
pub mod pairs;
pub mod request;
pub mod sarray;
pub mod server;
pub mod slicer;
pub mod store;
pub mod value;
pub mod worker;

pub use pairs::{KVPairs, KVRequest};
pub use request::{Callback, Op, RequestOptions};
pub use sarray::SArray;
pub use server::{DefaultHandler, KVServer, ReqMeta, RequestHandler};
pub use value::Value;
pub use worker::KVWorker;

/// A key.
pub type Key = u64;

/// Identifies one request of a [`KVWorker`]; returned by push/pull, given to `wait`.
pub type Timestamp = i32;
