//! MatMul (numpy `matmul`: 1-D promotion, broadcast batch dimensions) and Gemm.
//!
//! f32/f64 use `ndarray::linalg::general_mat_mul` (the blocked, vectorized
//! `matrixmultiply` kernels); integers use a plain loop with wrapping arithmetic.

use ndarray::linalg::general_mat_mul;
use ndarray::{Array2, Array3, ArrayD, ArrayView2, ArrayViewMut2, Axis, Ix2, IxDyn};

use super::elementwise::{broadcast_shape, zip_map};
use super::scalar::{Float, Num};
use super::{array_ref, narrow_half, unsupported, widen_half};
use crate::ir::{Element, Tensor};
use crate::ops::GemmAttrs;

/// C ← A·B + C on 2-D views, dispatching floats to the BLAS-like kernel.
trait MatMulElement: Num {
    fn mat_mul_add(a: ArrayView2<Self>, b: ArrayView2<Self>, c: ArrayViewMut2<Self>);
}

fn mat_mul_add_float<T: Float>(a: ArrayView2<T>, b: ArrayView2<T>, mut c: ArrayViewMut2<T>) {
    general_mat_mul(T::ONE, &a, &b, T::ONE, &mut c);
}

/// The i-k-j loop keeps the inner loop contiguous over B's and C's rows.
fn mat_mul_add_int<T: Num>(a: ArrayView2<T>, b: ArrayView2<T>, mut c: ArrayViewMut2<T>) {
    for (a_row, mut c_row) in a.outer_iter().zip(c.outer_iter_mut()) {
        for (&a_ik, b_row) in a_row.iter().zip(b.outer_iter()) {
            c_row.zip_mut_with(&b_row, |c, &b| *c = c.add(a_ik.mul(b)));
        }
    }
}

macro_rules! matmul_element {
    ($f:ident: $($t:ty),*) => {
        $(impl MatMulElement for $t {
            fn mat_mul_add(a: ArrayView2<Self>, b: ArrayView2<Self>, c: ArrayViewMut2<Self>) {
                $f(a, b, c)
            }
        })*
    };
}
matmul_element!(mat_mul_add_float: f32, f64);
matmul_element!(mat_mul_add_int: i8, i16, i32, i64, u8, u16, u32, u64);

pub(super) fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor, String> {
    if a.dtype() != b.dtype() {
        return Err(format!(
            "input types differ: {} and {}",
            a.dtype(),
            b.dtype()
        ));
    }
    let (wa, wb) = (widen_half(a), widen_half(b));
    let out = with_pair!(&*wa, &*wb, x, y => batched_matmul(x, y).map(Element::wrap),
        [F32, F64, I8, I16, I32, I64, U8, U16, U32, U64],
        _ => Err(unsupported(a.dtype())))?;
    Ok(narrow_half(out, a.dtype()))
}

fn batched_matmul<T: MatMulElement>(a: &ArrayD<T>, b: &ArrayD<T>) -> Result<ArrayD<T>, String> {
    if a.ndim() == 0 || b.ndim() == 0 {
        return Err("MatMul operands must have rank ≥ 1".into());
    }
    // numpy: a 1-D left operand is a row vector, a 1-D right operand a column vector;
    // the added axis is removed from the result.
    let a_shape = if a.ndim() == 1 {
        vec![1, a.len()]
    } else {
        a.shape().to_vec()
    };
    let b_shape = if b.ndim() == 1 {
        vec![b.len(), 1]
    } else {
        b.shape().to_vec()
    };
    let (a_batch, a_mat) = a_shape.split_at(a_shape.len() - 2);
    let (b_batch, b_mat) = b_shape.split_at(b_shape.len() - 2);
    let (m, k, n) = (a_mat[0], a_mat[1], b_mat[1]);
    if b_mat[0] != k {
        return Err(format!(
            "inner dimensions differ: {:?} @ {:?}",
            a.shape(),
            b.shape()
        ));
    }
    let batch = broadcast_shape(a_batch, b_batch)?;
    let count: usize = batch.iter().product();
    let a3 = as_batches(a, a_batch, m, k)?;
    let b3 = as_batches(b, b_batch, k, n)?;
    let mut out = Array3::<T>::from_elem((count, m, n), T::ZERO);
    for (i, c) in out.outer_iter_mut().enumerate() {
        let ia = broadcast_source(i, &batch, a_batch);
        let ib = broadcast_source(i, &batch, b_batch);
        T::mat_mul_add(a3.index_axis(Axis(0), ia), b3.index_axis(Axis(0), ib), c);
    }
    let mut shape = batch;
    if a.ndim() > 1 {
        shape.push(m);
    }
    if b.ndim() > 1 {
        shape.push(n);
    }
    out.into_shape_with_order(IxDyn(&shape))
        .map_err(|e| e.to_string())
}

/// `a` as a contiguous `[batches, rows, cols]` array.
fn as_batches<T: Num>(
    a: &ArrayD<T>,
    batch: &[usize],
    rows: usize,
    cols: usize,
) -> Result<Array3<T>, String> {
    let count: usize = batch.iter().product();
    a.as_standard_layout()
        .into_owned()
        .into_shape_with_order((count, rows, cols))
        .map_err(|e| e.to_string())
}

/// The flat index, in an operand with batch shape `source` (right-aligned, size-1 axes
/// broadcast), of the output batch with flat index `flat` in shape `out`.
fn broadcast_source(mut flat: usize, out: &[usize], source: &[usize]) -> usize {
    let offset = out.len() - source.len();
    let (mut index, mut stride) = (0, 1);
    for axis in (0..out.len()).rev() {
        let coordinate = flat % out[axis];
        flat /= out[axis];
        if axis >= offset {
            let size = source[axis - offset];
            if size != 1 {
                index += coordinate * stride;
            }
            stride *= size;
        }
    }
    index
}

/// `alpha · op(A) · op(B) + beta · C`, C broadcast to the result.
pub(super) fn gemm(
    g: &GemmAttrs,
    a: &Tensor,
    b: &Tensor,
    c: Option<&Tensor>,
) -> Result<Tensor, String> {
    if a.dtype() != b.dtype() || c.is_some_and(|c| c.dtype() != a.dtype()) {
        return Err("Gemm inputs must share one type".into());
    }
    let (wa, wb) = (widen_half(a), widen_half(b));
    let wc = c.map(widen_half);
    let wc = wc.as_deref();
    let out = match (&*wa, &*wb) {
        (Tensor::F32(x), Tensor::F32(y)) => {
            Tensor::F32(float_gemm(g, x, y, wc.and_then(array_ref))?)
        }
        (Tensor::F64(x), Tensor::F64(y)) => {
            Tensor::F64(float_gemm(g, x, y, wc.and_then(array_ref))?)
        }
        _ => {
            with_pair!(&*wa, &*wb, x, y => int_gemm(g, x, y, wc.and_then(array_ref)).map(Element::wrap),
            [I8, I16, I32, I64, U8, U16, U32, U64], _ => Err(unsupported(a.dtype())))?
        }
    };
    Ok(narrow_half(out, a.dtype()))
}

/// op(A), op(B) as 2-D views, checked.
fn gemm_operands<'a, T>(
    g: &GemmAttrs,
    a: &'a ArrayD<T>,
    b: &'a ArrayD<T>,
) -> Result<(ArrayView2<'a, T>, ArrayView2<'a, T>), String> {
    let two_d = |t: &'a ArrayD<T>| {
        t.view()
            .into_dimensionality::<Ix2>()
            .map_err(|_| "Gemm operands must be 2-D".to_string())
    };
    let (mut a2, mut b2) = (two_d(a)?, two_d(b)?);
    if g.trans_a {
        a2 = a2.reversed_axes();
    }
    if g.trans_b {
        b2 = b2.reversed_axes();
    }
    if a2.ncols() != b2.nrows() {
        return Err(format!(
            "inner dimensions differ: {} vs {}",
            a2.ncols(),
            b2.nrows()
        ));
    }
    Ok((a2, b2))
}

fn float_gemm<T: Float>(
    g: &GemmAttrs,
    a: &ArrayD<T>,
    b: &ArrayD<T>,
    c: Option<&ArrayD<T>>,
) -> Result<ArrayD<T>, String> {
    let (a2, b2) = gemm_operands(g, a, b)?;
    let (m, n) = (a2.nrows(), b2.ncols());
    let (alpha, beta) = (T::of(f64::from(g.alpha)), T::of(f64::from(g.beta)));
    // Y starts as beta·C (C is skipped when beta = 0, as the reference does), then
    // accumulates alpha·A·B.
    let mut y = match c {
        Some(c) if beta != T::ZERO => {
            let cb = c
                .broadcast((m, n))
                .ok_or_else(|| format!("C {:?} does not broadcast to [{m}, {n}]", c.shape()))?;
            cb.mapv(|v| v * beta)
        }
        _ => Array2::from_elem((m, n), T::ZERO),
    };
    general_mat_mul(alpha, &a2, &b2, T::ONE, &mut y);
    Ok(y.into_dyn())
}

/// Integer Gemm: exact wrapping arithmetic when alpha and beta are 1 (or beta unused);
/// otherwise numpy's path — float64 scaling, then truncation to the integer type.
fn int_gemm<T: MatMulElement>(
    g: &GemmAttrs,
    a: &ArrayD<T>,
    b: &ArrayD<T>,
    c: Option<&ArrayD<T>>,
) -> Result<ArrayD<T>, String> {
    let (a2, b2) = gemm_operands(g, a, b)?;
    let (m, n) = (a2.nrows(), b2.ncols());
    let mut ab = Array2::from_elem((m, n), T::ZERO);
    T::mat_mul_add(a2, b2, ab.view_mut());
    let ab = ab.into_dyn();
    let c = c.filter(|_| g.beta != 0.0);
    let shape = [m, n];
    if g.alpha != 1.0 || (c.is_some() && g.beta != 1.0) {
        let (alpha, beta) = (f64::from(g.alpha), f64::from(g.beta));
        let scaled = ab.mapv(|v| v.to_f64() * alpha);
        let sum = match c {
            Some(c) => zip_map(&scaled, c, &shape, |p, q| p + q.to_f64() * beta)?,
            None => scaled,
        };
        return Ok(sum.mapv(T::from_f64));
    }
    match c {
        Some(c) => zip_map(&ab, c, &shape, T::add),
        None => Ok(ab),
    }
}
