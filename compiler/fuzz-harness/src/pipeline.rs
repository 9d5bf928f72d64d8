//! The compiler's own stages, run in memory on one fuzz input.

use arbitrary::Unstructured;
use nnc::codegen::{compile_graph, Arch, CompileOptions, Target};
use nnc::ir::Graph;
use nnc::onnx::proto::ModelProto;
use nnc::onnx::{import_model, ImportOptions};
use nnc::passes::PassManager;
use prost::Message;

use crate::random_model::random_model;

/// Model bytes → protobuf decode → import (which infers every shape). Refusals are the
/// expected outcome for most inputs.
pub fn import_bytes(data: &[u8]) {
    let Ok(model) = ModelProto::decode(data) else {
        return;
    };
    let _ = import_model(&model, None, &ImportOptions::default());
}

/// A random small model built from `data` → import → default passes → code generation
/// for this machine → shared object, all in memory.
pub fn compile_case(data: &[u8]) {
    let model = random_model(&mut Unstructured::new(data));
    let Some(graph) = optimized_graph(&model) else {
        return;
    };
    let Ok(compiled) = compile_graph(&graph, &CompileOptions::new(fuzz_target())) else {
        return;
    };
    let _ = nnc::artifact::link_shared_object(&compiled.object, "libfuzz.so");
}

/// The target the fuzzed models are compiled for: this machine, or the x86-64 preset
/// named by `NNC_FUZZ_CPU` (e.g. `x86-64-v3`, to run the AVX2 kernels on an AVX-512
/// machine as CI's AVX2 machines do; the host must run it for the differential target).
pub fn fuzz_target() -> Target {
    match std::env::var("NNC_FUZZ_CPU") {
        Ok(cpu) if !cpu.is_empty() => {
            Target::new(Arch::host(), Some(&cpu)).unwrap_or_else(|e| panic!("NNC_FUZZ_CPU: {e}"))
        }
        _ => Target::host(),
    }
}

/// `model` imported (every op supported) and through the default passes; `None` when
/// either refuses it.
pub fn optimized_graph(model: &ModelProto) -> Option<Graph> {
    let mut graph = imported_graph(model)?;
    PassManager::default().run(&mut graph).ok()?;
    Some(graph)
}

/// `model` imported, every op supported; `None` when import refuses it.
pub fn imported_graph(model: &ModelProto) -> Option<Graph> {
    // The bytes a model file would hold: what the CLI decodes is what is imported.
    let model = ModelProto::decode(model.encode_to_vec().as_slice()).ok()?;
    let imported = import_model(&model, None, &ImportOptions::default()).ok()?;
    imported.unsupported.is_empty().then_some(imported.graph)
}
