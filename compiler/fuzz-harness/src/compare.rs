//! Compiled output vs interpreter output, at a tolerance fit for the graph's ops.

use nnc::ir::{DType, Tensor};

/// Ops whose float results on the generator's values (small integers and quarters) are
/// exact in every float type, whatever order the compiled code computes in. A graph of
/// only these gives bit-exact integer and bool outputs even where floats are cast or
/// compared; any other op may round differently, so integer and bool results derived
/// from its floats (a Cast, an ArgMax, a comparison) may legitimately differ.
const EXACT_OPS: &[&str] = &[
    "Relu",
    "Abs",
    "Neg",
    "Floor",
    "Ceil",
    "Round",
    "Sign",
    "Not",
    "IsNaN",
    "IsInf",
    "Add",
    "Sub",
    "Max",
    "Min",
    "Equal",
    "Less",
    "Greater",
    "And",
    "Or",
    "Xor",
    "BitShift",
    "Where",
    "Cast",
    "CastLike",
    "Reshape",
    "Transpose",
    "Concat",
    "Slice",
    "Gather",
    "GatherElements",
    "Squeeze",
    "Unsqueeze",
    "Flatten",
    "Expand",
    "Tile",
    "Pad",
    "Split",
    "Shape",
    "Size",
    "Identity",
    "DepthToSpace",
    "SpaceToDepth",
    "ConstantOfShape",
    "Range",
    "Trilu",
    "ScatterElements",
    "OneHot",
    "ReduceMax",
    "ReduceMin",
    "ArgMax",
    "ArgMin",
    "TopK",
    "MaxPool",
    "GlobalMaxPool",
    "Clip",
];

pub fn is_exact_op(op_type: &str) -> bool {
    EXACT_OPS.contains(&op_type)
}

/// Relative tolerance of a float output: a few units in the last place of the type for
/// reordered sums and approximated transcendentals.
fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F16 | DType::BF16 => 2e-2,
        _ => 1e-3,
    }
}

/// `None` when `got` matches `expected`; otherwise where and how they differ. Integer
/// and bool outputs must be equal when `exact`, and are not compared otherwise. NaN
/// matches NaN only; infinities match themselves only.
pub fn mismatch(got: &Tensor, expected: &Tensor, exact: bool) -> Option<String> {
    if got.ty() != expected.ty() {
        return Some(format!("type {} vs {}", got.ty(), expected.ty()));
    }
    let dtype = expected.dtype();
    let float = !dtype.is_int() && dtype != DType::Bool;
    if !float && !exact {
        return None;
    }
    let tol = if float { tolerance(dtype) } else { 0.0 };
    let (g, e) = (got.to_f64_vec(), expected.to_f64_vec());
    for (i, (a, b)) in g.iter().zip(&e).enumerate() {
        let same = if a.is_nan() || b.is_nan() {
            a.is_nan() && b.is_nan()
        } else if a.is_infinite() || b.is_infinite() {
            a == b
        } else {
            (a - b).abs() <= tol * b.abs().max(1.0)
        };
        if !same {
            return Some(format!("element {i}: got {a}, expected {b}"));
        }
    }
    None
}
