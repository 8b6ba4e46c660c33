//! Serving one node's [`Metrics`] over HTTP on `PS_METRICS_PORT`: `GET /metrics` (any path)
//! answers the OpenMetrics text, then closes the connection. One thread (`ps-metrics`) serves
//! every connection, at most [`MAX_CONNECTIONS`] at a time (one more closes the oldest), each
//! closed when it has sent no whole request within [`IDLE`] or more than [`MAX_REQUEST_BYTES`]:
//! idle or slow clients cost neither threads nor memory beyond that. Requests are parsed by
//! `httparse`. It runs until the [`MetricsServer`] is dropped.

use super::Metrics;
use crate::error::{Error, Result};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Connections open at a time; one more closes the oldest.
pub const MAX_CONNECTIONS: usize = 16;

/// How long a connection may take to send its whole request.
pub const IDLE: Duration = Duration::from_secs(2);

/// The longest request head read; a longer one is answered 431 and closed.
pub const MAX_REQUEST_BYTES: usize = 8192;

/// How long writing an answer may block on a client that does not read.
const WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// How often the thread looks whether it should stop.
const TICK_MS: i32 = 100;

/// The HTTP server of a node's metrics; stops when dropped.
pub struct MetricsServer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    addr: SocketAddr,
}

impl MetricsServer {
    /// The address it listens on (the port chosen when 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    /// Stops the thread (it looks every 100 ms; an answer being written takes at most 1 s more).
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Serves `metrics` at `http://host:port/metrics` (port 0: any free port) until the returned
/// server is dropped or `metrics` is.
///
/// # Errors
/// [`Error::Config`] naming `PS_METRICS_PORT` when the address cannot be bound.
pub fn serve(metrics: &Arc<Metrics>, host: &str, port: u16) -> Result<MetricsServer> {
    let ip: std::net::IpAddr = crate::config::address::resolve(host)
        .map_err(|e| Error::Config(format!("cannot serve metrics at {host}: {e}")))?
        .into_iter()
        .next()
        .ok_or_else(|| Error::Config(format!("{host} resolves to no address")))?;
    let cannot = |e: std::io::Error| {
        Error::Config(format!(
            "PS_METRICS_PORT={port}: cannot serve metrics at {}: {e}",
            crate::wire::place(host, port)
        ))
    };
    let listener = TcpListener::bind(SocketAddr::new(ip, port)).map_err(cannot)?;
    listener.set_nonblocking(true).map_err(cannot)?;
    let addr = listener.local_addr().map_err(cannot)?;
    let weak: Weak<Metrics> = Arc::downgrade(metrics);
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let thread = std::thread::Builder::new()
        .name("ps-metrics".into())
        .spawn(move || run(&listener, &weak, &st))
        .map_err(|e| Error::Van(format!("cannot start thread ps-metrics: {e}")))?;
    Ok(MetricsServer {
        stop,
        thread: Some(thread),
        addr,
    })
}

/// An open connection: its stream, what it sent so far, and since when.
struct Conn {
    stream: TcpStream,
    head: Vec<u8>,
    since: Instant,
}

/// What a connection's bytes so far are.
#[derive(Debug, PartialEq, Eq)]
enum Head {
    /// A whole request head.
    Complete,
    /// Not yet whole.
    Partial,
    /// Not HTTP, or too long: answered with this status line and closed.
    Bad(&'static str),
}

/// What `bytes` (all a connection sent so far) are.
fn head(bytes: &[u8]) -> Head {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    match httparse::Request::new(&mut headers).parse(bytes) {
        Ok(httparse::Status::Complete(_)) => Head::Complete,
        Ok(httparse::Status::Partial) if bytes.len() >= MAX_REQUEST_BYTES => {
            Head::Bad("431 Request Header Fields Too Large")
        }
        Ok(httparse::Status::Partial) => Head::Partial,
        Err(_) => Head::Bad("400 Bad Request"),
    }
}

/// Serves connections until `stop` is set or the metrics are gone.
fn run(listener: &TcpListener, metrics: &Weak<Metrics>, stop: &AtomicBool) {
    let mut conns: Vec<Conn> = Vec::new();
    while !stop.load(Ordering::Acquire) && metrics.strong_count() > 0 {
        wait_readable(listener, &conns);
        let now = Instant::now();
        while let Ok((stream, _)) = listener.accept() {
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            if conns.len() >= MAX_CONNECTIONS {
                conns.remove(0); // the oldest: closed when dropped
            }
            conns.push(Conn {
                stream,
                head: Vec::new(),
                since: now,
            });
        }
        conns.retain_mut(|c| keep(c, metrics, now));
    }
}

/// Reads what `c` sent; answers it once its request is whole. Whether it stays open.
fn keep(c: &mut Conn, metrics: &Weak<Metrics>, now: Instant) -> bool {
    let mut buf = [0u8; 2048];
    loop {
        match c.stream.read(&mut buf) {
            Ok(0) => return false,
            Ok(n) => {
                let room = MAX_REQUEST_BYTES.saturating_sub(c.head.len());
                c.head.extend_from_slice(&buf[..n.min(room)]);
                if c.head.len() >= MAX_REQUEST_BYTES {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    match head(&c.head) {
        Head::Partial => now.saturating_duration_since(c.since) < IDLE,
        Head::Complete => {
            let body = match metrics.upgrade() {
                Some(m) => m.render(),
                None => return false,
            };
            respond(
                &mut c.stream,
                "200 OK",
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                &body,
            );
            false
        }
        Head::Bad(status) => {
            respond(&mut c.stream, status, "text/plain; charset=utf-8", "");
            false
        }
    }
}

/// Writes one answer and lets the connection go (a client that hung up, or does not read
/// within [`WRITE_TIMEOUT`], is not this node's problem).
fn respond(stream: &mut TcpStream, status: &str, content_type: &str, body: &str) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let answer = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(answer.as_bytes());
    let _ = stream.shutdown(std::net::Shutdown::Write);
}

/// Waits until the listener or a connection is readable, at most [`TICK_MS`].
fn wait_readable(listener: &TcpListener, conns: &[Conn]) {
    let mut fds: Vec<libc::pollfd> = std::iter::once(listener.as_raw_fd())
        .chain(conns.iter().map(|c| c.stream.as_raw_fd()))
        .map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `fds` is a valid array of `fds.len()` pollfd structs, alive for the call; the
    // descriptors belong to the listener and streams borrowed for its duration.
    unsafe {
        libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, TICK_MS);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_heads_are_whole_partial_or_refused() {
        assert_eq!(
            head(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Head::Complete
        );
        assert_eq!(head(b"GET /metrics HTTP/1.1\r\nHost:"), Head::Partial);
        assert_eq!(head(b""), Head::Partial);
        assert_eq!(
            head(b"\x16\x03\x01 not http\r\n\r\n"),
            Head::Bad("400 Bad Request")
        );
        let long = format!("GET /{} HTTP/1.1\r\n", "a".repeat(MAX_REQUEST_BYTES));
        assert_eq!(
            head(long.as_bytes()),
            Head::Bad("431 Request Header Fields Too Large")
        );
    }
}
