//! The C header written beside every artifact: declarations with the model's prefix, and
//! its inputs and outputs as comments and `#define`s.

use crate::ir::{Graph, ValueId};

/// A C identifier fragment from a tensor name (`input.1` → `INPUT_1`).
fn c_ident(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
    }
    s
}

/// `name` is the `--name` value (may be empty), `guard` the header's base name.
/// `cpu`: the library's CPU variants and the features a CPU needs to run it (see
/// [`crate::codegen::CompiledModel`]).
pub fn generate(
    graph: &Graph,
    name: &str,
    guard: &str,
    arena_size: usize,
    (variants, required): (&str, &str),
) -> String {
    let prefix = crate::codegen::symbol_prefix(name);
    let macro_prefix = format!(
        "NNC_{}",
        if name.is_empty() {
            "MODEL".to_string()
        } else {
            c_ident(name)
        }
    );
    let guard = format!("NNC_{}_H", c_ident(guard));
    let mut h = String::new();
    // The mark tells a header nnc may overwrite from a file of the user's.
    h += &format!(
        "{}{}. Do not edit. */\n",
        crate::output_paths::HEADER_MARK,
        env!("CARGO_PKG_VERSION")
    );
    h += &format!("#ifndef {guard}\n#define {guard}\n\n");
    // nnc.h inlined (it has its own include guard), so the header stands alone and
    // several models' headers coexist in one translation unit.
    h += nnc_runtime_abi::NNC_H;
    h += "\n";
    h += "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n";
    // Shapes with every dim at its maximum (what infer() runs); the comment names the
    // axes that depend on a dim.
    let deps = crate::ir::run_dims::axis_dims(graph);
    let maxima: Vec<usize> = graph.dims.iter().map(|d| d.max).collect();
    let describe = |h: &mut String, kind: &str, ids: &[ValueId], first: usize| {
        for (i, v) in ids.iter().enumerate() {
            let info = graph.value(*v);
            let t = first + i;
            let shape = crate::ir::run_dims::concrete_shape(&info.ty.shape, t, &deps, &maxima);
            let ty = crate::ir::TensorType::new(info.ty.dtype, shape.clone());
            let bounded: Vec<usize> = (info.run_extent.as_ref()).map_or(vec![], |e| e.axes.clone());
            let dims: Vec<String> = shape
                .iter()
                .enumerate()
                .map(
                    |(axis, d)| match deps.iter().find(|a| a.tensor == t && a.axis == axis) {
                        Some(a) => format!("{} <= {d}", a.written(&graph.dims[a.dim].name)),
                        None if bounded.contains(&axis) => format!("<= {d}"),
                        None => d.to_string(),
                    },
                )
                .collect();
            *h += &format!(
                "/* {kind} {i}: \"{}\" {} [{}] ({} bytes{}) */\n",
                info.name.replace("*/", "* /"),
                info.ty.dtype,
                dims.join(", ").replace("*/", "* /"),
                ty.byte_size(),
                if deps.iter().any(|a| a.tensor == t) || !bounded.is_empty() {
                    " at most"
                } else {
                    ""
                }
            );
            if !bounded.is_empty() {
                *h += "/* Axes marked <= have the extents the input values decide: written densely for\n   them, reported by run's options->output_shapes. */\n";
            }
            let id = format!("{macro_prefix}_{}_{i}", kind.to_uppercase());
            *h += &format!("#define {id}_DTYPE {}\n", ty.dtype.onnx_code());
            *h += &format!("#define {id}_RANK {}\n", ty.rank());
            *h += &format!("#define {id}_NUMEL {}\n", ty.numel());
            *h += &format!("#define {id}_BYTES {}\n", ty.byte_size());
            *h += &format!("#define {id}_CTYPE {}\n", ty.dtype.c_type());
            if !bounded.is_empty() {
                let mask = crate::ops::infer::axes_mask(&bounded);
                *h += &format!("#define {id}_BOUNDED_AXES_MASK {mask:#x}\n");
            }
        }
    };
    h += &format!("#define {macro_prefix}_NUM_INPUTS {}\n", graph.inputs.len());
    h += &format!(
        "#define {macro_prefix}_NUM_OUTPUTS {}\n",
        graph.outputs.len()
    );
    h += &format!("#define {macro_prefix}_WORKSPACE_SIZE {arena_size}\n");
    h += &format!(
        "#define {macro_prefix}_WORKSPACE_ALIGN {}\n\n",
        crate::codegen::plan::ALIGN
    );
    h += "/* The CPU variants the library carries, most capable first: each call runs the\n   \
          first one the CPU has every feature of. A CPU without the required features\n   \
          gets NNC_ERR_UNSUPPORTED_CPU from every call. */\n";
    h += &format!("#define {macro_prefix}_CPU_VARIANTS \"{variants}\"\n");
    h += &format!("#define {macro_prefix}_REQUIRED_CPU_FEATURES \"{required}\"\n\n");
    h += &format!("#define {macro_prefix}_NUM_DIMS {}\n", graph.dims.len());
    for (j, d) in graph.dims.iter().enumerate() {
        h += &format!(
            "/* dim {j}: \"{}\", options->dims[{j}] in {}..{} */\n",
            d.name.replace("*/", "* /"),
            d.min,
            d.max
        );
        h += &format!("#define {macro_prefix}_DIM_{j}_MIN {}\n", d.min);
        h += &format!("#define {macro_prefix}_DIM_{j}_MAX {}\n", d.max);
    }
    describe(&mut h, "input", &graph.inputs, 0);
    describe(&mut h, "output", &graph.outputs, graph.inputs.len());
    h += "\n";
    h += "/* Runs the model on dense row-major buffers, in the model's input and output order,\n";
    h += "   using an internal arena: not reentrant. Returns NNC_OK (0) or an NNC_ERR_* code. */\n";
    h += &format!("int32_t {prefix}infer(const void *const *inputs, void *const *outputs);\n\n");
    h += &format!("/* Reentrant: `workspace` holds {macro_prefix}_WORKSPACE_SIZE bytes aligned to\n   {macro_prefix}_WORKSPACE_ALIGN, one per concurrent call. */\n");
    h += &format!("int32_t {prefix}infer_with_workspace(const void *const *inputs, void *const *outputs, void *workspace);\n\n");
    h += "/* Names, dtypes and shapes of the inputs and outputs; the workspace size. */\n";
    h += &format!("const nnc_model_info *{prefix}model_info(void);\n\n");
    h += "/* Bytes of workspace a run() with these options needs (NULL: no pool). */\n";
    h += &format!("uint64_t {prefix}workspace_size(const nnc_run_options *options);\n\n");
    h += "/* infer_with_workspace with options: the nodes worth it split over options->pool's\n   threads, outputs bit-identical. Reentrant; allocates nothing. */\n";
    h += &format!("int32_t {prefix}run(const void *const *inputs, void *const *outputs, void *workspace,\n              const nnc_run_options *options);\n\n");
    h += "/* Every input's, then output's, shape for the dims' values `dims` (NULL: each at its\n   maximum); NNC_ERR_DIM_OUT_OF_RANGE writes nothing. */\n";
    h += &format!("int32_t {prefix}shapes(const int64_t *dims, int64_t *shapes);\n\n");
    h += &format!("#ifdef __cplusplus\n}}\n#endif\n\n#endif /* {guard} */\n");
    h
}
