//! `--quantize int8` end to end: random CNN and transformer-style models (importer,
//! graph passes, calibration, the INT8 rewrite, code generation), calibrated on
//! generated samples and compared with their float32 builds on held-out inputs; plus
//! the CLI contract (the report on stderr, the errors for missing calibration).

#[path = "../../tests/common/models.rs"]
mod models;
#[path = "../../tests/common/runner.rs"]
mod runner;
#[path = "../../tests/common/tools.rs"]
mod tools;

use std::path::Path;
use std::process::Command;

use nnc::codegen::{CompileOptions, Target};
use nnc::driver;
use nnc::ir::{Graph, Tensor};
use nnc::onnx::ImportOptions;
use nnc::ops::Op;
use nnc::passes::PassManager;
use nnc::quant::host::Int8Host;
use nnc::quant::pipeline::{Int8Options, Int8Report};
use nnc::quant::ranges::Method;
use runner::Compiled;

/// `n` samples of `shape` (batch 1) stacked along the batch axis, uniform in [-1, 1).
fn samples(rng: &mut models::Rng, n: usize, shape: &[usize]) -> Tensor {
    let per: usize = shape.iter().product();
    let mut full = shape.to_vec();
    full[0] = n;
    Tensor::from_vec(&full, rng.vec(n * per, 1.0))
}

fn split(t: &Tensor, shape: &[usize]) -> Vec<Tensor> {
    let Tensor::F32(a) = t else { unreachable!() };
    let v: Vec<f32> = a.iter().copied().collect();
    let per: usize = shape.iter().product();
    v.chunks(per)
        .map(|c| Tensor::from_vec(shape, c.to_vec()))
        .collect()
}

/// `driver::compile_model_int8` as `nnc compile --quantize int8` runs it: samples read
/// from `calibration`, graphs run through nnc-host's loader.
fn compile_int8(
    path: &Path,
    import: &ImportOptions,
    opts: &CompileOptions,
    passes: &PassManager,
    int8: &Int8Options,
    calibration: &Path,
) -> nnc::error::Result<(driver::Compiled, Int8Report)> {
    let host = Int8Host {
        calibration: &nnc_host::CalibrationFiles(calibration.to_path_buf()),
        runner: &nnc_host::LoaderRunner,
        progress: &nnc::progress::Silent,
    };
    driver::compile_model_int8(path, import, opts, passes, int8, &host)
}

fn options() -> CompileOptions {
    CompileOptions::new(Target::host())
}

/// SQNR (dB) and mean cosine similarity of `got` against `reference`, over all samples.
fn quality(reference: &[Tensor], got: &[Tensor]) -> (f64, f64) {
    let (mut signal, mut noise, mut cos) = (0f64, 0f64, 0f64);
    for (r, q) in reference.iter().zip(got) {
        let (r, q) = (r.to_f64_vec(), q.to_f64_vec());
        let dot: f64 = r.iter().zip(&q).map(|(a, b)| a * b).sum();
        let (rr, qq): (f64, f64) = (r.iter().map(|a| a * a).sum(), q.iter().map(|b| b * b).sum());
        signal += rr;
        noise += r
            .iter()
            .zip(&q)
            .map(|(a, b)| (a - b) * (a - b))
            .sum::<f64>();
        cos += dot / (rr.sqrt() * qq.sqrt());
    }
    (
        10.0 * (signal / noise).log10(),
        cos / reference.len() as f64,
    )
}

/// Quantizes `model` calibrated on 32 samples, runs both builds on 8 others.
fn check_model(name: &str, model: &[u8], shape: &[usize], min_sqnr: f64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{name}.onnx"));
    std::fs::write(&path, model).unwrap();
    let mut rng = models::Rng::new(99);
    let calib = dir.path().join("calibration.npy");
    std::fs::write(
        &calib,
        nnc_host::npy::to_bytes(&samples(&mut rng, 32, shape)).unwrap(),
    )
    .unwrap();
    let held_out = split(&samples(&mut rng, 8, shape), shape);

    let passes = PassManager::from_list("default").unwrap();
    let import = ImportOptions::default();
    let float = driver::compile_model_with(&path, &import, &options(), &passes).unwrap();
    let int8 = Int8Options {
        method: Method::MinMax,
        keep_fp32: vec![],
        min_sqnr_db: None,
        bias_correction: true,
        weight_max: 127,
    };
    let (quant, report) = compile_int8(&path, &import, &options(), &passes, &int8, &calib)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(report.samples, 32, "{name}");
    assert!(!report.quantized.is_empty(), "{name}: nothing quantized");
    assert_eq!(report.quantized.len(), report.candidates, "{name}");
    // No float layer with constant weights is left: they all became integer ops.
    let ops = |g: &Graph, pick: fn(&Op) -> bool| g.nodes.iter().filter(|n| pick(&n.op)).count();
    assert_eq!(
        ops(&quant.graph, |o| matches!(
            o,
            Op::ConvInteger(_) | Op::MatMulInteger | Op::ConvU8S8 { .. }
        )),
        report.quantized.len(),
        "{name}: one integer op per layer"
    );
    // Every input is quantized once per way it is read: by a QuantizeLinear (GEMMs)
    // or a QuantizeToPlanes (convs); 2-D convs take the fused path.
    let quantizers = ops(&quant.graph, |o| {
        matches!(o, Op::QuantizeLinear { .. } | Op::QuantizeToPlanes(_))
    });
    assert!(
        quantizers >= 1 && quantizers <= report.quantized.len(),
        "{name}"
    );
    assert_eq!(
        ops(&quant.graph, |o| matches!(o, Op::ConvInteger(_))),
        0,
        "{name}: every conv on the fused INT8 kernels"
    );
    // In the conv chain every conv but the last feeds only the next one: each writes
    // the next one's planes itself (the requantize pass), scattered into the strided
    // conv's phases, stored whole into the 1×1's.
    if name == "conv chain" {
        let requantizing = ops(&quant.graph, |o| {
            matches!(
                o,
                Op::ConvU8S8 {
                    requantize: Some(_),
                    ..
                }
            )
        });
        assert_eq!(requantizing, 2, "{name}:\n{}", quant.graph);
    }

    if name == "split convs" && Target::host().has(nnc::codegen::CpuFeature::Avx2) {
        let plan =
            nnc::codegen::plan::plan_kernels(&quant.graph, &Target::host(), &Default::default());
        let split = quant
            .graph
            .nodes
            .iter()
            .zip(&plan.nodes)
            .filter(|(n, k)| matches!(n.op, Op::ConvU8S8 { .. }) && k.tasks > 1)
            .count();
        assert!(split >= 4, "{name}: {split} INT8 convs split");
        let quantizers = quant
            .graph
            .nodes
            .iter()
            .zip(&plan.nodes)
            .filter(|(n, k)| matches!(n.op, Op::QuantizeToPlanes(_)) && k.tasks > 1)
            .count();
        assert!(quantizers >= 1, "{name}: no quantization into planes split");
    }
    let run = |g: &Graph| {
        let lib = Compiled::new(g).unwrap();
        held_out
            .iter()
            .map(|x| lib.run(g, std::slice::from_ref(x)).unwrap().remove(0))
            .collect::<Vec<_>>()
    };
    let (reference, got) = (run(&float.graph), run(&quant.graph));
    // `run` with pools of every size gives `infer`'s outputs bit for bit, on the
    // host's INT8 kernels and the AVX2 and AVX-VNNI ones where the host runs them.
    let mut targets = vec![Target::host()];
    for cpu in ["x86-64-v3", "x86-64-v3+avxvnni"] {
        if cfg!(target_arch = "x86_64") && tools::host_runs(cpu) {
            targets.push(Target::new(nnc::codegen::Arch::X86_64, Some(cpu)).unwrap());
        }
    }
    for target in targets {
        let lib = Compiled::for_target(&quant.graph, target.clone()).unwrap();
        let want: Vec<Tensor> = held_out
            .iter()
            .map(|x| {
                lib.run(&quant.graph, std::slice::from_ref(x))
                    .unwrap()
                    .remove(0)
            })
            .collect();
        for threads in [2, 3, 8] {
            let pool = nnc_runtime_abi::ThreadPool::new(threads).unwrap();
            for (x, want) in held_out.iter().zip(&want) {
                let pooled = lib
                    .run_pooled(&quant.graph, std::slice::from_ref(x), Some(&pool.as_raw()))
                    .unwrap();
                assert!(
                    pooled[0] == *want,
                    "{name}, {}: {threads} threads differ from infer",
                    target.cpu
                );
            }
        }
    }
    let (sqnr, cosine) = quality(&reference, &got);
    eprintln!("{name}: held-out SQNR {sqnr:.1} dB, cosine {cosine:.6}; {report}");
    assert!(
        sqnr >= min_sqnr && sqnr.is_finite(),
        "{name}: SQNR {sqnr:.1} dB"
    );
    assert!(cosine >= 0.99, "{name}: cosine {cosine}");
    // The report's own figures agree in kind with the held-out ones.
    assert!(
        report.outputs.iter().all(|o| o.sqnr_db >= min_sqnr),
        "{name}: {report}"
    );
}

#[test]
fn int8_cnn_stays_close_to_float32() {
    let (model, shape) = models::cnn(5);
    check_model("cnn", &model, &shape, 30.0);
}

/// conv 3×3 → relu → conv 3×3 stride 2 → relu → conv 1×1.
#[test]
fn int8_conv_chain_requantizes_into_the_next_planes() {
    use models::{Attr, ModelBuilder};
    let mut m = ModelBuilder::new(21);
    let shape = vec![1, 8, 12, 12];
    let x = m.input("image", &shape);
    let w1 = m.weight(&[16, 8, 3, 3], 0.3);
    let b1 = m.weight(&[16], 0.1);
    let pads = || ("pads", Attr::Ints(vec![1, 1, 1, 1]));
    let y = m.node("Conv", &[&x, &w1, &b1], vec![pads()]);
    let y = m.node("Relu", &[&y], vec![]);
    let w2 = m.weight(&[16, 16, 3, 3], 0.2);
    let y = m.node(
        "Conv",
        &[&y, &w2],
        vec![pads(), ("strides", Attr::Ints(vec![2, 2]))],
    );
    let y = m.node("Relu", &[&y], vec![]);
    let w3 = m.weight(&[10, 16, 1, 1], 0.3);
    let y = m.node("Conv", &[&y, &w3], vec![]);
    m.output(&y);
    check_model("conv chain", &m.encode(), &shape, 30.0);
}

/// The conv chain at a size the kernel plan splits into tasks by map tiles (on x86
/// machine-code kernels), with a depthwise conv and a residual: pooled runs must equal
/// `infer`.
#[test]
fn int8_convs_split_into_tasks_match_infer() {
    use models::{Attr, ModelBuilder};
    let mut m = ModelBuilder::new(22);
    let shape = vec![1, 32, 48, 48];
    let x = m.input("image", &shape);
    let pads = || ("pads", Attr::Ints(vec![1, 1, 1, 1]));
    let w1 = m.weight(&[36, 32, 3, 3], 0.15);
    let b1 = m.weight(&[36], 0.1);
    let y = m.node("Conv", &[&x, &w1, &b1], vec![pads()]);
    let y = m.node("Relu", &[&y], vec![]);
    let wd = m.weight(&[36, 1, 3, 3], 0.3);
    let y = m.node("Conv", &[&y, &wd], vec![pads(), ("group", Attr::I(36))]);
    let y = m.node("Relu", &[&y], vec![]);
    let w2 = m.weight(&[36, 36, 3, 3], 0.1);
    let r = m.node("Conv", &[&y, &w2], vec![pads()]);
    let r = m.node("Add", &[&r, &y], vec![]);
    let r = m.node("Relu", &[&r], vec![]);
    let w3 = m.weight(&[64, 36, 3, 3], 0.1);
    let y = m.node(
        "Conv",
        &[&r, &w3],
        vec![pads(), ("strides", Attr::Ints(vec![2, 2]))],
    );
    let y = m.node("Relu", &[&y], vec![]);
    let w4 = m.weight(&[40, 64, 1, 1], 0.2);
    let y = m.node("Conv", &[&y, &w4], vec![]);
    m.output(&y);
    check_model("split convs", &m.encode(), &shape, 25.0);
}

#[test]
fn int8_transformer_block_stays_close_to_float32() {
    let (model, shape) = models::transformer(3);
    check_model("transformer", &model, &shape, 30.0);
}

/// Mean over output elements of |the quantized build's error averaged over held-out
/// samples|: the systematic part of the error, which bias correction takes out.
fn systematic_error(model: &[u8], shape: &[usize], bias_correction: bool) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.onnx");
    std::fs::write(&path, model).unwrap();
    let mut rng = models::Rng::new(7);
    let calib = dir.path().join("calibration.npy");
    let stacked = samples(&mut rng, 64, shape);
    std::fs::write(&calib, nnc_host::npy::to_bytes(&stacked).unwrap()).unwrap();
    let held_out = split(&samples(&mut rng, 64, shape), shape);
    let passes = PassManager::from_list("default").unwrap();
    let import = ImportOptions::default();
    let float = driver::compile_model_with(&path, &import, &options(), &passes).unwrap();
    let int8 = Int8Options {
        method: Method::MinMax,
        keep_fp32: vec![],
        min_sqnr_db: None,
        bias_correction,
        weight_max: 127,
    };
    let (quant, _) = compile_int8(&path, &import, &options(), &passes, &int8, &calib).unwrap();
    let (f, q) = (
        Compiled::new(&float.graph).unwrap(),
        Compiled::new(&quant.graph).unwrap(),
    );
    let mut error: Vec<f64> = vec![];
    for x in &held_out {
        let a = f
            .run(&float.graph, std::slice::from_ref(x))
            .unwrap()
            .remove(0);
        let b = q
            .run(&quant.graph, std::slice::from_ref(x))
            .unwrap()
            .remove(0);
        let (a, b) = (a.to_f64_vec(), b.to_f64_vec());
        error.resize(a.len(), 0.0);
        for (e, (a, b)) in error.iter_mut().zip(a.iter().zip(&b)) {
            *e += (b - a) / held_out.len() as f64;
        }
    }
    error.iter().map(|e| e.abs()).sum::<f64>() / error.len() as f64
}

/// Inputs far from zero-mean (x + 2) into a conv and a GEMM whose per-channel int8
/// weights round coarsely: with bias correction the outputs' systematic error must
/// shrink to well under half of what it is without.
#[test]
fn bias_correction_removes_the_weight_rounding_shift() {
    use models::{Attr, ModelBuilder};
    let conv = {
        let mut m = ModelBuilder::new(5);
        let shape = vec![1, 16, 10, 10];
        let x = m.input("image", &shape);
        let two = m.float_init(&[1], vec![2.0]);
        let y = m.node("Add", &[&x, &two], vec![]);
        let w = m.weight(&[8, 16, 3, 3], 0.3);
        let y = m.node(
            "Conv",
            &[&y, &w],
            vec![("pads", Attr::Ints(vec![1, 1, 1, 1]))],
        );
        m.output(&y);
        (m.encode(), shape)
    };
    let gemm = {
        let mut m = ModelBuilder::new(6);
        let shape = vec![1, 96];
        let x = m.input("features", &shape);
        let two = m.float_init(&[1], vec![2.0]);
        let y = m.node("Add", &[&x, &two], vec![]);
        let w = m.weight(&[96, 10], 0.3);
        let y = m.node("MatMul", &[&y, &w], vec![]);
        m.output(&y);
        (m.encode(), shape)
    };
    for (name, (model, shape)) in [("conv", conv), ("matmul", gemm)] {
        let without = systematic_error(&model, &shape, false);
        let with = systematic_error(&model, &shape, true);
        eprintln!("{name}: systematic error {without:.2e} uncorrected, {with:.2e} corrected");
        assert!(with < 0.5 * without, "{name}: {with:.2e} vs {without:.2e}");
    }
}

/// Whether `python3 -c "import MODULES"` succeeds.
fn python_imports(modules: &str) -> bool {
    Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn nnc(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_nnc"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn cli_prints_the_report_and_refuses_missing_calibration() {
    let dir = tempfile::tempdir().unwrap();
    let (model, shape) = models::cnn(2);
    let path = dir.path().join("cnn.onnx");
    std::fs::write(&path, model).unwrap();
    let calib = dir.path().join("calib.npy");
    let mut rng = models::Rng::new(1);
    std::fs::write(
        &calib,
        nnc_host::npy::to_bytes(&samples(&mut rng, 4, &shape)).unwrap(),
    )
    .unwrap();
    let out = dir.path().join("libq.so");
    let os = |s: &str| std::ffi::OsString::from(s);
    let r = nnc(&[
        &os("compile"),
        path.as_os_str(),
        &os("--quantize"),
        &os("int8"),
        &os("--calibration"),
        calib.as_os_str(),
        &os("--calibration-method"),
        &os("percentile"),
        &os("-o"),
        out.as_os_str(),
    ]);
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{stderr}");
    assert!(
        stderr.contains("calibrated on 4 samples") && stderr.contains("SQNR"),
        "{stderr}"
    );
    assert!(Path::new(&out).exists());
    let missing = dir.path().join("refused.so");
    let r = nnc(&[
        &os("compile"),
        path.as_os_str(),
        &os("--quantize"),
        &os("int8"),
        &os("-o"),
        missing.as_os_str(),
    ]);
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(
        !r.status.success() && stderr.contains("needs --calibration"),
        "{stderr}"
    );
    let wrong = dir.path().join("wrong.npy");
    std::fs::write(
        &wrong,
        nnc_host::npy::to_bytes(&Tensor::from_vec(&[2, 5], vec![0f32; 10])).unwrap(),
    )
    .unwrap();
    let r = nnc(&[
        &os("compile"),
        path.as_os_str(),
        &os("--quantize"),
        &os("int8"),
        &os("--calibration"),
        wrong.as_os_str(),
        &os("-o"),
        missing.as_os_str(),
    ]);
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(
        !r.status.success() && stderr.contains("wrong.npy") && stderr.contains("'image'"),
        "{stderr}"
    );
    assert!(!missing.exists());
}

/// A model quantized by onnxruntime's `quantize_static` (QDQ) runs on nnc's integer
/// ops (no float Conv/Gemm/MatMul left) and gives onnxruntime's outputs. Needs python3
/// with onnxruntime (skipped otherwise, an error under NNC_TEST_REQUIRE_TOOLS=1).
#[test]
fn onnxruntime_qdq_models_run_on_integer_ops_and_match_onnxruntime() {
    if !python_imports("onnxruntime.quantization, onnx, numpy") {
        tools::skip("python3 with onnxruntime and onnx is needed to make QDQ models");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (model, shape) = models::cnn(7);
    let path = dir.path().join("cnn.onnx");
    std::fs::write(&path, model).unwrap();
    let mut rng = models::Rng::new(11);
    let per: Vec<usize> = shape[1..].to_vec();
    let calib = dir.path().join("calib.npy");
    let held = dir.path().join("held.npy");
    let stacked = |rng: &mut models::Rng, n: usize| {
        let mut s = vec![n];
        s.extend(&per);
        Tensor::from_vec(&s, rng.vec(n * per.iter().product::<usize>(), 1.0))
    };
    std::fs::write(
        &calib,
        nnc_host::npy::to_bytes(&stacked(&mut rng, 16)).unwrap(),
    )
    .unwrap();
    let held_t = stacked(&mut rng, 4);
    std::fs::write(&held, nnc_host::npy::to_bytes(&held_t).unwrap()).unwrap();
    let (qdq, ort_out) = (dir.path().join("qdq.onnx"), dir.path().join("ort.npy"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/ort_qdq.py");
    tools::run(
        Command::new("python3")
            .arg(&script)
            .args([&path, &calib, &held, &qdq, &ort_out]),
    );
    let passes = PassManager::from_list("default").unwrap();
    let compiled =
        driver::compile_model_with(&qdq, &ImportOptions::default(), &options(), &passes).unwrap();
    let g = &compiled.graph;
    let float_layers = g
        .nodes
        .iter()
        .filter(|n| matches!(n.op, Op::Conv(_) | Op::Gemm(_) | Op::MatMul(_)))
        .count();
    let int_layers = g
        .nodes
        .iter()
        .filter(|n| {
            matches!(
                n.op,
                Op::ConvInteger(_) | Op::MatMulInteger | Op::ConvU8S8 { .. }
            )
        })
        .count();
    assert_eq!(float_layers, 0, "float layers left:\n{g}");
    assert_eq!(int_layers, 4, "{g}");
    // The three convs (one depthwise) on nnc's fused INT8 kernels.
    let fused = g
        .nodes
        .iter()
        .filter(|n| matches!(n.op, Op::ConvU8S8 { .. }))
        .count();
    assert_eq!(fused, 3, "{g}");
    let expected = nnc_host::npy::read(&ort_out).unwrap().to_f64_vec();
    let lib = Compiled::new(g).unwrap();
    let per_out = expected.len() / 4;
    for (i, x) in split(&held_t, &shape).iter().enumerate() {
        let got = lib
            .run(g, std::slice::from_ref(x))
            .unwrap()
            .remove(0)
            .to_f64_vec();
        let want = &expected[i * per_out..(i + 1) * per_out];
        let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
        let err = got
            .iter()
            .zip(want)
            .fold(0f64, |m, (a, b)| m.max((a - b).abs()))
            / scale;
        // The reference evaluates the QDQ graph as it states (ort_qdq.py): the integer
        // sums are the same, and only a float32 rounding that lands on a rounding tie
        // of a QuantizeLinear could move a value by a quantization step (a few
        // percent of this softmax output, not its top class).
        let top = |v: &[f64]| (0..v.len()).max_by(|&a, &b| v[a].total_cmp(&v[b]));
        eprintln!("sample {i}: max rel diff {err:.3e} vs onnxruntime");
        assert!(
            err <= 2e-2,
            "sample {i}: max rel diff {err:e} vs onnxruntime"
        );
        assert_eq!(top(&got), top(want), "sample {i}: top class");
    }
}

/// `--int8-min-sqnr`: layers go back to float32, worst first, until every output
/// reaches the target; an unreachable target leaves nothing quantized.
#[test]
fn min_sqnr_keeps_the_most_sensitive_layers_in_float32() {
    let dir = tempfile::tempdir().unwrap();
    let (model, shape) = models::cnn(5);
    let path = dir.path().join("cnn.onnx");
    std::fs::write(&path, model).unwrap();
    let calib = dir.path().join("calib.npy");
    let mut rng = models::Rng::new(3);
    std::fs::write(
        &calib,
        nnc_host::npy::to_bytes(&samples(&mut rng, 16, &shape)).unwrap(),
    )
    .unwrap();
    let passes = PassManager::from_list("default").unwrap();
    let run = |target: f64| {
        let int8 = Int8Options {
            method: Method::MinMax,
            keep_fp32: vec![],
            min_sqnr_db: Some(target),
            bias_correction: true,
            weight_max: 127,
        };
        compile_int8(
            &path,
            &ImportOptions::default(),
            &options(),
            &passes,
            &int8,
            &calib,
        )
        .unwrap()
        .1
    };
    let free = run(0.0);
    assert!(free.kept_for_sqnr.is_empty());
    let first = free.outputs[0].sqnr_db;
    // Just above what full quantization reaches: at least one layer goes back.
    let tighter = run(first + 0.5);
    assert!(!tighter.kept_for_sqnr.is_empty(), "{tighter}");
    assert!(
        tighter.outputs.iter().all(|o| o.sqnr_db >= first + 0.5),
        "{tighter}"
    );
    assert_eq!(
        tighter.quantized.len() + tighter.kept_for_sqnr.len(),
        tighter.candidates
    );
    assert!(!tighter.quantized.is_empty(), "{tighter}");
    let none = run(1e9);
    assert!(none.quantized.is_empty(), "{none}");
    assert_eq!(none.kept_for_sqnr.len(), none.candidates);
}

/// conv → (+ an outlier) → conv → conv: the middle conv's input range is stretched
/// by one huge value (in a channel the middle conv ignores, so it does not swamp the
/// output), so its uint8 steps are coarse and it costs the output most.
/// `--int8-min-sqnr` must keep exactly the middle one.
#[test]
fn min_sqnr_keeps_the_layer_that_costs_the_outputs_most() {
    use models::{Attr, ModelBuilder};
    let mut m = ModelBuilder::new(8);
    let shape = vec![1, 8, 8, 8];
    let x = m.input("image", &shape);
    let pads = || ("pads", Attr::Ints(vec![1, 1, 1, 1]));
    let w1 = m.weight(&[8, 8, 3, 3], 0.3);
    let y = m.node("Conv", &[&x, &w1], vec![pads()]);
    let mut outlier = vec![0f32; 8 * 8 * 8];
    outlier[5] = 300.0;
    let outlier = m.float_init(&[1, 8, 8, 8], outlier);
    let y = m.node("Add", &[&y, &outlier], vec![]);
    let mut w2 = models::Rng::new(9).vec(8 * 8 * 9, 0.3);
    for map in w2.chunks_mut(8 * 9) {
        map[..9].iter_mut().for_each(|w| *w = 0.0);
    }
    let w2 = m.float_init(&[8, 8, 3, 3], w2);
    let y = m.node("Conv", &[&y, &w2], vec![pads()]);
    let w3 = m.weight(&[8, 8, 3, 3], 0.3);
    let y = m.node("Conv", &[&y, &w3], vec![pads()]);
    m.output(&y);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outlier.onnx");
    std::fs::write(&path, m.encode()).unwrap();
    let calib = dir.path().join("calib.npy");
    let mut rng = models::Rng::new(4);
    std::fs::write(
        &calib,
        nnc_host::npy::to_bytes(&samples(&mut rng, 16, &shape)).unwrap(),
    )
    .unwrap();
    let passes = PassManager::from_list("default").unwrap();
    let run = |target: Option<f64>| {
        let int8 = Int8Options {
            method: Method::MinMax,
            keep_fp32: vec![],
            min_sqnr_db: target,
            bias_correction: true,
            weight_max: 127,
        };
        compile_int8(
            &path,
            &ImportOptions::default(),
            &options(),
            &passes,
            &int8,
            &calib,
        )
        .unwrap()
        .1
    };
    let all = run(None);
    let convs: Vec<String> = all.quantized.iter().map(|l| l.node.clone()).collect();
    assert_eq!(convs.len(), 3, "{all}");
    let target = all.outputs[0].sqnr_db + 10.0;
    let kept = run(Some(target));
    assert_eq!(kept.kept_for_sqnr, vec![convs[1].clone()], "{all}\n{kept}");
    assert!(kept.outputs[0].sqnr_db >= target, "{kept}");
}

/// onnxruntime's com.microsoft QLinearAdd, QLinearMul (broadcast) and
/// QLinearGlobalAveragePool: nnc's outputs within one quantization step of
/// onnxruntime's, and mostly identical.
#[test]
fn onnxruntime_qlinear_elementwise_ops_match_onnxruntime() {
    if !python_imports("onnxruntime, onnx, numpy") {
        tools::skip("python3 with onnxruntime and onnx is needed for the QLinear ops' reference");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/ort_qlinear.py");
    tools::run(Command::new("python3").arg(&script).arg(dir.path()));
    let passes = PassManager::from_list("default").unwrap();
    let compiled = driver::compile_model_with(
        &dir.path().join("model.onnx"),
        &ImportOptions::default(),
        &options(),
        &passes,
    )
    .unwrap();
    let g = &compiled.graph;
    let load = |n: &str| nnc_host::npy::read(&dir.path().join(format!("{n}.npy"))).unwrap();
    let got = Compiled::new(g)
        .unwrap()
        .run(g, &[load("a"), load("b")])
        .unwrap();
    for (i, name) in ["add", "mul", "gap"].iter().enumerate() {
        let want = load(name).to_i64_vec();
        let have = got[i].to_i64_vec();
        assert_eq!(want.len(), have.len(), "{name}");
        let off = want.iter().zip(&have).filter(|(a, b)| a != b).count();
        let worst = want
            .iter()
            .zip(&have)
            .map(|(a, b)| (a - b).abs())
            .max()
            .unwrap();
        assert!(worst <= 1, "{name}: off by up to {worst}");
        assert!(
            off * 20 <= want.len(),
            "{name}: {off} of {} differ",
            want.len()
        );
    }
}

/// Calibration data that would set a range to inf or NaN, and INT8 flags that would
/// silently do nothing, are each one error saying why (exit 1), before any output.
#[test]
fn cli_refuses_non_finite_calibration_and_flags_that_do_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (model, shape) = models::cnn(2);
    let path = dir.path().join("cnn.onnx");
    std::fs::write(&path, model).unwrap();
    let mut rng = models::Rng::new(1);
    let write = |name: &str, t: &Tensor| {
        let p = dir.path().join(name);
        std::fs::write(&p, nnc_host::npy::to_bytes(t).unwrap()).unwrap();
        p.display().to_string()
    };
    let good = samples(&mut rng, 4, &shape);
    let per_sample: usize = shape.iter().product();
    let mut values = good.to_f64_vec();
    values[2 * per_sample + 5] = f64::INFINITY;
    let with_inf = write(
        "with_inf.npy",
        &Tensor::from_vec(good.shape(), values.iter().map(|&v| v as f32).collect()),
    );
    let huge = write(
        "huge.npy",
        &Tensor::from_vec(good.shape(), vec![3e38f32; good.len()]),
    );
    let good = write("good.npy", &good);
    let out = dir.path().join("libq.so");
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (
            vec!["--calibration", &with_inf],
            vec!["with_inf.npy", "input 'image'", "sample 2", "inf", "finite"],
        ),
        (
            vec!["--calibration", &huge],
            vec!["calibration sample 0", "inf", "finite values"],
        ),
        (
            vec!["--calibration", &good, "--int8-min-sqnr", "nan"],
            vec!["--int8-min-sqnr", "finite"],
        ),
        (
            vec!["--calibration", &good, "--keep-fp32", "no_such_node"],
            vec!["--keep-fp32", "'no_such_node'", "Conv"],
        ),
        (
            vec![
                "--calibration",
                &good,
                "--percentile",
                "50",
                "--calibration-method",
                "minmax",
            ],
            vec!["--percentile 50", "not minmax"],
        ),
        (
            vec!["--calibration", &good, "--percentile", "0"],
            vec!["--percentile 0", "above 0"],
        ),
    ];
    for (flags, needles) in cases {
        let mut args = vec!["compile", path.to_str().unwrap(), "--quantize", "int8"];
        args.extend(&flags);
        args.extend(["-o", out.to_str().unwrap()]);
        let os: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
        let r = nnc(&os.iter().map(|s| s.as_os_str()).collect::<Vec<_>>());
        let stderr = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(1), "{flags:?}: {stderr}");
        for n in needles {
            assert!(
                stderr.contains(n),
                "{flags:?}: '{n}' missing from: {stderr}"
            );
        }
        assert!(!out.exists(), "{flags:?}: an output was written");
    }
    // --percentile alone selects the percentile method; INT8 flags without INT8 are
    // refused.
    let ok = nnc(&[
        "compile".as_ref(),
        path.as_os_str(),
        "--quantize".as_ref(),
        "int8".as_ref(),
        "--calibration".as_ref(),
        good.as_ref(),
        "--percentile".as_ref(),
        "99".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    for flag in [
        ["--keep-fp32", "x"],
        ["--percentile", "99"],
        ["--int8-bias-correction", "off"],
    ] {
        let r = nnc(&[
            "compile".as_ref(),
            path.as_os_str(),
            flag[0].as_ref(),
            flag[1].as_ref(),
            "-o".as_ref(),
            dir.path().join("libf.so").as_os_str(),
        ]);
        let stderr = String::from_utf8_lossy(&r.stderr);
        assert!(
            r.status.code() == Some(1) && stderr.contains("applies to --quantize int8 only"),
            "{flag:?}: {stderr}"
        );
    }
}
