//! One-sample libraries with dims set at run time, for the tests: models with named
//! dims, their import with a range or at one value, and the library's raw entry points
//! (`run` with dims, `shapes`) on fenced inputs and guarded outputs.
//!
//! Include beside `models.rs`, `runner.rs` and `tools.rs`:
//! `#[path = "common/dynamic.rs"] mod dynamic;`.

#![allow(dead_code)] // each test crate uses a different subset

use std::ffi::c_void;

use crate::models::{self, ModelBuilder};
use crate::{runner, tools};
use nnc::codegen::options::KernelOptions;
use nnc::codegen::Target;
use nnc::ir::{Graph, Tensor};
use nnc::onnx::proto::{tensor_shape_proto, type_proto, ModelProto};
use nnc::onnx::ranges::{DimRange, DimSite};
use nnc::onnx::{import_model, ImportOptions};
use nnc_runtime_abi::{
    NncModelInfo, NncRunOptions, NncThreadPool, RunFn, ShapesFn, WorkspaceSizeFn,
};
use prost::Message;

/// Names axis `axis` of graph input `input` `param` (an ONNX `dim_param`).
pub fn symbolic(m: &mut ModelBuilder, input: &str, axis: usize, param: &str) {
    let vi = m.graph.input.iter_mut().find(|i| i.name == input).unwrap();
    let Some(type_proto::Value::TensorType(t)) = vi.r#type.as_mut().unwrap().value.as_mut() else {
        unreachable!()
    };
    t.shape.as_mut().unwrap().dim[axis].value =
        Some(tensor_shape_proto::dimension::Value::DimParam(param.into()));
}

pub fn decode(bytes: &[u8]) -> ModelProto {
    ModelProto::decode(bytes).unwrap()
}

pub fn with_range(name: &str, min: usize, max: usize) -> ImportOptions {
    ImportOptions {
        ranges: vec![DimRange {
            name: name.into(),
            min,
            max,
            site: DimSite::Param,
        }],
        ..Default::default()
    }
}

pub fn import(model: &ModelProto, opts: &ImportOptions) -> nnc::error::Result<Graph> {
    let imported = import_model(model, None, opts)?;
    if !imported.unsupported.is_empty() {
        return Err(nnc::error::NncError::Unsupported(imported.unsupported));
    }
    Ok(nnc::driver::prepare_graph(
        imported.graph,
        &nnc::passes::PassManager::default(),
    )?)
}

/// The model imported with `param` fixed at `value`.
pub fn static_at(model: &ModelProto, param: &str, value: usize) -> Graph {
    let mut opts = ImportOptions::default();
    opts.dims.insert(param.into(), value);
    import(model, &opts).unwrap()
}

/// Random inputs for `g` (ids below 50, an int64 `mask` of 0 and 1), as the static graph at
/// some value shapes them.
pub fn inputs_for(g: &Graph, seed: u64) -> Vec<Tensor> {
    let mut rng = models::Rng::new(seed);
    g.inputs
        .iter()
        .map(|v| {
            let ty = g.ty(*v);
            match ty.dtype {
                // A padding mask: mostly 1 (attend), some 0.
                nnc::ir::DType::I64 if g.value(*v).name == "mask" => Tensor::from_vec(
                    &ty.shape,
                    (0..ty.numel())
                        .map(|_| i64::from(rng.below(4) != 0))
                        .collect(),
                ),
                nnc::ir::DType::I64 => Tensor::from_vec(
                    &ty.shape,
                    (0..ty.numel()).map(|_| rng.below(50) as i64).collect(),
                ),
                _ => Tensor::from_vec(&ty.shape, rng.vec(ty.numel(), 1.0)),
            }
        })
        .collect()
}

/// Bytes that end where an inaccessible page begins: a read past them faults.
pub struct FencedBytes {
    base: *mut c_void,
    len: usize,
    at: usize,
}

impl FencedBytes {
    pub fn new(bytes: &[u8]) -> FencedBytes {
        let page = 4096;
        let body = bytes.len().next_multiple_of(page).max(page);
        let len = body + page;
        // SAFETY: a fresh private anonymous mapping, written only within `body`.
        unsafe {
            let base = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(base, libc::MAP_FAILED);
            assert_eq!(
                libc::mprotect(base.cast::<u8>().add(body).cast(), page, libc::PROT_NONE),
                0
            );
            let at = body - bytes.len();
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), base.cast::<u8>().add(at), bytes.len());
            FencedBytes { base, len, at }
        }
    }

    pub fn as_ptr(&self) -> *const u8 {
        // SAFETY: `at` is within the mapping.
        unsafe { self.base.cast::<u8>().add(self.at) }
    }
}

impl Drop for FencedBytes {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// A compiled one-sample library and the raw entry points of ABI 4.
pub struct Dynamic {
    pub compiled: runner::Compiled,
    pub graph: Graph,
}

pub const GUARD: usize = 64;
pub const SENTINEL: u8 = 0x5C;

impl Dynamic {
    pub fn new(graph: Graph) -> Dynamic {
        Dynamic::try_new(graph).unwrap()
    }

    /// The library, or code generation's refusal.
    pub fn try_new(graph: Graph) -> Result<Dynamic, String> {
        Ok(Dynamic {
            compiled: runner::Compiled::new(&graph)?,
            graph,
        })
    }

    /// Compiled for `target` (which the host must run) with `kernels`' choices.
    pub fn for_target(graph: Graph, target: Target, kernels: KernelOptions) -> Dynamic {
        let mut opts = runner::options(target);
        opts.kernels = kernels;
        Dynamic {
            compiled: runner::Compiled::with_options(&graph, &opts).unwrap(),
            graph,
        }
    }

    pub fn lib(&self) -> libloading::Library {
        unsafe { libloading::Library::new(self.compiled.library_path()) }.unwrap()
    }

    pub fn info(&self, lib: &libloading::Library) -> NncModelInfo {
        let f =
            unsafe { lib.get::<unsafe extern "C" fn() -> *const NncModelInfo>(b"model_info\0") }
                .unwrap();
        unsafe { *f() }
    }

    /// Calls `run` with `dims` (and `pool`) on `inputs` (each ending at an inaccessible
    /// page); returns the status and the outputs sized by `shapes(dims)`, each followed
    /// by guard bytes checked intact.
    pub fn run(
        &self,
        dims: Option<&[i64]>,
        inputs: &[Tensor],
        pool: Option<&NncThreadPool>,
        out_shapes: &[Vec<usize>],
    ) -> (i32, Vec<Tensor>) {
        let lib = self.lib();
        let run = unsafe { lib.get::<RunFn>(b"run\0") }.unwrap();
        let size = unsafe { lib.get::<WorkspaceSizeFn>(b"workspace_size\0") }.unwrap();
        let mut options = NncRunOptions::new(pool, 0);
        if let Some(d) = dims {
            options = options.with_dims(d);
        }
        let bytes = unsafe { size(&options) } as usize;
        let mut ws = vec![0u8; bytes + 64];
        let pad = ws.as_ptr().align_offset(64);
        let in_bytes: Vec<FencedBytes> = inputs
            .iter()
            .map(|t| FencedBytes::new(&t.to_le_bytes()))
            .collect();
        let types: Vec<nnc::ir::TensorType> = (self.graph.outputs.iter().zip(out_shapes))
            .map(|(o, s)| nnc::ir::TensorType::new(self.graph.ty(*o).dtype, s.clone()))
            .collect();
        let mut out_bytes: Vec<Vec<u8>> = types
            .iter()
            .map(|t| vec![SENTINEL; t.byte_size() + GUARD])
            .collect();
        let ins: Vec<*const c_void> = in_bytes.iter().map(|b| b.as_ptr().cast()).collect();
        let outs: Vec<*mut c_void> = out_bytes
            .iter_mut()
            .map(|b| b.as_mut_ptr().cast())
            .collect();
        let status = unsafe {
            run(
                ins.as_ptr(),
                outs.as_ptr(),
                ws.as_mut_ptr().add(pad).cast(),
                &options,
            )
        };
        for (b, t) in out_bytes.iter().zip(&types) {
            assert!(
                b[t.byte_size()..].iter().all(|&x| x == SENTINEL),
                "run wrote past the end of an output"
            );
        }
        let outputs = types
            .iter()
            .zip(&out_bytes)
            .map(|(t, b)| Tensor::from_le_bytes(t, &b[..t.byte_size()]).unwrap())
            .collect();
        (status, outputs)
    }

    /// `shapes(dims)`: the status and every input's then output's shape.
    pub fn shapes(&self, dims: Option<&[i64]>) -> (i32, Vec<Vec<usize>>) {
        let lib = self.lib();
        let f = unsafe { lib.get::<ShapesFn>(b"shapes\0") }.unwrap();
        let ranks: Vec<usize> = (self.graph.inputs.iter().chain(&self.graph.outputs))
            .map(|v| self.graph.ty(*v).rank())
            .collect();
        let mut out = vec![-7i64; ranks.iter().sum()];
        let status = unsafe {
            f(
                dims.map_or(std::ptr::null(), |d| d.as_ptr()),
                out.as_mut_ptr(),
            )
        };
        let mut at = 0;
        let shapes = ranks
            .iter()
            .map(|&r| {
                at += r;
                out[at - r..at].iter().map(|&d| d as usize).collect()
            })
            .collect();
        (status, shapes)
    }

    pub fn output_shapes(&self, k: i64) -> Vec<Vec<usize>> {
        let (status, shapes) = self.shapes(Some(&[k]));
        assert_eq!(status, 0);
        shapes[self.graph.inputs.len()..].to_vec()
    }
}

pub fn assert_close(expected: &[Tensor], actual: &[Tensor], what: &str) {
    assert_eq!(expected.len(), actual.len());
    for (e, a) in expected.iter().zip(actual) {
        assert_eq!(e.shape(), a.shape(), "{what}: shapes");
        for (x, y) in e.to_f64_vec().iter().zip(a.to_f64_vec()) {
            assert!(
                (x - y).abs() <= 1e-4 + 1e-3 * x.abs(),
                "{what}: expected {x}, got {y}"
            );
        }
    }
}

/// Runs `lib` at each `(size, seed)` and compares it with the interpreter on the model
/// imported at that size (`label` names the library in failures).
pub fn check_sizes(lib: &Dynamic, model: &ModelProto, sizes: &[(usize, u64)], label: &str) {
    for &(s, seed) in sizes {
        let reference = static_at(model, "size", s);
        let inputs = inputs_for(&reference, seed);
        let expected = nnc::interp::run_graph(&reference, &inputs).unwrap();
        let (status, shapes) = lib.shapes(Some(&[s as i64]));
        assert_eq!(status, 0);
        let (status, got) = lib.run(Some(&[s as i64]), &inputs, None, &shapes[1..]);
        assert_eq!(status, 0, "size={s}");
        assert_close(
            &expected,
            &got,
            &format!("{label} size={s} vs the interpreter"),
        );
    }
}

/// The targets a test of machine-code kernels runs on: the host and every x86-64
/// family below it the host runs (AVX-512: zmm and ymm kernels; AVX2: ymm; baseline:
/// Cranelift's).
pub fn host_and_lower_families() -> Vec<(String, Target)> {
    let mut targets = vec![("host".to_string(), Target::host())];
    if cfg!(target_arch = "x86_64") {
        for cpu in ["x86-64-v3", "baseline"] {
            if tools::host_runs(cpu) {
                let t = Target::new(nnc::codegen::Arch::X86_64, Some(cpu)).unwrap();
                targets.push((cpu.to_string(), t));
            }
        }
    }
    targets
}
