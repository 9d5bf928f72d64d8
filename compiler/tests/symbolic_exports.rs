//! Models exported with dynamic axes (torchvision, Hugging Face transformers, torch's
//! TransformerEncoder, a CRNN: `scripts/export_dynamic_models.py DIR`) imported once
//! with their ranges as symbols: no node refused, and at each range's ends, middle and
//! an odd value, every value's expressions (and the extents a value holds) equal what
//! a static import at those values gives; at the smallest and the odd values the
//! instance of the symbolic graph computes what the static import computes (nnc's
//! interpreter, seeded random inputs).
//!
//! `NNC_DYNAMIC_MODELS=DIR cargo test --release --test symbolic_exports -- --ignored`
//! (ignored by default: the exports need torch, torchvision and transformers).

use std::path::Path;

#[path = "common/graphs.rs"]
mod graphs;

use graphs::{compare, Rng, Scale};
use nnc::interp::run_graph;
use nnc::ir::{DType, Graph, Tensor, ValueId};
use nnc::onnx::proto::ModelProto;
use nnc::onnx::ranges::{DimRange, DimSite};
use nnc::onnx::{import_model, import_symbolic, ImportOptions};
use prost::Message;

fn ranges_of(json: &str) -> Vec<(String, usize, usize)> {
    // {"ranges": {"batch": [1, 8], "seq": [1, 512]}}: read without a JSON crate.
    let body = json.split_once("\"ranges\"").map_or("", |(_, b)| b);
    let mut out = vec![];
    for part in body.split(']') {
        let Some((name, nums)) = part.split_once("\": [") else {
            continue;
        };
        let name = name.rsplit('"').next().unwrap_or_default().to_string();
        let n: Vec<usize> = nums
            .split(',')
            .filter_map(|x| x.trim().parse().ok())
            .collect();
        if let [lo, hi] = n[..] {
            out.push((name, lo, hi));
        }
    }
    out
}

/// Seeded inputs for `g`: floats, token ids below 100, masks of 0 and 1.
fn inputs_for(g: &Graph, seed: u64) -> Vec<Tensor> {
    let mut rng = Rng::new(seed);
    (g.inputs.iter())
        .map(|&v| {
            let ty = g.ty(v);
            let n = ty.numel();
            match ty.dtype {
                DType::F32 => Tensor::from_vec(&ty.shape, rng.f32s(n, 1.0)),
                _ => {
                    let top = if g.value(v).name.contains("mask") {
                        2.0
                    } else {
                        100.0
                    };
                    let ids: Vec<i64> = (rng.f32s(n, 1.0).iter())
                        .map(|x| ((x.abs() * top) as i64).min(top as i64 - 1))
                        .collect();
                    Tensor::from_vec(&ty.shape, ids).cast(ty.dtype)
                }
            }
        })
        .collect()
}

fn check_model(path: &Path, ranges: &[(String, usize, usize)]) -> Result<(usize, usize), String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    let model = ModelProto::decode(bytes.as_slice()).map_err(|e| e.to_string())?;
    let opts = ImportOptions {
        ranges: (ranges.iter())
            .map(|(name, min, max)| DimRange {
                name: name.clone(),
                min: *min,
                max: *max,
                site: DimSite::Param,
            })
            .collect(),
        ..Default::default()
    };
    let imported = import_symbolic(&model, path.parent(), &opts).map_err(|e| e.to_string())?;
    if let Some(u) = imported.unsupported.first() {
        return Err(format!("node '{}' ({}): {}", u.node, u.op, u.reason));
    }
    let g = imported.graph;
    let (mut compared, mut ran) = (0, 0);
    for k in 0..4 {
        let mut fixed_opts = ImportOptions::default();
        let mut values = vec![];
        for (name, min, max) in ranges {
            let mid = (min + max) / 2;
            let v = [*min, mid, *max, (mid | 1).min(*max)][k];
            fixed_opts.dims.insert(name.clone(), v);
            values.push(v as i64);
        }
        if g.dim_checks.iter().any(|c| !c.holds_at(&values)) {
            continue;
        }
        let fixed = import_model(&model, path.parent(), &fixed_opts)
            .map_err(|e| format!("static import at {values:?}: {e}"))?
            .graph;
        if k == 0 || k == 3 {
            let instance = nnc::ops::instantiate::instantiate(&g, &values)
                .map_err(|e| format!("the instance at {values:?}: {e}"))?;
            let inputs = inputs_for(&fixed, 7 + k as u64);
            let want = run_graph(&fixed, &inputs)?;
            let got = run_graph(&instance, &inputs)
                .map_err(|e| format!("the instance at {values:?}: {e}"))?;
            if got.len() != want.len() || want.is_empty() {
                return Err(format!("{} outputs against {}", got.len(), want.len()));
            }
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                compare(a, b, 1e-4, Scale::Whole)
                    .map_err(|e| format!("output {i} at {values:?}: {e}"))?;
            }
            ran += 1;
        }
        // One ONNX node may give several values its output's name, the last being the
        // one bound to it: the last of each name are compared.
        let mut by_name: std::collections::HashMap<&str, Vec<usize>> = Default::default();
        for (i, v) in fixed
            .values
            .iter()
            .enumerate()
            .filter(|(_, v)| v.constant.is_none())
        {
            by_name.entry(v.name.as_str()).or_default().push(i);
        }
        let last: std::collections::HashMap<&str, usize> = (g.values.iter().enumerate())
            .map(|(i, v)| (v.name.as_str(), i))
            .collect();
        for (i, info) in g.values.iter().enumerate() {
            if info.constant.is_some() {
                continue;
            }
            if last.get(info.name.as_str()) != Some(&i) {
                continue;
            }
            let Some(&j) = by_name.get(info.name.as_str()).and_then(|v| v.last()) else {
                continue;
            };
            let want = &fixed.values[j].ty.shape;
            let got: Option<Vec<usize>> = (g.ty(ValueId(i)).dims().iter())
                .map(|d| d.eval_at(&values).map(|x| x as usize))
                .collect();
            if got.as_ref() != Some(want) && fixed.values[j].ty.dtype == info.ty.dtype {
                return Err(format!(
                    "%{} at {values:?}: the expressions give {got:?}, a static import {want:?}",
                    info.name
                ));
            }
            compared += 1;
        }
    }
    Ok((compared, ran))
}

#[test]
#[ignore = "needs NNC_DYNAMIC_MODELS=DIR from scripts/export_dynamic_models.py"]
fn dynamic_exports_import_once_with_symbols() {
    let dir = std::env::var("NNC_DYNAMIC_MODELS").expect("NNC_DYNAMIC_MODELS=DIR");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("the models' folder")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "onnx"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .onnx files in {dir}");
    let mut failures = vec![];
    for f in files {
        let json = std::fs::read_to_string(f.with_extension("json")).unwrap_or_default();
        match check_model(&f, &ranges_of(&json)) {
            Ok((n, ran)) => eprintln!(
                "{}: {n} shapes compared; outputs equal to the static import's at {ran} values",
                f.display()
            ),
            Err(e) => failures.push(format!("{}: {e}", f.display())),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
