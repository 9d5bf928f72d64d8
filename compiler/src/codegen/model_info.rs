//! The `nnc_model_info` structure every artifact exports: names, dtypes and shapes of the
//! inputs and outputs, and the workspace size, laid out exactly as `nnc.h` declares.

use cranelift_module::{DataDescription, DataId, Linkage, Module};
use cranelift_object::ObjectModule;

use super::plan::ALIGN;
use super::target::Target;
use crate::error::{NncError, Result};
use crate::ir::{Graph, ValueId};
use nnc_runtime_abi::abi::{
    NncAxisDim, NncAxisExtent, NncBoundedAxis, NncDimInfo, NncExtentStep, NncModelInfo as Info,
    NncTensorInfo, NNC_ABI_VERSION,
};
use std::mem::{offset_of, size_of};

// Every offset and size below is the runtime-abi crate's `#[repr(C)]` twin of `nnc.h`'s
// struct (its `c_layout` test checks them against a C compiler's): the one place the
// layouts are written. nnc's targets are LP64 (x86-64 and aarch64 Linux), so the
// twins' layout on the host that runs nnc is the target's when the host is 64-bit too.
const _: () = assert!(
    size_of::<usize>() == 8,
    "nnc writes the C ABI's structs as its LP64 targets lay them out: build it for a 64-bit host"
);

const MODEL_INFO_SIZE: usize = size_of::<Info>();
const TENSOR_INFO_SIZE: usize = size_of::<NncTensorInfo>();
const DIM_INFO_SIZE: usize = size_of::<NncDimInfo>();
const AXIS_DIM_SIZE: usize = size_of::<NncAxisDim>();
const BOUNDED_AXIS_SIZE: usize = size_of::<NncBoundedAxis>();
const AXIS_EXTENT_SIZE: usize = size_of::<NncAxisExtent>();
const EXTENT_STEP_SIZE: usize = size_of::<NncExtentStep>();

/// Defines one data object holding the struct, its tensor-info arrays, sizes, symbolic
/// dims and names; pointers inside it are relocations against itself. An axis that
/// depends on a dim gets its size with the dim at its maximum.
pub fn define(
    module: &mut ObjectModule,
    graph: &Graph,
    arena_size: usize,
    target: &Target,
    prefix: &str,
) -> Result<DataId> {
    let name = format!("{prefix}nnc_model_info_data");
    // Writable because its pointers are fixed up by the loader (RELATIVE relocations).
    let id = module
        .declare_data(&name, Linkage::Local, true, false)
        .map_err(|e| NncError::Codegen {
            context: "model info".into(),
            message: e.to_string(),
        })?;
    let tensors: Vec<ValueId> = graph.inputs.iter().chain(&graph.outputs).copied().collect();
    let infos_at = MODEL_INFO_SIZE;
    let dims_at = infos_at + TENSOR_INFO_SIZE * tensors.len();
    let total_dims: usize = tensors.iter().map(|t| graph.ty(*t).rank()).sum();
    let axis_dims = crate::ir::run_dims::axis_dims(graph);
    let maxima: Vec<usize> = graph.dims.iter().map(|d| d.max).collect();
    let dim_infos_at = dims_at + 8 * total_dims;
    let axis_dims_at = dim_infos_at + DIM_INFO_SIZE * graph.dims.len();
    let bounded = graph.bounded_axes();
    let bounded_at = axis_dims_at + AXIS_DIM_SIZE * axis_dims.len();
    // Steps only when some axis is more than `scale · dim` (else NULL).
    let derived = axis_dims.iter().any(|a| !a.size.is_dim());
    let extents_at = bounded_at + BOUNDED_AXIS_SIZE * bounded.len();
    let steps_at = extents_at
        + if derived {
            AXIS_EXTENT_SIZE * axis_dims.len()
        } else {
            0
        };
    let steps: usize = axis_dims.iter().map(|a| a.size.steps.len()).sum();
    let strings_at = steps_at + if derived { EXTENT_STEP_SIZE * steps } else { 0 };

    let mut bytes = vec![0u8; strings_at];
    let mut relocs: Vec<(usize, usize)> = vec![]; // (where, target offset in this blob)
    let put32 =
        |b: &mut Vec<u8>, at: usize, v: u32| b[at..at + 4].copy_from_slice(&v.to_le_bytes());
    let put64 =
        |b: &mut Vec<u8>, at: usize, v: u64| b[at..at + 8].copy_from_slice(&v.to_le_bytes());

    put32(&mut bytes, offset_of!(Info, abi_version), NNC_ABI_VERSION);
    put32(
        &mut bytes,
        offset_of!(Info, num_inputs),
        graph.inputs.len() as u32,
    );
    put32(
        &mut bytes,
        offset_of!(Info, num_outputs),
        graph.outputs.len() as u32,
    );
    relocs.push((offset_of!(Info, inputs), infos_at));
    relocs.push((
        offset_of!(Info, outputs),
        infos_at + TENSOR_INFO_SIZE * graph.inputs.len(),
    ));
    put64(
        &mut bytes,
        offset_of!(Info, workspace_size),
        arena_size as u64,
    );
    put64(&mut bytes, offset_of!(Info, workspace_align), ALIGN as u64);
    put32(
        &mut bytes,
        offset_of!(Info, num_dims),
        graph.dims.len() as u32,
    );
    put32(
        &mut bytes,
        offset_of!(Info, num_axis_dims),
        axis_dims.len() as u32,
    );
    if !graph.dims.is_empty() {
        relocs.push((offset_of!(Info, dims), dim_infos_at));
    }
    if !axis_dims.is_empty() {
        relocs.push((offset_of!(Info, axis_dims), axis_dims_at));
    }
    put32(
        &mut bytes,
        offset_of!(Info, num_bounded_axes),
        bounded.len() as u32,
    );
    if !bounded.is_empty() {
        relocs.push((offset_of!(Info, bounded_axes), bounded_at));
    }
    if derived {
        relocs.push((offset_of!(Info, axis_extents), extents_at));
        let mut step_at = steps_at;
        for (j, a) in axis_dims.iter().enumerate() {
            let at = extents_at + j * AXIS_EXTENT_SIZE;
            put32(
                &mut bytes,
                at + offset_of!(NncAxisExtent, num_steps),
                a.size.steps.len() as u32,
            );
            if !a.size.steps.is_empty() {
                relocs.push((at + offset_of!(NncAxisExtent, steps), step_at));
            }
            for s in &a.size.steps {
                put64(
                    &mut bytes,
                    step_at + offset_of!(NncExtentStep, add),
                    s.add as u64,
                );
                put64(&mut bytes, step_at + offset_of!(NncExtentStep, div), s.div);
                step_at += EXTENT_STEP_SIZE;
            }
        }
    }
    for (j, &(output, axis)) in bounded.iter().enumerate() {
        let at = bounded_at + j * BOUNDED_AXIS_SIZE;
        put32(
            &mut bytes,
            at + offset_of!(NncBoundedAxis, output),
            output as u32,
        );
        put32(
            &mut bytes,
            at + offset_of!(NncBoundedAxis, axis),
            axis as u32,
        );
    }
    for (j, d) in graph.dims.iter().enumerate() {
        let at = dim_infos_at + j * DIM_INFO_SIZE;
        let str_at = bytes.len();
        bytes.extend(d.name.bytes().filter(|&c| c != 0));
        bytes.push(0);
        relocs.push((at + offset_of!(NncDimInfo, name), str_at));
        put64(&mut bytes, at + offset_of!(NncDimInfo, min), d.min as u64);
        put64(&mut bytes, at + offset_of!(NncDimInfo, max), d.max as u64);
    }
    for (j, a) in axis_dims.iter().enumerate() {
        let at = axis_dims_at + j * AXIS_DIM_SIZE;
        put32(
            &mut bytes,
            at + offset_of!(NncAxisDim, tensor),
            a.tensor as u32,
        );
        put32(&mut bytes, at + offset_of!(NncAxisDim, axis), a.axis as u32);
        put32(&mut bytes, at + offset_of!(NncAxisDim, dim), a.dim as u32);
        put64(
            &mut bytes,
            at + offset_of!(NncAxisDim, scale),
            a.scale as u64,
        );
    }

    for (at, text) in [
        (offset_of!(Info, cpu_variants), target.cpu.clone()),
        (
            offset_of!(Info, required_cpu_features),
            target.required_feature_names(),
        ),
    ] {
        let str_at = bytes.len();
        bytes.extend(text.bytes().filter(|&c| c != 0));
        bytes.push(0);
        relocs.push((at, str_at));
    }

    let mut dim_cursor = dims_at;
    for (k, v) in tensors.iter().enumerate() {
        let at = infos_at + k * TENSOR_INFO_SIZE;
        let ty = graph.ty(*v);
        let str_at = bytes.len();
        bytes.extend(graph.value(*v).name.bytes().filter(|&c| c != 0));
        bytes.push(0);
        relocs.push((at + offset_of!(NncTensorInfo, name), str_at));
        put32(
            &mut bytes,
            at + offset_of!(NncTensorInfo, dtype),
            ty.dtype.onnx_code() as u32,
        );
        put32(
            &mut bytes,
            at + offset_of!(NncTensorInfo, rank),
            ty.rank() as u32,
        );
        relocs.push((at + offset_of!(NncTensorInfo, dims), dim_cursor));
        for d in crate::ir::run_dims::concrete_shape(&ty.shape, k, &axis_dims, &maxima) {
            put64(&mut bytes, dim_cursor, d as u64);
            dim_cursor += 8;
        }
    }

    let mut desc = DataDescription::new();
    desc.define(bytes.into_boxed_slice());
    desc.set_align(8);
    let this = module.declare_data_in_data(id, &mut desc);
    for (at, target) in relocs {
        desc.write_data_addr(at as u32, this, target as i64);
    }
    module
        .define_data(id, &desc)
        .map_err(|e| NncError::Codegen {
            context: "model info".into(),
            message: e.to_string(),
        })?;
    Ok(id)
}
