//! Declared ranges: `--dim NAME=MIN..MAX` and `MIN..MAX` on an axis of
//! `--input-shape`, and the import options that bind them to one value.

use crate::onnx::proto::ModelProto;
use crate::onnx::ImportOptions;

/// Where a declared range applies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DimSite {
    /// Every axis the model names `name` (an ONNX `dim_param`).
    Param,
    /// One axis of one input, given with `--input-shape INPUT=...,MIN..MAX,...`: the
    /// dim is named `INPUT.AXIS`.
    InputAxis { input: String, axis: usize },
}

/// A dim the caller picks at run time, in `min..=max`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DimRange {
    pub name: String,
    pub min: usize,
    pub max: usize,
    pub site: DimSite,
}

/// The largest value a range may reach: sizes and loop counts stay far inside i64.
pub const MAX_DIM_VALUE: usize = 1 << 31;

/// `MIN..MAX` (inclusive): `Ok(None)` when `text` is no range (a plain value), an
/// error when it is a malformed one.
pub fn parse_range(text: &str) -> Result<Option<(usize, usize)>, String> {
    let Some((lo, hi)) = text.trim().split_once("..") else {
        return Ok(None);
    };
    let hi = hi.strip_prefix('=').unwrap_or(hi);
    let num = |s: &str| {
        s.trim()
            .parse::<usize>()
            .map_err(|_| format!("'{text}': a range is MIN..MAX with non-negative integers"))
    };
    let (min, max) = (num(lo)?, num(hi)?);
    if min == 0 {
        return Err(format!("'{text}': a range starts at 1 or more"));
    }
    if min > max {
        return Err(format!("'{text}': MIN is larger than MAX"));
    }
    if max > MAX_DIM_VALUE {
        return Err(format!("'{text}': MAX is above {MAX_DIM_VALUE}"));
    }
    Ok(Some((min, max)))
}

impl ImportOptions {
    /// These options with every declared range bound to `values[i]` (in `ranges`
    /// order): a plain static import.
    pub fn bound(&self, values: &[usize]) -> ImportOptions {
        let mut o = self.clone();
        o.ranges.clear();
        for (r, &v) in self.ranges.iter().zip(values) {
            match &r.site {
                DimSite::Param => {
                    o.dims.insert(r.name.clone(), v);
                }
                DimSite::InputAxis { input, axis } => {
                    if let Some(s) = o.input_shapes.get_mut(input) {
                        if let Some(d) = s.get_mut(*axis) {
                            *d = v;
                        }
                    }
                    // The axis may carry a name the model gives other inputs' axes too
                    // (see [`named_ranges`]): they take the same value.
                    o.dims.insert(r.name.clone(), v);
                }
            }
        }
        o
    }

    /// These options with range `which` bound to `value`, the others still ranges.
    pub fn with_range_fixed(&self, which: usize, value: usize) -> ImportOptions {
        let mut one = self.clone();
        one.ranges = vec![self.ranges[which].clone()];
        let mut o = one.bound(&[value]);
        o.ranges = (self.ranges.iter().enumerate())
            .filter(|(i, _)| *i != which)
            .map(|(_, r)| r.clone())
            .collect();
        o
    }
}

/// `opts` with each range given on an input axis the model names (an ONNX `dim_param`)
/// renamed after it: `--input-shape x=1..8,...` on an axis the model calls `batch` is
/// `--dim batch=1..8`, so the other inputs' `batch` axes follow (and the ABI names it
/// `batch`, not `x.0`).
pub fn named_ranges(model: &ModelProto, opts: &ImportOptions) -> ImportOptions {
    use crate::onnx::proto::{tensor_shape_proto::dimension, type_proto};
    let mut o = opts.clone();
    let inputs = model.graph.as_ref().map_or(&[][..], |g| g.input.as_slice());
    for r in &mut o.ranges {
        let DimSite::InputAxis { input, axis } = &r.site else {
            continue;
        };
        let declared = inputs
            .iter()
            .find(|i| &i.name == input)
            .and_then(|i| i.r#type.as_ref()?.value.as_ref())
            .and_then(|t| match t {
                type_proto::Value::TensorType(t) => t.shape.as_ref()?.dim.get(*axis)?.value.clone(),
                _ => None,
            });
        if let Some(dimension::Value::DimParam(p)) = declared {
            if !p.is_empty() {
                r.name = p;
            }
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_and_plain_values_are_not_ranges() {
        assert_eq!(parse_range("1..8"), Ok(Some((1, 8))));
        assert_eq!(parse_range(" 2..=512 "), Ok(Some((2, 512))));
        assert_eq!(parse_range("7"), Ok(None));
        assert!(parse_range("0..4").is_err());
        assert!(parse_range("5..4").is_err());
        assert!(parse_range("1..x").is_err());
        assert!(parse_range("1..4294967296").is_err());
    }
}
