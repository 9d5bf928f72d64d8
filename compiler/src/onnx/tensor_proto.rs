//! `TensorProto` → [`Tensor`]: raw_data and the typed fields, and external data files.

use std::path::Path;

use half::{bf16, f16};

use super::external_data::read_external;
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

/// The bytes `t` declares (its dims times its dtype's size), before anything is read
/// or allocated; `None` when the dims or dtype are invalid (decoding then says why).
pub fn declared_byte_size(t: &TensorProto) -> Option<u64> {
    let dtype = DType::from_onnx(t.data_type)?;
    let shape = t
        .dims
        .iter()
        .map(|&d| usize::try_from(d).ok())
        .collect::<Option<Vec<usize>>>()?;
    let numel = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))?;
    // Keeps `byte_size` below from overflowing (decoding refuses such sizes anyway).
    numel.checked_mul(16)?;
    u64::try_from(TensorType::new(dtype, shape).byte_size()).ok()
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
