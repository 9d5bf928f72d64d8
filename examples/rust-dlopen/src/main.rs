//! `nnc-example-dlopen LIB.so [NAME] [--expect FILE]`: loads a model compiled by
//! `nnc compile ... -o LIB.so [--name NAME]` at run time, prints what `model_info`
//! says about it, runs it on a ramp (element i of each float32 input is i / count)
//! and prints the first output; with `--expect`, checks it against the numbers in
//! FILE (within 1e-4).

use nnc_runtime_abi::loader::{Library, Tensor, TensorMut};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let expect = match args.iter().position(|a| a == "--expect") {
        Some(i) => {
            let file = args.get(i + 1).ok_or("--expect needs a file")?.clone();
            args.drain(i..i + 2);
            Some(std::fs::read_to_string(file)?)
        }
        None => None,
    };
    let path = args
        .first()
        .ok_or("usage: nnc-example-dlopen LIB.so [NAME] [--expect FILE]")?;
    let model = Library::open(path, args.get(1).map(String::as_str))?;
    for t in model.inputs() {
        println!("input  {t}");
    }
    for t in model.outputs() {
        println!("output {t}");
    }
    println!("workspace {} bytes", model.workspace_size());

    let inputs: Vec<Vec<f32>> = model
        .inputs()
        .iter()
        .map(|t| {
            let n = t.element_count();
            (0..n).map(|i| i as f32 / n as f32).collect()
        })
        .collect();
    let mut outputs: Vec<Vec<f32>> = model
        .outputs()
        .iter()
        .map(|t| vec![0.0; t.element_count()])
        .collect();
    // Typed slices: the loader checks each one's dtype and size against model_info.
    let ins: Vec<Tensor> = inputs.iter().map(|v| Tensor::from(&v[..])).collect();
    let mut outs: Vec<TensorMut> = outputs
        .iter_mut()
        .map(|v| TensorMut::from(&mut v[..]))
        .collect();
    let mut workspace = model.workspace();
    model.run(&mut workspace, &ins, &mut outs)?;
    drop(outs);

    let first = outputs.first().ok_or("the model has no outputs")?;
    let line: Vec<String> = first.iter().map(|v| format!("{v:.6}")).collect();
    println!("{}", line.join(" "));
    if let Some(text) = expect {
        let want: Vec<f32> = text
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()?;
        let off =
            first.len() != want.len() || first.iter().zip(&want).any(|(a, b)| (a - b).abs() > 1e-4);
        if off {
            return Err(format!("expected {want:?}").into());
        }
        println!("output matches");
    }
    Ok(())
}
