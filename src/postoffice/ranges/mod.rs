//! Servers added and drained at runtime: who owns which keys ([`layout`]), the scheduler's
//! one resize at a time ([`coordinator`]), and which requests each server serves while rows
//! move from their old owner to the new one, so that every push is applied exactly once
//! ([`holding`]). Sans-IO, property-tested (`tests.rs`): layouts through any adds and drains,
//! and whole jobs — workers pushing, resizes, handoffs — with every message delivered in any
//! interleaving of the connections.

pub mod coordinator;
pub mod holding;
pub mod layout;

#[cfg(test)]
mod tests;
