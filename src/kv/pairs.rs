//! Key-value pairs and their three payload frames: keys (`u64`), values (`V`), lengths (`u32`).

use super::keycache::Memo;
use super::store::Lens;
use super::value::Value;
use super::Key;
use bytes::Bytes;
use std::borrow::Cow;

/// Keys with their values, as ps-lite's `KVPairs`.
///
/// Shapes: `keys.len() = n`; `lens` is empty (every key has `vals.len() / n` values) or has `n`
/// entries summing to `vals.len()`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KVPairs<V> {
    /// Keys, sorted and unique.
    pub keys: Vec<Key>,
    /// Values of all keys, concatenated in key order.
    pub vals: Vec<V>,
    /// Values per key, or empty for "all equal".
    pub lens: Vec<u32>,
}

/// A received request's pairs, borrowed from the message's frames where alignment allows.
#[derive(Debug)]
pub struct KVRequest<'a, V: Clone> {
    /// Keys, sorted and unique (checked before a handler sees them).
    pub keys: Cow<'a, [Key]>,
    /// Pushed values (empty for a pull).
    pub vals: Cow<'a, [V]>,
    /// Values per key; empty means `vals.len() / keys.len()` each.
    pub lens: Cow<'a, [u32]>,
    /// When the key list is one the server keeps for this worker (key caching, see
    /// [`super::keycache`]): the handler's scratch for that list, kept between requests.
    pub memo: Option<&'a mut Memo>,
}

impl<V: Value> KVRequest<'_, V> {
    /// The value lengths as the store reads them: uniform, or one per key.
    pub fn lens(&self) -> Lens<'_> {
        if self.lens.is_empty() {
            Lens::Uniform(self.vals.len().checked_div(self.keys.len()).unwrap_or(0))
        } else {
            Lens::PerKey(&self.lens)
        }
    }

    /// The length of each key's value: `lens`, or the even split of `vals` over the keys.
    pub fn key_lens(&self) -> Vec<usize> {
        if self.lens.is_empty() {
            let k = if self.keys.is_empty() {
                0
            } else {
                self.vals.len() / self.keys.len()
            };
            vec![k; self.keys.len()]
        } else {
            self.lens.iter().map(|&l| l as usize).collect()
        }
    }
}

/// Views a byte frame as `T`s without copying when it is aligned, copying when it is not.
///
/// # Errors
/// A text naming `what` when the length is not a multiple of `size_of::<T>()`.
pub fn view<'a, T: bytemuck::Pod>(bytes: &'a [u8], what: &str) -> Result<Cow<'a, [T]>, String> {
    let size = std::mem::size_of::<T>();
    if !bytes.len().is_multiple_of(size) {
        return Err(format!(
            "malformed {what} frame: {} bytes is not a multiple of {size}",
            bytes.len()
        ));
    }
    Ok(match bytemuck::try_cast_slice::<u8, T>(bytes) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => Cow::Owned(bytemuck::pod_collect_to_vec(bytes)),
    })
}

/// Checks the shape of keys/vals/lens and that keys are sorted and unique.
///
/// # Errors
/// A text naming the first problem.
pub fn check_shape(keys: &[Key], nvals: usize, lens: &[u32]) -> Result<(), String> {
    check_sorted(keys)?;
    check_lens(keys.len(), nvals, lens)
}

/// Checks that keys are sorted and unique.
///
/// # Errors
/// A text naming the first key out of order.
pub fn check_sorted(keys: &[Key]) -> Result<(), String> {
    if let Some(i) = keys.windows(2).position(|w| w[0] >= w[1]) {
        return Err(format!(
            "keys must be sorted and unique: keys[{}] = {} follows keys[{i}] = {}",
            i + 1,
            keys[i + 1],
            keys[i]
        ));
    }
    Ok(())
}

/// Checks that `nvals` values split over `nkeys` keys as `lens` says (or evenly, without lens).
///
/// # Errors
/// A text naming the mismatch.
pub fn check_lens(nkeys: usize, nvals: usize, lens: &[u32]) -> Result<(), String> {
    if !lens.is_empty() {
        if lens.len() != nkeys {
            return Err(format!(
                "{} lens for {nkeys} keys: expected one length per key",
                lens.len(),
            ));
        }
        let total: u64 = lens.iter().map(|&l| l as u64).sum();
        if total != nvals as u64 {
            return Err(format!(
                "lens add up to {total} values but {nvals} values were given"
            ));
        }
    } else if nvals > 0 && (nkeys == 0 || !nvals.is_multiple_of(nkeys)) {
        return Err(format!(
            "{nvals} values do not split evenly over {nkeys} keys: give lens, or a multiple of the key count",
        ));
    }
    Ok(())
}

/// Decodes the three frames of a request or answer.
///
/// # Errors
/// A text naming the malformed frame or shape.
pub fn decode<V: Value>(frames: &[Bytes]) -> Result<KVRequest<'_, V>, String> {
    decode_checked(frames, false)
}

/// As [`decode`]; with `keys_checked` the keys are known sorted and unique (a key list the
/// server keeps, checked when it was registered) and are not checked again.
///
/// # Errors
/// As [`decode`].
pub fn decode_checked<V: Value>(
    frames: &[Bytes],
    keys_checked: bool,
) -> Result<KVRequest<'_, V>, String> {
    let frame = |i: usize| -> &[u8] { frames.get(i).map_or(&[], |b| &b[..]) };
    if frames.len() > 3 {
        return Err(format!(
            "malformed key-value message: {} data frames, expected at most 3",
            frames.len()
        ));
    }
    let keys = view::<Key>(frame(0), "keys")?;
    let vals = view::<V>(frame(1), "values")?;
    let lens = view::<u32>(frame(2), "lens")?;
    if !keys_checked {
        check_sorted(&keys)?;
    }
    check_lens(keys.len(), vals.len(), &lens)?;
    Ok(KVRequest {
        keys,
        vals,
        lens,
        memo: None,
    })
}

/// A typed vector seen as bytes, so it can back a frame without a copy.
struct PodVec<T>(Vec<T>);

impl<T: bytemuck::Pod> AsRef<[u8]> for PodVec<T> {
    fn as_ref(&self) -> &[u8] {
        bytemuck::cast_slice(&self.0)
    }
}

/// A frame owning `v` (no copy).
pub fn frame_of<T: bytemuck::Pod + Send + Sync>(v: Vec<T>) -> Bytes {
    if v.is_empty() {
        return Bytes::new();
    }
    Bytes::from_owner(PodVec(v))
}

/// The frames of borrowed `keys`, `vals`, `lens` (one copy each into a fresh buffer).
pub fn encode<V: Value>(keys: &[Key], vals: &[V], lens: &[u32]) -> Vec<Bytes> {
    frames(
        keys,
        Bytes::copy_from_slice(bytemuck::cast_slice::<V, u8>(vals)),
        lens,
    )
}

/// The frames of borrowed `keys` and `lens` (copied) around a values frame given as is.
pub fn frames(keys: &[Key], vals: Bytes, lens: &[u32]) -> Vec<Bytes> {
    vec![
        Bytes::copy_from_slice(bytemuck::cast_slice::<Key, u8>(keys)),
        vals,
        Bytes::copy_from_slice(bytemuck::cast_slice::<u32, u8>(lens)),
    ]
}

/// The frames of owned pairs (no copy).
pub fn encode_owned<V: Value>(p: KVPairs<V>) -> Vec<Bytes> {
    vec![frame_of(p.keys), frame_of(p.vals), frame_of(p.lens)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let frames = encode::<f32>(&[1, 5, 9], &[1.0, 2.0, 3.0, 4.0], &[1, 2, 1]);
        let r = decode::<f32>(&frames).expect("valid");
        assert_eq!(&*r.keys, &[1, 5, 9]);
        assert_eq!(&*r.vals, &[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(r.key_lens(), vec![1, 2, 1]);
    }

    #[test]
    fn misaligned_frames_are_copied() {
        let mut raw = vec![0u8; 9];
        raw[1..9].copy_from_slice(&7u64.to_ne_bytes());
        let b = Bytes::from(raw).slice(1..);
        let v = view::<u64>(&b, "keys").expect("valid length");
        assert_eq!(&*v, &[7]);
    }

    #[test]
    fn bad_shapes_are_named() {
        let f = encode::<f32>(&[3, 2], &[1.0, 2.0], &[]);
        assert_eq!(
            decode::<f32>(&f).unwrap_err(),
            "keys must be sorted and unique: keys[1] = 2 follows keys[0] = 3"
        );
        let f = encode::<f32>(&[1, 2], &[1.0, 2.0, 3.0], &[]);
        assert!(decode::<f32>(&f)
            .unwrap_err()
            .contains("do not split evenly"));
        let f = encode::<f32>(&[1, 2], &[1.0, 2.0, 3.0], &[1, 1]);
        assert_eq!(
            decode::<f32>(&f).unwrap_err(),
            "lens add up to 2 values but 3 values were given"
        );
        let mut f = encode::<f32>(&[1], &[1.0], &[]);
        f[1] = Bytes::from(vec![0u8; 5]);
        assert_eq!(
            decode::<f32>(&f).unwrap_err(),
            "malformed values frame: 5 bytes is not a multiple of 4"
        );
    }
}
