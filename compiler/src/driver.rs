//! The compile pipeline behind `nnc compile` and the build-script helper: import →
//! graph passes ([`crate::passes`]) → code generation → artifact (.so / .o / .a) plus
//! its C header, written atomically.

use std::path::{Path, PathBuf};

use crate::artifact;
use crate::codegen::{self, CompileOptions, CompiledModel};
use crate::error::{NncError, Result};
use crate::ir::Graph;
use crate::onnx::{self, ImportOptions};
use crate::passes::{PassError, PassManager};
use crate::progress::{Progress, Silent};
use crate::quant::host::Int8Host;
use crate::quant::pipeline::{Int8Options, Int8Report};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArtifactKind {
    SharedObject,
    Object,
    StaticArchive,
}

impl ArtifactKind {
    /// The extension of `-o` picks the kind.
    pub fn from_path(path: &Path) -> Result<ArtifactKind> {
        match path.extension().and_then(|e| e.to_str()) {
            Some("so") => Ok(ArtifactKind::SharedObject),
            Some("o") => Ok(ArtifactKind::Object),
            Some("a") => Ok(ArtifactKind::StaticArchive),
            _ => Err(NncError::Model(format!(
                "{}: the output must end in .so, .o or .a",
                path.display()
            ))),
        }
    }
}

pub struct Compiled {
    /// The model file it was compiled from, which writing must never overwrite.
    pub source: PathBuf,
    pub graph: Graph,
    pub model: CompiledModel,
}

/// Imports and compiles a model in memory, running the default graph passes.
pub fn compile_model(
    path: &Path,
    import: &ImportOptions,
    opts: &CompileOptions,
) -> Result<Compiled> {
    compile_model_with(path, import, opts, &PassManager::default())
}

/// Imports a model, runs `passes` over its graph and compiles it in memory.
pub fn compile_model_with(
    path: &Path,
    import: &ImportOptions,
    opts: &CompileOptions,
    passes: &PassManager,
) -> Result<Compiled> {
    compile_model_reporting(path, import, opts, passes, &Silent)
}

/// [`compile_model_with`], reporting code generation to `progress`.
pub fn compile_model_reporting(
    path: &Path,
    import: &ImportOptions,
    opts: &CompileOptions,
    passes: &PassManager,
    progress: &dyn Progress,
) -> Result<Compiled> {
    let graph = load_graph(path, import, passes)?;
    let model =
        codegen::compile_graph_reporting(&graph, opts, progress).map_err(|e| e.in_file(path))?;
    Ok(Compiled {
        source: path.to_path_buf(),
        graph,
        model,
    })
}

/// The graph `nnc compile` compiles, after its passes (also for tools that run it
/// another way: `nnc run`, `nnc verify`). With ranges, the model is imported once over
/// symbolic shapes (see [`prepare_graph`]).
pub fn load_graph(path: &Path, import: &ImportOptions, passes: &PassManager) -> Result<Graph> {
    let graph = onnx::load_model(path, import)?;
    prepare_graph(graph, passes).map_err(|e| NncError::from(e).in_file(path))
}

/// An imported graph after `passes`. A graph over symbolic shapes gets the passes that
/// keep symbolic types; where its one dim is a batch of independent samples it then
/// becomes one sample's static graph in a loop ([`crate::passes::per_sample`]), which
/// gets every pass a static graph gets.
pub fn prepare_graph(mut graph: Graph, passes: &PassManager) -> Result<Graph, PassError> {
    if graph.symbols.is_empty() {
        passes.run(&mut graph)?;
        return Ok(graph);
    }
    symbolic_passes(passes).run(&mut graph)?;
    match crate::passes::per_sample::per_sample_graph(&graph) {
        Ok(mut one) => {
            passes.run(&mut one)?;
            Ok(one)
        }
        Err(_) => Ok(graph),
    }
}

/// The passes that keep symbolic types: they never compute a new value's type from
/// the planned maxima.
const SYMBOLIC_PASSES: &[&str] = &[
    "const_fold",
    "cse",
    "views",
    "fold_affine",
    "gelu",
    "small_powers",
    "fuse_epilogue",
    "dce",
];

/// The passes of `passes` that run on symbolic graphs, in its order.
pub fn symbolic_passes(passes: &PassManager) -> PassManager {
    PassManager {
        pipeline: (passes.pipeline.iter())
            .filter(|(n, _)| SYMBOLIC_PASSES.contains(&n.as_str()))
            .cloned()
            .collect(),
        dump: passes.dump,
        limits: passes.limits,
    }
}

/// [`compile_model_with`] plus static INT8 quantization between the graph passes and
/// code generation; also returns the quantization report. `host` supplies the
/// calibration samples and runs graphs on this machine.
pub fn compile_model_int8(
    path: &Path,
    import: &ImportOptions,
    opts: &CompileOptions,
    passes: &PassManager,
    int8: &Int8Options,
    host: &Int8Host,
) -> Result<(Compiled, Int8Report)> {
    let mut graph = load_graph(path, import, passes)?;
    if !graph.symbols.is_empty() {
        return Err(NncError::Model(format!(
            "{}: INT8 quantization takes a static graph or a batch of independent samples; \
             these ranges compile over symbolic shapes (bind them with --dim NAME=VALUE)",
            path.display()
        )));
    }
    // Weights every variant multiplies exactly at full speed.
    let int8 = &Int8Options {
        weight_max: int8.weight_max.min(codegen::int8_weight_max(&opts.target)),
        ..int8.clone()
    };
    let report = crate::quant::pipeline::quantize_int8(&mut graph, int8, host)
        .map_err(|e| NncError::from(e).in_file(path))?;
    let model = codegen::compile_graph_reporting(&graph, opts, host.progress)
        .map_err(|e| e.in_file(path))?;
    Ok((
        Compiled {
            source: path.to_path_buf(),
            graph,
            model,
        },
        report,
    ))
}

/// The artifact bytes for one kind.
pub fn artifact_bytes(kind: ArtifactKind, object: &[u8], file_name: &str) -> Result<Vec<u8>> {
    let err = |e: artifact::ArtifactError| NncError::Artifact {
        kind: file_name.to_string(),
        message: e.to_string(),
    };
    match kind {
        ArtifactKind::Object => Ok(object.to_vec()),
        ArtifactKind::SharedObject => artifact::link_shared_object(object, file_name).map_err(err),
        ArtifactKind::StaticArchive => {
            let member = Path::new(file_name).with_extension("o");
            artifact::write_static_archive(&member.to_string_lossy(), object).map_err(err)
        }
    }
}

/// The header path beside an artifact: `libm.so` → `libm.h`.
pub fn header_path(output: &Path) -> PathBuf {
    output.with_extension("h")
}

/// Writes the artifact and its header; nothing is left behind on failure. Neither may
/// replace the model, nor the header a file nnc did not write
/// ([`crate::output_paths::check_output_paths`]).
pub fn write_artifacts(compiled: &Compiled, output: &Path, name: &str) -> Result<PathBuf> {
    let kind = ArtifactKind::from_path(output)?;
    crate::output_paths::check_output_paths(&compiled.source, output, &header_path(output))?;
    let file_name = output
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let bytes = artifact_bytes(kind, &compiled.model.object, &file_name)?;
    let header = header_path(output);
    let stem = output
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let m = &compiled.model;
    let cpu = (m.cpu_variants.as_str(), m.required_cpu_features.as_str());
    let text = crate::header::generate(&compiled.graph, name, &stem, m.arena_size, cpu);
    let mode = if kind == ArtifactKind::SharedObject {
        0o755
    } else {
        0o644
    };
    // The header sizes the caller's buffers for this library: the two are replaced as
    // a pair, so concurrent compiles to one path never leave one's library beside
    // another's header.
    let files = [
        artifact::FileToWrite {
            path: output,
            bytes: &bytes,
            mode: Some(mode),
        },
        artifact::FileToWrite {
            path: &header,
            bytes: text.as_bytes(),
            mode: None,
        },
    ];
    artifact::write_atomically_together(&files).map_err(|e| NncError::write(output, e))?;
    Ok(header)
}
