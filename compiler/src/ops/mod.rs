//! The core ops of nnc's IR: what each computes, its attributes already parsed and
//! normalized (negative axes resolved, auto_pad turned into pads, shape-like inputs
//! folded into attributes), and its shape inference.
//!
//! ONNX import (`crate::onnx::import`) maps ONNX nodes onto these; the reference
//! interpreter (`crate::interp`) and the Cranelift lowering (`crate::codegen`) each
//! implement every variant.

pub mod along_axis;
pub mod attrs;
pub mod infer;
pub mod infer_dims;
pub mod instantiate;
pub mod planes;
pub mod resize_sampling;
pub mod rows;

pub use attrs::*;
pub use infer::infer_types;
pub use planes::{PlaneLayout, Requantize};

use crate::ir::low_precision::E8m0Rounding;
use crate::ir::DType;

/// See [`Op::counted_outputs`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CountedOutputs {
    /// `(output, axis, count)`: an axis of output `output` whose extent output `count`
    /// holds.
    pub axes: Vec<(usize, usize, usize)>,
    /// Each count is an int64 `[rank]`, its output's whole shape; else an int64 scalar,
    /// the extent of each axis listed with it.
    pub whole_shape: bool,
}

impl CountedOutputs {
    /// How many outputs the op has: the counts come last.
    pub fn outputs(&self) -> usize {
        self.axes.iter().map(|&(_, _, c)| c + 1).max().unwrap_or(0)
    }
}

/// The cell an [`Op::RnnSequence`] runs, with ONNX's gate order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RnnCell {
    /// `h = tanh(xw + h·Rᵀ)`.
    Simple,
    /// Gates z, r, h, `linear_before_reset`: `h̃ = tanh(xw_h + r ⊙ (h·R_hᵀ + Rb_h))`,
    /// `h = h̃ + z ⊙ (h − h̃)`.
    Gru,
    /// Gates i, o, f, c: `c = f ⊙ c + i ⊙ tanh(g_c)`, `h = o ⊙ tanh(c)`.
    Lstm,
}

impl RnnCell {
    pub fn gates(self) -> usize {
        match self {
            RnnCell::Simple => 1,
            RnnCell::Gru => 3,
            RnnCell::Lstm => 4,
        }
    }

    /// `Y`, `Y_h`, and an LSTM's `Y_c`.
    pub fn outputs(self) -> usize {
        if self == RnnCell::Lstm {
            3
        } else {
            2
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// Elementwise, one input, same shape out. Output dtype: see [`UnaryOp::output_dtype`].
    Unary(UnaryOp),
    /// Elementwise with numpy (multidirectional) broadcasting of two inputs.
    Binary(BinaryOp),
    /// `Where(cond, x, y)`, broadcasting all three.
    Where,
    Cast {
        to: DType,
    },
    /// BitCast: the same bits read as `to`, a type of the input's bit width (little
    /// endian, so every dtype's bytes are kept as they are: a view of the input).
    BitCast {
        to: DType,
    },
    /// Cast between float32 and a low-precision type (float8, 4- and 2-bit: see
    /// [`crate::ir::low_precision`]), either way, with ONNX Cast's `saturate` (float8
    /// and float4 targets) and `round_mode` (float8e8m0 targets). The importer routes
    /// every other type through float32, which holds all their values exactly.
    CastCodes {
        to: DType,
        saturate: bool,
        rounding: E8m0Rounding,
    },
    /// numpy `matmul`: batched, batch dims broadcast, 1-D operands promoted then squeezed.
    /// Optional inputs 2 (bias) and 3 (residual) and the activation: see [`MatMulAttrs`].
    MatMul(MatMulAttrs),
    /// `alpha * op(A) @ op(B) + beta * C`; C optional and unidirectionally broadcast.
    /// Optional input 3: a residual `R` shaped like the output, added before the
    /// activation.
    Gemm(GemmAttrs),
    /// N-d convolution, NC[D]HW, inputs X, W, optional bias B, optional residual R
    /// (shaped like the output, added before the activation).
    Conv(ConvAttrs),
    /// N-d transposed convolution, inputs X, W ([C_in, C_out/group, k...]), optional B.
    ConvTranspose(ConvTransposeAttrs),
    /// Max / average / Lp pooling over the spatial axes (global pooling = full kernel).
    Pool(PoolAttrs),
    /// Scaled-dot-product attention as the graph wrote it, fused by
    /// [`crate::passes::attention`]: `MatMul(Softmax(MatMul(Q, Kᵀ) + mask, last axis), V)`
    /// with inputs Q `[..., M, d]`, Kᵀ `[..., d, T]`, V `[..., T, dv]` and an optional
    /// additive mask broadcast to the scores `[..., M, T]`; output `[..., M, dv]`. Batch
    /// axes broadcast as in MatMul. Computed block of query rows by block of query rows,
    /// so the `M × T` scores never leave the cache.
    Attention,
    /// Softmax or LogSoftmax along one axis (opset ≥ 13 semantics; older opsets are
    /// rewritten at import as a flatten to 2-D around this).
    Softmax {
        axis: usize,
        log: bool,
    },
    /// LayerNormalization over axes `axis..rank`; inputs X, scale, optional bias.
    LayerNorm {
        axis: usize,
        epsilon: f32,
    },
    /// A reduction; an input 1 (an int64 scalar) is the run's count of the rows of the
    /// one axis reduced, when only the run knows it (only unit axes before it).
    Reduce(ReduceAttrs),
    /// ArgMax / ArgMin, output int64.
    ArgReduce(ArgReduceAttrs),
    /// Same elements, new shape (Reshape, Flatten, Squeeze, Unsqueeze, Identity...).
    Reshape {
        shape: Vec<usize>,
    },
    Transpose {
        perm: Vec<usize>,
    },
    Concat {
        axis: usize,
    },
    /// Output element `j` along axis `i` reads input index `starts[i] + j * steps[i]`;
    /// every axis is listed (Split becomes one Slice per output).
    Slice {
        starts: Vec<usize>,
        steps: Vec<i64>,
        shape: Vec<usize>,
    },
    /// `Gather(data, indices)` along `axis`; negative indices wrap. An input 2 (an int64
    /// scalar) is the run's count of data's rows along `axis` when only the run knows it
    /// (only unit axes before it): indices are checked against it, data read whole.
    Gather {
        axis: usize,
    },
    /// Broadcast the input to `shape`. An input 1, when present, is a value of that shape
    /// whose extents only the run knows (a ConstantOfShape of its shape): the output has
    /// them too, input 0 then a scalar.
    Expand {
        shape: Vec<usize>,
    },
    Pad(PadAttrs),
    Resize(ResizeAttrs),
    /// `GatherElements(data, indices)`: output (shaped like indices) element `i` reads
    /// data at `i` with `i[axis]` replaced by `indices[i]`; negative indices wrap.
    GatherElements {
        axis: usize,
    },
    /// `ScatterElements(data, indices, updates)`: data with `updates[i]` combined into
    /// the element GatherElements would read for `i`, in row-major order of `i`.
    ScatterElements {
        axis: usize,
        reduction: ScatterReduction,
    },
    /// `ScatterND(data, indices, updates)`: each index tuple (the last axis of indices)
    /// addresses a slice of data that the matching slice of updates is combined into.
    ScatterND {
        reduction: ScatterReduction,
    },
    /// `GatherND(data, indices)`: the slices of data the index tuples address, with
    /// `batch_dims` leading axes shared by data and indices.
    GatherND {
        batch_dims: usize,
    },
    /// Inclusive (or exclusive) running sum (CumSum) or product (CumProd) along
    /// `axis`, optionally from the end.
    CumSum {
        axis: usize,
        exclusive: bool,
        reverse: bool,
        product: bool,
    },
    /// A recurrent cell's recurrence over a float32 sequence, one step after another
    /// (the input projections already computed, see `onnx::ops::recurrent`). Inputs:
    /// `xw` `[T, B, D·G·H]` (per direction d, columns `[d·G·H, (d+1)·G·H)` hold the G
    /// gates of `X·Wᵀ + Wb + Rb`, without GRU's `Rb` of its h gate), `R` `[D, G·H, H]`,
    /// an optional initial `h` `[D, B, H]`, and input 3: an LSTM's optional initial `c`
    /// `[D, B, H]`, a GRU's `Rb` of its h gate `[D, H]` (zero when omitted). Outputs:
    /// `Y` `[T, D, B, H]`, the last `Y_h` `[D, B, H]` (and an LSTM's last `Y_c`).
    /// Direction d walks t = 0 … T−1, or T−1 … 0 when `reverse[d]`.
    RnnSequence {
        cell: RnnCell,
        reverse: Vec<bool>,
    },
    /// The `k` largest (or smallest) elements along `axis`, sorted, ties to the lower
    /// index; two outputs: values and int64 indices.
    TopK {
        axis: usize,
        k: usize,
        largest: bool,
    },
    /// Concat along `axis` of `parts` values whose rows there the run counts (only unit
    /// axes before it): inputs `0..parts` the values, `parts..2·parts` their counts
    /// (int64 scalars; omitted for a value of fixed extent). Output 0 is planned for
    /// every value's bound and holds their actual rows densely, in order; output 1
    /// (int64 scalar) their sum.
    ConcatRows {
        axis: usize,
        parts: usize,
    },
    /// The first `min(count, n)` rows along `axis` (only unit axes before it) of input 0,
    /// of which the run has `count` (input 1, an int64 scalar; omitted: its extent) and
    /// `n` is input 2 (an int64 scalar, negative taken as 0): a Slice from 0 of rows the
    /// run counts, an `If` choosing between them and none. Output 1 holds that number.
    /// Output 0 is planned for `bound` rows (at most input 0's), `n` never more.
    FirstRows {
        axis: usize,
        bound: usize,
    },
    /// TopK with k read at run time (input 1, one integer in `[0, min(dim, max_k)]`, the
    /// model bounding k by `max_k`, as `min(300, n)` does): outputs planned for `max_k`
    /// and filled densely for k; output 2 holds k.
    TopKRunTime {
        axis: usize,
        largest: bool,
        max_k: usize,
    },
    /// A reduction over `count` distinct axes read at run time (input 1, integers in
    /// `[-rank, rank)`): output 0 is planned at the largest shape any such set of axes
    /// gives and filled densely for the actual one, which output 1 (int64, one value
    /// per output axis) holds; `varying` lists the output axes whose extent depends on
    /// the axes.
    ReduceRunTimeAxes {
        kind: ReduceKind,
        keepdims: bool,
        count: usize,
        varying: Vec<usize>,
    },
    /// Squeeze / Unsqueeze with axes read at run time (input 1: `count` integers in
    /// `[-axes_rank, axes_rank)`): the data unchanged, its shape the one `shapes` gives
    /// for the set of axes (a bit mask); a set with no entry fails like a bad index.
    /// Output 1 (int64) holds the shape.
    /// No inputs: an int64 tensor (a scalar, or `[n]`) holding the values of these
    /// extents in this run; what a shape subgraph computes from the dims where the
    /// model then uses it as data (`arange(batch) * seq`).
    DimValues {
        values: Vec<crate::ir::Dim>,
        scalar: bool,
    },
    ReshapeByAxes {
        count: usize,
        axes_rank: usize,
        shapes: Vec<(u64, Vec<usize>)>,
    },
    /// Slice with starts, ends and optionally axes and steps (inputs 1–4, `count`
    /// integers each) read at run time, ONNX's clamping applied: output 0 is planned at
    /// the input's shape (no slice is longer) and filled densely for the actual one,
    /// which output 1 (int64 `[rank]`) holds; `varying` lists the axes a slice may
    /// shorten. An axis out of range or repeated, or a step of 0, is a bad index.
    SliceRunTime {
        count: usize,
        varying: Vec<usize>,
    },
    /// Split along `axis` into `parts` pieces whose sizes (input 1, `parts` integers
    /// that must sum to the axis) are read at run time: outputs `0..parts` are planned
    /// at the whole axis and filled densely, outputs `parts..2·parts` hold each one's
    /// extent along `axis` (int64 scalars). Sizes that are negative or do not sum to
    /// the axis are a bad index.
    SplitRunTime {
        axis: usize,
        parts: usize,
    },
    /// One of several values picked by an index read at run time (input 0, one
    /// integer in `[-n, n)` for `n = shapes.len()`, negative counting from the end):
    /// candidate `i` is input `1 + i`, of shape `shapes[i]` (all of one rank and
    /// dtype); `None` (an omitted input) marks an index that is invalid, failing like
    /// one out of range. Output 0 is planned at the largest extent of each axis and
    /// holds the pick densely; output 1 (int64 `[rank]`) its shape.
    Choose {
        shapes: Vec<Option<Vec<usize>>>,
    },
    /// The indices of the nonzero elements of x: int64 `[rank, n]`, one column per
    /// element in row-major order (`transposed`: `[n, rank]`, one row per element, what
    /// ONNX's NonZero followed by a Transpose gives). `n` is known only at run time
    /// (see [`Op::counted_outputs`]); output 1 is it, an int64 scalar.
    NonZero {
        transposed: bool,
    },
    /// `Compress(x, condition)`: the slices of x along `axis` (of x flattened when
    /// `None`) whose index has a true condition (a 1-D bool of any length: indices past
    /// it are dropped). Output 1: how many were kept.
    Compress {
        axis: Option<usize>,
    },
    /// The distinct elements of x (of x flattened when `axis` is `None`), or distinct
    /// slices along `axis`: outputs Y, the first index of each in x, the index in Y of
    /// each element (slice) of x, and how often each occurs; sorted ascending
    /// (lexicographically for slices) or in order of first occurrence. Output 4: how
    /// many are distinct.
    Unique {
        axis: Option<usize>,
        sorted: bool,
    },
    /// NonMaxSuppression(boxes [B, N, 4], scores [B, C, N], max_output_boxes_per_class,
    /// iou_threshold, score_threshold; the last three optional scalars): per batch and
    /// class, boxes by descending score (ties to the lower index) above the score
    /// threshold, each kept unless its IoU with a kept one exceeds the threshold, at
    /// most max_output of them; int64 `[n, 3]` rows (batch, class, box). Boxes are
    /// corners `[y1, x1, y2, x2]` (either order) or, `center_point_box`, `[xc, yc, w,
    /// h]`. Output 1: `n`. `per_class` bounds the boxes kept per batch and class (the
    /// box count, or a smaller constant max_output).
    NonMaxSuppression {
        center_point_box: bool,
        per_class: usize,
    },
    /// QuantizeLinear: inputs x (float32), scale, zero point;
    /// `y = saturate(round_half_even(x / scale) + zero_point)` in `to` (u8, i8, u16,
    /// i16). Scale and zero point hold one value, or one per index of `axis` (1-D).
    QuantizeLinear {
        axis: usize,
        to: DType,
    },
    /// DequantizeLinear: inputs x (integer), scale, optional zero point;
    /// `y = (x − zero_point) · scale` in the scale's dtype, per tensor or per `axis`.
    DequantizeLinear {
        axis: usize,
    },
    /// MatMulInteger: numpy matmul of `(A − a_zp)·(B − b_zp)` accumulated in int32;
    /// inputs A, B (u8/i8), optional a_zp (one value, or [M]: per row of A) and b_zp
    /// (one value, or [N]: per column of B).
    MatMulInteger,
    /// ConvInteger: the convolution of `(x − x_zp)` and `(w − w_zp)` in int32; inputs x,
    /// w (u8/i8), optional x_zp (one value) and w_zp (one value, or one per output map).
    ConvInteger(ConvAttrs),
    /// nnc's INT8 convolution input: a float32 `[N, C, H, W]` batch quantized to uint8
    /// in the [`PlaneLayout`] the INT8 convolution kernels read. Inputs x, the
    /// reciprocal of the scale (float32, one value) and the zero point (uint8, one
    /// value); `q = round_half_even(min(max(x · inv_scale + zp, 0), 255))` computed in
    /// float32 (a NaN becomes 0); pad positions hold the zero point.
    QuantizeToPlanes(PlaneLayout),
    /// uint8 `[N, C, H, W]` already quantized (a QDQ model's QuantizeLinear output) laid
    /// out as [`PlaneLayout`] planes; inputs x and its zero point (uint8, one value),
    /// which fills the padding.
    PackPlanes(PlaneLayout),
    /// nnc's INT8 convolution (group 1, or depthwise with weights `[M, 1, kh, kw]`):
    /// inputs the planes of `QuantizeToPlanes`, int8 weights `[M, C, kh, kw]`, int32
    /// bias `[M]`, an optional float32 residual shaped like the output, the float32
    /// output scale `[M]` and the planes' zero point (uint8, one value). The result,
    /// `activation(float32(Σ (q − zp)·w + bias) · scale[m] + residual)`, is float32
    /// `[N, M, Ho, Wo]`; with `requantize`, it is quantized straight into the next
    /// convolution's planes (what `QuantizeToPlanes` would make of it), uint8.
    ConvU8S8 {
        conv: ConvAttrs,
        planes: PlaneLayout,
        requantize: Option<Requantize>,
    },
}

impl Op {
    /// A plain MatMul (no fused epilogue).
    pub fn matmul() -> Op {
        Op::MatMul(MatMulAttrs::default())
    }

    /// The fused activation of a Conv, Gemm or MatMul (`None` for other ops).
    pub fn activation(&self) -> Activation {
        match self {
            Op::Conv(c) => c.activation,
            Op::Gemm(g) => g.activation,
            Op::MatMul(m) => m.activation,
            Op::ConvU8S8 { conv, .. } => conv.activation,
            _ => Activation::None,
        }
    }

    /// Short name for messages and the op histogram.
    /// For an op whose output extents depend on its input values: which outputs have
    /// such an axis, and which output holds that extent (an int64 scalar). Those outputs
    /// are typed at the largest extent possible and stored densely for the actual one.
    pub fn counted_outputs(&self) -> Option<CountedOutputs> {
        let whole_shape = |axes: Vec<usize>| CountedOutputs {
            axes: axes.into_iter().map(|a| (0, a, 1)).collect(),
            whole_shape: true,
        };
        let axes: Vec<(usize, usize, usize)> = match self {
            Op::NonZero { transposed } => vec![(0, usize::from(!transposed), 1)],
            Op::Compress { axis } => vec![(0, axis.unwrap_or(0), 1)],
            Op::Unique { axis, .. } => {
                let a = axis.unwrap_or(0);
                vec![(0, a, 4), (1, 0, 4), (3, 0, 4)]
            }
            Op::NonMaxSuppression { .. } => vec![(0, 0, 1)],
            Op::TopKRunTime { axis, .. } => vec![(0, *axis, 2), (1, *axis, 2)],
            Op::ConcatRows { axis, .. } | Op::FirstRows { axis, .. } => vec![(0, *axis, 1)],
            Op::SplitRunTime { axis, parts } => {
                (0..*parts).map(|k| (k, *axis, parts + k)).collect()
            }
            Op::ReduceRunTimeAxes { varying, .. } | Op::SliceRunTime { varying, .. } => {
                return Some(whole_shape(varying.clone()))
            }
            Op::ReshapeByAxes { shapes, .. } => {
                let varying = infer::varying_axes(shapes.iter().map(|(_, s)| s.as_slice()));
                return Some(whole_shape(varying));
            }
            Op::Choose { shapes } => {
                let varying = infer::varying_axes(shapes.iter().flatten().map(Vec::as_slice));
                return Some(whole_shape(varying));
            }
            _ => return None,
        };
        Some(CountedOutputs {
            axes,
            whole_shape: false,
        })
    }

    /// Whether the op may read a value whose extents only the run knows, its output then
    /// having those extents: elementwise ops of one float input (and Cast) compute over
    /// the whole planned buffer, the part past the actual extents unread, and never trap.
    pub fn passes_run_extent(&self, input: DType) -> bool {
        match self {
            Op::Unary(_) => input.is_float(),
            Op::Cast { .. } => true,
            _ => false,
        }
    }

    pub fn name(&self) -> String {
        match self {
            Op::Unary(u) => format!("{u:?}"),
            Op::Binary(b) => format!("{b:?}"),
            other => {
                let dbg = format!("{other:?}");
                dbg.split(|c: char| !c.is_alphanumeric())
                    .next()
                    .unwrap_or_default()
                    .to_string()
            }
        }
    }
}
