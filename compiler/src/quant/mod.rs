//! Quantization beyond FP16 storage (which lives in code generation,
//! `codegen::lower::f16_weights`): the inputs and, as it lands, the passes of static
//! INT8 post-training quantization.

pub mod calibration_data;
pub mod ranges;
