//! Serving one node's [`Metrics`] over HTTP (`tiny_http`) on `PS_METRICS_PORT`: `GET /metrics`
//! (any path) answers the OpenMetrics text; the `ps-metrics` thread runs until the
//! [`MetricsServer`] is dropped.

use super::Metrics;
use crate::error::{Error, Result};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

/// The HTTP server of a node's metrics; stops when dropped.
pub struct MetricsServer {
    server: Arc<tiny_http::Server>,
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
    /// Stops the thread: joined when it ends within a second; otherwise (a scraper that does
    /// not read its answer holds it) left to end by itself, so a node's shutdown never hangs.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let deadline = std::time::Instant::now() + Duration::from_secs(1);
            while !t.is_finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if t.is_finished() {
                let _ = t.join();
            }
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
    let server = tiny_http::Server::http(SocketAddr::new(ip, port)).map_err(|e| {
        Error::Config(format!(
            "PS_METRICS_PORT={port}: cannot serve metrics at {}: {e}",
            crate::wire::place(host, port)
        ))
    })?;
    let addr = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| Error::Config("the metrics server has no IP address".into()))?;
    let server = Arc::new(server);
    let weak: Weak<Metrics> = Arc::downgrade(metrics);
    let s = server.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let thread = std::thread::Builder::new()
        .name("ps-metrics".into())
        .spawn(move || answer(&s, &weak, &st))
        .map_err(|e| Error::Van(format!("cannot start thread ps-metrics: {e}")))?;
    Ok(MetricsServer {
        server,
        stop,
        thread: Some(thread),
        addr,
    })
}

/// Answers scrapes until `stop` is set (looked at every 100 ms) or the metrics are gone.
fn answer(server: &tiny_http::Server, metrics: &Weak<Metrics>, stop: &AtomicBool) {
    let content_type = tiny_http::Header::from_bytes(
        "Content-Type",
        "application/openmetrics-text; version=1.0.0; charset=utf-8",
    );
    loop {
        if stop.load(Ordering::Acquire) || metrics.strong_count() == 0 {
            return;
        }
        let req = match server.recv_timeout(Duration::from_millis(100)) {
            Ok(Some(req)) => req,
            Ok(None) => continue,
            Err(_) => return,
        };
        let Some(m) = metrics.upgrade() else { return };
        let mut resp = tiny_http::Response::from_string(m.render());
        if let Ok(h) = content_type.clone() {
            resp = resp.with_header(h);
        }
        // A scraper that hung up is not this node's problem.
        let _ = req.respond(resp);
    }
}
