//! Element types, numbered as ONNX's `TensorProto.DataType` so the C ABI can report them
//! without a translation table.

use std::fmt;

use super::dim::{Dim, SymbolTable};

use super::low_precision::{packed_len, Format};

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum DType {
    F32 = 1,
    U8 = 2,
    I8 = 3,
    U16 = 4,
    I16 = 5,
    I32 = 6,
    I64 = 7,
    Bool = 9,
    F16 = 10,
    F64 = 11,
    U32 = 12,
    U64 = 13,
    BF16 = 16,
    // The low-precision formats (`super::low_precision`): each element is a code of 8,
    // 4 or 2 bits; 4- and 2-bit tensors are packed (ONNX's layout) wherever they are
    // stored, so only the few ops that convert them ever touch one.
    F8E4M3FN = 17,
    F8E4M3FNUZ = 18,
    F8E5M2 = 19,
    F8E5M2FNUZ = 20,
    U4 = 21,
    I4 = 22,
    F4E2M1 = 23,
    F8E8M0 = 24,
    U2 = 25,
    I2 = 26,
}

impl DType {
    pub const ALL: [DType; 23] = [
        DType::F32,
        DType::U8,
        DType::I8,
        DType::U16,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::Bool,
        DType::F16,
        DType::F64,
        DType::U32,
        DType::U64,
        DType::BF16,
        DType::F8E4M3FN,
        DType::F8E4M3FNUZ,
        DType::F8E5M2,
        DType::F8E5M2FNUZ,
        DType::U4,
        DType::I4,
        DType::F4E2M1,
        DType::F8E8M0,
        DType::U2,
        DType::I2,
    ];

    pub fn from_onnx(code: i32) -> Option<DType> {
        DType::ALL.into_iter().find(|d| *d as i32 == code)
    }

    pub fn onnx_code(self) -> i32 {
        self as i32
    }

    /// Bytes per element in memory (bool is one byte, as in ONNX Runtime and numpy).
    pub fn size(self) -> usize {
        match self {
            DType::U8 | DType::I8 | DType::Bool => 1,
            // Packed 4- and 2-bit types: see `TensorType::byte_size`.
            d if d.low_precision().is_some() => 1,
            DType::U16 | DType::I16 | DType::F16 | DType::BF16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 => 8,
            _ => unreachable!("every low-precision type is handled above"),
        }
    }

    /// Bits per element (the packed width of the 4- and 2-bit types).
    pub fn bits(self) -> u32 {
        match self.low_precision() {
            Some(f) => f.bits(),
            None => 8 * self.size() as u32,
        }
    }

    /// The low-precision format of a float8 / 4-bit / 2-bit type.
    pub fn low_precision(self) -> Option<Format> {
        Some(match self {
            DType::F8E4M3FN => Format::F8E4M3FN,
            DType::F8E4M3FNUZ => Format::F8E4M3FNUZ,
            DType::F8E5M2 => Format::F8E5M2,
            DType::F8E5M2FNUZ => Format::F8E5M2FNUZ,
            DType::U4 => Format::U4,
            DType::I4 => Format::I4,
            DType::F4E2M1 => Format::F4E2M1,
            DType::F8E8M0 => Format::F8E8M0,
            DType::U2 => Format::U2,
            DType::I2 => Format::I2,
            _ => return None,
        })
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
            || self.low_precision().is_some_and(Format::is_float)
    }

    pub fn is_int(self) -> bool {
        !self.is_float() && self != DType::Bool
    }

    pub fn is_signed_int(self) -> bool {
        matches!(
            self,
            DType::I8 | DType::I16 | DType::I32 | DType::I64 | DType::I4 | DType::I2
        )
    }

    /// The values of a QuantizeLinear target (8- and 16-bit integers), saturation bounds.
    pub fn quantized_range(self) -> Option<(i64, i64)> {
        Some(match self {
            DType::U8 => (0, 255),
            DType::I8 => (-128, 127),
            DType::U16 => (0, 65535),
            DType::I16 => (-32768, 32767),
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::U8 => "uint8",
            DType::I8 => "int8",
            DType::U16 => "uint16",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::Bool => "bool",
            DType::F16 => "float16",
            DType::F64 => "float64",
            DType::U32 => "uint32",
            DType::U64 => "uint64",
            DType::BF16 => "bfloat16",
            DType::F8E4M3FN => "float8e4m3fn",
            DType::F8E4M3FNUZ => "float8e4m3fnuz",
            DType::F8E5M2 => "float8e5m2",
            DType::F8E5M2FNUZ => "float8e5m2fnuz",
            DType::U4 => "uint4",
            DType::I4 => "int4",
            DType::F4E2M1 => "float4e2m1",
            DType::F8E8M0 => "float8e8m0",
            DType::U2 => "uint2",
            DType::I2 => "int2",
        }
    }

    /// The C type used in generated headers.
    pub fn c_type(self) -> &'static str {
        match self {
            DType::F32 => "float",
            DType::F64 => "double",
            DType::U8 | DType::Bool => "uint8_t",
            DType::I8 => "int8_t",
            DType::U16 | DType::F16 | DType::BF16 => "uint16_t",
            DType::I16 => "int16_t",
            DType::I32 => "int32_t",
            DType::U32 => "uint32_t",
            DType::I64 => "int64_t",
            DType::U64 => "uint64_t",
            // The low-precision types: codes, packed for the 4- and 2-bit ones.
            _ => "uint8_t",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A tensor type. `shape` holds each axis's extent, or for an axis whose extent is an
/// expression over the model's symbols (see [`super::dim`]) its largest value over the
/// declared ranges: what buffers are planned for, as XLA's bounded dynamic shapes do.
/// `dims` is set only then, one expression per axis (constants for the fixed ones).
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct TensorType {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub dims: Option<Vec<Dim>>,
}

impl TensorType {
    pub fn new(dtype: DType, shape: Vec<usize>) -> Self {
        TensorType {
            dtype,
            shape,
            dims: None,
        }
    }

    /// A type whose axes are `dims`: static where every one is a constant, otherwise
    /// symbolic with `shape` the largest values `symbols` bounds them by. `Err` names an
    /// axis that may be negative or has no bound.
    pub fn from_dims(
        dtype: DType,
        dims: Vec<Dim>,
        symbols: &SymbolTable,
    ) -> Result<TensorType, String> {
        let mut shape = Vec::with_capacity(dims.len());
        for (axis, d) in dims.iter().enumerate() {
            let written = || d.written(&|s| symbols.name(s).to_string());
            let (lo, hi) = match d.as_const() {
                Some(c) => (c, c),
                None => symbols
                    .min_value(d)
                    .zip(symbols.max_value(d))
                    .ok_or_else(|| format!("axis {axis} ({}) has no bound", written()))?,
            };
            if lo < 0 {
                return Err(format!(
                    "axis {axis} ({}) can be negative ({lo}) within the declared ranges",
                    written()
                ));
            }
            shape.push(usize::try_from(hi).map_err(|_| format!("axis {axis} is too large"))?);
        }
        let symbolic = dims.iter().any(|d| !d.is_const());
        Ok(TensorType {
            dtype,
            shape,
            dims: symbolic.then_some(dims),
        })
    }

    /// Whether an axis's extent is set at run time.
    pub fn is_symbolic(&self) -> bool {
        self.dims.is_some()
    }

    /// Axis `axis` as an expression (a constant for a static axis).
    pub fn dim(&self, axis: usize) -> Dim {
        match &self.dims {
            Some(d) => d[axis].clone(),
            None => Dim::constant(self.shape[axis] as i64),
        }
    }

    /// Every axis as an expression.
    pub fn dims(&self) -> Vec<Dim> {
        (0..self.rank()).map(|a| self.dim(a)).collect()
    }

    /// The first symbolic axis, with its expression.
    pub fn first_symbolic_axis(&self) -> Option<(usize, &Dim)> {
        self.dims
            .as_ref()?
            .iter()
            .enumerate()
            .find(|(_, d)| !d.is_const())
    }

    /// The element count; saturates at `usize::MAX` where it would overflow. Import
    /// refuses every tensor past `Limits::max_tensor_bytes` (see
    /// [`crate::limits::Limits::check_tensor`]), so on an imported graph it is exact;
    /// the debug assertion catches a type that skipped that check.
    pub fn numel(&self) -> usize {
        let n = self.checked_numel();
        debug_assert!(n.is_some(), "{self} was not checked against the size limit");
        n.unwrap_or(usize::MAX)
    }

    /// Bytes of the dense (packed, for the low-precision types) buffer; saturates like
    /// [`TensorType::numel`].
    pub fn byte_size(&self) -> usize {
        let n = self.checked_byte_size();
        debug_assert!(n.is_some(), "{self} was not checked against the size limit");
        n.unwrap_or(usize::MAX)
    }

    /// The element count, `None` when it does not fit a `usize`.
    pub fn checked_numel(&self) -> Option<usize> {
        self.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
    }

    /// Bytes of the dense buffer, `None` when they do not fit a `usize`.
    pub fn checked_byte_size(&self) -> Option<usize> {
        let n = self.checked_numel()?;
        match self.dtype.low_precision() {
            Some(f) => Some(packed_len(f, n)),
            None => n.checked_mul(self.dtype.size()),
        }
    }

    /// Bytes the tensor would take with every zero-size axis counted as 1: an upper
    /// bound of every partial product of its dimensions (row counts, strides) that
    /// shape inference, the memory plan and lowering compute, so a tensor whose extent
    /// fits the limit cannot make any of them overflow, even when it is empty.
    /// `None` when it does not fit a `u64`.
    pub fn checked_extent_bytes(&self) -> Option<u64> {
        let n = self
            .shape
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(u64::try_from(d.max(1)).ok()?))?;
        n.checked_mul(self.dtype.size().max(1) as u64)
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }
}

/// A symbolic axis shows as `≤MAX` (the names live in the graph's symbol table; the
/// graph's dump writes the expressions).
impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let symbolic = |a: usize| self.dims.as_ref().is_some_and(|d| !d[a].is_const());
        let dims: Vec<String> = (self.shape.iter().enumerate())
            .map(|(a, d)| {
                if symbolic(a) {
                    format!("≤{d}")
                } else {
                    d.to_string()
                }
            })
            .collect();
        write!(f, "{}[{}]", self.dtype, dims.join(","))
    }
}
