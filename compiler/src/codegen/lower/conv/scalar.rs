//! The direct conv for float64, float16 and bfloat16: a loop nest with bounds checks,
//! computing in the element type's domain.

use super::*;

/// Direct convolution in the dtype's computation domain, with a bounds check per tap:
/// correct for every float dtype and shape, used where speed matters less (float64,
/// float16, bfloat16).
pub(super) fn conv_scalar(b: &mut FunctionBuilder, g: &ConvGeometry, ops: &ConvOperands) {
    let dtype = ops.x.ty.dtype;
    let d = domain(dtype);
    let size = dtype.size();
    let sp = g.input.len();
    let in_strides = kernel::strides_of(&g.input);
    let mut loop_shape = vec![g.batch, g.group, g.mg];
    loop_shape.extend(&g.output);
    let taps = g.taps();
    kernel::nested_loop(b, &loop_shape, &mut |b, idx| {
        let (n, grp, j) = (idx[0], idx[1], idx[2]);
        let out_pos = &idx[3..];
        let m = b.ins().imul_imm_s(grp, g.mg as i64);
        let m = b.ins().iadd(m, j);
        let acc = b.declare_var(kernel::domain_type(d));
        let init = match &ops.bias {
            Some(bias) => {
                let a = kernel::elem_addr(b, bias.ptr, m, size);
                kernel::load_elem(b, dtype, a, 0)
            }
            None => domain_zero(b, d),
        };
        b.def_var(acc, init);
        let x_g = input_group(b, g, ops.x.ptr, n, grp, size);
        let w_m = kernel::elem_addr(b, ops.w.ptr, m, g.cg * taps * size);
        let mut shape = vec![g.cg];
        shape.extend(&g.kernel);
        kernel::nested_loop(b, &shape, &mut |b, kidx| {
            let (c, k) = (kidx[0], &kidx[1..]);
            let zero = kernel::iconst(b, 0);
            let mut valid: Option<Value> = None;
            let mut offset = zero;
            for dim in 0..sp {
                // i = o·s + k·d − pad, valid when 0 ≤ i < size (one unsigned compare).
                let i = b.ins().imul_imm_s(out_pos[dim], g.strides[dim] as i64);
                let kd = b.ins().imul_imm_s(k[dim], g.dilations[dim] as i64);
                let i = b.ins().iadd(i, kd);
                let i = b.ins().iadd_imm_s(i, -(g.pad_begin[dim] as i64));
                let ok = b
                    .ins()
                    .icmp_imm_s(IntCC::UnsignedLessThan, i, g.input[dim] as i64);
                valid = Some(match valid {
                    None => ok,
                    Some(v) => b.ins().band(v, ok),
                });
                let t = b.ins().imul_imm_s(i, in_strides[dim] as i64);
                offset = b.ins().iadd(offset, t);
            }
            let valid = valid.expect("at least one spatial axis");
            let offset = b.ins().select(valid, offset, zero);
            let x_c = kernel::elem_addr(b, x_g, c, g.in_size() * size);
            let xa = kernel::elem_addr(b, x_c, offset, size);
            let xv = kernel::load_elem(b, dtype, xa, 0);
            let z = domain_zero(b, d);
            let xv = b.ins().select(valid, xv, z);
            let tap = kernel::linear_offset(b, kidx, &kernel::strides_of(&shape));
            let wa = kernel::elem_addr(b, w_m, tap, size);
            let wv = kernel::load_elem(b, dtype, wa, 0);
            let prod = domain_mul(b, d, xv, wv);
            let sum = b.use_var(acc);
            let sum = domain_add(b, d, sum, prod);
            b.def_var(acc, sum);
        });
        let mut y_idx = vec![n, m];
        y_idx.extend(out_pos);
        let mut y_shape = vec![g.batch, g.maps];
        y_shape.extend(&g.output);
        let off = kernel::linear_offset(b, &y_idx, &kernel::strides_of(&y_shape));
        let ya = kernel::elem_addr(b, ops.y.ptr, off, size);
        let v = b.use_var(acc);
        kernel::store_elem(b, dtype, v, ya, 0);
    });
}
