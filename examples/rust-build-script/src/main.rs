//! Runs the model build.rs compiled: the 1×1×8×8 ramp image of examples/c, on two
//! threads at once (one workspace each) and through a 2-thread pool, and checks the
//! class probabilities against examples/c/expected.txt; then three images in one call
//! of the library compiled for any batch of 1 to 4, against expected_batch.txt.

nnc_build::include_model!("tiny_cnn");
nnc_build::include_model!("tiny_cnn_batch");

const EXPECTED: &str = include_str!("../../c/expected.txt");
const EXPECTED_BATCH: &str = include_str!("../../c/expected_batch.txt");

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
    run_batch(&pool)
}

/// Three images through the one library that takes 1 to 4 (`tiny_cnn_batch::DIMS`).
fn run_batch(pool: &nnc_build::ThreadPool) -> Result<(), Box<dyn std::error::Error>> {
    let ramp: Vec<f32> = (0..64).map(|i| i as f32 / 64.0).collect();
    let mut images = ramp.clone();
    images.extend(ramp.iter().rev());
    images.extend([0.5f32; 64]);
    let mut probs = vec![0f32; 3 * 4];
    let mut workspace = tiny_cnn_batch::Workspace::with_pool(pool);
    workspace.run_dims(
        Some(pool),
        [3],
        &tiny_cnn_batch::DimsInputs { image: &images },
        &mut tiny_cnn_batch::DimsOutputs { probs: &mut probs },
    )?;
    let expected: Vec<f32> = EXPECTED_BATCH
        .split_whitespace()
        .map(|v| v.parse())
        .collect::<Result<_, _>>()?;
    for row in probs.chunks(4) {
        let line: Vec<String> = row.iter().map(|p| format!("{p:.6}")).collect();
        println!("{}", line.join(" "));
    }
    if probs.len() != expected.len()
        || probs
            .iter()
            .zip(&expected)
            .any(|(p, e)| (p - e).abs() > 1e-4)
    {
        return Err(format!("expected {expected:?}").into());
    }
    // A batch of 5 is outside the declared 1..4: refused before anything runs.
    let mut five = vec![0f32; 5 * 4];
    let refused = workspace.run_dims(
        None,
        [5],
        &tiny_cnn_batch::DimsInputs {
            image: &[0.0; 5 * 64],
        },
        &mut tiny_cnn_batch::DimsOutputs { probs: &mut five },
    );
    if refused != Err(tiny_cnn_batch::Error::Status(6)) {
        return Err(format!("a batch of 5 gave {refused:?}").into());
    }
    println!("batch output matches expected_batch.txt");
    Ok(())
}
