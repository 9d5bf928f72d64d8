//! Runs IR graphs compiled by nnc: natively (link a .so, dlopen, call `infer`) or on
//! aarch64 under qemu through the C harness `tests/harness/nnc_run.c`.
//!
//! Include beside `tools.rs`:
//! `#[path = "common/tools.rs"] mod tools;` and `#[path = "common/runner.rs"] mod runner;`.

#![allow(dead_code)] // each test crate uses a different subset

use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Instant;

use nnc::codegen::{compile_graph, Arch, CompileOptions, Target};
use nnc::ir::{Graph, Tensor};

use crate::tools;

type InferFn = unsafe extern "C" fn(*const *const c_void, *const *mut c_void) -> i32;

pub fn options(target: Target) -> CompileOptions {
    CompileOptions {
        target,
        prefix: String::new(),
        weights: Default::default(),
        kernels: Default::default(),
        index_checks: Default::default(),
    }
}

/// `g` compiled into a .so with `opts` and written to `dir/libtest.so`.
pub fn write_library(g: &Graph, opts: &CompileOptions, dir: &Path) -> Result<PathBuf, String> {
    let obj = compile_graph(g, opts).map_err(|e| e.to_string())?;
    let so =
        nnc::artifact::link_shared_object(&obj.object, "libtest.so").map_err(|e| e.to_string())?;
    let path = dir.join("libtest.so");
    std::fs::write(&path, so).map_err(|e| e.to_string())?;
    Ok(path)
}

/// A compiled graph, linked and loaded from a temporary directory.
pub struct Compiled {
    _dir: tempfile::TempDir,
    lib: libloading::Library,
}

/// The caller's buffers for one call: inputs as bytes, zeroed outputs.
struct Buffers {
    inputs: Vec<Vec<u8>>,
    /// Each output followed by [`GUARD`] bytes of [`GUARD_BYTE`], so a kernel that
    /// stores past the end of an output (a missing tail mask) fails the test instead of
    /// corrupting memory silently.
    outputs: Vec<Vec<u8>>,
    sizes: Vec<usize>,
}

const GUARD: usize = 256;
const GUARD_BYTE: u8 = 0xA5;

impl Buffers {
    fn new(g: &Graph, inputs: &[Tensor]) -> Buffers {
        Buffers {
            inputs: inputs.iter().map(Tensor::to_le_bytes).collect(),
            outputs: g
                .outputs
                .iter()
                .map(|o| {
                    let mut b = vec![0u8; g.ty(*o).byte_size()];
                    b.resize(b.len() + GUARD, GUARD_BYTE);
                    b
                })
                .collect(),
            sizes: g.outputs.iter().map(|o| g.ty(*o).byte_size()).collect(),
        }
    }

    /// The outputs whose guard bytes were overwritten.
    fn overruns(&self) -> Vec<usize> {
        (0..self.outputs.len())
            .filter(|&i| {
                self.outputs[i][self.sizes[i]..]
                    .iter()
                    .any(|&b| b != GUARD_BYTE)
            })
            .collect()
    }

    fn call(&mut self, infer: InferFn) -> i32 {
        let ins: Vec<*const c_void> = self.inputs.iter().map(|b| b.as_ptr().cast()).collect();
        let outs: Vec<*mut c_void> = self
            .outputs
            .iter_mut()
            .map(|b| b.as_mut_ptr().cast())
            .collect();
        unsafe { infer(ins.as_ptr(), outs.as_ptr()) }
    }

    fn tensors(&self, g: &Graph) -> Result<Vec<Tensor>, String> {
        g.outputs
            .iter()
            .zip(self.outputs.iter().zip(&self.sizes))
            .map(|(o, (b, &size))| {
                Tensor::from_le_bytes(g.ty(*o), &b[..size]).ok_or_else(|| "output size".to_string())
            })
            .collect()
    }
}

impl Compiled {
    pub fn new(g: &Graph) -> Result<Compiled, String> {
        Compiled::for_target(g, Target::host())
    }

    pub fn for_target(g: &Graph, target: Target) -> Result<Compiled, String> {
        Compiled::with_options(g, &options(target))
    }

    /// Compiled with `opts` (whose target must run here).
    pub fn with_options(g: &Graph, opts: &CompileOptions) -> Result<Compiled, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let path = write_library(g, opts, dir.path())?;
        let lib = unsafe { libloading::Library::new(&path) }.map_err(|e| e.to_string())?;
        Ok(Compiled { _dir: dir, lib })
    }

    /// Where the library lives while `self` does (for keeping a copy to inspect).
    pub fn library_path(&self) -> PathBuf {
        self._dir.path().join("libtest.so")
    }

    fn infer(&self) -> Result<InferFn, String> {
        unsafe { self.lib.get::<InferFn>(b"infer\0") }
            .map(|s| *s)
            .map_err(|e| e.to_string())
    }

    /// Runs once on `inputs`; a nonzero return of `infer` is an error.
    pub fn run(&self, g: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>, String> {
        let mut buffers = Buffers::new(g, inputs);
        match buffers.call(self.infer()?) {
            0 => match buffers.overruns().as_slice() {
                [] => buffers.tensors(g),
                outs => Err(format!("infer wrote past the end of outputs {outs:?}")),
            },
            status => Err(format!("infer returned {status}")),
        }
    }

    /// Runs once on `inputs` and returns `infer`'s status with the outputs (whatever
    /// was written); a write past the end of an output is an error whatever the status.
    pub fn run_status(&self, g: &Graph, inputs: &[Tensor]) -> Result<(i32, Vec<Tensor>), String> {
        let mut buffers = Buffers::new(g, inputs);
        let status = buffers.call(self.infer()?);
        match buffers.overruns().as_slice() {
            [] => Ok((status, buffers.tensors(g)?)),
            outs => Err(format!("infer wrote past the end of outputs {outs:?}")),
        }
    }

    /// `workspace_size(options)` with `pool` (None: no pool).
    #[allow(dead_code)]
    pub fn workspace_size(
        &self,
        pool: Option<&nnc_runtime_abi::NncThreadPool>,
    ) -> Result<usize, String> {
        use nnc_runtime_abi::{NncRunOptions, WorkspaceSizeFn};
        let size = unsafe { self.lib.get::<WorkspaceSizeFn>(b"workspace_size\0") }
            .map_err(|e| e.to_string())?;
        Ok(unsafe { size(&NncRunOptions::new(pool, 0)) } as usize)
    }

    /// Runs once through `run` with `pool` (None: no pool) on a workspace of exactly
    /// `workspace_size(options)` bytes followed by guard bytes that must stay intact;
    /// a nonzero status is an error.
    #[allow(dead_code)]
    pub fn run_pooled(
        &self,
        g: &Graph,
        inputs: &[Tensor],
        pool: Option<&nnc_runtime_abi::NncThreadPool>,
    ) -> Result<Vec<Tensor>, String> {
        use nnc_runtime_abi::{NncRunOptions, RunFn, WorkspaceSizeFn};
        let run = unsafe { self.lib.get::<RunFn>(b"run\0") }.map_err(|e| e.to_string())?;
        let size = unsafe { self.lib.get::<WorkspaceSizeFn>(b"workspace_size\0") }
            .map_err(|e| e.to_string())?;
        let mut options = NncRunOptions::new(pool, 0);
        let bytes = unsafe { size(&options) } as usize;
        options.workspace_bytes = bytes as u64;
        // 64-byte aligned, then the guard.
        let mut ws = vec![GUARD_BYTE; bytes + 64 + GUARD];
        let pad = ws.as_ptr().align_offset(64);
        let mut buffers = Buffers::new(g, inputs);
        let ins: Vec<*const c_void> = buffers.inputs.iter().map(|b| b.as_ptr().cast()).collect();
        let outs: Vec<*mut c_void> = buffers
            .outputs
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
        if status != 0 {
            return Err(format!("run returned {status}"));
        }
        if ws[pad + bytes..pad + bytes + GUARD]
            .iter()
            .any(|&b| b != GUARD_BYTE)
        {
            return Err("run wrote past the end of its workspace".into());
        }
        match buffers.overruns().as_slice() {
            [] => buffers.tensors(g),
            outs => Err(format!("run wrote past the end of outputs {outs:?}")),
        }
    }

    /// Best wall time of `reps` runs, in seconds (buffers prepared once, outside the
    /// timing).
    pub fn best_time(&self, g: &Graph, inputs: &[Tensor], reps: usize) -> f64 {
        let infer = self.infer().expect("infer is exported");
        let mut buffers = Buffers::new(g, inputs);
        (0..reps)
            .map(|_| {
                let t = Instant::now();
                assert_eq!(buffers.call(infer), 0);
                t.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min)
    }
}

/// Compiles `g` for `target` (which must run here), runs it once on `inputs`.
pub fn run_compiled(g: &Graph, inputs: &[Tensor], target: Target) -> Result<Vec<Tensor>, String> {
    Compiled::for_target(g, target)?.run(g, inputs)
}

/// `tests/harness/nnc_run.c` built for aarch64 once per test binary, or `None` (after a
/// SKIP line, or a failure under NNC_TEST_REQUIRE_TOOLS=1) without the cross toolchain.
pub fn aarch64_harness() -> Option<&'static Path> {
    static HARNESS: OnceLock<Option<(tempfile::TempDir, PathBuf)>> = OnceLock::new();
    HARNESS
        .get_or_init(|| {
            if !tools::require_aarch64_toolchain() {
                return None;
            }
            let dir = tempfile::tempdir().expect("temp dir");
            let exe = dir.path().join("nnc_run");
            let root = Path::new(env!("CARGO_MANIFEST_DIR"))
                .parent()
                .expect("workspace root");
            tools::run(
                std::process::Command::new("aarch64-linux-gnu-gcc")
                    .args(["-O1", "-std=c11", "-Wall", "-pthread", "-I"])
                    .arg(root.join("runtime-abi/include"))
                    .arg(root.join("tests/harness/nnc_run.c"))
                    .arg("-o")
                    .arg(&exe)
                    .arg("-ldl"),
            );
            Some((dir, exe))
        })
        .as_ref()
        .map(|(_, exe)| exe.as_path())
}

/// Compiles `g` for aarch64 (`cpu`: None for the default) and runs it on `inputs` under
/// qemu with the C harness.
pub fn run_on_aarch64(
    harness: &Path,
    g: &Graph,
    inputs: &[Tensor],
    cpu: Option<&str>,
) -> Result<Vec<Tensor>, String> {
    let target = Target::new(Arch::Aarch64, cpu).map_err(|e| e.to_string())?;
    run_on_aarch64_with(harness, g, inputs, &options(target))
}

/// [`run_on_aarch64`] with any options for an aarch64 target.
pub fn run_on_aarch64_with(
    harness: &Path,
    g: &Graph,
    inputs: &[Tensor],
    opts: &CompileOptions,
) -> Result<Vec<Tensor>, String> {
    run_on_aarch64_env(harness, g, inputs, opts, &[])
}

/// [`run_on_aarch64_with`] with environment variables for the harness (e.g.
/// `NNC_RUN_THREADS`: run through `run` with a pool of that many threads).
pub fn run_on_aarch64_env(
    harness: &Path,
    g: &Graph,
    inputs: &[Tensor],
    opts: &CompileOptions,
    env: &[(&str, &str)],
) -> Result<Vec<Tensor>, String> {
    run_on_aarch64_shaped(harness, (g, g), inputs, opts, env)
}

/// [`run_on_aarch64_env`] for a graph `g` whose outputs the harness writes shaped as
/// `shapes`' (a one-sample graph's library runs every dim at its maximum).
pub fn run_on_aarch64_shaped(
    harness: &Path,
    (g, shapes): (&Graph, &Graph),
    inputs: &[Tensor],
    opts: &CompileOptions,
    env: &[(&str, &str)],
) -> Result<Vec<Tensor>, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let lib = write_library(g, opts, dir.path())?;
    let (in_dir, out_dir) = (dir.path().join("in"), dir.path().join("out"));
    for d in [&in_dir, &out_dir] {
        std::fs::create_dir_all(d).map_err(|e| e.to_string())?;
    }
    for (i, t) in inputs.iter().enumerate() {
        std::fs::write(in_dir.join(format!("input_{i}.bin")), t.to_le_bytes())
            .map_err(|e| e.to_string())?;
    }
    let out = tools::qemu_aarch64(harness)
        .envs(env.iter().copied())
        .arg(&lib)
        .arg("")
        .arg(&in_dir)
        .arg(&out_dir)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "qemu: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    shapes
        .outputs
        .iter()
        .enumerate()
        .map(|(k, o)| {
            let bytes = std::fs::read(out_dir.join(format!("output_{k}.bin")))
                .map_err(|e| e.to_string())?;
            // An output whose extent the values decide comes with its shape.
            let ty = match std::fs::read_to_string(out_dir.join(format!("output_{k}.shape"))) {
                Ok(text) => nnc::ir::TensorType::new(
                    shapes.ty(*o).dtype,
                    text.lines().map(|l| l.parse().unwrap()).collect(),
                ),
                Err(_) => shapes.ty(*o).clone(),
            };
            Tensor::from_le_bytes(&ty, &bytes)
                .ok_or_else(|| format!("output {k} has the wrong size"))
        })
        .collect()
}
