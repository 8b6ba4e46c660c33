//! libzmq's socket monitors: starting one and the PAIR socket that reads its events, reading
//! an event, stopping one.

use super::zerr;
use crate::error::{Error, Result};
use std::sync::atomic::Ordering;

/// Starts libzmq's monitor of `sock` for `events` (ORed `zmq::SocketEvent`s) and returns the
/// PAIR socket of `ctx` that reads them ([`monitor_event`]); `what` names it in errors. Stop
/// it with [`unmonitor`] before that socket goes.
///
/// # Errors
/// [`Error::Van`] when libzmq cannot set it up.
pub(super) fn monitor(
    ctx: &zmq::Context,
    sock: &zmq::Socket,
    events: i32,
    what: &str,
) -> Result<zmq::Socket> {
    let endpoint = monitor_endpoint();
    sock.monitor(&endpoint, events)
        .map_err(zerr(format!("{what}: monitor")))?;
    reader(ctx, &endpoint, what)
}

/// As [`monitor`], with libzmq's event version 2 (`zmq_socket_monitor_versioned`): each event
/// is a 64-bit kind, a count of 64-bit values, the values, then the local and the remote
/// address.
///
/// # Errors
/// [`Error::Van`] when libzmq cannot set it up.
pub(super) fn monitor_v2(
    ctx: &zmq::Context,
    sock: &mut zmq::Socket,
    events: i32,
    what: &str,
) -> Result<zmq::Socket> {
    extern "C" {
        // libzmq 4.3.4 compiles this function whether or not its DRAFT API is on, but declares
        // it `extern "C"` only with it, and zmq-sys builds libzmq without: the symbol is the
        // C++ one, `int zmq_socket_monitor_versioned(void*, const char*, uint64_t, int, int)`.
        #[link_name = "_Z28zmq_socket_monitor_versionedPvPKcmii"]
        fn zmq_socket_monitor_versioned(
            s: *mut std::ffi::c_void,
            addr: *const std::ffi::c_char,
            events: u64,
            event_version: std::ffi::c_int,
            kind: std::ffi::c_int,
        ) -> std::ffi::c_int;
    }
    let endpoint = monitor_endpoint();
    let c =
        std::ffi::CString::new(endpoint.clone()).map_err(|e| Error::Van(format!("{what}: {e}")))?;
    // SAFETY: a live socket (libzmq guards its monitor with its own lock) and a NUL-terminated
    // endpoint that outlives the call.
    let rc = unsafe {
        zmq_socket_monitor_versioned(
            sock.as_mut_ptr(),
            c.as_ptr(),
            events as u64,
            2,
            zmq_sys::ZMQ_PAIR as _,
        )
    };
    if rc != 0 {
        // SAFETY: reads the calling thread's libzmq error.
        let e = zmq::Error::from_raw(unsafe { zmq_sys::zmq_errno() });
        return Err(Error::Van(format!("{what}: monitor: {e}")));
    }
    reader(ctx, &endpoint, what)
}

/// A name of its own for each monitor (a socket's address can be reused).
fn monitor_endpoint() -> String {
    static MONITORS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    format!(
        "inproc://ps-monitor-{}",
        MONITORS.fetch_add(1, Ordering::Relaxed)
    )
}

/// The PAIR socket of `ctx` that reads the monitor at `endpoint`.
fn reader(ctx: &zmq::Context, endpoint: &str, what: &str) -> Result<zmq::Socket> {
    let reader = ctx
        .socket(zmq::PAIR)
        .map_err(zerr(format!("{what}: monitor socket")))?;
    reader
        .connect(endpoint)
        .map_err(zerr(format!("{what}: cannot read {endpoint}")))?;
    Ok(reader)
}

/// A monitor event's kind and value (a file descriptor, an error or a status code, by kind)
/// from its first frame: 16-bit event, 32-bit value, little-endian.
pub(super) fn monitor_event(head: &[u8]) -> Option<(zmq::SocketEvent, u32)> {
    let h = head.get(..6)?;
    let event = zmq::SocketEvent::from_raw(u16::from_le_bytes([h[0], h[1]]));
    Some((event, u32::from_le_bytes([h[2], h[3], h[4], h[5]])))
}

/// Stops libzmq's monitor of `sock`, if it has one. It must be stopped before the socket that
/// reads its events is dropped: libzmq's IO thread sends each event blocking, and with no
/// reader it would block for good, stalling every socket of the context (libzmq 4.3.4,
/// `socket_base_t::monitor_event`). Dropping `sock` itself does not stop it: a closed socket
/// lives on through its linger.
pub(super) fn unmonitor(sock: &mut zmq::Socket) {
    // SAFETY: a live socket we hold exclusively; a null endpoint deregisters the monitor
    // (zmq_socket_monitor(3)), which libzmq guards with its own lock.
    unsafe {
        zmq_sys::zmq_socket_monitor(sock.as_mut_ptr(), std::ptr::null(), 0);
    }
}
