//! Embedding tables on the servers: rows of `dim` `f32` values per `u64` key, one table per
//! application id, configured by a [`TableSpec`] line rather than written as a handler.
//!
//! - **Lazy initialization**: a key the table does not hold is answered with its initial row,
//!   a pure function of (seed, key) ([`init`]: Philox4x64-10), the same on every server and
//!   after any restart or eviction.
//! - **Optimizers on push** ([`optim`]): SGD, AdaGrad, Adam with a step count per row, and
//!   FTRL-Proximal, with optional L2 weight decay; slots kept beside each row.
//! - **Admission** ([`admit`]): at the N-th push (a count-min sketch) or with probability p per
//!   push; until then pulls get the initial row and pushes are counted and dropped.
//! - **Eviction under a budget** ([`Table`]): bytes per table and server, counted at their
//!   allocated size; the least recently pushed rows go first, or rows not pushed for a TTL.
//! - **Durable**: the whole table is a snapshot, and logged pushes replay to the same bits.
//!
//! | file | concept |
//! | --- | --- |
//! | [`spec`] | the spec line, its parser and builder |
//! | [`init`] | initial rows from a counter-based generator |
//! | [`optim`] | one optimizer step on a row and its slots |
//! | [`admit`] | admission: the count-min sketch, probability draws |
//! | [`index`] | key → slot, 5 bytes a bucket |
//! | [`rows`] | records (key, stamp, row, slots) in chunks that never move |
//! | [`table`] | [`Table`]: pull, push, eviction, save and restore, with no IO |
//! | [`handler`] | [`TableHandler`] (a server's request handler) and [`serve_tables`] |
//!
//! ```
//! use pslite::kv::table::{Table, TableSpec};
//! let spec: TableSpec = "app=0,dim=4,init=uniform:-0.1:0.1,opt=adagrad:lr=0.5".parse().unwrap();
//! let mut t = Table::new(&spec).unwrap();
//! let mut rows = vec![0.0; 8];
//! t.pull(&[7, 9], &mut rows).unwrap(); // initial rows; the table holds none yet
//! let first = rows.clone();
//! t.push(&[7], &[1.0; 4], None).unwrap(); // one AdaGrad step: w -= 0.5 · 1 / √1
//! t.pull(&[7, 9], &mut rows).unwrap();
//! assert!((rows[0] - (first[0] - 0.5)).abs() < 1e-6);
//! assert_eq!(rows[4..], first[4..]); // key 9 was never pushed
//! ```

pub mod admit;
pub mod handler;
pub mod huge;
pub mod index;
pub mod init;
mod lookup;
pub mod optim;
pub mod rows;
pub mod spec;
#[allow(clippy::module_inception)]
pub mod table;
#[cfg(test)]
mod tests;

pub use handler::{check_specs, serve_tables, TableHandler};
pub use spec::{Admission, Eviction, Init, Optimizer, TableSpec};
pub use table::{Table, TableCounts};
