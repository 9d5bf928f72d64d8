//! `TensorProto` → [`Tensor`]: raw_data and the typed fields, and external data files.

use std::path::{Component, Path};

use half::{bf16, f16};

use super::proto::{TensorProto, DATA_LOCATION_EXTERNAL};
use crate::ir::{DType, Tensor, TensorType};

/// A `TensorProto` that does not decode: its message names the tensor and the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TensorProtoError(pub String);

/// Decodes a tensor. `base_dir` is the model's folder, for external data; `None` forbids
/// external data (e.g. a tensor embedded in a test-data file).
pub fn tensor_from_proto(
    t: &TensorProto,
    base_dir: Option<&Path>,
) -> Result<Tensor, TensorProtoError> {
    decode(t, base_dir).map_err(TensorProtoError)
}

fn decode(t: &TensorProto, base_dir: Option<&Path>) -> Result<Tensor, String> {
    let dtype = DType::from_onnx(t.data_type).ok_or_else(|| {
        format!(
            "tensor '{}' has unsupported data type {}",
            t.name, t.data_type
        )
    })?;
    let mut shape = Vec::with_capacity(t.dims.len());
    for &d in &t.dims {
        shape.push(
            usize::try_from(d)
                .map_err(|_| format!("tensor '{}' has negative dimension {d}", t.name))?,
        );
    }
    let numel = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    let ty = TensorType::new(dtype, shape);
    let numel = numel
        .filter(|n| n.checked_mul(dtype.size()).is_some_and(|b| b < (1 << 40)))
        .ok_or_else(|| format!("tensor '{}' is impossibly large: {:?}", t.name, ty.shape))?;

    if t.data_location == DATA_LOCATION_EXTERNAL {
        let bytes = read_external(t, base_dir, ty.byte_size())?;
        return Tensor::from_le_bytes(&ty, &bytes)
            .ok_or_else(|| format!("tensor '{}': external data has the wrong size", t.name));
    }
    if !t.raw_data.is_empty() || numel == 0 {
        return Tensor::from_le_bytes(&ty, &t.raw_data).ok_or_else(|| {
            format!(
                "tensor '{}': raw_data holds {} bytes, {} {} needs {}",
                t.name,
                t.raw_data.len(),
                ty,
                dtype,
                ty.byte_size()
            )
        });
    }
    let wrong = |have: usize| {
        format!(
            "tensor '{}' holds {have} values, its shape {:?} needs {numel}",
            t.name, ty.shape
        )
    };
    // Typed fields: see onnx.proto3 for which field carries which type.
    if dtype.low_precision().is_some() {
        // int32_data: one code per entry for the 8-bit formats, one packed byte per
        // entry for the 4- and 2-bit ones (onnx's numpy_helper reads it so).
        let bytes: Vec<u8> = t.int32_data.iter().map(|&v| v as u8).collect();
        let bytes = if dtype.size() == 1 && ty.byte_size() == numel {
            check(&bytes, numel, wrong)?.to_vec()
        } else {
            check(&bytes, ty.byte_size(), |have| {
                format!(
                    "tensor '{}' holds {have} packed bytes, its shape {:?} needs {}",
                    t.name,
                    ty.shape,
                    ty.byte_size()
                )
            })?
            .to_vec()
        };
        return Tensor::from_le_bytes(&ty, &bytes)
            .ok_or_else(|| format!("tensor '{}': bad packed data", t.name));
    }
    let tensor = match dtype {
        DType::F32 => {
            check(&t.float_data, numel, wrong).map(|v| Tensor::from_vec(&ty.shape, v.to_vec()))?
        }
        DType::F64 => {
            check(&t.double_data, numel, wrong).map(|v| Tensor::from_vec(&ty.shape, v.to_vec()))?
        }
        DType::I64 => {
            check(&t.int64_data, numel, wrong).map(|v| Tensor::from_vec(&ty.shape, v.to_vec()))?
        }
        DType::U64 => {
            check(&t.uint64_data, numel, wrong).map(|v| Tensor::from_vec(&ty.shape, v.to_vec()))?
        }
        DType::U32 => check(&t.uint64_data, numel, wrong)
            .map(|v| Tensor::from_vec(&ty.shape, v.iter().map(|&x| x as u32).collect()))?,
        // The 32-bit-or-smaller types live in int32_data; f16/bf16 as their bit patterns.
        _ => {
            let v = check(&t.int32_data, numel, wrong)?;
            match dtype {
                DType::I32 => Tensor::from_vec(&ty.shape, v.to_vec()),
                DType::I16 => Tensor::from_vec(&ty.shape, v.iter().map(|&x| x as i16).collect()),
                DType::I8 => Tensor::from_vec(&ty.shape, v.iter().map(|&x| x as i8).collect()),
                DType::U16 => Tensor::from_vec(&ty.shape, v.iter().map(|&x| x as u16).collect()),
                DType::U8 => Tensor::from_vec(&ty.shape, v.iter().map(|&x| x as u8).collect()),
                DType::Bool => Tensor::from_vec(&ty.shape, v.iter().map(|&x| x != 0).collect()),
                DType::F16 => Tensor::from_vec(
                    &ty.shape,
                    v.iter().map(|&x| f16::from_bits(x as u16)).collect(),
                ),
                DType::BF16 => Tensor::from_vec(
                    &ty.shape,
                    v.iter().map(|&x| bf16::from_bits(x as u16)).collect(),
                ),
                _ => unreachable!("wide types handled above"),
            }
        }
    };
    Ok(tensor)
}

fn check<T>(v: &[T], numel: usize, wrong: impl Fn(usize) -> String) -> Result<&[T], String> {
    if v.len() == numel {
        Ok(v)
    } else {
        Err(wrong(v.len()))
    }
}

/// Reads `location` (+ `offset`, `length`) relative to the model's folder. Absolute paths
/// and `..` are refused: a model file must not make the compiler read arbitrary files.
fn read_external(
    t: &TensorProto,
    base_dir: Option<&Path>,
    expected: usize,
) -> Result<Vec<u8>, String> {
    let base = base_dir.ok_or_else(|| {
        format!(
            "tensor '{}' uses external data, which is not allowed here",
            t.name
        )
    })?;
    let get = |k: &str| {
        t.external_data
            .iter()
            .find(|e| e.key == k)
            .map(|e| e.value.as_str())
    };
    let location = get("location")
        .ok_or_else(|| format!("tensor '{}': external data without a location", t.name))?;
    let rel = Path::new(location);
    if rel
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(format!(
            "tensor '{}': external data path '{location}' must be relative and stay inside the model's folder",
            t.name
        ));
    }
    let parse = |k: &str| -> Result<Option<u64>, String> {
        get(k)
            .map(|v| {
                v.parse::<u64>()
                    .map_err(|_| format!("tensor '{}': bad external data {k} '{v}'", t.name))
            })
            .transpose()
    };
    let offset = parse("offset")?.unwrap_or(0);
    let length = parse("length")?.unwrap_or(expected as u64);
    if length != expected as u64 {
        return Err(format!(
            "tensor '{}': external data length {length} but the tensor needs {expected} bytes",
            t.name
        ));
    }
    let path = base.join(rel);
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(&path)
        .map_err(|e| format!("tensor '{}': cannot open {}: {e}", t.name, path.display()))?;
    f.seek(SeekFrom::Start(offset))
        .map_err(|e| format!("tensor '{}': {}: {e}", t.name, path.display()))?;
    let mut buf = vec![0u8; expected];
    f.read_exact(&mut buf).map_err(|e| {
        format!(
            "tensor '{}': {} is too short for offset {offset} + {expected} bytes: {e}",
            t.name,
            path.display()
        )
    })?;
    Ok(buf)
}
