//! The elementwise loop nest over extents the run computes: every unary, binary,
//! Where, Cast and Expand of a symbolic node. Axes every operand traverses alike merge
//! into one loop, as for static shapes; broadcasting is decided by the types (an axis
//! of 1 against a longer one), never by the run's values.

use cranelift_codegen::ir::{types, InstBuilder, Value};

use super::super::elementwise::ScalarFn;
use super::super::run_shape::{self, Ext};
use super::super::{LowerCtx, LowerResult, Operand};
use crate::codegen::kernel::{self, flags};
use crate::ir::{DType, TensorType};

/// Whether axis `d` (of `ty`'s own axes) has the constant extent 1.
fn is_unit(ty: &TensorType, d: usize) -> bool {
    match &ty.dims {
        Some(dims) => dims[d].as_const() == Some(1),
        None => ty.shape[d] == 1,
    }
}

/// The loop nest after merging: extents, and per operand its element stride on each
/// (0 where it is broadcast).
pub(in crate::codegen::lower) struct RunNest {
    pub shape: Vec<Ext>,
    pub strides: Vec<Vec<Ext>>,
}

/// Merges the output's axes (`out`) for operands of types `ins` broadcast to it.
pub(in crate::codegen::lower) fn run_nest(
    ctx: &mut LowerCtx,
    ins: &[&TensorType],
    out: &TensorType,
) -> RunNest {
    let dims = ctx
        .run_dims
        .as_ref()
        .expect("a symbolic node has the run's dims");
    let out_shape = dims.shape(ctx.b, out);
    let rank = out_shape.len();
    // Per operand and output axis: the operand's stride, None where broadcast.
    let per: Vec<Vec<Option<Ext>>> = ins
        .iter()
        .map(|ty| {
            let own = dims.shape(ctx.b, ty);
            let own_strides = run_shape::strides(ctx.b, &own);
            let lead = rank - own.len();
            (0..rank)
                .map(|d| {
                    if d < lead || (is_unit(ty, d - lead) && !out_shape[d].is_fixed(1)) {
                        None
                    } else {
                        Some(own_strides[d - lead])
                    }
                })
                .collect()
        })
        .collect();
    let mut shape: Vec<Ext> = vec![];
    let mut strides: Vec<Vec<Ext>> = vec![vec![]; ins.len()];
    let mut last: Option<usize> = None;
    for d in 0..rank {
        if out_shape[d].is_fixed(1) {
            continue;
        }
        let mergeable = last.is_some_and(|l| per.iter().all(|p| p[l].is_some() == p[d].is_some()));
        if mergeable {
            let merged = shape.last_mut().expect("an axis before");
            *merged = merged.mul(ctx.b, out_shape[d]);
            for (k, p) in per.iter().enumerate() {
                *strides[k].last_mut().expect("an axis before") = p[d].unwrap_or(Ext::Fixed(0));
            }
        } else {
            shape.push(out_shape[d]);
            for (k, p) in per.iter().enumerate() {
                strides[k].push(p[d].unwrap_or(Ext::Fixed(0)));
            }
        }
        last = Some(d);
    }
    if shape.is_empty() {
        shape.push(Ext::Fixed(1));
        for s in strides.iter_mut() {
            s.push(Ext::Fixed(0));
        }
    }
    RunNest { shape, strides }
}

/// `out[i] = f(in_0[..], in_1[..], ...)` with broadcasting at the run's extents;
/// `vector` (when given) is the same function on f32x4 lanes.
pub fn map(
    ctx: &mut LowerCtx,
    ins: &[Operand],
    out: &Operand,
    scalar: &ScalarFn,
    vector: Option<&ScalarFn>,
) -> LowerResult {
    let types: Vec<&TensorType> = ins.iter().map(|o| &o.ty).collect();
    let nest = run_nest(ctx, &types, &out.ty);
    let rank = nest.shape.len();
    let inner = nest.shape[rank - 1];
    let outer = nest.shape[..rank - 1].to_vec();
    let b = &mut *ctx.b;
    let out_strides = run_shape::strides(b, &nest.shape);
    let vectorizable = vector.is_some()
        && out.ty.dtype == DType::F32
        && ins.iter().all(|o| o.ty.dtype == DType::F32)
        && nest
            .strides
            .iter()
            .all(|s| s[rank - 1].is_fixed(0) || s[rank - 1].is_fixed(1))
        && inner.fixed().is_none_or(|n| n >= 4);
    let inner_is_one: Vec<bool> = nest
        .strides
        .iter()
        .map(|s| !s[rank - 1].is_fixed(0))
        .collect();
    // The vector part's end, `inner` rounded down to whole vectors.
    let n4 = match inner {
        Ext::Fixed(n) => Ext::Fixed(n / 4 * 4),
        Ext::Run(v) => Ext::Run(b.ins().band_imm_s(v, !3)),
    };
    let mut result: LowerResult = Ok(());
    run_shape::nested_run_loop(b, &outer, &mut |b, idx| {
        if result.is_err() {
            return;
        }
        let off = run_shape::offset(b, idx, &out_strides[..rank - 1]);
        let out_base = kernel::elem_addr(b, out.ptr, off, out.ty.dtype.size());
        let in_bases: Vec<Value> = ins
            .iter()
            .zip(&nest.strides)
            .map(|(o, s)| {
                let off = run_shape::offset(b, idx, &s[..rank - 1]);
                kernel::elem_addr(b, o.ptr, off, o.ty.dtype.size())
            })
            .collect();
        let mut start = Ext::Fixed(0);
        if vectorizable {
            let vf = vector.expect("checked");
            run_shape::run_loop_from(b, Ext::Fixed(0), n4, 4, |b, i| {
                if result.is_err() {
                    return;
                }
                let byte = b.ins().imul_imm_s(i, 4);
                let args: Vec<Value> = in_bases
                    .iter()
                    .zip(&inner_is_one)
                    .map(|(&base, &full)| {
                        if full {
                            let a = b.ins().iadd(base, byte);
                            b.ins().load(types::F32X4, flags(), a, 0)
                        } else {
                            let v = b.ins().load(types::F32, flags(), base, 0);
                            b.ins().splat(types::F32X4, v)
                        }
                    })
                    .collect();
                match vf(b, &args) {
                    Ok(v) => {
                        let a = b.ins().iadd(out_base, byte);
                        b.ins().store(flags(), v, a, 0);
                    }
                    Err(e) => result = Err(e),
                }
            });
            start = n4;
        }
        run_shape::run_loop_from(b, start, inner, 1, |b, i| {
            if result.is_err() {
                return;
            }
            let args: Vec<Value> = ins
                .iter()
                .zip(&in_bases)
                .zip(&inner_is_one)
                .map(|((o, &base), &full)| {
                    let a = if full {
                        kernel::elem_addr(b, base, i, o.ty.dtype.size())
                    } else {
                        base
                    };
                    kernel::load_elem(b, o.ty.dtype, a, 0)
                })
                .collect();
            match scalar(b, &args) {
                Ok(v) => {
                    let a = kernel::elem_addr(b, out_base, i, out.ty.dtype.size());
                    kernel::store_elem(b, out.ty.dtype, v, a, 0);
                }
                Err(e) => result = Err(e),
            }
        });
    });
    result
}
