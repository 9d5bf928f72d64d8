//! Target selection: `--target` and `--cpu` become a Cranelift ISA with explicit flags.
//!
//! Flags are always set by name rather than inferred, so an artifact built on one machine
//! is the same as one built on another for the same `--target`/`--cpu`.

use std::str::FromStr;
use std::sync::Arc;

use cranelift_codegen::isa::{self, TargetIsa};
use cranelift_codegen::settings::{self, Configurable};
use target_lexicon::Triple;

use crate::error::{NncError, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    X86_64,
    Aarch64,
}

impl Arch {
    pub fn host() -> Arch {
        if cfg!(target_arch = "aarch64") {
            Arch::Aarch64
        } else {
            Arch::X86_64
        }
    }

    pub fn triple(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-unknown-linux-gnu",
            Arch::Aarch64 => "aarch64-unknown-linux-gnu",
        }
    }
}

impl FromStr for Arch {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "x86_64" | "x86-64" | "amd64" | "x86_64-unknown-linux-gnu" => Ok(Arch::X86_64),
            "aarch64" | "arm64" | "aarch64-unknown-linux-gnu" => Ok(Arch::Aarch64),
            _ => Err(format!("unknown target '{s}' (use x86_64 or aarch64)")),
        }
    }
}

/// A CPU feature code generation may use: each is one Cranelift ISA flag, set
/// explicitly so the artifact never depends on the machine that compiles it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CpuFeature {
    Sse3,
    Ssse3,
    Sse41,
    Sse42,
    Popcnt,
    Avx,
    Avx2,
    Fma,
    Bmi1,
    Bmi2,
    Lzcnt,
    Avx512f,
    Avx512vl,
    Avx512dq,
    Avx512vnni,
    AvxVnni,
    Dotprod,
    I8mm,
}

impl CpuFeature {
    pub const ALL: [CpuFeature; 18] = [
        CpuFeature::Sse3,
        CpuFeature::Ssse3,
        CpuFeature::Sse41,
        CpuFeature::Sse42,
        CpuFeature::Popcnt,
        CpuFeature::Avx,
        CpuFeature::Avx2,
        CpuFeature::Fma,
        CpuFeature::Bmi1,
        CpuFeature::Bmi2,
        CpuFeature::Lzcnt,
        CpuFeature::Avx512f,
        CpuFeature::Avx512vl,
        CpuFeature::Avx512dq,
        CpuFeature::Avx512vnni,
        CpuFeature::AvxVnni,
        CpuFeature::Dotprod,
        CpuFeature::I8mm,
    ];

    pub fn arch(self) -> Arch {
        match self {
            CpuFeature::Dotprod | CpuFeature::I8mm => Arch::Aarch64,
            _ => Arch::X86_64,
        }
    }

    /// The Cranelift setting that enables it.
    pub fn cranelift_flag(self) -> &'static str {
        match self {
            CpuFeature::Sse3 => "has_sse3",
            CpuFeature::Ssse3 => "has_ssse3",
            CpuFeature::Sse41 => "has_sse41",
            CpuFeature::Sse42 => "has_sse42",
            CpuFeature::Popcnt => "has_popcnt",
            CpuFeature::Avx => "has_avx",
            CpuFeature::Avx2 => "has_avx2",
            CpuFeature::Fma => "has_fma",
            CpuFeature::Bmi1 => "has_bmi1",
            CpuFeature::Bmi2 => "has_bmi2",
            CpuFeature::Lzcnt => "has_lzcnt",
            CpuFeature::Avx512f => "has_avx512f",
            CpuFeature::Avx512vl => "has_avx512vl",
            CpuFeature::Avx512dq => "has_avx512dq",
            CpuFeature::Avx512vnni => "has_avx512vnni",
            CpuFeature::AvxVnni => "has_avx_vnni",
            CpuFeature::Dotprod => "has_dotprod",
            CpuFeature::I8mm => "has_i8mm",
        }
    }

    /// The name users and kernel names know it by (`avx512vnni`, `dotprod`).
    pub fn name(self) -> &'static str {
        let flag = self.cranelift_flag();
        flag.strip_prefix("has_").unwrap_or(flag)
    }

    fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

/// A set of [`CpuFeature`]s; iterates in declaration order, so anything built from it
/// is the same whatever order the features were added in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CpuFeatures(u32);

impl CpuFeatures {
    pub const fn empty() -> CpuFeatures {
        CpuFeatures(0)
    }

    pub fn of(features: &[CpuFeature]) -> CpuFeatures {
        let mut set = CpuFeatures::empty();
        for &f in features {
            set.insert(f);
        }
        set
    }

    pub fn insert(&mut self, f: CpuFeature) {
        self.0 |= f.bit();
    }

    pub fn contains(&self, f: CpuFeature) -> bool {
        self.0 & f.bit() != 0
    }

    /// Whether every feature of `other` is in `self`.
    pub fn contains_all(&self, other: CpuFeatures) -> bool {
        self.0 & other.0 == other.0
    }

    /// The set as bits, feature `f` at bit `f as u32` (what the CPU check computes).
    pub fn bits(&self) -> u32 {
        self.0
    }

    pub fn iter(&self) -> impl Iterator<Item = CpuFeature> + '_ {
        CpuFeature::ALL.into_iter().filter(|f| self.contains(*f))
    }
}

impl std::fmt::Display for CpuFeatures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<_> = self.iter().map(CpuFeature::name).collect();
        f.write_str(&names.join(","))
    }
}

/// A `--cpu` preset: a named feature set of one architecture.
#[derive(Debug)]
pub struct CpuPreset {
    pub arch: Arch,
    pub name: &'static str,
    /// Other spellings `--cpu` accepts for it.
    pub aliases: &'static [&'static str],
    pub features: &'static [CpuFeature],
}

use CpuFeature as F;

/// The x86-64 features in the order the levels add them: each preset is a prefix.
const X86_LEVELS: &[CpuFeature] = &[
    F::Sse3,
    F::Ssse3,
    F::Sse41,
    F::Sse42,
    F::Popcnt,
    F::Avx,
    F::Avx2,
    F::Fma,
    F::Bmi1,
    F::Bmi2,
    F::Lzcnt,
    F::Avx512f,
    F::Avx512vl,
    F::Avx512dq,
    F::Avx512vnni,
];
const X86_BASELINE: &[CpuFeature] = X86_LEVELS.split_at(3).0;
const X86_V3: &[CpuFeature] = X86_LEVELS.split_at(11).0;
const X86_V4: &[CpuFeature] = X86_LEVELS.split_at(14).0;
const X86_V4_VNNI: &[CpuFeature] = X86_LEVELS;
/// x86-64-v3 with the VEX-encoded VNNI of Alder Lake and later, and Zen 5 without
/// AVX-512.
const X86_V3_AVX_VNNI: &[CpuFeature] = &with_feature::<12>(X86_V3, F::AvxVnni);

/// `base` and then `extra` (`N` = `base.len() + 1`).
const fn with_feature<const N: usize>(base: &[CpuFeature], extra: CpuFeature) -> [CpuFeature; N] {
    assert!(N == base.len() + 1);
    let mut out = [extra; N];
    let mut i = 0;
    while i < base.len() {
        out[i] = base[i];
        i += 1;
    }
    out
}
/// Every `--cpu` preset; `native` (the running CPU) is resolved apart, by detection.
pub const CPU_PRESETS: &[CpuPreset] = &[
    CpuPreset {
        arch: Arch::X86_64,
        name: "baseline",
        aliases: &[],
        features: X86_BASELINE,
    },
    CpuPreset {
        arch: Arch::X86_64,
        name: "x86-64-v3",
        aliases: &[],
        features: X86_V3,
    },
    CpuPreset {
        arch: Arch::X86_64,
        name: "x86-64-v3+avxvnni",
        aliases: &[],
        features: X86_V3_AVX_VNNI,
    },
    CpuPreset {
        arch: Arch::X86_64,
        name: "x86-64-v4",
        aliases: &[],
        features: X86_V4,
    },
    CpuPreset {
        arch: Arch::X86_64,
        name: "x86-64-v4+vnni",
        aliases: &[],
        features: X86_V4_VNNI,
    },
    CpuPreset {
        arch: Arch::Aarch64,
        name: "armv8",
        aliases: &["baseline"],
        features: &[],
    },
    CpuPreset {
        arch: Arch::Aarch64,
        name: "+dotprod",
        aliases: &[],
        features: &[F::Dotprod],
    },
    CpuPreset {
        arch: Arch::Aarch64,
        name: "+i8mm",
        aliases: &[],
        features: &[F::Dotprod, F::I8mm],
    },
];

/// A resolved target: architecture plus the CPU features code may use. A
/// multi-versioned target (`--cpu` a list, or the x86-64 default) also carries its
/// other variants: the library runs, on each CPU, the first variant whose features the
/// CPU has ([`Target::variants`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub arch: Arch,
    /// The `--cpu` value, resolved: a preset, `native`, or the presets of a
    /// multi-versioned target separated by commas, most capable first.
    pub cpu: String,
    /// The features of the (first) variant.
    pub features: CpuFeatures,
    /// A multi-versioned target's variants after the first, each tried where the CPU
    /// lacks a feature of the ones before; empty for a single-variant target.
    pub fallbacks: Vec<Target>,
}

/// The presets of a library compiled without `--cpu` for x86-64: one variant per CPU
/// family nnc has kernels for, so the library runs everywhere and runs its fastest
/// kernels where the CPU has them. `x86-64-v3+avxvnni` differs from `x86-64-v3` only
/// in its INT8 dot products and shares its weights (resnet18: 0.1 MB more code).
pub const X86_DEFAULT_CPUS: &str = "x86-64-v4+vnni,x86-64-v3+avxvnni,x86-64-v3,baseline";

/// The aarch64 presets of a library compiled without `--cpu`: the variants differ only
/// in their INT8 dot products (`usdot`, `sdot`, widening multiplies), so a float32
/// model's variants share their weights.
pub const AARCH64_DEFAULT_CPUS: &str = "+i8mm,+dotprod,armv8";

impl Target {
    /// Resolves `--target` / `--cpu`: a preset, `native` (on the host architecture), or
    /// several of them separated by commas (a multi-versioned library). `cpu = None` is
    /// [`X86_DEFAULT_CPUS`] or [`AARCH64_DEFAULT_CPUS`].
    pub fn new(arch: Arch, cpu: Option<&str>) -> Result<Target> {
        let cpu = cpu.unwrap_or(match arch {
            Arch::X86_64 => X86_DEFAULT_CPUS,
            Arch::Aarch64 => AARCH64_DEFAULT_CPUS,
        });
        let mut variants: Vec<Target> = vec![];
        for name in cpu.split(',').map(str::trim) {
            let variant = Target::single(arch, name)?;
            if !variants.iter().any(|v| v.features == variant.features) {
                variants.push(variant);
            }
        }
        // Most capable first, so the first variant a CPU can run is its best one; a
        // stable sort keeps the order given between sets of equal size.
        variants.sort_by_key(|v| std::cmp::Reverse(v.features.iter().count()));
        let cpu = (variants.iter().map(|v| v.cpu.as_str()))
            .collect::<Vec<_>>()
            .join(",");
        let mut rest = variants.into_iter();
        let first = rest.next().expect("split yields at least one name");
        Ok(Target {
            cpu,
            fallbacks: rest.collect(),
            ..first
        })
    }

    /// One preset, or `native` on the host architecture.
    fn single(arch: Arch, cpu: &str) -> Result<Target> {
        if cpu == "native" && arch == Arch::host() {
            return Ok(Target {
                arch,
                cpu: cpu.to_string(),
                features: host_features(),
                fallbacks: vec![],
            });
        }
        let preset = CPU_PRESETS
            .iter()
            .find(|p| p.arch == arch && (p.name == cpu || p.aliases.contains(&cpu)))
            .ok_or_else(|| {
                NncError::Model(format!(
                    "unknown --cpu '{cpu}' for {} (see nnc compile --help)",
                    arch.triple()
                ))
            })?;
        Ok(Target {
            arch,
            cpu: preset.name.to_string(),
            features: CpuFeatures::of(preset.features),
            fallbacks: vec![],
        })
    }

    /// The running CPU's features: a single-variant library for this machine.
    pub fn host() -> Target {
        Target::new(Arch::host(), Some("native")).expect("the host target always resolves")
    }

    /// Each variant as a single-variant target, most capable first.
    pub fn variants(&self) -> Vec<Target> {
        let first = Target {
            arch: self.arch,
            cpu: self.cpu.split(',').next().unwrap_or_default().to_string(),
            features: self.features,
            fallbacks: vec![],
        };
        std::iter::once(first)
            .chain(self.fallbacks.iter().cloned())
            .collect()
    }

    /// The features a CPU must have to run a library for this target (its least
    /// demanding variant's), comma-separated as `model_info` and the header give them.
    pub fn required_feature_names(&self) -> String {
        let least = self.fallbacks.last().unwrap_or(self);
        let names: Vec<&str> = least.features.iter().map(CpuFeature::name).collect();
        names.join(",")
    }

    /// Whether the library carries several variants and chooses one at run time.
    pub fn is_multi_versioned(&self) -> bool {
        !self.fallbacks.is_empty()
    }

    pub fn has(&self, feature: CpuFeature) -> bool {
        self.features.contains(feature)
    }

    /// Builds the Cranelift ISA. `opt_level` is "none" or "speed": hand-scheduled
    /// kernels want "none" (the e-graph otherwise moves splats next to their uses and
    /// unrolled register tiles spill), the rest wants "speed".
    pub fn isa(&self, opt_level: &str) -> Result<Arc<dyn TargetIsa>> {
        let err = |m: String| NncError::Codegen {
            context: "ISA setup".into(),
            message: m,
        };
        let mut shared = settings::builder();
        for (k, v) in [
            ("opt_level", opt_level),
            ("is_pic", "false"),
            ("enable_verifier", "false"),
            ("preserve_frame_pointers", "false"),
        ] {
            shared.set(k, v).map_err(|e| err(format!("{k}: {e}")))?;
        }
        let triple = Triple::from_str(self.arch.triple()).map_err(|e| err(e.to_string()))?;
        let mut builder = isa::lookup(triple).map_err(|e| err(e.to_string()))?;
        for f in self.features.iter() {
            let flag = f.cranelift_flag();
            builder
                .enable(flag)
                .map_err(|e| err(format!("{flag}: {e}")))?;
        }
        builder
            .finish(settings::Flags::new(shared))
            .map_err(|e| err(e.to_string()))
    }
}

/// Features of the running CPU. On x86-64 `has_avx` is set explicitly together with
/// `has_fma`: without it Cranelift lowers `fma` to a libm call. On aarch64 `native` is
/// the armv8 baseline.
fn host_features() -> CpuFeatures {
    #[allow(unused_mut)]
    let mut f = CpuFeatures::empty();
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        let checks = [
            (F::Sse3, true),
            (F::Ssse3, true),
            (F::Sse41, true),
            (F::Sse42, has!("sse4.2")),
            (F::Popcnt, has!("popcnt")),
            (F::Avx, has!("avx")),
            (F::Avx2, has!("avx2")),
            (F::Fma, has!("fma") && has!("avx")),
            (F::Bmi1, has!("bmi1")),
            (F::Bmi2, has!("bmi2")),
            (F::Lzcnt, has!("lzcnt")),
            (F::Avx512f, has!("avx512f")),
            (F::Avx512vl, has!("avx512vl")),
            (F::Avx512dq, has!("avx512dq")),
            (F::Avx512vnni, has!("avx512vnni")),
            (F::AvxVnni, has!("avxvnni")),
        ];
        for (feature, on) in checks {
            if on {
                f.insert(feature);
            }
        }
    }
    f
}
