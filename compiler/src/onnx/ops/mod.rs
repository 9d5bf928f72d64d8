//! One importer per ONNX op family, and the registry that maps op types onto them.

mod affine_grid;
mod attention;
mod build;
mod composite;
mod control_flow;
mod deform_conv;
mod einsum;
mod elementwise;
mod fold;
mod gradient;
mod grid_sample;
mod indexing;
mod linalg;
mod loss;
mod low_precision;
mod max_roi_pool;
mod ml;
mod nn;
mod normalization;
mod optional;
mod pool_indices;
mod quant;
mod recurrent;
mod reduce;
pub(in crate::onnx) mod resize;
mod resize_antialias;
mod roi_align;
mod rotary;
mod sequence;
mod shape;
mod spectral;
mod stateful;
mod tfidf;
mod training;
mod tree_ensemble;
mod value_dependent;
mod window;

use super::import::{ImportResult, NodeCtx};

pub type Importer = fn(&mut NodeCtx) -> ImportResult;

/// The importer for an op of onnxruntime's `com.microsoft` domain, if nnc supports it:
/// the quantized ops of onnxruntime's QOperator format that its quantizer writes
/// between QLinearConv / QLinearMatMul layers.
pub fn microsoft_importer(op_type: &str) -> Option<Importer> {
    let f: Importer = match op_type {
        "QLinearAdd" | "QLinearMul" => quant::qlinear_binary,
        "QLinearGlobalAveragePool" => quant::qlinear_global_average_pool,
        _ => return None,
    };
    Some(f)
}

/// Ops nnc lacks whose output shape depends on the values of their inputs (not only
/// on their shapes), refused by that reason.
pub fn has_value_dependent_shape(op_type: &str) -> bool {
    op_type == "StringSplit"
}

/// The importer for an op of the `ai.onnx.preview` domain, if nnc supports it.
pub fn preview_importer(op_type: &str) -> Option<Importer> {
    let f: Importer = match op_type {
        "FlexAttention" => attention::flex_attention,
        _ => return None,
    };
    Some(f)
}

/// The importer for an op of the `ai.onnx.preview.training` domain, if nnc supports
/// it: the optimizer update rules (inference-style graphs that apply one step).
pub fn training_importer(op_type: &str) -> Option<Importer> {
    let f: Importer = match op_type {
        "Adagrad" => training::adagrad,
        "Adam" => training::adam,
        "Momentum" => training::momentum,
        "Gradient" => gradient::gradient,
        _ => return None,
    };
    Some(f)
}

/// The importer for an op of the `ai.onnx.ml` domain, if nnc supports it.
pub fn ml_importer(op_type: &str) -> Option<Importer> {
    let f: Importer = match op_type {
        "Binarizer" => ml::binarizer,
        "ArrayFeatureExtractor" => ml::array_feature_extractor,
        "TreeEnsemble" => tree_ensemble::tree_ensemble,
        _ => return None,
    };
    Some(f)
}

/// The importer for an ONNX op type of the default domain, if nnc supports it.
pub fn importer(op_type: &str) -> Option<Importer> {
    let f: Importer = match op_type {
        "Identity" => optional::identity,
        "Optional" => optional::optional,
        "OptionalHasElement" => optional::optional_has_element,
        "OptionalGetElement" => optional::optional_get_element,
        "SequenceMap" => sequence::sequence_map,
        "Relu" | "LeakyRelu" | "Sigmoid" | "HardSigmoid" | "HardSwish" | "Tanh" | "Exp" | "Log"
        | "Sqrt" | "Reciprocal" | "Neg" | "Abs" | "Erf" | "Gelu" | "Softplus" | "Softsign"
        | "Elu" | "Selu" | "Celu" | "ThresholdedRelu" | "Mish" | "Floor" | "Ceil" | "Round"
        | "Sign" | "Sin" | "Cos" | "Tan" | "Asin" | "Acos" | "Atan" | "Sinh" | "Cosh" | "Asinh"
        | "Acosh" | "Atanh" | "Not" | "BitwiseNot" | "IsNaN" | "IsInf" | "Clip" => {
            elementwise::unary
        }
        "Add" | "Sub" | "Mul" | "Div" | "Pow" | "Mod" | "PRelu" | "Equal" | "Less"
        | "LessOrEqual" | "Greater" | "GreaterOrEqual" | "And" | "Or" | "Xor" | "BitShift"
        | "BitwiseAnd" | "BitwiseOr" | "BitwiseXor" => elementwise::binary,
        "Sum" | "Mean" | "Max" | "Min" => elementwise::variadic,
        "Where" => elementwise::where_op,
        "Cast" | "CastLike" => elementwise::cast,
        "BitCast" => elementwise::bit_cast,
        "Conv" => nn::conv,
        "ConvTranspose" => nn::conv_transpose,
        "MaxPool" | "AveragePool" | "LpPool" | "GlobalMaxPool" | "GlobalAveragePool"
        | "GlobalLpPool" => nn::pool,
        "Gemm" => nn::gemm,
        "MatMul" => nn::matmul,
        "BatchNormalization" => nn::batch_norm,
        "LayerNormalization" => nn::layer_norm,
        "RMSNormalization" => nn::rms_norm,
        "InstanceNormalization" => normalization::instance_norm,
        "GroupNormalization" => normalization::group_norm,
        "MeanVarianceNormalization" => normalization::mean_variance_norm,
        "LRN" => normalization::lrn,
        "Softmax" | "LogSoftmax" => nn::softmax,
        "Attention" => attention::attention,
        "RNN" => recurrent::rnn,
        "GRU" => recurrent::gru,
        "LSTM" => recurrent::lstm,
        "Einsum" => einsum::einsum,
        "Dropout" => nn::dropout,
        "ReduceSum" | "ReduceMean" | "ReduceMax" | "ReduceMin" | "ReduceProd" | "ReduceL1"
        | "ReduceL2" | "ReduceLogSum" | "ReduceLogSumExp" | "ReduceSumSquare" => reduce::reduce,
        "ArgMax" | "ArgMin" => reduce::arg_reduce,
        "Reshape" => shape::reshape,
        "Flatten" => shape::flatten,
        "Squeeze" => shape::squeeze,
        "Unsqueeze" => shape::unsqueeze,
        "Transpose" => shape::transpose,
        "Concat" => shape::concat,
        "Split" => shape::split,
        "Slice" => shape::slice,
        "Gather" => shape::gather,
        "Expand" => shape::expand,
        "Tile" => shape::tile,
        "DepthToSpace" | "SpaceToDepth" => shape::depth_space,
        "Pad" => shape::pad,
        "Shape" => shape::shape_of,
        "Size" => shape::size_of,
        "ConstantOfShape" => shape::constant_of_shape,
        "Range" => shape::range,
        "Constant" => shape::constant,
        "Resize" | "Upsample" => resize::resize,
        "GatherElements" => indexing::gather_elements,
        "ScatterElements" | "Scatter" => indexing::scatter_elements,
        "ScatterND" => indexing::scatter_nd,
        "GatherND" => indexing::gather_nd,
        "CumSum" | "CumProd" => indexing::cumsum,
        "DFT" => spectral::dft,
        "TfIdfVectorizer" => tfidf::tfidf_vectorizer,
        "SequenceEmpty" => sequence::sequence_empty,
        "SequenceConstruct" => sequence::sequence_construct,
        "SequenceInsert" => sequence::sequence_insert,
        "SequenceErase" => sequence::sequence_erase,
        "SequenceAt" => sequence::sequence_at,
        "SequenceLength" => sequence::sequence_length,
        "ConcatFromSequence" => sequence::concat_from_sequence,
        "SplitToSequence" => sequence::split_to_sequence,
        "Col2Im" => fold::col2im,
        "GridSample" => grid_sample::grid_sample,
        "DeformConv" => deform_conv::deform_conv,
        "MaxRoiPool" => max_roi_pool::max_roi_pool,
        "RoiAlign" => roi_align::roi_align,
        "CausalConvWithState" => stateful::causal_conv_with_state,
        "LinearAttention" => stateful::linear_attention,
        "STFT" => spectral::stft,
        "MelWeightMatrix" => spectral::mel_weight_matrix,
        "TopK" => indexing::top_k,
        "NonZero" => value_dependent::non_zero,
        "Compress" => value_dependent::compress,
        "Unique" => value_dependent::unique,
        "NonMaxSuppression" => value_dependent::non_max_suppression,
        "TensorScatter" => indexing::tensor_scatter,
        "ReverseSequence" => indexing::reverse_sequence,
        "MaxUnpool" => indexing::max_unpool,
        "AffineGrid" => affine_grid::affine_grid,
        "Det" => linalg::det,
        "RotaryEmbedding" => rotary::rotary_embedding,
        "NegativeLogLikelihoodLoss" => loss::nll_loss,
        "SoftmaxCrossEntropyLoss" => loss::softmax_cross_entropy,
        "Trilu" => composite::trilu,
        "Hardmax" => composite::hardmax,
        "OneHot" => composite::one_hot,
        "LpNormalization" => composite::lp_normalization,
        "Swish" => composite::swish,
        "SwiGLU" => composite::swiglu,
        "Shrink" => composite::shrink,
        "EyeLike" => composite::eye_like,
        "CenterCropPad" => composite::center_crop_pad,
        "HannWindow" | "HammingWindow" | "BlackmanWindow" => window::window,
        "QuantizeLinear" => quant::quantize_linear,
        "DequantizeLinear" => quant::dequantize_linear,
        "MatMulInteger" => quant::matmul_integer,
        "ConvInteger" => quant::conv_integer,
        "QLinearMatMul" => quant::qlinear_matmul,
        "QLinearConv" => quant::qlinear_conv,
        "DynamicQuantizeLinear" => quant::dynamic_quantize_linear,
        "If" => control_flow::if_op,
        "Loop" => control_flow::loop_op,
        "Scan" => control_flow::scan,
        _ => return None,
    };
    Some(f)
}
