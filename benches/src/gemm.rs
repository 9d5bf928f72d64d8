//! GEMM kernel throughput: single-MatMul models compiled by nnc for each `--cpu`
//! variant the host can run, in GFLOP/s (2·M·N·K per call) and as a fraction of the
//! measured single-core FMA peak at the vector width the variant is built for:
//! baseline = SSE4.1, 128-bit; x86-64-v3 = AVX2+FMA, 256-bit; x86-64-v4 = AVX-512, 512-bit.
//!
//! The model is `Y[M,N] = A[M,K] × B[K,N]` with A the input and B a constant initializer,
//! built here as an ONNX ModelProto (nnc's own prost messages). The peaks are measured
//! in this process with `std::arch` FMA loops (12 independent accumulator chains), so
//! the unknown clock of the machine cancels out.

#[path = "common.rs"]
#[allow(dead_code)]
mod common;

use std::ffi::c_void;

use common::{
    calls_for, die, json_num, json_str, markdown_table, median, resolve_output, time_calls, Args,
};
use nnc::onnx::proto::{
    tensor_shape_proto::{dimension, Dimension},
    type_proto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto,
};
use nnc_runtime_abi::InferFn;
use prost::Message;

const USAGE: &str = "\
usage: cargo bench -p nnc-benches --bench gemm -- [options]

  --shapes MxKxN,...  GEMM shapes (default 256x256x256,512x512x512,1024x1024x1024,
                      196x256x1024,3136x576x64)
  --cpus a,b          nnc --cpu variants (default: baseline, x86-64-v3, x86-64-v4,
                      those the host can run)
  --rounds N          timed rounds per shape and variant (default 7)
  --budget-ms X       time per round (default 100)
  --clock cpu|wall    thread CPU time (default; robust on a shared machine) or wall time
  --json FILE         also write the results as JSON
  --md FILE           also write the markdown tables
  --nnc-bin PATH      compile with this nnc executable instead of the workspace's nnc crate";

const DEFAULT_SHAPES: &str = "256x256x256,512x512x512,1024x1024x1024,196x256x1024,3136x576x64";

/// Vector width in bits that a `--cpu` variant's kernels are meant to use.
fn width_of(cpu: &str) -> Option<u32> {
    match cpu {
        "baseline" => Some(128),
        "x86-64-v3" => Some(256),
        "x86-64-v4" => Some(512),
        _ => None,
    }
}

#[cfg(target_arch = "x86_64")]
fn host_runs(cpu: &str) -> bool {
    match cpu {
        "baseline" => is_x86_feature_detected!("sse4.1"),
        "x86-64-v3" => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"),
        "x86-64-v4" => {
            is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("avx512dq")
                && is_x86_feature_detected!("avx512bw")
        }
        _ => true,
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn host_runs(cpu: &str) -> bool {
    cpu == "baseline"
}

/// Peak FMA throughput, single core, f32 GFLOP/s for 128-, 256- and 512-bit vectors.
#[cfg(target_arch = "x86_64")]
mod peak {
    use std::arch::x86_64::*;
    use std::hint::black_box;

    /// 12 independent chains: more than latency (4) × FMA ports (2) needs.
    const CHAINS: usize = 12;

    macro_rules! fma_loop {
        ($name:ident, $feat:literal, $ty:ty, $set1:ident, $fmadd:ident, $store:ident, $lanes:expr) => {
            #[target_feature(enable = $feat)]
            unsafe fn $name(iters: u64) -> f32 {
                let a = $set1(black_box(0.999_999f32));
                let b = $set1(black_box(1e-6f32));
                let mut acc: [$ty; CHAINS] = [$set1(black_box(1.0f32)); CHAINS];
                for _ in 0..iters {
                    for x in acc.iter_mut() {
                        *x = $fmadd(*x, a, b);
                    }
                }
                let mut s = 0f32;
                for x in acc {
                    let mut lanes = [0f32; $lanes];
                    unsafe { $store(lanes.as_mut_ptr(), x) };
                    s += lanes.iter().sum::<f32>();
                }
                s
            }
        };
    }

    fma_loop!(
        fma128,
        "fma",
        __m128,
        _mm_set1_ps,
        _mm_fmadd_ps,
        _mm_storeu_ps,
        4
    );
    fma_loop!(
        fma256,
        "avx,fma",
        __m256,
        _mm256_set1_ps,
        _mm256_fmadd_ps,
        _mm256_storeu_ps,
        8
    );
    fma_loop!(
        fma512,
        "avx512f",
        __m512,
        _mm512_set1_ps,
        _mm512_fmadd_ps,
        _mm512_storeu_ps,
        16
    );

    /// Best of `runs` runs of ~20 ms each; `None` if the host lacks the instructions.
    pub fn gflops(width: u32, runs: usize) -> Option<f64> {
        let run: unsafe fn(u64) -> f32 = match width {
            128 if is_x86_feature_detected!("fma") => fma128,
            256 if is_x86_feature_detected!("avx") && is_x86_feature_detected!("fma") => fma256,
            512 if is_x86_feature_detected!("avx512f") => fma512,
            _ => return None,
        };
        let lanes = f64::from(width / 32);
        let flops_per_iter = CHAINS as f64 * lanes * 2.0;
        // Calibrate the iteration count to ~50 ms.
        let mut iters = 1u64 << 16;
        loop {
            let t0 = super::common::seconds();
            black_box(unsafe { run(black_box(iters)) });
            let dt = super::common::seconds() - t0;
            if dt > 0.005 {
                iters = ((iters as f64) * 0.02 / dt) as u64 + 1;
                break;
            }
            iters *= 4;
        }
        let mut best = 0f64;
        for _ in 0..runs {
            let t0 = super::common::seconds();
            black_box(unsafe { run(black_box(iters)) });
            let dt = super::common::seconds() - t0;
            best = best.max(iters as f64 * flops_per_iter / dt / 1e9);
        }
        Some(best)
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod peak {
    pub fn gflops(_width: u32, _runs: usize) -> Option<f64> {
        None
    }
}

/// Deterministic values in [-1, 1).
fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn tensor_type(dims: &[usize]) -> Option<TypeProto> {
    Some(TypeProto {
        value: Some(type_proto::Value::TensorType(type_proto::Tensor {
            elem_type: 1,
            shape: Some(TensorShapeProto {
                dim: dims
                    .iter()
                    .map(|&d| Dimension {
                        value: Some(dimension::Value::DimValue(d as i64)),
                    })
                    .collect(),
            }),
        })),
    })
}

/// `Y = MatMul(A, B)` with A: float[M, K] input and B: float[K, N] initializer.
fn matmul_model(m: usize, k: usize, n: usize, b: &[f32]) -> Vec<u8> {
    let b = TensorProto {
        name: "B".into(),
        dims: vec![k as i64, n as i64],
        data_type: 1,
        raw_data: b.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ..Default::default()
    };
    let graph = GraphProto {
        name: "gemm".into(),
        node: vec![NodeProto {
            input: vec!["A".into(), "B".into()],
            output: vec!["Y".into()],
            name: "matmul".into(),
            op_type: "MatMul".into(),
            ..Default::default()
        }],
        initializer: vec![b],
        input: vec![ValueInfoProto {
            name: "A".into(),
            r#type: tensor_type(&[m, k]),
        }],
        output: vec![ValueInfoProto {
            name: "Y".into(),
            r#type: tensor_type(&[m, n]),
        }],
        ..Default::default()
    };
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 13,
        }],
        producer_name: "nnc-benches".into(),
        graph: Some(graph),
        ..Default::default()
    }
    .encode_to_vec()
}

struct Cell {
    shape: (usize, usize, usize),
    cpu: String,
    gflops: f64,
    /// Median over rounds of the round's GFLOP/s over the FMA peak measured right
    /// before it.
    fraction: Option<f64>,
    /// The fastest round's GFLOP/s.
    best_gflops: f64,
    ms: f64,
    rel_err: f64,
}

fn main() {
    let args = Args::parse(common::GEMM_OPTIONS, USAGE);
    let clock = common::set_clock(&args);
    let nnc_bin = common::nnc_bin(&args);
    let shapes: Vec<(usize, usize, usize)> = args
        .get("shapes")
        .unwrap_or(DEFAULT_SHAPES)
        .split(',')
        .map(|s| {
            let d: Vec<usize> = s
                .split('x')
                .map(|v| {
                    v.trim()
                        .parse()
                        .unwrap_or_else(|_| die(&format!("bad shape '{s}'")))
                })
                .collect();
            match d[..] {
                [m, k, n] => (m, k, n),
                _ => die(&format!("bad shape '{s}': expected MxKxN")),
            }
        })
        .collect();
    let wanted: Vec<String> = args
        .get("cpus")
        .unwrap_or("baseline,x86-64-v3,x86-64-v4")
        .split(',')
        .map(str::to_string)
        .collect();
    let mut cpus = vec![];
    for c in wanted {
        if host_runs(&c) {
            cpus.push(c);
        } else {
            eprintln!("SKIP --cpu {c}: this host cannot run it");
        }
    }
    let rounds: usize = args.num("rounds", 7);
    let budget: f64 = args.num("budget-ms", 100.0);

    // The peak of each width is measured up front and again right before every timing
    // at that width, keeping the best: the clock of a VM core drifts with the load of
    // its neighbours, and a kernel must never look faster than the peak.
    let mut peaks = vec![];
    for w in [128u32, 256, 512] {
        let p = peak::gflops(w, 15);
        match p {
            Some(g) => eprintln!("FMA peak {w}-bit: {g:.1} GFLOP/s (1 core)"),
            None => eprintln!("FMA peak {w}-bit: not available on this host"),
        }
        peaks.push((w, p));
    }

    let tmp = tempfile::tempdir().unwrap_or_else(|e| die(&format!("temp dir: {e}")));
    let mut cells = vec![];
    for &(m, k, n) in &shapes {
        let a = random(m * k, 0x1234_5678 ^ (m * k) as u64);
        let b = random(k * n, 0x8765_4321 ^ (k * n) as u64);
        let onnx = tmp.path().join(format!("gemm_{m}x{k}x{n}.onnx"));
        std::fs::write(&onnx, matmul_model(m, k, n, &b))
            .unwrap_or_else(|e| die(&format!("{}: {e}", onnx.display())));
        // Reference values at a sample of output positions, in f64.
        let samples: Vec<(usize, usize)> = (0..64usize)
            .map(|i| ((i * 7919 + 13) % m, (i * 104_729 + 7) % n))
            .collect();
        let reference: Vec<f64> = samples
            .iter()
            .map(|&(i, j)| {
                (0..k)
                    .map(|p| f64::from(a[i * k + p]) * f64::from(b[p * n + j]))
                    .sum()
            })
            .collect();
        let scale = reference.iter().fold(1e-12f64, |s, r| s.max(r.abs()));
        for cpu in &cpus {
            let so = tmp.path().join(format!("libgemm_{m}x{k}x{n}_{cpu}.so"));
            if let Err(e) = common::compile_so(&onnx, cpu, &so, nnc_bin.as_deref()) {
                eprintln!("{m}x{k}x{n} --cpu {cpu}: compile failed: {e}");
                continue;
            }
            let lib = unsafe { libloading::Library::new(&so) }
                .unwrap_or_else(|e| die(&format!("dlopen {}: {e}", so.display())));
            let infer: InferFn = unsafe {
                *lib.get::<InferFn>(b"infer")
                    .unwrap_or_else(|e| die(&format!("infer: {e}")))
            };
            let mut y = vec![0f32; m * n];
            let ins = [a.as_ptr().cast::<c_void>()];
            let outs = [y.as_mut_ptr().cast::<c_void>()];
            let mut run = || {
                let rc = unsafe { infer(ins.as_ptr(), outs.as_ptr()) };
                assert_eq!(rc, 0, "infer returned {rc}");
            };
            if let Some(w) = width_of(cpu) {
                if let Some(again) = peak::gflops(w, 5) {
                    for (pw, p) in peaks.iter_mut() {
                        if *pw == w {
                            *p = Some(p.map_or(again, |p| p.max(again)));
                        }
                    }
                }
            }
            run();
            let once = time_calls(1, &mut run);
            let calls = calls_for(budget, once);
            // Each round is paired with a peak measurement taken right before it, and the
            // fraction of peak is the median of the rounds' ratios: this VM's core runs at
            // ~0.5–1× its best speed for minutes at a time, and a median kernel time over
            // the best peak ever seen mixes the two phases (256³ on AVX-512 read 50% in a
            // slow spell and 80% minutes later).
            let flop = 2.0 * (m * n * k) as f64;
            let (mut times, mut ratios) = (vec![], vec![]);
            for _ in 0..rounds {
                let local_peak = width_of(cpu).and_then(|w| peak::gflops(w, 1));
                let t = time_calls(calls, &mut run);
                times.push(t);
                if let Some(p) = local_peak {
                    ratios.push(flop / (t * 1e-3) / 1e9 / p);
                }
            }
            let fraction = (!ratios.is_empty()).then(|| median(&ratios));
            let ms = median(&times);
            let best_ms = times.iter().copied().fold(f64::INFINITY, f64::min);
            let best_gflops = flop / (best_ms * 1e-3) / 1e9;
            let rel_err = samples
                .iter()
                .zip(&reference)
                .fold(0f64, |e, (&(i, j), r)| {
                    e.max((f64::from(y[i * n + j]) - r).abs() / scale)
                });
            let gflops = flop / (ms * 1e-3) / 1e9;
            eprintln!(
                "{m}x{k}x{n} --cpu {cpu}: {ms:.3} ms, {gflops:.1} GFLOP/s, max rel err {rel_err:.1e}"
            );
            if rel_err > 1e-3 {
                eprintln!("error: {m}x{k}x{n} --cpu {cpu}: wrong results (rel err {rel_err:.1e})");
            }
            cells.push(Cell {
                shape: (m, k, n),
                cpu: cpu.clone(),
                gflops,
                fraction,
                best_gflops,
                ms,
                rel_err,
            });
            drop(lib);
        }
    }

    let peak_rows: Vec<Vec<String>> = peaks
        .iter()
        .map(|(w, p)| {
            vec![
                format!("{w}-bit FMA"),
                p.map_or("n/a".into(), |g| format!("{g:.1}")),
                cpus.iter()
                    .filter(|c| width_of(c) == Some(*w))
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", "),
            ]
        })
        .collect();
    let peak_table = markdown_table(
        &[
            "vector width",
            "peak GFLOP/s (1 core, best seen)",
            "used by --cpu",
        ],
        &peak_rows,
    );
    let mut header = vec!["M×K×N".to_string()];
    for c in &cpus {
        header.push(format!("{c} GFLOP/s"));
        header.push(format!("{c} % peak"));
        header.push(format!("{c} best % peak"));
    }
    let peak_of = |cpu: &str| {
        width_of(cpu).and_then(|w| peaks.iter().find(|(pw, _)| *pw == w).and_then(|(_, p)| *p))
    };
    let rows: Vec<Vec<String>> =
        shapes
            .iter()
            .map(|&s| {
                let mut r = vec![format!("{}×{}×{}", s.0, s.1, s.2)];
                for c in &cpus {
                    match cells.iter().find(|x| x.shape == s && &x.cpu == c) {
                        Some(x) => {
                            let flag = if x.rel_err > 1e-3 { " WRONG" } else { "" };
                            r.push(format!("{:.1}{flag}", x.gflops));
                            r.push(
                                x.fraction
                                    .map_or("-".into(), |f| format!("{:.0}%", 100.0 * f)),
                            );
                            r.push(peak_of(c).map_or("-".into(), |p| {
                                format!("{:.0}%", 100.0 * x.best_gflops / p)
                            }));
                        }
                        None => {
                            r.push("failed".into());
                            r.push("-".into());
                            r.push("-".into());
                        }
                    }
                }
                r
            })
            .collect();
    let header_refs: Vec<&str> = header.iter().map(String::as_str).collect();
    let table = markdown_table(&header_refs, &rows);
    let intro = format!(
        "nnc{} MatMul (A[M,K] input × B[K,N] constant), median of {rounds} rounds, 1 thread, {clock}; \
         % of peak: median over the rounds of each round's GFLOP/s over the FMA peak measured \
         right before it; best % peak: the fastest round over the best FMA peak seen; \
         at the width each --cpu targets \
         (baseline 128-bit, x86-64-v3 256-bit, x86-64-v4 512-bit); {}, {}.\n\n",
        nnc_bin
            .as_ref()
            .map_or(String::new(), |b| format!(" ({})", b.display())),
        common::cpu_model(),
        common::today_utc()
    );
    let text = format!("{intro}{peak_table}\n{table}");
    println!("\n{text}");
    if let Some(p) = args.get("md") {
        let p = resolve_output(p);
        std::fs::write(&p, &text).unwrap_or_else(|e| die(&format!("{}: {e}", p.display())));
    }
    if let Some(p) = args.get("json") {
        let p = resolve_output(p);
        let peaks_json: Vec<String> = peaks
            .iter()
            .map(|(w, p)| format!("\"{w}\": {}", p.map_or("null".into(), json_num)))
            .collect();
        let items: Vec<String> = cells
            .iter()
            .map(|c| {
                format!(
                    "  {{\"m\": {}, \"k\": {}, \"n\": {}, \"cpu\": {}, \"ms\": {}, \"gflops\": {}, \"fraction_of_peak\": {}, \"best_gflops\": {}, \"best_fraction_of_peak\": {}, \"max_rel_err\": {}}}",
                    c.shape.0,
                    c.shape.1,
                    c.shape.2,
                    json_str(&c.cpu),
                    json_num(c.ms),
                    json_num(c.gflops),
                    c.fraction.map_or("null".into(), json_num),
                    json_num(c.best_gflops),
                    peak_of(&c.cpu).map_or("null".into(), |p| json_num(c.best_gflops / p)),
                    json_num(c.rel_err)
                )
            })
            .collect();
        let json = format!(
            "{{\"date\": {}, \"cpu_model\": {}, \"clock\": {}, \"rounds\": {rounds}, \"peak_gflops\": {{{}}}, \"rows\": [\n{}\n]}}\n",
            json_str(&common::today_utc()),
            json_str(&common::cpu_model()),
            json_str(clock),
            peaks_json.join(", "),
            items.join(",\n")
        );
        std::fs::write(&p, json).unwrap_or_else(|e| die(&format!("{}: {e}", p.display())));
    }
    if cells.iter().any(|c| c.rel_err > 1e-3) {
        std::process::exit(1);
    }
}
