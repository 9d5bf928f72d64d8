//! `--int8-min-sqnr`: which layers go back to float32. A layer's own output SQNR says
//! little about what its quantization costs the model's outputs (noise that enters
//! early is amplified by every layer after it), so the layers are ranked by measuring
//! the outputs with each one left in float32.
//!
//! Recompiling the model for every trial would take minutes. Instead one *switchable*
//! graph is compiled: every candidate layer runs both in float32 and on its INT8
//! kernels, and a run-time input per layer, `e`, picks between them
//! (`y = y_f32 + e·(y_int8 − y_f32)`). A trial is then one pass over the samples.

use std::collections::HashMap;

use super::host::{HostModel, HostRunner};
use super::int8::{self, InputStats, Layer};
use super::QuantError;
use crate::codegen::WeightFormat;
use crate::ir::{DType, Graph, Node, Tensor, TensorType, ValueId};
use crate::ops::{BinaryOp, Op};
use crate::progress::Task;

/// Calibration samples the trials run over (the ranking needs no more).
const TRIAL_SAMPLES: usize = 32;

/// The graph whose candidate layers switch between float32 and INT8 at run time.
struct Switchable {
    model: Box<dyn HostModel>,
    layers: usize,
}

impl Switchable {
    fn build(
        float: &Graph,
        layers: &[Layer],
        (stats, weight_max): (&HashMap<ValueId, InputStats>, i8),
        runner: &dyn HostRunner,
    ) -> Result<Switchable, QuantError> {
        let mut g = float.clone();
        let old = std::mem::take(&mut g.nodes);
        let mut copies = vec![];
        for n in old {
            let Some(layer) = layers
                .iter()
                .find(|l| l.node == n.name && l.output == n.outputs[0])
            else {
                g.nodes.push(n);
                continue;
            };
            let ty = g.ty(layer.output).clone();
            let y_f = g.add_value(format!("{}/float32", n.name), ty.clone(), None);
            let y_q = g.add_value(format!("{}/int8", n.name), ty.clone(), None);
            let switch = g.add_value(
                format!("{}/switch", n.name),
                TensorType::new(DType::F32, vec![1]),
                None,
            );
            g.inputs.push(switch);
            let copy = Node {
                name: format!("{}#int8", n.name),
                outputs: vec![y_q],
                ..n.clone()
            };
            copies.push(Layer {
                node: copy.name.clone(),
                output: y_q,
                ..layer.clone()
            });
            let mix = |g: &mut Graph, what: &str, op: BinaryOp, a, b, out: Option<ValueId>| {
                let out = out
                    .unwrap_or_else(|| g.add_value(format!("{}/{what}", n.name), ty.clone(), None));
                Node {
                    name: format!("{}/{what}", n.name),
                    onnx_op: n.onnx_op.clone(),
                    op: Op::Binary(op),
                    inputs: vec![Some(a), Some(b)],
                    outputs: vec![out],
                }
            };
            let diff = mix(&mut g, "int8_error", BinaryOp::Sub, y_q, y_f, None);
            let scaled = mix(
                &mut g,
                "switched_error",
                BinaryOp::Mul,
                diff.outputs[0],
                switch,
                None,
            );
            let out = mix(
                &mut g,
                "switched",
                BinaryOp::Add,
                y_f,
                scaled.outputs[0],
                Some(layer.output),
            );
            let mut float_node = n;
            float_node.outputs[0] = y_f;
            g.nodes.extend([float_node, copy, diff, scaled, out]);
        }
        int8::quantize(&mut g, &copies, stats, weight_max).map_err(QuantError::Rewrite)?;
        Ok(Switchable {
            model: runner
                .load(&g, WeightFormat::F32)
                .map_err(|e| QuantError::host("sensitivity model", e))?,
            layers: layers.len(),
        })
    }

    /// The outputs for `sample` with layer `i` on INT8 where `int8[i]`.
    fn run(&self, sample: &[Tensor], int8: &[bool]) -> Result<Vec<Tensor>, QuantError> {
        debug_assert_eq!(int8.len(), self.layers);
        let mut inputs = sample.to_vec();
        inputs.extend(
            int8.iter()
                .map(|&on| Tensor::from_vec(&[1], vec![if on { 1f32 } else { 0.0 }])),
        );
        self.model
            .run(&inputs)
            .map_err(|e| QuantError::host("sensitivity trial", e))
    }
}

/// The candidate layers in the order they go back to float32 (the one whose float32
/// build raises the outputs' SQNR most first), and how many of them the trials say
/// must, for every output to reach `target_db` over the samples.
pub fn plan(
    float: &Graph,
    layers: &[Layer],
    stats: &HashMap<ValueId, InputStats>,
    samples: &[Vec<Tensor>],
    (target_db, weight_max): (f64, i8),
    host: &super::host::Int8Host,
) -> Result<(Vec<String>, usize), QuantError> {
    let samples = &samples[..samples.len().min(TRIAL_SAMPLES)];
    let model = Switchable::build(float, layers, (stats, weight_max), host.runner)?;
    let all_float = vec![false; layers.len()];
    let reference: Vec<Vec<Tensor>> = samples
        .iter()
        .map(|s| model.run(s, &all_float))
        .collect::<Result<_, _>>()?;
    // The lowest output SQNR over the samples with `int8` switched on.
    let trial = |int8: &[bool]| -> Result<f64, QuantError> {
        let outputs = reference.first().map_or(0, Vec::len);
        let (mut signal, mut noise) = (vec![0f64; outputs], vec![0f64; outputs]);
        for (s, want) in samples.iter().zip(&reference) {
            for (o, (got, want)) in model.run(s, int8)?.iter().zip(want).enumerate() {
                for (a, b) in want.to_f64_vec().iter().zip(got.to_f64_vec()) {
                    signal[o] += a * a;
                    noise[o] += (a - b) * (a - b);
                }
            }
        }
        Ok(signal
            .iter()
            .zip(&noise)
            .map(|(s, n)| {
                if *n == 0.0 {
                    f64::INFINITY
                } else {
                    10.0 * (s / n).log10()
                }
            })
            .fold(f64::INFINITY, f64::min))
    };
    host.progress.start(Task::Sensitivity, layers.len());
    let mut gains = Vec::with_capacity(layers.len());
    for i in 0..layers.len() {
        let mut int8 = vec![true; layers.len()];
        int8[i] = false;
        gains.push((i, trial(&int8)?));
        host.progress.step(Task::Sensitivity);
    }
    host.progress.finish(Task::Sensitivity);
    gains.sort_by(|a, b| b.1.total_cmp(&a.1));
    let order: Vec<usize> = gains.iter().map(|&(i, _)| i).collect();
    let keeping = |k: usize| {
        let mut int8 = vec![true; layers.len()];
        order[..k].iter().for_each(|&i| int8[i] = false);
        int8
    };
    // The smallest prefix of `order` that meets the target (SQNR grows, near enough
    // monotonically, as layers go back): k = 0 fails (the caller checked), k = all
    // leaves the model float32.
    let (mut fails, mut meets) = (0, layers.len());
    while meets - fails > 1 {
        let mid = (fails + meets) / 2;
        if trial(&keeping(mid))? >= target_db {
            meets = mid;
        } else {
            fails = mid;
        }
    }
    Ok((
        order.iter().map(|&i| layers[i].node.clone()).collect(),
        meets,
    ))
}
