//! Rust element types for the low-precision formats: each wraps one element's code
//! (its bit pattern, in the low bits of a `u8`), so tensors of these types go through
//! the same generic code as every other tensor, with [`Element::to_f64`] decoding and
//! [`Element::from_f64`] encoding as ONNX Cast does (saturating, the Cast default).
//! Packing of the 4- and 2-bit types happens only at byte boundaries
//! (`Tensor::to_le_bytes` / `from_le_bytes`).

use ndarray::ArrayD;

use super::low_precision::{E8m0Rounding, Format};
use super::{DType, Element, Tensor};

macro_rules! code_element {
    ($($name:ident),*) => {$(
        #[derive(Clone, Copy, Debug, Default, PartialEq, PartialOrd)]
        pub struct $name(pub u8);

        impl Element for $name {
            const DTYPE: DType = DType::$name;
            fn to_f64(self) -> f64 {
                Format::$name.decode(self.0) as f64
            }
            fn from_f64(v: f64) -> Self {
                $name(Format::$name.encode(v as f32, true, E8m0Rounding::default()))
            }
            fn to_i64(self) -> i64 {
                self.to_f64() as i64
            }
            fn from_i64(v: i64) -> Self {
                Self::from_f64(v as f64)
            }
            fn write_le(self, out: &mut Vec<u8>) {
                out.push(self.0);
            }
            fn read_le(bytes: &[u8]) -> Self {
                $name(bytes[0])
            }
            fn wrap(a: ArrayD<Self>) -> Tensor {
                Tensor::$name(a)
            }
        }
    )*};
}

code_element!(F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ, U4, I4, F4E2M1, F8E8M0, U2, I2);
