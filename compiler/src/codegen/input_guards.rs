//! The run's check of the shape inputs compiled as the values the model's declared
//! output shapes imply (see [`crate::ir::InputGuard`]): before any node runs, each
//! element is read as an integer and compared with the values it may hold.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, Block, InstBuilder, Value};
use cranelift_frontend::FunctionBuilder;

use super::kernel::{flags, PTR};
use crate::ir::{DType, Graph};

/// Jumps to `fail` unless every guarded input (addresses in the `inputs` array) holds
/// values its guard admits.
pub(super) fn emit(b: &mut FunctionBuilder, graph: &Graph, inputs: Value, fail: Block) {
    for g in &graph.input_guards {
        let i = (graph.inputs.iter().position(|&v| v == g.input))
            .expect("a guarded value is a graph input");
        let dtype = graph.ty(g.input).dtype;
        let base = b.ins().load(PTR, flags(), inputs, (i * 8) as i32);
        let mut inferred = b.ins().iconst(types::I64, 0);
        for (k, allowed) in g.allowed.iter().enumerate() {
            let x = element(b, dtype, base, k);
            let mut ok = b.ins().iconst(types::I8, 0);
            for &a in allowed {
                let eq = b.ins().icmp_imm_s(IntCC::Equal, x, a);
                ok = b.ins().bor(ok, eq);
            }
            if g.one_inferred {
                let minus_one = b.ins().icmp_imm_s(IntCC::Equal, x, -1);
                let one = b.ins().uextend(types::I64, minus_one);
                inferred = b.ins().iadd(inferred, one);
                ok = b.ins().bor(ok, minus_one);
            }
            continue_if(b, ok, fail);
        }
        if g.one_inferred {
            let at_most_one = b
                .ins()
                .icmp_imm_u(IntCC::UnsignedLessThanOrEqual, inferred, 1);
            continue_if(b, at_most_one, fail);
        }
    }
}

/// Element `k` of a tensor of `dtype` at `base`, as an i64 (floats truncated toward
/// zero, saturating).
fn element(b: &mut FunctionBuilder, dtype: DType, base: Value, k: usize) -> Value {
    let at = (k * dtype.size()) as i32;
    match dtype {
        DType::I64 => b.ins().load(types::I64, flags(), base, at),
        DType::I32 => b.ins().sload32(flags(), base, at),
        DType::F32 => {
            let x = b.ins().load(types::F32, flags(), base, at);
            b.ins().fcvt_to_sint_sat(types::I64, x)
        }
        DType::F64 => {
            let x = b.ins().load(types::F64, flags(), base, at);
            b.ins().fcvt_to_sint_sat(types::I64, x)
        }
        other => unreachable!("shape inputs of {other:?} are not guarded"),
    }
}

fn continue_if(b: &mut FunctionBuilder, ok: Value, fail: Block) {
    let next = b.create_block();
    b.ins().brif(ok, next, &[], fail, &[]);
    b.seal_block(next);
    b.switch_to_block(next);
}
