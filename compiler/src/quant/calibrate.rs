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
    fn observe(&mut self, t: &Tensor, channel_axis: usize) {
        let values = floats(t);
        self.range.observe(&values);
        self.means.observe(&values, t.shape(), channel_axis);
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
                observers[i].observe(&sample[pos], *axis);
            }
        }
        if let Some(m) = &model {
            let outs = m
                .run(sample)
                .map_err(|e| QuantError::host(format!("calibration sample {k}"), e))?;
            for ((i, _), t) in computed.iter().zip(&outs) {
                observers[*i].observe(t, values[*i].1);
            }
        }
        progress.step(Task::Calibration);
    }
    progress.finish(Task::Calibration);
    Ok(observers)
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
