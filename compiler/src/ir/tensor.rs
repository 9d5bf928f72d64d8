//! Constant and interpreter tensors: an `ndarray` array per element type.

use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn};

use super::dtype::{DType, TensorType};

#[derive(Clone, Debug, PartialEq)]
pub enum Tensor {
    F32(ArrayD<f32>),
    F64(ArrayD<f64>),
    F16(ArrayD<f16>),
    BF16(ArrayD<bf16>),
    I8(ArrayD<i8>),
    I16(ArrayD<i16>),
    I32(ArrayD<i32>),
    I64(ArrayD<i64>),
    U8(ArrayD<u8>),
    U16(ArrayD<u16>),
    U32(ArrayD<u32>),
    U64(ArrayD<u64>),
    Bool(ArrayD<bool>),
    F8E4M3FN(ArrayD<super::code_elements::F8E4M3FN>),
    F8E4M3FNUZ(ArrayD<super::code_elements::F8E4M3FNUZ>),
    F8E5M2(ArrayD<super::code_elements::F8E5M2>),
    F8E5M2FNUZ(ArrayD<super::code_elements::F8E5M2FNUZ>),
    U4(ArrayD<super::code_elements::U4>),
    I4(ArrayD<super::code_elements::I4>),
    F4E2M1(ArrayD<super::code_elements::F4E2M1>),
    F8E8M0(ArrayD<super::code_elements::F8E8M0>),
    U2(ArrayD<super::code_elements::U2>),
    I2(ArrayD<super::code_elements::I2>),
}

/// Runs `$body` with `$a` bound to the inner array, whatever its element type.
#[macro_export]
macro_rules! with_tensor {
    ($t:expr, $a:ident => $body:expr) => {
        match $t {
            $crate::ir::Tensor::F32($a) => $body,
            $crate::ir::Tensor::F64($a) => $body,
            $crate::ir::Tensor::F16($a) => $body,
            $crate::ir::Tensor::BF16($a) => $body,
            $crate::ir::Tensor::I8($a) => $body,
            $crate::ir::Tensor::I16($a) => $body,
            $crate::ir::Tensor::I32($a) => $body,
            $crate::ir::Tensor::I64($a) => $body,
            $crate::ir::Tensor::U8($a) => $body,
            $crate::ir::Tensor::U16($a) => $body,
            $crate::ir::Tensor::U32($a) => $body,
            $crate::ir::Tensor::U64($a) => $body,
            $crate::ir::Tensor::Bool($a) => $body,
            $crate::ir::Tensor::F8E4M3FN($a) => $body,
            $crate::ir::Tensor::F8E4M3FNUZ($a) => $body,
            $crate::ir::Tensor::F8E5M2($a) => $body,
            $crate::ir::Tensor::F8E5M2FNUZ($a) => $body,
            $crate::ir::Tensor::U4($a) => $body,
            $crate::ir::Tensor::I4($a) => $body,
            $crate::ir::Tensor::F4E2M1($a) => $body,
            $crate::ir::Tensor::F8E8M0($a) => $body,
            $crate::ir::Tensor::U2($a) => $body,
            $crate::ir::Tensor::I2($a) => $body,
        }
    };
}

/// Like [`with_tensor!`] but rewraps the array the body returns in the same variant.
#[macro_export]
macro_rules! map_tensor {
    ($t:expr, $a:ident => $body:expr) => {
        match $t {
            $crate::ir::Tensor::F32($a) => $crate::ir::Tensor::F32($body),
            $crate::ir::Tensor::F64($a) => $crate::ir::Tensor::F64($body),
            $crate::ir::Tensor::F16($a) => $crate::ir::Tensor::F16($body),
            $crate::ir::Tensor::BF16($a) => $crate::ir::Tensor::BF16($body),
            $crate::ir::Tensor::I8($a) => $crate::ir::Tensor::I8($body),
            $crate::ir::Tensor::I16($a) => $crate::ir::Tensor::I16($body),
            $crate::ir::Tensor::I32($a) => $crate::ir::Tensor::I32($body),
            $crate::ir::Tensor::I64($a) => $crate::ir::Tensor::I64($body),
            $crate::ir::Tensor::U8($a) => $crate::ir::Tensor::U8($body),
            $crate::ir::Tensor::U16($a) => $crate::ir::Tensor::U16($body),
            $crate::ir::Tensor::U32($a) => $crate::ir::Tensor::U32($body),
            $crate::ir::Tensor::U64($a) => $crate::ir::Tensor::U64($body),
            $crate::ir::Tensor::Bool($a) => $crate::ir::Tensor::Bool($body),
            $crate::ir::Tensor::F8E4M3FN($a) => $crate::ir::Tensor::F8E4M3FN($body),
            $crate::ir::Tensor::F8E4M3FNUZ($a) => $crate::ir::Tensor::F8E4M3FNUZ($body),
            $crate::ir::Tensor::F8E5M2($a) => $crate::ir::Tensor::F8E5M2($body),
            $crate::ir::Tensor::F8E5M2FNUZ($a) => $crate::ir::Tensor::F8E5M2FNUZ($body),
            $crate::ir::Tensor::U4($a) => $crate::ir::Tensor::U4($body),
            $crate::ir::Tensor::I4($a) => $crate::ir::Tensor::I4($body),
            $crate::ir::Tensor::F4E2M1($a) => $crate::ir::Tensor::F4E2M1($body),
            $crate::ir::Tensor::F8E8M0($a) => $crate::ir::Tensor::F8E8M0($body),
            $crate::ir::Tensor::U2($a) => $crate::ir::Tensor::U2($body),
            $crate::ir::Tensor::I2($a) => $crate::ir::Tensor::I2($body),
        }
    };
}

/// Element types that convert losslessly enough through f64 / i64 for casts and
/// shape arithmetic.
pub trait Element: Copy + Default + Send + Sync + std::fmt::Debug + PartialOrd + 'static {
    const DTYPE: DType;
    fn to_f64(self) -> f64;
    fn from_f64(v: f64) -> Self;
    fn to_i64(self) -> i64;
    fn from_i64(v: i64) -> Self;
    fn write_le(self, out: &mut Vec<u8>);
    fn read_le(bytes: &[u8]) -> Self;
    fn wrap(a: ArrayD<Self>) -> Tensor;
}

macro_rules! int_element {
    ($t:ty, $d:ident) => {
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn from_f64(v: f64) -> Self {
                // Saturating, NaN → 0: Rust's `as`, the behaviour most runtimes share.
                v as $t
            }
            fn to_i64(self) -> i64 {
                self as i64
            }
            fn from_i64(v: i64) -> Self {
                v as $t
            }
            fn write_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn read_le(bytes: &[u8]) -> Self {
                <$t>::from_le_bytes(bytes.try_into().expect("element size"))
            }
            fn wrap(a: ArrayD<Self>) -> Tensor {
                Tensor::$d(a)
            }
        }
    };
}
int_element!(i8, I8);
int_element!(i16, I16);
int_element!(i32, I32);
int_element!(i64, I64);
int_element!(u8, U8);
int_element!(u16, U16);
int_element!(u32, U32);
int_element!(u64, U64);

macro_rules! float_element {
    ($t:ty, $d:ident, $to:expr, $from:expr) => {
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            fn to_f64(self) -> f64 {
                $to(self)
            }
            fn from_f64(v: f64) -> Self {
                $from(v)
            }
            fn to_i64(self) -> i64 {
                $to(self) as i64
            }
            fn from_i64(v: i64) -> Self {
                $from(v as f64)
            }
            fn write_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn read_le(bytes: &[u8]) -> Self {
                <$t>::from_le_bytes(bytes.try_into().expect("element size"))
            }
            fn wrap(a: ArrayD<Self>) -> Tensor {
                Tensor::$d(a)
            }
        }
    };
}
float_element!(f32, F32, |v: f32| v as f64, |v: f64| v as f32);
float_element!(f64, F64, |v: f64| v, |v: f64| v);
float_element!(f16, F16, |v: f16| v.to_f64(), f16::from_f64);
float_element!(bf16, BF16, |v: bf16| v.to_f64(), bf16::from_f64);

impl Element for bool {
    const DTYPE: DType = DType::Bool;
    fn to_f64(self) -> f64 {
        self as u8 as f64
    }
    fn from_f64(v: f64) -> Self {
        v != 0.0
    }
    fn to_i64(self) -> i64 {
        self as i64
    }
    fn from_i64(v: i64) -> Self {
        v != 0
    }
    fn write_le(self, out: &mut Vec<u8>) {
        out.push(self as u8);
    }
    fn read_le(bytes: &[u8]) -> Self {
        bytes[0] != 0
    }
    fn wrap(a: ArrayD<Self>) -> Tensor {
        Tensor::Bool(a)
    }
}

/// Calls `$body` with `$T` bound to the Rust element type of `$dtype`.
#[macro_export]
macro_rules! with_dtype {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            $crate::ir::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::ir::DType::F64 => {
                type $T = f64;
                $body
            }
            $crate::ir::DType::F16 => {
                type $T = half::f16;
                $body
            }
            $crate::ir::DType::BF16 => {
                type $T = half::bf16;
                $body
            }
            $crate::ir::DType::I8 => {
                type $T = i8;
                $body
            }
            $crate::ir::DType::I16 => {
                type $T = i16;
                $body
            }
            $crate::ir::DType::I32 => {
                type $T = i32;
                $body
            }
            $crate::ir::DType::I64 => {
                type $T = i64;
                $body
            }
            $crate::ir::DType::U8 => {
                type $T = u8;
                $body
            }
            $crate::ir::DType::U16 => {
                type $T = u16;
                $body
            }
            $crate::ir::DType::U32 => {
                type $T = u32;
                $body
            }
            $crate::ir::DType::U64 => {
                type $T = u64;
                $body
            }
            $crate::ir::DType::Bool => {
                type $T = bool;
                $body
            }
            $crate::ir::DType::F8E4M3FN => {
                type $T = $crate::ir::code_elements::F8E4M3FN;
                $body
            }
            $crate::ir::DType::F8E4M3FNUZ => {
                type $T = $crate::ir::code_elements::F8E4M3FNUZ;
                $body
            }
            $crate::ir::DType::F8E5M2 => {
                type $T = $crate::ir::code_elements::F8E5M2;
                $body
            }
            $crate::ir::DType::F8E5M2FNUZ => {
                type $T = $crate::ir::code_elements::F8E5M2FNUZ;
                $body
            }
            $crate::ir::DType::U4 => {
                type $T = $crate::ir::code_elements::U4;
                $body
            }
            $crate::ir::DType::I4 => {
                type $T = $crate::ir::code_elements::I4;
                $body
            }
            $crate::ir::DType::F4E2M1 => {
                type $T = $crate::ir::code_elements::F4E2M1;
                $body
            }
            $crate::ir::DType::F8E8M0 => {
                type $T = $crate::ir::code_elements::F8E8M0;
                $body
            }
            $crate::ir::DType::U2 => {
                type $T = $crate::ir::code_elements::U2;
                $body
            }
            $crate::ir::DType::I2 => {
                type $T = $crate::ir::code_elements::I2;
                $body
            }
        }
    };
}

impl Tensor {
    pub fn dtype(&self) -> DType {
        fn d<T: Element>(_: &ArrayD<T>) -> DType {
            T::DTYPE
        }
        with_tensor!(self, a => d(a))
    }

    pub fn shape(&self) -> &[usize] {
        with_tensor!(self, a => a.shape())
    }

    pub fn ty(&self) -> TensorType {
        TensorType::new(self.dtype(), self.shape().to_vec())
    }

    pub fn len(&self) -> usize {
        with_tensor!(self, a => a.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn zeros(ty: &TensorType) -> Tensor {
        with_dtype!(ty.dtype, T => T::wrap(ArrayD::<T>::default(IxDyn(&ty.shape))))
    }

    /// Builds a tensor from dense little-endian bytes; `None` if the length is wrong.
    pub fn from_le_bytes(ty: &TensorType, bytes: &[u8]) -> Option<Tensor> {
        if bytes.len() != ty.byte_size() {
            return None;
        }
        if let Some(f) = ty.dtype.low_precision() {
            let codes = super::low_precision::unpack(f, bytes, ty.numel());
            return Tensor::from_le_bytes(&TensorType::new(DType::U8, ty.shape.clone()), &codes)
                .map(|t| t.with_codes_as(ty.dtype));
        }
        let size = ty.dtype.size();
        Some(with_dtype!(ty.dtype, T => {
            let v: Vec<T> = bytes.chunks_exact(size).map(T::read_le).collect();
            T::wrap(ArrayD::from_shape_vec(IxDyn(&ty.shape), v).ok()?)
        }))
    }

    /// Dense row-major little-endian bytes: the layout of weights in the artifact and
    /// of buffers at the C ABI.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len() * self.dtype().size());
        with_tensor!(self, a => a.iter().for_each(|v| v.write_le(&mut out)));
        match self.dtype().low_precision() {
            Some(f) => super::low_precision::pack(f, &out),
            None => out,
        }
    }

    /// A uint8 tensor's values taken as the codes of the low-precision type `to` (the
    /// bits are kept, not the values).
    pub fn with_codes_as(&self, to: DType) -> Tensor {
        let Tensor::U8(a) = self else {
            panic!("codes come from a uint8 tensor")
        };
        with_dtype!(to, T => T::wrap(a.mapv(|c| T::read_le(&[c]))))
    }

    pub fn from_vec<T: Element>(shape: &[usize], data: Vec<T>) -> Tensor {
        T::wrap(ArrayD::from_shape_vec(IxDyn(shape), data).expect("shape matches data"))
    }

    pub fn scalar<T: Element>(v: T) -> Tensor {
        Tensor::from_vec(&[], vec![v])
    }

    /// Elements as i64 (shape and index inputs), row-major.
    pub fn to_i64_vec(&self) -> Vec<i64> {
        with_tensor!(self, a => a.iter().map(|v| v.to_i64()).collect())
    }

    /// Elements as f64, row-major.
    /// Elements as f64, row-major, without a copy of the tensor.
    pub fn f64_values(&self) -> Box<dyn Iterator<Item = f64> + '_> {
        with_tensor!(self, a => Box::new(a.iter().map(|v| v.to_f64())))
    }

    pub fn to_f64_vec(&self) -> Vec<f64> {
        with_tensor!(self, a => a.iter().map(|v| v.to_f64()).collect())
    }

    /// Numeric conversion following ONNX Cast: the interpreter's conversion, so
    /// constants folded at import and values computed at run time agree bit for bit.
    pub fn cast(&self, to: DType) -> Tensor {
        crate::interp::cast(self, to)
    }

    pub fn reshape(&self, shape: &[usize]) -> Tensor {
        map_tensor!(self, a => a
            .as_standard_layout()
            .into_owned()
            .into_shape_with_order(IxDyn(shape))
            .expect("reshape keeps the element count"))
    }
}
