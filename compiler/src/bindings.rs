//! Typed Rust bindings for a compiled model: a module named after the model (its
//! `--name`) with the raw `extern "C"` declarations, input and output structs whose
//! fields are fixed-size arrays (so shapes are checked by the type system, or once
//! when built from slices), and a `Workspace` that makes calls reentrant.
//!
//! The generated code needs only `std`, so `include!` works in any crate; `nnc-build`
//! writes it to `OUT_DIR/NAME.rs`.

use crate::ir::{DType, Graph, ValueId};

/// The Rust element type that carries `dtype` across the ABI, and whether each
/// element is one of it (false: packed sub-byte codes carried as bytes).
fn rust_element(dtype: DType) -> (&'static str, bool) {
    match dtype {
        DType::F32 => ("f32", true),
        DType::F64 => ("f64", true),
        DType::I8 => ("i8", true),
        DType::I16 => ("i16", true),
        DType::I32 => ("i32", true),
        DType::I64 => ("i64", true),
        DType::U8 => ("u8", true),
        DType::U16 => ("u16", true),
        DType::U32 => ("u32", true),
        DType::U64 => ("u64", true),
        DType::Bool => ("bool", true),
        // IEEE half and bfloat16 as their bit patterns (the `half` crate's
        // `f16::from_bits` / `bf16::from_bits` read them).
        DType::F16 | DType::BF16 => ("u16", true),
        // float8/int4/... codes, packed as ONNX packs them.
        _ => ("u8", false),
    }
}

const KEYWORDS: &[&str] = &[
    "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum", "extern",
    "false", "fn", "for", "gen", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut",
    "pub", "ref", "return", "self", "Self", "static", "struct", "super", "trait", "true", "type",
    "unsafe", "use", "where", "while", "abstract", "become", "box", "do", "final", "macro",
    "override", "priv", "try", "typeof", "unsized", "virtual", "yield",
];

/// A snake_case Rust identifier from a tensor name (`input.1` → `input_1`).
fn field_name(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, 't');
    }
    if KEYWORDS.contains(&s.as_str()) {
        s.push('_');
    }
    s
}

/// Distinct field names for `ids`, suffixed `_2`, `_3`... where names collide.
fn field_names(graph: &Graph, ids: &[ValueId], taken: &mut Vec<String>) -> Vec<String> {
    ids.iter()
        .map(|v| {
            let base = field_name(&graph.value(*v).name);
            let mut name = base.clone();
            let mut k = 2;
            while taken.contains(&name) {
                name = format!("{base}_{k}");
                k += 1;
            }
            taken.push(name.clone());
            name
        })
        .collect()
}

struct Field {
    name: String,
    onnx_name: String,
    element: &'static str,
    /// Elements (bytes for packed codes) with every dim at its maximum.
    len: usize,
    shape: Vec<usize>,
    dtype: DType,
    /// For a tensor whose axes depend on dims: its length for the values `dims` (a
    /// Rust expression over `dims` and the generated `extent`).
    len_of_dims: Option<String>,
}

/// The fields of `ids`, the graph's tensors numbered from `first` (inputs first, then
/// outputs, as [`crate::ir::run_dims::axis_dims`] numbers them): a tensor whose axis depends on
/// a dim holds, per unit of the dim, its elements at the dim's value 1.
fn fields(graph: &Graph, ids: &[ValueId], first: usize, taken: &mut Vec<String>) -> Vec<Field> {
    let deps = crate::ir::run_dims::axis_dims(graph);
    let maxima: Vec<usize> = graph.dims.iter().map(|d| d.max).collect();
    field_names(graph, ids, taken)
        .into_iter()
        .zip(ids)
        .enumerate()
        .map(|(i, (name, v))| {
            let info = graph.value(*v);
            let (element, per_element) = rust_element(info.ty.dtype);
            let unit = if per_element {
                info.ty.numel()
            } else {
                info.ty.byte_size()
            };
            let t = first + i;
            let own: Vec<_> = deps.iter().filter(|d| d.tensor == t).collect();
            let shape = crate::ir::run_dims::concrete_shape(&info.ty.shape, t, &deps, &maxima);
            let planned: usize = own.iter().map(|d| info.ty.shape[d.axis].max(1)).product();
            let per_unit = unit / planned.max(1);
            let at_max: usize = own.iter().map(|d| shape[d.axis]).product();
            let len = per_unit * at_max;
            let len_of_dims = (!own.is_empty()).then(|| {
                let mut factors = vec![per_unit.to_string()];
                for d in &own {
                    let steps: Vec<String> = (d.size.steps.iter())
                        .map(|s| format!("({}, {})", s.add, s.div))
                        .collect();
                    factors.push(format!(
                        "extent({} * dims[{}], &[{}])",
                        d.scale,
                        d.dim,
                        steps.join(", ")
                    ));
                }
                factors.join(" * ")
            });
            Field {
                name,
                onnx_name: info.name.clone(),
                element,
                len,
                shape,
                dtype: info.ty.dtype,
                len_of_dims,
            }
        })
        .collect()
}

/// The bindings module for `graph` compiled with `--name name` (a C identifier, not
/// empty) and a workspace of `workspace_size` bytes; `origin` is a line describing
/// how it was built (model path, target, profile).
pub fn generate(graph: &Graph, name: &str, workspace_size: usize, origin: &str) -> String {
    let prefix = crate::codegen::symbol_prefix(name);
    let align = crate::codegen::plan::ALIGN;
    let mut taken = vec![];
    let inputs = fields(graph, &graph.inputs, 0, &mut taken);
    let mut taken = vec![];
    let outputs = fields(graph, &graph.outputs, graph.inputs.len(), &mut taken);
    let mut s = String::new();
    let mut line = |t: &str| {
        s.push_str(t);
        s.push('\n');
    };
    line(&format!(
        "// Generated by nnc {}. Do not edit.",
        env!("CARGO_PKG_VERSION")
    ));
    line(&format!("// {origin}"));
    line(&format!(
        "/// The model `{name}`, compiled by nnc: see [`{name}::Workspace::run`]."
    ));
    line("#[allow(dead_code, clippy::all)]");
    line(&format!("pub mod {name} {{"));
    line("    /// The raw C ABI (`nnc.h`): dense row-major buffers in graph order.");
    line("    pub mod ffi {");
    line("        unsafe extern \"C\" {");
    line(&format!("            pub unsafe fn {prefix}infer(inputs: *const *const core::ffi::c_void, outputs: *const *mut core::ffi::c_void) -> i32;"));
    line(&format!("            pub unsafe fn {prefix}infer_with_workspace(inputs: *const *const core::ffi::c_void, outputs: *const *mut core::ffi::c_void, workspace: *mut core::ffi::c_void) -> i32;"));
    line(&format!(
        "            pub unsafe fn {prefix}model_info() -> *const core::ffi::c_void;"
    ));
    line(&format!("            pub unsafe fn {prefix}workspace_size(options: *const core::ffi::c_void) -> u64;"));
    line(&format!("            pub unsafe fn {prefix}run(inputs: *const *const core::ffi::c_void, outputs: *const *mut core::ffi::c_void, workspace: *mut core::ffi::c_void, options: *const core::ffi::c_void) -> i32;"));
    line(&format!(
        "            pub unsafe fn {prefix}shapes(dims: *const i64, shapes: *mut i64) -> i32;"
    ));
    line("        }");
    line("    }");
    line("");
    line("    /// Bytes of scratch memory one call needs, and their alignment.");
    line(&format!(
        "    pub const WORKSPACE_SIZE: usize = {workspace_size};"
    ));
    line(&format!("    pub const WORKSPACE_ALIGN: usize = {align};"));
    line("");
    line("    /// Shapes of the inputs and outputs, outermost dimension first.");
    line("    pub mod shapes {");
    for f in inputs.iter().chain(&outputs) {
        let dims: Vec<String> = f.shape.iter().map(|d| d.to_string()).collect();
        line(&format!(
            "        pub const {}: [usize; {}] = [{}];",
            f.name.to_ascii_uppercase(),
            f.shape.len(),
            dims.join(", ")
        ));
    }
    line("    }");
    line("");
    line("    /// Why a call failed.");
    line("    #[derive(Clone, Debug, PartialEq, Eq)]");
    line("    pub enum Error {");
    line("        /// A slice given to `from_slices` has the wrong number of elements.");
    line("        WrongLength { tensor: &'static str, expected: usize, found: usize },");
    line("        /// The compiled code returned this `NNC_ERR_*` code.");
    line("        Status(i32),");
    line("    }");
    line("");
    line("    impl core::fmt::Display for Error {");
    line("        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {");
    line("            match self {");
    line(&format!("                Error::WrongLength {{ tensor, expected, found }} => write!(f, \"{name}: tensor '{{tensor}}' needs {{expected}} elements, got {{found}}\"),"));
    line(&format!(
        "                Error::Status(3) => write!(f, \"{name}: an index in the input data is out of range (NNC_ERR_INDEX_OUT_OF_RANGE); the outputs are not valid\"),"
    ));
    line(&format!(
        "                Error::Status(code) => write!(f, \"{name}: infer returned {{code}}\"),"
    ));
    line("            }");
    line("        }");
    line("    }");
    line("");
    line("    impl std::error::Error for Error {}");
    line("");
    let struct_fields = |line: &mut dyn FnMut(&str), fs: &[Field], r: &str| {
        for f in fs {
            let dims: Vec<String> = f.shape.iter().map(|d| d.to_string()).collect();
            line(&format!(
                "        /// `{}`: {} [{}]",
                f.onnx_name.replace('`', "'"),
                f.dtype,
                dims.join(", ")
            ));
            line(&format!(
                "        pub {}: &'a {r}[{}; {}],",
                f.name, f.element, f.len
            ));
        }
    };
    line("    /// The inputs, one field per graph input, in graph order.");
    line("    #[derive(Clone, Copy)]");
    line("    pub struct Inputs<'a> {");
    struct_fields(&mut line, &inputs, "");
    if inputs.is_empty() {
        line("        pub _none: core::marker::PhantomData<&'a ()>,");
    }
    line("    }");
    line("");
    line("    /// Buffers for the outputs, one field per graph output, in graph order.");
    line("    pub struct Outputs<'a> {");
    struct_fields(&mut line, &outputs, "mut ");
    if outputs.is_empty() {
        line("        pub _none: core::marker::PhantomData<&'a ()>,");
    }
    line("    }");
    line("");
    let from_slices = |line: &mut dyn FnMut(&str), fs: &[Field], kind: &str, r: &str| {
        let params: Vec<String> = fs
            .iter()
            .map(|f| format!("{}: &'a {r}[{}]", f.name, f.element))
            .collect();
        line("        /// Checks each slice's length against the tensor's shape.");
        line(&format!(
            "        pub fn from_slices({}) -> Result<{kind}<'a>, Error> {{",
            params.join(", ")
        ));
        line(&format!("            Ok({kind} {{"));
        for f in fs {
            line(&format!(
                "                {n}: {{ let found = {n}.len(); {n}.try_into().map_err(|_| Error::WrongLength {{ tensor: {:?}, expected: {}, found }})? }},",
                f.onnx_name,
                f.len,
                n = f.name
            ));
        }
        if fs.is_empty() {
            line("                _none: core::marker::PhantomData,");
        }
        line("            })");
        line("        }");
    };
    line("    impl<'a> Inputs<'a> {");
    from_slices(&mut line, &inputs, "Inputs", "");
    line("    }");
    line("");
    line("    impl<'a> Outputs<'a> {");
    from_slices(&mut line, &outputs, "Outputs", "mut ");
    line("    }");
    line("");
    line("    /// Owned output buffers (on the heap: outputs can be large).");
    line("    pub struct OwnedOutputs {");
    for f in &outputs {
        line(&format!(
            "        pub {}: std::boxed::Box<[{}; {}]>,",
            f.name, f.element, f.len
        ));
    }
    line("    }");
    line("");
    line("    impl OwnedOutputs {");
    line("        /// Zeroed buffers.");
    line("        pub fn new() -> OwnedOutputs {");
    line("            OwnedOutputs {");
    for f in &outputs {
        line(&format!(
            "                {}: std::vec![Default::default(); {}].into_boxed_slice().try_into().unwrap_or_else(|_| unreachable!()),",
            f.name, f.len
        ));
    }
    line("            }");
    line("        }");
    line("");
    line("        /// Borrows every buffer for [`Workspace::run`].");
    line("        pub fn as_outputs(&mut self) -> Outputs<'_> {");
    line("            Outputs {");
    for f in &outputs {
        line(&format!("                {0}: &mut self.{0},", f.name));
    }
    if outputs.is_empty() {
        line("                _none: core::marker::PhantomData,");
    }
    line("            }");
    line("        }");
    line("    }");
    line("");
    line("    impl Default for OwnedOutputs {");
    line("        fn default() -> Self {");
    line("            Self::new()");
    line("        }");
    line("    }");
    line("");
    line("    /// Scratch memory for one call at a time: calls with distinct workspaces may");
    line("    /// run concurrently, so give each thread its own. Allocated once, reused by");
    line("    /// every call (the compiled code itself never allocates).");
    line("    pub struct Workspace {");
    line("        ptr: *mut u8,");
    line("        layout: core::alloc::Layout,");
    line("    }");
    line("");
    line("    // The workspace is plain memory owned by this value; `run` takes `&mut self`.");
    line("    unsafe impl Send for Workspace {}");
    line("    unsafe impl Sync for Workspace {}");
    line("");
    line("    impl Workspace {");
    line("        fn of_size(bytes: usize) -> Workspace {");
    line("            // A non-NULL workspace is required even when the size is 0.");
    line("            let layout = core::alloc::Layout::from_size_align(bytes.max(1), WORKSPACE_ALIGN).expect(\"valid layout\");");
    line("            // SAFETY: the layout has a non-zero size.");
    line("            let ptr = unsafe { std::alloc::alloc(layout) };");
    line("            if ptr.is_null() {");
    line("                std::alloc::handle_alloc_error(layout);");
    line("            }");
    line("            Workspace { ptr, layout }");
    line("        }");
    line("");
    line("        /// A workspace for [`Workspace::run`] (one thread).");
    line("        pub fn new() -> Workspace {");
    line("            Self::of_size(WORKSPACE_SIZE)");
    line("        }");
    line("");
    line("        /// A workspace for [`Workspace::run_with`] with `pool` (or a pool of fewer threads).");
    line("        pub fn with_pool(pool: &nnc_build::ThreadPool) -> Workspace {");
    line("            let raw = pool.as_raw();");
    line("            let options = nnc_build::__run_options(&raw, 0);");
    line(&format!("            // SAFETY: the options and the pool they point to are live.\n            let bytes = unsafe {{ ffi::{prefix}workspace_size((&options as *const nnc_build::__RunOptions).cast()) }};"));
    line("            Self::of_size(usize::try_from(bytes).unwrap_or(usize::MAX))");
    line("        }");
    line("");
    line("        /// Runs the model: reads `inputs`, writes every buffer of `outputs`.");
    line("        pub fn run(&mut self, inputs: &Inputs<'_>, outputs: &mut Outputs<'_>) -> Result<(), Error> {");
    let in_ptrs: Vec<String> = inputs
        .iter()
        .map(|f| format!("inputs.{}.as_ptr().cast()", f.name))
        .collect();
    let out_ptrs: Vec<String> = outputs
        .iter()
        .map(|f| format!("outputs.{}.as_mut_ptr().cast()", f.name))
        .collect();
    pointer_arrays(&mut line, &in_ptrs, &out_ptrs);
    line("            // SAFETY: every buffer has the exact size of its tensor (the array");
    line("            // types say so), and the workspace is WORKSPACE_SIZE bytes aligned to");
    line("            // WORKSPACE_ALIGN, used by this call only (`&mut self`).");
    line(&format!("            let code = unsafe {{ ffi::{prefix}infer_with_workspace(ins.as_ptr(), outs.as_ptr(), self.ptr.cast()) }};"));
    line("            if code == 0 { Ok(()) } else { Err(Error::Status(code)) }");
    line("        }");
    line("");
    line("        /// [`Workspace::run`] with the nodes worth it split over `pool`'s threads;");
    line("        /// the outputs are bit-identical. The workspace must come from");
    line("        /// [`Workspace::with_pool`] for a pool of at least as many threads (checked).");
    line("        pub fn run_with(&mut self, pool: &nnc_build::ThreadPool, inputs: &Inputs<'_>, outputs: &mut Outputs<'_>) -> Result<(), Error> {");
    pointer_arrays(&mut line, &in_ptrs, &out_ptrs);
    line("            let raw = pool.as_raw();");
    line("            let options = nnc_build::__run_options(&raw, self.layout.size() as u64);");
    line("            // SAFETY: buffers as in `run`; the library checks the workspace size");
    line("            // given in the options; the pool outlives the call.");
    line(&format!("            let code = unsafe {{ ffi::{prefix}run(ins.as_ptr(), outs.as_ptr(), self.ptr.cast(), (&options as *const nnc_build::__RunOptions).cast()) }};"));
    line("            if code == 0 { Ok(()) } else { Err(Error::Status(code)) }");
    line("        }");
    line("");
    line("        /// [`Workspace::run`] into freshly allocated output buffers.");
    line("        pub fn infer(&mut self, inputs: &Inputs<'_>) -> Result<OwnedOutputs, Error> {");
    line("            let mut out = OwnedOutputs::new();");
    line("            self.run(inputs, &mut out.as_outputs())?;");
    line("            Ok(out)");
    line("        }");
    line("    }");
    line("");
    if !graph.dims.is_empty() {
        dims_api(&mut line, graph, (&inputs, &outputs), &prefix);
    }
    let bounded = graph.bounded_axes();
    if !bounded.is_empty() {
        let ranks: Vec<usize> = graph.outputs.iter().map(|o| graph.ty(*o).rank()).collect();
        bounded_api(&mut line, &bounded, &ranks, (&in_ptrs, &out_ptrs), &prefix);
    }
    line("    impl Default for Workspace {");
    line("        fn default() -> Self {");
    line("            Self::new()");
    line("        }");
    line("    }");
    line("");
    line("    impl Drop for Workspace {");
    line("        fn drop(&mut self) {");
    line("            // SAFETY: allocated in `of_size` with this layout.");
    line("            unsafe { std::alloc::dealloc(self.ptr, self.layout) }");
    line("        }");
    line("    }");
    line("}");
    s
}

/// For a model with dims set at run time: `DIMS`, slice-based `DimsInputs` /
/// `DimsOutputs` and `Workspace::run_dims`, which checks the values against their
/// ranges and every slice's length against the shapes they give.
fn dims_api(
    line: &mut dyn FnMut(&str),
    graph: &Graph,
    (inputs, outputs): (&[Field], &[Field]),
    prefix: &str,
) {
    let n = graph.dims.len();
    let dims: Vec<String> = (graph.dims.iter())
        .map(|d| format!("({:?}, {}, {})", d.name, d.min, d.max))
        .collect();
    line("    /// The dims set at run time, as (name, min, max), in the order `run_dims` takes them;");
    line("    /// `Inputs`/`Outputs` and `run` have each at its maximum.");
    line(&format!(
        "    pub const DIMS: [(&str, usize, usize); {n}] = [{}];",
        dims.join(", ")
    ));
    line("");
    let slices = |line: &mut dyn FnMut(&str), fs: &[Field], kind: &str, r: &str| {
        line(&format!(
            "    /// {kind} for [`Workspace::run_dims`]: slices whose lengths the dims' values fix."
        ));
        line(&format!("    pub struct Dims{kind}<'a> {{"));
        for f in fs {
            line(&format!("        pub {}: &'a {r}[{}],", f.name, f.element));
        }
        if fs.is_empty() {
            line("        pub _none: core::marker::PhantomData<&'a ()>,");
        }
        line("    }");
        line("");
    };
    line(
        "    /// An axis's size: `x` put through its steps `(add, div)`, each `⌊(x + add) / div⌋`.",
    );
    line("    fn extent(x: usize, steps: &[(i64, i64)]) -> usize {");
    line("        steps.iter().fold(x as i64, |x, &(add, div)| (x + add).max(0) / div) as usize");
    line("    }");
    line("");
    slices(line, inputs, "Inputs", "");
    slices(line, outputs, "Outputs", "mut ");
    line("    impl Workspace {");
    line("        /// Runs the model for the dims' values `dims` (in [`DIMS`] order), on `pool`'s");
    line("        /// threads or the calling one (`None`); each slice must have the length the");
    line("        /// values give its tensor. The workspace must come from `new` (no pool) or");
    line("        /// `with_pool`, as for `run` and `run_with`.");
    line(&format!("        pub fn run_dims(&mut self, pool: Option<&nnc_build::ThreadPool>, dims: [usize; {n}], inputs: &DimsInputs<'_>, outputs: &mut DimsOutputs<'_>) -> Result<(), Error> {{"));
    line("            for (j, &v) in dims.iter().enumerate() {");
    line("                if v < DIMS[j].1 || v > DIMS[j].2 { return Err(Error::Status(6)); }");
    line("            }");
    for (f, access) in
        (inputs.iter().map(|f| (f, "inputs"))).chain(outputs.iter().map(|f| (f, "outputs")))
    {
        let expected = match &f.len_of_dims {
            Some(e) => e.clone(),
            None => f.len.to_string(),
        };
        line(&format!(
            "            {{ let (found, expected) = ({access}.{}.len(), {expected}); if found != expected {{ return Err(Error::WrongLength {{ tensor: {:?}, expected, found }}); }} }}",
            f.name, f.onnx_name
        ));
    }
    let in_ptrs: Vec<String> = (inputs.iter())
        .map(|f| format!("inputs.{}.as_ptr().cast()", f.name))
        .collect();
    let out_ptrs: Vec<String> = (outputs.iter())
        .map(|f| format!("outputs.{}.as_mut_ptr().cast()", f.name))
        .collect();
    pointer_arrays(line, &in_ptrs, &out_ptrs);
    line(&format!(
        "            let values: [i64; {n}] = core::array::from_fn(|j| dims[j] as i64);"
    ));
    line("            let raw = pool.map(|p| p.as_raw());");
    line("            let options = nnc_build::__run_options_dims(raw.as_ref(), self.layout.size() as u64, &values);");
    line("            // SAFETY: every slice has its tensor's length for these values (checked");
    line("            // above); the library checks the values' ranges and the workspace size");
    line("            // given in the options; the pool and the values outlive the call.");
    line(&format!("            let code = unsafe {{ ffi::{prefix}run(ins.as_ptr(), outs.as_ptr(), self.ptr.cast(), (&options as *const nnc_build::__RunOptions).cast()) }};"));
    line("            if code == 0 { Ok(()) } else { Err(Error::Status(code)) }");
    line("        }");
    line("    }");
    line("");
}

/// For a model with outputs whose extent the input values decide: `BOUNDED_AXES` and
/// `Workspace::run_shaped`, which returns every output's shape for the run.
fn bounded_api(
    line: &mut dyn FnMut(&str),
    bounded: &[(usize, usize)],
    ranks: &[usize],
    (in_ptrs, out_ptrs): (&[String], &[String]),
    prefix: &str,
) {
    let list: Vec<String> = bounded.iter().map(|(o, a)| format!("({o}, {a})")).collect();
    line("    /// `(output, axis)`: axes whose extent the input values decide. Such an output's");
    line("    /// buffer holds the largest extent; a run fills its front densely for the actual one.");
    line(&format!(
        "    pub const BOUNDED_AXES: [(usize, usize); {}] = [{}];",
        bounded.len(),
        list.join(", ")
    ));
    line("");
    line("    impl Workspace {");
    line(
        "        /// [`Workspace::run`] on `pool`'s threads (or the calling one, `None`) that also",
    );
    line("        /// returns every output's shape for this run (see [`BOUNDED_AXES`]).");
    line("        pub fn run_shaped(&mut self, pool: Option<&nnc_build::ThreadPool>, inputs: &Inputs<'_>, outputs: &mut Outputs<'_>) -> Result<Vec<Vec<usize>>, Error> {");
    pointer_arrays(line, in_ptrs, out_ptrs);
    let total: usize = ranks.iter().sum();
    line(&format!("            let mut shapes = [0i64; {total}];"));
    line("            let raw = pool.map(|p| p.as_raw());");
    line("            let options = nnc_build::__run_options_shapes(raw.as_ref(), self.layout.size() as u64, &mut shapes);");
    line("            // SAFETY: buffers as in `run`; the library checks the workspace size given");
    line("            // in the options; the pool and `shapes` (the sum of the outputs' ranks)");
    line("            // outlive the call.");
    line(&format!("            let code = unsafe {{ ffi::{prefix}run(ins.as_ptr(), outs.as_ptr(), self.ptr.cast(), (&options as *const nnc_build::__RunOptions).cast()) }};"));
    line("            if code != 0 { return Err(Error::Status(code)); }");
    let ranks: Vec<String> = ranks.iter().map(|r| r.to_string()).collect();
    line(&format!("            let ranks = [{}];", ranks.join(", ")));
    line("            let mut at = 0;");
    line("            Ok(ranks.iter().map(|&r| { let s = shapes[at..at + r].iter().map(|&d| d as usize).collect(); at += r; s }).collect())");
    line("        }");
    line("    }");
    line("");
}

/// The `ins` / `outs` pointer arrays a generated call passes (`in_ptrs` and `out_ptrs`:
/// one expression per tensor).
fn pointer_arrays(line: &mut dyn FnMut(&str), in_ptrs: &[String], out_ptrs: &[String]) {
    line(&format!(
        "            let ins: [*const core::ffi::c_void; {}] = [{}];",
        in_ptrs.len(),
        in_ptrs.join(", ")
    ));
    line(&format!(
        "            let outs: [*mut core::ffi::c_void; {}] = [{}];",
        out_ptrs.len(),
        out_ptrs.join(", ")
    ));
}
