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

/// Ops whose result jumps where their input crosses a threshold, or magnifies a
/// difference without bound: after an op that may round, a difference in the last place
/// can move the result by a whole step (`Floor` of `-1e-9` against `Floor` of `0`), so
/// no tolerance applies.
const STEP_OPS: &[&str] = &[
    "Floor",
    "Ceil",
    "Round",
    "Sign",
    "Equal",
    "Less",
    "Greater",
    "LessOrEqual",
    "GreaterOrEqual",
    "IsInf",
    "Cast",
    "CastLike",
    "ArgMax",
    "ArgMin",
    "TopK",
    "Mod",
    "NonZero",
    // Normalizations divide by a spread that rounding alone makes of a near-constant
    // input: LayerNorm of an earlier LayerNorm's output of a constant is noise scaled
    // to unit variance.
    "LayerNormalization",
    "InstanceNormalization",
    "GroupNormalization",
    "MeanVarianceNormalization",
    "LpNormalization",
    // Their slopes (1/x, -1/x²) are unbounded near 0: `log(log(y))` for y about
    // 1 + 1e-5 turns a float32 rounding of y into a difference in the second decimal,
    // and so does `sin(1/tanh(x))` for a normalized x near 0.
    "Log",
    "Reciprocal",
];

pub fn is_exact_op(op_type: &str) -> bool {
    EXACT_OPS.contains(&op_type)
}

/// How an output of the model can be compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Comparable {
    /// Computed by exact ops only: every element equal.
    Exactly,
    /// Some op may round: floats within [`tolerance`], integers and bools not compared.
    WithinTolerance,
    /// A step op read a rounded value: not compared.
    Not,
}

/// Per graph output of `model`, how it can be compared (see [`Comparable`]): each
/// value takes the worst of its inputs, an inexact op makes it at least rounded, a
/// step op on a rounded input makes it incomparable.
pub fn comparable_outputs(model: &nnc::onnx::proto::ModelProto) -> Vec<Comparable> {
    use std::collections::HashMap;
    let Some(graph) = &model.graph else {
        return vec![];
    };
    let mut of: HashMap<&str, Comparable> = HashMap::new();
    for node in &graph.node {
        let worst = (node.input.iter())
            .filter_map(|i| of.get(i.as_str()).copied())
            .max()
            .unwrap_or(Comparable::Exactly);
        let op = node.op_type.as_str();
        let result = if worst == Comparable::WithinTolerance && STEP_OPS.contains(&op) {
            Comparable::Not
        } else if !is_exact_op(op) {
            worst.max(Comparable::WithinTolerance)
        } else {
            worst
        };
        for o in &node.output {
            of.insert(o.as_str(), result);
        }
    }
    (graph.output.iter())
        .map(|o| {
            of.get(o.name.as_str())
                .copied()
                .unwrap_or(Comparable::Exactly)
        })
        .collect()
}

/// Relative tolerance of a float output: a few units in the last place of the type for
/// reordered sums and approximated transcendentals.
fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F16 | DType::BF16 => 2e-2,
        _ => 1e-3,
    }
}

/// `None` when `got` matches `expected` as `how` says; otherwise where and how they
/// differ. Integer and bool outputs must be equal when compared `Exactly`, and are not
/// compared otherwise. NaN
/// matches NaN only; infinities match themselves only.
pub fn mismatch(got: &Tensor, expected: &Tensor, how: Comparable) -> Option<String> {
    if got.ty() != expected.ty() {
        return Some(format!("type {} vs {}", got.ty(), expected.ty()));
    }
    let exact = match how {
        Comparable::Exactly => true,
        Comparable::WithinTolerance => false,
        Comparable::Not => return None,
    };
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
