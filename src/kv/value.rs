//! Element types of values: anything plain (`bytemuck::Pod`) with a wire [`DType`] and a sum.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_wrap_floats_add() {
        assert_eq!(250u8.sum(10), 4);
        assert_eq!(i32::MAX.sum(1), i32::MIN);
        assert_eq!(1.5f32.sum(2.25), 3.75);
        assert_eq!(<f64 as Value>::DTYPE.size(), 8);
    }
}
