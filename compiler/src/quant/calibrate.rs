//! Calibration: the float32 graph runs over every sample with the tensors to be
//! quantized exposed as outputs, and each tensor's values fold into a
//! [`RangeObserver`] and, along the axis its layer reads as channels, into
//! [`ChannelMeans`] (for bias correction). The graph runs compiled for this machine
//! ([`HostRunner`]), so hundreds of samples of a ResNet take seconds; each sample is a
//! step of [`Task::Calibration`].

use super::bias_correction::ChannelMeans;
use super::host::HostRunner;
use super::ranges::RangeObserver;
use super::QuantError;
use crate::codegen::WeightFormat;
use crate::ir::{DType, Graph, Tensor, ValueId};
use crate::progress::{Progress, Task};

/// What calibration learnt about one tensor.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    pub range: RangeObserver,
    pub means: ChannelMeans,
}

impl Observed {
    /// Folds `t` in; a non-finite value is refused (its position returned), since one
    /// inf or NaN would make the range, and every scale derived from it, meaningless.
    fn observe(&mut self, t: &Tensor, channel_axis: usize) -> Result<(), (usize, f32)> {
        let values = floats(t);
        if let Some(at) = values.iter().position(|v| !v.is_finite()) {
            return Err((at, values[at]));
        }
        self.range.observe(&values);
        self.means.observe(&values, t.shape(), channel_axis);
        Ok(())
    }
}

/// Observers for `values` (float32 tensors of `graph`, with the axis of each that holds
/// its channels) over `samples` (each one tensor per graph input, in order).
pub fn observe(
    graph: &Graph,
    values: &[(ValueId, usize)],
    samples: &[Vec<Tensor>],
    runner: &dyn HostRunner,
    progress: &dyn Progress,
) -> Result<Vec<Observed>, QuantError> {
    let mut observers = vec![Observed::default(); values.len()];
    // Graph inputs are observed from the samples; everything else is computed.
    let computed: Vec<(usize, ValueId)> = values
        .iter()
        .enumerate()
        .filter(|(_, (v, _))| !graph.inputs.contains(v))
        .map(|(i, (v, _))| (i, *v))
        .collect();
    let model = if computed.is_empty() {
        None
    } else {
        let mut g = graph.clone();
        g.outputs = computed.iter().map(|(_, v)| *v).collect();
        Some(
            runner
                .load(&g, WeightFormat::F32)
                .map_err(|e| QuantError::host("calibration model", e))?,
        )
    };
    progress.start(Task::Calibration, samples.len());
    for (k, sample) in samples.iter().enumerate() {
        for (i, (v, axis)) in values.iter().enumerate() {
            if let Some(pos) = graph.inputs.iter().position(|x| x == v) {
                (observers[i].observe(&sample[pos], *axis))
                    .map_err(|bad| non_finite(graph, *v, k, bad, "holds"))?;
            }
        }
        if let Some(m) = &model {
            let outs = m
                .run(sample)
                .map_err(|e| QuantError::host(format!("calibration sample {k}"), e))?;
            for ((i, v), t) in computed.iter().zip(&outs) {
                (observers[*i].observe(t, values[*i].1)).map_err(|bad| {
                    non_finite(graph, *v, k, bad, "makes the float32 model compute")
                })?;
            }
        }
        progress.step(Task::Calibration);
    }
    progress.finish(Task::Calibration);
    Ok(observers)
}

/// The error for a non-finite value `(element, value)` of `v` in sample `k`.
fn non_finite(
    graph: &Graph,
    v: ValueId,
    k: usize,
    (at, value): (usize, f32),
    how: &str,
) -> QuantError {
    let producer = (graph.nodes.iter())
        .find(|n| n.outputs.contains(&v))
        .map(|n| format!(" (the output of node '{}', {})", n.name, n.onnx_op))
        .unwrap_or_default();
    QuantError::Calibration(
        format!(
            "calibration sample {k} {how} {value} in '{}'{producer} at element {at}: \
             INT8 ranges need finite values (check the samples' scale)",
            graph.value(v).name
        )
        .into(),
    )
}

fn floats(t: &Tensor) -> Vec<f32> {
    match t {
        Tensor::F32(a) => a.iter().copied().collect(),
        other => other
            .cast(DType::F32)
            .to_f64_vec()
            .iter()
            .map(|&x| x as f32)
            .collect(),
    }
}
