//! The exported entry points of a multi-versioned library: each asks the CPU for its
//! features (once per process, see [`CpuCheck`]) and calls the first variant the CPU
//! can run, most capable first (after its preparation, where it derives weights, see
//! `prepare.rs`); where none fits, `NNC_ERR_UNSUPPORTED_CPU`.

use std::sync::Arc;

use cranelift_codegen::ir::{types, AbiParam, InstBuilder};
use cranelift_codegen::isa::TargetIsa;
use cranelift_codegen::Context;
use cranelift_frontend::FunctionBuilderContext;
use cranelift_module::{FuncId, Linkage, Module};
use cranelift_object::ObjectModule;

use super::cpu_check::CpuCheck;
use super::kernel::PTR;
use super::variant::{Entries, Variant};
use super::{define_function, ptr_signature, Result};

/// Defines `PREFIXinfer_with_workspace`, `PREFIXrun` and `PREFIXworkspace_size`;
/// returns the first (which `infer` calls).
pub(super) fn define_entry_points(
    (module, ctx, fctx, isa): (
        &mut ObjectModule,
        &mut Context,
        &mut FunctionBuilderContext,
        &Arc<dyn TargetIsa>,
    ),
    check: &CpuCheck,
    (variants, entries, prepares): (&[Variant], &[Entries], &[Option<FuncId>]),
    prefix: &str,
) -> Result<FuncId> {
    let mut dispatching = |what: &str, n_args: usize, pick: fn(&Entries) -> FuncId| {
        let choices: Vec<_> = (variants.iter().zip(entries).zip(prepares))
            .map(|((v, e), &prepare)| (&v.target, prepare, pick(e)))
            .collect();
        let sig = ptr_signature(module, n_args, true);
        define_function(
            module,
            ctx,
            fctx,
            isa,
            &format!("{prefix}{what}"),
            Linkage::Export,
            sig,
            |b, module, p| {
                check.emit_dispatch(b, module, &choices, p);
                Ok(())
            },
        )
    };
    let infer_with_workspace = dispatching("infer_with_workspace", 3, |e| e.infer_with_workspace)?;
    dispatching("run", 4, |e| e.run)?;
    // The largest any variant needs, so the size a caller gets does not depend on the
    // CPU it asked on.
    let mut sig = module.make_signature();
    sig.params.push(AbiParam::new(PTR));
    sig.returns.push(AbiParam::new(types::I64));
    define_function(
        module,
        ctx,
        fctx,
        isa,
        &format!("{prefix}workspace_size"),
        Linkage::Export,
        sig,
        |b, module, p| {
            let mut most = b.ins().iconst(types::I64, 0);
            for e in entries {
                let f = module.declare_func_in_func(e.workspace_size, b.func);
                let call = b.ins().call(f, &[p[0]]);
                let bytes = b.inst_results(call)[0];
                most = b.ins().umax(most, bytes);
            }
            b.ins().return_(&[most]);
            Ok(())
        },
    )?;
    Ok(infer_with_workspace)
}
