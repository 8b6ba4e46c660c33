//! Python buffers (NumPy arrays, `memoryview`s, anything with the buffer protocol) read and
//! written as Rust slices without a copy, and the value types (`dtype`s) a worker can carry.
//!
//! Inputs must be C-contiguous, in this machine's byte order and of the worker's dtype exactly:
//! a mismatch raises `pslite.InvalidArgumentError` naming the argument, what it is and what was
//! expected, rather than converting silently. A Python list, tuple or range (no buffer) of
//! numbers is converted to an array of the expected dtype first. Keys are `uint64`; a
//! non-negative `int64` array (what `numpy.arange` gives) is taken too, without a copy.
//!
//! A tensor without the buffer protocol (a PyTorch tensor) is read through DLPack (Python
//! array API standard, `__dlpack__`/`__dlpack_device__`): `numpy.from_dlpack` gives a NumPy
//! view of the same memory, checked as an array is. Only host memory is taken; a tensor on a
//! GPU is refused naming its device. A tensor that requires grad is taken through
//! `tensor.detach()` (the same memory).

mod keys;
mod lent;

pub use keys::{Keys, Lens};
pub use lent::{lend, release_retired};

use crate::errors::invalid;
use pyo3::buffer::{ElementType, PyBuffer, PyUntypedBuffer};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyRange, PyTuple};

/// A value type the bindings carry: each is a [`pslite::Value`] and a buffer element.
pub trait PyValue: pslite::Value + pyo3::buffer::Element + numpy::Element {}
impl<T: pslite::Value + pyo3::buffer::Element + numpy::Element> PyValue for T {}

/// The value types of `KVWorker(dtype=…)` and `run_server(dtype=…)`: the crate's, by NumPy
/// name.
pub use pslite::DType;

/// NumPy's side of the crate's value types ([`DType::VALUES`]).
pub trait PyDType: Sized {
    /// The NumPy name (`float32`, …).
    fn numpy(self) -> &'static str;

    /// The dtype of a NumPy dtype-like object (`numpy.float32`, `"float32"`,
    /// `numpy.dtype("f4")`); `None` is `float32`.
    ///
    /// # Errors
    /// `InvalidArgumentError` naming the dtype and the supported ones.
    fn from_py(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Self>;

    /// The `numpy.dtype` object.
    fn to_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>>;
}

impl PyDType for DType {
    fn numpy(self) -> &'static str {
        match self {
            DType::None => "none",
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::U8 => "uint8",
            DType::U32 => "uint32",
            DType::U64 => "uint64",
        }
    }

    fn from_py(obj: Option<&Bound<'_, PyAny>>) -> PyResult<DType> {
        let Some(obj) = obj else {
            return Ok(DType::F32);
        };
        let py = obj.py();
        let name: String = py
            .import("numpy")?
            .getattr("dtype")?
            .call1((obj,))
            .and_then(|d| d.getattr("name"))
            .and_then(|n| n.extract())
            .map_err(|_| invalid(format!("dtype={obj}: not a NumPy dtype")))?;
        DType::VALUES
            .into_iter()
            .find(|d| d.numpy() == name)
            .ok_or_else(|| {
                invalid(format!(
                    "dtype={name} is not supported: expected one of {}",
                    DType::VALUES.map(DType::numpy).join(", ")
                ))
            })
    }

    fn to_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        py.import("numpy")?.getattr("dtype")?.call1((self.numpy(),))
    }
}

/// The NumPy name of a buffer's element type, e.g. `float64`.
fn element_name(buf: &PyUntypedBuffer) -> String {
    let kind = match ElementType::from_format(buf.format()) {
        ElementType::Float { .. } => "float",
        ElementType::SignedInteger { .. } => "int",
        ElementType::UnsignedInteger { .. } => "uint",
        ElementType::Bool => return "bool".into(),
        ElementType::Unknown => {
            return format!("format {:?}", buf.format().to_string_lossy());
        }
    };
    format!("{kind}{}", buf.item_size() * 8)
}

/// The buffer of `obj`. A list, tuple or range (no buffer protocol) is first made an array
/// of `dtype` — of numbers of its kind only (whole numbers for an integer dtype), each in
/// range: NumPy (≥ 2) refuses the others, and so no `None` becomes a NaN and no `-1` a large
/// key.
fn untyped(obj: &Bound<'_, PyAny>, what: &str, dtype: DType) -> PyResult<PyUntypedBuffer> {
    if let Some(b) = buffer(obj, what) {
        return b;
    }
    let py = obj.py();
    let listed = obj.is_instance_of::<PyList>()
        || obj.is_instance_of::<PyTuple>()
        || obj.is_instance_of::<PyRange>();
    if !listed {
        return Err(invalid(format!(
            "{what}: expected an array of {} (a NumPy array, a CPU tensor, anything with \
             the buffer protocol, or a list of numbers), got {}",
            dtype.numpy(),
            type_name(obj)
        )));
    }
    let np = py.import("numpy")?;
    check_numbers(obj, &np, what, dtype)?;
    let converted = np
        .getattr("asarray")?
        .call1((obj, dtype.numpy()))
        .map_err(|e| invalid(format!("{what}: {e}")))?;
    PyUntypedBuffer::get(&converted)
}

/// The name of `obj`'s type (`list`, `Tensor`, …).
fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default()
}

/// Checks that the list, tuple or range `obj` (named `what`) holds numbers of `dtype`'s kind
/// only: numbers for a float dtype, as NumPy (module `np`) reads the list; whole numbers for
/// an integer dtype.
fn check_numbers(
    obj: &Bound<'_, PyAny>,
    np: &Bound<'_, PyModule>,
    what: &str,
    dtype: DType,
) -> PyResult<()> {
    let refuse = |listed_as: &str, expected: &str| {
        invalid(format!(
            "{what}: a {} of {listed_as} cannot carry {}: expected {expected} numbers",
            type_name(obj),
            dtype.numpy(),
        ))
    };
    match dtype {
        DType::F32 | DType::F64 => {
            // NumPy's own reading of the list: numbers, or objects (None) and strings.
            let plain = np
                .getattr("asarray")?
                .call1((obj,))
                .map_err(|e| invalid(format!("{what}: {e}")))?;
            let dt = plain.getattr("dtype")?;
            let kind: String = dt.getattr("kind")?.extract()?;
            let size: usize = plain.getattr("size")?.extract()?;
            if size > 0 && !"biuf".contains(kind.as_str()) {
                return Err(refuse(&dt.str()?.to_string(), "plain"));
            }
        }
        _ => {
            // Whole numbers only (Python ints, NumPy integers): NumPy would truncate 1.5.
            for item in obj.try_iter()? {
                let item = item?;
                // SAFETY: PyIndex_Check only reads the object's type.
                if unsafe { pyo3::ffi::PyIndex_Check(item.as_ptr()) } == 0 {
                    let t = item.get_type().name().map(|n| n.to_string());
                    return Err(refuse(&t.unwrap_or_default(), "whole"));
                }
            }
        }
    }
    Ok(())
}

/// The buffer of `obj`, `None` when it has none. A buffer PyO3 does not take as it is (a
/// ctypes array gives no strides) is taken through NumPy's view of the same memory, and so is
/// a DLPack tensor ([`dlpack`]).
fn buffer(obj: &Bound<'_, PyAny>, what: &str) -> Option<PyResult<PyUntypedBuffer>> {
    if let Ok(b) = PyUntypedBuffer::get(obj) {
        return Some(Ok(b));
    }
    // SAFETY: PyObject_CheckBuffer only reads the object's type.
    if unsafe { pyo3::ffi::PyObject_CheckBuffer(obj.as_ptr()) } == 0 {
        // No buffer: a tensor (is_tensor) if it speaks DLPack.
        let tensor = obj.hasattr("__dlpack__").unwrap_or(false);
        return tensor.then(|| dlpack(obj, what));
    }
    let view = || -> PyResult<PyUntypedBuffer> {
        let same = obj
            .py()
            .import("numpy")?
            .getattr("asarray")?
            .call1((obj,))?;
        PyUntypedBuffer::get(&same)
    };
    Some(view())
}

/// Whether `obj` is a tensor read through DLPack: no buffer protocol, a `__dlpack__` method.
fn is_tensor(obj: &Bound<'_, PyAny>) -> bool {
    // SAFETY: PyObject_CheckBuffer only reads the object's type.
    let no_buffer = unsafe { pyo3::ffi::PyObject_CheckBuffer(obj.as_ptr()) } == 0;
    no_buffer && obj.hasattr("__dlpack__").unwrap_or(false)
}

/// DLPack's `kDLCPU` and `kDLCUDAHost` (pinned host memory): the device types pslite reads.
const DLPACK_HOST: [i64; 2] = [1, 3];

/// The NumPy view of the DLPack tensor `obj` (named `what` in errors): the same memory, kept
/// alive by the view.
///
/// # Errors
/// `InvalidArgumentError` for a tensor outside host memory (naming its device), or with the
/// exporter's own text when it refuses to export.
fn dlpack(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<PyUntypedBuffer> {
    let (device, id): (i64, i64) = obj
        .call_method0("__dlpack_device__")
        .and_then(|d| d.extract())
        .map_err(|e| invalid(format!("{what}: a DLPack tensor without a device: {e}")))?;
    if !DLPACK_HOST.contains(&device) {
        let name = match device {
            2 => "cuda".to_string(),
            10 => "rocm".to_string(),
            13 => "cuda managed memory".to_string(),
            other => format!("DLPack device type {other}"),
        };
        return Err(invalid(format!(
            "{what}: a tensor on {name}:{id}: pslite reads host memory only: pass {what}.cpu()"
        )));
    }
    let grad: bool = obj
        .getattr("requires_grad")
        .and_then(|g| g.extract())
        .unwrap_or(false);
    let plain = if grad {
        obj.call_method0("detach")?
    } else {
        obj.clone()
    };
    let view = obj
        .py()
        .import("numpy")?
        .getattr("from_dlpack")?
        .call1((plain,))
        .map_err(|e| invalid(format!("{what}: {e}")))?;
    PyUntypedBuffer::get(&view)
}

/// How to make `what` of `dtype`: NumPy's `astype`, or a tensor's `to`.
fn convert_hint(obj: &Bound<'_, PyAny>, what: &str, dtype: DType) -> String {
    if is_tensor(obj) && dtype == DType::U64 {
        // Keys: int64 (≥ 0) is what torch indexes with, and it is taken as uint64.
        format!("{what}.long()")
    } else if is_tensor(obj) {
        format!("{what}.to(torch.{})", dtype.numpy())
    } else {
        format!("{what}.astype(numpy.{})", dtype.numpy())
    }
}

/// Where a buffer's format puts its bytes: in this machine's order (no prefix, `@`, `=`), in
/// this machine's order spelled out (`<` here: ctypes writes it, PyO3 refuses it), or in the
/// other order (`>`, `!`: network order).
#[derive(PartialEq)]
enum Order {
    Native,
    Spelled,
    Foreign,
}

fn order(buf: &PyUntypedBuffer) -> Order {
    let native = if cfg!(target_endian = "little") {
        b'<'
    } else {
        b'>'
    };
    match buf.format().to_bytes() {
        [c, _, ..] if *c == native => Order::Spelled,
        [b'<' | b'>' | b'!', _, ..] => Order::Foreign,
        _ => Order::Native,
    }
}

/// Checks that `buf` (of `obj`) is C-contiguous (and writable when `write`).
fn check_layout(
    obj: &Bound<'_, PyAny>,
    buf: &PyUntypedBuffer,
    what: &str,
    write: bool,
) -> PyResult<()> {
    if !buf.is_c_contiguous() {
        let (kind, fix) = if is_tensor(obj) {
            ("tensor", format!("{what}.contiguous()"))
        } else {
            ("array", format!("numpy.ascontiguousarray({what})"))
        };
        return Err(invalid(format!(
            "{what}: the {kind} is not C-contiguous (a strided view such as a[::2], or a \
             transposed matrix): pass {fix}"
        )));
    }
    if write && buf.readonly() {
        return Err(invalid(format!(
            "{what}: the array is read-only: pass a writable array"
        )));
    }
    Ok(())
}

/// `obj` as a C-contiguous buffer of `T` (`dtype`'s element) to read.
///
/// # Errors
/// `InvalidArgumentError` naming `what`: another element type or byte order, not
/// C-contiguous, no buffer (nor a list of numbers).
pub fn input<T: PyValue>(
    obj: &Bound<'_, PyAny>,
    what: &str,
    dtype: DType,
) -> PyResult<PyBuffer<T>> {
    typed(obj, untyped(obj, what, dtype)?, what, dtype, false)
}

/// `obj` as a writable C-contiguous buffer of `T` (no conversion: the caller's own memory).
///
/// # Errors
/// As [`input`], and for a read-only buffer.
pub fn output<T: PyValue>(
    obj: &Bound<'_, PyAny>,
    what: &str,
    dtype: DType,
) -> PyResult<PyBuffer<T>> {
    let buf = match buffer(obj, what) {
        Some(Err(e)) if is_tensor(obj) => return Err(e),
        b => b.and_then(Result::ok),
    };
    let buf = buf.ok_or_else(|| {
        invalid(format!(
            "{what}: expected a writable array of {} (e.g. numpy.empty(n, numpy.{})), got {}",
            dtype.numpy(),
            dtype.numpy(),
            obj.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
    })?;
    typed(obj, buf, what, dtype, true)
}

/// `buf` (of `obj`) as `T`s after every check.
fn typed<T: PyValue>(
    obj: &Bound<'_, PyAny>,
    buf: PyUntypedBuffer,
    what: &str,
    dtype: DType,
    write: bool,
) -> PyResult<PyBuffer<T>> {
    let got = element_name(&buf);
    if got != dtype.numpy() {
        let kind = if is_tensor(obj) {
            "a tensor"
        } else {
            "an array"
        };
        return Err(invalid(format!(
            "{what}: {kind} of {got}, but this call carries {}: convert it first, e.g. {}",
            dtype.numpy(),
            convert_hint(obj, what, dtype)
        )));
    }
    let buf = match order(&buf) {
        Order::Native => buf,
        Order::Foreign => {
            return Err(invalid(format!(
                "{what}: an array of {got} in the other byte order (buffer format {:?}): \
                 convert it first, e.g. {what}.astype({what}.dtype.newbyteorder(\"=\"))",
                buf.format().to_string_lossy()
            )))
        }
        Order::Spelled => {
            // A NumPy view of the same memory as the plain dtype has the format PyO3 reads.
            let np = obj.py().import("numpy")?;
            let same = np.getattr("asarray")?.call1((obj,))?;
            let again = PyUntypedBuffer::get(&same.call_method1("view", (dtype.numpy(),))?)?;
            if order(&again) != Order::Native {
                return Err(invalid(format!(
                    "{what}: buffer format {:?} is not one pslite reads: pass a NumPy array",
                    buf.format().to_string_lossy()
                )));
            }
            again
        }
    };
    check_layout(obj, &buf, what, write)?;
    buf.into_typed::<T>()
        .map_err(|e| invalid(format!("{what}: {e}")))
}

/// The bytes `[start, end)` a slice spans.
pub fn span<A>(a: &[A]) -> (usize, usize) {
    let start = a.as_ptr() as usize;
    (start, start + std::mem::size_of_val(a))
}

/// Checks that the output buffer `out` shares no memory with the inputs `ins` (keys, values,
/// lens): writing it while they are read would be undefined behaviour, and the pulled values
/// would overwrite what is being sent.
///
/// # Errors
/// `InvalidArgumentError` naming the input that shares memory with `out`.
pub fn disjoint<T: PyValue>(out: &PyBuffer<T>, ins: &[(&str, (usize, usize))]) -> PyResult<()> {
    let start = out.buf_ptr() as usize;
    let end = start + out.item_count() * std::mem::size_of::<T>();
    for (what, (a, b)) in ins {
        if a < b && *a < end && start < *b {
            return Err(invalid(format!(
                "{what} and out share memory: pull into a separate array"
            )));
        }
    }
    Ok(())
}

/// The elements of a C-contiguous buffer.
pub fn slice<T: PyValue>(buf: &PyBuffer<T>) -> &[T] {
    if buf.item_count() == 0 {
        return &[];
    }
    match buf.as_slice_ptr() {
        // SAFETY: the buffer is C-contiguous, aligned and of `T` (checked when it was taken)
        // and stays exported while `buf` lives. Python code could write to it meanwhile, as it
        // can to any array NumPy hands to C; values are plain numbers, so a torn read is the
        // worst outcome, as in NumPy itself.
        Some(p) => unsafe { p.as_ref() },
        None => &[],
    }
}

/// The elements of a writable C-contiguous buffer, to fill.
#[allow(clippy::mut_from_ref)]
pub fn slice_mut<T: PyValue>(buf: &PyBuffer<T>) -> &mut [T] {
    let n = buf.item_count();
    if n == 0 {
        return &mut [];
    }
    // SAFETY: as `slice`; the buffer is writable (checked), and the caller writes it only
    // while this borrow lives.
    unsafe { std::slice::from_raw_parts_mut(buf.buf_ptr().cast::<T>(), n) }
}
