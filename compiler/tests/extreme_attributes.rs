//! Extreme integer attributes on valid models: every single-node case of the ONNX node
//! suite, with each int and ints attribute its schema declares set, in turn, to
//! values at and past the edges of 64 bits (`group = 2^63 - 1`, `strides = [2^62,
//! 2^62]`, `k = -2^40`, ...), is imported, run through the default passes and compiled
//! in memory. Each case must compile or be refused: a panic (an unchecked product or
//! sum in shape inference, an index from an attribute) fails the test and names the
//! case. `degenerate_ops.rs` draws operands at random; this keeps the operands valid so
//! that the attribute reaches the arithmetic behind the first checks.
//!
//! Needs the node suite (Python with onnx 1.23.2, see `common/node_suite.rs`); the
//! schemas' attribute lists come from the same package.

#[path = "common/node_suite.rs"]
mod node_suite;
#[path = "common/tools.rs"]
mod tools;

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nnc::codegen::{compile_graph, CompileOptions, Target};
use nnc::onnx::proto::{attribute_type, AttributeProto, ModelProto};
use nnc::onnx::{import_model, ImportOptions};
use nnc::passes::PassManager;
use prost::Message;

/// Seconds one mutant may take to compile before it counts as a hang.
const CASE_SECONDS: u64 = 60;

/// The values each attribute takes: past i64's edges, products that overflow, negative
/// where only counts make sense, and a small value that is wrong for most attributes.
const EXTREMES: &[i64] = &[i64::MAX, i64::MIN, 1 << 62, 1 << 40, -(1 << 40), -1, 3];

/// For every op of the default domain, its int (`false`) and ints (`true`) attributes,
/// from onnx's schemas (every opset's).
fn int_attributes() -> Option<BTreeMap<String, Vec<(String, bool)>>> {
    let script = "import onnx.defs\n\
        seen = set()\n\
        for s in onnx.defs.get_all_schemas_with_history():\n\
        \x20   if s.domain not in ('', 'ai.onnx'): continue\n\
        \x20   for n, a in s.attributes.items():\n\
        \x20       t = a.type.name\n\
        \x20       if t in ('INT', 'INTS') and (s.name, n) not in seen:\n\
        \x20           seen.add((s.name, n))\n\
        \x20           print(s.name, n, int(t == 'INTS'))";
    let out = Command::new("python3").args(["-c", script]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let mut ops: BTreeMap<String, Vec<(String, bool)>> = BTreeMap::new();
    for line in String::from_utf8(out.stdout).ok()?.lines() {
        if let [op, name, ints] = line.split(' ').collect::<Vec<_>>()[..] {
            ops.entry(op.to_string())
                .or_default()
                .push((name.to_string(), ints == "1"));
        }
    }
    Some(ops)
}

/// The node-suite cases to mutate: every single-node case of the default domain.
fn single_node_cases(node_dir: &Path) -> Vec<(String, ModelProto)> {
    let mut names: Vec<String> = std::fs::read_dir(node_dir)
        .expect("node suite")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    names
        .into_iter()
        .filter_map(|name| {
            let bytes = std::fs::read(node_dir.join(&name).join("model.onnx")).ok()?;
            let model = ModelProto::decode(bytes.as_slice()).ok()?;
            let graph = model.graph.as_ref()?;
            let single =
                graph.node.len() == 1 && matches!(graph.node[0].domain.as_str(), "" | "ai.onnx");
            single.then_some((name, model))
        })
        .collect()
}

/// The attribute `name` set to `value` (replacing it if present); an ints attribute
/// keeps its length (or takes 2 entries), all set to `value`, or only its first.
fn with_attribute(
    model: &ModelProto,
    name: &str,
    ints: bool,
    value: i64,
    first_only: bool,
) -> ModelProto {
    let mut m = model.clone();
    let node = &mut m.graph.as_mut().expect("graph").node[0];
    let old = node.attribute.iter().position(|a| a.name == name);
    let mut attr = old
        .map(|i| node.attribute.remove(i))
        .unwrap_or_else(|| AttributeProto {
            name: name.to_string(),
            ..Default::default()
        });
    if ints {
        attr.r#type = attribute_type::INTS;
        if attr.ints.is_empty() {
            attr.ints = vec![1, 1];
        }
        if first_only {
            attr.ints[0] = value;
        } else {
            attr.ints.iter_mut().for_each(|v| *v = value);
        }
    } else {
        attr.r#type = attribute_type::INT;
        attr.i = value;
    }
    node.attribute.push(attr);
    m
}

/// Imports, optimizes and compiles `model` in memory; `true` if it compiled.
fn compiles(model: &ModelProto) -> bool {
    let Ok(imported) = import_model(model, None, &ImportOptions::default()) else {
        return false;
    };
    if !imported.unsupported.is_empty() {
        return false;
    }
    let mut graph = imported.graph;
    if PassManager::default().run(&mut graph).is_err() {
        return false;
    }
    compile_graph(&graph, &CompileOptions::new(Target::host())).is_ok()
}

#[test]
fn extreme_int_attributes_never_panic() {
    let Some(suites) = node_suite::suite_dir() else {
        return;
    };
    let Some(schemas) = int_attributes() else {
        tools::skip("python3 could not list onnx's schemas");
        return;
    };
    let cases = single_node_cases(&suites.join("node"));
    assert!(cases.len() > 150, "only {} node cases sampled", cases.len());
    // The hook keeps where the last panic happened, for the report.
    static LOCATION: Mutex<String> = Mutex::new(String::new());
    std::panic::set_hook(Box::new(|info| {
        if let Some(l) = info.location() {
            *LOCATION.lock().unwrap_or_else(|p| p.into_inner()) = l.to_string();
        }
    }));
    // A case still running after CASE_SECONDS is a hang (a loop over an attribute's
    // value): the watchdog names it and ends the test process.
    let current: &'static Mutex<(String, Instant)> =
        Box::leak(Box::new(Mutex::new((String::new(), Instant::now()))));
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_secs(1));
        let (case, since) = current.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if since.elapsed() > Duration::from_secs(CASE_SECONDS) {
            eprintln!("hang: {case} ran for more than {CASE_SECONDS} s");
            std::process::exit(1);
        }
    });
    let verbose = std::env::var_os("NNC_TEST_VERBOSE").is_some();
    let start = Instant::now();
    let (mut total, mut compiled, mut panics) = (0usize, 0usize, Vec::new());
    for (case, model) in &cases {
        let op = &model.graph.as_ref().expect("graph").node[0].op_type;
        for (name, ints) in schemas.get(op).map(Vec::as_slice).unwrap_or_default() {
            for &value in EXTREMES {
                for first_only in [false, true].into_iter().take(1 + usize::from(*ints)) {
                    let mutant = with_attribute(model, name, *ints, value, first_only);
                    total += 1;
                    let label =
                        format!("{case}: {op} with {name} = {value} (first only: {first_only})");
                    if verbose {
                        // An abort (an allocation past memory) ends the process: this
                        // names the case that caused it.
                        eprintln!("{label}");
                    }
                    *current.lock().unwrap_or_else(|p| p.into_inner()) = (label, Instant::now());
                    match catch_unwind(AssertUnwindSafe(|| compiles(&mutant))) {
                        Ok(true) => compiled += 1,
                        Ok(false) => {}
                        Err(payload) => {
                            let message = (payload.downcast_ref::<String>().cloned())
                                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                                .unwrap_or_default();
                            let entries = if first_only {
                                "its first entry"
                            } else {
                                "every entry"
                            };
                            let at = LOCATION.lock().unwrap_or_else(|p| p.into_inner()).clone();
                            panics.push(format!(
                                "{case}: {op} with {name} = {value} ({}): {message} at {at}",
                                if *ints { entries } else { "int" }
                            ));
                        }
                    }
                }
            }
        }
    }
    let _ = std::panic::take_hook();
    eprintln!(
        "{total} mutants of {} node-suite cases in {:.1} s: {compiled} compiled, {} refused, {} panicked",
        cases.len(),
        start.elapsed().as_secs_f64(),
        total - compiled - panics.len(),
        panics.len()
    );
    assert!(total > 2000, "only {total} mutants");
    assert!(
        panics.is_empty(),
        "{} of {total} mutants panicked:\n{}",
        panics.len(),
        panics.join("\n")
    );
}
