//! Node forms that PyTorch's ONNX exporter emits and the spec (or nnc) did not expect,
//! found by `benches/exported_models.py`. Each small model is imported, optimized,
//! compiled for the host and run, and compared with known values computed here and
//! with nnc's reference interpreter on the imported graph.

#[path = "common/models.rs"]
mod models;
#[path = "common/runner.rs"]
mod runner;
#[path = "common/tools.rs"]
mod tools;

use models::{Attr, ModelBuilder};
use nnc::codegen::Target;
use nnc::interp::run_graph;
use nnc::ir::{Graph, Tensor};
use nnc::onnx::proto::ModelProto;
use nnc::onnx::{import_model, ImportOptions};
use prost::Message;

fn import(bytes: &[u8]) -> Graph {
    let model = ModelProto::decode(bytes).expect("a model");
    import_model(&model, None, &ImportOptions::default())
        .expect("imports")
        .graph
}

/// The interpreter's and the compiled graph's outputs on `inputs`.
fn run_both(g: &Graph, inputs: &[Tensor]) -> (Vec<Tensor>, Vec<Tensor>) {
    let interp = run_graph(g, inputs).expect("interpreter runs");
    let mut optimized = g.clone();
    nnc::passes::optimize(&mut optimized).expect("passes run");
    let compiled =
        runner::run_compiled(&optimized, inputs, Target::host()).expect("compiles and runs");
    (interp, compiled)
}

fn assert_close(got: &Tensor, want_shape: &[usize], want: &[f64], what: &str) {
    assert_eq!(got.ty().shape, want_shape, "{what}: shape");
    let got = got.to_f64_vec();
    let scale = want.iter().fold(1e-30f64, |m, v| m.max(v.abs()));
    let err = got
        .iter()
        .zip(want)
        .fold(0f64, |m, (a, b)| m.max((a - b).abs()));
    assert!(
        err / scale <= 1e-5,
        "{what}: max error {err}, scale {scale}"
    );
}

/// torch.stft(x, n_fft, hop, window, center=False, return_complex=False) exported at
/// opset 17 gives a real signal of shape [batch, length] with no trailing complex axis;
/// onnxruntime reads it as [batch, length, 1]. Both forms must give the one-sided
/// windowed DFT of every frame.
#[test]
fn stft_of_a_rank_2_real_signal() {
    let (batch, length, frame, step) = (2usize, 40usize, 16usize, 6usize);
    let frames = 1 + (length - frame) / step;
    let bins = frame / 2 + 1;
    let hann: Vec<f32> = (0..frame)
        .map(|j| (0.5 - 0.5 * (2.0 * std::f64::consts::PI * j as f64 / frame as f64).cos()) as f32)
        .collect();
    let mut rng = models::Rng::new(7);
    let signal = rng.vec(batch * length, 1.0);

    // Known values: X[b, f, k] = Σ_j w_j x[b, f·step + j] e^{-2πi jk/frame}.
    let mut want = Vec::with_capacity(batch * frames * bins * 2);
    for b in 0..batch {
        for f in 0..frames {
            for k in 0..bins {
                let (mut re, mut im) = (0f64, 0f64);
                for j in 0..frame {
                    let v = hann[j] as f64 * signal[b * length + f * step + j] as f64;
                    let a = -2.0 * std::f64::consts::PI * (j * k) as f64 / frame as f64;
                    re += v * a.cos();
                    im += v * a.sin();
                }
                want.extend([re, im]);
            }
        }
    }
    let want_shape = [batch, frames, bins, 2];

    for shape in [vec![batch, length], vec![batch, length, 1]] {
        let mut m = ModelBuilder::new(1);
        let x = m.input("x", &shape);
        let step_t = m.int_init(&[step as i64]);
        let window = m.float_init(&[frame], hann.clone());
        let frame_t = m.int_init(&[frame as i64]);
        let y = m.node(
            "STFT",
            &[&x, &step_t, &window, &frame_t],
            vec![("onesided", Attr::I(1))],
        );
        m.output(&y);
        let g = import(&m.encode());
        let input = Tensor::from_vec(&shape, signal.clone());
        let (interp, compiled) = run_both(&g, &[input]);
        assert_close(
            &interp[0],
            &want_shape,
            &want,
            &format!("interpreter, signal {shape:?}"),
        );
        assert_close(
            &compiled[0],
            &want_shape,
            &want,
            &format!("compiled, signal {shape:?}"),
        );
    }
}
