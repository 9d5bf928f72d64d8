//! `--quantize int8`: calibration data → ranges → the INT8 rewrite → the accuracy
//! report `nnc compile` prints (per output: SQNR and cosine similarity against float32
//! over the calibration set; the layers whose outputs lose the most).

use std::collections::HashMap;
use std::fmt;

use super::calibrate;
use super::host::{HostModel, HostRunner, InputSpec, Int8Host};
use super::int8::{self, InputStats, Layer};
use super::ranges::Method;
use super::requantize;
use super::sensitivity;
use super::QuantError;
use crate::codegen::WeightFormat;
use crate::ir::{Graph, Tensor, ValueId};

/// How to quantize; the calibration samples come from [`Int8Host::calibration`].
#[derive(Clone, Debug)]
pub struct Int8Options {
    pub method: Method,
    /// Node names to leave in float32.
    pub keep_fp32: Vec<String>,
    /// Keep the layers whose float32 build helps the outputs most in float32 until every
    /// output's SQNR against float32 (over the calibration set) reaches this many dB.
    pub min_sqnr_db: Option<f64>,
    /// Fold each layer's expected weight-rounding shift into its bias
    /// ([`super::bias_correction`]).
    pub bias_correction: bool,
    /// The largest weight magnitude: 127, or less where a kernel needs it (the
    /// compile driver lowers it to what every variant of the target can multiply
    /// exactly, [`crate::codegen::int8_weight_max`]).
    pub weight_max: i8,
}

/// How one tensor of the quantized graph compares with the float32 graph's.
#[derive(Clone, Debug)]
pub struct Quality {
    pub name: String,
    /// 10·log10(Σ ref² / Σ (q − ref)²) over every sample.
    pub sqnr_db: f64,
    /// Mean over samples of the cosine similarity of the flattened tensors.
    pub cosine: f64,
}

#[derive(Clone, Debug)]
pub struct Int8Report {
    pub samples: usize,
    pub quantized: Vec<Layer>,
    pub candidates: usize,
    pub outputs: Vec<Quality>,
    /// Quantized layers by their output's SQNR, lowest first (at most five).
    pub worst_layers: Vec<Quality>,
    /// Layers `min_sqnr_db` kept in float32, most helpful first.
    pub kept_for_sqnr: Vec<String>,
}

/// Quantizes `graph` (after the graph passes) in place and measures the result.
pub fn quantize_int8(
    graph: &mut Graph,
    opts: &Int8Options,
    host: &Int8Host,
) -> Result<Int8Report, QuantError> {
    // A graph compiled for one sample (dims set at run time) is calibrated and checked
    // sample by sample as a plain graph, with outputs of its own; its sample loop comes
    // back afterwards (quantization keeps the graph's inputs and outputs).
    let dims = std::mem::take(&mut graph.dims);
    let sample_loop = graph.sample_loop.take();
    let report = quantize_plain(graph, opts, host);
    graph.dims = dims;
    graph.sample_loop = sample_loop;
    report
}

impl Int8Options {
    /// Refuses options that would silently do nothing or something else: a
    /// `keep_fp32` name that is no quantizable layer of `graph` (a typo keeps nothing in
    /// float32), a target SQNR that is not a finite number of dB (NaN compares false,
    /// which kept every layer in float32).
    pub fn check(&self, graph: &Graph) -> Result<(), QuantError> {
        if let Some(db) = self.min_sqnr_db.filter(|db| !db.is_finite()) {
            return Err(QuantError::Rewrite(format!(
                "--int8-min-sqnr {db}: expected a finite number of dB"
            )));
        }
        let layers = int8::candidates(graph, &[]);
        let unknown: Vec<&str> = (self.keep_fp32.iter())
            .filter(|name| !layers.iter().any(|l| l.node == **name))
            .map(String::as_str)
            .collect();
        if !unknown.is_empty() {
            let mut names: Vec<&str> = layers.iter().map(|l| l.node.as_str()).collect();
            let more = names.len().saturating_sub(12);
            names.truncate(12);
            return Err(QuantError::Rewrite(format!(
                "--keep-fp32: no layer INT8 would quantize is named {} (its Conv, Gemm and \
                 MatMul layers: {}{})",
                unknown
                    .iter()
                    .map(|n| format!("'{n}'"))
                    .collect::<Vec<_>>()
                    .join(", "),
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                },
                if more > 0 {
                    format!(" and {more} more; `nnc inspect --kernels` lists them")
                } else {
                    String::new()
                }
            )));
        }
        Ok(())
    }
}

fn quantize_plain(
    graph: &mut Graph,
    opts: &Int8Options,
    host: &Int8Host,
) -> Result<Int8Report, QuantError> {
    opts.check(graph)?;
    let specs: Vec<InputSpec> = graph
        .inputs
        .iter()
        .map(|&v| InputSpec {
            name: graph.value(v).name.clone(),
            ty: graph.ty(v).clone(),
        })
        .collect();
    let samples = host
        .calibration
        .samples(&specs)
        .map_err(QuantError::Calibration)?;
    let layers = int8::candidates(graph, &opts.keep_fp32);
    // One observer per input; a tensor two layers read along different axes (rare)
    // gets the first one's channel means, and the other's bias goes uncorrected.
    let mut inputs: Vec<(ValueId, usize)> =
        layers.iter().map(|l| (l.input, l.channel_axis)).collect();
    inputs.sort();
    inputs.dedup_by_key(|(v, _)| *v);
    let observed = calibrate::observe(graph, &inputs, &samples, host.runner, host.progress)?;
    let stats: HashMap<ValueId, InputStats> = inputs
        .iter()
        .zip(&observed)
        .filter_map(|((v, _), o)| {
            let range = o.range.range(opts.method)?;
            let means = if opts.bias_correction {
                o.means.means()
            } else {
                None
            };
            Some((*v, InputStats { range, means }))
        })
        .collect();
    let float_graph = graph.clone();
    let reference = Reference::new(&float_graph, &layers, host.runner)?;
    // One quantized build, compared with float32 over the samples.
    let attempt = |kept: &[String]| -> Result<Attempt, QuantError> {
        let now: Vec<Layer> = layers
            .iter()
            .filter(|l| !kept.contains(&l.node))
            .cloned()
            .collect();
        let mut graph = float_graph.clone();
        let quantized = int8::quantize(&mut graph, &now, &stats, opts.weight_max)
            .map_err(QuantError::Rewrite)?;
        let (outputs, layer_quality) = reference.compare(&graph, &quantized, &samples)?;
        Ok(Attempt {
            graph,
            quantized,
            outputs,
            layer_quality,
        })
    };
    let meets = |a: &Attempt| {
        opts.min_sqnr_db
            .is_none_or(|t| a.outputs.iter().all(|o| o.sqnr_db >= t))
    };
    let mut kept_for_sqnr: Vec<String> = vec![];
    let mut best = attempt(&kept_for_sqnr)?;
    if let (false, Some(target)) = (meets(&best), opts.min_sqnr_db) {
        // The trials rank the layers and say how many go back; the real builds confirm
        // (and take more back, in the same order, should the trials be optimistic).
        let (order, needed) = sensitivity::plan(
            &float_graph,
            &best.quantized,
            &stats,
            &samples,
            (target, opts.weight_max),
            host,
        )?;
        kept_for_sqnr = order[..needed].to_vec();
        best = attempt(&kept_for_sqnr)?;
        while !meets(&best) && kept_for_sqnr.len() < order.len() {
            kept_for_sqnr.push(order[kept_for_sqnr.len()].clone());
            best = attempt(&kept_for_sqnr)?;
        }
    }
    let Attempt {
        graph: mut candidate,
        quantized,
        outputs,
        layer_quality,
    } = best;
    requantize::fuse(&mut candidate);
    *graph = candidate;
    let mut worst = layer_quality;
    worst.sort_by(|a, b| a.sqnr_db.total_cmp(&b.sqnr_db));
    worst.truncate(5);
    Ok(Int8Report {
        samples: samples.len(),
        candidates: layers.len(),
        quantized,
        outputs,
        worst_layers: worst,
        kept_for_sqnr,
    })
}

/// One quantized build of the model and how it compares with float32.
struct Attempt {
    graph: Graph,
    quantized: Vec<Layer>,
    outputs: Vec<Quality>,
    layer_quality: Vec<Quality>,
}

/// Energies of one compared tensor, summed over samples.
#[derive(Default, Clone)]
struct Tally {
    signal: f64,
    noise: f64,
    cosine: f64,
}

impl Tally {
    fn add(&mut self, reference: &Tensor, got: &Tensor) {
        let (r, q) = (reference.to_f64_vec(), got.to_f64_vec());
        let (mut dot, mut rr, mut qq, mut nn) = (0f64, 0f64, 0f64, 0f64);
        for (a, b) in r.iter().zip(&q) {
            dot += a * b;
            rr += a * a;
            qq += b * b;
            nn += (a - b) * (a - b);
        }
        self.signal += rr;
        self.noise += nn;
        self.cosine += if rr > 0.0 && qq > 0.0 {
            dot / (rr.sqrt() * qq.sqrt())
        } else if rr == qq {
            1.0
        } else {
            0.0
        };
    }

    fn quality(&self, name: String, samples: usize) -> Quality {
        let sqnr_db = if self.noise == 0.0 {
            f64::INFINITY
        } else {
            10.0 * (self.signal / self.noise).log10()
        };
        Quality {
            name,
            sqnr_db,
            cosine: self.cosine / samples.max(1) as f64,
        }
    }
}

/// The float32 graph compiled once with its outputs and every candidate layer's output
/// exposed, for the comparisons of each quantized version.
struct Reference<'g> {
    graph: &'g Graph,
    watched: Vec<ValueId>,
    model: Box<dyn HostModel>,
    runner: &'g dyn HostRunner,
}

impl<'g> Reference<'g> {
    fn new(
        graph: &'g Graph,
        layers: &[Layer],
        runner: &'g dyn HostRunner,
    ) -> Result<Reference<'g>, QuantError> {
        let mut watched: Vec<ValueId> = graph.outputs.clone();
        for l in layers {
            if !watched.contains(&l.output) {
                watched.push(l.output);
            }
        }
        let model = runner
            .load(
                &Graph {
                    outputs: watched.clone(),
                    ..graph.clone()
                },
                WeightFormat::F32,
            )
            .map_err(|e| QuantError::host("float32 reference model", e))?;
        Ok(Reference {
            graph,
            watched,
            model,
            runner,
        })
    }

    /// Runs the float32 and the quantized graph over the samples; returns the outputs'
    /// and the quantized layers' quality.
    fn compare(
        &self,
        quant_graph: &Graph,
        layers: &[Layer],
        samples: &[Vec<Tensor>],
    ) -> Result<(Vec<Quality>, Vec<Quality>), QuantError> {
        let q = self
            .runner
            .load(
                &Graph {
                    outputs: self.watched.clone(),
                    ..quant_graph.clone()
                },
                WeightFormat::F32,
            )
            .map_err(|e| QuantError::host("quantized model", e))?;
        let mut tallies = vec![Tally::default(); self.watched.len()];
        for s in samples {
            let a =
                (self.model.run(s)).map_err(|e| QuantError::host("float32 reference run", e))?;
            let b = q.run(s).map_err(|e| QuantError::host("quantized run", e))?;
            for (i, t) in tallies.iter_mut().enumerate() {
                t.add(&a[i], &b[i]);
            }
        }
        let n_out = self.graph.outputs.len();
        let name = |v: ValueId| self.graph.value(v).name.clone();
        let outputs = (0..n_out)
            .map(|i| tallies[i].quality(name(self.watched[i]), samples.len()))
            .collect();
        let layer_quality = layers
            .iter()
            .map(|l| {
                let i = self
                    .watched
                    .iter()
                    .position(|v| *v == l.output)
                    .expect("every candidate layer is watched");
                tallies[i].quality(format!("{} ({})", l.node, l.op), samples.len())
            })
            .collect();
        Ok((outputs, layer_quality))
    }
}

impl fmt::Display for Int8Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "int8: {} of {} Conv/Gemm/MatMul layers quantized, calibrated on {} samples",
            self.quantized.len(),
            self.candidates,
            self.samples
        )?;
        for o in &self.outputs {
            writeln!(
                f,
                "  output {}: SQNR {:.1} dB, cosine similarity {:.6} (vs float32, calibration set)",
                o.name, o.sqnr_db, o.cosine
            )?;
        }
        if !self.kept_for_sqnr.is_empty() {
            writeln!(
                f,
                "  kept in float32 to reach --int8-min-sqnr: {}",
                self.kept_for_sqnr.join(", ")
            )?;
        }
        if !self.worst_layers.is_empty() {
            writeln!(
                f,
                "  layers losing the most (SQNR of their output vs float32):"
            )?;
            for l in &self.worst_layers {
                writeln!(
                    f,
                    "    {:<40} {:>6.1} dB  cosine {:.6}",
                    l.name, l.sqnr_db, l.cosine
                )?;
            }
        }
        Ok(())
    }
}
