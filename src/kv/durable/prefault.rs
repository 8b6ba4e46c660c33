//! One thread per process that faults a log mapping's next pages in while the server serves
//! (what checkpointing costs), and unmaps mappings their owners are done with.
//!
//! Why: a new server's first pass through its log writes into fresh page-cache pages, which
//! the kernel must allocate and zero (`MADV_POPULATE_WRITE`: read the unwritten blocks as
//! zeros, then make each page writable). Done by the customer thread when the mapping grows,
//! that work stood between a request and its answer; `perf` put it at a tenth of all the
//! CPU time of `kv-app --keys 1000000`. Here it runs on a thread of its own, in the time the
//! cores spend waiting for the network, ahead of the stores that need the pages; a store that
//! gets there first faults its page in itself, as before.
//!
//! Jobs run one at a time in the order they were sent, so a mapping's unmapping comes after
//! every fault-in asked for it: an address is never faulted in after it was unmapped (and
//! perhaps mapped again by someone else). Faulting in changes no byte (`madvise(2)`), so it
//! may run beside the writer's stores.

use std::sync::mpsc::{self, Sender};
use std::sync::OnceLock;

/// A fault-in is done this many bytes at a time, so that a thread mapping or unmapping memory
/// meanwhile (which waits for the process's memory map) waits for at most this much.
const CHUNK: usize = 1 << 20;

/// What the thread is asked to do.
enum Job {
    /// Fault bytes `from..to` of the mapping at `base` in writable.
    Populate { base: usize, from: usize, to: usize },
    /// Unmap the `len` bytes at `base`.
    Unmap { base: usize, len: usize },
}

/// The thread's queue, the thread started on first use; `None` where it could not start.
fn queue() -> Option<&'static Sender<Job>> {
    static QUEUE: OnceLock<Option<Sender<Job>>> = OnceLock::new();
    QUEUE
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel();
            std::thread::Builder::new()
                .name("ps-prefault".into())
                .spawn(move || rx.into_iter().for_each(run))
                .ok()
                .map(|_| tx)
        })
        .as_ref()
}

fn run(job: Job) {
    match job {
        Job::Populate { base, from, to } => {
            let mut at = from;
            while at < to {
                let n = CHUNK.min(to - at);
                populate_now((base + at) as *mut u8, n);
                at += n;
            }
        }
        // SAFETY: the owner gave the mapping up (`unmap`); every job for it ran before.
        Job::Unmap { base, len } => unsafe {
            libc::munmap(base as *mut libc::c_void, len);
        },
    }
}

/// Faults the `len` bytes at `at` in writable now (best effort: before Linux 5.14, or past the
/// file's end, nothing happens and the pages fault in as they are written).
pub(super) fn populate_now(at: *mut u8, len: usize) {
    // SAFETY: madvise(2) changes no byte; an address outside any mapping is an error it
    // returns, which is ignored.
    unsafe {
        libc::madvise(at.cast(), len, libc::MADV_POPULATE_WRITE);
    }
}

/// Has bytes `from..to` (page-aligned) of the mapping at `base` faulted in on the thread,
/// later. The mapping must stay mapped until [`unmap`] of it: unmapped only through it.
pub(super) fn populate_later(base: *mut u8, from: usize, to: usize) {
    if let Some(q) = queue() {
        let _ = q.send(Job::Populate {
            base: base as usize,
            from,
            to,
        });
    }
}

/// Unmaps the `len` bytes mapped at `base` once the jobs sent before have run (at once where
/// the thread does not run). The caller no longer uses them.
pub(super) fn unmap(base: *mut u8, len: usize) {
    let job = Job::Unmap {
        base: base as usize,
        len,
    };
    match queue() {
        Some(q) => {
            if let Err(mpsc::SendError(job)) = q.send(job) {
                run(job);
            }
        }
        None => run(job),
    }
}
