//! ZMQ frames without a copy: a received frame kept as the storage of a [`Bytes`], a sent one
//! read by libzmq straight from a [`Bytes`]' memory.

use bytes::Bytes;

/// A received ZMQ frame, kept as the storage of a [`Bytes`] (no copy).
pub(super) struct ZmqFrame(pub(super) zmq::Message);

impl AsRef<[u8]> for ZmqFrame {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// Called by libzmq's IO thread when it is done with a frame: drops the `Bytes` that kept it.
unsafe extern "C" fn free_bytes(_data: *mut std::ffi::c_void, hint: *mut std::ffi::c_void) {
    // SAFETY: `hint` is the `Box<Bytes>` leaked by `send_frame`, handed back exactly once.
    drop(unsafe { Box::from_raw(hint as *mut Bytes) });
}

/// Sends one frame without copying it: libzmq reads the `Bytes`' memory and releases it through
/// `free_bytes` when the frame has left.
pub(super) fn send_frame(
    sock: &mut zmq::Socket,
    frame: Bytes,
    flags: i32,
) -> std::result::Result<(), zmq::Error> {
    let mut msg = std::mem::MaybeUninit::<zmq_sys::zmq_msg_t>::uninit();
    let len = frame.len();
    let data = frame.as_ptr() as *mut std::ffi::c_void;
    let hint = Box::into_raw(Box::new(frame));
    // SAFETY: `msg` is initialised by zmq_msg_init_data before use and closed on failure; the
    // data pointer stays valid while `hint` (which owns it) is alive; the socket pointer comes
    // from a live socket we hold exclusively.
    unsafe {
        if zmq_sys::zmq_msg_init_data(
            msg.as_mut_ptr(),
            data,
            len,
            Some(free_bytes),
            hint as *mut _,
        ) != 0
        {
            drop(Box::from_raw(hint));
            return Err(zmq::Error::from_raw(zmq_sys::zmq_errno()));
        }
        if zmq_sys::zmq_msg_send(msg.as_mut_ptr(), sock.as_mut_ptr(), flags) == -1 {
            let e = zmq::Error::from_raw(zmq_sys::zmq_errno());
            zmq_sys::zmq_msg_close(msg.as_mut_ptr());
            return Err(e);
        }
    }
    Ok(())
}
