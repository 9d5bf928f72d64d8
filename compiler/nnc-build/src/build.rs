//! The build-script side: cargo's environment in, artifacts and `cargo:` lines out.

use std::fmt;
use std::path::{Path, PathBuf};

use nnc::codegen::{Arch, CompileOptions, IndexChecks, KernelOptions, Target, WeightFormat};
use nnc::limits::Limits;
use nnc::onnx::ImportOptions;
use nnc::passes::PassManager;

/// What `quantize_int8` says when the feature that implements it is off.
const INT8_NEEDS_FEATURE: &str = "quantize_int8 needs nnc-build's `int8` feature: \
     in Cargo.toml, `[build-dependencies] nnc-build = { ..., features = [\"int8\"] }`";

/// Why a model could not be compiled; its text is nnc's diagnostic (file, node, op).
#[derive(Debug)]
pub struct Error(String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl From<nnc::error::NncError> for Error {
    fn from(e: nnc::error::NncError) -> Error {
        Error(e.to_string())
    }
}

/// What [`Model::try_compile`] wrote.
#[derive(Clone, Debug)]
pub struct Artifacts {
    /// `OUT_DIR/lib<name>.a`
    pub archive: PathBuf,
    /// `OUT_DIR/lib<name>.h`, the C header.
    pub header: PathBuf,
    /// `OUT_DIR/<name>.rs`, the Rust bindings `include_model!` includes.
    pub bindings: PathBuf,
}

enum Quantize {
    None,
    Fp16,
    Int8(PathBuf),
}

/// One model to compile; see the crate documentation.
pub struct Model {
    path: PathBuf,
    name: Option<String>,
    quantize: Quantize,
    cpu: Option<String>,
    target: Option<String>,
    out_dir: Option<PathBuf>,
    import: ImportOptions,
    kernels: Vec<String>,
    passes: Option<String>,
    index_checks: IndexChecks,
    cargo_metadata: bool,
}

impl Model {
    pub fn new(path: impl AsRef<Path>) -> Model {
        Model {
            path: path.as_ref().to_path_buf(),
            name: None,
            quantize: Quantize::None,
            cpu: None,
            target: None,
            out_dir: None,
            import: ImportOptions::default(),
            kernels: vec![],
            passes: None,
            index_checks: IndexChecks::default(),
            cargo_metadata: true,
        }
    }

    /// The model's name: the Rust module, the archive `lib<name>.a` and the symbol
    /// prefix (`<name>_infer`...), so several models link into one program. A C
    /// identifier; default: the file's stem.
    pub fn name(mut self, name: &str) -> Model {
        self.name = Some(name.to_string());
        self
    }

    /// Static INT8 quantization calibrated on `calibration` (a .npy file, a folder of
    /// NAME.npy or .npz files, or ONNX test_data_set_* folders), as `nnc compile
    /// --quantize int8 --calibration` does. Needs the `int8` feature
    /// (`features = ["int8"]`); without it the build fails saying so.
    pub fn quantize_int8(mut self, calibration: impl AsRef<Path>) -> Model {
        self.quantize = Quantize::Int8(calibration.as_ref().to_path_buf());
        self
    }

    /// Weights stored as IEEE half (`nnc compile --quantize fp16`).
    pub fn quantize_fp16(mut self) -> Model {
        self.quantize = Quantize::Fp16;
        self
    }

    /// CPU features (`nnc compile --cpu`). Default: what the Rust code is compiled
    /// for (cargo's `CARGO_CFG_TARGET_FEATURE`), so the model runs wherever the
    /// program does.
    pub fn cpu(mut self, cpu: &str) -> Model {
        self.cpu = Some(cpu.to_string());
        self
    }

    /// Overrides one kernel choice (`nnc compile --kernel KIND=CHOICE`, e.g.
    /// `gemm=clif`); repeatable, later ones win.
    pub fn kernel(mut self, spec: &str) -> Model {
        self.kernels.push(spec.to_string());
        self
    }

    /// The graph passes to run (`nnc compile --passes`: `default`, `none` or a
    /// comma-separated list of pass names).
    pub fn passes(mut self, list: &str) -> Model {
        self.passes = Some(list.to_string());
        self
    }

    /// Out-of-range run-time indices make `infer` fail (`IndexChecks::Error`, the
    /// default) or are clamped (`--index-checks`).
    pub fn index_checks(mut self, checks: IndexChecks) -> Model {
        self.index_checks = checks;
        self
    }

    /// Raises or lowers the sizes import and constant folding keep to
    /// (`--max-tensor-bytes`, `--max-fold-bytes`, `--max-weight-bytes`).
    pub fn limits(mut self, limits: Limits) -> Model {
        self.import.limits = limits;
        self
    }

    /// Binds an input's shape (`--input-shape`).
    pub fn input_shape(mut self, input: &str, dims: &[usize]) -> Model {
        self.import
            .input_shapes
            .insert(input.to_string(), dims.to_vec());
        self
    }

    /// Binds a symbolic dimension (`--dim`).
    pub fn dim(mut self, param: &str, value: usize) -> Model {
        self.import.dims.insert(param.to_string(), value);
        self
    }

    /// Lets a symbolic dimension take any value in `min..=max` at run time
    /// (`--dim NAME=MIN..MAX`): the bindings gain `Workspace::run_dims`.
    pub fn dim_range(mut self, param: &str, min: usize, max: usize) -> Model {
        self.import.ranges.push(nnc::onnx::ranges::DimRange {
            name: param.to_string(),
            min,
            max,
            site: nnc::onnx::ranges::DimSite::Param,
        });
        self
    }

    /// A target triple instead of cargo's `TARGET`.
    pub fn target(mut self, triple: &str) -> Model {
        self.target = Some(triple.to_string());
        self
    }

    /// An output folder instead of cargo's `OUT_DIR`.
    pub fn out_dir(mut self, dir: impl AsRef<Path>) -> Model {
        self.out_dir = Some(dir.as_ref().to_path_buf());
        self
    }

    /// Whether to print the `cargo:` lines (default true; off outside build scripts).
    pub fn cargo_metadata(mut self, on: bool) -> Model {
        self.cargo_metadata = on;
        self
    }

    /// Compiles the model, or ends the build script with nnc's diagnostic.
    pub fn compile(self) {
        if let Err(e) = self.try_compile() {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }

    pub fn try_compile(self) -> Result<Artifacts, Error> {
        let env = |k: &str| std::env::var(k).ok();
        let name = match &self.name {
            Some(n) => n.clone(),
            None => default_name(&self.path)?,
        };
        nnc::model_name::check_model_name(&name).map_err(Error)?;
        let out_dir = match (&self.out_dir, env("OUT_DIR")) {
            (Some(d), _) => d.clone(),
            (None, Some(d)) => PathBuf::from(d),
            (None, None) => {
                return Err(Error(
                    "OUT_DIR is not set: run from a cargo build script or call .out_dir()".into(),
                ))
            }
        };
        // Paths go into `cargo:` lines, which end at a line break: one inside a path
        // would cut the line and start another cargo would obey.
        if self.cargo_metadata {
            let mut printed = vec![
                ("the model path", self.path.as_path()),
                ("OUT_DIR", &out_dir),
            ];
            if let Quantize::Int8(calibration) = &self.quantize {
                printed.push(("the calibration path", calibration));
            }
            for (what, path) in printed {
                if path.to_string_lossy().contains(['\n', '\r']) {
                    return Err(Error(format!(
                        "{what} {path:?} holds a line break, which a cargo: line cannot carry"
                    )));
                }
            }
        }
        claim_name(&out_dir, &name, &self.path)?;
        let triple = match (&self.target, env("TARGET")) {
            (Some(t), _) => t.clone(),
            (None, Some(t)) => t,
            (None, None) => Arch::host().triple().to_string(),
        };
        let arch = arch_of(&triple)?;
        if matches!(self.quantize, Quantize::Int8(_)) && !cfg!(feature = "int8") {
            return Err(Error(INT8_NEEDS_FEATURE.into()));
        }
        let cpu = match &self.cpu {
            Some(c) => c.clone(),
            None => cpu_for(
                arch,
                env("CARGO_CFG_TARGET_FEATURE").as_deref().unwrap_or(""),
            ),
        };
        if self.cargo_metadata {
            println!("cargo:rerun-if-changed={}", self.path.display());
            if let Quantize::Int8(calibration) = &self.quantize {
                println!("cargo:rerun-if-changed={}", calibration.display());
            }
        }
        let opts = CompileOptions {
            target: Target::new(arch, Some(&cpu))?,
            prefix: nnc::codegen::symbol_prefix(&name),
            weights: match self.quantize {
                Quantize::Fp16 => WeightFormat::F16,
                _ => WeightFormat::F32,
            },
            kernels: KernelOptions::parse(self.kernels.iter().map(String::as_str))
                .map_err(|e| Error(e.to_string()))?,
            index_checks: self.index_checks,
        };
        let mut passes = match &self.passes {
            Some(list) => PassManager::from_list(list).map_err(|e| Error(e.to_string()))?,
            None => PassManager::default(),
        };
        passes.limits = self.import.limits;
        let compiled = match &self.quantize {
            Quantize::Int8(calibration) => {
                let report_path = out_dir.join(format!("{name}.int8-report.txt"));
                self.compile_int8(calibration, &opts, &passes, &report_path)?
            }
            _ => nnc::driver::compile_model_with(&self.path, &self.import, &opts, &passes)?,
        };
        let archive = out_dir.join(format!("lib{name}.a"));
        let header = nnc::driver::write_artifacts(&compiled, &archive, &name)?;
        let origin = format!(
            "{} for {triple} (cpu {cpu}, cargo profile {})",
            self.path.display(),
            env("PROFILE").unwrap_or_else(|| "none".into())
        );
        let text =
            nnc::bindings::generate(&compiled.graph, &name, compiled.model.arena_size, &origin);
        let bindings = out_dir.join(format!("{name}.rs"));
        nnc::artifact::write_atomically(&bindings, text.as_bytes())
            .map_err(|e| Error(format!("{}: {e}", bindings.display())))?;
        if self.cargo_metadata {
            println!("cargo:rustc-link-search=native={}", out_dir.display());
            println!("cargo:rustc-link-lib=static={name}");
        }
        Ok(Artifacts {
            archive,
            header,
            bindings,
        })
    }
}

impl Model {
    /// Compiles with INT8 quantization calibrated on `calibration`, writing the
    /// accuracy report to `report_path`.
    #[cfg(feature = "int8")]
    fn compile_int8(
        &self,
        calibration: &Path,
        opts: &CompileOptions,
        passes: &PassManager,
        report_path: &Path,
    ) -> Result<nnc::driver::Compiled, Error> {
        let int8 = nnc::quant::pipeline::Int8Options {
            method: nnc::quant::ranges::Method::MinMax,
            keep_fp32: vec![],
            min_sqnr_db: None,
            bias_correction: true,
            weight_max: 127,
        };
        let host = nnc::quant::host::Int8Host {
            calibration: &nnc_host::CalibrationFiles(calibration.to_path_buf()),
            runner: &nnc_host::LoaderRunner,
            progress: &nnc::progress::Silent,
        };
        let (compiled, report) =
            nnc::driver::compile_model_int8(&self.path, &self.import, opts, passes, &int8, &host)?;
        // The accuracy report, for whoever wonders what quantization cost.
        std::fs::write(report_path, report.to_string())
            .map_err(|e| Error(format!("{}: {e}", report_path.display())))?;
        Ok(compiled)
    }

    #[cfg(not(feature = "int8"))]
    fn compile_int8(
        &self,
        _calibration: &Path,
        _opts: &CompileOptions,
        _passes: &PassManager,
        _report_path: &Path,
    ) -> Result<nnc::driver::Compiled, Error> {
        Err(Error(INT8_NEEDS_FEATURE.into()))
    }
}

/// Takes `name` in `out_dir` for the model at `path` for the rest of this build script:
/// a second model mapping to the same name (`a-b.onnx` and `a_b.onnx` both give `a_b`)
/// would overwrite the first one's archive, header and bindings, so it is an error
/// naming both files. The same model compiled again under its name is allowed.
fn claim_name(out_dir: &Path, name: &str, path: &Path) -> Result<(), Error> {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static CLAIMED: Mutex<Option<HashMap<(PathBuf, String), PathBuf>>> = Mutex::new(None);
    let mut claimed = CLAIMED.lock().unwrap_or_else(|p| p.into_inner());
    let claimed = claimed.get_or_insert_with(HashMap::new);
    let same = |a: &Path, b: &Path| {
        a == b || matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
    };
    match claimed.get(&(out_dir.to_path_buf(), name.to_string())) {
        Some(first) if !same(first, path) => Err(Error(format!(
            "{} and {} both compile to the name '{name}' (lib{name}.a in {}): give one of \
             them another with .name()",
            first.display(),
            path.display(),
            out_dir.display()
        ))),
        Some(_) => Ok(()),
        None => {
            claimed.insert(
                (out_dir.to_path_buf(), name.to_string()),
                path.to_path_buf(),
            );
            Ok(())
        }
    }
}

/// `models/resnet-18.onnx` → `resnet_18`; a path with no file stem (`/`, `..`, `.onnx`)
/// names nothing and is an error.
fn default_name(path: &Path) -> Result<String, Error> {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .filter(|s| !s.is_empty() && path.file_name().is_some_and(|f| f != ".onnx"))
        .ok_or_else(|| {
            Error(format!(
                "{}: no file name to name the model after; give it one with .name()",
                path.display()
            ))
        })?;
    let mut name: String = stem
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert(0, 'm');
    }
    // A stem that is a keyword (`int.onnx`) or reserved gets a suffix.
    if nnc::model_name::check_model_name(&name).is_err() {
        name.push('_');
    }
    Ok(name)
}

/// The architecture of a Linux target triple.
fn arch_of(triple: &str) -> Result<Arch, Error> {
    let arch = match triple.split('-').next() {
        Some("x86_64") => Arch::X86_64,
        Some("aarch64") => Arch::Aarch64,
        _ => None.ok_or_else(|| {
            Error(format!(
                "nnc compiles for x86_64 and aarch64 Linux, not for the target {triple}"
            ))
        })?,
    };
    if !triple.contains("linux") {
        return Err(Error(format!(
            "nnc compiles for x86_64 and aarch64 Linux, not for the target {triple}"
        )));
    }
    Ok(arch)
}

/// The `--cpu` matching the target features the Rust code is compiled with.
fn cpu_for(arch: Arch, target_features: &str) -> String {
    let has = |f: &str| target_features.split(',').any(|x| x == f);
    match arch {
        Arch::X86_64 if has("avx512f") && has("avx512vnni") => "x86-64-v4+vnni",
        Arch::X86_64 if has("avx512f") => "x86-64-v4",
        Arch::X86_64 if has("avx2") && has("fma") && has("avxvnni") => "x86-64-v3+avxvnni",
        Arch::X86_64 if has("avx2") && has("fma") => "x86-64-v3",
        Arch::X86_64 => "baseline",
        Arch::Aarch64 if has("i8mm") => "+i8mm",
        Arch::Aarch64 if has("dotprod") => "+dotprod",
        Arch::Aarch64 => "armv8",
    }
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_follows_the_rust_target_features() {
        assert_eq!(cpu_for(Arch::X86_64, "fxsr,sse,sse2"), "baseline");
        assert_eq!(cpu_for(Arch::X86_64, "avx,avx2,fma,sse2"), "x86-64-v3");
        assert_eq!(cpu_for(Arch::X86_64, "avx2,avx512f,fma"), "x86-64-v4");
        assert_eq!(cpu_for(Arch::Aarch64, "neon,dotprod"), "+dotprod");
        assert_eq!(cpu_for(Arch::Aarch64, "neon"), "armv8");
    }

    #[test]
    fn a_name_that_is_no_c_identifier_is_refused_before_compiling() {
        for bad in ["9x", "int", "a-b"] {
            let Err(e) = Model::new("unused.onnx")
                .name(bad)
                .out_dir(std::env::temp_dir())
                .cargo_metadata(false)
                .try_compile()
            else {
                panic!("{bad}: accepted");
            };
            assert!(e.to_string().contains("C identifier"), "{bad}: {e}");
        }
    }

    #[test]
    fn default_names_are_c_identifiers() {
        let name = |p: &str| default_name(Path::new(p)).unwrap();
        assert_eq!(name("dir/9net.onnx"), "m9net");
        assert_eq!(name("int.onnx"), "int_");
        assert_eq!(name("my-model.v2.onnx"), "my_model_v2");
        for nameless in ["/", "..", "dir/..", ".onnx", ""] {
            let e = default_name(Path::new(nameless)).expect_err(nameless);
            assert!(e.to_string().contains(".name()"), "{nameless}: {e}");
        }
    }

    #[test]
    fn paths_with_line_breaks_are_refused_before_any_cargo_line() {
        let dir = tempfile::tempdir().unwrap();
        for bad in ["a\ncargo:rustc-link-lib=evil.onnx", "a\rb.onnx"] {
            let e = Model::new(dir.path().join(bad))
                .name("m")
                .out_dir(dir.path())
                .try_compile()
                .expect_err(bad);
            assert!(e.to_string().contains("line break"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn two_models_taking_one_name_are_refused_naming_both() {
        let dir = tempfile::tempdir().unwrap();
        let model = |file: &str| {
            let p = dir.path().join(file);
            std::fs::write(&p, b"not read: the name is claimed first").unwrap();
            Model::new(p).out_dir(dir.path()).cargo_metadata(false)
        };
        // The first fails later (its bytes are no model) but keeps the name.
        assert!(model("a-b.onnx").try_compile().is_err());
        let e = model("a_b.onnx").try_compile().expect_err("a second a_b");
        let text = e.to_string();
        assert!(
            text.contains("a-b.onnx") && text.contains("a_b.onnx") && text.contains("'a_b'"),
            "{text}"
        );
        // The same file again is no collision (it fails on its bytes, not the name).
        let again = model("a-b.onnx").try_compile().expect_err("not a model");
        assert!(!again.to_string().contains("both compile"), "{again}");
    }

    #[test]
    fn only_linux_x86_64_and_aarch64_are_targets() {
        assert!(arch_of("aarch64-unknown-linux-gnu").is_ok());
        assert!(arch_of("x86_64-unknown-linux-musl").is_ok());
        assert!(arch_of("x86_64-pc-windows-msvc").is_err());
        assert!(arch_of("riscv64gc-unknown-linux-gnu").is_err());
    }
}
