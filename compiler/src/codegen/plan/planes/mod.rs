//! The plan of a node on image planes whose extents only the run knows (symbolic
//! shapes): a conv's blocks of output positions or its Winograd chunks, a depthwise
//! conv's or max pool's machine-code rows, the bordered plane copies, sized at the
//! largest extents in range (see `lower::planes` for the code).

pub(crate) mod winograd;

pub use winograd::WinogradPlan;

use super::{NodeKernel, Strategy};
use crate::codegen::isa::Isa;
use crate::codegen::isa::Vector;
use crate::codegen::kernels::gemm::{
    ALayout, Addend, BLayout, GemmSpec, Geometry, KernelKind, RunTimeStrides,
};
use crate::codegen::kernels::x86::dwconv_rows;
use crate::codegen::kernels::x86::maxpool_plane::{self, MaxPoolPlaneSpec};
use crate::codegen::kernels::x86::patch_rows::{self, PatchRowsSpec};
use crate::codegen::kernels::x86::plane_phases::{self, PhasesSpec};
use crate::codegen::options::{KernelOptions, KernelSource, WinogradChoice};
use crate::ir::{ExtentExpr, Graph, Node};
use crate::ops::{Activation, ConvAttrs, Op, PoolAttrs, PoolKind};

const F32: usize = 4;

/// Bytes of gathered patches per block: about half of L2, with their packed copy and
/// the output block beside them.
pub(crate) const PATCH_BLOCK_BYTES: usize = 512 << 10;

/// Bytes of patches per block at most when the weights are larger than the patches:
/// every block's GEMM streams all the weights, so ResNet's 3×3×512 convs (9.4 MB of
/// weights, 49 positions at 224×224) ran as blocks of 48 and 1 positions, reading the
/// weights twice.
pub(crate) const LARGE_WEIGHTS_PATCH_BYTES: usize = 4 << 20;

/// Multiply-adds per output position from which a conv's last block is rounded up to
/// whole vectors rather than whole panels (see `conv`).
pub(crate) const VECTOR_WIDTHS_MIN_MACS: usize = 1 << 18;

/// Columns per conv block at most, in panels: more only widens the last block.
pub(crate) const MAX_BLOCK_PANELS: usize = 8;

/// How a node on run-time planes runs.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanesPlan {
    /// Per spatial axis of input 0 and of output 0: its extent, `None` when fixed.
    pub input: Vec<Option<ExtentExpr>>,
    pub output: Vec<Option<ExtentExpr>>,
    /// Per axis of the input carrying planes (all of them, for the movement ops).
    pub extents: Vec<Option<ExtentExpr>>,
    /// A conv's blocks of output positions, where it runs a GEMM per block.
    pub gemm: Option<ConvBlocks>,
    /// A 3×3 conv's Winograd plan, where it takes that path.
    pub winograd: Option<WinogradPlan>,
    /// A depthwise conv's machine-code row kernel, where one applies.
    pub depthwise_rows: Option<Box<dwconv_rows::DwRowsSpec>>,
    /// The machine-code copy of each input plane into its bordered copy (a max pool's,
    /// a conv's gathered from padded planes), where one applies; else `lower::planes::pad_plane`.
    pub phase_copy: Option<Box<PhasesSpec>>,
    /// A 2-D max pool's machine-code kernel, where one applies, and its row buffer's
    /// floats.
    pub max_pool: Option<Box<(MaxPoolPlaneSpec, usize)>>,
}

impl PlanesPlan {
    /// The micro-kernels the node calls, by their kernel-library names.
    pub fn kernels(&self) -> Vec<String> {
        use crate::codegen::plan::gemm_kernel_name;
        let mut names: Vec<String> = (self.gemm.iter().map(|g| &g.geometry))
            .chain(self.winograd.iter().map(|w| &w.geometry))
            .map(gemm_kernel_name)
            .collect();
        if let Some(w) = &self.winograd {
            let isas: &[Vector] = match w.transforms {
                Some(Vector::Zmm) => &[Vector::Ymm, Vector::Zmm],
                Some(Vector::Ymm) => &[Vector::Ymm],
                None => &[],
            };
            for isa in isas {
                for part in ["input", "output"] {
                    names.push(format!("f32-winograd-f{}-{part}-{}", w.m, isa.suffix()));
                }
            }
        }
        let patch_rows = self.gemm.iter().filter_map(|g| g.patch_rows.as_ref());
        let named = [
            self.depthwise_rows.as_ref().map(|d| ("dwconv-rows", d.isa)),
            self.phase_copy.as_ref().map(|p| ("plane-phases", p.isa)),
            self.max_pool.as_ref().map(|p| ("maxpool-plane", p.0.isa)),
        ];
        for (kind, isa) in
            (named.into_iter().flatten()).chain(patch_rows.map(|p| ("patch-rows", p.isa)))
        {
            names.push(format!("f32-{kind}-{}", isa.suffix()));
        }
        names
    }
}

/// How a conv on planes runs by blocks of output positions.
#[derive(Clone, Debug, PartialEq)]
pub struct ConvBlocks {
    pub geometry: Geometry,
    /// Output positions per block.
    pub block: usize,
    /// The GEMM's widths, ascending, the last the block: the last block's columns round
    /// up to the narrowest holding them.
    pub widths: Vec<usize>,
    /// Bytes of one channel copied with its border (see `gathers_from_padded`), 0
    /// when the patches are gathered from the planes themselves.
    pub padded_channel_bytes: usize,
    /// A pointwise conv whose GEMM reads the input planes and writes the output planes
    /// in place, the planes' size its column count and row stride (see
    /// `pointwise_in_place`): no blocks, no scratch.
    pub in_place: bool,
    /// Many maps over few positions: each block's GEMM transposed, `Cᵀ[B, Mg] = Pᵀ ·
    /// Wᵀ`, the block's positions the rows (counted at run time), the maps the columns
    /// (see `transposes`).
    pub transposed: bool,
    /// Each block's GEMM writes the output planes itself (C's row stride, the plane
    /// size, at run time; the residual and the activation in its epilogue), no copy.
    pub writes_planes: bool,
    /// The machine-code gather of the patches from the padded copies, where one
    /// applies.
    pub patch_rows: Option<Box<PatchRowsSpec>>,
}

/// Output positions at most (at the largest extents) ...
pub(crate) const TRANSPOSED_MAX_POSITIONS: usize = 128;

/// ... and maps at least for which a conv's blocks run transposed: the kernels
/// vectorize along the GEMM's columns, and ResNet's 3×3×512 convs on 7×7 planes (49
/// positions) ran as a 48-column panel and a 16-lane one holding one column, 1.5×
/// the static library's transposed GEMM (`conv::narrow`, whose rule this follows).
pub(crate) const TRANSPOSED_MIN_MAPS: usize = 128;

/// Whether a conv's blocks run transposed: few positions, many maps, the x86 kernel
/// with the activation in its epilogue (rows counted at run time have no other).
pub(crate) fn transposes(c: &ConvAttrs, mg: usize, positions: usize, geometry: &Geometry) -> bool {
    mg >= TRANSPOSED_MIN_MAPS
        && positions <= TRANSPOSED_MAX_POSITIONS
        && matches!(geometry.kernel, KernelKind::X86(_))
        && crate::codegen::kernels::x86::supports_activation_with(c.activation, 3)
}

impl ConvBlocks {
    pub(crate) fn new(
        c: &ConvAttrs,
        x: &crate::ir::TensorType,
        (k, m, positions): (usize, usize, usize),
        geometry: Geometry,
    ) -> ConvBlocks {
        let nr = geometry.nr;
        // Columns per block: whole panels, the patches about PATCH_BLOCK_BYTES, or up to
        // as many bytes as the weights have.
        let weights = m * k * F32;
        let patch_bytes = PATCH_BLOCK_BYTES.max(weights.min(LARGE_WEIGHTS_PATCH_BYTES));
        let block = ((patch_bytes / (k * F32)).max(nr) / nr * nr)
            .min(MAX_BLOCK_PANELS * nr)
            .min(positions.next_multiple_of(nr))
            .max(1);
        // Small images do not pay for a whole block: whole panels doubling up to the
        // block and, where a column costs many multiply-adds, every multiple of the
        // vector up to two panels (ResNet's 7×7 planes are 49 positions: 48 + 16, not
        // 96), or up to the block when the weights outweigh a block of patches (a
        // CRNN's 3×3×512 convs over 4×25 planes: 100 positions ran as 192 columns,
        // and a second call would stream the 9 MB of weights again). Each width is a
        // kernel in the library: MobileNetV2's 1×1 convs with them all grew it by 6%.
        let by_vectors = m * k >= VECTOR_WIDTHS_MIN_MACS;
        let heavy = weights > PATCH_BLOCK_BYTES;
        let mut widths = vec![];
        let mut width = if by_vectors { geometry.lanes } else { nr }.min(block);
        // The x86 kernel takes the last block's width at run time.
        if matches!(geometry.kernel, KernelKind::X86(_)) {
            width = block;
        }
        while width < block {
            widths.push(width);
            width = match by_vectors && (width < 2 * nr || heavy) {
                true => width + geometry.lanes,
                false => width * 2,
            };
        }
        widths.push(block);
        let padded_channel_bytes = match gathers_from_padded(c) && x.rank() == 4 {
            true => padded_plane_bytes(&x.shape[2..], &c.pads, c.strides[1]).next_multiple_of(64),
            false => 0,
        };
        ConvBlocks {
            in_place: false,
            writes_planes: false,
            patch_rows: None,
            transposed: transposes(c, m, positions, &geometry),
            geometry,
            block,
            widths,
            padded_channel_bytes,
        }
    }
}

/// The positions (the product of the spatial axes) of planes `v` at the smallest value
/// of the dim their extents follow; `None` for a value that is not planes.
pub(crate) fn positions_at_least(graph: &Graph, v: crate::ir::ValueId) -> Option<usize> {
    if let Some(dims) = &graph.ty(v).dims {
        return (dims.get(2..)?.iter()).try_fold(1usize, |p, d| {
            Some(p * usize::try_from(graph.symbols.min_value(d)?).ok()?)
        });
    }
    None
}

/// The positions (the product of the spatial axes) of a symbolic value `v` with each
/// symbol at the geometric middle of its range; `None` for a value of fixed shape.
pub(crate) fn positions_typical(graph: &Graph, v: crate::ir::ValueId) -> Option<usize> {
    let dims = graph.ty(v).dims.as_ref()?;
    let typical: Vec<i64> = (graph.symbols.iter())
        .map(|(_, s)| (((s.min as f64) * (s.max as f64)).sqrt().round() as i64).clamp(s.min, s.max))
        .collect();
    (dims.get(2..)?.iter()).try_fold(1usize, |p, d| {
        Some(p * usize::try_from(d.eval_at(&typical)?).ok()?)
    })
}

/// The spatial extents of value `v` (axes 2..) as expressions, `None` where fixed.
pub(crate) fn spatial(graph: &Graph, v: crate::ir::ValueId) -> Vec<Option<ExtentExpr>> {
    every_axis(graph, v).split_off(2.min(graph.ty(v).rank()))
}

/// The extents of every axis of value `v` as expressions, `None` where fixed.
pub(crate) fn every_axis(graph: &Graph, v: crate::ir::ValueId) -> Vec<Option<ExtentExpr>> {
    let rank = graph.ty(v).rank();
    // Symbolic shapes: a marker where the axis varies; its extent is the dimension
    // expression (see `PlaneSource`).
    if let Some(dims) = &graph.ty(v).dims {
        return dims
            .iter()
            .map(|d| (!d.is_const()).then(ExtentExpr::dim))
            .collect();
    }
    vec![None; rank]
}

/// The plan of a node reading planes, or `None` when it reads none.
pub fn plan_planes(
    graph: &Graph,
    node: &Node,
    isa: &Isa,
    options: &KernelOptions,
) -> Option<NodeKernel> {
    let symbolic = |v: &crate::ir::ValueId| {
        let ty = graph.ty(*v);
        matches!(node.op, Op::Conv(_) | Op::Pool(_)) && ty.rank() >= 3 && ty.dims.is_some()
    };
    let x = *node.inputs.iter().flatten().find(|v| symbolic(v))?;
    let y = *node.outputs.first()?;
    let mut plan = PlanesPlan {
        input: spatial(graph, x),
        output: spatial(graph, y),
        extents: every_axis(graph, x),
        gemm: None,
        winograd: None,
        depthwise_rows: None,
        phase_copy: None,
        max_pool: None,
    };
    let mut scratch = 0;
    let reason = match &node.op {
        Op::Conv(c) if !depthwise(c, graph.ty(x), graph.ty(y)) => {
            let (xt, yt) = (graph.ty(x), graph.ty(y));
            let wt = graph.ty(*node.inputs.get(1)?.as_ref()?);
            let geom = Geometry::for_isa(isa, options);
            let k = xt.shape[1] / c.group.max(1) * c.kernel.iter().product::<usize>();
            let m = yt.shape[1] / c.group.max(1);
            // At the smallest extents in range a conv of many maps runs transposed on its
            // plain weights, as a library compiled for them stores them. Where Winograd
            // would be F(2×2) (its transformed weights 16/9 of the plain ones, for a
            // gain of about a tenth: see `winograd::algorithm`) the library keeps the
            // plain weights instead, no larger than that one (a CRNN's 256-map convs
            // over its shortest lines); F(4×4)'s gain is worth its bytes.
            let transposed_at_least = options.winograd == WinogradChoice::Auto
                && (positions_typical(graph, y).or_else(|| positions_at_least(graph, y)))
                    .is_some_and(|p| transposes(c, m, p, &geom));
            let winograd = WinogradPlan::new(c, (xt, wt, yt), (geom, isa), options)
                .filter(|wp| !(transposed_at_least && wp.m == 2));
            if let Some(wp) = winograd {
                let scratch = wp.scratch_bytes();
                plan.winograd = Some(wp);
                return Some(NodeKernel::new(
                    Strategy::Planes(plan),
                    scratch,
                    "Winograd: per chunk of tiles, the input transform, a GEMM per transform \
                     point on the transformed weights, the output transform into the planes",
                ));
            }
            // Over symbolic shapes the blocks are shaped for a typical size (each
            // symbol at the geometric middle of its range); the run computes as many
            // blocks as its planes need.
            let positions =
                positions_typical(graph, y).unwrap_or_else(|| yt.shape[2..].iter().product());
            let mut blocks = ConvBlocks::new(c, xt, (k, m, positions), geom);
            let cg = xt.shape[1] / c.group.max(1);
            let given = |i: usize| node.inputs.get(i).is_some_and(Option::is_some);
            if pointwise_in_place(c, (cg, m, positions), (given(2), given(3)), geom) {
                blocks.in_place = true;
                plan.gemm = Some(blocks);
                return Some(NodeKernel::new(
                    Strategy::Planes(plan),
                    0,
                    "pointwise: one GEMM on packed weights reading and writing the planes, \
                     their size its columns and row stride",
                ));
            }
            let given = |i: usize| node.inputs.get(i).is_some_and(Option::is_some);
            blocks.writes_planes = !blocks.transposed
                && matches!(geom.kernel, KernelKind::X86(_))
                && crate::codegen::kernels::x86::gemm::supports(&blocks_spec(
                    c,
                    (k, m, blocks.block, blocks.block),
                    (given(2), given(3)),
                    geom,
                    true,
                ));
            let out_block = !blocks.writes_planes;
            let blocks_write = blocks.writes_planes;
            scratch = ConvScratch::new(k, blocks.block, m, out_block).bytes
                + cg * blocks.padded_channel_bytes;
            if blocks.padded_channel_bytes > 0 {
                plan.phase_copy = phase_copy_spec(isa, &c.pads, c.strides[1]).map(Box::new);
                blocks.patch_rows = patch_rows_spec(c, isa, cg, &blocks).map(Box::new);
            }
            plan.gemm = Some(blocks);
            match blocks_write {
                true => {
                    "blocks of output positions: patches gathered, one GEMM on packed \
                     weights writing the planes"
                }
                false => {
                    "blocks of output positions: patches gathered, one GEMM on packed \
                     weights, rows copied into the planes"
                }
            }
        }
        Op::Conv(c) if depthwise(c, graph.ty(x), graph.ty(y)) => {
            let given = |i: usize| node.inputs.get(i).is_some_and(Option::is_some);
            plan.depthwise_rows = depthwise_rows_spec(c, isa, (given(2), given(3))).map(Box::new);
            // The row kernel's last vector reads on past the last row.
            scratch = padded_plane_bytes(&graph.ty(x).shape[2..], &c.pads, c.strides[1])
                + dwconv_rows::slack_bytes(
                    [c.kernel[0], *c.kernel.get(1).unwrap_or(&1)],
                    [c.dilations[0], *c.dilations.get(1).unwrap_or(&1)],
                );
            match plan.depthwise_rows.is_some() {
                true => {
                    "per channel: the row kernel copies the plane into a zero border \
                     (columns split by stride phase), then a group of vectors a step"
                }
                false => {
                    "per channel: the plane copied into a zero border (columns split by \
                     stride phase), then the taps' multiply-adds four outputs at a time"
                }
            }
        }
        Op::Pool(p) if p.kind == PoolKind::Max && p.kernel.len() == 2 => {
            match max_pool_spec(isa, p, options) {
                Some(spec) => {
                    let (xs, ys) = (&graph.ty(x).shape, &graph.ty(y).shape);
                    let floats = maxpool_plane::row_floats(&spec, xs[3], ys[3]);
                    scratch = floats * F32;
                    plan.max_pool = Some(Box::new((spec, floats)));
                    "per output row: the window's input rows' maxima into a row buffer, \
                     then each window's maximum along it, a vector of outputs at a time"
                }
                None => {
                    scratch =
                        padded_plane_bytes(&graph.ty(x).shape[2..], &pool_pads(p), p.strides[1]);
                    plan.phase_copy = phase_copy_spec(isa, &p.pads, p.strides[1]).map(Box::new);
                    "per channel: the plane copied into a -inf border (columns split by \
                     stride phase), then the windows' maxima four outputs at a time"
                }
            }
        }
        Op::Binary(_) => {
            "per plane: the other operand's value for that plane applied four floats at a time"
        }
        Op::Reshape { .. } => "the elements the run has, copied",
        Op::Transpose { .. } => "the output in order, each input axis's stride from the extents",
        _ => "direct loops over the planes the run has",
    };
    Some(NodeKernel::new(Strategy::Planes(plan), scratch, reason))
}

/// A conv GEMM's addends where given: the bias per row (map), then the residual per
/// column (position).
pub(crate) fn bias_and_residual(bias: bool, residual: bool) -> Vec<Addend> {
    let per_row = Addend {
        row_stride: 1,
        col_stride: 0,
        scale: 1.0,
    };
    let per_column = Addend {
        row_stride: 0,
        col_stride: 1,
        scale: 1.0,
    };
    [(bias, per_row), (residual, per_column)]
        .into_iter()
        .filter_map(|(given, a)| given.then_some(a))
        .collect()
}

/// The GEMM of a conv's block of `n` output positions: `C[Mg, n] = W · P` on the
/// weights packed as A and the patches `P[K][block]`, the bias per row.
/// With `writes_planes`, C is the output planes (their row stride at run time, the
/// residual added per column at that stride, the activation after it); else a block
/// in scratch, the activation applied here only without a residual.
pub(crate) fn blocks_spec(
    c: &ConvAttrs,
    (k, mg, n, block): (usize, usize, usize, usize),
    (bias, residual): (bool, bool),
    geometry: Geometry,
    writes_planes: bool,
) -> GemmSpec {
    let addends = bias_and_residual(bias, residual && writes_planes);
    GemmSpec {
        m: mg,
        n,
        k,
        a: ALayout::Packed,
        b: BLayout::Rows { row_stride: block },
        ldc: block,
        c_col_stride: 1,
        alpha: 1.0,
        addends,
        activation: match residual && !writes_planes {
            true => Activation::None,
            false => c.activation,
        },
        geometry,
        b_taps: vec![],
        rows_at_run_time: false,
        cols_at_run_time: writes_planes,
        run_time_strides: match writes_planes {
            true => RunTimeStrides::C,
            false => RunTimeStrides::None,
        },
    }
}

/// The GEMM of a pointwise conv in place: `Y_g = W_g · X_g` per group, `mg` maps of
/// `cg` channels on planes of at most `positions`, the run's plane size its column
/// count and the row stride of X, Y and the residual; bias, residual and activation in
/// its epilogue (addends: the bias, then the residual).
pub(crate) fn pointwise_spec(
    c: &ConvAttrs,
    (cg, mg, positions): (usize, usize, usize),
    (bias, residual): (bool, bool),
    geometry: Geometry,
) -> GemmSpec {
    let addends = bias_and_residual(bias, residual);
    GemmSpec {
        m: mg,
        n: positions,
        k: cg,
        a: ALayout::Packed,
        b: BLayout::Rows {
            row_stride: positions,
        },
        ldc: positions,
        c_col_stride: 1,
        alpha: 1.0,
        addends,
        activation: c.activation,
        geometry,
        b_taps: vec![],
        rows_at_run_time: false,
        cols_at_run_time: true,
        run_time_strides: RunTimeStrides::BAndC,
    }
}

/// Whether a conv runs as [`pointwise_spec`]'s GEMM: 1×1 taps at unit strides without
/// pads (its input planes are its patches), on the x86 kernel with the activation in
/// its epilogue. Else the blocks' gather and copy: MobileNetV2's 1×1 convs ran 1.7–2×
/// the static library's time that way.
pub(crate) fn pointwise_in_place(
    c: &ConvAttrs,
    sizes: (usize, usize, usize),
    addends: (bool, bool),
    geometry: Geometry,
) -> bool {
    c.kernel.iter().all(|&k| k == 1)
        && c.strides.iter().all(|&s| s == 1)
        && c.pads.iter().all(|&p| p == 0)
        && matches!(geometry.kernel, KernelKind::X86(_))
        && crate::codegen::kernels::x86::gemm::supports(&pointwise_spec(
            c, sizes, addends, geometry,
        ))
}

/// The machine-code row kernel of a depthwise conv on planes for `isa`, where one
/// applies: x86 with AVX2 or AVX-512, a window it unrolls, an activation it has.
pub(crate) fn depthwise_rows_spec(
    c: &ConvAttrs,
    isa: &Isa,
    (bias, residual): (bool, bool),
) -> Option<dwconv_rows::DwRowsSpec> {
    let isa = isa.vector?;
    if c.kernel.len() != 2 {
        return None;
    }
    let spec = dwconv_rows::DwRowsSpec {
        isa,
        k: [c.kernel[0], c.kernel[1]],
        stride: [c.strides[0], c.strides[1]],
        dil: [c.dilations[0], c.dilations[1]],
        pad: [c.pads[0], c.pads[1]],
        bias,
        residual,
        activation: c.activation,
    };
    dwconv_rows::supports(&spec).then_some(spec)
}

/// The machine-code plane copy for `isa`, where one applies: x86 with AVX2 or
/// AVX-512, column stride 1 or 2.
pub(crate) fn phase_copy_spec(isa: &Isa, pads: &[usize], phases: usize) -> Option<PhasesSpec> {
    let spec = PhasesSpec {
        isa: isa.vector?,
        phases,
        pad: [pads[0], pads[1]],
    };
    plane_phases::supports(&spec).then_some(spec)
}

/// The machine-code max pool over bordered planes for `isa`, where one applies:
/// x86 with AVX2 or AVX-512 (unless `--kernel pool=clif`), a window the kernel takes.
pub(crate) fn max_pool_spec(
    isa: &Isa,
    p: &PoolAttrs,
    options: &KernelOptions,
) -> Option<MaxPoolPlaneSpec> {
    if options.pool == KernelSource::Clif {
        return None;
    }
    let spec = MaxPoolPlaneSpec {
        isa: isa.vector?,
        kernel: [p.kernel[0], p.kernel[1]],
        strides: [p.strides[0], p.strides[1]],
        dilations: [p.dilations[0], p.dilations[1]],
        pads: [p.pads[0], p.pads[1]],
    };
    maxpool_plane::supports(&spec).then_some(spec)
}

/// The machine-code patch gather of a conv's blocks for `isa`, where one applies:
/// x86 with AVX2 or AVX-512, the planes copied by [`phase_copy_spec`]'s kernel.
pub(crate) fn patch_rows_spec(
    c: &ConvAttrs,
    isa: &Isa,
    cg: usize,
    blocks: &ConvBlocks,
) -> Option<PatchRowsSpec> {
    phase_copy_spec(isa, &c.pads, c.strides[1])?;
    let spec = PatchRowsSpec {
        isa: isa.vector?,
        channels: cg,
        k: [c.kernel[0], c.kernel[1]],
        stride: c.strides[1],
        dil: [c.dilations[0], c.dilations[1]],
        chan_bytes: blocks.padded_channel_bytes,
        block: blocks.block,
    };
    patch_rows::supports(&spec).then_some(spec)
}

/// A 2-D conv with one input channel and one output map per group, float32.
pub(crate) fn depthwise(
    c: &ConvAttrs,
    x: &crate::ir::TensorType,
    y: &crate::ir::TensorType,
) -> bool {
    c.kernel.len() == 2
        && x.rank() == 4
        && c.group == x.shape[1]
        && y.shape[1] == x.shape[1]
        && x.dtype == crate::ir::DType::F32
}

/// Whether a 2-D conv's patches are gathered from a copy of its input with a zero
/// border, each row split into its stride's column phases: every tap's run of a row is
/// then one contiguous copy, without bounds. Not for 1×1 convs of stride 1 without
/// pads, whose patches are the planes themselves.
pub(crate) fn gathers_from_padded(c: &ConvAttrs) -> bool {
    c.kernel.len() == 2
        && !(c.kernel == [1, 1] && c.strides == [1, 1] && c.pads.iter().all(|&p| p == 0))
}

/// Bytes of one 2-D plane of extents `planes` (the bound) with `pads` (begin...,
/// end...) around it, its rows split into `phases` column phases (see `lower::planes::pad_plane`),
/// plus a vector of slack.
pub(crate) fn padded_plane_bytes(planes: &[usize], pads: &[usize], phases: usize) -> usize {
    let rows = planes[0] + pads[0] + pads[2];
    let row = (planes[1] + pads[1] + pads[3]).div_ceil(phases) * phases;
    (rows * row + 8) * F32
}

/// Scratch offsets of a conv on planes: the patches `[K][B]`, then the GEMM's output
/// block `[Mg][B]`.
pub(crate) struct ConvScratch {
    pub(crate) out: usize,
    pub(crate) bytes: usize,
}

impl ConvScratch {
    /// Without `out_block`, the GEMM writes the planes.
    pub(crate) fn new(k: usize, block: usize, mg: usize, out_block: bool) -> ConvScratch {
        let out = (k * block * F32).next_multiple_of(64);
        ConvScratch {
            out,
            bytes: out + usize::from(out_block) * mg * block * F32,
        }
    }
}

/// A 2-D max pool's pads, the ends grown by a stride less one: a ceil-mode window may
/// reach that far past the plane, where nothing is read (-inf).
pub(crate) fn pool_pads(p: &PoolAttrs) -> Vec<usize> {
    let mut pads = p.pads.clone();
    pads[2] += p.strides[0] - 1;
    pads[3] += p.strides[1] - 1;
    pads
}
