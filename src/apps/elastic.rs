//! What `pslite-server` does about elastic servers: a server that joined the running job asks
//! for its share of the keys once its key-value servers exist, and `kill -USR2 PID` drains a
//! running server (its keys move to the others while the job goes on; it serves nothing
//! after, until the job ends) — the control for a cluster started by hand or by
//! `pslite-launch`, which prints every node's pid.

use crate::error::{Error, Result};
use crate::postoffice::{Postoffice, Resized};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Asks the scheduler to give this server a share of the keys (`add`) or to drain it, again
/// every 50 ms while another resize moves keys (the scheduler refuses it then) or a scheduler
/// taking the job over waits for the nodes, for at most `PS_TIMEOUT`.
///
/// # Errors
/// As [`Postoffice::resize`].
pub fn resize_self(po: &Postoffice, add: bool) -> Result<Resized> {
    let deadline = Instant::now() + po.config().timing.timeout;
    loop {
        match po.resize(po.my_id(), add) {
            Err(Error::InvalidArgument(why))
                if why.contains("ask again") && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            r => return r,
        }
    }
}

/// On a server that joined the running job ([`Postoffice::joined`]), once its key-value
/// servers exist: asks for its share of the keys and says how the move went. A refusal or a
/// failed move is logged; the server then serves nothing and the job goes on.
pub fn take_share(po: &Postoffice) {
    if !po.joined() {
        return;
    }
    let rank = po.my_rank();
    match resize_self(po, true) {
        Ok(r) => eprintln!(
            "pslite: server rank {rank} joined the running job: key layout {} settled in \
             {:.1} ms, {} bytes of rows moved here",
            r.epoch,
            r.took.as_secs_f64() * 1e3,
            r.bytes
        ),
        Err(e) => {
            tracing::error!("server rank {rank} joined the running job but holds no keys: {e}")
        }
    }
}

/// Catches `SIGUSR2` from now on (its default action ends the process): call it before the
/// server starts, so that a signal during the start or a join waits for
/// [`drain_on_sigusr2`]. `None` (logged) when the handler cannot be installed.
pub fn catch_sigusr2() -> Option<signal_hook::iterator::Signals> {
    match signal_hook::iterator::Signals::new([signal_hook::consts::SIGUSR2]) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!("cannot handle SIGUSR2 (drain this server): {e}");
            None
        }
    }
}

/// Drains this server on every `SIGUSR2` caught by `signals` (from a `ps-drain` thread; one
/// that came before this call is acted on now), saying how the move went; a refusal (the only
/// server, one that holds no keys) is logged.
pub fn drain_on_sigusr2(po: &Arc<Postoffice>, signals: Option<signal_hook::iterator::Signals>) {
    let Some(mut signals) = signals else { return };
    let weak = Arc::downgrade(po);
    let spawned = std::thread::Builder::new()
        .name("ps-drain".into())
        .spawn(move || {
            for _ in signals.forever() {
                let Some(po) = weak.upgrade() else { return };
                drain(&po);
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("cannot start the SIGUSR2 thread: {e}");
    }
}

/// Drains this server (SIGUSR2), saying how it went.
fn drain(po: &Postoffice) {
    let rank = po.my_rank();
    eprintln!("pslite: server rank {rank}: SIGUSR2, moving its keys to the other servers");
    match resize_self(po, false) {
        Ok(r) => eprintln!(
            "pslite: server rank {rank} drained: key layout {} settled in {:.1} ms, {} bytes \
             of rows moved",
            r.epoch,
            r.took.as_secs_f64() * 1e3,
            r.bytes
        ),
        Err(e) => tracing::error!("server rank {rank} was not drained: {e}"),
    }
}
