//! A safe loader for nnc-compiled shared libraries at run time: opens the `.so`,
//! checks its `abi_version`, reads the shapes and dtypes `model_info` describes, and
//! runs the model on byte buffers or typed slices checked against them.
//!
//! ```no_run
//! use nnc_runtime_abi::loader::{Library, Tensor, TensorMut};
//! let model = Library::open("libmodel.so", None)?;
//! let mut workspace = model.workspace();
//! let image = vec![0f32; 64];
//! let mut probs = vec![0f32; 4];
//! model.run(&mut workspace, &[Tensor::from(&image[..])], &mut [TensorMut::from(&mut probs[..])])?;
//! # Ok::<(), nnc_runtime_abi::loader::Error>(())
//! ```

use std::ffi::c_void;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::abi::*;
use crate::pool::ThreadPool;

/// Why loading or running failed.
#[derive(Debug)]
pub enum Error {
    /// dlopen or dlsym failed.
    Load { path: PathBuf, message: String },
    /// The library was built for another version of the ABI.
    AbiVersion { path: PathBuf, found: u32 },
    /// `model_info` describes something this loader cannot use.
    BadInfo { path: PathBuf, message: String },
    /// A call's buffers do not match the model.
    Mismatch(String),
    /// The compiled code returned this `NNC_ERR_*` code.
    Status(i32),
    /// A run returned `NNC_OK` but reported output shapes its `model_info` rules out.
    BadShapes { path: PathBuf, message: String },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Load { path, message } => write!(f, "{}: {message}", path.display()),
            Error::AbiVersion { path, found } => write!(
                f,
                "{}: built for nnc ABI version {found}, this loader speaks versions \
                 {NNC_ABI_VERSION_OLDEST} to {NNC_ABI_VERSION}",
                path.display()
            ),
            Error::BadInfo { path, message } => {
                write!(f, "{}: model_info: {message}", path.display())
            }
            Error::Mismatch(m) => f.write_str(m),
            Error::Status(code) => write!(f, "infer failed: {}", status_message(*code)),
            Error::BadShapes { path, message } => {
                write!(f, "{}: run reported {message}", path.display())
            }
        }
    }
}

impl std::error::Error for Error {}

/// One input or output as `model_info` describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorDesc {
    pub name: String,
    /// An `NNC_DTYPE_*` code (ONNX `TensorProto.DataType`).
    pub dtype: i32,
    pub shape: Vec<usize>,
    /// Bytes of its dense buffer.
    pub byte_size: usize,
}

impl TensorDesc {
    /// The dtype's ONNX name (`float`, `int64`, …).
    pub fn dtype_name(&self) -> &'static str {
        dtype_name(self.dtype).unwrap_or("unknown")
    }

    pub fn element_count(&self) -> usize {
        self.shape.iter().product()
    }
}

impl fmt::Display for TensorDesc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}{:?}", self.name, self.dtype_name(), self.shape)
    }
}

/// A dim the caller sets at run time (ABI 4), as `model_info` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DimDesc {
    pub name: String,
    pub min: usize,
    pub max: usize,
}

/// Axis `axis` of tensor `tensor` (inputs first, then outputs) has the size
/// `scale · dims[dim]` put through `steps`, each `(add, div)` mapping x to
/// `⌊(x + add) / div⌋` (ABI 6; none for an input's axis).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AxisDep {
    pub tensor: usize,
    pub axis: usize,
    pub dim: usize,
    pub scale: usize,
    pub steps: Vec<(i64, i64)>,
}

impl AxisDep {
    /// The axis's size when its dim is `value` (`None` on overflow).
    pub fn size_at(&self, value: usize) -> Option<usize> {
        let x = i64::try_from(self.scale.checked_mul(value)?).ok()?;
        let x = (self.steps.iter()).try_fold(x, |x, &(add, div)| {
            let y = x.checked_add(add)?;
            (y >= 0 && div >= 1).then(|| y / div)
        })?;
        usize::try_from(x).ok()
    }
}

/// Axis `axis` of output `output` has an extent the input values decide (ABI 5): its
/// size in [`Library::outputs`] (and [`Library::shapes_for`]) is the largest it can
/// have, the buffer must hold that many elements, and the output is written densely
/// for the run's extent, which [`Library::run_shaped`] returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BoundedAxis {
    pub output: usize,
    pub axis: usize,
}

/// Bytes of a dense buffer of `count` elements of `dtype`, packed sub-byte types
/// included (`None` for strings and unknown codes).
fn buffer_size(dtype: i32, count: usize) -> Option<usize> {
    match dtype {
        NNC_DTYPE_UINT4 | NNC_DTYPE_INT4 | NNC_DTYPE_FLOAT4E2M1 => Some(count.div_ceil(2)),
        NNC_DTYPE_UINT2 | NNC_DTYPE_INT2 => Some(count.div_ceil(4)),
        NNC_DTYPE_FLOAT6E2M3 | NNC_DTYPE_FLOAT6E3M2 => Some((count * 6).div_ceil(8)),
        _ => count.checked_mul(dtype_size(dtype)?),
    }
}

/// A Rust type that is one element of an ABI dtype.
pub trait Element: Copy {
    const DTYPE: i32;
}

macro_rules! element {
    ($($t:ty => $code:expr),* $(,)?) => {
        $(impl Element for $t { const DTYPE: i32 = $code; })*
    };
}

element!(
    f32 => NNC_DTYPE_FLOAT, f64 => NNC_DTYPE_DOUBLE,
    i8 => NNC_DTYPE_INT8, i16 => NNC_DTYPE_INT16, i32 => NNC_DTYPE_INT32, i64 => NNC_DTYPE_INT64,
    u8 => NNC_DTYPE_UINT8, u16 => NNC_DTYPE_UINT16, u32 => NNC_DTYPE_UINT32, u64 => NNC_DTYPE_UINT64,
    bool => NNC_DTYPE_BOOL,
);

/// An input buffer: its bytes and, when it came from a typed slice, its dtype.
#[derive(Clone, Copy, Debug)]
pub struct Tensor<'a> {
    bytes: *const u8,
    len: usize,
    dtype: Option<i32>,
    _data: std::marker::PhantomData<&'a [u8]>,
}

impl<'a, T: Element> From<&'a [T]> for Tensor<'a> {
    fn from(s: &'a [T]) -> Tensor<'a> {
        Tensor {
            bytes: s.as_ptr().cast(),
            len: std::mem::size_of_val(s),
            dtype: Some(T::DTYPE),
            _data: std::marker::PhantomData,
        }
    }
}

impl<'a> Tensor<'a> {
    /// Raw little-endian bytes of any dtype (float16, packed int4, …): only the size
    /// is checked.
    pub fn bytes(b: &'a [u8]) -> Tensor<'a> {
        Tensor {
            bytes: b.as_ptr(),
            len: b.len(),
            dtype: None,
            _data: std::marker::PhantomData,
        }
    }
}

/// An output buffer: its bytes and, when it came from a typed slice, its dtype.
#[derive(Debug)]
pub struct TensorMut<'a> {
    bytes: *mut u8,
    len: usize,
    dtype: Option<i32>,
    _data: std::marker::PhantomData<&'a mut [u8]>,
}

impl<'a, T: Element> From<&'a mut [T]> for TensorMut<'a> {
    fn from(s: &'a mut [T]) -> TensorMut<'a> {
        TensorMut {
            len: std::mem::size_of_val(s),
            bytes: s.as_mut_ptr().cast(),
            dtype: Some(T::DTYPE),
            _data: std::marker::PhantomData,
        }
    }
}

impl<'a> TensorMut<'a> {
    /// Raw bytes of any dtype: only the size is checked.
    pub fn bytes(b: &'a mut [u8]) -> TensorMut<'a> {
        TensorMut {
            bytes: b.as_mut_ptr(),
            len: b.len(),
            dtype: None,
            _data: std::marker::PhantomData,
        }
    }
}

/// Scratch memory for one call at a time, sized and aligned for one model.
pub struct Workspace {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

// Plain memory owned by this value; calls take it by `&mut`.
unsafe impl Send for Workspace {}
unsafe impl Sync for Workspace {}

impl Drop for Workspace {
    fn drop(&mut self) {
        // SAFETY: allocated in `Library::workspace` with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}

/// A loaded model library.
pub struct Library {
    path: PathBuf,
    inputs: Vec<TensorDesc>,
    outputs: Vec<TensorDesc>,
    workspace_size: usize,
    workspace_align: usize,
    infer: InferWithWorkspaceFn,
    /// `run` and `workspace_size` (ABI 3 and later).
    pooled: Option<(RunFn, WorkspaceSizeFn)>,
    /// Symbolic dims and the axes depending on them (ABI 4).
    dims: Vec<DimDesc>,
    axis_deps: Vec<AxisDep>,
    /// Output axes whose extent the input values decide (ABI 5).
    bounded_axes: Vec<BoundedAxis>,
    /// `cpu_variants` and `required_cpu_features` (ABI 10; `None` before).
    cpu: Option<(String, String)>,
    abi_version: u32,
    // Dropped last: `infer` points into it.
    _lib: libloading::Library,
}

// The entry point reads only its arguments and immutable library data
// (`infer_with_workspace` is reentrant by contract), so sharing the handle across
// threads is sound; each call needs its own workspace.
unsafe impl Send for Library {}
unsafe impl Sync for Library {}

impl Library {
    /// Opens `path` and binds the model compiled with `--name name` (None: no name).
    pub fn open(path: impl AsRef<Path>, name: Option<&str>) -> Result<Library, Error> {
        let path = path.as_ref().to_path_buf();
        let load_err = |m: String| Error::Load {
            path: path.clone(),
            message: m,
        };
        let prefix = symbol_prefix(name);
        // SAFETY: loading runs the library's initializers; nnc's libraries have none.
        let lib =
            unsafe { libloading::Library::new(&path) }.map_err(|e| load_err(e.to_string()))?;
        let symbol = |base: &str| format!("{prefix}{base}\0").into_bytes();
        // SAFETY: the symbols have the types nnc.h declares for them.
        let (info_fn, infer) = unsafe {
            let info_fn: ModelInfoFn = *lib
                .get::<ModelInfoFn>(symbol(MODEL_INFO_SYMBOL).as_slice())
                .map_err(|e| load_err(e.to_string()))?;
            let infer: InferWithWorkspaceFn = *lib
                .get::<InferWithWorkspaceFn>(symbol(INFER_WITH_WORKSPACE_SYMBOL).as_slice())
                .map_err(|e| load_err(e.to_string()))?;
            (info_fn, infer)
        };
        // SAFETY: model_info never returns NULL and points to static data that
        // lives while the library is loaded (nnc.h); `read_model_info` reads only
        // the fields its `abi_version` has.
        let info = unsafe { read_model_info(info_fn()) };
        let info = &info;
        // SAFETY: as above; libraries before ABI 3 lack them.
        let pooled = (info.abi_version >= 3)
            .then(|| unsafe {
                let run = lib.get::<RunFn>(symbol(RUN_SYMBOL).as_slice()).ok()?;
                let size = lib
                    .get::<WorkspaceSizeFn>(symbol(WORKSPACE_SIZE_SYMBOL).as_slice())
                    .ok()?;
                Some((*run, *size))
            })
            .flatten();
        if !(NNC_ABI_VERSION_OLDEST..=NNC_ABI_VERSION).contains(&info.abi_version) {
            return Err(Error::AbiVersion {
                path,
                found: info.abi_version,
            });
        }
        let bad = |m: String| Error::BadInfo {
            path: path.clone(),
            message: m,
        };
        // SAFETY: the descriptions are static data of the loaded library.
        let describe = |list: &[NncTensorInfo]| -> Result<Vec<TensorDesc>, Error> {
            list.iter()
                .map(|t| unsafe {
                    let name = t
                        .name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    let shape = t
                        .dims_slice()
                        .iter()
                        .map(|&d| usize::try_from(d))
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|_| bad(format!("'{name}' has a negative dimension")))?;
                    let byte_size = buffer_size(t.dtype, shape.iter().product())
                        .ok_or_else(|| bad(format!("'{name}' has dtype code {}", t.dtype)))?;
                    Ok(TensorDesc {
                        name,
                        dtype: t.dtype,
                        shape,
                        byte_size,
                    })
                })
                .collect()
        };
        // SAFETY: as above.
        let (inputs, outputs) = unsafe {
            (
                describe(info.inputs_slice())?,
                describe(info.outputs_slice())?,
            )
        };
        let workspace_align = usize::try_from(info.workspace_align)
            .ok()
            .filter(|a| a.is_power_of_two())
            .ok_or_else(|| bad(format!("workspace_align {}", info.workspace_align)))?;
        let workspace_size = usize::try_from(info.workspace_size)
            .map_err(|_| bad(format!("workspace_size {}", info.workspace_size)))?;
        // SAFETY: static data of the loaded library (zero counts before ABI 4).
        let (dims, axis_deps) = unsafe { read_dims(info) }.map_err(bad)?;
        if axis_deps
            .iter()
            .any(|a| a.tensor >= inputs.len() + outputs.len() || a.dim >= dims.len())
            || axis_deps.iter().any(|a| {
                let t = inputs.iter().chain(&outputs).nth(a.tensor);
                t.is_none_or(|t| a.axis >= t.shape.len())
            })
        {
            return Err(bad("an axis_dims entry names no tensor, axis or dim".into()));
        }
        if !dims.is_empty() && pooled.is_none() {
            return Err(bad("symbolic dims without `run`".into()));
        }
        if info.num_bounded_axes > 0
            && (info.bounded_axes.is_null() || !info.bounded_axes.is_aligned())
        {
            return Err(bad("bounded_axes is NULL or misaligned".into()));
        }
        // SAFETY: static data of the loaded library (none before ABI 5); non-NULL and
        // aligned when the count is not 0.
        let bounded_axes: Vec<BoundedAxis> = unsafe { info.bounded_axes_slice() }
            .iter()
            .map(|b| BoundedAxis {
                output: b.output as usize,
                axis: b.axis as usize,
            })
            .collect();
        if let Some(b) = bounded_axes.iter().find(|b| {
            outputs
                .get(b.output)
                .is_none_or(|t| b.axis >= t.shape.len())
        }) {
            return Err(bad(format!(
                "bounded axis {} of output {} names no output axis",
                b.axis, b.output
            )));
        }
        // Only `run` reports the extents: without it the outputs could not be read.
        if !bounded_axes.is_empty() && pooled.is_none() {
            return Err(bad("bounded output axes without `run`".into()));
        }
        // SAFETY: as above: the strings live in the library's data.
        let cpu = match unsafe { info.cpu_strings() } {
            (Some(v), Some(r)) => Some((
                v.to_string_lossy().into_owned(),
                r.to_string_lossy().into_owned(),
            )),
            _ => None,
        };
        Ok(Library {
            dims,
            axis_deps,
            bounded_axes,
            cpu,
            abi_version: info.abi_version,
            path,
            inputs,
            outputs,
            workspace_size,
            workspace_align,
            infer,
            pooled,
            _lib: lib,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn inputs(&self) -> &[TensorDesc] {
        &self.inputs
    }

    pub fn outputs(&self) -> &[TensorDesc] {
        &self.outputs
    }

    /// The dims the caller sets at run time (empty for a model of fixed shapes); the
    /// shapes of [`Library::inputs`] and [`Library::outputs`] have each at its maximum.
    pub fn dims(&self) -> &[DimDesc] {
        &self.dims
    }

    /// Which axes of the inputs and outputs depend on which dim.
    pub fn axis_deps(&self) -> &[AxisDep] {
        &self.axis_deps
    }

    /// The output axes whose extent the input values decide (empty before ABI 5); see
    /// [`Library::run_shaped`].
    pub fn bounded_axes(&self) -> &[BoundedAxis] {
        &self.bounded_axes
    }

    /// The CPU variants the library carries, as `--cpu` names them, most capable
    /// first (`None` before ABI 10).
    pub fn cpu_variants(&self) -> Option<Vec<&str>> {
        (self.cpu.as_ref()).map(|(v, _)| v.split(',').collect())
    }

    /// The features a CPU must have to run the library, empty when any CPU of its
    /// architecture can (`None` before ABI 10); elsewhere every call returns
    /// `NNC_ERR_UNSUPPORTED_CPU`.
    pub fn required_cpu_features(&self) -> Option<Vec<&str>> {
        (self.cpu.as_ref()).map(|(_, r)| r.split(',').filter(|f| !f.is_empty()).collect())
    }

    /// The `abi_version` the library was built for.
    pub fn abi_version(&self) -> u32 {
        self.abi_version
    }

    /// The inputs and outputs for the dims' values `dims` (one per [`Library::dims`]).
    pub fn shapes_for(&self, dims: &[usize]) -> Result<(Vec<TensorDesc>, Vec<TensorDesc>), Error> {
        check_count("dim values", dims.len(), self.dims.len())?;
        for (d, &v) in self.dims.iter().zip(dims) {
            if !(d.min..=d.max).contains(&v) {
                return Err(Error::Mismatch(format!(
                    "dimension '{}' = {v} is outside {}..{}",
                    d.name, d.min, d.max
                )));
            }
        }
        let n_in = self.inputs.len();
        let overflow = || Error::Mismatch("a tensor's size overflows for these dims".into());
        let concrete = |k: usize, t: &TensorDesc| -> Result<TensorDesc, Error> {
            let mut t = t.clone();
            for a in self.axis_deps.iter().filter(|a| a.tensor == k) {
                t.shape[a.axis] = a.size_at(dims[a.dim]).ok_or_else(overflow)?;
            }
            let count = (t.shape.iter()).try_fold(1usize, |n, &d| n.checked_mul(d));
            t.byte_size = count
                .and_then(|n| buffer_size(t.dtype, n))
                .ok_or_else(overflow)?;
            Ok(t)
        };
        let inputs = (self.inputs.iter().enumerate())
            .map(|(k, t)| concrete(k, t))
            .collect::<Result<_, _>>()?;
        let outputs = (self.outputs.iter().enumerate())
            .map(|(k, t)| concrete(n_in + k, t))
            .collect::<Result<_, _>>()?;
        Ok((inputs, outputs))
    }

    /// The dims' values the shapes of `inputs` give (each taken from the first input
    /// axis that depends on it; the call then checks every buffer).
    pub fn dims_of(&self, input_shapes: &[&[usize]]) -> Result<Vec<usize>, Error> {
        check_count("inputs", input_shapes.len(), self.inputs.len())?;
        (0..self.dims.len())
            .map(|j| {
                let a = self
                    .axis_deps
                    .iter()
                    .find(|a| a.dim == j && a.tensor < self.inputs.len() && a.steps.is_empty())
                    .ok_or_else(|| {
                        Error::Mismatch(format!("no input depends on '{}'", self.dims[j].name))
                    })?;
                let size = input_shapes[a.tensor].get(a.axis).copied().unwrap_or(0);
                if a.scale == 0 || size % a.scale != 0 {
                    return Err(Error::Mismatch(format!(
                        "input '{}' has {size} on axis {}, not a multiple of {}",
                        self.inputs[a.tensor].name, a.axis, a.scale
                    )));
                }
                Ok(size / a.scale)
            })
            .collect()
    }

    /// Bytes of scratch memory a call needs.
    pub fn workspace_size(&self) -> usize {
        self.workspace_size
    }

    /// A workspace for this model: one per concurrent call.
    pub fn workspace(&self) -> Workspace {
        self.workspace_of(self.workspace_size)
    }

    /// Bytes of workspace a [`Library::run_with`] call with `pool` needs.
    pub fn workspace_size_for(&self, pool: &ThreadPool) -> usize {
        match self.pooled {
            Some((_, size)) => {
                let raw = pool.as_raw();
                let options = NncRunOptions::new(Some(&raw), 0);
                // SAFETY: the options and the pool they point to are live.
                usize::try_from(unsafe { size(&options) }).unwrap_or(usize::MAX)
            }
            None => self.workspace_size,
        }
    }

    /// A workspace for calls of [`Library::run_with`] with `pool` (or any pool of no
    /// more threads): one per concurrent call.
    pub fn workspace_for(&self, pool: &ThreadPool) -> Workspace {
        self.workspace_of(self.workspace_size_for(pool))
    }

    fn workspace_of(&self, bytes: usize) -> Workspace {
        self.try_workspace_of(bytes)
            .unwrap_or_else(|layout| std::alloc::handle_alloc_error(layout))
    }

    /// Like [`Library::workspace`], but `None` when the allocator refuses the block
    /// (a tool reports that instead of aborting).
    pub fn try_workspace(&self) -> Option<Workspace> {
        self.try_workspace_of(self.workspace_size).ok()
    }

    fn try_workspace_of(&self, bytes: usize) -> Result<Workspace, std::alloc::Layout> {
        // A non-NULL workspace is required even when the size is 0.
        let layout = std::alloc::Layout::from_size_align(bytes.max(1), self.workspace_align)
            .expect("model_info gives a valid layout (checked in open)");
        // SAFETY: non-zero size.
        let ptr = unsafe { std::alloc::alloc(layout) };
        if ptr.is_null() {
            return Err(layout);
        }
        Ok(Workspace { ptr, layout })
    }

    /// Runs the model: every input and output buffer is checked against
    /// `model_info` (count, byte size, and dtype for typed slices) before the call.
    /// An output with a bounded axis ([`Library::bounded_axes`]) is written for an
    /// extent only [`Library::run_shaped`] reports.
    pub fn run(
        &self,
        workspace: &mut Workspace,
        inputs: &[Tensor<'_>],
        outputs: &mut [TensorMut<'_>],
    ) -> Result<(), Error> {
        self.check_call(inputs, outputs)?;
        if workspace.layout.size() < self.workspace_size
            || workspace.layout.align() < self.workspace_align
        {
            return Err(Error::Mismatch(
                "the workspace belongs to another model".into(),
            ));
        }
        let ins: Vec<*const c_void> = inputs.iter().map(|t| t.bytes.cast()).collect();
        let outs: Vec<*mut c_void> = outputs.iter_mut().map(|t| t.bytes.cast()).collect();
        // SAFETY: every buffer was checked to have its tensor's size, and the
        // workspace is large and aligned enough and borrowed mutably for this call.
        let code = unsafe { (self.infer)(ins.as_ptr(), outs.as_ptr(), workspace.ptr.cast()) };
        match code {
            NNC_OK => Ok(()),
            c => Err(Error::Status(c)),
        }
    }
}

impl Library {
    /// [`Library::run`] with the nodes worth it split over `pool`'s threads (the
    /// library's `run`; outputs bit-identical to a single-threaded run). `workspace`
    /// must come from [`Library::workspace_for`] with a pool of at least as many
    /// threads. A library built before ABI 3 runs on the calling thread.
    pub fn run_with(
        &self,
        pool: &ThreadPool,
        workspace: &mut Workspace,
        inputs: &[Tensor<'_>],
        outputs: &mut [TensorMut<'_>],
    ) -> Result<(), Error> {
        let maxima: Vec<usize> = self.dims.iter().map(|d| d.max).collect();
        self.run_dims(Some(pool), workspace, &maxima, inputs, outputs)
    }

    /// [`Library::run_with`] (`pool`: `None` for the calling thread) for the dims'
    /// values `dims`: every buffer is checked against the shapes for these values.
    pub fn run_dims(
        &self,
        pool: Option<&ThreadPool>,
        workspace: &mut Workspace,
        dims: &[usize],
        inputs: &[Tensor<'_>],
        outputs: &mut [TensorMut<'_>],
    ) -> Result<(), Error> {
        self.run_reporting(pool, workspace, dims, inputs, outputs, None)
    }

    /// [`Library::run_dims`] that also returns every output's shape for this run: a
    /// bounded axis ([`Library::bounded_axes`]) has the extent the input values gave
    /// it (its buffer is filled densely for that extent, the rest is unspecified),
    /// every other axis the size [`Library::shapes_for`] gives. Each reported value is
    /// checked against those sizes. A library before ABI 5 has no bounded axes: its
    /// shapes are those of `shapes_for`.
    pub fn run_shaped(
        &self,
        pool: Option<&ThreadPool>,
        workspace: &mut Workspace,
        dims: &[usize],
        inputs: &[Tensor<'_>],
        outputs: &mut [TensorMut<'_>],
    ) -> Result<Vec<Vec<usize>>, Error> {
        let (_, out_descs) = self.shapes_for(dims)?;
        let bounds: Vec<Vec<usize>> = out_descs.into_iter().map(|d| d.shape).collect();
        if self.abi_version < 5 || self.pooled.is_none() {
            self.run_dims(pool, workspace, dims, inputs, outputs)?;
            return Ok(bounds);
        }
        // A value the library leaves unwritten stays -1 and fails the check below.
        let mut reported = vec![-1i64; bounds.iter().map(Vec::len).sum()];
        self.run_reporting(pool, workspace, dims, inputs, outputs, Some(&mut reported))?;
        self.check_reported(&reported, bounds)
    }

    /// The shapes in `reported` (outputs in order, `rank` values each), each checked
    /// against its output's size for the run in `bounds`: at most that on a bounded
    /// axis, exactly that elsewhere.
    fn check_reported(
        &self,
        reported: &[i64],
        bounds: Vec<Vec<usize>>,
    ) -> Result<Vec<Vec<usize>>, Error> {
        let mut values = reported.iter();
        let mut shapes = bounds;
        for (k, shape) in shapes.iter_mut().enumerate() {
            for (axis, size) in shape.iter_mut().enumerate() {
                let bound = *size;
                let v = *values.next().expect("one value per output axis");
                let bounded = (self.bounded_axes.iter()).any(|b| b.output == k && b.axis == axis);
                let fits =
                    usize::try_from(v)
                        .ok()
                        .filter(|&v| if bounded { v <= bound } else { v == bound });
                *size = fits.ok_or_else(|| Error::BadShapes {
                    path: self.path.clone(),
                    message: format!(
                        "{v} for axis {axis} of output '{}', which has {} {bound}",
                        self.outputs[k].name,
                        if bounded { "at most" } else { "exactly" }
                    ),
                })?;
            }
        }
        Ok(shapes)
    }

    /// `run` with the dims' values and, when given, `output_shapes` to receive the
    /// outputs' shapes (at least the sum of their ranks); a library without `run`
    /// runs `infer_with_workspace`, which has no dims and reports nothing.
    fn run_reporting(
        &self,
        pool: Option<&ThreadPool>,
        workspace: &mut Workspace,
        dims: &[usize],
        inputs: &[Tensor<'_>],
        outputs: &mut [TensorMut<'_>],
        output_shapes: Option<&mut [i64]>,
    ) -> Result<(), Error> {
        let (in_descs, out_descs) = self.shapes_for(dims)?;
        let Some((run, _)) = self.pooled else {
            return self.run(workspace, inputs, outputs);
        };
        check_buffers(inputs, outputs, &in_descs, &out_descs)?;
        if workspace.layout.align() < self.workspace_align {
            return Err(Error::Mismatch(
                "the workspace belongs to another model".into(),
            ));
        }
        let raw = pool.map(ThreadPool::as_raw);
        let values: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        let mut options =
            NncRunOptions::new(raw.as_ref(), workspace.layout.size() as u64).with_dims(&values);
        if let Some(shapes) = output_shapes {
            options = options.with_output_shapes(shapes);
        }
        let ins: Vec<*const c_void> = inputs.iter().map(|t| t.bytes.cast()).collect();
        let outs: Vec<*mut c_void> = outputs.iter_mut().map(|t| t.bytes.cast()).collect();
        // SAFETY: buffers checked against the shapes for `dims`; the workspace's size
        // is passed in the options and checked by the library; the pool, the dim
        // values and the shapes' room (as long as the caller vouches) outlive the call.
        let code = unsafe { run(ins.as_ptr(), outs.as_ptr(), workspace.ptr.cast(), &options) };
        match code {
            NNC_OK => Ok(()),
            c => Err(Error::Status(c)),
        }
    }

    fn check_call(&self, inputs: &[Tensor<'_>], outputs: &[TensorMut<'_>]) -> Result<(), Error> {
        check_buffers(inputs, outputs, &self.inputs, &self.outputs)
    }
}

fn check_buffers(
    inputs: &[Tensor<'_>],
    outputs: &[TensorMut<'_>],
    in_descs: &[TensorDesc],
    out_descs: &[TensorDesc],
) -> Result<(), Error> {
    check_count("inputs", inputs.len(), in_descs.len())?;
    check_count("outputs", outputs.len(), out_descs.len())?;
    for (t, d) in inputs.iter().zip(in_descs) {
        check_buffer("input", d, t.dtype, t.len)?;
    }
    for (t, d) in outputs.iter().zip(out_descs) {
        check_buffer("output", d, t.dtype, t.len)?;
    }
    Ok(())
}

/// A copy of `*info`: the whole struct from ABI 10 on; for ABI 6 to 9 its first
/// [`NNC_MODEL_INFO_V6_SIZE`] bytes, for ABI 5 its first [`NNC_MODEL_INFO_V5_SIZE`];
/// for ABI 4 its first
/// [`NNC_MODEL_INFO_V4_SIZE`] bytes and no bounded axes; before, its first
/// [`NNC_MODEL_INFO_V3_SIZE`] bytes and no dims either.
///
/// # Safety
/// `info` points to a library's `nnc_model_info` of the size its `abi_version` implies.
unsafe fn read_model_info(info: *const NncModelInfo) -> NncModelInfo {
    // SAFETY: every version starts with `abi_version`.
    let version = unsafe { std::ptr::read(info.cast::<u32>()) };
    if version >= 10 {
        // SAFETY: an ABI 10 library's struct has every field (later ones append).
        return unsafe { std::ptr::read(info) };
    }
    // Only the older struct's bytes may be read: what follows it is other data.
    let size = match version {
        6..=9 => NNC_MODEL_INFO_V6_SIZE,
        5 => NNC_MODEL_INFO_V5_SIZE,
        4 => NNC_MODEL_INFO_V4_SIZE,
        _ => NNC_MODEL_INFO_V3_SIZE,
    };
    let mut out = NncModelInfo {
        abi_version: 0,
        num_inputs: 0,
        num_outputs: 0,
        inputs: std::ptr::null(),
        outputs: std::ptr::null(),
        workspace_size: 0,
        workspace_align: 1,
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
    // SAFETY: an older struct has its version's first `size` bytes, laid out as ours.
    unsafe {
        std::ptr::copy_nonoverlapping(
            info.cast::<u8>(),
            (&mut out as *mut NncModelInfo).cast::<u8>(),
            size,
        )
    };
    out
}

/// The symbolic dims and axis dependencies of `info`.
///
/// # Safety
/// As [`NncModelInfo::inputs_slice`], for `dims` and `axis_dims`.
unsafe fn read_dims(info: &NncModelInfo) -> Result<(Vec<DimDesc>, Vec<AxisDep>), String> {
    if (info.num_dims > 0 && info.dims.is_null())
        || (info.num_axis_dims > 0 && info.axis_dims.is_null())
    {
        return Err("dims or axis_dims is NULL with a nonzero count".into());
    }
    let dims = (0..info.num_dims as usize)
        .map(|j| {
            // SAFETY: `num_dims` entries (caller).
            let d = unsafe { &*info.dims.add(j) };
            let name = if d.name.is_null() {
                String::new()
            } else {
                // SAFETY: NUL-terminated static string (caller).
                unsafe { std::ffi::CStr::from_ptr(d.name) }
                    .to_string_lossy()
                    .into_owned()
            };
            let min = usize::try_from(d.min).map_err(|_| format!("dim '{name}' min {}", d.min))?;
            let max = usize::try_from(d.max).map_err(|_| format!("dim '{name}' max {}", d.max))?;
            if min > max {
                return Err(format!("dim '{name}' has min {min} > max {max}"));
            }
            Ok(DimDesc { name, min, max })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let deps = (0..info.num_axis_dims as usize)
        .map(|j| {
            // SAFETY: `num_axis_dims` entries (caller).
            let a = unsafe { &*info.axis_dims.add(j) };
            let steps = match info.axis_extents.is_null() {
                true => vec![],
                // SAFETY: `num_axis_dims` entries when not NULL (caller).
                false => unsafe { read_steps(&*info.axis_extents.add(j)) }?,
            };
            Ok(AxisDep {
                tensor: a.tensor as usize,
                axis: a.axis as usize,
                dim: a.dim as usize,
                scale: usize::try_from(a.scale).map_err(|_| format!("axis scale {}", a.scale))?,
                steps,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok((dims, deps))
}

/// The steps of one axis's extent.
///
/// # Safety
/// `e.steps` points to `e.num_steps` entries (or is NULL with none).
unsafe fn read_steps(e: &NncAxisExtent) -> Result<Vec<(i64, i64)>, String> {
    if e.num_steps > 0 && e.steps.is_null() {
        return Err("an axis extent's steps are NULL with a nonzero count".into());
    }
    (0..e.num_steps as usize)
        .map(|k| {
            // SAFETY: `num_steps` entries (caller).
            let s = unsafe { &*e.steps.add(k) };
            match s.div >= 1 {
                true => Ok((s.add, s.div)),
                false => Err(format!("an axis extent divides by {}", s.div)),
            }
        })
        .collect()
}

fn check_count(what: &str, given: usize, expected: usize) -> Result<(), Error> {
    if given == expected {
        Ok(())
    } else {
        Err(Error::Mismatch(format!(
            "{given} {what} given, the model has {expected}"
        )))
    }
}

fn check_buffer(kind: &str, d: &TensorDesc, dtype: Option<i32>, len: usize) -> Result<(), Error> {
    if let Some(code) = dtype.filter(|&c| c != d.dtype) {
        return Err(Error::Mismatch(format!(
            "{kind} '{}' is {}, the buffer holds {}",
            d.name,
            d.dtype_name(),
            dtype_name(code).unwrap_or("unknown")
        )));
    }
    if len != d.byte_size {
        return Err(Error::Mismatch(format!(
            "{kind} '{}' ({}{:?}) needs {} bytes, the buffer has {len}",
            d.name,
            d.dtype_name(),
            d.shape,
            d.byte_size
        )));
    }
    Ok(())
}
