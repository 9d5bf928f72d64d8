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

/// A resolved target: architecture plus the CPU features code may use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub arch: Arch,
    /// The `--cpu` value, resolved (never "native").
    pub cpu: String,
    /// Cranelift ISA flag names enabled, e.g. `has_avx`, `has_dotprod`.
    pub features: Vec<&'static str>,
}

const X86_V3: &[&str] = &[
    "has_sse3",
    "has_ssse3",
    "has_sse41",
    "has_sse42",
    "has_popcnt",
    "has_avx",
    "has_avx2",
    "has_fma",
    "has_bmi1",
    "has_bmi2",
    "has_lzcnt",
];
const X86_BASELINE: &[&str] = &["has_sse3", "has_ssse3", "has_sse41"];

impl Target {
    /// Resolves `--target` / `--cpu`. `cpu = None` means `native` on the host architecture
    /// and the architecture's baseline otherwise.
    pub fn new(arch: Arch, cpu: Option<&str>) -> Result<Target> {
        let cpu = cpu.unwrap_or(if arch == Arch::host() {
            "native"
        } else {
            "baseline"
        });
        let bad = || {
            NncError::Model(format!(
                "unknown --cpu '{cpu}' for {} (see nnc compile --help)",
                arch.triple()
            ))
        };
        let features: Vec<&'static str> = match (arch, cpu) {
            (Arch::X86_64, "baseline") => X86_BASELINE.to_vec(),
            (Arch::X86_64, "x86-64-v3") => X86_V3.to_vec(),
            (Arch::X86_64, "x86-64-v4") => {
                let mut f = X86_V3.to_vec();
                f.extend(["has_avx512f", "has_avx512vl", "has_avx512dq"]);
                f
            }
            (Arch::X86_64, "x86-64-v4+vnni") => {
                let mut f = X86_V3.to_vec();
                f.extend([
                    "has_avx512f",
                    "has_avx512vl",
                    "has_avx512dq",
                    "has_avx512vnni",
                ]);
                f
            }
            (Arch::X86_64, "native") if Arch::host() == Arch::X86_64 => host_x86_features(),
            (Arch::Aarch64, "baseline" | "armv8") => vec![],
            (Arch::Aarch64, "+dotprod") => vec!["has_dotprod"],
            (Arch::Aarch64, "+i8mm") => vec!["has_dotprod", "has_i8mm"],
            (Arch::Aarch64, "native") if Arch::host() == Arch::Aarch64 => vec![],
            _ => return Err(bad()),
        };
        let cpu = if cpu == "baseline" && arch == Arch::Aarch64 {
            "armv8"
        } else {
            cpu
        };
        Ok(Target {
            arch,
            cpu: cpu.to_string(),
            features,
        })
    }

    pub fn host() -> Target {
        Target::new(Arch::host(), None).expect("the host target always resolves")
    }

    pub fn has(&self, feature: &str) -> bool {
        self.features.contains(&feature)
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
        for f in &self.features {
            builder.enable(f).map_err(|e| err(format!("{f}: {e}")))?;
        }
        builder
            .finish(settings::Flags::new(shared))
            .map_err(|e| err(e.to_string()))
    }
}

/// Features of the running x86-64 CPU. `has_avx` is set explicitly together with
/// `has_fma`: without it Cranelift lowers `fma` to a libm call.
fn host_x86_features() -> Vec<&'static str> {
    let mut f = X86_BASELINE.to_vec();
    #[cfg(target_arch = "x86_64")]
    {
        let checks: &[(&'static str, bool)] = &[
            ("has_sse42", std::arch::is_x86_feature_detected!("sse4.2")),
            ("has_popcnt", std::arch::is_x86_feature_detected!("popcnt")),
            ("has_avx", std::arch::is_x86_feature_detected!("avx")),
            ("has_avx2", std::arch::is_x86_feature_detected!("avx2")),
            (
                "has_fma",
                std::arch::is_x86_feature_detected!("fma")
                    && std::arch::is_x86_feature_detected!("avx"),
            ),
            ("has_bmi1", std::arch::is_x86_feature_detected!("bmi1")),
            ("has_bmi2", std::arch::is_x86_feature_detected!("bmi2")),
            ("has_lzcnt", std::arch::is_x86_feature_detected!("lzcnt")),
            (
                "has_avx512f",
                std::arch::is_x86_feature_detected!("avx512f"),
            ),
            (
                "has_avx512vl",
                std::arch::is_x86_feature_detected!("avx512vl"),
            ),
            (
                "has_avx512dq",
                std::arch::is_x86_feature_detected!("avx512dq"),
            ),
            (
                "has_avx512vnni",
                std::arch::is_x86_feature_detected!("avx512vnni"),
            ),
            (
                "has_avx_vnni",
                std::arch::is_x86_feature_detected!("avxvnni"),
            ),
        ];
        f.extend(checks.iter().filter(|(_, on)| *on).map(|(n, _)| *n));
    }
    f
}
