//! Runs the model build.rs compiled: the 1×1×8×8 ramp image of examples/c, on two
//! threads at once (one workspace each) and through a 2-thread pool, and checks the
//! class probabilities against examples/c/expected.txt.

nnc_build::include_model!("tiny_cnn");

const EXPECTED: &str = include_str!("../../c/expected.txt");

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let image: Vec<f32> = (0..64).map(|i| i as f32 / 64.0).collect();
    // Slices are checked against the input's shape once, here.
    let inputs = tiny_cnn::Inputs::from_slices(&image)?;
    let mut results: Vec<tiny_cnn::OwnedOutputs> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(move || {
                    let mut workspace = tiny_cnn::Workspace::new();
                    workspace.infer(&inputs)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("worker ran"))
            .collect::<Result<_, _>>()
    })?;
    // Once more through `run` with a caller-owned pool of 2 threads (one pool can
    // serve every model and thread of a program); the outputs are the same.
    let pool = nnc_build::ThreadPool::new(2)?;
    let mut workspace = tiny_cnn::Workspace::with_pool(&pool);
    let mut pooled = tiny_cnn::OwnedOutputs::new();
    workspace.run_with(&pool, &inputs, &mut pooled.as_outputs())?;
    results.push(pooled);
    let expected: Vec<f32> = EXPECTED
        .split_whitespace()
        .map(|v| v.parse())
        .collect::<Result<_, _>>()?;
    for out in &results {
        let probs: &[f32] = &out.probs[..];
        let line: Vec<String> = probs.iter().map(|p| format!("{p:.6}")).collect();
        println!("{}", line.join(" "));
        let off = probs
            .iter()
            .zip(&expected)
            .any(|(p, e)| (p - e).abs() > 1e-4);
        if off || probs.len() != expected.len() {
            return Err(format!("expected {expected:?}").into());
        }
    }
    println!("output matches expected.txt");
    Ok(())
}
