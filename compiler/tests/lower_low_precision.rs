//! CastCodes code generation (float32 ↔ float8, float4, 4- and 2-bit integers): every
//! format, saturating or not, every float8e8m0 rounding mode, compiled for the host and
//! compared bit for bit with the interpreter (`low_precision::Format::encode/decode`,
//! which `low_precision_formats.rs` checks against onnx's reference); a sample also
//! runs on aarch64 under qemu.
//!
//! Run with `cargo test -p nnc --test lower_low_precision --release`.

#[path = "common/graphs.rs"]
mod graphs;
#[path = "common/runner.rs"]
mod runner;
#[path = "common/tools.rs"]
mod tools;

use graphs::Rng;
use nnc::interp::run_graph;
use nnc::ir::low_precision::E8m0Rounding;
use nnc::ir::{DType, Graph, Node, Tensor, TensorType};
use nnc::ops::{infer_types, Op};
use runner::{aarch64_harness, run_on_aarch64, Compiled};

const TYPES: [DType; 10] = [
    DType::F8E4M3FN,
    DType::F8E4M3FNUZ,
    DType::F8E5M2,
    DType::F8E5M2FNUZ,
    DType::U4,
    DType::I4,
    DType::F4E2M1,
    DType::F8E8M0,
    DType::U2,
    DType::I2,
];

fn cast_graph(from: TensorType, to: DType, saturate: bool, rounding: E8m0Rounding) -> Graph {
    let mut g = Graph::default();
    let x = g.add_value("x".into(), from.clone(), None);
    g.inputs.push(x);
    let op = Op::CastCodes {
        to,
        saturate,
        rounding,
    };
    let ty = infer_types(&op, &[Some(from)]).unwrap().remove(0);
    let y = g.add_value("y".into(), ty, None);
    g.outputs.push(y);
    g.nodes.push(Node {
        name: "cast".into(),
        onnx_op: "Cast".into(),
        op,
        inputs: vec![Some(x)],
        outputs: vec![y],
    });
    g
}

/// Every float16 value as float32, the specials, values just around powers of two
/// and halves, and random bit patterns: an odd count, so packed outputs end in a
/// partial byte.
fn probe_values() -> Vec<f32> {
    let mut v: Vec<f32> = (0..=u16::MAX)
        .map(|h| half::f16::from_bits(h).to_f32())
        .collect();
    v.extend([
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MAX,
        f32::MIN,
        f32::MIN_POSITIVE,
        1e-45,
    ]);
    for e in -140..130 {
        let p = 2f32.powi(e);
        for m in [1.0f32, 1.25, 1.5, 1.75] {
            let x = p * m;
            v.extend([
                x,
                -x,
                f32::from_bits(x.to_bits().wrapping_add(1)),
                f32::from_bits(x.to_bits().wrapping_sub(1)),
            ]);
        }
    }
    let mut rng = Rng::new(0x2545_f491_4f6c_dd1d);
    v.extend((0..20_001).map(|_| f32::from_bits(rng.bits32())));
    if v.len().is_multiple_of(2) {
        v.push(0.75);
    }
    v
}

fn same_bits(a: &Tensor, b: &Tensor) -> bool {
    a.dtype() == b.dtype() && a.shape() == b.shape() && a.to_le_bytes() == b.to_le_bytes()
}

/// float32 → every format and back, on the host: the codes (packed bytes) and the
/// decoded float32 bits equal the interpreter's.
#[test]
fn cast_codes_match_the_interpreter() {
    let values = probe_values();
    let x = Tensor::from_vec(&[values.len()], values.clone());
    for to in TYPES {
        for saturate in [true, false] {
            let modes: &[E8m0Rounding] = if to == DType::F8E8M0 {
                &[E8m0Rounding::Up, E8m0Rounding::Down, E8m0Rounding::Nearest]
            } else {
                &[E8m0Rounding::Up]
            };
            for &rounding in modes {
                let g = cast_graph(x.ty(), to, saturate, rounding);
                let want = run_graph(&g, std::slice::from_ref(&x)).unwrap().remove(0);
                let got = Compiled::new(&g)
                    .unwrap()
                    .run(&g, std::slice::from_ref(&x))
                    .unwrap()
                    .remove(0);
                assert!(
                    same_bits(&got, &want),
                    "{to} saturate {saturate} {rounding:?}: first difference at code {:?}",
                    first_difference(&got, &want)
                );
            }
        }
        // Decoding: every code, in an odd count.
        let bits = to.low_precision().unwrap().bits();
        let codes: Vec<u8> = (0..(1u32 << bits) * 3 + 1)
            .map(|c| (c % (1 << bits)) as u8)
            .collect();
        let codes = Tensor::from_vec(&[codes.len()], codes).with_codes_as(to);
        let g = cast_graph(codes.ty(), DType::F32, true, E8m0Rounding::Up);
        let want = run_graph(&g, std::slice::from_ref(&codes))
            .unwrap()
            .remove(0);
        let got = Compiled::new(&g)
            .unwrap()
            .run(&g, std::slice::from_ref(&codes))
            .unwrap()
            .remove(0);
        assert!(
            same_bits(&got, &want),
            "{to} → float32 at {:?}",
            first_difference(&got, &want)
        );
    }
}

fn first_difference(a: &Tensor, b: &Tensor) -> Option<usize> {
    let (a, b) = (a.to_le_bytes(), b.to_le_bytes());
    a.iter().zip(&b).position(|(x, y)| x != y)
}

/// The same kernels on aarch64 (qemu), on a sample of the values.
#[test]
fn cast_codes_on_aarch64() {
    let Some(harness) = aarch64_harness() else {
        return;
    };
    let values: Vec<f32> = probe_values().into_iter().step_by(7).collect();
    let x = Tensor::from_vec(&[values.len()], values);
    for to in TYPES {
        let g = cast_graph(x.ty(), to, false, E8m0Rounding::Nearest);
        let want = run_graph(&g, std::slice::from_ref(&x)).unwrap().remove(0);
        let got = run_on_aarch64(harness, &g, std::slice::from_ref(&x), None)
            .unwrap()
            .remove(0);
        assert!(same_bits(&got, &want), "{to} on aarch64");
    }
}
