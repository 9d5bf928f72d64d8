//! The `nnc` command line.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use nnc::codegen::{Arch, CompileOptions, IndexChecks, KernelOptions, Target, WeightFormat};
use nnc::driver;
use nnc::error::{NncError, Result};
use nnc::limits::{ByteSize, Limits};
use nnc::onnx::ImportOptions;
use nnc::quant::host::Int8Host;
use nnc::quant::pipeline::Int8Options;
use nnc::quant::ranges::Method;

#[derive(Parser)]
#[command(
    name = "nnc",
    version,
    about = "Compiles ONNX models into standalone native libraries with a C ABI."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args)]
struct ShapeArgs {
    /// Binds an input's full shape, e.g. `--input-shape input=1,3,224,224`; an axis given
    /// as MIN..MAX (`input=1..8,3,224,224`) is set at run time, as a dim named
    /// `INPUT.AXIS`. Repeatable.
    #[arg(long = "input-shape", value_name = "NAME=D0,D1,...")]
    input_shapes: Vec<String>,
    /// Binds a symbolic dimension by its name in the model, e.g. `--dim batch=1`, or
    /// declares the values it may take at run time, `--dim batch=1..8` (one library for
    /// all of them; `run` takes the value in `nnc_run_options.dims`). Repeatable.
    #[arg(long = "dim", value_name = "PARAM=VALUE|MIN..MAX")]
    dims: Vec<String>,
    /// Replaces an input by a constant read from a .npy or TensorProto .pb file (e.g. the
    /// axes or target shape a model takes as an input), removing it from infer().
    /// Repeatable.
    #[arg(long = "freeze-input", value_name = "NAME=FILE")]
    frozen: Vec<String>,
    /// Binds a sequence input's length and element shapes, elements separated by `;`
    /// (`--sequence-input xs='2,3;4,3'`; `()` is a scalar element, nothing after `=` an
    /// empty sequence). Element k becomes the tensor input `NAME[k]` of infer().
    /// Repeatable.
    #[arg(long = "sequence-input", value_name = "NAME=SHAPE;SHAPE;...")]
    sequence_inputs: Vec<String>,
    /// Compiles an optional input as empty: it is then not an input of infer() (an
    /// optional input not named here is compiled as holding its element). Repeatable.
    #[arg(long = "absent-input", value_name = "NAME")]
    absent_inputs: Vec<String>,
    /// Refuses a model with a tensor (input, output, intermediate or constant) larger
    /// than this many bytes; K, M, G, T suffixes (binary) accepted.
    #[arg(long, value_name = "BYTES", default_value_t = ByteSize(Limits::DEFAULT_MAX_TENSOR_BYTES).to_string())]
    max_tensor_bytes: String,
    /// Constant folding computes results up to this many bytes at compile time; larger
    /// ones are computed by infer().
    #[arg(long, value_name = "BYTES", default_value_t = ByteSize(Limits::DEFAULT_MAX_FOLD_BYTES).to_string())]
    max_fold_bytes: String,
    /// Refuses a model whose weights (initializers, external data, Constant nodes) add
    /// up to more than this many bytes.
    #[arg(long, value_name = "BYTES", default_value_t = ByteSize(Limits::DEFAULT_MAX_WEIGHT_BYTES).to_string())]
    max_weight_bytes: String,
}

/// `--index-checks` values.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum IndexCheckArg {
    /// infer() returns NNC_ERR_INDEX_OUT_OF_RANGE.
    Error,
    /// The index is clamped into range and infer() goes on.
    Clamp,
}

/// `--calibration-method` values.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum CalibrationMethod {
    Minmax,
    Percentile,
    Entropy,
}

/// `--quantize` values.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Quantize {
    Fp16,
    Int8,
}

#[derive(Subcommand)]
enum Command {
    /// Compiles MODEL.onnx into a shared library (.so), object (.o) or static archive (.a),
    /// with a C header (.h) beside it.
    Compile {
        /// The ONNX model.
        model: PathBuf,
        /// Output path; its extension picks the kind: .so, .o or .a. Default: lib<model>.so
        /// next to the model.
        #[arg(short = 'o', long = "output")]
        output: Option<PathBuf>,
        /// Target architecture: x86_64 or aarch64 (aarch64-unknown-linux-gnu). Default: the host.
        #[arg(long)]
        target: Option<String>,
        /// CPU features. x86_64: baseline (SSE4.1), x86-64-v3 (AVX2+FMA),
        /// x86-64-v3+avxvnni (AVX2 with AVX-VNNI: Alder Lake, Zen 5), x86-64-v4
        /// (AVX-512), x86-64-v4+vnni (AVX-512 with VNNI), native (this machine's), or
        /// several separated by commas: one library whose calls run the first variant
        /// the CPU can. Default on x86_64: x86-64-v4+vnni,x86-64-v3+avxvnni,x86-64-v3,baseline.
        /// aarch64: armv8, +dotprod, +i8mm (default: all three).
        #[arg(long)]
        cpu: Option<String>,
        /// Symbol prefix: `--name foo` exports foo_infer, foo_infer_with_workspace and
        /// foo_model_info, so several models link into one program.
        #[arg(long, default_value = "")]
        name: String,
        // Boxed: the Compile variant would otherwise dwarf the others.
        #[command(flatten)]
        shapes: Box<ShapeArgs>,
        /// Quantizes the weights. fp16: the float32 weights kernels read are stored as
        /// IEEE half (the artifact is about half the size) and expanded to float32 in the
        /// workspace as each node runs; computation, inputs and outputs stay as in the
        /// model. int8: static post-training quantization calibrated on --calibration:
        /// Conv/Gemm/MatMul weights per-channel int8, activations uint8, integer
        /// products; prints the accuracy against float32 over the calibration set.
        #[arg(long, value_enum, value_name = "fp16|int8")]
        quantize: Option<Quantize>,
        /// Calibration inputs for --quantize int8: a .npy file (one-input models), a
        /// folder of NAME.npy files named after the inputs, a folder of .npz files keyed
        /// by input name, or ONNX test_data_set_* folders of input_K.pb files. Each array
        /// holds N samples for an input of shape [B, ...]: stacked along the batch axis
        /// ([N·B, ...], e.g. [N, 3, 224, 224] for [1, 3, 224, 224]) or along a new
        /// leading axis ([N, B, ...]); every input gives the same N, in its own dtype.
        #[arg(long, value_name = "PATH")]
        calibration: Option<PathBuf>,
        /// How --quantize int8 picks each activation's range from the calibration
        /// samples: minmax (the extremes seen), percentile (clip |x| at --percentile),
        /// entropy (the clip that minimizes the KL divergence of the 8-bit histogram).
        /// (Default: minmax, or percentile when --percentile is given.)
        #[arg(long, value_enum)]
        calibration_method: Option<CalibrationMethod>,
        /// The percentile of --calibration-method percentile (default 99.99); given
        /// alone, it selects that method.
        #[arg(long)]
        percentile: Option<f64>,
        /// Layers (node names, comma-separated) --quantize int8 leaves in float32.
        #[arg(long, value_name = "NODE,...", value_delimiter = ',')]
        keep_fp32: Vec<String>,
        /// --quantize int8 keeps the most sensitive layers in float32, one at a time,
        /// until every output's SQNR against float32 reaches DB on the calibration set.
        #[arg(long, value_name = "DB")]
        int8_min_sqnr: Option<f64>,
        /// Whether --quantize int8 folds each layer's expected weight-rounding error
        /// (the rounding error times the calibration mean of the input it multiplies)
        /// into the int32 bias, so the outputs stay unbiased.
        /// (Default: on.)
        #[arg(long, value_name = "on|off", value_parser = ["on", "off"])]
        int8_bias_correction: Option<String>,
        /// Prints nnc's IR after the graph passes.
        #[arg(long)]
        dump_ir: bool,
        /// Prints the IR before the first graph pass and after each one, to stderr.
        #[arg(long)]
        dump_passes: bool,
        /// The graph passes to run, comma-separated, in order: `default`, `none`, or
        /// names from qdq, const_fold, cse, views, dead_taps, scale_operand, attention,
        /// fold_affine, gelu, small_powers, batch_gemm, tap_split, fuse_epilogue, dce
        /// (default: `default`).
        #[arg(long)]
        passes: Option<String>,
        /// Overrides one of nnc's kernel choices (KIND=CHOICE, e.g. gemm=clif), for
        /// benchmarks and comparisons; repeatable. `--help` lists the kinds.
        #[arg(long = "kernel", value_name = "KIND=CHOICE", long_help = kernel_help())]
        kernels: Vec<String>,
        /// What infer() does with a data-dependent index (Gather, GatherElements,
        /// GatherND, Scatter*, OneHot, ...) outside its axis: `error` returns
        /// NNC_ERR_INDEX_OUT_OF_RANGE (writing nothing outside any buffer); `clamp` clamps
        /// it into range and goes on.
        #[arg(long, value_enum, default_value = "error")]
        index_checks: IndexCheckArg,
    },
    /// Runs an ONNX backend-test suite (directories holding model.onnx and
    /// test_data_set_*) end to end: compile, run, compare at rtol 1e-3, atol 1e-4.
    Conformance {
        /// A suite directory, e.g. the `node` folder made by scripts/gen_onnx_suite.py.
        suite: PathBuf,
        /// Only cases whose path contains this text.
        #[arg(long)]
        filter: Option<String>,
        /// Writes `case<TAB>pass|fail<TAB>reason` per case.
        #[arg(long)]
        results: Option<PathBuf>,
        /// Fails if any case listed in this file (one name per line) no longer passes.
        #[arg(long)]
        expect_passing: Option<PathBuf>,
        /// Writes the names of the passing cases.
        #[arg(long)]
        write_passing: Option<PathBuf>,
        /// Runs only N cases, evenly spaced over the sorted (filtered) list.
        #[arg(long, value_name = "N")]
        sample: Option<usize>,
        /// x86_64 (the host, default) or aarch64: compiled for aarch64 and run under
        /// qemu-aarch64 with tests/harness/nnc_run.c built by aarch64-linux-gnu-gcc.
        #[arg(long)]
        target: Option<String>,
        /// Cases run in parallel.
        #[arg(long, default_value_t = 2)]
        jobs: usize,
        /// Seconds before a case is killed.
        #[arg(long, default_value_t = 60)]
        timeout: u64,
        /// Freezes no input into a constant: shape-like inputs (axes, pads, shapes, k)
        /// stay inputs, as a model compiled without --freeze-input has them.
        #[arg(long)]
        no_freeze: bool,
    },
    /// Runs one conformance case (used by `nnc conformance`, one process per case).
    #[command(hide = true)]
    ConformanceCase {
        case: PathBuf,
        /// Runs the case on aarch64 under qemu with this harness executable.
        #[arg(long)]
        aarch64_harness: Option<PathBuf>,
        /// See `conformance --no-freeze`.
        #[arg(long)]
        no_freeze: bool,
    },
    /// Compiles MODEL.onnx for this machine in memory, runs it on the given inputs and
    /// writes each output to DIR/<output name>.npy.
    Run {
        /// The ONNX model.
        model: PathBuf,
        /// An input's value from a .npy (or TensorProto .pb) file. One per model input.
        #[arg(long = "input", value_name = "NAME=FILE.npy")]
        inputs: Vec<String>,
        /// The folder the outputs are written to (created if missing).
        #[arg(long = "output", value_name = "DIR")]
        output: PathBuf,
        #[command(flatten)]
        shapes: Box<ShapeArgs>,
        /// fp16: the float32 weights are stored as IEEE half, as `nnc compile --quantize
        /// fp16` does.
        #[arg(long, value_enum, value_name = "fp16")]
        quantize: Option<Quantize>,
    },
    /// Checks the compiled code against nnc's reference interpreter (and onnxruntime
    /// when python3 has it) on the given inputs or on seeded random ones; on a mismatch,
    /// names the first node whose output diverges. Exits with 1 unless all match.
    Verify {
        /// The ONNX model.
        model: PathBuf,
        /// An input's value from a .npy (or TensorProto .pb) file; inputs not given are
        /// random: floats standard normal, integer inputs read as indices in [0, the
        /// extent they index), other integers in [1, 8), booleans fair coins.
        #[arg(long = "input", value_name = "NAME=FILE.npy")]
        inputs: Vec<String>,
        /// The seed of the random inputs.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Relative tolerance: |a - e| <= atol + rtol * |e|.
        #[arg(long, default_value_t = 1e-3)]
        rtol: f64,
        /// Absolute tolerance.
        #[arg(long, default_value_t = 1e-4)]
        atol: f64,
        #[command(flatten)]
        shapes: Box<ShapeArgs>,
    },
    /// Describes a model: inputs, outputs, op histogram, parameters, arena size, and
    /// every unsupported op.
    Inspect {
        model: PathBuf,
        #[command(flatten)]
        shapes: ShapeArgs,
        /// text (for people) or json (one object: inputs, outputs, op histogram,
        /// parameters, weights and arena bytes, unsupported ops with their suite status).
        #[arg(long, value_enum, default_value = "text")]
        format: nnc_cli::inspect::Format,
        /// Also lists every node's kernel: strategy, micro-kernels, tile, scratch and
        /// why, for --target/--cpu/--kernel as `nnc compile` would use them.
        #[arg(long)]
        kernels: bool,
        /// Target architecture for --kernels (as for compile).
        #[arg(long)]
        target: Option<String>,
        /// CPU features for --kernels (as for compile; default: this machine's, or the
        /// most capable variant of a list).
        #[arg(long)]
        cpu: Option<String>,
        /// Kernel overrides for --kernels (as for compile); repeatable.
        #[arg(long = "kernel", value_name = "KIND=CHOICE")]
        kernel_overrides: Vec<String>,
        /// Also estimates, for `run` with a pool of N threads, each node's largest task
        /// share and idle fraction and the model's speedup (implies --kernels).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        threads: Option<u32>,
        /// Imports the model once with each --dim range a symbol and prints every
        /// value's axes as expressions of them, the facts the run would check, and the
        /// nodes that cannot take a symbolic extent yet (the symbolic import that
        /// compiles will use).
        #[arg(long, conflicts_with_all = ["kernels", "threads", "format"])]
        symbolic_shapes: bool,
    },
}

/// `nnc inspect --symbolic-shapes`: the graph imported with symbols, its checks and
/// what it could not import.
fn print_symbolic_shapes(model: &std::path::Path, opts: &ImportOptions) -> Result<()> {
    let imported = nnc::onnx::load_model_partial(model, opts)?;
    let g = &imported.graph;
    println!("{g}");
    for c in &g.dim_checks {
        let e = c.expr.written(&|s| g.symbols.name(s).to_string());
        let rule = if c.zero { "= 0" } else { ">= 0" };
        println!("check {e} {rule}: {}", c.what);
    }
    for u in &imported.unsupported {
        println!("unsupported: node '{}' ({}): {}", u.node, u.op, u.reason);
    }
    if imported.unsupported.is_empty() {
        Ok(())
    } else {
        Err(NncError::Unsupported(imported.unsupported).in_file(model))
    }
}

fn parse_bindings(shapes: &ShapeArgs) -> Result<ImportOptions> {
    let bad = |flag: &str, v: &str, why: &str| NncError::Model(format!("--{flag} {v}: {why}"));
    let mut input_shapes = HashMap::new();
    let mut shape_flags: HashMap<&str, &str> = HashMap::new();
    let mut ranges = vec![];
    for s in &shapes.input_shapes {
        let (name, dims) = s
            .split_once('=')
            .ok_or_else(|| bad("input-shape", s, "expected NAME=D0,D1,..."))?;
        if let Some(earlier) = shape_flags.insert(name, s) {
            return Err(twice("input-shape", name, earlier, s));
        }
        let mut shape = vec![];
        if !dims.trim().is_empty() {
            for (axis, d) in dims.split(',').enumerate() {
                match nnc::onnx::ranges::parse_range(d)
                    .map_err(|why| bad("input-shape", s, &why))?
                {
                    Some((min, max)) => {
                        ranges.push(nnc::onnx::ranges::DimRange {
                            name: format!("{name}.{axis}"),
                            min,
                            max,
                            site: nnc::onnx::ranges::DimSite::InputAxis {
                                input: name.to_string(),
                                axis,
                            },
                        });
                        shape.push(max);
                    }
                    None => shape.push(d.trim().parse::<usize>().map_err(|_| {
                        bad(
                            "input-shape",
                            s,
                            "dimensions must be non-negative integers or MIN..MAX ranges",
                        )
                    })?),
                }
            }
        }
        input_shapes.insert(name.to_string(), shape);
    }
    let mut sequence_inputs = HashMap::new();
    for s in &shapes.sequence_inputs {
        let (name, elements) = s
            .split_once('=')
            .ok_or_else(|| bad("sequence-input", s, "expected NAME=SHAPE;SHAPE;..."))?;
        let shapes: std::result::Result<Vec<Vec<usize>>, _> = if elements.trim().is_empty() {
            Ok(vec![])
        } else {
            elements
                .split(';')
                .map(|e| parse_dims(e.trim().trim_start_matches('(').trim_end_matches(')')))
                .collect()
        };
        sequence_inputs.insert(
            name.to_string(),
            shapes.map_err(|_| {
                bad(
                    "sequence-input",
                    s,
                    "each element's dimensions must be non-negative integers",
                )
            })?,
        );
    }
    let mut dims = HashMap::new();
    let mut dim_flags: HashMap<&str, &str> = HashMap::new();
    for s in &shapes.dims {
        let (name, v) = s
            .split_once('=')
            .ok_or_else(|| bad("dim", s, "expected PARAM=VALUE or PARAM=MIN..MAX"))?;
        if let Some(earlier) = dim_flags.insert(name, s) {
            return Err(twice("dim", name, earlier, s));
        }
        match nnc::onnx::ranges::parse_range(v).map_err(|why| bad("dim", s, &why))? {
            Some((min, max)) => ranges.push(nnc::onnx::ranges::DimRange {
                name: name.to_string(),
                min,
                max,
                site: nnc::onnx::ranges::DimSite::Param,
            }),
            None => {
                dims.insert(
                    name.to_string(),
                    v.trim().parse::<usize>().map_err(|_| {
                        bad(
                            "dim",
                            s,
                            "the value must be a non-negative integer or a MIN..MAX range",
                        )
                    })?,
                );
            }
        }
    }
    let mut frozen_inputs = HashMap::new();
    for s in &shapes.frozen {
        let (name, file) = s
            .split_once('=')
            .ok_or_else(|| bad("freeze-input", s, "expected NAME=FILE"))?;
        let t =
            read_tensor_file(std::path::Path::new(file)).map_err(|e| bad("freeze-input", s, &e))?;
        frozen_inputs.insert(name.to_string(), t);
    }
    let size =
        |flag: &str, v: &str| nnc::limits::parse_byte_size(v).map_err(|why| bad(flag, v, &why));
    let limits = Limits {
        max_tensor_bytes: size("max-tensor-bytes", &shapes.max_tensor_bytes)?,
        max_fold_bytes: size("max-fold-bytes", &shapes.max_fold_bytes)?,
        max_weight_bytes: size("max-weight-bytes", &shapes.max_weight_bytes)?,
    };
    Ok(ImportOptions {
        input_shapes,
        dims,
        ranges,
        frozen_inputs,
        sequence_inputs,
        absent_inputs: shapes.absent_inputs.iter().cloned().collect(),
        limits,
    })
}

/// The error for a name two `--{flag}` flags give (a range or value given twice).
fn twice(flag: &str, name: &str, earlier: &str, later: &str) -> NncError {
    NncError::Model(format!(
        "--{flag} {name} was given twice (--{flag} {earlier} and --{flag} {later}): give \
         it once"
    ))
}

/// `D0,D1,...` (empty: a scalar).
fn parse_dims(dims: &str) -> std::result::Result<Vec<usize>, std::num::ParseIntError> {
    if dims.trim().is_empty() {
        return Ok(vec![]);
    }
    dims.split(',').map(|d| d.trim().parse::<usize>()).collect()
}

/// A tensor from a .npy file or a serialized ONNX TensorProto (.pb).
fn read_tensor_file(path: &std::path::Path) -> std::result::Result<nnc::ir::Tensor, String> {
    if path.extension().is_some_and(|e| e == "pb") {
        let bytes =
            nnc::files::read_regular(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let t = <nnc::onnx::proto::TensorProto as prost::Message>::decode(bytes.as_slice())
            .map_err(|e| format!("{}: {e}", path.display()))?;
        nnc::onnx::tensor_proto::tensor_from_proto(&t, None).map_err(|e| e.to_string())
    } else {
        nnc_host::npy::read(path)
    }
}

fn default_output(model: &std::path::Path) -> PathBuf {
    let stem = model
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    model.with_file_name(format!("lib{stem}.so"))
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Compile {
            model,
            output,
            target,
            cpu,
            name,
            shapes,
            quantize,
            calibration,
            calibration_method,
            percentile,
            keep_fp32,
            int8_min_sqnr,
            int8_bias_correction,
            dump_ir,
            dump_passes,
            passes,
            kernels,
            index_checks,
        } => {
            let method = calibration_method_of(calibration_method, percentile)?;
            // The INT8 flags mean nothing without --quantize int8: refused, not ignored.
            let int8_flags = [
                ("--calibration-method", calibration_method.is_some()),
                ("--percentile", percentile.is_some()),
                ("--keep-fp32", !keep_fp32.is_empty()),
                ("--int8-min-sqnr", int8_min_sqnr.is_some()),
                ("--int8-bias-correction", int8_bias_correction.is_some()),
            ];
            if let (false, Some((flag, _))) = (
                matches!(quantize, Some(Quantize::Int8)),
                int8_flags.iter().find(|(_, given)| *given),
            ) {
                return Err(NncError::Model(format!(
                    "{flag} applies to --quantize int8 only"
                )));
            }
            let (weights, int8) = match (quantize, calibration) {
                (None, None) => (WeightFormat::F32, None),
                (Some(Quantize::Fp16), None) => (WeightFormat::F16, None),
                (Some(Quantize::Fp16), Some(_)) | (None, Some(_)) => {
                    return Err(NncError::Model(
                        "--calibration is only for --quantize int8".into(),
                    ))
                }
                (Some(Quantize::Int8), None) => {
                    return Err(NncError::Model(
                        "--quantize int8 needs --calibration PATH (see nnc compile --help)".into(),
                    ))
                }
                (Some(Quantize::Int8), Some(path)) => (
                    WeightFormat::F32,
                    Some((
                        nnc_host::CalibrationFiles(path),
                        Int8Options {
                            method,
                            keep_fp32,
                            min_sqnr_db: int8_min_sqnr,
                            bias_correction: int8_bias_correction.as_deref() != Some("off"),
                            weight_max: 127,
                        },
                    )),
                ),
            };
            if !name.is_empty() {
                nnc::model_name::check_model_name(&name)
                    .map_err(|why| NncError::Model(format!("--name: {why}")))?;
            }
            let arch = match target {
                Some(t) => t.parse::<Arch>().map_err(NncError::Model)?,
                None => Arch::host(),
            };
            let target = Target::new(arch, cpu.as_deref())?;
            let import = parse_bindings(&shapes)?;
            let output = output.unwrap_or_else(|| default_output(&model));
            driver::ArtifactKind::from_path(&output)?;
            // Before compiling, so a refusal costs nothing.
            nnc::output_paths::check_output_paths(&model, &output, &driver::header_path(&output))?;
            let started = std::time::Instant::now();
            let opts = CompileOptions {
                target: target.clone(),
                prefix: nnc::codegen::symbol_prefix(&name),
                weights,
                kernels: KernelOptions::parse(kernels.iter().map(String::as_str))
                    .map_err(|e| NncError::Model(e.to_string()))?,
                index_checks: match index_checks {
                    IndexCheckArg::Error => IndexChecks::Error,
                    IndexCheckArg::Clamp => IndexChecks::Clamp,
                },
            };
            let mut pm = match passes {
                Some(list) => nnc::passes::PassManager::from_list(&list),
                None => Ok(nnc::passes::PassManager::default()),
            }?;
            pm.limits = import.limits;
            if dump_passes {
                pm.dump = nnc::passes::Dump::Stderr;
            }
            let progress = nnc_cli::progress::Bars::default();
            let compiled = match &int8 {
                None => driver::compile_model_reporting(&model, &import, &opts, &pm, &progress)?,
                Some((calibration, q)) => {
                    let host = Int8Host {
                        calibration,
                        runner: &nnc_host::LoaderRunner,
                        progress: &progress,
                    };
                    let (compiled, report) =
                        driver::compile_model_int8(&model, &import, &opts, &pm, q, &host)?;
                    eprint!("{report}");
                    compiled
                }
            };
            if dump_ir {
                println!("{}", compiled.graph);
            }
            let header = driver::write_artifacts(&compiled, &output, &name)?;
            let file_bytes = std::fs::metadata(&output).map_or(0, |m| m.len());
            let m = &compiled.model;
            eprintln!(
                "nnc: wrote {} and {} ({} {}, weights {} bytes, code {} bytes, workspace {} bytes, file {} bytes) in {:.2} s",
                output.display(),
                header.display(),
                target.arch.triple(),
                target.cpu,
                m.weights_size,
                m.code_size,
                m.arena_size,
                file_bytes,
                started.elapsed().as_secs_f64()
            );
            if !compiled.graph.symbols.is_empty() {
                let dims: Vec<String> = (compiled.graph.symbols.iter())
                    .map(|(_, s)| format!("{}={}..{}", s.name, s.min, s.max))
                    .collect();
                eprintln!(
                    "nnc: symbolic shapes over {} ({} run-time checks)",
                    dims.join(", "),
                    compiled.graph.dim_checks.len()
                );
            }
            if m.derived_weights_size > 0 {
                eprintln!(
                    "nnc: the other CPU variants copy {} bytes of weights out of those stored, once, before their first inference",
                    m.derived_weights_size
                );
            }
            if !m.shared_weights.is_empty() {
                let readers: usize = m.shared_weights.iter().map(|w| w.nodes.len()).sum();
                eprintln!(
                    "nnc: {} packed weights stored once for {} nodes ({} bytes saved)",
                    m.shared_weights.len(),
                    readers,
                    m.unshared_weights_size - m.weights_size
                );
            }
            Ok(())
        }
        Command::Inspect {
            model,
            shapes,
            format,
            kernels,
            target,
            cpu,
            kernel_overrides,
            threads,
            symbolic_shapes,
        } => {
            if symbolic_shapes {
                return print_symbolic_shapes(&model, &parse_bindings(&shapes)?);
            }
            let arch = match target {
                Some(t) => t.parse::<Arch>().map_err(NncError::Model)?,
                None => Arch::host(),
            };
            // The kernels of one variant: this machine's, or a list's most capable.
            let cpu = cpu.or_else(|| (arch == Arch::host()).then(|| "native".to_string()));
            let target = Target::new(arch, cpu.as_deref())?.variants().remove(0);
            let options = nnc_cli::inspect::InspectOptions {
                target,
                kernels: KernelOptions::parse(kernel_overrides.iter().map(String::as_str))
                    .map_err(|e| NncError::Model(e.to_string()))?,
                show_kernels: kernels || threads.is_some(),
                threads: threads.map(|n| n as usize),
            };
            nnc_cli::inspect::print(
                &nnc_cli::inspect::report(&model, &parse_bindings(&shapes)?, &options)?,
                format,
            )
        }
        Command::Run {
            model,
            inputs,
            output,
            shapes,
            quantize,
        } => {
            let weights = match quantize {
                None => WeightFormat::F32,
                Some(Quantize::Fp16) => WeightFormat::F16,
                Some(Quantize::Int8) => {
                    return Err(NncError::Model(
                        "nnc run supports --quantize fp16 only (int8 needs calibration: \
                         use nnc compile)"
                            .into(),
                    ))
                }
            };
            run_model(&model, &inputs, &output, &parse_bindings(&shapes)?, weights)
        }
        Command::Verify {
            model,
            inputs,
            seed,
            rtol,
            atol,
            shapes,
        } => {
            let tol = nnc_cli::verify::Tolerance { rtol, atol };
            match verify_model(&model, &inputs, seed, tol, &parse_bindings(&shapes)?)? {
                true => Ok(()),
                false => std::process::exit(1),
            }
        }
        Command::Conformance {
            suite,
            filter,
            results,
            expect_passing,
            write_passing,
            sample,
            target,
            jobs,
            timeout,
            no_freeze,
        } => {
            let aarch64 = match target {
                Some(t) => t.parse::<Arch>().map_err(NncError::Model)? == Arch::Aarch64,
                None => false,
            };
            let opts = nnc_cli::conformance_cli::SuiteOptions {
                suite_dir: suite,
                filter,
                results,
                expect_passing,
                write_passing,
                sample,
                aarch64: aarch64 && Arch::host() != Arch::Aarch64,
                jobs,
                timeout: std::time::Duration::from_secs(timeout),
                no_freeze,
            };
            match nnc_cli::conformance_cli::run_suite(&opts).map_err(NncError::Model)? {
                true => Ok(()),
                false => Err(NncError::Model(
                    "conformance regressions (see REGRESSION lines)".into(),
                )),
            }
        }
        Command::ConformanceCase {
            case,
            aarch64_harness,
            no_freeze,
        } => {
            if nnc_cli::conformance_cli::run_one(&case, aarch64_harness, !no_freeze) {
                Ok(())
            } else {
                std::process::exit(1)
            }
        }
    }
}

/// `--input NAME=FILE` values.
fn read_inputs(inputs: &[String]) -> Result<Vec<(String, nnc::ir::Tensor)>> {
    inputs
        .iter()
        .map(|s| {
            let (name, file) = s
                .split_once('=')
                .ok_or_else(|| NncError::Model(format!("--input {s}: expected NAME=FILE.npy")))?;
            let t = read_tensor_file(std::path::Path::new(file))
                .map_err(|e| NncError::Model(format!("--input {s}: {e}")))?;
            Ok((name.to_string(), t))
        })
        .collect()
}

fn run_model(
    path: &std::path::Path,
    inputs: &[String],
    dir: &std::path::Path,
    import: &ImportOptions,
    weights: WeightFormat,
) -> Result<()> {
    use nnc_cli::verify;
    let graph = verify::load(path, import)?;
    let inputs =
        verify::bind_inputs(&graph, &read_inputs(inputs)?, None).map_err(NncError::Model)?;
    let outputs = verify::run_compiled(&graph, &inputs, weights).map_err(NncError::Model)?;
    let paths = verify::write_outputs(&graph, &outputs, dir).map_err(NncError::Model)?;
    for ((v, t), p) in graph.outputs.iter().zip(&outputs).zip(&paths) {
        println!(
            "{}: {} -> {}",
            graph.value(*v).name,
            verify::summary(t),
            p.display()
        );
    }
    Ok(())
}

/// `nnc verify`; `false` when something differs.
fn verify_model(
    path: &std::path::Path,
    inputs: &[String],
    seed: u64,
    tol: nnc_cli::verify::Tolerance,
    import: &ImportOptions,
) -> Result<bool> {
    use nnc_cli::verify;
    let graph = verify::load(path, import)?;
    let given = read_inputs(inputs)?;
    let inputs = verify::bind_inputs(&graph, &given, Some(seed)).map_err(NncError::Model)?;
    for v in &graph.inputs {
        let name = &graph.value(*v).name;
        if !given.iter().any(|(n, _)| n == name) {
            println!("input {name}: {} random (seed {seed})", graph.ty(*v));
        }
    }
    let reference = match verify::reference_at_input_dims(&graph, &inputs, import) {
        Some(fixed) => verify::load(path, &fixed)?,
        None => graph.clone(),
    };
    let report =
        verify::verify_graphs(&reference, &graph, &inputs, tol).map_err(NncError::Model)?;
    let mut ok = report.passed();
    println!(
        "compiled vs interpreter (rtol {}, atol {}):",
        tol.rtol, tol.atol
    );
    for o in &report.outputs {
        let verdict = if o.comparison.passed() {
            "PASS"
        } else {
            "FAIL"
        };
        println!("  {verdict} {}: {}", o.name, o.comparison);
    }
    if let Some(d) = &report.divergence {
        println!("first diverging node: {d}");
    }
    if let Some(n) = &report.note {
        println!("note: {n}");
    }
    // onnxruntime runs the original model: the runtime inputs plus any frozen ones.
    let ort = if !import.sequence_inputs.is_empty() {
        Err("--sequence-input models are not run (onnxruntime takes sequences)".to_string())
    } else {
        verify::onnxruntime_available()
    };
    match ort {
        Err(why) => println!("onnxruntime: not used: {why}"),
        Ok(()) => {
            let checks = verify::onnxruntime_checks(
                path,
                &graph,
                &inputs,
                &import.frozen_inputs,
                &report.compiled,
                tol,
            );
            match checks {
                Err(e) => {
                    println!("onnxruntime: used, but it failed: {e}");
                    ok = false;
                }
                Ok(checks) => {
                    println!(
                        "onnxruntime {}: used; compiled vs onnxruntime:",
                        verify::onnxruntime_version()
                    );
                    for o in &checks {
                        let verdict = if o.comparison.passed() {
                            "PASS"
                        } else {
                            "FAIL"
                        };
                        ok &= o.comparison.passed();
                        println!("  {verdict} {}: {}", o.name, o.comparison);
                    }
                }
            }
        }
    }
    println!("{}", if ok { "PASS" } else { "FAIL" });
    Ok(ok)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            nnc_cli::diagnostic::eprint(&e);
            ExitCode::FAILURE
        }
    }
}

/// `--kernel`'s help: every kind with its choices.
fn kernel_help() -> String {
    let mut help = String::from(
        "Overrides one of nnc's kernel choices, for benchmarks and comparisons; repeatable. \
         `nnc inspect --kernels` shows the choices. KIND=CHOICE, the first choice being \
         the default:",
    );
    for switch in nnc::codegen::options::KERNEL_SWITCHES {
        help.push_str(&format!("\n  {switch}"));
    }
    help
}

/// The range method of `--calibration-method` and `--percentile`: the percentile alone
/// selects the percentile method; with another method it is an error (it would do
/// nothing).
fn calibration_method_of(
    method: Option<CalibrationMethod>,
    percentile: Option<f64>,
) -> Result<Method, NncError> {
    if let Some(p) = percentile.filter(|p| !(*p > 0.0 && *p <= 100.0)) {
        return Err(NncError::Model(format!(
            "--percentile {p}: expected a number above 0 and at most 100"
        )));
    }
    match (method, percentile) {
        (None | Some(CalibrationMethod::Minmax), None) => Ok(Method::MinMax),
        (None | Some(CalibrationMethod::Percentile), p) => {
            Ok(Method::Percentile(p.unwrap_or(99.99)))
        }
        (Some(CalibrationMethod::Entropy), None) => Ok(Method::Entropy),
        (Some(other), Some(p)) => Err(NncError::Model(format!(
            "--percentile {p} applies to --calibration-method percentile, not {}",
            match other {
                CalibrationMethod::Minmax => "minmax",
                _ => "entropy",
            }
        ))),
    }
}
