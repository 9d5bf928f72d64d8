//! The values of a shape input (a Reshape's target, a Resize's sizes, a Tile's
//! repeats...) that the model's declared output shape implies, for a model that
//! computes them at run time: the node is compiled for those values and the run checks
//! the input holds them (see [`crate::ir::InputGuard`]). Only inputs whose values the
//! output shape determines are covered: a Resize's scales or a Pad's pads are not
//! (several values give one shape).

use super::attributes::{normalize_axis, Attributes};

/// Shapes of the node's inputs (`None` where omitted) and its declared output shape.
pub(super) struct NodeShapes<'a> {
    pub inputs: &'a [Option<Vec<usize>>],
    pub output: &'a [usize],
}

/// The implied values of input `input` of an `op_type` node: the values to compile
/// with, the values each element may hold at run time, and whether one element may be
/// -1 instead. `None` where the output shape does not determine them.
pub(super) fn implied_values(
    op_type: &str,
    input: usize,
    attrs: &Attributes,
    shapes: &NodeShapes,
) -> Option<(Vec<i64>, Vec<Vec<i64>>, bool)> {
    let out: Vec<i64> = shapes.output.iter().map(|&d| d as i64).collect();
    let data = shapes.inputs.first()?.as_ref();
    let exact = |v: Vec<i64>| {
        let allowed = v.iter().map(|&x| vec![x]).collect();
        Some((v, allowed, false))
    };
    match (op_type, input) {
        // Reshape: each element the output's extent, or 0 where it copies the input's
        // (unless allowzero), or one -1.
        ("Reshape", 1) => {
            let data = data?;
            let allowzero = attrs.int("allowzero", 0).ok()? != 0;
            let allowed = (out.iter().enumerate())
                .map(
                    |(k, &d)| match !allowzero && data.get(k) == Some(&(d as usize)) {
                        true => vec![d, 0],
                        false => vec![d],
                    },
                )
                .collect();
            Some((out, allowed, true))
        }
        ("ConstantOfShape", 0) | ("MaxUnpool", 2) => exact(out),
        ("HannWindow" | "HammingWindow" | "BlackmanWindow", 0) => exact(vec![*out.first()?]),
        ("Tile", 1) => {
            let data = data?;
            (data.len() == out.len()).then_some(())?;
            let repeats = (data.iter().zip(&out))
                .map(|(&d, &o)| (d > 0 && o % d as i64 == 0).then(|| o / d as i64))
                .collect::<Option<Vec<_>>>()?;
            exact(repeats)
        }
        // Expand: the output's trailing extents; a 1 also where the input already has
        // the output's extent.
        ("Expand", 1) => {
            let data = data?;
            let n = shapes.inputs.get(1)?.as_ref()?.first().copied()?;
            (n <= out.len() && data.len() <= out.len()).then_some(())?;
            let lead = out.len() - data.len();
            let values = out[out.len() - n..].to_vec();
            let allowed = (values.iter().enumerate())
                .map(|(j, &o)| {
                    let axis = out.len() - n + j;
                    let from_input = axis >= lead && data[axis - lead] as i64 == o;
                    match from_input && o != 1 {
                        true => vec![o, 1],
                        false => vec![o],
                    }
                })
                .collect();
            Some((values, allowed, false))
        }
        ("OneHot", 1) => {
            let axis = normalize_axis(attrs.int("axis", -1).ok()?, out.len()).ok()?;
            exact(vec![out[axis]])
        }
        ("CenterCropPad", 1) => {
            let axes = attrs.ints_opt("axes").ok()?;
            let axes = match axes {
                Some(a) => (a.iter())
                    .map(|&x| normalize_axis(x, out.len()).ok())
                    .collect::<Option<Vec<_>>>()?,
                None => (0..out.len()).collect(),
            };
            exact(axes.iter().map(|&a| out[a]).collect())
        }
        // Resize's sizes are the output's extents where the policy stretches.
        ("Resize", 3) => {
            if attrs.string("keep_aspect_ratio_policy", "stretch").ok()? != "stretch" {
                return None;
            }
            let axes = match attrs.ints_opt("axes").ok()? {
                Some(a) => (a.iter())
                    .map(|&x| normalize_axis(x, out.len()).ok())
                    .collect::<Option<Vec<_>>>()?,
                None => (0..out.len()).collect(),
            };
            exact(axes.iter().map(|&a| out[a]).collect())
        }
        _ => None,
    }
}
