//! Quantization beyond FP16 storage (which lives in code generation,
//! `codegen::lower::f16_weights`): the inputs and, as it lands, the passes of static
//! INT8 post-training quantization.

pub mod bias_correction;
pub mod calibrate;
pub mod calibration_data;
pub mod host_model;
pub mod int8;
pub mod pipeline;
pub mod ranges;
pub mod requantize;
pub mod sensitivity;
