//! Element types of values: anything plain (`bytemuck::Pod`) with a wire [`DType`] and a sum.
//!
//! The seven value types have one home here: their [`Value`] impls, their names parsed
//! ([`DType`]'s `FromStr`, the inverse of [`DType::name`]), and the dispatch from a
//! [`DType`] known at run time to code generic over the type
//! ([`with_value_type!`](crate::with_value_type)).

use crate::error::Error;
use crate::wire::DType;

/// An element type a `KVWorker<V>`/`KVServer<V>` can carry.
///
/// `sum` is what the default server handler uses to merge pushes: IEEE addition for floats,
/// wrapping addition for integers (so a `u8` counter wraps instead of aborting the server).
pub trait Value:
    bytemuck::Pod + Send + Sync + Default + PartialEq + std::fmt::Debug + 'static
{
    /// The wire type tag.
    const DTYPE: DType;
    /// `self + other` (wrapping for integers).
    fn sum(self, other: Self) -> Self;
    /// A value from a small whole number (for tests and apps).
    fn from_u32(v: u32) -> Self;
}

macro_rules! float_value {
    ($t:ty, $d:expr) => {
        impl Value for $t {
            const DTYPE: DType = $d;
            fn sum(self, other: Self) -> Self {
                self + other
            }
            fn from_u32(v: u32) -> Self {
                v as $t
            }
        }
    };
}

macro_rules! int_value {
    ($t:ty, $d:expr) => {
        impl Value for $t {
            const DTYPE: DType = $d;
            fn sum(self, other: Self) -> Self {
                self.wrapping_add(other)
            }
            fn from_u32(v: u32) -> Self {
                v as $t
            }
        }
    };
}

float_value!(f32, DType::F32);
float_value!(f64, DType::F64);
int_value!(i32, DType::I32);
int_value!(i64, DType::I64);
int_value!(u8, DType::U8);
int_value!(u32, DType::U32);
int_value!(u64, DType::U64);

/// Runs `$body` with the type alias `$V` naming the element type of `$dtype` (a [`DType`]
/// known at run time), or `$none` for [`DType::None`]: the one match from a wire type tag to
/// the seven [`Value`] types.
///
/// ```
/// use pslite::{with_value_type, DType};
/// fn size_of_one(d: DType) -> Option<usize> {
///     with_value_type!(d, V => Some(std::mem::size_of::<V>()), None => None)
/// }
/// assert_eq!(size_of_one(DType::U32), Some(4));
/// assert_eq!(size_of_one(DType::None), None);
/// ```
#[macro_export]
macro_rules! with_value_type {
    ($dtype:expr, $V:ident => $body:expr, None => $none:expr) => {
        match $dtype {
            $crate::DType::F32 => $crate::with_value_type!(@ f32, $V, $body),
            $crate::DType::F64 => $crate::with_value_type!(@ f64, $V, $body),
            $crate::DType::I32 => $crate::with_value_type!(@ i32, $V, $body),
            $crate::DType::I64 => $crate::with_value_type!(@ i64, $V, $body),
            $crate::DType::U8 => $crate::with_value_type!(@ u8, $V, $body),
            $crate::DType::U32 => $crate::with_value_type!(@ u32, $V, $body),
            $crate::DType::U64 => $crate::with_value_type!(@ u64, $V, $body),
            $crate::DType::None => $none,
        }
    };
    (@ $ty:ty, $V:ident, $body:expr) => {{
        #[allow(dead_code)]
        type $V = $ty;
        $body
    }};
}

impl std::str::FromStr for DType {
    type Err = Error;

    /// A value type by its [`name`](DType::name) (`f32`, `u8`, …; not `none`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the text and the accepted names.
    fn from_str(s: &str) -> Result<DType, Error> {
        DType::VALUES
            .into_iter()
            .find(|d| d.name() == s)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "unknown value type {s:?}: expected one of {}",
                    DType::VALUES.map(DType::name).join(", ")
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_type_parses_from_its_name_and_dispatches_to_its_type() {
        for d in DType::VALUES {
            assert_eq!(d.name().parse::<DType>().expect("a name"), d);
            let (tag, size) = with_value_type!(d, V => (V::DTYPE, std::mem::size_of::<V>()), None => unreachable!());
            assert_eq!((tag, size), (d, d.size()), "{d}");
        }
        assert!(with_value_type!(DType::None, V => false, None => true));
        for bad in ["none", "F32", "float32", "", " f32"] {
            let e = bad.parse::<DType>().expect_err(bad).to_string();
            assert!(
                e.contains(&format!("{bad:?}")) && e.ends_with("f32, f64, i32, i64, u8, u32, u64"),
                "{e}"
            );
        }
    }

    #[test]
    fn integers_wrap_floats_add() {
        assert_eq!(250u8.sum(10), 4);
        assert_eq!(i32::MAX.sum(1), i32::MIN);
        assert_eq!(1.5f32.sum(2.25), 3.75);
        assert_eq!(<f64 as Value>::DTYPE.size(), 8);
    }
}
