//! Triage of a structure-aware fuzz input: prints the model it stands for (its nodes,
//! and the graph nnc imports from it) and writes it as an .onnx file. Given a corpus
//! folder instead, counts how far its models get (imported, optimized, compiled).
//!
//!     cargo run --release -p nnc-fuzz-harness --example show_case -- CRASH_FILE [OUT.onnx]
//!     cargo run --release -p nnc-fuzz-harness --example show_case -- CORPUS_DIR

use arbitrary::Unstructured;
use nnc::onnx::proto::AttributeProto;
use nnc_fuzz_harness::random_model::random_model;
use prost::Message;

fn attribute(a: &AttributeProto) -> String {
    let value = match a.r#type {
        1 => format!("{}", a.f),
        2 => format!("{}", a.i),
        3 => String::from_utf8_lossy(&a.s).into_owned(),
        7 => format!("{:?}", a.ints),
        _ => format!(
            "{:?}",
            a.t.as_ref().map(|t| (&t.dims, t.data_type, &t.raw_data))
        ),
    };
    format!("{}={value}", a.name)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        eprintln!("usage: show_case CRASH_FILE [OUT.onnx]");
        std::process::exit(2);
    };
    if std::path::Path::new(path).is_dir() {
        return corpus_stages(path);
    }
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let model = random_model(&mut Unstructured::new(&data));
    let opset = model.opset_import.first().map_or(0, |o| o.version);
    println!("opset {opset}");
    let graph = model
        .graph
        .as_ref()
        .expect("the generator always makes a graph");
    for i in &graph.input {
        println!("input {i:?}");
    }
    for t in &graph.initializer {
        println!(
            "initializer {} dtype {} dims {:?} raw {:?}",
            t.name, t.data_type, t.dims, t.raw_data
        );
    }
    for n in &graph.node {
        let attrs: Vec<String> = n.attribute.iter().map(attribute).collect();
        println!(
            "{} {}({:?}) -> {:?} {attrs:?}",
            n.name, n.op_type, n.input, n.output
        );
    }
    let outputs: Vec<&str> = graph.output.iter().map(|o| o.name.as_str()).collect();
    println!("outputs {outputs:?}");
    match nnc::onnx::import_model(&model, None, &Default::default()) {
        Ok(imported) => println!("imported:\n{}", imported.graph),
        Err(e) => println!("import refuses it: {e}"),
    }
    if let Some(out) = args.get(2) {
        std::fs::write(out, model.encode_to_vec()).unwrap_or_else(|e| panic!("{out}: {e}"));
    }
}

/// How many of a corpus's models import, pass the default passes and compile (a
/// panic, a finding, counts as the stage failing: this is a statistic, not a test).
fn corpus_stages(dir: &str) {
    use nnc::codegen::{compile_graph, CompileOptions, Target};
    std::panic::set_hook(Box::new(|_| {}));
    let mut reached = [0usize; 4];
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{dir}: {e}"));
    for entry in entries.flatten() {
        let Ok(data) = std::fs::read(entry.path()) else {
            continue;
        };
        let stages = std::panic::catch_unwind(|| {
            let model = random_model(&mut Unstructured::new(&data));
            if nnc_fuzz_harness::imported_graph(&model).is_none() {
                return 1;
            }
            let Some(graph) = nnc_fuzz_harness::optimized_graph(&model) else {
                return 2;
            };
            match compile_graph(&graph, &CompileOptions::new(Target::host())) {
                Ok(_) => 4,
                Err(_) => 3,
            }
        })
        .unwrap_or(1);
        for r in &mut reached[..stages] {
            *r += 1;
        }
    }
    let [total, imported, optimized, compiled] = reached;
    println!("{total} models: {imported} imported, {optimized} optimized, {compiled} compiled");
}
