//! Optional values, known at compile time to be empty or to hold a tensor or a
//! sequence: an empty optional is a placeholder value, a full one is its element
//! itself. So `OptionalHasElement` is a constant and `OptionalGetElement` a rename.

use crate::ir::Tensor;
use crate::onnx::import::{ImportResult, NodeCtx};

/// `Optional(x)` is `x`; `Optional()` (with its `type` attribute) is empty.
pub fn optional(ctx: &mut NodeCtx) -> ImportResult {
    match ctx.input(0) {
        Some(v) => ctx.bind_output(0, v),
        None => ctx.bind_absent(0),
    }
    Ok(())
}

/// True unless the input is an empty optional or not given at all (opset 18 allows
/// both, and plain tensors and sequences, which always hold an element).
pub fn optional_has_element(ctx: &mut NodeCtx) -> ImportResult {
    let has = !ctx.is_absent(0);
    let v = ctx.constant_value("has_element", Tensor::scalar(has));
    ctx.bind_output(0, v);
    Ok(())
}

pub fn optional_get_element(ctx: &mut NodeCtx) -> ImportResult {
    if ctx.is_absent(0) {
        return Err("OptionalGetElement of an empty optional".into());
    }
    let v = ctx.required(0)?;
    ctx.bind_output(0, v);
    Ok(())
}

/// Identity passes sequences and optionals through unchanged; tensors go through the
/// elementwise importer like the other unary ops.
pub fn identity(ctx: &mut NodeCtx) -> ImportResult {
    match ctx.input(0) {
        Some(v) if ctx.sequence_value(v).is_some() || ctx.absent_value(v) => {
            ctx.bind_output(0, v);
            Ok(())
        }
        _ => super::elementwise::unary(ctx),
    }
}
