//! The worker's key-cache mirrors ([`Mirror`]), one per server rank, made when a server is
//! first sent to: a server that joined the running job gets one as the others do.

use crate::kv::keycache::Mirror;
use std::sync::{Arc, Mutex, RwLock};

/// The highest server rank a mirror is made for (a rank comes from the scheduler's layout;
/// this bounds what a wrong one costs).
const MAX_RANK: usize = 1 << 16;

/// Mirrors by server rank.
pub(super) struct Mirrors {
    /// Keys each mirror holds at most (`PS_KEY_CACHE_KEYS`).
    cache_keys: usize,
    by_rank: RwLock<Vec<Arc<Mutex<Mirror>>>>,
}

impl Mirrors {
    /// Mirrors for `servers` servers (more are made as servers join), each holding at most
    /// `cache_keys` keys.
    pub(super) fn new(servers: usize, cache_keys: usize) -> Mirrors {
        let by_rank = (0..servers)
            .map(|_| Arc::new(Mutex::new(Mirror::new(cache_keys))))
            .collect();
        Mirrors {
            cache_keys,
            by_rank: RwLock::new(by_rank),
        }
    }

    /// Server rank `server`'s mirror, made if it is the first request to it; `None` past
    /// [`MAX_RANK`].
    pub(super) fn get(&self, server: usize) -> Option<Arc<Mutex<Mirror>>> {
        if let Some(m) = self
            .by_rank
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(server)
        {
            return Some(m.clone());
        }
        if server > MAX_RANK {
            return None;
        }
        let mut all = self.by_rank.write().unwrap_or_else(|p| p.into_inner());
        while all.len() <= server {
            all.push(Arc::new(Mutex::new(Mirror::new(self.cache_keys))));
        }
        all.get(server).cloned()
    }
}
