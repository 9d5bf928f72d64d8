//! Typed access to a node's attributes, with errors that say which attribute is wrong.

use super::proto::{attribute_type as at, AttributeProto, GraphProto, TensorProto};

pub struct Attributes<'a> {
    attrs: &'a [AttributeProto],
}

type AttrResult<T> = Result<T, String>;

impl<'a> Attributes<'a> {
    pub fn new(attrs: &'a [AttributeProto]) -> Self {
        Attributes { attrs }
    }

    pub fn get(&self, name: &str) -> Option<&'a AttributeProto> {
        self.attrs.iter().find(|a| a.name == name)
    }

    pub fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    fn typed(&self, name: &str, ty: i32, what: &str) -> AttrResult<Option<&'a AttributeProto>> {
        match self.get(name) {
            None => Ok(None),
            // Files from old exporters leave `type` unset; trust the field then.
            Some(a) if a.r#type == ty || a.r#type == 0 => Ok(Some(a)),
            Some(a) => Err(format!(
                "attribute '{name}' must be {what} (found type {})",
                a.r#type
            )),
        }
    }

    pub fn int_opt(&self, name: &str) -> AttrResult<Option<i64>> {
        Ok(self.typed(name, at::INT, "an int")?.map(|a| a.i))
    }

    pub fn int(&self, name: &str, default: i64) -> AttrResult<i64> {
        Ok(self.int_opt(name)?.unwrap_or(default))
    }

    /// A flag attribute (`keepdims`, `largest`, `transA`, ...): ONNX declares it an
    /// int meaning 0 or 1. Any other value is refused, naming the attribute, since
    /// runtimes disagree on it (onnxruntime reads `largest` as `== 1` and `sorted` as
    /// unsorted, the reference evaluator as `!= 0`), so no reading could be right.
    pub fn flag(&self, name: &str, default: bool) -> AttrResult<bool> {
        match self.int_opt(name)? {
            None => Ok(default),
            Some(0) => Ok(false),
            Some(1) => Ok(true),
            Some(v) => Err(format!("attribute '{name}' is {v}: a flag must be 0 or 1")),
        }
    }

    pub fn float_opt(&self, name: &str) -> AttrResult<Option<f32>> {
        Ok(self.typed(name, at::FLOAT, "a float")?.map(|a| a.f))
    }

    pub fn float(&self, name: &str, default: f32) -> AttrResult<f32> {
        Ok(self.float_opt(name)?.unwrap_or(default))
    }

    pub fn string_opt(&self, name: &str) -> AttrResult<Option<String>> {
        self.typed(name, at::STRING, "a string")?
            .map(|a| {
                String::from_utf8(a.s.clone())
                    .map_err(|_| format!("attribute '{name}' is not UTF-8"))
            })
            .transpose()
    }

    pub fn string(&self, name: &str, default: &str) -> AttrResult<String> {
        Ok(self
            .string_opt(name)?
            .unwrap_or_else(|| default.to_string()))
    }

    pub fn ints_opt(&self, name: &str) -> AttrResult<Option<Vec<i64>>> {
        Ok(self
            .typed(name, at::INTS, "a list of ints")?
            .map(|a| a.ints.clone()))
    }

    pub fn floats_opt(&self, name: &str) -> AttrResult<Option<Vec<f32>>> {
        Ok(self
            .typed(name, at::FLOATS, "a list of floats")?
            .map(|a| a.floats.clone()))
    }

    pub fn strings_opt(&self, name: &str) -> AttrResult<Option<Vec<String>>> {
        Ok(self
            .typed(name, at::STRINGS, "a list of strings")?
            .map(|a| {
                a.strings
                    .iter()
                    .map(|s| String::from_utf8_lossy(s).into_owned())
                    .collect()
            }))
    }

    pub fn tensor_opt(&self, name: &str) -> AttrResult<Option<&'a TensorProto>> {
        Ok(self
            .typed(name, at::TENSOR, "a tensor")?
            .and_then(|a| a.t.as_ref()))
    }

    pub fn graph_opt(&self, name: &str) -> AttrResult<Option<&'a GraphProto>> {
        Ok(self
            .typed(name, at::GRAPH, "a graph")?
            .and_then(|a| a.g.as_deref()))
    }

    /// A non-negative usize list, e.g. strides and kernel shapes.
    pub fn usizes_opt(&self, name: &str) -> AttrResult<Option<Vec<usize>>> {
        self.ints_opt(name)?
            .map(|v| {
                v.iter()
                    .map(|&x| {
                        usize::try_from(x)
                            .map_err(|_| format!("attribute '{name}' has a negative entry {x}"))
                    })
                    .collect()
            })
            .transpose()
    }
}

/// Resolves a possibly negative axis against `rank` (valid range `[-rank, rank)`).
/// `axis` of a tensor of `shape` (negative counts from the end) and its size. Unlike
/// [`normalize_axis`], which lets a scalar's ops name axis 0, this refuses a scalar:
/// it has no axis to take a size from.
pub fn axis_and_dim(axis: i64, shape: &[usize]) -> Result<(usize, usize), String> {
    let a = normalize_axis(axis, shape.len())?;
    let dim = shape
        .get(a)
        .ok_or_else(|| format!("axis {axis} is out of range for a scalar (rank 0)"))?;
    Ok((a, *dim))
}

pub fn normalize_axis(axis: i64, rank: usize) -> Result<usize, String> {
    let r = rank as i64;
    if axis < -r || axis >= r.max(1) {
        return Err(format!("axis {axis} is out of range for rank {rank}"));
    }
    Ok(if axis < 0 {
        (axis + r) as usize
    } else {
        axis as usize
    })
}
