//! A graph compiled for this machine and loaded into the compiler's own process: how
//! calibration runs the float32 model over hundreds of samples at native speed (the
//! interpreter would take minutes for resnet18), and how the accuracy report runs the
//! float32 and the quantized graphs side by side.

use std::ffi::c_void;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::codegen::{compile_graph, CompileOptions, Target, WeightFormat};
use crate::ir::{Graph, Tensor, TensorType};

type InferFn = unsafe extern "C" fn(*const *const c_void, *const *mut c_void) -> i32;

pub struct HostModel {
    /// Kept loaded while `infer` is callable.
    _lib: libloading::Library,
    infer: InferFn,
    outputs: Vec<TensorType>,
}

/// Removes the library file once it is loaded (Linux keeps the mapping).
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl HostModel {
    /// Compiles `graph` for the host CPU and loads it.
    pub fn compile(graph: &Graph) -> Result<HostModel, String> {
        HostModel::compile_with(graph, WeightFormat::F32)
    }

    /// [`HostModel::compile`] with the weights stored as `weights` (`F16`: the
    /// `--quantize fp16` artifact).
    pub fn compile_with(graph: &Graph, weights: WeightFormat) -> Result<HostModel, String> {
        let opts = CompileOptions {
            target: Target::host(),
            prefix: String::new(),
            weights,
            kernels: Default::default(),
        };
        let obj = compile_graph(graph, &opts).map_err(|e| e.to_string())?;
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "nnc-host-{}-{}.so",
            std::process::id(),
            COUNT.fetch_add(1, Ordering::Relaxed)
        );
        let so =
            crate::artifact::link_shared_object(&obj.object, &name).map_err(|e| e.to_string())?;
        let file = TempFile(std::env::temp_dir().join(name));
        std::fs::write(&file.0, so).map_err(|e| format!("{}: {e}", file.0.display()))?;
        // SAFETY: the library is nnc's own output, with no initializers.
        let lib = unsafe { libloading::Library::new(&file.0) }.map_err(|e| e.to_string())?;
        // SAFETY: `infer` has this signature in every nnc artifact; the pointer lives as
        // long as `lib`, which the model owns.
        let infer = *unsafe { lib.get::<InferFn>(b"infer\0") }.map_err(|e| e.to_string())?;
        Ok(HostModel {
            _lib: lib,
            infer,
            outputs: graph.outputs.iter().map(|o| graph.ty(*o).clone()).collect(),
        })
    }

    /// One call of `infer` on `inputs` (in the graph's input order).
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, String> {
        let in_bytes: Vec<Vec<u8>> = inputs.iter().map(Tensor::to_le_bytes).collect();
        let mut out_bytes: Vec<Vec<u8>> = self
            .outputs
            .iter()
            .map(|t| vec![0u8; t.byte_size()])
            .collect();
        let in_ptrs: Vec<*const c_void> = in_bytes.iter().map(|b| b.as_ptr().cast()).collect();
        let out_ptrs: Vec<*mut c_void> = out_bytes
            .iter_mut()
            .map(|b| b.as_mut_ptr().cast())
            .collect();
        // SAFETY: one buffer of the declared size per input and output.
        let status = unsafe { (self.infer)(in_ptrs.as_ptr(), out_ptrs.as_ptr()) };
        if status != 0 {
            return Err(format!("infer returned {status}"));
        }
        self.outputs
            .iter()
            .zip(&out_bytes)
            .map(|(t, b)| Tensor::from_le_bytes(t, b).ok_or_else(|| format!("output {t}")))
            .collect()
    }
}
