//! A request's key list *resolved* against a [`KeyStore`](super::KeyStore): where its keys'
//! values lie, as runs of contiguous values, and the keys' lengths ([`Lens`] as a request
//! gives them).

/// The value lengths of a request's keys.
#[derive(Clone, Copy, Debug)]
pub enum Lens<'a> {
    /// Every key has this many values.
    Uniform(usize),
    /// One length per key.
    PerKey(&'a [u32]),
}

impl<'a> Lens<'a> {
    /// The lengths of keys `start..start + n`.
    pub(super) fn slice(self, start: usize, n: usize) -> Lens<'a> {
        match self {
            Lens::Uniform(w) => Lens::Uniform(w),
            Lens::PerKey(l) => Lens::PerKey(&l[start..start + n]),
        }
    }

    #[inline]
    pub(super) fn of(&self, i: usize) -> usize {
        match self {
            Lens::Uniform(w) => *w,
            Lens::PerKey(l) => l[i] as usize,
        }
    }
}

/// Contiguous values of consecutive keys of a resolved list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Run {
    pub(super) chunk: u32,
    /// Values of keys this request creates (copied in, not summed).
    pub(super) fresh: bool,
    pub(super) off: usize,
    pub(super) len: usize,
}

/// The lengths of a resolved list's keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum KeyLens {
    Uniform(u32),
    PerKey(Vec<u32>),
}

impl KeyLens {
    pub(super) fn of(l: Lens<'_>) -> Result<KeyLens, String> {
        Ok(match l {
            Lens::Uniform(w) => KeyLens::Uniform(
                u32::try_from(w).map_err(|_| format!("{w} values per key is too many"))?,
            ),
            Lens::PerKey(l) => KeyLens::PerKey(l.to_vec()),
        })
    }
}

/// A key list resolved against a [`KeyStore`](super::KeyStore): where its keys' values lie, in
/// key order. Valid for the store's whole life (values never move); a list resolved by
/// [`KeyStore::resolve_push`](super::KeyStore::resolve_push) marks the values it created until
/// [`Resolved::settled`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub(super) runs: Vec<Run>,
    pub(super) keys: usize,
    pub(super) values: usize,
    pub(super) lens: KeyLens,
}

impl Resolved {
    pub(super) fn new(lens: KeyLens) -> Resolved {
        Resolved {
            runs: Vec::new(),
            keys: 0,
            values: 0,
            lens,
        }
    }

    /// Appends `next`, the resolution of the keys that follow this list's.
    pub(super) fn append(&mut self, next: Resolved) {
        let expand = |l: KeyLens, keys: usize| match l {
            KeyLens::Uniform(w) => vec![w; keys],
            KeyLens::PerKey(v) => v,
        };
        self.lens = match (
            std::mem::replace(&mut self.lens, KeyLens::Uniform(0)),
            next.lens,
        ) {
            (a, b) if self.keys == 0 => {
                drop(a);
                b
            }
            (a, _) if next.keys == 0 => a,
            (KeyLens::Uniform(a), KeyLens::Uniform(b)) if a == b => KeyLens::Uniform(a),
            (a, b) => {
                let mut v = expand(a, self.keys);
                v.extend(expand(b, next.keys));
                KeyLens::PerKey(v)
            }
        };
        self.keys += next.keys;
        let values = self.values;
        for r in next.runs {
            self.add(r.chunk, r.fresh, r.off, r.len);
        }
        self.values = values + next.values;
    }

    /// Adds the next key's values (a key count is kept by the callers that need it).
    #[inline]
    pub(super) fn add(&mut self, chunk: u32, fresh: bool, off: usize, len: usize) {
        self.values += len;
        if let Some(last) = self.runs.last_mut() {
            if last.chunk == chunk && last.fresh == fresh && last.off + last.len == off {
                last.len += len;
                return;
            }
        }
        self.runs.push(Run {
            chunk,
            fresh,
            off,
            len,
        });
    }

    /// Values of all keys together.
    pub fn values(&self) -> usize {
        self.values
    }

    /// Runs of contiguous values (1 for a list first pushed in one request).
    pub fn runs(&self) -> usize {
        self.runs.len()
    }

    /// The lens frame of an answer: empty when every key has the same length, else one per key.
    pub fn lens_frame(&self) -> Vec<u32> {
        match &self.lens {
            KeyLens::Uniform(_) => Vec::new(),
            KeyLens::PerKey(l) => l.clone(),
        }
    }

    /// Whether a request with `lens` (over the same keys) has the lengths this list has.
    pub fn has_lens(&self, lens: Lens<'_>) -> bool {
        match (&self.lens, lens) {
            (KeyLens::Uniform(a), Lens::Uniform(b)) => *a as usize == b,
            (KeyLens::PerKey(a), Lens::PerKey(b)) => a[..] == *b,
            _ => false,
        }
    }

    /// The same list once its push is applied: nothing fresh, adjacent runs joined — what to
    /// keep for later requests over the same keys.
    pub fn settled(&self) -> Resolved {
        let mut out = Resolved::new(self.lens.clone());
        out.keys = self.keys;
        for r in &self.runs {
            out.add(r.chunk, false, r.off, r.len);
        }
        out
    }
}
