//! Checks the Rust twins against what a real C compiler makes of `nnc.h`:
//! struct sizes, alignments and field offsets, and the integer constants.
//! Also checks the header compiles cleanly as strict C11 and as C++.
//! Each check is skipped, with a message, when its compiler is missing.

use nnc_runtime_abi::*;
use std::mem::{align_of, offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;

const INCLUDE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/include");

/// Prints one `name value` line per layout fact and constant, in the format
/// `expected_facts` produces.
const LAYOUT_PROBE_C: &str = r#"
#include <stddef.h>
#include <stdio.h>
#include "nnc.h"

/* Both the default (empty) and a named prefix must expand to valid code. */
NNC_DECLARE_MODEL();
NNC_DECLARE_MODEL(foo_);

#define FACT(name, value) printf("%s %lld\n", name, (long long)(value))

int main(void) {
    FACT("sizeof(nnc_tensor_info)", sizeof(nnc_tensor_info));
    FACT("alignof(nnc_tensor_info)", _Alignof(nnc_tensor_info));
    FACT("offsetof(nnc_tensor_info, name)", offsetof(nnc_tensor_info, name));
    FACT("offsetof(nnc_tensor_info, dtype)", offsetof(nnc_tensor_info, dtype));
    FACT("offsetof(nnc_tensor_info, rank)", offsetof(nnc_tensor_info, rank));
    FACT("offsetof(nnc_tensor_info, dims)", offsetof(nnc_tensor_info, dims));
    FACT("sizeof(nnc_model_info)", sizeof(nnc_model_info));
    FACT("alignof(nnc_model_info)", _Alignof(nnc_model_info));
    FACT("offsetof(nnc_model_info, abi_version)", offsetof(nnc_model_info, abi_version));
    FACT("offsetof(nnc_model_info, num_inputs)", offsetof(nnc_model_info, num_inputs));
    FACT("offsetof(nnc_model_info, num_outputs)", offsetof(nnc_model_info, num_outputs));
    FACT("offsetof(nnc_model_info, inputs)", offsetof(nnc_model_info, inputs));
    FACT("offsetof(nnc_model_info, outputs)", offsetof(nnc_model_info, outputs));
    FACT("offsetof(nnc_model_info, workspace_size)", offsetof(nnc_model_info, workspace_size));
    FACT("offsetof(nnc_model_info, workspace_align)", offsetof(nnc_model_info, workspace_align));
    FACT("offsetof(nnc_model_info, num_dims)", offsetof(nnc_model_info, num_dims));
    FACT("offsetof(nnc_model_info, num_axis_dims)", offsetof(nnc_model_info, num_axis_dims));
    FACT("offsetof(nnc_model_info, dims)", offsetof(nnc_model_info, dims));
    FACT("offsetof(nnc_model_info, axis_dims)", offsetof(nnc_model_info, axis_dims));
    FACT("offsetof(nnc_model_info, num_bounded_axes)", offsetof(nnc_model_info, num_bounded_axes));
    FACT("offsetof(nnc_model_info, bounded_axes)", offsetof(nnc_model_info, bounded_axes));
    FACT("offsetof(nnc_model_info, axis_extents)", offsetof(nnc_model_info, axis_extents));
    FACT("offsetof(nnc_model_info, cpu_variants)", offsetof(nnc_model_info, cpu_variants));
    FACT("offsetof(nnc_model_info, required_cpu_features)", offsetof(nnc_model_info, required_cpu_features));
    FACT("sizeof(nnc_extent_step)", sizeof(nnc_extent_step));
    FACT("offsetof(nnc_extent_step, div)", offsetof(nnc_extent_step, div));
    FACT("sizeof(nnc_axis_extent)", sizeof(nnc_axis_extent));
    FACT("offsetof(nnc_axis_extent, steps)", offsetof(nnc_axis_extent, steps));
    FACT("sizeof(nnc_dim_info)", sizeof(nnc_dim_info));
    FACT("offsetof(nnc_dim_info, min)", offsetof(nnc_dim_info, min));
    FACT("offsetof(nnc_dim_info, max)", offsetof(nnc_dim_info, max));
    FACT("sizeof(nnc_axis_dim)", sizeof(nnc_axis_dim));
    FACT("offsetof(nnc_axis_dim, axis)", offsetof(nnc_axis_dim, axis));
    FACT("offsetof(nnc_axis_dim, dim)", offsetof(nnc_axis_dim, dim));
    FACT("offsetof(nnc_axis_dim, scale)", offsetof(nnc_axis_dim, scale));
    FACT("sizeof(nnc_bounded_axis)", sizeof(nnc_bounded_axis));
    FACT("alignof(nnc_bounded_axis)", _Alignof(nnc_bounded_axis));
    FACT("offsetof(nnc_bounded_axis, axis)", offsetof(nnc_bounded_axis, axis));
    FACT("sizeof(nnc_thread_pool)", sizeof(nnc_thread_pool));
    FACT("offsetof(nnc_thread_pool, num_threads)", offsetof(nnc_thread_pool, num_threads));
    FACT("offsetof(nnc_thread_pool, parallel_for)", offsetof(nnc_thread_pool, parallel_for));
    FACT("sizeof(nnc_run_options)", sizeof(nnc_run_options));
    FACT("offsetof(nnc_run_options, pool)", offsetof(nnc_run_options, pool));
    FACT("offsetof(nnc_run_options, workspace_bytes)", offsetof(nnc_run_options, workspace_bytes));
    FACT("offsetof(nnc_run_options, dims)", offsetof(nnc_run_options, dims));
    FACT("offsetof(nnc_run_options, output_shapes)", offsetof(nnc_run_options, output_shapes));
    FACT("NNC_ABI_VERSION", NNC_ABI_VERSION);
    FACT("NNC_OK", NNC_OK);
    FACT("NNC_ERR_NULL_POINTER", NNC_ERR_NULL_POINTER);
    FACT("NNC_ERR_MISALIGNED_WORKSPACE", NNC_ERR_MISALIGNED_WORKSPACE);
    FACT("NNC_ERR_INDEX_OUT_OF_RANGE", NNC_ERR_INDEX_OUT_OF_RANGE);
    FACT("NNC_ERR_BAD_OPTIONS", NNC_ERR_BAD_OPTIONS);
    FACT("NNC_ERR_WORKSPACE_TOO_SMALL", NNC_ERR_WORKSPACE_TOO_SMALL);
    FACT("NNC_ERR_DIM_OUT_OF_RANGE", NNC_ERR_DIM_OUT_OF_RANGE);
    FACT("NNC_DTYPE_FLOAT", NNC_DTYPE_FLOAT);
    FACT("NNC_DTYPE_BOOL", NNC_DTYPE_BOOL);
    FACT("NNC_DTYPE_BFLOAT16", NNC_DTYPE_BFLOAT16);
    return 0;
}
"#;

/// The same facts as `LAYOUT_PROBE_C` prints, from the Rust definitions.
fn expected_facts() -> String {
    let facts: [(&str, usize); 57] = [
        ("sizeof(nnc_tensor_info)", size_of::<NncTensorInfo>()),
        ("alignof(nnc_tensor_info)", align_of::<NncTensorInfo>()),
        (
            "offsetof(nnc_tensor_info, name)",
            offset_of!(NncTensorInfo, name),
        ),
        (
            "offsetof(nnc_tensor_info, dtype)",
            offset_of!(NncTensorInfo, dtype),
        ),
        (
            "offsetof(nnc_tensor_info, rank)",
            offset_of!(NncTensorInfo, rank),
        ),
        (
            "offsetof(nnc_tensor_info, dims)",
            offset_of!(NncTensorInfo, dims),
        ),
        ("sizeof(nnc_model_info)", size_of::<NncModelInfo>()),
        ("alignof(nnc_model_info)", align_of::<NncModelInfo>()),
        (
            "offsetof(nnc_model_info, abi_version)",
            offset_of!(NncModelInfo, abi_version),
        ),
        (
            "offsetof(nnc_model_info, num_inputs)",
            offset_of!(NncModelInfo, num_inputs),
        ),
        (
            "offsetof(nnc_model_info, num_outputs)",
            offset_of!(NncModelInfo, num_outputs),
        ),
        (
            "offsetof(nnc_model_info, inputs)",
            offset_of!(NncModelInfo, inputs),
        ),
        (
            "offsetof(nnc_model_info, outputs)",
            offset_of!(NncModelInfo, outputs),
        ),
        (
            "offsetof(nnc_model_info, workspace_size)",
            offset_of!(NncModelInfo, workspace_size),
        ),
        (
            "offsetof(nnc_model_info, workspace_align)",
            offset_of!(NncModelInfo, workspace_align),
        ),
        (
            "offsetof(nnc_model_info, num_dims)",
            offset_of!(NncModelInfo, num_dims),
        ),
        (
            "offsetof(nnc_model_info, num_axis_dims)",
            offset_of!(NncModelInfo, num_axis_dims),
        ),
        (
            "offsetof(nnc_model_info, dims)",
            offset_of!(NncModelInfo, dims),
        ),
        (
            "offsetof(nnc_model_info, axis_dims)",
            offset_of!(NncModelInfo, axis_dims),
        ),
        (
            "offsetof(nnc_model_info, num_bounded_axes)",
            offset_of!(NncModelInfo, num_bounded_axes),
        ),
        (
            "offsetof(nnc_model_info, bounded_axes)",
            offset_of!(NncModelInfo, bounded_axes),
        ),
        (
            "offsetof(nnc_model_info, axis_extents)",
            offset_of!(NncModelInfo, axis_extents),
        ),
        (
            "offsetof(nnc_model_info, cpu_variants)",
            offset_of!(NncModelInfo, cpu_variants),
        ),
        (
            "offsetof(nnc_model_info, required_cpu_features)",
            offset_of!(NncModelInfo, required_cpu_features),
        ),
        ("sizeof(nnc_extent_step)", size_of::<NncExtentStep>()),
        (
            "offsetof(nnc_extent_step, div)",
            offset_of!(NncExtentStep, div),
        ),
        ("sizeof(nnc_axis_extent)", size_of::<NncAxisExtent>()),
        (
            "offsetof(nnc_axis_extent, steps)",
            offset_of!(NncAxisExtent, steps),
        ),
        ("sizeof(nnc_dim_info)", size_of::<NncDimInfo>()),
        ("offsetof(nnc_dim_info, min)", offset_of!(NncDimInfo, min)),
        ("offsetof(nnc_dim_info, max)", offset_of!(NncDimInfo, max)),
        ("sizeof(nnc_axis_dim)", size_of::<NncAxisDim>()),
        ("offsetof(nnc_axis_dim, axis)", offset_of!(NncAxisDim, axis)),
        ("offsetof(nnc_axis_dim, dim)", offset_of!(NncAxisDim, dim)),
        (
            "offsetof(nnc_axis_dim, scale)",
            offset_of!(NncAxisDim, scale),
        ),
        ("sizeof(nnc_bounded_axis)", size_of::<NncBoundedAxis>()),
        ("alignof(nnc_bounded_axis)", align_of::<NncBoundedAxis>()),
        (
            "offsetof(nnc_bounded_axis, axis)",
            offset_of!(NncBoundedAxis, axis),
        ),
        ("sizeof(nnc_thread_pool)", size_of::<NncThreadPool>()),
        (
            "offsetof(nnc_thread_pool, num_threads)",
            offset_of!(NncThreadPool, num_threads),
        ),
        (
            "offsetof(nnc_thread_pool, parallel_for)",
            offset_of!(NncThreadPool, parallel_for),
        ),
        ("sizeof(nnc_run_options)", size_of::<NncRunOptions>()),
        (
            "offsetof(nnc_run_options, pool)",
            offset_of!(NncRunOptions, pool),
        ),
        (
            "offsetof(nnc_run_options, workspace_bytes)",
            offset_of!(NncRunOptions, workspace_bytes),
        ),
        (
            "offsetof(nnc_run_options, dims)",
            offset_of!(NncRunOptions, dims),
        ),
        (
            "offsetof(nnc_run_options, output_shapes)",
            offset_of!(NncRunOptions, output_shapes),
        ),
        ("NNC_ABI_VERSION", NNC_ABI_VERSION as usize),
        ("NNC_OK", NNC_OK as usize),
        ("NNC_ERR_NULL_POINTER", NNC_ERR_NULL_POINTER as usize),
        (
            "NNC_ERR_MISALIGNED_WORKSPACE",
            NNC_ERR_MISALIGNED_WORKSPACE as usize,
        ),
        (
            "NNC_ERR_INDEX_OUT_OF_RANGE",
            NNC_ERR_INDEX_OUT_OF_RANGE as usize,
        ),
        ("NNC_ERR_BAD_OPTIONS", NNC_ERR_BAD_OPTIONS as usize),
        (
            "NNC_ERR_WORKSPACE_TOO_SMALL",
            NNC_ERR_WORKSPACE_TOO_SMALL as usize,
        ),
        (
            "NNC_ERR_DIM_OUT_OF_RANGE",
            NNC_ERR_DIM_OUT_OF_RANGE as usize,
        ),
        ("NNC_DTYPE_FLOAT", NNC_DTYPE_FLOAT as usize),
        ("NNC_DTYPE_BOOL", NNC_DTYPE_BOOL as usize),
        ("NNC_DTYPE_BFLOAT16", NNC_DTYPE_BFLOAT16 as usize),
    ];
    facts
        .iter()
        .map(|(name, value)| format!("{name} {value}\n"))
        .collect()
}

/// A fresh scratch directory for one test, under cargo's per-target tmp dir.
fn scratch_dir(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("nnc-runtime-abi-{test}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Whether `compiler` can be run at all.
fn have(compiler: &str) -> bool {
    Command::new(compiler).arg("--version").output().is_ok()
}

/// Runs `compiler args…`, panicking with its diagnostics if it fails.
fn compile(compiler: &str, args: &[&str]) {
    let out = Command::new(compiler).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{compiler} {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn c_compiler_agrees_on_layout_and_constants() {
    if !have("cc") {
        println!("skipped: no `cc` on PATH to compile the layout probe");
        return;
    }
    let dir = scratch_dir("layout");
    let src = dir.join("probe.c");
    let exe = dir.join("probe");
    std::fs::write(&src, LAYOUT_PROBE_C).unwrap();
    compile(
        "cc",
        &[
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-I",
            INCLUDE_DIR,
            "-o",
            exe.to_str().unwrap(),
            src.to_str().unwrap(),
        ],
    );
    let out = Command::new(&exe).output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap(), expected_facts());
}

/// In C++ the header's declarations must have C linkage, so a definition
/// after `NNC_DECLARE_MODEL` exports the plain (unmangled) symbol.
#[test]
fn header_compiles_as_cplusplus_with_c_linkage() {
    if !have("c++") {
        println!("skipped: no `c++` on PATH");
        return;
    }
    let dir = scratch_dir("cplusplus");
    let src = dir.join("probe.cpp");
    let obj = dir.join("probe.o");
    std::fs::write(
        &src,
        "#include \"nnc.h\"\nNNC_DECLARE_MODEL(foo_);\n\
         const nnc_model_info *foo_model_info(void) { return nullptr; }\n",
    )
    .unwrap();
    compile(
        "c++",
        &[
            "-std=c++11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-c",
            "-I",
            INCLUDE_DIR,
            "-o",
            obj.to_str().unwrap(),
            src.to_str().unwrap(),
        ],
    );
    let symbols = Command::new("nm").arg(&obj).output();
    match symbols {
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                text.lines().any(|l| l.ends_with(" T foo_model_info")),
                "foo_model_info not exported unmangled:\n{text}"
            );
        }
        Err(_) => println!("symbol check skipped: no `nm` on PATH"),
    }
}
