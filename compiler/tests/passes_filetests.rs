//! File tests for the graph passes, in the style of Cranelift's filetests: each
//! `tests/passes/*.nir` file holds a small model in a compact text form, the passes to
//! run, and the IR dump expected after them (`Graph`'s `Display`).
//!
//! ```text
//! ; passes: fold_affine, fuse_epilogue     (comma-separated, run in order)
//! ; free text after ';' is a comment
//! input x [1,3,8,8]                      (a float32 graph input)
//! input k [4] const                      (an input made a random constant after import:
//!                                          import folds constants itself, so this is
//!                                          how constant-input nodes reach a pass)
//! init w [4,3,3,3]                       (float32 initializer, seeded random values)
//! init s [4,1,1] = 1,2,3,4               (explicit values; one value fills the shape)
//! init k:i64 [2] = 1,-1                  (an int64 initializer)
//! c = Conv(x, w) pads=[1,1,1,1] group=1  (an ONNX node; `_` skips an input;
//!                                          [..] ints, 1 int, 0.5 float, else string)
//! y = Relu(c)
//! output y
//! ---
//! graph(%x: float32[1,3,8,8]) {          (the expected dump)
//! ...
//! ```
//!
//! Every test also runs the reference interpreter on the graph before and after the
//! passes, on seeded random inputs, and requires the same outputs (within 1e-4
//! relative): a pass may only rewrite, not change, what the model computes.
//!
//! `NNC_BLESS=1 cargo test --test passes_filetests` rewrites the expected dumps.

#[path = "common/dynamic.rs"]
mod dynamic;
#[path = "common/graphs.rs"]
mod graphs;
#[path = "common/models.rs"]
mod models;
#[path = "common/runner.rs"]
mod runner;
#[path = "common/tools.rs"]
mod tools;

use std::path::{Path, PathBuf};

use graphs::{compare, Rng, Scale};

use nnc::interp::run_graph;
use nnc::ir::{Graph, Tensor};
use nnc::onnx::proto::{
    attribute_type, tensor_shape_proto, type_proto, AttributeProto, GraphProto, ModelProto,
    NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use nnc::onnx::{import_model, ImportOptions};
use nnc::passes::PassManager;

struct FileTest {
    passes: String,
    /// `; dims: NAME=MIN..MAX, ...`: dims set at run time (input axes may be named).
    ranges: Vec<(String, usize, usize)>,
    /// Inputs turned into constants after import.
    const_inputs: Vec<String>,
    model: ModelProto,
    expected: Option<String>,
}

/// One axis of an input: a size, or a dim's name.
enum Axis {
    Size(i64),
    Named(String),
}

fn parse_axes(s: &str) -> Result<Vec<Axis>, String> {
    let s = s.trim().trim_start_matches('[').trim_end_matches(']');
    s.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| match t.parse::<i64>() {
            Ok(d) => Ok(Axis::Size(d)),
            Err(_) if t.chars().all(|c| c.is_alphanumeric() || c == '_') => {
                Ok(Axis::Named(t.to_string()))
            }
            Err(_) => Err(format!("bad axis '{t}'")),
        })
        .collect()
}

fn value_info(name: &str, shape: &[Axis]) -> ValueInfoProto {
    use tensor_shape_proto::dimension::Value;
    let dim = shape
        .iter()
        .map(|d| tensor_shape_proto::Dimension {
            value: Some(match d {
                Axis::Size(d) => Value::DimValue(*d),
                Axis::Named(n) => Value::DimParam(n.clone()),
            }),
        })
        .collect();
    ValueInfoProto {
        name: name.to_string(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: 1,
                shape: Some(TensorShapeProto { dim }),
            })),
        }),
    }
}

fn parse_ints(s: &str) -> Result<Vec<i64>, String> {
    let s = s.trim().trim_start_matches('[').trim_end_matches(']');
    s.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| t.parse::<i64>().map_err(|e| format!("'{t}': {e}")))
        .collect()
}

fn parse_attr(name: &str, v: &str) -> AttributeProto {
    let mut p = AttributeProto {
        name: name.to_string(),
        ..Default::default()
    };
    if v.starts_with('[') {
        p.r#type = attribute_type::INTS;
        p.ints = parse_ints(v).expect("an int list");
    } else if let Ok(i) = v.parse::<i64>() {
        p.r#type = attribute_type::INT;
        p.i = i;
    } else if let Ok(f) = v.parse::<f32>() {
        p.r#type = attribute_type::FLOAT;
        p.f = f;
    } else {
        p.r#type = attribute_type::STRING;
        p.s = v.as_bytes().to_vec();
    }
    p
}

/// Splits `a=1 b=[1, 2]` into pairs, brackets kept together.
fn split_attrs(s: &str) -> Vec<(String, String)> {
    let mut out = vec![];
    let mut cur = String::new();
    let mut depth = 0;
    for ch in s.chars() {
        match ch {
            '[' => depth += 1,
            ']' => depth -= 1,
            _ => {}
        }
        if ch.is_whitespace() && depth == 0 {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
        } else {
            cur.push(ch);
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out.into_iter()
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("attributes are name=value");
            (k.to_string(), v.to_string())
        })
        .collect()
}

fn parse(text: &str, seed: u64) -> Result<FileTest, String> {
    let (body, expected) = match text.split_once("\n---\n") {
        Some((b, e)) => (b, Some(e.trim_end().to_string())),
        None => (text, None),
    };
    let mut rng = Rng::new(seed);
    let mut graph = GraphProto {
        name: "filetest".into(),
        ..Default::default()
    };
    let mut passes = None;
    let mut ranges = vec![];
    let mut const_inputs = vec![];
    for (ln, raw) in body.lines().enumerate() {
        let err = |m: String| format!("line {}: {m}: {raw}", ln + 1);
        let line = raw.trim();
        if let Some(c) = line.strip_prefix(';') {
            if let Some(p) = c
                .trim()
                .strip_prefix("passes:")
                .or(c.trim().strip_prefix("pass:"))
            {
                passes = Some(p.trim().to_string());
            }
            if let Some(d) = c.trim().strip_prefix("dims:") {
                for r in d.split(',').map(str::trim).filter(|r| !r.is_empty()) {
                    let bad = || err("dims: NAME=MIN..MAX, ...".into());
                    let (name, range) = r.split_once('=').ok_or_else(bad)?;
                    let (lo, hi) = range.split_once("..").ok_or_else(bad)?;
                    let lo = lo.trim().parse().map_err(|_| bad())?;
                    let hi = hi.trim().parse().map_err(|_| bad())?;
                    ranges.push((name.trim().to_string(), lo, hi));
                }
            }
            continue;
        }
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("input ") {
            let (name, shape) = rest
                .split_once(' ')
                .ok_or_else(|| err("input NAME [dims]".into()))?;
            let shape = match shape.trim().strip_suffix("const") {
                Some(s) => {
                    const_inputs.push(name.to_string());
                    s
                }
                None => shape,
            };
            graph
                .input
                .push(value_info(name, &parse_axes(shape).map_err(err)?));
        } else if let Some(rest) = line.strip_prefix("output ") {
            graph.output.push(ValueInfoProto {
                name: rest.trim().to_string(),
                r#type: None,
            });
        } else if let Some(rest) = line.strip_prefix("init ") {
            let (decl, values) = match rest.split_once('=') {
                Some((d, v)) => (d.trim(), Some(v.trim())),
                None => (rest.trim(), None),
            };
            let (name, shape) = decl
                .split_once(' ')
                .ok_or_else(|| err("init NAME [dims]".into()))?;
            let dims = parse_ints(shape).map_err(err)?;
            let n: i64 = dims.iter().product();
            // `name:i64` and the 8/32-bit integer types of quantized graphs (ONNX codes).
            let int_types = [(":i64", 7), (":i8", 3), (":u8", 2), (":i32", 6)];
            let (name, int) = int_types
                .iter()
                .find_map(|(suffix, code)| name.strip_suffix(suffix).map(|nm| (nm, Some(*code))))
                .unwrap_or((name, None));
            let mut t = TensorProto {
                name: name.to_string(),
                dims,
                ..Default::default()
            };
            if let Some(code) = int {
                t.data_type = code;
                let v = parse_ints(values.unwrap_or("")).map_err(err)?;
                let v = if v.len() == 1 {
                    vec![v[0]; n as usize]
                } else {
                    v
                };
                if code == 7 {
                    t.int64_data = v;
                } else {
                    t.int32_data = v.iter().map(|&x| x as i32).collect();
                }
            } else {
                t.data_type = 1;
                let v: Vec<f32> = match values {
                    Some(vs) => {
                        let v: Vec<f32> = vs
                            .split(',')
                            .map(|x| x.trim().parse::<f32>().map_err(|e| err(e.to_string())))
                            .collect::<Result<_, _>>()?;
                        if v.len() == 1 {
                            vec![v[0]; n as usize]
                        } else {
                            v
                        }
                    }
                    None => (0..n).map(|_| rng.uniform_f32()).collect(),
                };
                t.raw_data = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            }
            graph.initializer.push(t);
        } else {
            // outs = Op(ins) attrs
            let (outs, rhs) = line
                .split_once('=')
                .ok_or_else(|| err("expected OUT = Op(...)".into()))?;
            let (op, rest) = rhs
                .trim()
                .split_once('(')
                .ok_or_else(|| err("expected Op(".into()))?;
            let (args, attrs) = rest
                .split_once(')')
                .ok_or_else(|| err("expected )".into()))?;
            let names = |s: &str| -> Vec<String> {
                s.split(',')
                    .map(|t| t.trim())
                    .filter(|t| !t.is_empty())
                    .map(|t| {
                        if t == "_" {
                            String::new()
                        } else {
                            t.to_string()
                        }
                    })
                    .collect()
            };
            graph.node.push(NodeProto {
                input: names(args),
                output: names(outs),
                name: names(outs).join("_"),
                op_type: op.trim().to_string(),
                attribute: split_attrs(attrs)
                    .iter()
                    .map(|(k, v)| parse_attr(k, v))
                    .collect(),
                ..Default::default()
            });
        }
    }
    let model = ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        producer_name: "nnc-filetests".into(),
        graph: Some(graph),
        ..Default::default()
    };
    Ok(FileTest {
        passes: match ranges.is_empty() {
            true => passes.ok_or("no '; passes:' line")?,
            false => passes.unwrap_or_default(),
        },
        ranges,
        const_inputs,
        model,
        expected,
    })
}

fn random_inputs(g: &Graph, seed: u64) -> Vec<Tensor> {
    // Another stream than the initializers' (`parse` seeds with `seed`).
    let mut rng = Rng::new(!seed);
    g.inputs
        .iter()
        .map(|v| {
            let shape = g.ty(*v).shape.clone();
            let n: usize = shape.iter().product();
            Tensor::from_vec(&shape, rng.f32s(n, 2.0))
        })
        .collect()
}

fn check_same(before: &[Tensor], after: &[Tensor]) -> Result<(), String> {
    for (i, (a, b)) in before.iter().zip(after).enumerate() {
        compare(b, a, 1e-4, Scale::Whole).map_err(|e| format!("output {i}: {e}"))?;
    }
    Ok(())
}

fn run_file(path: &Path, seed: u64) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let test = parse(&text, seed)?;
    let mut before = import_model(&test.model, None, &ImportOptions::default())
        .map_err(|e| e.to_string())?
        .graph;
    let constants = random_inputs(&before, seed + 1000);
    for (v, t) in before.inputs.clone().into_iter().zip(constants) {
        if test.const_inputs.contains(&before.value(v).name) {
            before.values[v.0].constant = Some(t);
            before.inputs.retain(|i| *i != v);
        }
    }
    let mut after = before.clone();
    let pm = PassManager::from_list(&test.passes).map_err(|e| e.to_string())?;
    pm.run(&mut after).map_err(|e| e.to_string())?;
    let inputs = random_inputs(&before, seed);
    let want = run_graph(&before, &inputs)?;
    let got = run_graph(&after, &inputs).map_err(|e| format!("after the passes: {e}"))?;
    check_same(&want, &got)?;
    expect(path, &text, test.expected, &after.to_string(), "dump")
}

/// `actual` against the file's expected section (after `---`); with `NNC_BLESS=1` the
/// file's section is rewritten to it instead.
fn expect(
    path: &Path,
    text: &str,
    expected: Option<String>,
    actual: &str,
    what: &str,
) -> Result<(), String> {
    if std::env::var("NNC_BLESS").is_ok_and(|v| v == "1") {
        let body = text.split("\n---\n").next().unwrap_or(text).trim_end();
        std::fs::write(path, format!("{body}\n---\n{actual}\n")).map_err(|e| e.to_string())?;
        return Ok(());
    }
    match expected {
        Some(e) if e == actual => Ok(()),
        Some(e) => Err(format!(
            "{what} differs.\n--- expected\n{e}\n--- actual\n{actual}"
        )),
        None => Err(format!(
            "no expected {what} ('---' section); actual:\n{actual}"
        )),
    }
}

/// Runs `run` on every `.nir` file of `tests/DIR`, in name order, and fails naming
/// each file that failed.
fn run_dir(dir: &str, run: fn(&Path, u64) -> Result<(), String>) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "nir"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .nir files in {}", dir.display());
    let mut failures = vec![];
    for (i, f) in files.iter().enumerate() {
        if let Err(e) = run(f, 1 + i as u64) {
            failures.push(format!("{}: {e}", f.display()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn pass_filetests() {
    run_dir("passes", run_file);
}

/// A symbolic-import file test: the model imported once with its ranges as symbols
/// (`nnc::onnx::import_symbolic`), the dump of the graph (every value's axes as
/// expressions; an import refused dumps `error: ...`) against the expected section,
/// and, independently, at each range's ends, middle and an odd value, every value's
/// expressions evaluated there against the shape the same value has in the model
/// imported statically at that value, and the graph's instance there
/// (`ops::instantiate`) computing what the static import computes.
fn run_symbolic_file(path: &Path, seed: u64) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let test = parse(&text, seed)?;
    let ranges: Vec<nnc::onnx::ranges::DimRange> = (test.ranges.iter())
        .map(|(name, min, max)| nnc::onnx::ranges::DimRange {
            name: name.clone(),
            min: *min,
            max: *max,
            site: nnc::onnx::ranges::DimSite::Param,
        })
        .collect();
    let opts = ImportOptions {
        ranges,
        ..Default::default()
    };
    let imported = nnc::onnx::import_symbolic(&test.model, None, &opts);
    let graph = match imported {
        Err(e) => return expect(path, &text, test.expected, &format!("error: {e}"), "dump"),
        Ok(i) if !i.unsupported.is_empty() => {
            let why: Vec<String> = (i.unsupported.iter())
                .map(|u| format!("unsupported: node '{}' ({}): {}", u.node, u.op, u.reason))
                .collect();
            return expect(path, &text, test.expected, &why.join("\n"), "dump");
        }
        Ok(i) => i.graph,
    };
    let mut dump = graph.to_string();
    for c in &graph.dim_checks {
        let e = c.expr.written(&|s| graph.symbols.name(s).to_string());
        let rule = if c.zero { "= 0" } else { ">= 0" };
        dump += &format!("\ncheck {e} {rule}: {}", c.what);
    }
    // The library compiled over the symbols (after the passes `nnc compile` runs on
    // symbolic graphs), run at each value below; a refusal is part of the dump.
    let library = {
        let mut g = graph.clone();
        nnc::driver::symbolic_passes(&PassManager::default())
            .run(&mut g)
            .map_err(|e| format!("symbolic passes: {e}"))?;
        match runner::Compiled::new(&g) {
            Ok(compiled) => Some(dynamic::Dynamic { compiled, graph: g }),
            Err(e) => {
                let first = e.lines().next().unwrap_or_default().to_string();
                dump += &format!("\ncodegen: {first}");
                None
            }
        }
    };
    let picks = |min: usize, max: usize| {
        let mut v = vec![min, (min + max) / 2, max, ((min + max) / 2) | 1];
        v.dedup();
        v
    };
    let mut compared = 0;
    for k in 0..4 {
        let mut static_opts = ImportOptions::default();
        let mut values = vec![];
        for (name, min, max) in &test.ranges {
            let p = picks(*min, *max);
            let v = p[k.min(p.len() - 1)];
            static_opts.dims.insert(name.clone(), v);
            values.push(v as i64);
        }
        if graph.dim_checks.iter().any(|c| !c.holds_at(&values)) {
            // The library refuses these values (the static import may too).
            if nnc::ops::instantiate::instantiate(&graph, &values).is_ok() {
                return Err(format!(
                    "a check fails at {values:?}, yet the instance exists"
                ));
            }
            if let Some(lib) = &library {
                let (status, _) = lib.shapes(Some(&values));
                if status != nnc_runtime_abi::abi::NNC_ERR_DIMS_INCONSISTENT {
                    return Err(format!("shapes at {values:?} returned {status}"));
                }
                let inputs = random_inputs(&graph, seed);
                let outs: Vec<Vec<usize>> = (graph.outputs.iter())
                    .map(|o| vec![0; graph.ty(*o).rank()])
                    .collect();
                let (status, _) = lib.run(Some(&values), &inputs, None, &outs);
                if status != nnc_runtime_abi::abi::NNC_ERR_DIMS_INCONSISTENT {
                    return Err(format!("run at {values:?} returned {status}"));
                }
            }
            continue;
        }
        let fixed = import_model(&test.model, None, &static_opts)
            .map_err(|e| format!("static import at {values:?}: {e}"))?
            .graph;
        // The instance computes what the static import computes.
        let instance = nnc::ops::instantiate::instantiate(&graph, &values)
            .map_err(|e| format!("the instance at {values:?}: {e}"))?;
        let inputs = random_inputs(&fixed, seed + k as u64);
        let want = run_graph(&fixed, &inputs)?;
        let got = run_graph(&instance, &inputs)
            .map_err(|e| format!("the instance at {values:?}: {e}"))?;
        if got.len() != want.len() || want.is_empty() {
            return Err(format!("{} outputs against {}", got.len(), want.len()));
        }
        check_same(&want, &got).map_err(|e| format!("at {values:?}: {e}"))?;
        if let Some(lib) = &library {
            let (status, shapes) = lib.shapes(Some(&values));
            if status != 0 {
                return Err(format!("shapes at {values:?} returned {status}"));
            }
            let n_in = graph.inputs.len();
            let expected: Vec<Vec<usize>> = (fixed.inputs.iter().chain(&fixed.outputs))
                .map(|v| fixed.ty(*v).shape.clone())
                .collect();
            if shapes != expected {
                return Err(format!(
                    "shapes at {values:?}: {shapes:?}, expected {expected:?}"
                ));
            }
            let (status, ran) = lib.run(Some(&values), &inputs, None, &shapes[n_in..]);
            if status != 0 {
                return Err(format!("the library at {values:?} returned {status}"));
            }
            check_same(&want, &ran).map_err(|e| format!("the library at {values:?}: {e}"))?;
        }
        // Constants differ (a mask built at the largest extents); one ONNX node may
        // give several values its output's name, the last being the one bound to it.
        let mut by_name: std::collections::HashMap<&str, Vec<usize>> = Default::default();
        for (j, x) in fixed
            .values
            .iter()
            .enumerate()
            .filter(|(_, x)| x.constant.is_none())
        {
            by_name.entry(x.name.as_str()).or_default().push(j);
        }
        let last: std::collections::HashMap<&str, usize> = (graph.values.iter().enumerate())
            .map(|(i, v)| (v.name.as_str(), i))
            .collect();
        for (i, info) in graph.values.iter().enumerate() {
            if info.constant.is_some() {
                continue;
            }
            if last.get(info.name.as_str()) != Some(&i) {
                continue;
            }
            let Some(&v) = by_name.get(info.name.as_str()).and_then(|x| x.last()) else {
                continue;
            };
            let want = fixed.ty(nnc::ir::ValueId(v)).shape.clone();
            let got: Option<Vec<usize>> = (graph.ty(nnc::ir::ValueId(i)).dims().iter())
                .map(|d| d.eval_at(&values).map(|x| x as usize))
                .collect();
            if got.as_ref() != Some(&want) {
                return Err(format!(
                    "%{} at {values:?}: the expressions give {got:?}, the model imported there has {want:?}",
                    info.name
                ));
            }
            if let Some(e) = &info.dim_elements {
                let want = fixed.constant(nnc::ir::ValueId(v)).map(|t| t.to_i64_vec());
                let got: Option<Vec<i64>> = e.iter().map(|d| d.eval_at(&values)).collect();
                if want.is_some() && got != want {
                    return Err(format!(
                        "%{} at {values:?}: its elements give {got:?}, the model imported there has {want:?}",
                        info.name
                    ));
                }
            }
            compared += 1;
        }
    }
    if compared == 0 {
        return Err("no value compared with a static import".into());
    }
    expect(path, &text, test.expected, &dump, "dump")
}

/// Symbolic shape inference, in `tests/symbolic/*.nir` (a `; dims:` line, input axes
/// named by dims, the expected dump after `---`).
#[test]
fn symbolic_filetests() {
    run_dir("symbolic", run_symbolic_file);
}
