//! Gather of rows of a constant table that a GEMM also multiplies by, transposed: the
//! tied input/output embeddings of a language model (`Gather(E, ids)` at the input,
//! `h · Eᵀ` at the output). The GEMM stores `Eᵀ` as packed column panels; row `v` of
//! `E` is column `v` of those panels, so the rows are read from there and `E` itself
//! is not stored. The packed bytes are made exactly as the GEMM makes them, and the
//! read-only data pool ([`crate::codegen::rodata_pool`]) keeps one copy.
//!
//! Packed B (see `kernels::gemm::pack_b_blocks`): K blocks of `kc` steps, block `kb`
//! (of `len` steps) at element `kb·W` (W: the panels' total width), panel `p` (columns
//! `p·nr ..`, `width` of them) inside it at `p·nr·len` as `[len][width]`. Column `v`'s
//! element `k` is therefore at `kb·W + p·nr·len + (k − kb)·width + v mod nr`, with
//! `p = v / nr`. A GEMM split by columns packs whole-K panels (`kc = K`, one block;
//! see `gemm::pack_weights_b`).

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, InstBuilder};

use super::index_check;
use super::{Geometry, LowerCtx, LowerResult};
use crate::codegen::kernel;
use crate::codegen::kernels::gemm as packing;
use crate::ir::Tensor;

pub fn gather_packed_columns(ctx: &mut LowerCtx, geom: &Geometry, whole_k: bool) -> LowerResult {
    let (data, indices, y) = (ctx.input(0)?, ctx.input(1)?, ctx.output(0));
    let Some(Tensor::F32(table)) = &data.constant else {
        return Err("the packed-table gather needs a constant float32 table".into());
    };
    let (rows, k) = match data.ty.shape[..] {
        [rows, k] => (rows, k),
        _ => return Err("the packed-table gather needs a rank-2 table".into()),
    };
    if y.ty.numel() == 0 {
        return Ok(());
    }
    let values: Vec<f32> = table.iter().copied().collect();
    let (packed, layout) =
        packing::pack_weights_b(geom, k, rows, whole_k, |kk, j| values[j * k + kk]);
    let total_width = packed.len() / k.max(1);
    let base = ctx.weight_rodata(packing::f32_bytes(&packed))?;
    let kc = match layout {
        packing::BLayout::PackedBlocks => geom.k_block_len(k),
        _ => k.max(1),
    };
    let nr = geom.nr;
    let full_panels = rows / nr;
    let tail_width = geom.tail_panel_width(rows % nr);
    let n_idx = indices.ty.numel();
    let on_bad = ctx.on_bad_index;
    let b = &mut *ctx.b;
    index_check::check_gather_indices(b, &indices, rows, on_bad);
    let read = kernel::flags().with_readonly();
    kernel::counted_loop(b, 0, n_idx as i64, 1, |b, j| {
        let v = index_check::gathered_index(b, &indices, j, rows, on_bad);
        let panel = b.ins().udiv_imm_u(v, nr as i64);
        let lane = b.ins().urem_imm_u(v, nr as i64);
        // Only the last panel can be narrower than nr.
        let is_tail = b.ins().icmp_imm_s(IntCC::Equal, panel, full_panels as i64);
        let nr_v = kernel::iconst(b, nr as i64);
        let tail_v = kernel::iconst(b, tail_width as i64);
        let width = b.ins().select(is_tail, tail_v, nr_v);
        let stride = b.ins().imul_imm_s(width, 4);
        let out_row = kernel::elem_addr(b, y.ptr, j, k * 4);
        for kb in (0..k).step_by(kc) {
            let len = kc.min(k - kb);
            // Element kb·W + p·nr·len + lane.
            let start = b.ins().imul_imm_s(panel, (nr * len) as i64);
            let start = b.ins().iadd(start, lane);
            let start = b.ins().iadd_imm_s(start, (kb * total_width) as i64);
            let src0 = kernel::elem_addr(b, base, start, 4);
            let dst0 = b.ins().iadd_imm_s(out_row, (kb * 4) as i64);
            kernel::counted_loop(b, 0, len as i64, 1, |b, kk| {
                let off = b.ins().imul(kk, stride);
                let src = b.ins().iadd(src0, off);
                let x = b.ins().load(types::F32, read, src, 0);
                let dst = kernel::elem_addr(b, dst0, kk, 4);
                b.ins().store(kernel::flags(), x, dst, 0);
            });
        }
    });
    Ok(())
}
