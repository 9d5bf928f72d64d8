//! End to end on x86-64: random ONNX models → `nnc` pipeline → .so → dlopen → compare
//! with the reference interpreter.

#[path = "common/graphs.rs"]
mod graphs;
#[path = "common/models.rs"]
mod models;

use std::ffi::c_void;
use std::path::Path;

use graphs::{rel_err, Rng};
use nnc::codegen::{CompileOptions, Target};
use nnc::driver;
use nnc::ir::{Tensor, TensorType};
use nnc::onnx::ImportOptions;

type InferFn = unsafe extern "C" fn(*const *const c_void, *const *mut c_void) -> i32;

fn random_input(ty: &TensorType, seed: u64) -> Tensor {
    Tensor::from_vec(&ty.shape, Rng::new(seed).f32s(ty.numel(), 1.0))
}

fn check_model(name: &str, bytes: Vec<u8>, seed: u64) {
    check_model_on(name, bytes, seed, Target::host());
}

fn check_model_on(name: &str, bytes: Vec<u8>, seed: u64, target: Target) {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join(format!("{name}.onnx"));
    std::fs::write(&model, bytes).unwrap();
    let opts = CompileOptions {
        target,
        prefix: String::new(),
        weights: Default::default(),
        kernels: Default::default(),
        index_checks: Default::default(),
    };
    let compiled = driver::compile_model(&model, &ImportOptions::default(), &opts)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let so = dir.path().join(format!("lib{name}.so"));
    driver::write_artifacts(&compiled, &so, "").unwrap();
    assert!(Path::new(&so.with_extension("h")).exists());

    let g = &compiled.graph;
    let inputs: Vec<Tensor> = g
        .inputs
        .iter()
        .enumerate()
        .map(|(i, v)| random_input(g.ty(*v), seed + i as u64))
        .collect();
    let expected =
        nnc::interp::run_graph(g, &inputs).unwrap_or_else(|e| panic!("{name}: interpreter: {e}"));

    let lib = unsafe { libloading::Library::new(&so) }.unwrap();
    let infer: libloading::Symbol<InferFn> = unsafe { lib.get(b"infer\0") }.unwrap();
    let in_bytes: Vec<Vec<u8>> = inputs.iter().map(|t| t.to_le_bytes()).collect();
    let mut out_bytes: Vec<Vec<u8>> = g
        .outputs
        .iter()
        .map(|o| vec![0u8; g.ty(*o).byte_size()])
        .collect();
    let ins: Vec<*const c_void> = in_bytes.iter().map(|b| b.as_ptr().cast()).collect();
    let outs: Vec<*mut c_void> = out_bytes
        .iter_mut()
        .map(|b| b.as_mut_ptr().cast())
        .collect();
    assert_eq!(unsafe { infer(ins.as_ptr(), outs.as_ptr()) }, 0);
    for (k, o) in g.outputs.iter().enumerate() {
        let actual = Tensor::from_le_bytes(g.ty(*o), &out_bytes[k]).unwrap();
        let err = rel_err(&actual, &expected[k]);
        println!("{name} output {k}: rel err {err:.2e}");
        assert!(
            err <= 1e-4,
            "{name} output {k}: relative error {err:.3e} > 1e-4"
        );
    }
}

#[test]
fn random_cnns_match_the_interpreter() {
    for seed in 1..4 {
        let (bytes, _) = models::cnn(seed);
        check_model(&format!("cnn{seed}"), bytes, seed);
    }
}

#[test]
fn random_transformer_blocks_match_the_interpreter() {
    for seed in 1..4 {
        let (bytes, _) = models::transformer(seed);
        check_model(&format!("transformer{seed}"), bytes, seed);
    }
}

#[test]
fn random_elementwise_graphs_match_the_interpreter() {
    for seed in 1..4 {
        let (bytes, _) = models::elementwise(seed);
        check_model(&format!("elementwise{seed}"), bytes, seed);
    }
}

#[test]
fn null_pointers_and_misaligned_workspace_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, _) = models::elementwise(7);
    let model = dir.path().join("m.onnx");
    std::fs::write(&model, bytes).unwrap();
    let opts = CompileOptions {
        target: Target::host(),
        prefix: nnc::codegen::symbol_prefix("m"),
        weights: Default::default(),
        kernels: Default::default(),
        index_checks: Default::default(),
    };
    let compiled = driver::compile_model(&model, &ImportOptions::default(), &opts).unwrap();
    let so = dir.path().join("libm.so");
    driver::write_artifacts(&compiled, &so, "m").unwrap();
    type WsFn = unsafe extern "C" fn(*const *const c_void, *const *mut c_void, *mut c_void) -> i32;
    let lib = unsafe { libloading::Library::new(&so) }.unwrap();
    let infer: libloading::Symbol<InferFn> = unsafe { lib.get(b"m_infer\0") }.unwrap();
    let infer_ws: libloading::Symbol<WsFn> =
        unsafe { lib.get(b"m_infer_with_workspace\0") }.unwrap();
    let g = &compiled.graph;
    let input = vec![0u8; g.ty(g.inputs[0]).byte_size()];
    let mut output = vec![0u8; g.ty(g.outputs[0]).byte_size()];
    let ins = [input.as_ptr() as *const c_void];
    let outs = [output.as_mut_ptr() as *mut c_void];
    assert_eq!(
        unsafe { infer(std::ptr::null(), outs.as_ptr()) },
        nnc_runtime_abi::NNC_ERR_NULL_POINTER
    );
    assert_eq!(
        unsafe { infer(ins.as_ptr(), std::ptr::null()) },
        nnc_runtime_abi::NNC_ERR_NULL_POINTER
    );
    let null_out = [std::ptr::null_mut::<c_void>()];
    assert_eq!(
        unsafe { infer(ins.as_ptr(), null_out.as_ptr()) },
        nnc_runtime_abi::NNC_ERR_NULL_POINTER
    );
    if compiled.model.arena_size > 0 {
        let mut ws = vec![0u8; compiled.model.arena_size + 128];
        let base = ws.as_mut_ptr() as usize;
        let aligned = (base + 63) & !63;
        let mis = (aligned + 4) as *mut c_void;
        assert_eq!(
            unsafe { infer_ws(ins.as_ptr(), outs.as_ptr(), mis) },
            nnc_runtime_abi::NNC_ERR_MISALIGNED_WORKSPACE
        );
        assert_eq!(
            unsafe { infer_ws(ins.as_ptr(), outs.as_ptr(), aligned as *mut c_void) },
            nnc_runtime_abi::NNC_OK
        );
    }
}

/// nnc.h: "A non-NULL workspace is required even when workspace_size is 0". A model
/// that needs none (one Relu, input to output) still refuses a NULL or misaligned
/// workspace, and infer() (which passes its static arena) works.
#[test]
fn a_null_workspace_is_rejected_even_when_the_model_needs_none() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = models::ModelBuilder::new(1);
    let x = m.input("x", &[4]);
    let y = m.node("Relu", &[&x], vec![]);
    m.output(&y);
    let model = dir.path().join("m.onnx");
    std::fs::write(&model, m.encode()).unwrap();
    let opts = CompileOptions {
        target: Target::host(),
        prefix: nnc::codegen::symbol_prefix("m"),
        weights: Default::default(),
        kernels: Default::default(),
        index_checks: Default::default(),
    };
    let compiled = driver::compile_model(&model, &ImportOptions::default(), &opts).unwrap();
    assert_eq!(
        compiled.model.arena_size, 0,
        "the test needs a workspace-free model"
    );
    let so = dir.path().join("libm.so");
    driver::write_artifacts(&compiled, &so, "m").unwrap();
    type WsFn = unsafe extern "C" fn(*const *const c_void, *const *mut c_void, *mut c_void) -> i32;
    let lib = unsafe { libloading::Library::new(&so) }.unwrap();
    let infer: libloading::Symbol<InferFn> = unsafe { lib.get(b"m_infer\0") }.unwrap();
    let infer_ws: libloading::Symbol<WsFn> =
        unsafe { lib.get(b"m_infer_with_workspace\0") }.unwrap();
    let input = [-1f32, 2.0, -3.0, 4.0];
    let mut output = [9f32; 4];
    let ins = [input.as_ptr() as *const c_void];
    let outs = [output.as_mut_ptr() as *mut c_void];
    assert_eq!(
        unsafe { infer_ws(ins.as_ptr(), outs.as_ptr(), std::ptr::null_mut()) },
        nnc_runtime_abi::NNC_ERR_MISALIGNED_WORKSPACE
    );
    let mut ws = [0u64; 16];
    let aligned = (ws.as_mut_ptr() as usize + 63) & !63;
    assert_eq!(
        unsafe { infer_ws(ins.as_ptr(), outs.as_ptr(), (aligned + 8) as *mut c_void) },
        nnc_runtime_abi::NNC_ERR_MISALIGNED_WORKSPACE
    );
    assert_eq!(output, [9f32; 4], "nothing is written on a refusal");
    assert_eq!(
        unsafe { infer(ins.as_ptr(), outs.as_ptr()) },
        nnc_runtime_abi::NNC_OK
    );
    assert_eq!(output, [0.0, 2.0, 0.0, 4.0]);
}

/// Every x86-64 `--cpu` level the host can run gives the interpreter's results.
#[test]
fn x86_cpu_levels_match_the_interpreter() {
    if nnc::codegen::Arch::host() != nnc::codegen::Arch::X86_64 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    for (cpu, runnable) in [
        ("baseline", true),
        (
            "x86-64-v3",
            std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma"),
        ),
        ("x86-64-v4", std::arch::is_x86_feature_detected!("avx512f")),
    ] {
        let target = Target::new(nnc::codegen::Arch::X86_64, Some(cpu)).unwrap();
        if !runnable {
            // Compiling still has to work; running needs the CPU.
            let dir = tempfile::tempdir().unwrap();
            let model = dir.path().join("m.onnx");
            std::fs::write(&model, models::cnn(1).0).unwrap();
            let opts = CompileOptions {
                target,
                prefix: String::new(),
                weights: Default::default(),
                kernels: Default::default(),
                index_checks: Default::default(),
            };
            driver::compile_model(&model, &ImportOptions::default(), &opts).unwrap();
            eprintln!("SKIP: running --cpu {cpu} code (this CPU lacks it); compiled only");
            continue;
        }
        check_model_on(&format!("cnn_{cpu}"), models::cnn(1).0, 1, target.clone());
        check_model_on(
            &format!("transformer_{cpu}"),
            models::transformer(1).0,
            1,
            target,
        );
    }
}
