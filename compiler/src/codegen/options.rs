//! What the caller decides about code generation: the target, symbol names, weight
//! storage and overrides of nnc's kernel choices. Everything that changes the generated
//! code is a field here, so the same options always give the same artifact.

use std::fmt;

use super::target::Target;

#[derive(Clone, Debug)]
pub struct CompileOptions {
    pub target: Target,
    /// Symbol prefix: `--name foo` gives `foo_infer`; empty by default.
    pub prefix: String,
    /// How the float32 weights kernels repack are stored.
    pub weights: WeightFormat,
    /// Overrides of the kernel plan's choices (`--kernel KIND=CHOICE`).
    pub kernels: KernelOptions,
    /// What `infer` does with a data-dependent index (Gather, Scatter, OneHot, ...) that
    /// is out of range: `--index-checks`.
    pub index_checks: IndexChecks,
}

impl CompileOptions {
    /// Options for `target` with nnc's defaults for everything else.
    pub fn new(target: Target) -> CompileOptions {
        CompileOptions {
            target,
            prefix: String::new(),
            weights: WeightFormat::F32,
            kernels: KernelOptions::default(),
            index_checks: IndexChecks::default(),
        }
    }
}

/// Run-time handling of data-dependent indices that are out of range.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IndexChecks {
    /// `infer` returns `NNC_ERR_INDEX_OUT_OF_RANGE` and writes nothing outside its
    /// buffers.
    #[default]
    Error,
    /// The index is clamped into range and `infer` goes on (nnc before ABI version 2).
    Clamp,
}

/// Storage of the float32 weights that kernels repack (GEMM panels, Winograd-transformed
/// and depthwise filters): as they are, or as IEEE half (`--quantize fp16`), expanded
/// to float32 in the workspace by the node that reads them (`lower::f16_weights`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WeightFormat {
    #[default]
    F32,
    F16,
}

/// Machine code where the target has a kernel for the node, or always Cranelift's
/// portable kernels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KernelSource {
    #[default]
    Auto,
    Clif,
}

/// A strategy that is on where nnc's rules pick it, or never used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Toggle {
    #[default]
    Auto,
    Off,
}

/// Winograd for 3×3 stride-1 convs: nnc's per-layer choice, never, or always F(2×2) /
/// F(4×4) where it applies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WinogradChoice {
    #[default]
    Auto,
    Off,
    F2,
    F4,
}

/// The implicit-GEMM conv's output rows: written in place where they are wide enough
/// (auto), or always through the row buffer (`wide`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ConvRows {
    #[default]
    Auto,
    Wide,
}

/// Loop order of the machine-code f32 GEMM over K blocks and column panels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GemmOrder {
    #[default]
    Auto,
    Blocks,
    Panels,
}

/// Loop order of the INT8 convolution kernel over weight tiles and input panels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Int8Order {
    #[default]
    Auto,
    Tiles,
    Panels,
}

/// Overrides of the kernel plan, for benchmarks and comparisons of one path against
/// another; the default (every field `Auto`) is nnc's own choice everywhere.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelOptions {
    pub gemm: KernelSource,
    pub dwconv: KernelSource,
    pub pool: KernelSource,
    pub softmax: KernelSource,
    pub winograd_transform: KernelSource,
    pub int8_conv: KernelSource,
    pub winograd: WinogradChoice,
    pub narrow_conv: Toggle,
    pub phase_planes: Toggle,
    pub separable_pool: Toggle,
    pub conv_rows: ConvRows,
    pub gemm_order: GemmOrder,
    pub gemm_prefetch: Toggle,
    pub int8_order: Int8Order,
}

/// One `--kernel` kind: its name, the choices it accepts (the first is the default)
/// and what it controls.
pub struct KernelSwitch {
    pub kind: &'static str,
    pub choices: &'static [&'static str],
    pub about: &'static str,
}

/// Every `--kernel KIND=CHOICE`, for parsing and `--help`.
pub const KERNEL_SWITCHES: &[KernelSwitch] = &[
    KernelSwitch {
        kind: "gemm",
        choices: &["auto", "clif"],
        about: "f32 GEMM micro-kernels (Conv, Gemm, MatMul): machine code or Cranelift",
    },
    KernelSwitch {
        kind: "dwconv",
        choices: &["auto", "clif"],
        about: "depthwise convolution kernels",
    },
    KernelSwitch {
        kind: "pool",
        choices: &["auto", "clif"],
        about: "row passes of the separable max pool",
    },
    KernelSwitch {
        kind: "softmax",
        choices: &["auto", "clif"],
        about: "softmax rows",
    },
    KernelSwitch {
        kind: "winograd-transform",
        choices: &["auto", "clif"],
        about: "Winograd input/output transforms",
    },
    KernelSwitch {
        kind: "int8-conv",
        choices: &["auto", "clif"],
        about: "INT8 convolution and MatMulInteger kernels (x86 machine code or Cranelift)",
    },
    KernelSwitch {
        kind: "winograd",
        choices: &["auto", "off", "f2", "f4"],
        about: "Winograd for 3x3 stride-1 convs: per-layer choice, never, or always F2/F4",
    },
    KernelSwitch {
        kind: "narrow-conv",
        choices: &["auto", "off"],
        about: "the transposed GEMM for convs with few positions and many maps",
    },
    KernelSwitch {
        kind: "phase-planes",
        choices: &["auto", "off"],
        about: "the implicit GEMM over stride-2 phase planes",
    },
    KernelSwitch {
        kind: "separable-pool",
        choices: &["auto", "off"],
        about: "the separable 2-D max pool",
    },
    KernelSwitch {
        kind: "conv-rows",
        choices: &["auto", "wide"],
        about: "implicit-GEMM output rows written in place (auto) or always buffered",
    },
    KernelSwitch {
        kind: "gemm-order",
        choices: &["auto", "blocks", "panels"],
        about: "loop order of the machine-code GEMM",
    },
    KernelSwitch {
        kind: "gemm-prefetch",
        choices: &["auto", "off"],
        about: "prefetch of the next packed-B panel in the machine-code GEMM",
    },
    KernelSwitch {
        kind: "int8-order",
        choices: &["auto", "tiles", "panels"],
        about: "loop order of the INT8 convolution kernel",
    },
];

/// A `--kernel` value that names no kind or no choice of its kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelOptionError {
    #[error("--kernel '{0}': expected KIND=CHOICE")]
    Syntax(String),
    #[error("--kernel: unknown kind '{0}' (kinds: {1})")]
    UnknownKind(String, String),
    #[error("--kernel {kind}: unknown choice '{choice}' (choices: {choices})")]
    UnknownChoice {
        kind: String,
        choice: String,
        choices: String,
    },
}

impl KernelOptions {
    /// Applies one `KIND=CHOICE`.
    pub fn set(&mut self, spec: &str) -> Result<(), KernelOptionError> {
        let (kind, choice) = spec
            .split_once('=')
            .ok_or_else(|| KernelOptionError::Syntax(spec.to_string()))?;
        let switch = KERNEL_SWITCHES
            .iter()
            .find(|s| s.kind == kind)
            .ok_or_else(|| {
                let kinds: Vec<_> = KERNEL_SWITCHES.iter().map(|s| s.kind).collect();
                KernelOptionError::UnknownKind(kind.to_string(), kinds.join(", "))
            })?;
        if !switch.choices.contains(&choice) {
            return Err(KernelOptionError::UnknownChoice {
                kind: kind.to_string(),
                choice: choice.to_string(),
                choices: switch.choices.join(", "),
            });
        }
        let source = |c: &str| match c {
            "clif" => KernelSource::Clif,
            _ => KernelSource::Auto,
        };
        let toggle = |c: &str| match c {
            "off" => Toggle::Off,
            _ => Toggle::Auto,
        };
        match kind {
            "gemm" => self.gemm = source(choice),
            "dwconv" => self.dwconv = source(choice),
            "pool" => self.pool = source(choice),
            "softmax" => self.softmax = source(choice),
            "winograd-transform" => self.winograd_transform = source(choice),
            "int8-conv" => self.int8_conv = source(choice),
            "winograd" => {
                self.winograd = match choice {
                    "off" => WinogradChoice::Off,
                    "f2" => WinogradChoice::F2,
                    "f4" => WinogradChoice::F4,
                    _ => WinogradChoice::Auto,
                }
            }
            "narrow-conv" => self.narrow_conv = toggle(choice),
            "phase-planes" => self.phase_planes = toggle(choice),
            "separable-pool" => self.separable_pool = toggle(choice),
            "conv-rows" => {
                self.conv_rows = match choice {
                    "wide" => ConvRows::Wide,
                    _ => ConvRows::Auto,
                }
            }
            "gemm-order" => {
                self.gemm_order = match choice {
                    "blocks" => GemmOrder::Blocks,
                    "panels" => GemmOrder::Panels,
                    _ => GemmOrder::Auto,
                }
            }
            "gemm-prefetch" => self.gemm_prefetch = toggle(choice),
            "int8-order" => {
                self.int8_order = match choice {
                    "tiles" => Int8Order::Tiles,
                    "panels" => Int8Order::Panels,
                    _ => Int8Order::Auto,
                }
            }
            _ => unreachable!("every kind of KERNEL_SWITCHES is matched"),
        }
        Ok(())
    }

    /// Options from a list of `KIND=CHOICE` (later ones win).
    pub fn parse<'a>(
        specs: impl IntoIterator<Item = &'a str>,
    ) -> Result<KernelOptions, KernelOptionError> {
        let mut options = KernelOptions::default();
        for spec in specs {
            options.set(spec)?;
        }
        Ok(options)
    }
}

impl fmt::Display for KernelSwitch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}={}: {}",
            self.kind,
            self.choices.join("|"),
            self.about
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_switch_and_choice_parses() {
        for s in KERNEL_SWITCHES {
            for c in s.choices {
                KernelOptions::parse([format!("{}={c}", s.kind).as_str()]).unwrap();
            }
        }
        let o = KernelOptions::parse(["gemm=clif", "winograd=f4", "int8-order=tiles"]).unwrap();
        assert_eq!(o.gemm, KernelSource::Clif);
        assert_eq!(o.winograd, WinogradChoice::F4);
        assert_eq!(o.int8_order, Int8Order::Tiles);
        assert_eq!(o.dwconv, KernelSource::Auto);
    }

    #[test]
    fn bad_specs_are_refused() {
        assert!(matches!(
            KernelOptions::parse(["gemm"]),
            Err(KernelOptionError::Syntax(_))
        ));
        assert!(matches!(
            KernelOptions::parse(["gem=clif"]),
            Err(KernelOptionError::UnknownKind(..))
        ));
        assert!(matches!(
            KernelOptions::parse(["gemm=avx"]),
            Err(KernelOptionError::UnknownChoice { .. })
        ));
    }
}
