//! A table's state as bytes ([`Table::save_into`]) and back ([`Table::restore`]): the spec
//! line it was saved with, its counts, every record handed out, the free list and the
//! admission sketch. A restored table reuses the same slots in the same order, so the pushes
//! logged after the snapshot replay to the same bits. And the rows of one key range, moving
//! to another server as servers are added and drained ([`Table::take_range`],
//! [`Table::put_rows`]).

use super::{stamp_of, Table, TableCounts, NONE};
use crate::kv::durable::bytes::Reader;
use crate::kv::table::admit::Admit;
use crate::kv::table::rows::{Rows, FREE};
use crate::postoffice::Range;

/// The first bytes of a saved table.
const MAGIC: &[u8] = b"pslite-table/2\n";

/// The first bytes of a table's rows moving to another server.
const MOVED: &[u8] = b"pslite-table-rows/1\n";

/// The first bytes of a table saved before a push stepped the rows held first ([`Table::push`]).
const OLD_MAGIC: &[u8] = b"pslite-table/1\n";

impl Table {
    /// The table's state as bytes: a header, the spec line, counts, the records of every slot
    /// handed out (free ones too, with their links: a restored table reuses the same slots in
    /// the same order), the free list's head and the admission sketch (its counters and the
    /// pushes counted since they last halved). Little-endian.
    pub fn save_into(&self, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(MAGIC);
        let spec = self.spec.to_string();
        out.extend_from_slice(&(spec.len() as u64).to_le_bytes());
        out.extend_from_slice(spec.as_bytes());
        let c = self.counts;
        for v in [
            c.pushes,
            c.admitted,
            c.not_admitted,
            c.evicted,
            c.initialized_on_pull,
            self.next_sweep,
            self.rows.used() as u64,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        let words: usize = self.rows.words().map(<[u64]>::len).sum();
        out.extend_from_slice(&(words as u64 * 8).to_le_bytes());
        out.reserve(words * 8 + self.admit.bytes() + 32);
        for chunk in self.rows.words() {
            out.extend_from_slice(bytemuck::cast_slice(chunk));
        }
        out.extend_from_slice(&u64::from(self.free).to_le_bytes());
        out.extend_from_slice(&(self.free_len as u64).to_le_bytes());
        let (counters, added): (&[u8], u64) = match &self.admit {
            Admit::Count { sketch, .. } => (sketch.counters(), sketch.added()),
            _ => (&[], 0),
        };
        out.extend_from_slice(&(counters.len() as u64).to_le_bytes());
        out.extend_from_slice(counters);
        out.extend_from_slice(&added.to_le_bytes());
    }

    /// Replaces the table's state with what [`save_into`](Self::save_into) wrote.
    ///
    /// # Errors
    /// A text naming what is wrong: another table's spec (both named), a truncation (with its
    /// offset), rows beyond this table's budget. The table is unchanged then.
    pub fn restore(&mut self, state: &[u8]) -> Result<(), String> {
        let mut fresh = Table::new(&self.spec)?;
        let mut r = Reader::new("saved table", state);
        check_header(&mut r, &self.spec.to_string())?;
        let c = read_counts(&mut r)?;
        fresh.next_sweep = r.u64("the next TTL sweep")?;
        let used = usize::try_from(r.u64("the slots used")?)
            .map_err(|_| "saved table: too many slots".to_string())?;
        let words = r.sized("the rows")?;
        fresh.rows.fill(used, words)?;
        let head = r.u64("the free list's head")?;
        let free_len = r.u64("the free list's length")?;
        let walked = walk_free_list(&fresh.rows, used, head, free_len)?;
        fresh.free = head as u32;
        fresh.free_len = walked as usize;
        if let Admit::Count { sketch, .. } = &mut fresh.admit {
            sketch.restore(&mut r)?;
        } else {
            r.sized("the admission sketch")?;
            r.u64("the admission sketch's pushes since its last halving")?;
        }
        r.finish("the saved table")?;
        fresh.index_held(used)?;
        fresh.counts = c;
        *self = fresh;
        Ok(())
    }

    /// Takes the rows of the keys in `range` out of the table (their slots freed, not counted
    /// as evicted) and returns them as bytes: a header, the spec line, the floats per row, the
    /// row count, then each row's key and its values with the optimizer slots (little-endian).
    /// Admission counts of keys not admitted yet stay here.
    pub fn take_range(&mut self, range: Range) -> Vec<u8> {
        let mut keys: Vec<u64> = self
            .keys()
            .into_iter()
            .filter(|&k| range.holds(k))
            .collect();
        keys.sort_unstable();
        let spec = self.spec.to_string();
        let floats = self
            .get_with_slots(keys.first().copied().unwrap_or(0))
            .map_or(0, <[f32]>::len);
        let mut out = Vec::with_capacity(64 + spec.len() + keys.len() * (8 + floats * 4));
        out.extend_from_slice(MOVED);
        out.extend_from_slice(&(spec.len() as u64).to_le_bytes());
        out.extend_from_slice(spec.as_bytes());
        out.extend_from_slice(&(floats as u64).to_le_bytes());
        out.extend_from_slice(&(keys.len() as u64).to_le_bytes());
        for k in keys {
            let Some(slot) = self.find(k) else { continue };
            out.extend_from_slice(&k.to_le_bytes());
            out.extend_from_slice(bytemuck::cast_slice(self.rows.values(slot)));
            self.release(slot);
        }
        out
    }

    /// Makes the rows [`take_range`](Self::take_range) wrote (on a server with the same spec)
    /// rows of this table, replacing those of the same keys; each counts as pushed now (for
    /// eviction and the TTL), and a full table evicts its least recently pushed rows first.
    ///
    /// # Errors
    /// Another spec (both named), a key outside `range`, a row length other than this
    /// table's, a truncation. Rows before the error stay.
    pub fn put_rows(&mut self, range: Range, rows: &[u8]) -> Result<(), String> {
        let mut r = Reader::new("moved rows", rows);
        if r.take(MOVED.len(), "the header")? != MOVED {
            return Err("moved rows: not an embedding table's rows (no header)".into());
        }
        let spec = r.sized("the spec line")?;
        let mine = self.spec.to_string();
        if spec != mine.as_bytes() {
            return Err(format!(
                "moved rows come from a table with spec '{}', this server's is '{mine}'",
                String::from_utf8_lossy(spec)
            ));
        }
        let floats = r.u64("the floats per row")?;
        let width = self.dim + self.spec.optimizer.slot_values(self.dim);
        if floats != width as u64 {
            return Err(format!(
                "moved rows have {floats} floats each (row and optimizer slots), this table's {width}"
            ));
        }
        let n = r.u64("the row count")?;
        let stamp = stamp_of(self.counts.pushes, 0);
        for _ in 0..n {
            let key = r.u64("a key")?;
            if !range.holds(key) {
                return Err(format!(
                    "moved row of key {key} is outside the range {range:?}"
                ));
            }
            let values = r.take(width * 4, "a row")?;
            let slot = match self.find(key) {
                Some(s) => s,
                None => {
                    let s = self.create(key);
                    // Moved, not admitted here.
                    self.counts.admitted -= 1;
                    s
                }
            };
            let (at, row) = self.rows.stamp_and_values_mut(slot);
            *at = stamp;
            bytemuck::cast_slice_mut::<f32, u8>(row).copy_from_slice(values);
        }
        r.finish("the moved rows")
    }

    /// Puts every held record of the first `used` slots in the index (growing it as it fills).
    ///
    /// # Errors
    /// When a key is held twice.
    fn index_held(&mut self, used: usize) -> Result<(), String> {
        for slot in 0..used as u32 {
            if self.rows.stamp(slot) != FREE {
                if !self.index.has_room() {
                    let rows = &self.rows;
                    self.index.grow(|s| rows.key(s));
                }
                let key = self.rows.key(slot);
                if self.find(key).is_some() {
                    return Err(format!("saved table: key {key} held twice"));
                }
                self.index.insert(key, slot);
            }
        }
        Ok(())
    }
}

/// Reads the header and the spec line, which must be `mine` (this table's canonical line).
///
/// # Errors
/// Another header (an older format's named), a truncation, or another spec (both named).
fn check_header(r: &mut Reader<'_>, mine: &str) -> Result<(), String> {
    let header = r.take(MAGIC.len(), "the header")?;
    if header == OLD_MAGIC {
        return Err(
            "saved table: saved by an older pslite-rs ('pslite-table/1'), whose pushes stepped \
             and created rows in another order: its log would not replay to the same table; \
             start the table afresh (an empty PS_CHECKPOINT_DIR)"
                .into(),
        );
    }
    if header != MAGIC {
        return Err(
            "saved table: not an embedding table's state (no 'pslite-table/2' header)".into(),
        );
    }
    let spec = r.sized("the spec line")?;
    if spec != mine.as_bytes() {
        return Err(format!(
            "saved table: it was saved by a table with spec '{}', this server's is '{mine}'",
            String::from_utf8_lossy(spec)
        ));
    }
    Ok(())
}

/// Reads the counts, in [`TableCounts`]' field order.
fn read_counts(r: &mut Reader<'_>) -> Result<TableCounts, String> {
    Ok(TableCounts {
        pushes: r.u64("the push count")?,
        admitted: r.u64("the admitted count")?,
        not_admitted: r.u64("the not-admitted count")?,
        evicted: r.u64("the evicted count")?,
        initialized_on_pull: r.u64("the initialized-on-pull count")?,
    })
}

/// Walks the free list from slot `head` through the free records' key words, and gives its
/// length.
///
/// # Errors
/// When it leaves the `used` slots, reaches a held record, is longer than `used` (a cycle), or
/// its length is not `free_len`.
fn walk_free_list(rows: &Rows, used: usize, head: u64, free_len: u64) -> Result<u64, String> {
    let (mut at, mut walked) = (head, 0u64);
    while at != u64::from(NONE) {
        if at >= used as u64 || rows.stamp(at as u32) != FREE || walked >= used as u64 {
            return Err(format!(
                "saved table: the free list is damaged at slot {at} (step {walked} of {used} slots)"
            ));
        }
        at = rows.key(at as u32);
        walked += 1;
    }
    if walked != free_len {
        return Err(format!(
            "saved table: the free list holds {walked} slots, its count says {free_len}"
        ));
    }
    Ok(walked)
}
