//! Quantization beyond FP16 storage (which lives in code generation,
//! `codegen::lower::f16_weights`): the inputs and, as it lands, the passes of static
//! INT8 post-training quantization.

pub mod bias_correction;
pub mod calibrate;
pub mod host;
pub mod int8;
pub mod pipeline;
pub mod ranges;
pub mod requantize;
pub mod sensitivity;

use host::HostError;

/// Why `--quantize int8` failed.
#[derive(Debug, thiserror::Error)]
pub enum QuantError {
    /// The calibration samples could not be read or do not fit the model's inputs.
    #[error("{0}")]
    Calibration(host::BoxError),
    /// A graph could not be compiled, loaded or run on this machine; `context` says
    /// which graph.
    #[error("{context}: {source}")]
    Host {
        context: String,
        #[source]
        source: HostError,
    },
    /// The INT8 rewrite of the graph failed.
    #[error("{0}")]
    Rewrite(String),
}

impl QuantError {
    fn host(context: impl Into<String>, source: HostError) -> QuantError {
        QuantError::Host {
            context: context.into(),
            source,
        }
    }
}
