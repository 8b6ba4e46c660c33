//! This node's registered memory, as the key-value layer's zero-copy paths need it: the memory
//! pool (`PS_POOL_BYTES`, the target of peers' remote writes), the immediate slots that route a
//! remote write to its customer, and the van's registration of write sources.

use super::Route;
use crate::error::{Error, Result};
use crate::sync::lock;
use crate::van::pool::MemoryPool;
use crate::van::{Registration, Van};
use crate::wire::{Imm, NodeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The pool, made on first use, the immediate slots, and the van's remote-memory capability
/// ([`crate::van::RemoteMemory`]; none on the ZMQ van). Its locks are taken alone.
pub(crate) struct Memory {
    /// Declared before `pool`: dropped first, so the van's registrations end before the pool's
    /// memory is freed.
    van: Arc<dyn Van>,
    /// `PS_POOL_BYTES`.
    pool_bytes: usize,
    pool: OnceLock<MemoryPool>,
    pool_init: Mutex<()>,
    imm_slots: Mutex<HashMap<u8, Route>>,
}

impl Memory {
    /// The memory of a node whose van is `van`, with a pool of `pool_bytes` once used.
    pub(super) fn new(van: Arc<dyn Van>, pool_bytes: usize) -> Memory {
        Memory {
            van,
            pool_bytes,
            pool: OnceLock::new(),
            pool_init: Mutex::new(()),
            imm_slots: Mutex::new(HashMap::new()),
        }
    }

    /// The route whose slot `imm` names.
    pub(super) fn route_of_imm(&self, imm: Imm) -> Option<Route> {
        lock(&self.imm_slots).get(&imm.slot()).copied()
    }

    /// The pool of node `my_id` ([`Postoffice::pool`](super::Postoffice::pool)).
    pub(super) fn pool(&self, my_id: NodeId) -> Result<&MemoryPool> {
        if let Some(p) = self.pool.get() {
            return Ok(p);
        }
        let _one = lock(&self.pool_init);
        if let Some(p) = self.pool.get() {
            return Ok(p);
        }
        let p = MemoryPool::new(self.pool_bytes, 0x5053_0000 | (my_id as u32 & 0xffff))?;
        // SAFETY: the pool lives as long as this `Memory`, which drops the van (its `van`
        // field, declared first) before the pool.
        if let Some(rm) = self.van.remote_memory() {
            // SAFETY: as above.
            p.set_keys(unsafe { rm.register_memory(p.base(), p.size(), true) }?);
        }
        Ok(self.pool.get_or_init(|| p))
    }

    /// Reserves an immediate slot for `route`
    /// ([`Postoffice::register_imm_slot`](super::Postoffice::register_imm_slot)).
    pub(super) fn register_imm_slot(&self, route: Route) -> Result<u8> {
        let mut slots = lock(&self.imm_slots);
        let slot = (0..=Imm::MAX_SLOT)
            .find(|s| !slots.contains_key(s))
            .ok_or_else(|| {
                Error::InvalidArgument("all 255 immediate slots of this process are taken".into())
            })?;
        slots.insert(slot, route);
        Ok(slot)
    }

    /// Frees an immediate slot
    /// ([`Postoffice::release_imm_slot`](super::Postoffice::release_imm_slot)).
    pub(super) fn release_imm_slot(&self, slot: u8) {
        lock(&self.imm_slots).remove(&slot);
    }

    /// Whether the van can write into `to`'s registered memory (see
    /// [`crate::van::RemoteMemory::can_write`]).
    pub(crate) fn can_write(&self, to: NodeId) -> bool {
        self.van.remote_memory().is_some_and(|rm| rm.can_write(to))
    }

    /// Registers `[addr, addr + len)` with the van as an RDMA write source (local reads only;
    /// see [`crate::van::RemoteMemory::register_memory`]): its keys, or `None` when the van has
    /// no remote memory (ZMQ).
    ///
    /// # Safety
    /// As [`crate::van::RemoteMemory::register_memory`]: the memory stays allocated until
    /// [`deregister_memory`](Self::deregister_memory) or the postoffice is dropped.
    ///
    /// # Errors
    /// As [`crate::van::RemoteMemory::register_memory`].
    pub(crate) unsafe fn register_source(
        &self,
        addr: usize,
        len: usize,
    ) -> Result<Option<Registration>> {
        // SAFETY: the caller's promise.
        match self.van.remote_memory() {
            Some(rm) => unsafe { rm.register_memory(addr, len, false) }.map(Some),
            None => Ok(None),
        }
    }

    /// Ends the van's registrations starting at `addr` (see
    /// [`crate::van::RemoteMemory::deregister_memory`]).
    pub(crate) fn deregister_memory(&self, addr: usize) {
        if let Some(rm) = self.van.remote_memory() {
            rm.deregister_memory(addr)
        }
    }
}
