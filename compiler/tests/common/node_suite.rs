//! The ONNX backend suites generated from the pinned `onnx` pip package, once per
//! target dir (the generator is deterministic) into `target/onnx-suite/`. Tests that
//! need them skip (see `tools.rs`) where Python with `onnx==1.23.2` is missing.
//!
//! Include with `#[path = "common/node_suite.rs"] mod node_suite;` beside `tools`.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

use super::tools;

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|d| d.join("scripts/gen_onnx_suite.py").is_file())
        .expect("the workspace root holds scripts/gen_onnx_suite.py")
        .to_path_buf()
}

/// `target/onnx-suite` with every suite in it, or `None` (after a skip) when Python
/// with onnx 1.23.2 is missing. The tests of one binary share it: one generates, the
/// others wait.
pub fn suite_dir() -> Option<PathBuf> {
    static SUITES: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    SUITES.get_or_init(generate_suites).clone()
}

/// Whether python3 has the pinned onnx and numpy; skips (see `tools::skip`) if not.
pub fn pinned_onnx_available() -> bool {
    let ok = Command::new("python3")
        .args([
            "-c",
            "import onnx, numpy; assert onnx.__version__ == '1.23.2'",
        ])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        tools::skip("python3 with onnx==1.23.2 and numpy is needed to generate the node suite (pip install onnx==1.23.2 numpy)");
    }
    ok
}

fn generate_suites() -> Option<PathBuf> {
    let root = workspace_root();
    let out = root.join("target").join("onnx-suite");
    if out
        .join("node")
        .join("test_abs")
        .join("model.onnx")
        .exists()
    {
        return Some(out);
    }
    if !pinned_onnx_available() {
        return None;
    }
    let status = Command::new("python3")
        .arg(root.join("scripts/gen_onnx_suite.py"))
        .arg(&out)
        .status()
        .expect("python3 runs");
    assert!(status.success(), "scripts/gen_onnx_suite.py failed");
    Some(out)
}
