//! Nodes on image planes whose size only the run knows (see [`crate::dims::planes`]):
//! every operand dense at its actual extents, each extent computed from the dim's count
//! by its [`ExtentExpr`].
//!
//! * Conv, per group, a block of output positions at a time: the positions' input
//!   patches gathered into `Aᵀ[K][B]` (zeros where a patch leaves the plane), the GEMM
//!   `Yᵀ[B, M] = A · Wᵀ` on the weights packed at compile time (bias and, without a
//!   residual, the activation in its epilogue; the last block's rows counted at run
//!   time), then `Yᵀ` copied transposed into the output planes (adding the residual and
//!   applying the activation after it).
//! * Max and average pools, windowed or global: direct loops, windows clipped to the
//!   plane.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, InstBuilder, Value};
use cranelift_frontend::FunctionBuilder;

use super::gemm::{self, ALayout, Addend, GemmKernel, GemmSpec, Geometry};
use super::{LowerCtx, LowerResult};
use crate::codegen::kernel::{self, flags};
use crate::codegen::kernel_plan::{NodeKernel, Strategy};
use crate::codegen::options::KernelOptions;
use crate::codegen::Target;
use crate::ir::{ExtentExpr, Graph, Node, Tensor};
use crate::ops::{Activation, ConvAttrs, Op, PoolAttrs, PoolKind};

const F32: usize = 4;
/// Bytes of gathered patches per block: about half of L2, with `Yᵀ` beside them.
const PATCH_BLOCK_BYTES: usize = 192 << 10;

/// How a node on run-time planes runs.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanesPlan {
    /// Per spatial axis of input 0 and of output 0: its extent, `None` when fixed.
    pub input: Vec<Option<ExtentExpr>>,
    pub output: Vec<Option<ExtentExpr>>,
    /// A conv's GEMM and positions per block.
    pub gemm: Option<(Geometry, usize)>,
}

/// The spatial extents of value `v` (axes 2..) as expressions, `None` where fixed.
fn spatial(graph: &Graph, v: crate::ir::ValueId) -> Vec<Option<ExtentExpr>> {
    let rank = graph.ty(v).rank();
    let e = graph.value(v).run_extent.as_ref();
    (2..rank)
        .map(|a| {
            let e = e?;
            let i = e.axes.iter().position(|&x| x == a)?;
            e.sizes.get(i).cloned()
        })
        .collect()
}

/// The plan of a node reading planes, or `None` when it reads none.
pub fn plan_planes(
    graph: &Graph,
    node: &Node,
    target: &Target,
    options: &KernelOptions,
) -> Option<NodeKernel> {
    let x = node.inputs.first().copied().flatten()?;
    if !graph.value(x).run_extent.as_ref()?.is_planes() {
        return None;
    }
    let y = *node.outputs.first()?;
    let mut plan = PlanesPlan {
        input: spatial(graph, x),
        output: spatial(graph, y),
        gemm: None,
    };
    let mut scratch = 0;
    let reason = match &node.op {
        Op::Conv(c) => {
            let (xt, yt) = (graph.ty(x), graph.ty(y));
            let k = xt.shape[1] / c.group.max(1) * c.kernel.iter().product::<usize>();
            let m = yt.shape[1] / c.group.max(1);
            let geom = Geometry::for_target(target, options);
            let positions: usize = yt.shape[2..].iter().product();
            let block = (PATCH_BLOCK_BYTES / (k * F32)).max(geom.mr) / geom.mr * geom.mr;
            let block = block.min(positions.next_multiple_of(geom.mr)).max(1);
            scratch = (k * block + block * m) * F32;
            plan.gemm = Some((geom, block));
            "blocks of output positions: patches gathered, one GEMM on packed weights, \
             transposed into the planes"
        }
        _ => "direct loops over the planes the run has",
    };
    Some(NodeKernel::new(Strategy::Planes(plan), scratch, reason))
}

/// The extents of `axes` at the dim's `count`: constants where fixed.
fn extents(
    b: &mut FunctionBuilder,
    count: Value,
    exprs: &[Option<ExtentExpr>],
    fixed: &[usize],
) -> Vec<Value> {
    exprs
        .iter()
        .zip(fixed)
        .map(|(e, &f)| match e {
            None => kernel::iconst(b, f as i64),
            Some(e) => {
                let mut x = count;
                for s in &e.steps {
                    x = b.ins().iadd_imm_s(x, s.add);
                    if s.div != 1 {
                        x = b.ins().udiv_imm_u(x, s.div as i64);
                    }
                }
                x
            }
        })
        .collect()
}

fn product(b: &mut FunctionBuilder, xs: &[Value]) -> Value {
    let one = kernel::iconst(b, 1);
    xs.iter().fold(one, |p, &x| b.ins().imul(p, x))
}

pub fn lower_planes(ctx: &mut LowerCtx, op: &Op) -> LowerResult {
    let Strategy::Planes(plan) = ctx.kernel.strategy.clone() else {
        return Err("no planes plan for this node".into());
    };
    let run = ctx
        .run_rows
        .ok_or("a node on run-time planes needs the dim's count")?;
    match op {
        Op::Conv(c) => conv(ctx, c, &plan, run.count),
        Op::Pool(p) => pool(ctx, p, &plan, run.count),
        other => Err(format!(
            "{} does not run on run-time planes (the import should have refused it)",
            other.name()
        )),
    }
}

fn conv(ctx: &mut LowerCtx, c: &ConvAttrs, plan: &PlanesPlan, count: Value) -> LowerResult {
    let (geom, block) = plan.gemm.ok_or("a conv on planes has a GEMM plan")?;
    let x = ctx.input(0)?;
    let w = ctx.input(1)?;
    let bias = ctx.inputs.get(2).cloned().flatten();
    let residual = ctx.inputs.get(3).cloned().flatten();
    let y = ctx.output(0);
    let Some(Tensor::F32(weights)) = &w.constant else {
        return Err("a conv on run-time planes needs constant float32 weights".into());
    };
    let sp = c.kernel.len();
    if x.ty.rank() != sp + 2 || sp == 0 || sp > 3 {
        return Err("a conv on run-time planes is 1-, 2- or 3-D".into());
    }
    let (batch, channels, maps, group) = (x.ty.shape[0], x.ty.shape[1], y.ty.shape[1], c.group);
    let (cg, mg) = (channels / group, maps / group);
    let taps: usize = c.kernel.iter().product();
    let k = cg * taps;
    let weights: Vec<f32> = weights.iter().copied().collect();
    // Each group's Wᵀ[K, Mg] packed, the groups one after another.
    let mut packed = vec![];
    let mut b_layout = None;
    let mut group_floats = 0;
    for gi in 0..group {
        let (p, l) =
            gemm::pack_weights_b(&geom, k, mg, true, |kk, j| weights[(gi * mg + j) * k + kk]);
        group_floats = p.len();
        packed.extend(p);
        b_layout = Some(l);
    }
    let w_ptr = ctx.weights_f32(&packed)?;
    let spec = |rows_at_run_time: bool| GemmSpec {
        m: block,
        n: mg,
        k,
        a: ALayout::Strided {
            row_stride: 1,
            col_stride: block,
        },
        b: b_layout.expect("at least one group"),
        ldc: mg,
        c_col_stride: 1,
        alpha: 1.0,
        addends: bias
            .iter()
            .map(|_| Addend {
                row_stride: 0,
                col_stride: 1,
                scale: 1.0,
            })
            .collect(),
        activation: if residual.is_some() {
            Activation::None
        } else {
            c.activation
        },
        geometry: geom,
        b_taps: vec![],
        rows_at_run_time,
    };
    let full = GemmKernel::define(ctx, &spec(false))?;
    let tail = GemmKernel::define(ctx, &spec(true))?;
    let scratch = ctx.scratch.ok_or("a conv on planes needs scratch")?;
    let act = c.activation;
    let b = &mut *ctx.b;
    let patches = scratch;
    let yt = b.ins().iadd_imm_s(scratch, (k * block * F32) as i64);
    let in_ext = extents(b, count, &plan.input, &x.ty.shape[2..]);
    let out_ext = extents(b, count, &plan.output, &y.ty.shape[2..]);
    let in_plane = product(b, &in_ext);
    let positions = product(b, &out_ext);
    let in_image = b.ins().imul_imm_s(in_plane, (channels * F32) as i64);
    let out_plane_bytes = b.ins().imul_imm_s(positions, F32 as i64);
    let out_image = b.ins().imul_imm_s(out_plane_bytes, maps as i64);
    let geometry = Window {
        kernel: c.kernel.clone(),
        strides: c.strides.clone(),
        dilations: c.dilations.clone(),
        pads: c.pads[..sp].to_vec(),
        pads_end: c.pads[sp..].to_vec(),
    };
    let mut failure = None;
    kernel::counted_loop(b, 0, batch as i64, 1, |b, n| {
        let off = b.ins().imul(n, in_image);
        let x_n = b.ins().iadd(x.ptr, off);
        let off = b.ins().imul(n, out_image);
        let y_n = b.ins().iadd(y.ptr, off);
        let r_n = residual.as_ref().map(|r| b.ins().iadd(r.ptr, off));
        kernel::counted_loop(b, 0, group as i64, 1, |b, gi| {
            let group_in = b.ins().imul_imm_s(in_plane, (cg * F32) as i64);
            let group_in = b.ins().imul(gi, group_in);
            let x_g = b.ins().iadd(x_n, group_in);
            let group_out = b.ins().imul_imm_s(out_plane_bytes, mg as i64);
            let group_out = b.ins().imul(gi, group_out);
            let y_g = b.ins().iadd(y_n, group_out);
            let r_g = r_n.map(|r| b.ins().iadd(r, group_out));
            let w_g = kernel::elem_addr(b, w_ptr, gi, group_floats * F32);
            let bias_g = bias
                .as_ref()
                .map(|t| kernel::elem_addr(b, t.ptr, gi, mg * F32));
            let blocks = b.ins().udiv_imm_u(positions, block as i64);
            let mut run_block = |b: &mut FunctionBuilder, p0: Value, rows: Option<Value>| {
                let r = rows.unwrap_or_else(|| kernel::iconst(b, block as i64));
                gather_patches(
                    b,
                    &geometry,
                    (x_g, cg, &in_ext),
                    (&out_ext, p0, r),
                    patches,
                    block,
                );
                let addends: Vec<Value> = bias_g.iter().copied().collect();
                match rows {
                    None => full.call(b, patches, w_g, yt, &addends),
                    Some(_) => tail.call_rows(b, patches, w_g, yt, &addends, rows),
                }
                if let Err(e) = transpose_out(b, yt, (y_g, r_g), (positions, p0, r), mg, act) {
                    failure = Some(e);
                }
            };
            kernel::dynamic_loop(b, blocks, |b, blk| {
                let p0 = b.ins().imul_imm_s(blk, block as i64);
                run_block(b, p0, None);
            });
            let p0 = b.ins().imul_imm_s(blocks, block as i64);
            let rest = b.ins().isub(positions, p0);
            let any = b.ins().icmp_imm_s(IntCC::SignedGreaterThan, rest, 0);
            kernel::if_else(b, any, |b| run_block(b, p0, Some(rest)), |_| {});
        });
    });
    failure.map_or(Ok(()), Err)
}

/// A sliding window's shape; `pads` are those before each axis, `pads_end` after.
struct Window {
    kernel: Vec<usize>,
    strides: Vec<usize>,
    dilations: Vec<usize>,
    pads: Vec<usize>,
    pads_end: Vec<usize>,
}

/// Output position `p` (flat) as one coordinate per axis of `ext`.
fn unflatten(b: &mut FunctionBuilder, p: Value, ext: &[Value]) -> Vec<Value> {
    let mut coords = vec![p; ext.len()];
    let mut rest = p;
    for a in (0..ext.len()).rev() {
        if a == 0 {
            coords[0] = rest;
        } else {
            coords[a] = b.ins().urem(rest, ext[a]);
            rest = b.ins().udiv(rest, ext[a]);
        }
    }
    coords
}

/// `Aᵀ[kk][i]` for `rows` positions from `p0`: channel `c` at tap `t` of position
/// `p0 + i`'s window, 0 outside the plane; rows `block` floats apart.
fn gather_patches(
    b: &mut FunctionBuilder,
    win: &Window,
    (x, channels, in_ext): (Value, usize, &[Value]),
    (out_ext, p0, rows): (&[Value], Value, Value),
    patches: Value,
    block: usize,
) {
    let sp = win.kernel.len();
    let taps: usize = win.kernel.iter().product();
    let zero = b.ins().f32const(0.0);
    let in_plane = product(b, in_ext);
    kernel::dynamic_loop(b, rows, |b, i| {
        let p = b.ins().iadd(p0, i);
        let coords = unflatten(b, p, out_ext);
        // Each axis's first input coordinate of the window (may be negative).
        let starts: Vec<Value> = (0..sp)
            .map(|a| {
                let s = b.ins().imul_imm_s(coords[a], win.strides[a] as i64);
                b.ins().iadd_imm_s(s, -(win.pads[a] as i64))
            })
            .collect();
        let column = kernel::elem_addr(b, patches, i, F32);
        for t in 0..taps {
            // The tap's offset along each axis.
            let mut rest = t;
            let mut offs = vec![0; sp];
            for a in (0..sp).rev() {
                offs[a] = (rest % win.kernel[a]) * win.dilations[a];
                rest /= win.kernel[a];
            }
            let mut inside = None;
            let mut flat = kernel::iconst(b, 0);
            for a in 0..sp {
                let at = b.ins().iadd_imm_s(starts[a], offs[a] as i64);
                let ok = b.ins().icmp(IntCC::UnsignedLessThan, at, in_ext[a]);
                inside = Some(match inside {
                    None => ok,
                    Some(prev) => b.ins().band(prev, ok),
                });
                let f = b.ins().imul(flat, in_ext[a]);
                flat = b.ins().iadd(f, at);
            }
            let inside = inside.expect("at least one axis");
            // Outside the plane, read its first element instead (then zeroed).
            let zero_i = kernel::iconst(b, 0);
            let flat = b.ins().select(inside, flat, zero_i);
            kernel::counted_loop(b, 0, channels as i64, 1, |b, ch| {
                let plane = b.ins().imul(ch, in_plane);
                let idx = b.ins().iadd(plane, flat);
                let src = kernel::elem_addr(b, x, idx, F32);
                let v = b.ins().load(types::F32, flags(), src, 0);
                let v = b.ins().select(inside, v, zero);
                let row = b.ins().imul_imm_s(ch, taps as i64);
                let row = b.ins().iadd_imm_s(row, t as i64);
                let dst = kernel::elem_addr(b, column, row, block * F32);
                b.ins().store(flags(), v, dst, 0);
            });
        }
    });
}

/// `Y[j][p0 + i] = Yᵀ[i][j]` (+ `R[j][p0 + i]`, then the activation, when there is a
/// residual) for the `rows` positions of a block and `maps` maps; planes `positions`
/// floats long.
fn transpose_out(
    b: &mut FunctionBuilder,
    yt: Value,
    (y, r): (Value, Option<Value>),
    (positions, p0, rows): (Value, Value, Value),
    maps: usize,
    act: Activation,
) -> LowerResult {
    let mut failure = None;
    kernel::counted_loop(b, 0, maps as i64, 1, |b, j| {
        let src = kernel::elem_addr(b, yt, j, F32);
        let plane = b.ins().imul(j, positions);
        let first = b.ins().iadd(plane, p0);
        let dst = kernel::elem_addr(b, y, first, F32);
        let res = r.map(|r| kernel::elem_addr(b, r, first, F32));
        kernel::dynamic_loop(b, rows, |b, i| {
            let s = kernel::elem_addr(b, src, i, maps * F32);
            let mut v = b.ins().load(types::F32, flags(), s, 0);
            if let Some(res) = res {
                let at = kernel::elem_addr(b, res, i, F32);
                let rv = b.ins().load(types::F32, flags(), at, 0);
                v = b.ins().fadd(v, rv);
                match super::elementwise::activation(b, act, v) {
                    Ok(a) => v = a,
                    Err(e) => failure = Some(e),
                }
            }
            let d = kernel::elem_addr(b, dst, i, F32);
            b.ins().store(flags(), v, d, 0);
        });
    });
    failure.map_or(Ok(()), Err)
}

fn pool(ctx: &mut LowerCtx, p: &PoolAttrs, plan: &PlanesPlan, count: Value) -> LowerResult {
    let x = ctx.input(0)?;
    let y = ctx.output(0);
    let sp = p.kernel.len();
    if x.ty.rank() != sp + 2 || x.ty.dtype != crate::ir::DType::F32 {
        return Err("a pool on run-time planes reads float32 N×C×spatial".into());
    }
    let (average, include_pad) = match p.kind {
        PoolKind::Max => (false, false),
        PoolKind::Average { count_include_pad } => (true, count_include_pad),
        PoolKind::Lp { .. } => return Err("LpPool does not run on run-time planes".into()),
    };
    let planes = x.ty.shape[0] * x.ty.shape[1];
    let b = &mut *ctx.b;
    let in_ext = extents(b, count, &plan.input, &x.ty.shape[2..]);
    let in_plane = product(b, &in_ext);
    let global = plan.output.iter().all(Option::is_none) && y.ty.shape[2..].iter().all(|&d| d == 1);
    if global {
        // The whole plane: one sum or maximum per channel.
        kernel::counted_loop(b, 0, planes as i64, 1, |b, c| {
            let base = b.ins().imul(c, in_plane);
            let src = kernel::elem_addr(b, x.ptr, base, F32);
            let init = if average { 0.0 } else { f32::NEG_INFINITY };
            let acc = accumulate(b, src, in_plane, average, init);
            let v = if average {
                let n = b.ins().fcvt_from_uint(types::F32, in_plane);
                b.ins().fdiv(acc, n)
            } else {
                acc
            };
            let dst = kernel::elem_addr(b, y.ptr, c, F32);
            b.ins().store(flags(), v, dst, 0);
        });
        return Ok(());
    }
    let out_ext = extents(b, count, &plan.output, &y.ty.shape[2..]);
    let positions = product(b, &out_ext);
    let win = Window {
        kernel: p.kernel.clone(),
        strides: p.strides.clone(),
        dilations: p.dilations.clone(),
        pads: p.pads[..sp].to_vec(),
        pads_end: p.pads[sp..].to_vec(),
    };
    let taps: usize = p.kernel.iter().product();
    kernel::counted_loop(b, 0, planes as i64, 1, |b, c| {
        let base = b.ins().imul(c, in_plane);
        let src = kernel::elem_addr(b, x.ptr, base, F32);
        let out_base = b.ins().imul(c, positions);
        let dst = kernel::elem_addr(b, y.ptr, out_base, F32);
        kernel::dynamic_loop(b, positions, |b, pos| {
            let coords = unflatten(b, pos, &out_ext);
            let init = if average { 0.0 } else { f32::NEG_INFINITY };
            let mut acc = b.ins().f32const(init);
            let mut inside_count = kernel::iconst(b, 0);
            for t in 0..taps {
                let mut rest = t;
                let mut offs = vec![0; sp];
                for a in (0..sp).rev() {
                    offs[a] = (rest % win.kernel[a]) * win.dilations[a];
                    rest /= win.kernel[a];
                }
                let mut inside = None;
                let mut flat = kernel::iconst(b, 0);
                for a in 0..sp {
                    let s = b.ins().imul_imm_s(coords[a], win.strides[a] as i64);
                    let at = b.ins().iadd_imm_s(s, offs[a] as i64 - win.pads[a] as i64);
                    let ok = b.ins().icmp(IntCC::UnsignedLessThan, at, in_ext[a]);
                    inside = Some(match inside {
                        None => ok,
                        Some(prev) => b.ins().band(prev, ok),
                    });
                    let f = b.ins().imul(flat, in_ext[a]);
                    flat = b.ins().iadd(f, at);
                }
                let inside = inside.expect("at least one axis");
                let zero_i = kernel::iconst(b, 0);
                let flat = b.ins().select(inside, flat, zero_i);
                let at = kernel::elem_addr(b, src, flat, F32);
                let v = b.ins().load(types::F32, flags(), at, 0);
                acc = if average {
                    let z = b.ins().f32const(0.0);
                    let v = b.ins().select(inside, v, z);
                    b.ins().fadd(acc, v)
                } else {
                    let m = b.ins().fmax(acc, v);
                    b.ins().select(inside, m, acc)
                };
                let one = b.ins().uextend(types::I64, inside);
                inside_count = b.ins().iadd(inside_count, one);
            }
            let v = if !average {
                acc
            } else {
                let n = if include_pad {
                    // Pads count, the window past the padded plane does not.
                    padded_window_count(b, &win, &coords, &in_ext)
                } else {
                    inside_count
                };
                let n = b.ins().fcvt_from_uint(types::F32, n);
                b.ins().fdiv(acc, n)
            };
            let d = kernel::elem_addr(b, dst, pos, F32);
            b.ins().store(flags(), v, d, 0);
        });
    });
    Ok(())
}

/// Taps of the window at `coords` inside the padded plane (count_include_pad): per
/// axis, those within `[-pad_begin, extent + pad_end)`.
fn padded_window_count(
    b: &mut FunctionBuilder,
    win: &Window,
    coords: &[Value],
    in_ext: &[Value],
) -> Value {
    let mut total = kernel::iconst(b, 1);
    for a in 0..win.kernel.len() {
        let mut n = kernel::iconst(b, 0);
        for t in 0..win.kernel[a] {
            let s = b.ins().imul_imm_s(coords[a], win.strides[a] as i64);
            // Shifted by the pad so the padded plane starts at 0.
            let at = b.ins().iadd_imm_s(s, (t * win.dilations[a]) as i64);
            let end = b
                .ins()
                .iadd_imm_s(in_ext[a], (win.pads[a] + win.pads_end[a]) as i64);
            let ok = b.ins().icmp(IntCC::SignedLessThan, at, end);
            let one = b.ins().uextend(types::I64, ok);
            n = b.ins().iadd(n, one);
        }
        total = b.ins().imul(total, n);
    }
    total
}

/// The sum (`sum`) or maximum of `n` floats at `src`, from `init`.
fn accumulate(b: &mut FunctionBuilder, src: Value, n: Value, sum: bool, init: f32) -> Value {
    let acc_var = b.declare_var(types::F32);
    let init = b.ins().f32const(init);
    b.def_var(acc_var, init);
    kernel::dynamic_loop(b, n, |b, i| {
        let at = kernel::elem_addr(b, src, i, F32);
        let v = b.ins().load(types::F32, flags(), at, 0);
        let acc = b.use_var(acc_var);
        let next = if sum {
            b.ins().fadd(acc, v)
        } else {
            let gt = b.ins().fcmp(FloatCC::GreaterThan, v, acc);
            b.ins().select(gt, v, acc)
        };
        b.def_var(acc_var, next);
    });
    b.use_var(acc_var)
}
