//! Det: the determinant of each trailing `[n, n]` matrix by cofactor (Laplace)
//! expansion along the rows, each minor computed once (memoized by its column set):
//! `2ⁿ` minors of elementwise products of the matrix's entries, which is small for the
//! matrix sizes models use (n ≤ 8).

use std::collections::HashMap;

use crate::ir::ValueId;
use crate::onnx::import::{ImportError, ImportResult, NodeCtx};
use crate::ops::{BinaryOp, Op, UnaryOp};

/// Largest matrix nnc expands: the expansion has `n · 2ⁿ⁻¹` products.
const MAX_N: usize = 8;

struct Minors<'a> {
    n: usize,
    /// Entry `(i, j)` of every matrix, shaped `[batch..., 1]`.
    entries: &'a [ValueId],
    memo: HashMap<u32, ValueId>,
}

impl Minors<'_> {
    /// The determinant of rows `n − |cols|..n` restricted to the column set `cols`.
    fn det(&mut self, ctx: &mut NodeCtx, cols: u32) -> ImportResult<ValueId> {
        if let Some(&v) = self.memo.get(&cols) {
            return Ok(v);
        }
        let row = self.n - cols.count_ones() as usize;
        let mut acc: Option<ValueId> = None;
        for (k, j) in (0..self.n).filter(|j| cols & (1 << j) != 0).enumerate() {
            let a = self.entries[row * self.n + j];
            let rest = cols & !(1 << j);
            let term = if rest == 0 {
                a
            } else {
                let m = self.det(ctx, rest)?;
                ctx.emit1(Op::Binary(BinaryOp::Mul), vec![Some(a), Some(m)])?
            };
            acc = Some(match acc {
                None if k % 2 == 0 => term,
                None => ctx.emit1(Op::Unary(UnaryOp::Neg), vec![Some(term)])?,
                Some(s) => {
                    let op = if k % 2 == 0 {
                        BinaryOp::Add
                    } else {
                        BinaryOp::Sub
                    };
                    ctx.emit1(Op::Binary(op), vec![Some(s), Some(term)])?
                }
            });
        }
        let v = acc.ok_or("empty minor")?;
        self.memo.insert(cols, v);
        Ok(v)
    }
}

pub fn det(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.input_ty(0)?;
    let r = x.rank();
    if r < 2 || x.shape[r - 1] != x.shape[r - 2] || !x.dtype.is_float() {
        return Err(format!("input must be float square matrices [..., M, M], got {x}").into());
    }
    let n = x.shape[r - 1];
    if n == 0 || n > MAX_N {
        return Err(ImportError::Unsupported(format!(
            "Det of {n}×{n} matrices (nnc expands 1×1 to {MAX_N}×{MAX_N})"
        )));
    }
    let batch = x.shape[..r - 2].to_vec();
    let mut flat_shape = batch.clone();
    flat_shape.push(n * n);
    let flat = ctx.emit1(
        Op::Reshape {
            shape: flat_shape.clone(),
        },
        vec![Some(ctx.required(0)?)],
    )?;
    let mut entries = Vec::with_capacity(n * n);
    for e in 0..n * n {
        let mut starts = vec![0; batch.len()];
        starts.push(e);
        let mut shape = batch.clone();
        shape.push(1);
        let op = Op::Slice {
            starts,
            steps: vec![1; batch.len() + 1],
            shape,
        };
        entries.push(ctx.emit1(op, vec![Some(flat)])?);
    }
    let mut minors = Minors {
        n,
        entries: &entries,
        memo: HashMap::new(),
    };
    let d = minors.det(ctx, (1u32 << n) - 1)?;
    let y = ctx.emit1(Op::Reshape { shape: batch }, vec![Some(d)])?;
    ctx.bind_output(0, y);
    Ok(())
}
