//! The compiler core's [`HostRunner`] over nnc-runtime-abi's loader: the graph is
//! compiled for this machine ([`nnc::quant::host::shared_library`]), written to a
//! temporary file, opened with [`Library::open`] (which checks the ABI version and every
//! buffer against `model_info`) and called through `infer_with_workspace`. Calibration,
//! the INT8 accuracy report, `nnc run`/`verify` and the conformance runner all run
//! models this one way.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use nnc::codegen::{CompileOptions, Target, WeightFormat};
use nnc::ir::{Graph, Tensor, TensorType};
use nnc::quant::host::{shared_library, HostError, HostModel, HostRunner};
use nnc_runtime_abi::loader::{self, Library, Workspace};

/// Loads graphs with nnc-runtime-abi's loader.
#[derive(Clone, Copy, Debug, Default)]
pub struct LoaderRunner;

impl HostRunner for LoaderRunner {
    fn load(&self, graph: &Graph, weights: WeightFormat) -> Result<Box<dyn HostModel>, HostError> {
        Ok(Box::new(LoadedModel::compile_with(graph, weights)?))
    }
}

/// A graph compiled for this machine and loaded into the process.
pub struct LoadedModel {
    library: Library,
    /// One call at a time: the workspace is the model's only mutable state.
    workspace: Mutex<Workspace>,
    outputs: Vec<TensorType>,
}

/// Removes the library file once it is loaded (Linux keeps the mapping).
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl LoadedModel {
    /// Compiles `graph` for the host CPU and loads it.
    pub fn compile(graph: &Graph) -> Result<LoadedModel, HostError> {
        LoadedModel::compile_with(graph, WeightFormat::F32)
    }

    /// [`LoadedModel::compile`] with the weights stored as `weights` (`F16`: the
    /// `--quantize fp16` artifact).
    pub fn compile_with(graph: &Graph, weights: WeightFormat) -> Result<LoadedModel, HostError> {
        let opts = CompileOptions {
            weights,
            ..CompileOptions::new(Target::host())
        };
        LoadedModel::compile_with_options(graph, &opts)
    }

    /// `graph` compiled with `opts` (whose target this machine must run) and loaded.
    pub fn compile_with_options(
        graph: &Graph,
        opts: &CompileOptions,
    ) -> Result<LoadedModel, HostError> {
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "nnc-host-{}-{}.so",
            std::process::id(),
            COUNT.fetch_add(1, Ordering::Relaxed)
        );
        let so = shared_library(graph, opts, &name)?;
        let file = TempFile(std::env::temp_dir().join(name));
        std::fs::write(&file.0, so)
            .map_err(|e| HostError::Load(format!("{}: {e}", file.0.display()).into()))?;
        let library = Library::open(&file.0, None).map_err(|e| HostError::Load(e.into()))?;
        let workspace = library.try_workspace().ok_or_else(|| {
            HostError::Load(
                format!(
                    "the library's workspace ({} bytes) does not fit in memory",
                    library.workspace_size()
                )
                .into(),
            )
        })?;
        let workspace = Mutex::new(workspace);
        Ok(LoadedModel {
            library,
            workspace,
            outputs: graph.outputs.iter().map(|o| graph.ty(*o).clone()).collect(),
        })
    }

    /// One call on `inputs` (in the graph's input order). A model with symbolic dims
    /// runs for the values the inputs' shapes give; its outputs are shaped for them.
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, HostError> {
        let run_err = |e: loader::Error| HostError::Run(e.into());
        let dims = if self.library.dims().is_empty() {
            vec![]
        } else {
            let shapes: Vec<&[usize]> = inputs.iter().map(Tensor::shape).collect();
            self.library.dims_of(&shapes).map_err(run_err)?
        };
        let out_types: Vec<TensorType> = if dims.is_empty() {
            self.outputs.clone()
        } else {
            let (_, outs) = self.library.shapes_for(&dims).map_err(run_err)?;
            (self.outputs.iter().zip(outs))
                .map(|(t, d)| TensorType::new(t.dtype, d.shape))
                .collect()
        };
        let fits = |e: String| HostError::Run(e.into());
        let mut in_bytes = Vec::with_capacity(inputs.len());
        for (i, t) in inputs.iter().enumerate() {
            let what = || format!("the bytes of input {i} ({})", t.ty());
            nnc::memory::check_fits(t.ty().byte_size(), &what).map_err(fits)?;
            in_bytes.push(t.to_le_bytes());
        }
        let mut out_bytes = Vec::with_capacity(out_types.len());
        for (i, t) in out_types.iter().enumerate() {
            let what = || format!("output {i} ({t})");
            out_bytes.push(nnc::memory::zeroed_bytes(t.byte_size(), &what).map_err(fits)?);
        }
        let ins: Vec<loader::Tensor> = in_bytes.iter().map(|b| loader::Tensor::bytes(b)).collect();
        let mut outs: Vec<loader::TensorMut> = out_bytes
            .iter_mut()
            .map(|b| loader::TensorMut::bytes(b))
            .collect();
        let mut workspace = self
            .workspace
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // An output whose extent the values decide fills the front of its buffer.
        let out_types = if !self.library.bounded_axes().is_empty() {
            let shapes = (self.library)
                .run_shaped(None, &mut workspace, &dims, &ins, &mut outs)
                .map_err(run_err)?;
            (out_types.iter().zip(shapes))
                .map(|(t, s)| TensorType::new(t.dtype, s))
                .collect()
        } else if dims.is_empty() {
            self.library
                .run(&mut workspace, &ins, &mut outs)
                .map_err(run_err)?;
            out_types
        } else {
            (self.library)
                .run_dims(None, &mut workspace, &dims, &ins, &mut outs)
                .map_err(run_err)?;
            out_types
        };
        drop(outs);
        out_types
            .iter()
            .zip(&out_bytes)
            .map(|(t, b)| {
                let what = || format!("the tensor of output {t}");
                nnc::memory::check_fits(t.byte_size(), &what).map_err(fits)?;
                Tensor::from_le_bytes(t, &b[..t.byte_size()])
                    .ok_or_else(|| HostError::Run(format!("output {t}").into()))
            })
            .collect()
    }
}

impl HostModel for LoadedModel {
    fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, HostError> {
        LoadedModel::run(self, inputs)
    }
}
