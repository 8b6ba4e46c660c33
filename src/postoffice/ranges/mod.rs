//! Servers added and drained at runtime: who owns which keys ([`layout`]), and how one range's
//! rows move from their old owner to the new one with every push applied exactly once
//! ([`migration`]). Sans-IO, property-tested against a network that drops, duplicates and
//! reorders (`tests.rs`); not driven by the postoffice yet.

pub mod layout;
pub mod migration;

#[cfg(test)]
mod tests;
