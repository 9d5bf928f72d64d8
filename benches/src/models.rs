//! Whole-model latency: nnc against onnxruntime and tract, one thread each.
//!
//! For every model of `--models-dir` (or `$NNC_MODELS_DIR`): compile it with nnc in this
//! process into a temporary .so and dlopen it; load it in tract-onnx
//! (`into_optimized().into_runnable()`, single-threaded); load it in onnxruntime (1
//! intra-op thread) in a Python child process (`benches/ort_server.py`). All three get the
//! same inputs: the model's saved `MODEL.input.NAME.npy` files, or seeded random ones.
//! Rounds alternate between the engines (a batch of calls of each, sized to
//! `--budget-ms`), so drift on the machine hits all alike; the medians over rounds of
//! the per-call times are reported with the ratios nnc/onnxruntime and nnc/tract. nnc's
//! outputs are checked against tract's so a broken compile cannot look fast.

#[path = "common.rs"]
mod common;

use std::collections::HashMap;
use std::ffi::c_void;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use common::{
    calls_for, die, json_num, json_str, markdown_table, median, resolve_input, resolve_output,
    time_calls, Args,
};
use nnc::ir::{DType, Tensor, TensorType};
use nnc_runtime_abi::{InferFn, ModelInfoFn, NncModelInfo};
use tract_onnx::prelude::{
    tvec, DatumType, Framework, InferenceFact, InferenceModelExt, IntoRunnable, TValue, TVec,
    TypedSimpleState,
};

const USAGE: &str = "\
usage: cargo bench -p nnc-benches --bench models -- --models-dir DIR [options]

  --models-dir DIR   directory of MODEL.onnx files (default: $NNC_MODELS_DIR); relative
                     paths are taken from the workspace root, then the current directory
  --models a,b       only these models (default: every .onnx file of DIR)
  --rounds N         alternating rounds (default 15)
  --budget-ms X      time per engine per round (default 150)
  --cpu CPU          nnc --cpu: native (default), baseline, x86-64-v3, x86-64-v4
  --clock cpu|wall   thread CPU time (default; robust on a shared machine) or wall time
  --json FILE        also write the results as JSON
  --md FILE          also write the markdown table
  --python EXE       Python with onnxruntime and numpy (default: $NNC_PYTHON or python3)
  --nnc-bin PATH     compile with this nnc executable instead of the workspace's nnc crate
  --vzeroupper 0|1   clean the upper AVX state before each nnc call (default 1)
  --pin CORE|none    run every engine on this CPU core (default: the first one this
                     process may use); `none` lets the scheduler place them";

/// Relative error above which nnc's output is flagged as wrong.
const MAX_REL_ERR: f64 = 1e-3;

struct Spec {
    name: String,
    dtype: DType,
    shape: Vec<usize>,
}

/// A zeroed byte buffer aligned to 64 bytes, as numpy and onnxruntime buffers are in
/// practice (a `Vec<u8>` is only byte-aligned).
struct Buf {
    ptr: *mut u8,
    len: usize,
}

impl Buf {
    fn layout(len: usize) -> std::alloc::Layout {
        std::alloc::Layout::from_size_align(len.max(1), 64).expect("buffer layout")
    }

    fn zeroed(len: usize) -> Buf {
        let ptr = unsafe { std::alloc::alloc_zeroed(Self::layout(len)) };
        assert!(!ptr.is_null(), "out of memory");
        Buf { ptr, len }
    }

    fn from_bytes(b: &[u8]) -> Buf {
        let buf = Buf::zeroed(b.len());
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), buf.ptr, b.len()) };
        buf
    }

    fn bytes(&self) -> &[u8] {
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        unsafe { std::alloc::dealloc(self.ptr, Self::layout(self.len)) };
    }
}

/// A dlopened nnc model with bound input and output buffers.
struct NncModel {
    _lib: libloading::Library,
    infer: InferFn,
    inputs: Vec<Spec>,
    outputs: Vec<Spec>,
    in_bufs: Vec<Buf>,
    out_bufs: Vec<Buf>,
}

fn dtype_of(code: i32) -> DType {
    DType::ALL
        .into_iter()
        .find(|d| *d as i32 == code)
        .unwrap_or_else(|| die(&format!("unknown dtype code {code}")))
}

fn specs(infos: &[nnc_runtime_abi::NncTensorInfo]) -> Vec<Spec> {
    infos
        .iter()
        .map(|t| unsafe {
            Spec {
                name: t
                    .name()
                    .map(|c| c.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                dtype: dtype_of(t.dtype),
                shape: t.dims_slice().iter().map(|&d| d as usize).collect(),
            }
        })
        .collect()
}

impl NncModel {
    fn open(so: &Path) -> Result<NncModel, String> {
        let lib = unsafe { libloading::Library::new(so) }.map_err(|e| e.to_string())?;
        let (infer, info): (InferFn, &NncModelInfo) = unsafe {
            let infer = *lib
                .get::<InferFn>(b"infer")
                .map_err(|e| format!("infer: {e}"))?;
            let info = lib
                .get::<ModelInfoFn>(b"model_info")
                .map_err(|e| format!("model_info: {e}"))?;
            (infer, &*info())
        };
        let (inputs, outputs) =
            unsafe { (specs(info.inputs_slice()), specs(info.outputs_slice())) };
        let out_bufs = unsafe { info.outputs_slice() }
            .iter()
            .map(|t| Buf::zeroed(unsafe { t.byte_size() }.unwrap_or(0)))
            .collect();
        Ok(NncModel {
            _lib: lib,
            infer,
            inputs,
            outputs,
            in_bufs: vec![],
            out_bufs,
        })
    }

    fn run(&mut self) {
        clean_upper_vector_state();
        let ins: Vec<*const c_void> = self
            .in_bufs
            .iter()
            .map(|b| b.ptr.cast_const().cast())
            .collect();
        let outs: Vec<*mut c_void> = self.out_bufs.iter().map(|b| b.ptr.cast()).collect();
        let rc = unsafe { (self.infer)(ins.as_ptr(), outs.as_ptr()) };
        assert_eq!(rc, 0, "nnc infer returned {rc}");
    }
}

/// Pins this process, and so the onnxruntime child it starts, to one core (`--pin`).
/// Unpinned, the scheduler tended to run the onnxruntime server on the other core of
/// this 2-core machine, where its weights and activations stayed in a private L2 while
/// nnc shared its core's L2 with tract: squeezenet1_1 measured nnc/onnxruntime 1.22
/// unpinned and 1.04 pinned, minutes apart, onnxruntime taking 6.8 vs 8.3 ms. On one
/// core every engine finds the caches as the previous engine's round left them.
/// Returns the core, or None when not pinned.
fn pin_to_core(arg: Option<&str>) -> Option<usize> {
    if arg == Some("none") {
        return None;
    }
    // SAFETY: plain libc calls on a zeroed cpu_set_t owned by this frame.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        let core = match arg {
            Some(c) => c
                .parse()
                .unwrap_or_else(|_| die(&format!("--pin {c}: not a core number or none"))),
            None => (0..libc::CPU_SETSIZE as usize).find(|&c| libc::CPU_ISSET(c, &set))?,
        };
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut one);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one) != 0 {
            die(&format!(
                "--pin {core}: {}",
                std::io::Error::last_os_error()
            ));
        }
        Some(core)
    }
}

/// `--vzeroupper 0` turns the clean-up off, to see how nnc fares after tract as it is.
static VZEROUPPER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// `vzeroupper`, as compiled code does before calling out. tract's kernels return with
/// the upper halves of the AVX registers dirty; on this kind of CPU every legacy-SSE
/// instruction then pays a merge with the upper bits, which made nnc's SSE code up to
/// ~35 times slower when it ran after tract on the same thread. A well-behaved caller
/// leaves the state clean, so the bench restores that before each nnc call (a few
/// cycles). Running nnc alone is not affected.
fn clean_upper_vector_state() {
    #[cfg(target_arch = "x86_64")]
    if VZEROUPPER.load(std::sync::atomic::Ordering::Relaxed)
        && std::arch::is_x86_feature_detected!("avx")
    {
        // SAFETY: the host has AVX.
        unsafe { zeroupper() };
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn zeroupper() {
    std::arch::x86_64::_mm256_zeroupper();
}

/// The model's saved input `MODEL.input.NAME.npy`, or a seeded random one.
fn input_tensor(dir: &Path, model: &str, spec: &Spec, seed: &mut u64) -> (Tensor, &'static str) {
    let ty = TensorType::new(spec.dtype, spec.shape.clone());
    let path = dir.join(format!("{model}.input.{}.npy", spec.name));
    if path.exists() {
        match nnc_host::npy::read(&path) {
            Ok(t) if t.len() == ty.numel() => {
                return (t.cast(spec.dtype).reshape(&spec.shape), "saved");
            }
            Ok(t) => eprintln!(
                "{}: {} elements, the model wants {:?}; using random data",
                path.display(),
                t.len(),
                spec.shape
            ),
            Err(e) => eprintln!("{}: {e}; using random data", path.display()),
        }
    }
    let n = ty.numel();
    let mut next = || {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        (*seed >> 11) as f64 / (1u64 << 53) as f64
    };
    let t = if spec.dtype.is_float() {
        let v: Vec<f32> = (0..n).map(|_| (next() * 2.0 - 1.0) as f32).collect();
        Tensor::from_vec(&spec.shape, v).cast(spec.dtype)
    } else {
        // Ones are valid token ids, masks and indices for the models at hand.
        Tensor::from_vec(&spec.shape, vec![1i64; n]).cast(spec.dtype)
    };
    (t, "random")
}

fn tract_dt(d: DType) -> DatumType {
    match d {
        DType::F32 => DatumType::F32,
        DType::F64 => DatumType::F64,
        DType::F16 => DatumType::F16,
        DType::U8 => DatumType::U8,
        DType::I8 => DatumType::I8,
        DType::U16 => DatumType::U16,
        DType::I16 => DatumType::I16,
        DType::I32 => DatumType::I32,
        DType::I64 => DatumType::I64,
        DType::U32 => DatumType::U32,
        DType::U64 => DatumType::U64,
        DType::Bool => DatumType::Bool,
        other => die(&format!("tract has no {other} inputs")),
    }
}

struct Tract {
    state: TypedSimpleState,
    inputs: TVec<TValue>,
}

impl Tract {
    fn load(path: &Path, specs: &[Spec], feeds: &HashMap<String, Tensor>) -> Result<Tract, String> {
        let e = |e: tract_onnx::prelude::TractError| format!("{e:?}");
        let mut model = tract_onnx::onnx().model_for_path(path).map_err(e)?;
        let mut inputs = tvec![];
        let outlets = model.input_outlets().map_err(e)?.to_vec();
        for (ix, outlet) in outlets.iter().enumerate() {
            let name = model.node(outlet.node).name.clone();
            let spec = specs
                .iter()
                .find(|s| s.name == name)
                .ok_or_else(|| format!("tract input '{name}' is not an nnc input"))?;
            let fact = InferenceFact::dt_shape(tract_dt(spec.dtype), spec.shape.clone());
            model = model.with_input_fact(ix, fact).map_err(e)?;
            let bytes = feeds[&name].to_le_bytes();
            let t = unsafe {
                tract_onnx::prelude::Tensor::from_raw_dt(tract_dt(spec.dtype), &spec.shape, &bytes)
            }
            .map_err(e)?;
            inputs.push(t.into());
        }
        let plan = model
            .into_optimized()
            .map_err(e)?
            .into_runnable()
            .map_err(e)?;
        let state = plan.spawn().map_err(e)?;
        Ok(Tract { state, inputs })
    }

    fn run(&mut self) -> TVec<TValue> {
        self.state
            .run(self.inputs.clone())
            .unwrap_or_else(|e| die(&format!("tract run: {e:?}")))
    }
}

/// onnxruntime in a Python child process (benches/ort_server.py).
struct Ort {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    version: String,
}

impl Ort {
    fn start(python: &str) -> Result<Ort, String> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("ort_server.py");
        let mut child = Command::new(python)
            .arg(&script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot run {python}: {e}"))?;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut ort = Ort {
            child,
            stdin,
            stdout,
            version: String::new(),
        };
        ort.version = ort.ask(&["hello"])?;
        Ok(ort)
    }

    fn ask(&mut self, fields: &[&str]) -> Result<String, String> {
        writeln!(self.stdin, "{}", fields.join("\t")).map_err(|e| e.to_string())?;
        self.stdin.flush().map_err(|e| e.to_string())?;
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        let line = line.trim_end();
        if line.is_empty() {
            return Err("the onnxruntime server exited".into());
        }
        match line.strip_prefix("ok") {
            Some(rest) => Ok(rest.trim().to_string()),
            None => Err(line.strip_prefix("err ").unwrap_or(line).to_string()),
        }
    }

    /// Milliseconds per call over `calls` calls, timed in the server on the chosen clock.
    fn time(&mut self, calls: usize) -> Result<f64, String> {
        let reply = self.ask(&["run", &calls.to_string()])?;
        let mut f = reply.split_whitespace();
        let (wall, cpu) = (f.next(), f.next());
        let secs: f64 = if common::cpu_clock() { cpu } else { wall }
            .ok_or_else(|| format!("bad reply '{reply}'"))?
            .parse()
            .map_err(|e| format!("bad reply '{reply}': {e}"))?;
        Ok(secs * 1e3 / calls as f64)
    }
}

impl Drop for Ort {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.stdin.flush();
        let _ = self.child.wait();
    }
}

/// max |a - b| / max |b| over the float outputs (exact match for the others).
fn compare(nnc: &NncModel, tract: &TVec<TValue>) -> Result<f64, String> {
    if nnc.outputs.len() != tract.len() {
        return Err(format!(
            "nnc has {} outputs, tract {}",
            nnc.outputs.len(),
            tract.len()
        ));
    }
    let mut worst = 0f64;
    for (k, (spec, t)) in nnc.outputs.iter().zip(tract).enumerate() {
        let ty = TensorType::new(spec.dtype, spec.shape.clone());
        let ours = Tensor::from_le_bytes(&ty, nnc.out_bufs[k].bytes())
            .ok_or_else(|| format!("output {}: bad size", spec.name))?
            .to_f64_vec();
        let cast = t.cast_to::<f64>().map_err(|e| format!("{e:?}"))?;
        let theirs: Vec<f64> = cast
            .to_plain_array_view::<f64>()
            .map_err(|e| format!("{e:?}"))?
            .iter()
            .copied()
            .collect();
        if ours.len() != theirs.len() {
            return Err(format!(
                "output {}: nnc has {} elements, tract {}",
                spec.name,
                ours.len(),
                theirs.len()
            ));
        }
        let scale = theirs.iter().fold(0f64, |m, x| m.max(x.abs())).max(1e-12);
        let diff = ours.iter().zip(&theirs).fold(0f64, |m, (a, b)| {
            if a.is_nan() != b.is_nan() {
                f64::INFINITY
            } else {
                m.max((a - b).abs())
            }
        });
        worst = worst.max(diff / scale);
    }
    Ok(worst)
}

struct Row {
    model: String,
    inputs: &'static str,
    nnc_ms: f64,
    ort_ms: Option<f64>,
    tract_ms: Option<f64>,
    rel_err: Option<f64>,
    note: String,
}

fn write_npy(dir: &Path, name: &str, t: &Tensor) -> PathBuf {
    let p = dir.join(format!("{name}.npy"));
    let bytes = nnc_host::npy::to_bytes(t).unwrap_or_else(|e| die(&format!("npy {name}: {e}")));
    std::fs::write(&p, bytes).unwrap_or_else(|e| die(&format!("{}: {e}", p.display())));
    p
}

fn main() {
    let args = Args::parse(common::MODELS_OPTIONS, USAGE);
    VZEROUPPER.store(
        args.num::<u8>("vzeroupper", 1) != 0,
        std::sync::atomic::Ordering::Relaxed,
    );
    let clock = common::set_clock(&args);
    // The machine's cores, counted before pinning narrows what this process may use.
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let pinned = pin_to_core(args.get("pin"));
    let nnc_bin = common::nnc_bin(&args);
    let dir = match args
        .get("models-dir")
        .map(str::to_string)
        .or_else(|| std::env::var("NNC_MODELS_DIR").ok())
    {
        Some(d) => resolve_input(&d),
        None => die(&format!(
            "no models: pass --models-dir DIR or set NNC_MODELS_DIR\n{USAGE}"
        )),
    };
    if !dir.is_dir() {
        die(&format!("--models-dir {}: not a directory", dir.display()));
    }
    let dir = dir.canonicalize().unwrap_or(dir);
    let models: Vec<String> = match args.get("models") {
        Some(m) => m.split(',').map(str::to_string).collect(),
        None => {
            let mut v: Vec<String> = std::fs::read_dir(&dir)
                .unwrap_or_else(|e| die(&format!("{}: {e}", dir.display())))
                .filter_map(|e| {
                    let p = e.ok()?.path();
                    if p.extension()? == "onnx" {
                        Some(p.file_stem()?.to_string_lossy().into_owned())
                    } else {
                        None
                    }
                })
                .collect();
            v.sort();
            v
        }
    };
    if models.is_empty() {
        die(&format!("no .onnx files in {}", dir.display()));
    }
    let rounds: usize = args.num("rounds", 15);
    let budget: f64 = args.num("budget-ms", 150.0);
    let cpu = args.get("cpu").unwrap_or("native").to_string();
    let python = args
        .get("python")
        .map(str::to_string)
        .or_else(|| std::env::var("NNC_PYTHON").ok())
        .unwrap_or_else(|| "python3".into());

    let mut ort = match Ort::start(&python) {
        Ok(o) => {
            eprintln!(
                "onnxruntime {} (1 intra-op thread, via {python})",
                o.version
            );
            Some(o)
        }
        Err(e) => {
            eprintln!("SKIP onnxruntime: {e}");
            None
        }
    };
    let ort_label = ort
        .as_ref()
        .map(|o| format!("onnxruntime {}", o.version))
        .unwrap_or_else(|| "onnxruntime (skipped)".into());
    eprintln!(
        "models from {}; cpu {cpu}; {rounds} rounds of ~{budget} ms per engine; medians of {clock}",
        dir.display()
    );
    let tmp = tempfile::tempdir().unwrap_or_else(|e| die(&format!("temp dir: {e}")));
    let mut rows = vec![];
    for name in &models {
        let onnx = dir.join(format!("{name}.onnx"));
        let so = tmp.path().join(format!("lib{name}.so"));
        let t0 = std::time::Instant::now();
        let secs = match common::compile_so(&onnx, &cpu, &so, nnc_bin.as_deref()) {
            Ok(()) => t0.elapsed().as_secs_f64(),
            Err(e) => {
                eprintln!("{name}: nnc compile failed: {e}");
                continue;
            }
        };
        let mut nnc = match NncModel::open(&so) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("{name}: dlopen failed: {e}");
                continue;
            }
        };
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut feeds = HashMap::new();
        let mut kind = "saved";
        let mut ort_specs = vec![onnx.to_string_lossy().into_owned()];
        for spec in &nnc.inputs {
            let (t, k) = input_tensor(&dir, name, spec, &mut seed);
            if k == "random" {
                kind = "random";
            }
            let p = write_npy(tmp.path(), &format!("{name}.in{}", feeds.len()), &t);
            ort_specs.push(format!("{}={}", spec.name, p.display()));
            nnc.in_bufs.push(Buf::from_bytes(&t.to_le_bytes()));
            feeds.insert(spec.name.clone(), t);
        }
        let mut note = String::new();
        let mut tract = match Tract::load(&onnx, &nnc.inputs, &feeds) {
            Ok(t) => Some(t),
            Err(e) => {
                eprintln!("{name}: tract failed: {}", e.lines().next().unwrap_or(""));
                note = "tract failed to load".into();
                None
            }
        };
        let mut have_ort = false;
        if let Some(o) = ort.as_mut() {
            let mut req: Vec<&str> = vec!["load"];
            req.extend(ort_specs.iter().map(String::as_str));
            match o.ask(&req) {
                Ok(_) => have_ort = true,
                Err(e) => eprintln!("{name}: onnxruntime failed: {e}"),
            }
        }

        // Warm up, check nnc against tract, and size the batches from one timed call.
        nnc.run();
        let mut rel_err = None;
        if let Some(t) = tract.as_mut() {
            let out = t.run();
            match compare(&nnc, &out) {
                Ok(err) => {
                    rel_err = Some(err);
                    if err > MAX_REL_ERR {
                        note = format!("MISMATCH: nnc differs from tract by {err:.2e}");
                    }
                }
                Err(e) => note = format!("MISMATCH: {e}"),
            }
        }
        let mut once = time_calls(2, || nnc.run());
        if let Some(t) = tract.as_mut() {
            once = once.max(time_calls(2, || {
                t.run();
            }));
        }
        if have_ort {
            if let Some(o) = ort.as_mut() {
                once = once.max(o.time(2).unwrap_or(once));
            }
        }
        let calls = calls_for(budget, once);
        let (mut tn, mut tt, mut to) = (vec![], vec![], vec![]);
        for _ in 0..rounds {
            tn.push(time_calls(calls, || nnc.run()));
            if let Some(t) = tract.as_mut() {
                tt.push(time_calls(calls, || {
                    t.run();
                }));
            }
            if have_ort {
                match ort.as_mut().map(|o| o.time(calls)) {
                    Some(Ok(ms)) => to.push(ms),
                    Some(Err(e)) => {
                        eprintln!("{name}: onnxruntime failed: {e}");
                        have_ort = false;
                        to.clear();
                    }
                    None => {}
                }
            }
        }
        let row = Row {
            model: name.clone(),
            inputs: kind,
            nnc_ms: median(&tn),
            ort_ms: (!to.is_empty()).then(|| median(&to)),
            tract_ms: (!tt.is_empty()).then(|| median(&tt)),
            rel_err,
            note,
        };
        eprintln!(
            "{name}: compiled in {secs:.2} s; {calls} calls/round; nnc {:.3} ms, onnxruntime {}, tract {}{}",
            row.nnc_ms,
            row.ort_ms.map_or("-".into(), |v| format!("{v:.3} ms")),
            row.tract_ms.map_or("-".into(), |v| format!("{v:.3} ms")),
            if row.note.is_empty() { String::new() } else { format!("; {}", row.note) }
        );
        rows.push(row);
    }
    drop(ort);

    let fmt = |v: Option<f64>| v.map_or("SKIP".to_string(), |v| format!("{v:.3}"));
    let ratio = |a: f64, b: Option<f64>| b.map_or("-".to_string(), |b| format!("{:.2}", a / b));
    let table_rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.model.clone(),
                format!("{:.3}", r.nnc_ms),
                fmt(r.ort_ms),
                fmt(r.tract_ms),
                ratio(r.nnc_ms, r.ort_ms),
                ratio(r.nnc_ms, r.tract_ms),
                r.rel_err.map_or("-".into(), |e| format!("{e:.1e}")),
                if r.note.is_empty() {
                    r.inputs.to_string()
                } else {
                    format!("{}; {}", r.inputs, r.note)
                },
            ]
        })
        .collect();
    let table = markdown_table(
        &[
            "model",
            "nnc ms",
            "onnxruntime ms",
            "tract ms",
            "nnc/onnxruntime",
            "nnc/tract",
            "max rel err vs tract",
            "inputs",
        ],
        &table_rows,
    );
    let header = format!(
        "Median ms per inference over {rounds} alternating rounds, 1 thread, {clock}, {}, nnc{} --cpu {cpu}, \
         {ort_label}, tract-onnx 0.23; {} ({} cores), {}.\n\n",
        pinned.map_or("engines not pinned".to_string(), |c| format!("all engines on core {c}")),
        nnc_bin
            .as_ref()
            .map_or(String::new(), |b| format!(" ({})", b.display())),
        common::cpu_model(),
        cores,
        common::today_utc()
    );
    println!("\n{header}{table}");
    if let Some(p) = args.get("md") {
        let p = resolve_output(p);
        std::fs::write(&p, format!("{header}{table}"))
            .unwrap_or_else(|e| die(&format!("{}: {e}", p.display())));
    }
    if let Some(p) = args.get("json") {
        let p = resolve_output(p);
        let opt = |v: Option<f64>| v.map_or("null".into(), json_num);
        let items: Vec<String> = rows
            .iter()
            .map(|r| {
                format!(
                    "  {{\"model\": {}, \"inputs\": {}, \"nnc_ms\": {}, \"onnxruntime_ms\": {}, \"tract_ms\": {}, \
                     \"nnc_over_onnxruntime\": {}, \"nnc_over_tract\": {}, \"max_rel_err_vs_tract\": {}, \"note\": {}}}",
                    json_str(&r.model),
                    json_str(r.inputs),
                    json_num(r.nnc_ms),
                    opt(r.ort_ms),
                    opt(r.tract_ms),
                    opt(r.ort_ms.map(|o| r.nnc_ms / o)),
                    opt(r.tract_ms.map(|t| r.nnc_ms / t)),
                    opt(r.rel_err),
                    json_str(&r.note)
                )
            })
            .collect();
        let json = format!(
            "{{\"date\": {}, \"cpu_model\": {}, \"clock\": {}, \"nnc_cpu\": {}, \"rounds\": {rounds}, \"onnxruntime\": {}, \"rows\": [\n{}\n]}}\n",
            json_str(&common::today_utc()),
            json_str(clock),
            json_str(&common::cpu_model()),
            json_str(&cpu),
            json_str(&ort_label),
            items.join(",\n")
        );
        std::fs::write(&p, json).unwrap_or_else(|e| die(&format!("{}: {e}", p.display())));
    }
    if rows.iter().any(|r| r.note.starts_with("MISMATCH")) {
        eprintln!("error: nnc's outputs differ from tract's (see the table)");
        std::process::exit(1);
    }
}
