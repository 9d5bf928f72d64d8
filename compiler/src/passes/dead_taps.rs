//! Dead kernel taps: a Conv whose outer kernel rows or columns read only padding, for
//! every output, multiplies those weights by zeros. That is what a dilated conv on a
//! map smaller than its dilation does: DeepLab's ASPP runs 3×3 convs with dilations 24
//! and 36 (padding equal to the dilation) on 16×16 maps, where every tap but the
//! centre falls outside the map. The kernel is cut to its live rows and columns and the
//! padding shifted to match, so such a conv becomes the 1×1 conv (a GEMM) it really
//! is, with 9× fewer multiply-adds.
//!
//! Only constant float32 weights are cut (into a new constant: weights shared with other
//! nodes are not touched), and only where the live taps of each axis are one run whose
//! new padding stays non-negative (always the case for dilated convs with the usual
//! "same" padding).

use super::{dce, util};
use crate::ir::{DType, Graph};
use crate::ops::Op;

pub fn run(g: &mut Graph) -> Result<(), String> {
    for i in 0..g.nodes.len() {
        cut_dead_taps(g, i);
    }
    dce::run(g)
}

/// The largest kernel size, stride, dilation or padding the pass considers.
const ATTR_LIMIT: usize = 1 << 24;

/// The live taps `[first, last]` of one spatial axis and its new padding `(begin, end)`,
/// `None` when every tap is live or the cut cannot be expressed.
#[derive(Debug, PartialEq)]
struct AxisCut {
    first: usize,
    last: usize,
    pads: (usize, usize),
}

/// One axis: input size `input`, output size `output`, kernel size `kernel`, stride,
/// dilation, padding at the beginning and end.
fn axis_cut(
    input: usize,
    output: usize,
    kernel: usize,
    stride: usize,
    dilation: usize,
    pad_begin: usize,
) -> Option<AxisCut> {
    let (input, output, stride, dilation, pad_begin) = (
        input as i64,
        output as i64,
        stride as i64,
        dilation as i64,
        pad_begin as i64,
    );
    // Tap t reads input position y·stride − pad_begin + t·dilation for outputs y.
    let live = |t: i64| -> bool {
        let first = t * dilation - pad_begin;
        // The first output whose position is ≥ 0.
        let y = if first >= 0 {
            0
        } else {
            (-first + stride - 1) / stride
        };
        y < output && first + y * stride < input
    };
    let taps: Vec<bool> = (0..kernel as i64).map(live).collect();
    let first = taps.iter().position(|&l| l)?;
    let last = taps.iter().rposition(|&l| l)?;
    if (first == 0 && last + 1 == kernel) || taps[first..=last].iter().any(|&l| !l) {
        return None;
    }
    let kept = (last - first) as i64;
    let begin = pad_begin - first as i64 * dilation;
    // The least end padding that keeps `output` outputs (with none, a stride may still
    // leave exactly `output`).
    let end = ((output - 1) * stride + kept * dilation + 1 - input - begin).max(0);
    let span = input + begin + end - kept * dilation - 1;
    (begin >= 0 && span >= 0 && span / stride + 1 == output).then_some(AxisCut {
        first,
        last,
        pads: (begin as usize, end as usize),
    })
}

/// Cuts node `i`'s kernel when some of its taps are dead.
fn cut_dead_taps(g: &mut Graph, i: usize) {
    let n = &g.nodes[i];
    let Op::Conv(attrs) = &n.op else { return };
    let (Some(x), Some(w)) = (n.inputs[0], n.inputs.get(1).copied().flatten()) else {
        return;
    };
    // Planes sized at run time: which taps are dead depends on the size.
    if g.value(x).run_extent.is_some() {
        return;
    }
    // Attributes far beyond any real conv are left alone, so that the tap arithmetic
    // cannot overflow whatever their values.
    if attrs
        .dilations
        .iter()
        .chain(&attrs.pads)
        .chain(&attrs.strides)
        .chain(&attrs.kernel)
        .any(|&v| v > ATTR_LIMIT)
        || attrs.strides.contains(&0)
    {
        return;
    }
    let (x_ty, w_ty, y_ty) = (g.ty(x), g.ty(w), g.ty(n.outputs[0]));
    let spatial = attrs.kernel.len();
    if w_ty.dtype != DType::F32
        || w_ty.rank() != spatial + 2
        || x_ty.rank() != spatial + 2
        || attrs.pads.len() != 2 * spatial
        || attrs.strides.len() != spatial
        || attrs.dilations.len() != spatial
        || w_ty.shape[2..] != attrs.kernel[..]
    {
        return;
    }
    let cuts: Vec<Option<AxisCut>> = (0..spatial)
        .map(|a| {
            axis_cut(
                x_ty.shape[2 + a],
                y_ty.shape[2 + a],
                attrs.kernel[a],
                attrs.strides[a],
                attrs.dilations[a],
                attrs.pads[a],
            )
        })
        .collect();
    if cuts.iter().all(Option::is_none) {
        return;
    }
    let Some(weights) = util::const_f32(g, w) else {
        return;
    };
    // Each axis's kept range (the whole kernel where nothing is cut).
    let ranges: Vec<(usize, usize)> = cuts
        .iter()
        .zip(&attrs.kernel)
        .map(|(c, &k)| c.as_ref().map_or((0, k - 1), |c| (c.first, c.last)))
        .collect();
    let mut shape = w_ty.shape.clone();
    for (a, &(first, last)) in ranges.iter().enumerate() {
        shape[2 + a] = last - first + 1;
    }
    let cut = gather_taps(&weights, &w_ty.shape, &ranges);
    let mut attrs = attrs.clone();
    for (a, c) in cuts.iter().enumerate() {
        if let Some(c) = c {
            attrs.kernel[a] = c.last - c.first + 1;
            attrs.pads[a] = c.pads.0;
            attrs.pads[spatial + a] = c.pads.1;
            if attrs.kernel[a] == 1 {
                // A single tap has no dilation; 1 lets the 1×1 paths take it.
                attrs.dilations[a] = 1;
            }
        }
    }
    let name = util::fresh_name(g, &format!("{}_live_taps", g.values[w.0].name));
    let new_w = util::add_const_f32(g, name, shape, cut);
    let n = &mut g.nodes[i];
    n.inputs[1] = Some(new_w);
    n.op = Op::Conv(attrs);
}

/// The weights `[M, C, k…]` restricted to the taps `ranges` (inclusive) of each
/// spatial axis.
fn gather_taps(weights: &[f32], shape: &[usize], ranges: &[(usize, usize)]) -> Vec<f32> {
    let spatial = &shape[2..];
    let taps: usize = spatial.iter().product();
    let mut out = vec![];
    for filter in weights.chunks(taps.max(1)) {
        for (t, &v) in filter.iter().enumerate() {
            // Tap t's index along each axis (row-major).
            let mut rest = t;
            let mut keep = true;
            for a in (0..spatial.len()).rev() {
                let idx = rest % spatial[a];
                rest /= spatial[a];
                keep &= ranges[a].0 <= idx && idx <= ranges[a].1;
            }
            if keep {
                out.push(v);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aspp_dilations_on_a_small_map_keep_the_centre() {
        // 3 taps, dilation 24 / 36, padding = dilation, 16 → 16.
        for d in [24, 36] {
            assert_eq!(
                axis_cut(16, 16, 3, 1, d, d),
                Some(AxisCut {
                    first: 1,
                    last: 1,
                    pads: (0, 0)
                })
            );
        }
        // Dilation 12 on 16: the outer taps reach rows 12..16 and 0..4.
        assert_eq!(axis_cut(16, 16, 3, 1, 12, 12), None);
        // An ordinary 3×3 "same" conv.
        assert_eq!(axis_cut(16, 16, 3, 1, 1, 1), None);
    }

    #[test]
    fn strided_and_one_sided_cuts() {
        // Padding 4 at the beginning only, kernel 5, input 4: output 4; tap 0 reads
        // −4, −3, −2, −1: dead; taps 1..4 live.
        let c = axis_cut(4, 4, 5, 1, 1, 4).expect("a cut");
        assert_eq!((c.first, c.last, c.pads), (1, 4, (3, 0)));
        // Stride 2, dilation 8, pad 8, input 6 → output 3 (positions 0, 2, 4 at the
        // centre): the outer taps read −8.. and 8..: dead; no end padding is left.
        let c = axis_cut(6, 3, 3, 2, 8, 8).expect("a cut");
        assert_eq!((c.first, c.last, c.pads), (1, 1, (0, 0)));
    }

    #[test]
    fn gathers_the_kept_taps_of_each_filter() {
        // Two filters of 3×3 taps numbered 0..9 and 10..19; keep the centre column of
        // rows 1..2.
        let w: Vec<f32> = (0..18).map(|v| v as f32).collect();
        let got = gather_taps(&w, &[2, 1, 3, 3], &[(1, 2), (1, 1)]);
        assert_eq!(got, vec![4.0, 7.0, 13.0, 16.0]);
    }
}
