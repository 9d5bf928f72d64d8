//! The ONNX type constraints of op inputs that nnc's importers and lowerings rely on:
//! which element types an input may have and the least rank it needs. Checked once per
//! node, before its importer runs, so no importer indexes an axis a scalar lacks and no
//! lowering meets an element type it has no instructions for (a float index, a float
//! condition).

use crate::ir::{DType, TensorType};

/// The element types an input accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Types {
    /// Any element type.
    Any,
    /// int32 or int64: indices, axes, shapes, counts.
    Index,
    /// int64 only: shapes, pads, repeats, K (the spec allows no other).
    I64,
    Bool,
    /// Anything but bool: arithmetic operands.
    Numeric,
}

impl Types {
    fn admits(self, d: DType) -> bool {
        match self {
            Types::Any => true,
            Types::Index => matches!(d, DType::I32 | DType::I64),
            Types::I64 => d == DType::I64,
            Types::Bool => d == DType::Bool,
            Types::Numeric => d != DType::Bool,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Types::Any => "any type",
            Types::Index => "int32 or int64",
            Types::I64 => "int64",
            Types::Bool => "bool",
            Types::Numeric => "a numeric type",
        }
    }
}

/// One input's constraint: its position, its allowed types and least rank.
struct Input(usize, Types, usize);

/// The constraints of `op_type`'s inputs in the default ONNX domain.
fn constraints(op_type: &str) -> &'static [Input] {
    use Types::*;
    match op_type {
        "Gather" | "GatherElements" => &[Input(0, Any, 1), Input(1, Index, 0)],
        "GatherND" => &[Input(0, Any, 1), Input(1, Index, 1)],
        "Scatter" | "ScatterElements" => &[Input(0, Any, 1), Input(1, Index, 0), Input(2, Any, 0)],
        "ScatterND" => &[Input(0, Any, 1), Input(1, Index, 1), Input(2, Any, 0)],
        "Where" => &[Input(0, Bool, 0)],
        "Compress" => &[Input(1, Bool, 1)],
        "Not" | "And" | "Or" | "Xor" => &[Input(0, Bool, 0), Input(1, Bool, 0)],
        "Split" => &[Input(0, Any, 1), Input(1, I64, 0)],
        "SplitToSequence" => &[Input(0, Any, 1), Input(1, Index, 0)],
        "Reshape" | "Expand" | "Tile" | "ConstantOfShape" => &[Input(1, I64, 0)],
        "Slice" => &[
            Input(1, Index, 0),
            Input(2, Index, 0),
            Input(3, Index, 0),
            Input(4, Index, 0),
        ],
        "Pad" => &[Input(1, I64, 0), Input(3, Index, 0)],
        "Squeeze" | "Unsqueeze" => &[Input(1, I64, 0)],
        "ReduceMax" | "ReduceMin" | "ReduceMean" | "ReduceSum" | "ReduceProd" | "ReduceL1"
        | "ReduceL2" | "ReduceLogSum" | "ReduceLogSumExp" | "ReduceSumSquare" => {
            &[Input(1, I64, 0)]
        }
        "TopK" => &[Input(0, Numeric, 1), Input(1, I64, 0)],
        "CumSum" | "CumProd" => &[Input(0, Numeric, 0), Input(1, Index, 0)],
        "Trilu" => &[Input(0, Any, 2), Input(1, I64, 0)],
        "OneHot" => &[Input(0, Numeric, 0), Input(1, Numeric, 0)],
        "Range" => &[
            Input(0, Numeric, 0),
            Input(1, Numeric, 0),
            Input(2, Numeric, 0),
        ],
        "ArgMax" | "ArgMin" => &[Input(0, Numeric, 0)],
        "MatMul" | "Gemm" => &[Input(0, Numeric, 1), Input(1, Numeric, 1)],
        "Conv" | "ConvTranspose" => &[Input(0, Numeric, 3), Input(1, Numeric, 3)],
        "Softmax" | "LogSoftmax" | "Hardmax" => &[Input(0, Numeric, 0)],
        // Arithmetic is not defined on bool (a bool Neg once reached the x86 backend).
        "Neg" | "Abs" | "Sign" | "Reciprocal" | "Sqrt" | "Exp" | "Log" | "Floor" | "Ceil"
        | "Round" => &[Input(0, Numeric, 0)],
        "Add" | "Sub" | "Mul" | "Div" | "Pow" | "Mod" => {
            &[Input(0, Numeric, 0), Input(1, Numeric, 0)]
        }
        _ => &[],
    }
}

/// The inputs of `op_type` that share one type variable `T` in the spec, so must all
/// have the same element type (the lowerings convert nothing between them: a float
/// bound of a uint32 Clip once wrapped to 4294967292).
enum SameType {
    None,
    /// These input positions.
    Inputs(&'static [usize]),
    /// Every input (variadic ops).
    All,
}

fn same_type(op_type: &str) -> SameType {
    match op_type {
        "Clip" | "Gemm" | "Conv" | "ConvTranspose" | "LayerNormalization" => {
            SameType::Inputs(&[0, 1, 2])
        }
        "Add" | "Sub" | "Mul" | "Div" | "Mod" | "MatMul" | "Equal" | "Less" | "Greater"
        | "LessOrEqual" | "GreaterOrEqual" | "PRelu" | "And" | "Or" | "Xor" | "BitShift"
        | "BitwiseAnd" | "BitwiseOr" | "BitwiseXor" => SameType::Inputs(&[0, 1]),
        "Where" => SameType::Inputs(&[1, 2]),
        "ScatterElements" | "Scatter" | "ScatterND" => SameType::Inputs(&[0, 2]),
        "InstanceNormalization" => SameType::Inputs(&[0, 1, 2]),
        "Max" | "Min" | "Sum" | "Mean" | "Concat" => SameType::All,
        _ => SameType::None,
    }
}

/// Checks the inputs of an `op_type` node against its constraints; `types` holds the
/// type of each input (`None` where it is omitted or not a tensor).
pub fn check_inputs(op_type: &str, types: &[Option<&TensorType>]) -> Result<(), String> {
    let shared: Vec<usize> = match same_type(op_type) {
        SameType::None => vec![],
        SameType::Inputs(list) => list.to_vec(),
        SameType::All => (0..types.len()).collect(),
    };
    let mut first: Option<(usize, DType)> = None;
    for i in shared {
        let Some(Some(t)) = types.get(i) else {
            continue;
        };
        match first {
            None => first = Some((i, t.dtype)),
            Some((j, d)) if d != t.dtype => {
                return Err(format!(
                    "inputs {j} and {i} must have the same element type, not {d} and {}",
                    t.dtype
                ));
            }
            Some(_) => {}
        }
    }
    for Input(i, allowed, min_rank) in constraints(op_type) {
        let Some(Some(t)) = types.get(*i) else {
            continue;
        };
        if !allowed.admits(t.dtype) {
            return Err(format!(
                "input {i} must be {}, not {}",
                allowed.describe(),
                t.dtype
            ));
        }
        if t.rank() < *min_rank {
            return Err(format!("input {i} must have rank ≥ {min_rank}, not {t}"));
        }
    }
    Ok(())
}
