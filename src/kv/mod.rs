//! The key-value layer: [`KVWorker`], [`KVServer`], request handlers, the slicer, timestamps
//! (ps-lite's `kv_app.h`), and the drivers of zero-copy pulls (TF contrib/verbs' rendezvous,
//! whose sans-IO state machines are [`crate::rendezvous`]).
//!
//! | module | what it owns |
//! | --- | --- |
//! | [`worker`] | `KVWorker`: the API (`mod.rs`), a call checked, sliced and merged (`call.rs`), pending requests and key caching's send/resend (`tracker.rs`), the rendezvous requester's driver (`zpull.rs`) |
//! | [`server`] | `KVServer`, `RequestHandler`, `ReqMeta`, `serve_request` (`mod.rs`); [`DefaultHandler`] (`default.rs`); the rendezvous responder's driver (`zserve.rs`) |
//! | [`request`] | [`Op`], [`RequestOptions`], [`Callback`]: what a request asks |
//! | `carrier` | how rendezvous traffic travels (control and content messages, RDMA writes): encoded and decoded for both drivers |
//! | [`durable`] | checkpoint files (`PS_CHECKPOINT_DIR`): snapshots replaced atomically, the request log; checksums name the file and offset of any damage |
//! | [`keycache`] | key caching, sans-IO: the worker's mirror of what each server keeps, the server's kept lists |
//! | [`table`] | embedding tables: [`table::TableSpec`], [`table::Table`] (rows, initializers, optimizers, admission, eviction under a budget), [`table::TableHandler`] and [`table::serve_tables`] |
//! | [`pairs`], [`slicer`], [`sarray`], [`value`], [`store`] | frames and shapes, key-range slicing, shared arrays, value types, the default handler's key store |
//! | [`unique`] | a batch's sorted unique keys and the inverse mapping each id to one (embedding lookups from PyTorch) |
//!
//! ## Threads
//! - **Worker.** Any number of caller threads share a `KVWorker` (`&self`): they send requests
//!   and start rendezvous pulls, and block in `wait`, `take_pulled`, `pull_into`,
//!   `push_pull_into` and `zpull_wait` (each with the `PS_TIMEOUT` deadline). One customer
//!   thread per worker (`customer-<route>`, [`crate::postoffice::Customer`]) receives its
//!   events in arrival order (servers' answers, rendezvous messages, RDMA write completions),
//!   settles requests, and runs request callbacks and `zpull` callbacks. A callback runs on
//!   the calling thread instead when its request completes at once: a request to no server (no
//!   keys), or a rendezvous pull whose request cannot be sent. Caller threads and the customer
//!   thread share the worker's state (`WorkerState`: the tracker and the rendezvous pulls);
//!   the NIC writes pulled values into the destination buffers (the registered pool).
//! - **Server.** One customer thread per `KVServer` handles requests and rendezvous messages
//!   one at a time, in arrival order; it owns the handler, the kept key lists and the
//!   responder without locks, and drops them when the server is dropped (the dropping thread
//!   joins it). The van's completion thread (the RDMA poller) ends a write from the handler's
//!   memory by releasing its hold: the count of writes in flight is the one thing shared, and
//!   a push or an application command waits on it before it changes values.
//!
//! ## Lock order
//! - Worker: a server's key-cache mirror, then `pending` (the tracker), then the highest
//!   answered timestamps (`worker/tracker/replaced.rs`). A request's part is prepared and sent
//!   under its server's mirror, so each server sees requests in the order its mirror recorded
//!   them (a replaced server's ANSWERED and resends too); `pending` is taken inside that, and
//!   alone elsewhere (waiters sleep on its condvar). The rendezvous pulls' lock (`zpulls`) is taken alone, never with
//!   the other two; content is copied into a destination only under it, and a pull ends only
//!   under it.
//! - Server: the in-flight count's lock, alone.
//! - Messages are sent (and pool buffers allocated) while a kv lock is held, so the
//!   postoffice's and van's locks come after kv's; the postoffice never calls into kv while
//!   holding one (it hands events over a channel). No kv lock is held while a callback or a
//!   handler runs.

mod carrier;
#[doc(hidden)]
pub mod durable;
#[doc(hidden)]
pub mod keycache;
pub mod pairs;
pub mod request;
pub mod sarray;
pub mod server;
#[doc(hidden)]
pub mod slicer;
pub mod store;
pub mod table;
#[doc(hidden)]
pub mod unique;
pub mod value;
pub mod worker;

pub use pairs::{KVPairs, KVRequest};
pub use request::{Callback, Op, RequestOptions};
pub use sarray::SArray;
pub use server::{DefaultHandler, KVServer, ReqMeta, RequestHandler, ServesValues};
pub use value::Value;
pub use worker::KVWorker;

pub use crate::wire::Key;

/// Identifies one request of a [`KVWorker`]; returned by push/pull, given to `wait`.
pub type Timestamp = i32;
