//! Rust twins of `include/nnc.h`: the C ABI every nnc-compiled model exports.
//!
//! Each item here mirrors the header item of the same name; the layout tests
//! below and `tests/c_layout.rs` keep the two in step.

use std::ffi::{c_char, c_void, CStr};

/// The whole header, so the compiler can write it next to its artifacts.
pub const NNC_H: &str = include_str!("../include/nnc.h");
/// The header-only pthread pool for `run` (`nnc_pool.h`, which includes `nnc.h`).
pub const NNC_POOL_H: &str = include_str!("../include/nnc_pool.h");

/// `nnc_model_info.abi_version` for the layout declared here.
pub const NNC_ABI_VERSION: u32 = 10;
/// The oldest `abi_version` this crate still runs: version 2 only added
/// [`NNC_ERR_INDEX_OUT_OF_RANGE`], so a version 1 library is a version 2 library
/// that never returns it; version 3 added `run` and `workspace_size` (threads), which
/// older libraries lack (see [`NncRunOptions`]); version 4 appended symbolic dims
/// to [`NncModelInfo`] and [`NncRunOptions`] and added `shapes`; version 5 appended
/// bounded output axes to [`NncModelInfo`] and `output_shapes` to [`NncRunOptions`];
/// version 6 appended the axes' extent steps to [`NncModelInfo`]; versions 7 to 9
/// only added return codes.
pub const NNC_ABI_VERSION_OLDEST: u32 = 1;

/// Success: every output buffer has been written.
pub const NNC_OK: i32 = 0;
/// `inputs` or `outputs` is null, or one of their elements is null.
pub const NNC_ERR_NULL_POINTER: i32 = 1;
/// `workspace` is null or its address is not a multiple of `workspace_align`.
pub const NNC_ERR_MISALIGNED_WORKSPACE: i32 = 2;
/// An index read from an input at run time is out of range for its axis; nothing
/// outside any buffer was touched, but the outputs may be partly written (ABI 2).
pub const NNC_ERR_INDEX_OUT_OF_RANGE: i32 = 3;

/// `options->size` too small to read, or a pool without threads or `parallel_for`
/// (`run` only, ABI 3).
pub const NNC_ERR_BAD_OPTIONS: i32 = 4;
/// `options->workspace_bytes` is not 0 and below `workspace_size(options)` (`run`
/// only, ABI 3).
pub const NNC_ERR_WORKSPACE_TOO_SMALL: i32 = 5;
/// A value in `options->dims` (or `shapes`' `dims`) is outside its dim's declared
/// range; nothing was written (ABI 4).
pub const NNC_ERR_DIM_OUT_OF_RANGE: i32 = 6;
/// The dims' values are each in range but together break a fact about extents the
/// model needs (a Reshape's element count, two extents a broadcast or a matrix
/// product needs equal); nothing was written (`run` and `shapes`, ABI 7).
pub const NNC_ERR_DIMS_INCONSISTENT: i32 = 7;
/// An input the model reads as a shape holds values other than those its declared
/// output shapes imply, which the library was compiled for; nothing was written (ABI 8).
pub const NNC_ERR_SHAPE_INPUT_MISMATCH: i32 = 8;
/// The CPU lacks an instruction set extension the library was compiled for; the
/// library checked before running anything and wrote nothing (ABI 9).
pub const NNC_ERR_UNSUPPORTED_CPU: i32 = 9;

/// What an `infer` return code means, for error messages.
pub fn status_message(code: i32) -> String {
    match code {
        NNC_OK => "success (NNC_OK)".into(),
        NNC_ERR_NULL_POINTER => "a NULL input or output pointer (NNC_ERR_NULL_POINTER)".into(),
        NNC_ERR_MISALIGNED_WORKSPACE => {
            "a NULL or misaligned workspace (NNC_ERR_MISALIGNED_WORKSPACE)".into()
        }
        NNC_ERR_INDEX_OUT_OF_RANGE => "an index in the input data is out of range \
             (NNC_ERR_INDEX_OUT_OF_RANGE); the outputs are not valid"
            .into(),
        NNC_ERR_BAD_OPTIONS => "unreadable run options or a pool without threads \
             (NNC_ERR_BAD_OPTIONS)"
            .into(),
        NNC_ERR_WORKSPACE_TOO_SMALL => "a workspace smaller than workspace_size(options) \
             (NNC_ERR_WORKSPACE_TOO_SMALL)"
            .into(),
        NNC_ERR_DIM_OUT_OF_RANGE => "a dimension value outside its declared range \
             (NNC_ERR_DIM_OUT_OF_RANGE)"
            .into(),
        NNC_ERR_DIMS_INCONSISTENT => "dimension values the model cannot run with together \
             (NNC_ERR_DIMS_INCONSISTENT)"
            .into(),
        NNC_ERR_SHAPE_INPUT_MISMATCH => "a shape input holding values other than those the \
             library was compiled for (NNC_ERR_SHAPE_INPUT_MISMATCH)"
            .into(),
        NNC_ERR_UNSUPPORTED_CPU => "this CPU lacks an instruction set extension the \
             library was compiled for (NNC_ERR_UNSUPPORTED_CPU); compile it with a --cpu \
             this CPU has"
            .into(),
        c => format!("unknown NNC error code {c}"),
    }
}

// Element types: the codes of ONNX `TensorProto.DataType`.
pub const NNC_DTYPE_UNDEFINED: i32 = 0;
pub const NNC_DTYPE_FLOAT: i32 = 1;
pub const NNC_DTYPE_UINT8: i32 = 2;
pub const NNC_DTYPE_INT8: i32 = 3;
pub const NNC_DTYPE_UINT16: i32 = 4;
pub const NNC_DTYPE_INT16: i32 = 5;
pub const NNC_DTYPE_INT32: i32 = 6;
pub const NNC_DTYPE_INT64: i32 = 7;
pub const NNC_DTYPE_STRING: i32 = 8;
pub const NNC_DTYPE_BOOL: i32 = 9;
pub const NNC_DTYPE_FLOAT16: i32 = 10;
pub const NNC_DTYPE_DOUBLE: i32 = 11;
pub const NNC_DTYPE_UINT32: i32 = 12;
pub const NNC_DTYPE_UINT64: i32 = 13;
pub const NNC_DTYPE_COMPLEX64: i32 = 14;
pub const NNC_DTYPE_COMPLEX128: i32 = 15;
pub const NNC_DTYPE_BFLOAT16: i32 = 16;
pub const NNC_DTYPE_FLOAT8E4M3FN: i32 = 17;
pub const NNC_DTYPE_FLOAT8E4M3FNUZ: i32 = 18;
pub const NNC_DTYPE_FLOAT8E5M2: i32 = 19;
pub const NNC_DTYPE_FLOAT8E5M2FNUZ: i32 = 20;
pub const NNC_DTYPE_UINT4: i32 = 21;
pub const NNC_DTYPE_INT4: i32 = 22;
pub const NNC_DTYPE_FLOAT4E2M1: i32 = 23;
pub const NNC_DTYPE_FLOAT8E8M0: i32 = 24;
pub const NNC_DTYPE_UINT2: i32 = 25;
pub const NNC_DTYPE_INT2: i32 = 26;
pub const NNC_DTYPE_FLOAT6E2M3: i32 = 27;
pub const NNC_DTYPE_FLOAT6E3M2: i32 = 28;

/// Size in bytes of one element of a dense tensor of ONNX type `code`.
///
/// `None` for types that have no whole-byte element size (strings, the
/// packed sub-byte types) and for unknown codes.
pub fn dtype_size(code: i32) -> Option<usize> {
    match code {
        NNC_DTYPE_UINT8 | NNC_DTYPE_INT8 | NNC_DTYPE_BOOL => Some(1),
        NNC_DTYPE_FLOAT8E4M3FN
        | NNC_DTYPE_FLOAT8E4M3FNUZ
        | NNC_DTYPE_FLOAT8E5M2
        | NNC_DTYPE_FLOAT8E5M2FNUZ
        | NNC_DTYPE_FLOAT8E8M0 => Some(1),
        NNC_DTYPE_UINT16 | NNC_DTYPE_INT16 | NNC_DTYPE_FLOAT16 | NNC_DTYPE_BFLOAT16 => Some(2),
        NNC_DTYPE_FLOAT | NNC_DTYPE_INT32 | NNC_DTYPE_UINT32 => Some(4),
        NNC_DTYPE_INT64 | NNC_DTYPE_UINT64 | NNC_DTYPE_DOUBLE | NNC_DTYPE_COMPLEX64 => Some(8),
        NNC_DTYPE_COMPLEX128 => Some(16),
        _ => None,
    }
}

/// The ONNX `TensorProto.DataType` name of `code`, in lower case
/// (`"float"`, `"bfloat16"`, …); `None` for unknown codes.
pub fn dtype_name(code: i32) -> Option<&'static str> {
    Some(match code {
        NNC_DTYPE_UNDEFINED => "undefined",
        NNC_DTYPE_FLOAT => "float",
        NNC_DTYPE_UINT8 => "uint8",
        NNC_DTYPE_INT8 => "int8",
        NNC_DTYPE_UINT16 => "uint16",
        NNC_DTYPE_INT16 => "int16",
        NNC_DTYPE_INT32 => "int32",
        NNC_DTYPE_INT64 => "int64",
        NNC_DTYPE_STRING => "string",
        NNC_DTYPE_BOOL => "bool",
        NNC_DTYPE_FLOAT16 => "float16",
        NNC_DTYPE_DOUBLE => "double",
        NNC_DTYPE_UINT32 => "uint32",
        NNC_DTYPE_UINT64 => "uint64",
        NNC_DTYPE_COMPLEX64 => "complex64",
        NNC_DTYPE_COMPLEX128 => "complex128",
        NNC_DTYPE_BFLOAT16 => "bfloat16",
        NNC_DTYPE_FLOAT8E4M3FN => "float8e4m3fn",
        NNC_DTYPE_FLOAT8E4M3FNUZ => "float8e4m3fnuz",
        NNC_DTYPE_FLOAT8E5M2 => "float8e5m2",
        NNC_DTYPE_FLOAT8E5M2FNUZ => "float8e5m2fnuz",
        NNC_DTYPE_UINT4 => "uint4",
        NNC_DTYPE_INT4 => "int4",
        NNC_DTYPE_FLOAT4E2M1 => "float4e2m1",
        NNC_DTYPE_FLOAT8E8M0 => "float8e8m0",
        NNC_DTYPE_UINT2 => "uint2",
        NNC_DTYPE_INT2 => "int2",
        NNC_DTYPE_FLOAT6E2M3 => "float6e2m3",
        NNC_DTYPE_FLOAT6E3M2 => "float6e3m2",
        _ => return None,
    })
}

/// Base names of the exported entry points; the exported symbol is the
/// model's symbol prefix followed by one of these.
pub const INFER_SYMBOL: &str = "infer";
pub const INFER_WITH_WORKSPACE_SYMBOL: &str = "infer_with_workspace";
pub const MODEL_INFO_SYMBOL: &str = "model_info";
pub const WORKSPACE_SIZE_SYMBOL: &str = "workspace_size";
pub const RUN_SYMBOL: &str = "run";
pub const SHAPES_SYMBOL: &str = "shapes";

/// The symbol prefix for a model compiled with `--name <model_name>`:
/// empty without a name, `foo_` for `foo`.
pub fn symbol_prefix(model_name: Option<&str>) -> String {
    model_name.map_or_else(String::new, |name| format!("{name}_"))
}

/// `nnc_tensor_info`: one input or output tensor.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NncTensorInfo {
    /// The ONNX value name, NUL-terminated UTF-8.
    pub name: *const c_char,
    /// An `NNC_DTYPE_*` code.
    pub dtype: i32,
    /// Number of dimensions; 0 for a scalar.
    pub rank: i32,
    /// `rank` static sizes, outermost first.
    pub dims: *const i64,
}

/// `nnc_model_info`: what a compiled model takes, returns and needs.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NncModelInfo {
    pub abi_version: u32,
    pub num_inputs: u32,
    pub num_outputs: u32,
    pub inputs: *const NncTensorInfo,
    pub outputs: *const NncTensorInfo,
    /// Scratch bytes `infer_with_workspace` needs.
    pub workspace_size: u64,
    /// Required alignment (a power of two) of the workspace address.
    pub workspace_align: u64,
    /// ABI 4 (present only when `abi_version >= 4`): the symbolic dims and the
    /// axes that depend on them.
    pub num_dims: u32,
    pub num_axis_dims: u32,
    pub dims: *const NncDimInfo,
    pub axis_dims: *const NncAxisDim,
    /// ABI 5 (present only when `abi_version >= 5`): the outputs' axes whose extent
    /// the input values decide.
    pub num_bounded_axes: u32,
    pub bounded_axes: *const NncBoundedAxis,
    /// ABI 6 (present only when `abi_version >= 6`): per entry of `axis_dims`, the
    /// steps its extent goes through; NULL when every axis is `scale · dims[dim]`.
    pub axis_extents: *const NncAxisExtent,
    /// ABI 10 (present only when `abi_version >= 10`): the CPU variants the library
    /// carries, most capable first, as `--cpu` names them separated by commas.
    pub cpu_variants: *const c_char,
    /// ABI 10: the features a CPU must have to run the library (its least demanding
    /// variant's), comma-separated; empty when every CPU of the architecture can.
    pub required_cpu_features: *const c_char,
}

/// Bytes of `nnc_model_info` in libraries before ABI 4 (the fields up to
/// `workspace_align`).
pub const NNC_MODEL_INFO_V3_SIZE: usize = 48;
/// Bytes of `nnc_model_info` in ABI 4 libraries (the fields up to `axis_dims`).
pub const NNC_MODEL_INFO_V4_SIZE: usize = 72;
/// Bytes of `nnc_model_info` in ABI 5 libraries (the fields up to `bounded_axes`).
pub const NNC_MODEL_INFO_V5_SIZE: usize = 88;
/// Bytes of `nnc_model_info` in ABI 6 to 9 libraries (the fields up to `axis_extents`).
pub const NNC_MODEL_INFO_V6_SIZE: usize = 96;

/// `nnc_dim_info`: a dim the caller sets at run time (ABI 4).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NncDimInfo {
    /// NUL-terminated UTF-8: the model's name for it, or `INPUT.AXIS`.
    pub name: *const c_char,
    pub min: i64,
    pub max: i64,
}

/// `nnc_axis_dim`: axis `axis` of tensor `tensor` (inputs first, then outputs) has
/// the size `scale · dims[dim]` (ABI 4).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NncAxisDim {
    pub tensor: u32,
    pub axis: u32,
    pub dim: u32,
    pub reserved: u32,
    pub scale: i64,
}

/// `nnc_extent_step`: `x ↦ ⌊(x + add) / div⌋` (ABI 6).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NncExtentStep {
    pub add: i64,
    pub div: i64,
}

/// `nnc_axis_extent`: the steps the extent of an `nnc_axis_dim`'s axis goes through
/// after `scale · dims[dim]` (ABI 6).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NncAxisExtent {
    pub num_steps: u32,
    pub reserved: u32,
    pub steps: *const NncExtentStep,
}

/// `nnc_bounded_axis`: axis `axis` of output `output` has an extent the input values
/// decide; its size in `nnc_tensor_info` is the largest it can have, the output is
/// written densely for the run's extent, and `output_shapes` reports it (ABI 5).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NncBoundedAxis {
    pub output: u32,
    pub axis: u32,
}

unsafe impl Sync for NncDimInfo {}
unsafe impl Send for NncDimInfo {}

// SAFETY: both structs are plain immutable descriptions; sharing one only
// shares pointer values, and every dereference is behind an `unsafe fn`
// whose caller vouches for the pointees. This lets them live in statics.
unsafe impl Sync for NncTensorInfo {}
unsafe impl Send for NncTensorInfo {}
unsafe impl Sync for NncModelInfo {}
unsafe impl Send for NncModelInfo {}

/// `nnc_task_fn`: one task of a node, `task(task_ctx, index, worker)`.
pub type NncTaskFn = unsafe extern "C" fn(*mut c_void, u32, u32);

/// `nnc_thread_pool`: a caller-owned pool. `parallel_for(ctx, n, task, task_ctx)`
/// returns after `task(task_ctx, i, worker)` has run once for every `i < n`, each with
/// a `worker < num_threads` unique among the tasks running at once.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NncThreadPool {
    pub ctx: *mut c_void,
    pub num_threads: u32,
    pub parallel_for: unsafe extern "C" fn(*mut c_void, u32, NncTaskFn, *mut c_void),
}

/// `nnc_run_options`: what `run` and `workspace_size` take.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NncRunOptions {
    /// `size_of::<NncRunOptions>()`: later versions append fields.
    pub size: u32,
    /// Null: everything on the calling thread.
    pub pool: *const NncThreadPool,
    /// Bytes at `workspace`, checked against `workspace_size` when not 0.
    pub workspace_bytes: u64,
    /// ABI 4: the values of the model's symbolic dims; null: each at its maximum.
    pub dims: *const i64,
    /// ABI 5: when not null, a successful `run` writes every output's shape here
    /// (outputs in order, `rank` values each), a bounded axis with the run's extent.
    pub output_shapes: *mut i64,
}

impl NncRunOptions {
    /// Options for `pool` (none: single-threaded) and a workspace of `workspace_bytes`.
    pub fn new(pool: Option<&NncThreadPool>, workspace_bytes: u64) -> NncRunOptions {
        NncRunOptions {
            size: std::mem::size_of::<NncRunOptions>() as u32,
            pool: pool.map_or(std::ptr::null(), |p| p as *const NncThreadPool),
            workspace_bytes,
            dims: std::ptr::null(),
            output_shapes: std::ptr::null_mut(),
        }
    }

    /// These options with the dims' values `dims` (which must outlive the call).
    pub fn with_dims(mut self, dims: &[i64]) -> NncRunOptions {
        self.dims = if dims.is_empty() {
            std::ptr::null()
        } else {
            dims.as_ptr()
        };
        self
    }

    /// These options with `shapes` (which must outlive the call, and hold the sum of
    /// the outputs' ranks) to receive the outputs' shapes.
    pub fn with_output_shapes(mut self, shapes: &mut [i64]) -> NncRunOptions {
        self.output_shapes = if shapes.is_empty() {
            std::ptr::null_mut()
        } else {
            shapes.as_mut_ptr()
        };
        self
    }
}

/// `PREFIXworkspace_size`: bytes of workspace a run with these options needs.
pub type WorkspaceSizeFn = unsafe extern "C" fn(*const NncRunOptions) -> u64;
/// `PREFIXrun`: `infer_with_workspace` with options (a pool); reentrant.
pub type RunFn = unsafe extern "C" fn(
    *const *const c_void,
    *const *mut c_void,
    *mut c_void,
    *const NncRunOptions,
) -> i32;

/// `PREFIXshapes(dims, shapes)`: every input's and output's shape for the dims'
/// values (ABI 4).
pub type ShapesFn = unsafe extern "C" fn(*const i64, *mut i64) -> i32;
/// `PREFIXinfer`: runs on the library's internal arena; not reentrant.
pub type InferFn = unsafe extern "C" fn(*const *const c_void, *const *mut c_void) -> i32;
/// `PREFIXinfer_with_workspace`: runs on the caller's workspace; reentrant.
pub type InferWithWorkspaceFn =
    unsafe extern "C" fn(*const *const c_void, *const *mut c_void, *mut c_void) -> i32;
/// `PREFIXmodel_info`: never null, the same static object on every call.
pub type ModelInfoFn = unsafe extern "C" fn() -> *const NncModelInfo;

/// A slice from a C (pointer, length) pair, tolerating a null pointer when
/// the length is zero (C code commonly leaves empty arrays null).
///
/// # Safety
/// If `len > 0`, `ptr` must point to `len` valid `T`s that outlive `'a`.
unsafe fn c_slice<'a, T>(ptr: *const T, len: usize) -> &'a [T] {
    if len == 0 {
        &[]
    } else {
        assert!(!ptr.is_null(), "null array pointer with length {len}");
        // SAFETY: non-null, and the caller vouches for `len` elements.
        unsafe { std::slice::from_raw_parts(ptr, len) }
    }
}

impl NncTensorInfo {
    /// The tensor's name; `None` if the pointer is null.
    ///
    /// # Safety
    /// A non-null `name` must point to a NUL-terminated string that lives
    /// as long as `self`.
    pub unsafe fn name(&self) -> Option<&CStr> {
        // SAFETY: non-null here, and the caller vouches for the rest.
        (!self.name.is_null()).then(|| unsafe { CStr::from_ptr(self.name) })
    }

    /// The static dimensions (empty for a scalar).
    ///
    /// # Safety
    /// If `rank > 0`, `dims` must point to `rank` values that live as long
    /// as `self`.
    pub unsafe fn dims_slice(&self) -> &[i64] {
        let rank = usize::try_from(self.rank).unwrap_or(0);
        // SAFETY: forwarded to the caller.
        unsafe { c_slice(self.dims, rank) }
    }

    /// Number of elements: the product of the dimensions (1 for a scalar);
    /// `None` on a negative dimension or overflow.
    ///
    /// # Safety
    /// As for [`Self::dims_slice`].
    pub unsafe fn element_count(&self) -> Option<usize> {
        // SAFETY: forwarded to the caller.
        unsafe { self.dims_slice() }
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(usize::try_from(d).ok()?))
    }

    /// Size in bytes of the dense buffer for this tensor; `None` when the
    /// dtype has no whole-byte size or the size overflows.
    ///
    /// # Safety
    /// As for [`Self::dims_slice`].
    pub unsafe fn byte_size(&self) -> Option<usize> {
        // SAFETY: forwarded to the caller.
        unsafe { self.element_count() }?.checked_mul(dtype_size(self.dtype)?)
    }
}

impl NncModelInfo {
    /// The input descriptions, in `inputs[i]` order.
    ///
    /// # Safety
    /// `inputs` must point to `num_inputs` descriptions that live as long
    /// as `self` (always true for a loaded library's `model_info()`).
    pub unsafe fn inputs_slice(&self) -> &[NncTensorInfo] {
        // SAFETY: forwarded to the caller.
        unsafe { c_slice(self.inputs, self.num_inputs as usize) }
    }

    /// The output descriptions, in `outputs[i]` order.
    ///
    /// # Safety
    /// `outputs` must point to `num_outputs` descriptions that live as long
    /// as `self` (always true for a loaded library's `model_info()`).
    pub unsafe fn outputs_slice(&self) -> &[NncTensorInfo] {
        // SAFETY: forwarded to the caller.
        unsafe { c_slice(self.outputs, self.num_outputs as usize) }
    }

    /// The bounded output axes (empty before ABI 5).
    ///
    /// # Safety
    /// `bounded_axes` must point to `num_bounded_axes` entries that live as long as
    /// `self`, which a struct read in full from a library of ABI 5 or later gives.
    pub unsafe fn bounded_axes_slice(&self) -> &[NncBoundedAxis] {
        if self.abi_version < 5 {
            return &[];
        }
        // SAFETY: forwarded to the caller.
        unsafe { c_slice(self.bounded_axes, self.num_bounded_axes as usize) }
    }

    /// `(cpu_variants, required_cpu_features)`, `None` before ABI 10 or where a
    /// pointer is NULL.
    ///
    /// # Safety
    /// Each pointer, when not NULL, must be a NUL-terminated string that lives as long
    /// as `self`, which a struct read in full from a library of ABI 10 or later gives.
    pub unsafe fn cpu_strings(&self) -> (Option<&CStr>, Option<&CStr>) {
        if self.abi_version < 10 {
            return (None, None);
        }
        let read = |p: *const c_char| {
            // SAFETY: forwarded to the caller.
            (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) })
        };
        (read(self.cpu_variants), read(self.required_cpu_features))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of, size_of};

    /// The LP64 layout (x86-64 and aarch64 Linux, the targets nnc emits
    /// code for) that a C compiler gives the header's structs.
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn struct_layouts_match_lp64_c() {
        assert_eq!(size_of::<NncTensorInfo>(), 24);
        assert_eq!(align_of::<NncTensorInfo>(), 8);
        assert_eq!(offset_of!(NncTensorInfo, name), 0);
        assert_eq!(offset_of!(NncTensorInfo, dtype), 8);
        assert_eq!(offset_of!(NncTensorInfo, rank), 12);
        assert_eq!(offset_of!(NncTensorInfo, dims), 16);

        assert_eq!(size_of::<NncModelInfo>(), 112);
        assert_eq!(align_of::<NncModelInfo>(), 8);
        assert_eq!(offset_of!(NncModelInfo, abi_version), 0);
        assert_eq!(offset_of!(NncModelInfo, num_inputs), 4);
        assert_eq!(offset_of!(NncModelInfo, num_outputs), 8);
        assert_eq!(offset_of!(NncModelInfo, inputs), 16);
        assert_eq!(offset_of!(NncModelInfo, outputs), 24);
        assert_eq!(offset_of!(NncModelInfo, workspace_size), 32);
        assert_eq!(offset_of!(NncModelInfo, workspace_align), 40);
        assert_eq!(offset_of!(NncModelInfo, num_dims), NNC_MODEL_INFO_V3_SIZE);
        assert_eq!(offset_of!(NncModelInfo, num_axis_dims), 52);
        assert_eq!(offset_of!(NncModelInfo, dims), 56);
        assert_eq!(offset_of!(NncModelInfo, axis_dims), 64);
        assert_eq!(
            offset_of!(NncModelInfo, num_bounded_axes),
            NNC_MODEL_INFO_V4_SIZE
        );
        assert_eq!(offset_of!(NncModelInfo, bounded_axes), 80);
        assert_eq!(
            offset_of!(NncModelInfo, axis_extents),
            NNC_MODEL_INFO_V5_SIZE
        );
        assert_eq!(
            offset_of!(NncModelInfo, cpu_variants),
            NNC_MODEL_INFO_V6_SIZE
        );
        assert_eq!(offset_of!(NncModelInfo, required_cpu_features), 104);
        assert_eq!(size_of::<NncExtentStep>(), 16);
        assert_eq!(offset_of!(NncExtentStep, div), 8);
        assert_eq!(size_of::<NncAxisExtent>(), 16);
        assert_eq!(offset_of!(NncAxisExtent, steps), 8);
        assert_eq!(size_of::<NncBoundedAxis>(), 8);
        assert_eq!(align_of::<NncBoundedAxis>(), 4);
        assert_eq!(offset_of!(NncBoundedAxis, output), 0);
        assert_eq!(offset_of!(NncBoundedAxis, axis), 4);
        assert_eq!(size_of::<NncDimInfo>(), 24);
        assert_eq!(size_of::<NncAxisDim>(), 24);
        assert_eq!(offset_of!(NncAxisDim, scale), 16);
        assert_eq!(size_of::<NncRunOptions>(), 40);
        assert_eq!(offset_of!(NncRunOptions, dims), 24);
        assert_eq!(offset_of!(NncRunOptions, output_shapes), 32);
    }

    /// Every `#define NAME VALUE` in the header, as (name, value).
    fn header_int_defines() -> Vec<(&'static str, i64)> {
        NNC_H
            .lines()
            .filter_map(|line| {
                let mut words = line.strip_prefix("#define ")?.split_whitespace();
                let name = words.next()?;
                let value = words.next()?.parse().ok()?;
                Some((name, value))
            })
            .collect()
    }

    #[test]
    fn header_constants_match_rust_constants() {
        let defines = header_int_defines();
        let get = |name: &str| {
            defines
                .iter()
                .find(|(n, _)| *n == name)
                .unwrap_or_else(|| panic!("{name} not defined in nnc.h"))
                .1
        };
        assert_eq!(get("NNC_ABI_VERSION"), i64::from(NNC_ABI_VERSION));
        assert_eq!(get("NNC_OK"), i64::from(NNC_OK));
        assert_eq!(
            get("NNC_ERR_UNSUPPORTED_CPU"),
            i64::from(NNC_ERR_UNSUPPORTED_CPU)
        );
        assert_eq!(get("NNC_ERR_NULL_POINTER"), i64::from(NNC_ERR_NULL_POINTER));
        assert_eq!(
            get("NNC_ERR_MISALIGNED_WORKSPACE"),
            i64::from(NNC_ERR_MISALIGNED_WORKSPACE)
        );
        assert_eq!(
            get("NNC_ERR_INDEX_OUT_OF_RANGE"),
            i64::from(NNC_ERR_INDEX_OUT_OF_RANGE)
        );
    }

    /// Each `NNC_DTYPE_X n` in the header is the code `dtype_name` calls "x",
    /// so the header, the Rust constants and the names cannot drift apart.
    #[test]
    fn header_dtype_defines_match_dtype_name() {
        let dtypes: Vec<_> = header_int_defines()
            .into_iter()
            .filter_map(|(name, value)| Some((name.strip_prefix("NNC_DTYPE_")?, value)))
            .collect();
        assert_eq!(dtypes.len(), 29, "codes 0..=28 of onnx 1.23 expected");
        for (name, code) in dtypes {
            let code = i32::try_from(code).unwrap();
            assert_eq!(dtype_name(code), Some(name.to_lowercase().as_str()));
        }
    }

    #[test]
    fn dtype_sizes() {
        assert_eq!(dtype_size(NNC_DTYPE_FLOAT), Some(4));
        assert_eq!(dtype_size(NNC_DTYPE_BOOL), Some(1));
        assert_eq!(dtype_size(NNC_DTYPE_FLOAT16), Some(2));
        assert_eq!(dtype_size(NNC_DTYPE_BFLOAT16), Some(2));
        assert_eq!(dtype_size(NNC_DTYPE_INT64), Some(8));
        assert_eq!(dtype_size(NNC_DTYPE_UINT64), Some(8));
        assert_eq!(dtype_size(NNC_DTYPE_DOUBLE), Some(8));
        assert_eq!(dtype_size(NNC_DTYPE_COMPLEX128), Some(16));
        assert_eq!(dtype_size(NNC_DTYPE_STRING), None);
        assert_eq!(dtype_size(NNC_DTYPE_INT4), None);
        assert_eq!(dtype_size(NNC_DTYPE_UNDEFINED), None);
        assert_eq!(dtype_size(999), None);
        assert_eq!(dtype_name(999), None);
    }

    #[test]
    fn run_options_builders() {
        let plain = NncRunOptions::new(None, 64);
        assert_eq!(plain.size as usize, size_of::<NncRunOptions>());
        assert!(plain.pool.is_null() && plain.dims.is_null() && plain.output_shapes.is_null());
        let dims = [3i64];
        let mut shapes = [0i64; 4];
        let options = plain.with_dims(&dims).with_output_shapes(&mut shapes);
        assert_eq!(options.dims, dims.as_ptr());
        assert_eq!(options.output_shapes, shapes.as_mut_ptr());
        // A model whose outputs are all scalars has nothing to report.
        assert!(plain.with_output_shapes(&mut []).output_shapes.is_null());
    }

    #[test]
    fn bounded_axes_exist_from_abi_5() {
        let bounded = [NncBoundedAxis { output: 1, axis: 0 }];
        let mut info = NncModelInfo {
            abi_version: 5,
            num_inputs: 0,
            num_outputs: 0,
            inputs: std::ptr::null(),
            outputs: std::ptr::null(),
            workspace_size: 0,
            workspace_align: 16,
            num_dims: 0,
            num_axis_dims: 0,
            dims: std::ptr::null(),
            axis_dims: std::ptr::null(),
            num_bounded_axes: 1,
            bounded_axes: bounded.as_ptr(),
            axis_extents: std::ptr::null(),
            cpu_variants: std::ptr::null(),
            required_cpu_features: std::ptr::null(),
        };
        assert_eq!(unsafe { info.bounded_axes_slice() }, &bounded);
        // An ABI 4 struct ends before these fields: whatever a copy holds there is
        // not the library's.
        info.abi_version = 4;
        assert_eq!(unsafe { info.bounded_axes_slice() }, &[]);
    }

    #[test]
    fn symbol_prefixes() {
        assert_eq!(symbol_prefix(None), "");
        assert_eq!(symbol_prefix(Some("foo")), "foo_");
    }

    #[test]
    fn helpers_read_c_arrays() {
        let dims = [2i64, 3, 4];
        let input = NncTensorInfo {
            name: c"x".as_ptr(),
            dtype: NNC_DTYPE_FLOAT,
            rank: 3,
            dims: dims.as_ptr(),
        };
        let scalar = NncTensorInfo {
            name: std::ptr::null(),
            dtype: NNC_DTYPE_INT64,
            rank: 0,
            dims: std::ptr::null(),
        };
        let info = NncModelInfo {
            abi_version: NNC_ABI_VERSION,
            num_inputs: 1,
            num_outputs: 1,
            inputs: &input,
            outputs: &scalar,
            workspace_size: 0,
            workspace_align: 16,
            num_dims: 0,
            num_axis_dims: 0,
            dims: std::ptr::null(),
            axis_dims: std::ptr::null(),
            num_bounded_axes: 0,
            bounded_axes: std::ptr::null(),
            axis_extents: std::ptr::null(),
            cpu_variants: std::ptr::null(),
            required_cpu_features: std::ptr::null(),
        };
        unsafe {
            let inputs = info.inputs_slice();
            assert_eq!(inputs.len(), 1);
            assert_eq!(inputs[0].name(), Some(c"x"));
            assert_eq!(inputs[0].dims_slice(), &[2, 3, 4]);
            assert_eq!(inputs[0].element_count(), Some(24));
            assert_eq!(inputs[0].byte_size(), Some(96));

            let outputs = info.outputs_slice();
            assert_eq!(outputs[0].name(), None);
            assert_eq!(outputs[0].dims_slice(), &[] as &[i64]);
            assert_eq!(outputs[0].element_count(), Some(1));
            assert_eq!(outputs[0].byte_size(), Some(8));
        }

        let negative = [-1i64];
        let dynamic = NncTensorInfo {
            rank: 1,
            dims: negative.as_ptr(),
            ..input
        };
        assert_eq!(unsafe { dynamic.element_count() }, None);
    }
}
