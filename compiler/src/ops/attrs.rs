//! Parsed, normalized attributes of the core ops.

use crate::ir::DType;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum UnaryOp {
    Identity,
    Relu,
    LeakyRelu {
        alpha: f32,
    },
    /// Bounds already resolved from attributes (opset < 11) or constant inputs.
    Clip {
        min: f64,
        max: f64,
    },
    Sigmoid,
    HardSigmoid {
        alpha: f32,
        beta: f32,
    },
    HardSwish,
    Tanh,
    Exp,
    Log,
    Sqrt,
    Reciprocal,
    Neg,
    Abs,
    Erf,
    /// `approximate = "tanh"` selects the tanh form.
    Gelu {
        tanh: bool,
    },
    Softplus,
    Softsign,
    Elu {
        alpha: f32,
    },
    Selu {
        alpha: f32,
        gamma: f32,
    },
    Celu {
        alpha: f32,
    },
    ThresholdedRelu {
        alpha: f32,
    },
    Mish,
    Floor,
    Ceil,
    /// Round half to even.
    Round,
    Sign,
    Sin,
    Cos,
    Tan,
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Asinh,
    Acosh,
    Atanh,
    /// Logical not (bool).
    Not,
    BitwiseNot,
    /// Output bool.
    IsNaN,
    /// Output bool.
    IsInf {
        positive: bool,
        negative: bool,
    },
}

impl UnaryOp {
    pub fn output_dtype(self, input: DType) -> DType {
        match self {
            UnaryOp::IsNaN | UnaryOp::IsInf { .. } => DType::Bool,
            _ => input,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    /// Integer division truncates toward zero (C semantics, as onnxruntime).
    Div,
    Pow,
    Max,
    Min,
    /// `fmod = false`: sign of the divisor (Python); `true`: sign of the dividend (C).
    Mod {
        fmod: bool,
    },
    /// PRelu: `x < 0 ? x * slope : x`, slope broadcast to x.
    PRelu,
    Equal,
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
    And,
    Or,
    Xor,
    BitShiftLeft,
    BitShiftRight,
    BitwiseAnd,
    BitwiseOr,
    BitwiseXor,
}

impl BinaryOp {
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryOp::Equal
                | BinaryOp::Less
                | BinaryOp::LessOrEqual
                | BinaryOp::Greater
                | BinaryOp::GreaterOrEqual
        )
    }

    pub fn output_dtype(self, lhs: DType) -> DType {
        if self.is_comparison() {
            DType::Bool
        } else {
            lhs
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct GemmAttrs {
    pub alpha: f32,
    pub beta: f32,
    pub trans_a: bool,
    pub trans_b: bool,
    /// Fused epilogue: applied to `alpha·AB + beta·C (+ R)`.
    pub activation: Activation,
}

/// Shared by Conv, ConvTranspose and pooling. Spatial vectors have one entry per spatial
/// axis; `pads` is `[begin_0, begin_1, ..., end_0, end_1, ...]` as in ONNX.
#[derive(Clone, Debug, PartialEq)]
pub struct ConvAttrs {
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    pub pads: Vec<usize>,
    pub dilations: Vec<usize>,
    pub group: usize,
    /// Fused epilogue: applied to the convolution plus bias (plus the residual input).
    pub activation: Activation,
}

/// MatMul's fused epilogue: inputs are A, B, then an optional bias (`[N]`, broadcast
/// over the rows) and an optional residual `R` shaped like the output;
/// `Y = activation(A·B + bias + R)`.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct MatMulAttrs {
    pub activation: Activation,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ConvTransposeAttrs {
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    /// Resolved pads (begin..., end...) after output_shape / auto_pad handling.
    pub pads: Vec<usize>,
    pub dilations: Vec<usize>,
    pub group: usize,
    /// The spatial output size, already resolved.
    pub output_spatial: Vec<usize>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PoolKind {
    Max,
    Average { count_include_pad: bool },
    Lp { p: f32 },
}

#[derive(Clone, Debug, PartialEq)]
pub struct PoolAttrs {
    pub kind: PoolKind,
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    pub pads: Vec<usize>,
    pub dilations: Vec<usize>,
    /// The spatial output size, already resolved (ceil_mode and auto_pad applied).
    pub output_spatial: Vec<usize>,
    /// ONNX's `ceil_mode`: the output sizes round up, which the planes' formula of a
    /// size known only at run time follows.
    pub ceil_mode: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceKind {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    L1,
    L2,
    LogSum,
    LogSumExp,
    SumSquare,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ReduceAttrs {
    pub kind: ReduceKind,
    /// Sorted, unique, non-negative. Never empty (an empty reduction is imported as
    /// Reshape or as a reduction over all axes, per `noop_with_empty_axes`).
    pub axes: Vec<usize>,
    pub keepdims: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ArgReduceAttrs {
    /// true: ArgMax, false: ArgMin.
    pub max: bool,
    pub axis: usize,
    pub keepdims: bool,
    pub select_last_index: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PadMode {
    Constant,
    Reflect,
    Edge,
    Wrap,
}

#[derive(Clone, Debug, PartialEq)]
pub struct PadAttrs {
    pub mode: PadMode,
    /// `[begin_0, ..., begin_{r-1}, end_0, ..., end_{r-1}]` over every axis; negative
    /// values crop.
    pub pads: Vec<i64>,
    /// The fill value for `Constant`, converted to the data's type by the consumer.
    pub value: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResizeMode {
    Nearest,
    Linear,
    Cubic,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoordinateTransform {
    HalfPixel,
    HalfPixelSymmetric,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfCropAndResize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NearestMode {
    RoundPreferFloor,
    RoundPreferCeil,
    Floor,
    Ceil,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ResizeAttrs {
    pub mode: ResizeMode,
    pub coordinate_transform: CoordinateTransform,
    pub nearest_mode: NearestMode,
    pub cubic_coeff_a: f32,
    pub exclude_outside: bool,
    pub extrapolation_value: f32,
    /// One scale per axis (output / input unless given explicitly).
    pub scales: Vec<f32>,
    /// Region of interest `[start..., end...]` per axis, for tf_crop_and_resize.
    pub roi: Vec<f32>,
    pub output_shape: Vec<usize>,
    /// Each axis scales by its output extent over its input extent, as the run sets
    /// them (sizes computed from the dims): `scales` holds that ratio at the maxima.
    pub scales_from_extents: bool,
}

/// How ScatterElements / ScatterND combine an update with the element it lands on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScatterReduction {
    /// Replace (the last update wins with duplicate indices).
    None,
    Add,
    Mul,
    Max,
    Min,
}

/// An elementwise function applied to a GEMM or convolution result in its epilogue,
/// while the output tile is still in registers (epilogue fusion).
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub enum Activation {
    #[default]
    None,
    Relu,
    /// Clip (Relu6 is `Clip { min: 0, max: 6 }`).
    Clip {
        min: f32,
        max: f32,
    },
    LeakyRelu {
        alpha: f32,
    },
    /// `max(0, min(1, alpha·x + beta))`.
    HardSigmoid {
        alpha: f32,
        beta: f32,
    },
    /// `x · HardSigmoid(x; 1/6, 1/2)`.
    HardSwish,
    Sigmoid,
    /// `x · sigmoid(x)`.
    Silu,
    /// `approximate = "tanh"` selects the tanh form.
    Gelu {
        tanh: bool,
    },
    Tanh,
}

impl Activation {
    /// The elementwise op this activation computes, `None` for `None` and `Silu` (which
    /// is `x · Sigmoid(x)`).
    pub fn as_unary(self) -> Option<UnaryOp> {
        Some(match self {
            Activation::None | Activation::Silu => return None,
            Activation::Relu => UnaryOp::Relu,
            Activation::Clip { min, max } => UnaryOp::Clip {
                min: f64::from(min),
                max: f64::from(max),
            },
            Activation::LeakyRelu { alpha } => UnaryOp::LeakyRelu { alpha },
            Activation::HardSigmoid { alpha, beta } => UnaryOp::HardSigmoid { alpha, beta },
            Activation::HardSwish => UnaryOp::HardSwish,
            Activation::Sigmoid => UnaryOp::Sigmoid,
            Activation::Gelu { tanh } => UnaryOp::Gelu { tanh },
            Activation::Tanh => UnaryOp::Tanh,
        })
    }

    /// The activation computing a unary op, if it is one.
    pub fn from_unary(u: UnaryOp) -> Option<Activation> {
        Some(match u {
            UnaryOp::Relu => Activation::Relu,
            UnaryOp::Clip { min, max } => Activation::Clip {
                min: min as f32,
                max: max as f32,
            },
            UnaryOp::LeakyRelu { alpha } => Activation::LeakyRelu { alpha },
            UnaryOp::HardSigmoid { alpha, beta } => Activation::HardSigmoid { alpha, beta },
            UnaryOp::HardSwish => Activation::HardSwish,
            UnaryOp::Sigmoid => Activation::Sigmoid,
            UnaryOp::Gelu { tanh } => Activation::Gelu { tanh },
            UnaryOp::Tanh => Activation::Tanh,
            _ => return None,
        })
    }
}
