//! Running graphs on this machine, which INT8 calibration and its accuracy report
//! need (the interpreter would take minutes over hundreds of resnet18 samples), and
//! the calibration samples themselves.
//!
//! The core compiles a graph for the host CPU ([`host_library`]); loading and calling
//! the library ([`HostRunner`]) and reading sample files ([`CalibrationSource`]) are
//! implemented outside it (the `nnc-host` crate, over nnc-runtime-abi's loader), so the
//! compiler library itself never dlopens a file or parses `.npy`/`.npz` archives.

use std::error::Error;

use crate::codegen::{compile_graph, CompileOptions, Target, WeightFormat};
use crate::error::NncError;
use crate::ir::{Graph, Tensor, TensorType};
use crate::progress::Progress;

/// Boxed errors of the implementations outside the core.
pub type BoxError = Box<dyn Error + Send + Sync>;

/// Why a graph could not be run on this machine.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// Code generation or linking failed.
    #[error(transparent)]
    Compile(Box<NncError>),
    /// The library could not be written or loaded.
    #[error("{0}")]
    Load(BoxError),
    /// A call failed (buffers that do not fit, an error code).
    #[error("{0}")]
    Run(BoxError),
}

impl From<NncError> for HostError {
    fn from(e: NncError) -> HostError {
        HostError::Compile(Box::new(e))
    }
}

/// Compiles graphs for this machine and loads them into the process.
pub trait HostRunner {
    /// `graph` compiled for the host CPU with its weights stored as `weights`, loaded
    /// and ready to run.
    fn load(&self, graph: &Graph, weights: WeightFormat) -> Result<Box<dyn HostModel>, HostError>;
}

/// A graph loaded by a [`HostRunner`].
pub trait HostModel {
    /// One call on `inputs` (the graph's inputs, in order); returns its outputs.
    fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, HostError>;
}

/// `graph` compiled for the host CPU and linked into a shared object whose file name
/// will be `file_name`: the library a [`HostRunner`] loads. Its symbols have no prefix.
pub fn host_library(
    graph: &Graph,
    weights: WeightFormat,
    file_name: &str,
) -> Result<Vec<u8>, NncError> {
    let opts = CompileOptions {
        weights,
        ..CompileOptions::new(Target::host())
    };
    shared_library(graph, &opts, file_name)
}

/// `graph` compiled with `opts` and linked into a shared object whose file name will be
/// `file_name`.
pub fn shared_library(
    graph: &Graph,
    opts: &CompileOptions,
    file_name: &str,
) -> Result<Vec<u8>, NncError> {
    let obj = compile_graph(graph, opts)?;
    crate::artifact::link_shared_object(&obj.object, file_name).map_err(|e| NncError::Artifact {
        kind: file_name.to_string(),
        message: e.to_string(),
    })
}

/// One model input calibration samples are for.
#[derive(Clone, Debug)]
pub struct InputSpec {
    pub name: String,
    pub ty: TensorType,
}

/// Where INT8 calibration samples come from (`--calibration PATH`).
pub trait CalibrationSource {
    /// Every sample, each one tensor per input of `inputs`, in order. Errors name the
    /// file and the input.
    fn samples(&self, inputs: &[InputSpec]) -> Result<Vec<Vec<Tensor>>, BoxError>;
}

/// What INT8 quantization needs from its caller: the samples, a way to run graphs on
/// this machine, and where to report progress.
#[derive(Clone, Copy)]
pub struct Int8Host<'a> {
    pub calibration: &'a dyn CalibrationSource,
    pub runner: &'a dyn HostRunner,
    pub progress: &'a dyn Progress,
}
