//! The plan of a Conv node: its [`ConvStrategy`] (see `lower::conv` for each one's
//! code), the scratch it needs whatever the CPU, and how it is split into tasks. The
//! strategies' own rules are in one file each.

pub(crate) mod depthwise;
pub(crate) mod im2col;
pub(crate) mod implicit_gemm;
pub(crate) mod narrow;
pub(crate) mod winograd;

use crate::codegen::isa::Isa;
use im2col::*;
use implicit_gemm::*;

use super::{NodeKernel, NodeOperands, Strategy};
use crate::codegen::isa::Vector;
use crate::codegen::kernels::gemm::{BLayout, Geometry};
use crate::codegen::options::{KernelOptions, KernelSource, WinogradChoice};
use crate::codegen::plan::gemm::{col_split, weights_split, SplitAxis};
use crate::codegen::tasks::Split;
use crate::ir::{DType, Tensor, TensorType};
use crate::ops::ConvAttrs;

pub(crate) const F32: usize = 4;

/// Bytes of C per call of the implicit-GEMM conv kernel (see `conv_implicit_gemm`).
pub(crate) const IMPLICIT_C_BYTES: usize = 512 * 1024;

/// Bytes of im2col panels produced and consumed at a time: about L2, so they mostly
/// stay there between being written and being read by the GEMM. Every chunk's GEMM
/// streams all of A (the weights) once, so chunks must not be small: at 256 KB a
/// 3×3×512 conv (K = 4608, 49 outputs) ran as chunks of 48 and 1 columns, reading its
/// 9.4 MB of weights from L3 twice.
pub(crate) const IM2COL_CHUNK_BYTES: usize = 2 * 1024 * 1024;

/// How a batch-1, one-group conv's output positions are split into tasks, `units`
/// pieces of them (im2col column chunks, implicit-GEMM row chunks); other convs are
/// not split here.
pub(crate) fn position_split(g: &ConvGeometry, units: usize) -> Split {
    if g.batch * g.group != 1 {
        return Split::of(1, 0);
    }
    Split::of(units, g.out_size() * g.mg * g.gemm_k())
}

/// Scratch sub-buffers start on this many bytes (a cache line).
pub(crate) const SCRATCH_ALIGN: usize = 64;

/// Everything about a convolution's shapes, spatial vectors having one entry per axis.
#[derive(Clone, Debug)]
pub(crate) struct ConvGeometry {
    pub(crate) batch: usize,
    pub(crate) channels: usize,
    pub(crate) maps: usize,
    pub(crate) group: usize,
    /// Input channels and output maps per group.
    pub(crate) cg: usize,
    pub(crate) mg: usize,
    pub(crate) input: Vec<usize>,
    pub(crate) output: Vec<usize>,
    pub(crate) kernel: Vec<usize>,
    pub(crate) strides: Vec<usize>,
    pub(crate) dilations: Vec<usize>,
    pub(crate) pad_begin: Vec<usize>,
    pub(crate) pad_end: Vec<usize>,
}

impl ConvGeometry {
    pub(crate) fn new(
        c: &ConvAttrs,
        x: &TensorType,
        w: &TensorType,
        y: &TensorType,
    ) -> Result<ConvGeometry, String> {
        let sp = x
            .rank()
            .checked_sub(2)
            .filter(|&s| s > 0)
            .ok_or("Conv input must have rank ≥ 3")?;
        let attrs_ok = c.kernel.len() == sp
            && c.strides.len() == sp
            && c.dilations.len() == sp
            && c.pads.len() == 2 * sp;
        if !attrs_ok || w.rank() != sp + 2 || y.rank() != sp + 2 || c.group == 0 {
            return Err(format!(
                "Conv attributes do not match input {x} and weight {w}"
            ));
        }
        if c.kernel.contains(&0) || c.strides.contains(&0) || c.dilations.contains(&0) {
            return Err("Conv kernel, strides and dilations must be positive".into());
        }
        let (channels, maps) = (x.shape[1], w.shape[0]);
        if channels != w.shape[1] * c.group
            || !maps.is_multiple_of(c.group)
            || w.shape[2..] != c.kernel[..]
            || y.shape[1] != maps
        {
            return Err(format!(
                "Conv channels do not match: input {x}, weight {w}, group {}",
                c.group
            ));
        }
        for d in 0..sp {
            let expected = crate::ops::infer::window_output(
                x.shape[2 + d],
                c.kernel[d],
                c.strides[d],
                c.pads[d] + c.pads[sp + d],
                c.dilations[d],
                false,
            )?;
            if y.shape[2 + d] != expected {
                return Err(format!(
                    "Conv output {y} does not match its input {x} and attributes"
                ));
            }
        }
        Ok(ConvGeometry {
            batch: x.shape[0],
            channels,
            maps,
            group: c.group,
            cg: channels / c.group,
            mg: maps / c.group,
            input: x.shape[2..].to_vec(),
            output: y.shape[2..].to_vec(),
            kernel: c.kernel.clone(),
            strides: c.strides.clone(),
            dilations: c.dilations.clone(),
            pad_begin: c.pads[..sp].to_vec(),
            pad_end: c.pads[sp..].to_vec(),
        })
    }

    pub(crate) fn in_size(&self) -> usize {
        self.input.iter().product()
    }

    pub(crate) fn out_size(&self) -> usize {
        self.output.iter().product()
    }

    pub(crate) fn taps(&self) -> usize {
        self.kernel.iter().product()
    }

    /// The GEMM's K: one row per (input channel, kernel tap).
    pub(crate) fn gemm_k(&self) -> usize {
        self.cg * self.taps()
    }

    pub(crate) fn padded(&self) -> Vec<usize> {
        (0..self.input.len())
            .map(|d| self.input[d] + self.pad_begin[d] + self.pad_end[d])
            .collect()
    }

    /// Scratch for the zero-padded copy of one group's input (0 without padding).
    pub(crate) fn padded_copy_bytes(&self) -> usize {
        if self.has_padding() {
            align_up(self.cg * self.padded().iter().product::<usize>() * F32)
        } else {
            0
        }
    }

    pub(crate) fn has_padding(&self) -> bool {
        self.pad_begin.iter().chain(&self.pad_end).any(|&p| p > 0)
    }
}

/// The code shape used for one Conv node (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConvPath {
    Pointwise,
    Depthwise,
    Im2col,
    Scalar,
}

pub(crate) fn choose_path(g: &ConvGeometry, dtype: DType) -> ConvPath {
    if dtype != DType::F32 {
        return ConvPath::Scalar;
    }
    if is_pointwise(g) && !aliased_planes(g) {
        ConvPath::Pointwise
    } else if g.cg == 1 && g.input.len() <= 2 {
        ConvPath::Depthwise
    } else {
        ConvPath::Im2col
    }
}

/// 1×…×1 kernel, stride 1, no padding.
pub(crate) fn is_pointwise(g: &ConvGeometry) -> bool {
    let unit = |v: &[usize]| v.iter().all(|&x| x == 1);
    unit(&g.kernel) && unit(&g.strides) && !g.has_padding()
}

/// Whether a pointwise conv's input planes are a multiple of 4 KB apart, and at least
/// 8 of them: the K rows of a GEMM panel read in place then all fall in one L1 set
/// (its index is address bits 6–11), more rows than the set has ways, and every row
/// tile reloads the panel. Such convs (power-of-two maps of 32×32 and up, 160×160)
/// take the im2col path, whose panels are copied once into contiguous scratch:
/// measured on a Zen 3 (`bench_conv.py`, 1 thread), 16→64 maps on 160×160 2.3 ms in
/// place against onnxruntime's 1.3, 64→64 on 64×64 0.86 against 0.52.
pub(crate) fn aliased_planes(g: &ConvGeometry) -> bool {
    is_pointwise(g) && (g.in_size() * F32).is_multiple_of(4096) && g.cg >= 8
}

pub(crate) fn align_up(bytes: usize) -> usize {
    bytes.div_ceil(SCRATCH_ALIGN) * SCRATCH_ALIGN
}

/// How one Conv node is computed (see the module docs), as the kernel plan decides it.
#[derive(Clone, Debug, PartialEq)]
pub enum ConvStrategy {
    /// 1×…×1, stride 1, unpadded: per batch and group one GEMM reading X in place.
    Pointwise(Geometry),
    /// Few positions and many maps: the transposed GEMM `Yᵀ = Xᵀ·Wᵀ` (`lower::conv::narrow`).
    Narrow(Geometry),
    /// One input channel per group: the machine-code kernel of this family, or
    /// Cranelift's loop.
    Depthwise(Option<Vector>),
    /// Winograd F(m×m, 3×3): transforms and the GEMM of the transformed products.
    Winograd {
        m: usize,
        transforms: WinogradTransforms,
        gemm: Geometry,
        split: WinogradSplit,
    },
    /// The GEMM reading the padded input (stride 1) or its stride-2 phase planes in
    /// place; `rows_in_place`: wide output rows are written straight into Y.
    ImplicitGemm {
        gemm: Geometry,
        phases: bool,
        rows_in_place: bool,
    },
    /// im2col panels a chunk at a time, then the GEMM.
    Im2col(Geometry),
    /// float64, float16 and bfloat16: a direct loop nest.
    Scalar,
}

/// How a Winograd conv runs as tasks with a thread pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WinogradSplit {
    /// By chunks of tile rows (not split: one task): a prologue pads and phase-splits
    /// the input once into the node's shared scratch, and each task runs its
    /// contiguous range of chunks, the last task the last (maybe shorter) chunk.
    Chunks(Split),
    /// By groups of maps over the whole image (see `winograd::by_maps`).
    Maps(Split),
}

impl WinogradSplit {
    pub fn tasks(&self) -> usize {
        match self {
            WinogradSplit::Chunks(s) | WinogradSplit::Maps(s) => s.tasks,
        }
    }
}

/// The Winograd input and output transforms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WinogradTransforms {
    Clif,
    /// Machine code for tile rows, on this family's vectors.
    X86(Vector),
    /// AVX-512 machine code for whole 8×8 planes, products included (F(2×2) only).
    Plane16,
}

impl ConvStrategy {
    pub fn name(&self) -> String {
        match self {
            ConvStrategy::Pointwise(_) => "pointwise-gemm".into(),
            ConvStrategy::Narrow(_) => "transposed-gemm".into(),
            ConvStrategy::Depthwise(_) => "depthwise".into(),
            ConvStrategy::Winograd { m, .. } => format!("winograd-f{m}x{m}"),
            ConvStrategy::ImplicitGemm { phases: true, .. } => "implicit-gemm-s2".into(),
            ConvStrategy::ImplicitGemm { .. } => "implicit-gemm".into(),
            ConvStrategy::Im2col(_) => "im2col+gemm".into(),
            ConvStrategy::Scalar => "direct-scalar".into(),
        }
    }

    /// The GEMM kernel family, for the strategies that run one.
    pub fn gemm(&self) -> Option<&Geometry> {
        match self {
            ConvStrategy::Pointwise(g)
            | ConvStrategy::Narrow(g)
            | ConvStrategy::Im2col(g)
            | ConvStrategy::Winograd { gemm: g, .. }
            | ConvStrategy::ImplicitGemm { gemm: g, .. } => Some(g),
            ConvStrategy::Depthwise(_) | ConvStrategy::Scalar => None,
        }
    }

    /// Kernel-library names of the micro-kernels it calls.
    pub fn kernels(&self) -> Vec<String> {
        use crate::codegen::plan::gemm_kernel_name;
        match self {
            ConvStrategy::Depthwise(Some(isa)) => vec![format!("f32-dwconv-{}", isa.suffix())],
            ConvStrategy::Depthwise(None) => vec!["f32-dwconv-clif".into()],
            ConvStrategy::Scalar => vec![],
            ConvStrategy::Winograd {
                m,
                transforms: WinogradTransforms::Plane16,
                ..
            } => ["input", "products", "output"]
                .iter()
                .map(|k| format!("f32-winograd-f{m}-plane16-{k}-avx512f"))
                .collect(),
            ConvStrategy::Winograd {
                m,
                transforms,
                gemm,
                ..
            } => {
                let isa = match transforms {
                    WinogradTransforms::X86(isa) => isa.suffix(),
                    _ => "clif",
                };
                vec![
                    format!("f32-winograd-f{m}-input-{isa}"),
                    gemm_kernel_name(gemm),
                    format!("f32-winograd-f{m}-output-{isa}"),
                ]
            }
            _ => self.gemm().map(gemm_kernel_name).into_iter().collect(),
        }
    }
}

/// The kernel plan of one Conv node; `None` when its operands are not a valid conv
/// (lowering then reports why).
pub fn plan_conv(
    c: &ConvAttrs,
    node: &NodeOperands,
    isa: &Isa,
    options: &KernelOptions,
) -> Option<NodeKernel> {
    let (x, w, y) = (node.input(0)?, node.input(1)?, *node.outputs.first()?);
    let g = ConvGeometry::new(c, x, w, y).ok()?;
    let constant_w = matches!(node.constant(1), Some(Tensor::F32(_)));
    let gemm = Geometry::for_isa(isa, options);
    let path = choose_path(&g, x.dtype);
    let scratch = scratch_bytes(&g, path, options);
    let plan =
        |s: ConvStrategy, reason: &str| Some(NodeKernel::new(Strategy::Conv(s), scratch, reason));
    if matches!(path, ConvPath::Pointwise | ConvPath::Im2col)
        && narrow::applies(&g, constant_w, &gemm, options)
    {
        let tasks = narrow::split(&g, &gemm).tasks;
        return plan(
            ConvStrategy::Narrow(gemm),
            "few output positions and many maps, constant weights, x86 GEMM kernels",
        )
        .map(|k| {
            let mut k = with_prologue(k.with_tasks(tasks), true);
            if k.prologue {
                k.prologue_parts = narrow::prologue_split(&g).tasks;
            }
            k.weights_by_columns = tasks > 1;
            k
        });
    }
    match path {
        ConvPath::Pointwise => {
            let p = g.out_size();
            let rows = BLayout::Rows { row_stride: p };
            let (axis, split) = match (g.batch * g.group, constant_w) {
                (1, true) => weights_split(g.mg, p, g.cg, &gemm, SplitAxis::Rows),
                (1, false) => (SplitAxis::Cols, col_split(g.mg, p, g.cg, &rows, &gemm)),
                _ => (SplitAxis::Cols, Split::of(1, 0)),
            };
            plan(
                ConvStrategy::Pointwise(gemm),
                "1x1 kernel, stride 1, no padding",
            )
            .map(|k| {
                let mut k = k.with_tasks(split.tasks);
                k.weights_by_rows = axis == SplitAxis::Rows && split.tasks > 1;
                k
            })
        }
        ConvPath::Depthwise => {
            let bias = node.has_input(2);
            let residual = node.has_input(3);
            let isa = depthwise::x86_kernel(&g, bias, residual, c.activation, isa, options);
            let reason = match (isa, options.dwconv) {
                (Some(_), _) => "one channel per group; the machine-code kernel covers its shape",
                (None, KernelSource::Clif) => "one channel per group; --kernel dwconv=clif",
                (None, _) => {
                    "one channel per group; no machine-code kernel for this target or shape"
                }
            };
            let tasks = match isa {
                Some(_) => depthwise::channel_split(&g).tasks,
                None => 1,
            };
            plan(ConvStrategy::Depthwise(isa), reason).map(|k| k.with_tasks(tasks))
        }
        ConvPath::Im2col if winograd::applies(&g, constant_w, options) => {
            let (m, transforms) = winograd::choose(&g, c.activation, isa, options)?;
            let reason = match options.winograd {
                WinogradChoice::Auto => {
                    "3x3 stride 1, constant weights; F(m) chosen by maps and tiles"
                }
                _ => "3x3 stride 1, constant weights; --kernel winograd",
            };
            let split = winograd::task_split(&g, m, transforms, &gemm);
            plan(
                ConvStrategy::Winograd {
                    m,
                    transforms,
                    gemm,
                    split,
                },
                reason,
            )
            .map(|k| with_parted_prologue(k.with_tasks(split.tasks()), true, &g))
        }
        ConvPath::Im2col if implicit_gemm_fits(&g, &gemm, options) && !aliased_planes(&g) => {
            let tasks = implicit_split(&g, options).tasks;
            plan(
                ConvStrategy::ImplicitGemm {
                    gemm,
                    phases: PhasePlanes::of(&g).is_some(),
                    rows_in_place: writes_rows_in_place(&g, options),
                },
                "x86 GEMM kernels and output rows wide enough to read the input in place",
            )
            .map(|k| with_parted_prologue(k.with_tasks(tasks), implicit_has_prologue(&g), &g))
        }
        ConvPath::Im2col => {
            let tasks = im2col_split(&g).tasks;
            let reason = match aliased_planes(&g) {
                true => "1x1 on planes a multiple of 4 KB apart: read in place, a panel's K rows share one L1 set",
                false => "the general path",
            };
            plan(ConvStrategy::Im2col(gemm), reason)
                .map(|k| with_parted_prologue(k.with_tasks(tasks), g.has_padding(), &g))
        }
        ConvPath::Scalar => plan(ConvStrategy::Scalar, "no vector kernel for this dtype"),
    }
}

/// The plan split into tasks, with a prologue when `prologue` and the node is split.
pub(crate) fn with_prologue(mut k: NodeKernel, prologue: bool) -> NodeKernel {
    k.prologue = prologue && k.tasks > 1;
    k
}

/// The plan with a prologue split by input channels (see [`prologue_split`]).
pub(crate) fn with_parted_prologue(k: NodeKernel, prologue: bool, g: &ConvGeometry) -> NodeKernel {
    let mut k = with_prologue(k, prologue);
    if k.prologue {
        k.prologue_parts = prologue_split(g).tasks;
    }
    k
}

/// Float copies of a prologue worth one unit of [`Split`] work: a copy moves a float
/// in and out of memory, several multiply-adds' time.
pub(crate) const PROLOGUE_COPY_COST: usize = 8;

/// How a split conv's prologue (the padded copy, phase planes) is split into parts by
/// input channels, which the pool runs before the tasks (see
/// [`NodeKernel::prologue_parts`]): run by the launching thread alone, ResNet-18's
/// 56×56 Winograd convs left the other idle for a third of each conv.
pub(crate) fn prologue_split(g: &ConvGeometry) -> Split {
    let plane: usize = g.padded().iter().product();
    Split::of(g.cg, g.cg * plane * PROLOGUE_COPY_COST)
}

/// Arena scratch a convolution needs: the padded input and im2col panels, or the
/// padded plane of a depthwise conv. The most any strategy of its path needs, so the
/// memory plan does not depend on the CPU.
pub(crate) fn scratch_bytes(g: &ConvGeometry, path: ConvPath, options: &KernelOptions) -> usize {
    match path {
        // Weights that are not constant fall back from Winograd to im2col.
        ConvPath::Im2col => Im2colLayout::new(g)
            .bytes()
            .max(winograd::scratch_bytes(g, options).unwrap_or(0))
            .max(narrow::scratch_bytes(g).unwrap_or(0)),
        ConvPath::Depthwise => depthwise::scratch_bytes(g),
        ConvPath::Pointwise => narrow::scratch_bytes(g).unwrap_or(0),
        ConvPath::Scalar => 0,
    }
}
