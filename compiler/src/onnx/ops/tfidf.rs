//! TfIdfVectorizer over integer tokens. For every pool n-gram of a size in
//! `[min_gram_length, max_gram_length]` and every skip distance (unigrams once), its
//! occurrences are counted by comparing gathered token windows with the n-gram; the
//! counts land in the n-gram's output column (a product with a constant one-hot
//! matrix) and are weighted per `mode`. String pools are not supported.

use crate::ir::{DType, Tensor, TensorType, ValueId};
use crate::onnx::import::{ImportError, ImportResult, NodeCtx};
use crate::ops::{BinaryOp, Op, ReduceAttrs, ReduceKind};

pub fn tfidf_vectorizer(ctx: &mut NodeCtx) -> ImportResult {
    let x = ctx.required(0)?;
    let xt = ctx.ty(x).clone();
    if !xt.dtype.is_int() {
        return Err(ImportError::Unsupported(format!(
            "TfIdfVectorizer over {} tokens",
            xt.dtype
        )));
    }
    let (batch, c, one_d) = match xt.shape[..] {
        [c] => (1, c, true),
        [b, c] => (b, c, false),
        _ => return Err(format!("input must be [C] or [B, C], got {:?}", xt.shape).into()),
    };
    let a = &ctx.attrs;
    let pool = a.ints_opt("pool_int64s")?.ok_or_else(|| {
        ImportError::Unsupported("TfIdfVectorizer without pool_int64s (string pools)".into())
    })?;
    let counts_at = a
        .ints_opt("ngram_counts")?
        .ok_or("attribute 'ngram_counts' is required")?;
    let indexes = a
        .ints_opt("ngram_indexes")?
        .ok_or("attribute 'ngram_indexes' is required")?;
    let (min_len, max_len) = (a.int("min_gram_length", 1)?, a.int("max_gram_length", 1)?);
    let max_skip = a.int("max_skip_count", 0)?;
    let mode = a.string("mode", "TF")?;
    let weights = a.floats_opt("weights")?.unwrap_or_default();
    if min_len < 1 || max_len < min_len || max_skip < 0 {
        return Err("gram lengths must satisfy 1 ≤ min ≤ max, max_skip_count ≥ 0".into());
    }
    let out = (indexes.iter().copied().max().unwrap_or(-1).checked_add(1))
        .and_then(|o| usize::try_from(o).ok())
        .ok_or("attribute 'ngram_indexes' holds an index past 2^63 - 2 or below 0")?;
    // The pool's n-grams in order: (size, tokens, global number).
    let mut grams: Vec<(usize, Vec<i64>, usize)> = vec![];
    let mut number = 0;
    for (i, &start) in counts_at.iter().enumerate() {
        let size = i + 1;
        let end = counts_at.get(i + 1).copied().unwrap_or(pool.len() as i64);
        let (start, end) = (start.max(0) as usize, (end.max(0) as usize).min(pool.len()));
        let items = end.saturating_sub(start);
        for g in 0..items / size {
            let tokens = pool[start + g * size..start + (g + 1) * size].to_vec();
            grams.push((size, tokens, number));
            number += 1;
        }
    }
    if indexes.len() < number {
        return Err(format!("{} ngram_indexes for {number} pool n-grams", indexes.len()).into());
    }
    // The output and each n-gram size's column map are computed here: checked before
    // they are allocated (a huge ngram index must not abort the compiler).
    ctx.check_computed_constant(&TensorType::new(DType::F32, vec![batch, out]))?;
    ctx.check_computed_constant(&TensorType::new(DType::F32, vec![grams.len(), out]))?;
    let x2 = ctx.emit1(
        Op::Reshape {
            shape: vec![batch, c],
        },
        vec![Some(x)],
    )?;
    let x2 = ctx.emit1(Op::Cast { to: DType::I64 }, vec![Some(x2)])?;
    let mut freq: Option<ValueId> = None;
    // The pool has n-grams of sizes 1 ..= counts_at.len() only.
    let largest = usize::try_from(max_len).unwrap_or(0).min(counts_at.len());
    for size in usize::try_from(min_len).unwrap_or(usize::MAX)..=largest {
        let chosen: Vec<&(usize, Vec<i64>, usize)> = grams.iter().filter(|g| g.0 == size).collect();
        if chosen.is_empty() {
            continue;
        }
        let k = chosen.len();
        let pool_k: Vec<i64> = chosen.iter().flat_map(|g| g.1.clone()).collect();
        let pool_v = ctx.constant_value("tfidf_pool", Tensor::from_vec(&[k, size], pool_k));
        let mut onehot = vec![0f32; k * out];
        for (row, g) in chosen.iter().enumerate() {
            let col = usize::try_from(indexes[g.2]).map_err(|_| "negative ngram index")?;
            onehot[row * out + col] = 1.0;
        }
        let onehot = ctx.constant_value("tfidf_columns", Tensor::from_vec(&[k, out], onehot));
        // Skips whose window would not fit the row add nothing: at most c of them.
        let distances: Vec<usize> = if size == 1 {
            vec![1]
        } else {
            let fitting = (c.saturating_sub(1) / (size - 1)).max(1);
            let skips = usize::try_from(max_skip).unwrap_or(usize::MAX);
            (1..=skips.saturating_add(1).min(fitting)).collect()
        };
        for d in distances {
            let span = (size - 1) * d;
            if span >= c {
                continue;
            }
            let m = c - span;
            let idx: Vec<i64> = (0..m)
                .flat_map(|s| (0..size).map(move |j| (s + j * d) as i64))
                .collect();
            let idx = ctx.constant_value("tfidf_windows", Tensor::from_vec(&[m, size], idx));
            let windows = ctx.emit1(Op::Gather { axis: 1 }, vec![Some(x2), Some(idx)])?;
            let windows = ctx.emit1(
                Op::Reshape {
                    shape: vec![batch, m, 1, size],
                },
                vec![Some(windows)],
            )?;
            let eq = ctx.emit1(
                Op::Binary(BinaryOp::Equal),
                vec![Some(windows), Some(pool_v)],
            )?;
            let eq = ctx.emit1(Op::Cast { to: DType::F32 }, vec![Some(eq)])?;
            let all = ctx.emit1(
                Op::Reduce(ReduceAttrs {
                    kind: ReduceKind::Min,
                    axes: vec![3],
                    keepdims: false,
                }),
                vec![Some(eq)],
            )?;
            let counts = ctx.emit1(
                Op::Reduce(ReduceAttrs {
                    kind: ReduceKind::Sum,
                    axes: vec![1],
                    keepdims: false,
                }),
                vec![Some(all)],
            )?;
            let cols = ctx.emit1(Op::matmul(), vec![Some(counts), Some(onehot)])?;
            freq = Some(match freq {
                Some(f) => ctx.emit1(Op::Binary(BinaryOp::Add), vec![Some(f), Some(cols)])?,
                None => cols,
            });
        }
    }
    let mut y = match freq {
        Some(f) => f,
        None => ctx.constant_value(
            "tfidf_zero",
            Tensor::from_vec(&[batch, out], vec![0f32; batch * out]),
        ),
    };
    let w = (!weights.is_empty()).then(|| {
        let mut w = weights.clone();
        w.resize(out, 0.0);
        w
    });
    match mode.as_str() {
        "TF" => {}
        "IDF" | "TFIDF" => {
            if mode == "IDF" {
                let zero = ctx.constant_value("zero", Tensor::from_vec(&[], vec![0f32]));
                let seen = ctx.emit1(Op::Binary(BinaryOp::Greater), vec![Some(y), Some(zero)])?;
                y = ctx.emit1(Op::Cast { to: DType::F32 }, vec![Some(seen)])?;
            }
            if let Some(w) = w {
                let wv = ctx.constant_value("tfidf_weights", Tensor::from_vec(&[out], w));
                y = ctx.emit1(Op::Binary(BinaryOp::Mul), vec![Some(y), Some(wv)])?;
            }
        }
        m => return Err(format!("mode '{m}': expected TF, IDF or TFIDF").into()),
    }
    if one_d {
        y = ctx.emit1(Op::Reshape { shape: vec![out] }, vec![Some(y)])?;
    }
    ctx.bind_output(0, y);
    Ok(())
}
