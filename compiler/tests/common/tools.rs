//! Helpers for tests that need external tools (C compilers, qemu, binutils).
//!
//! A missing tool makes the test print a `SKIP: ...` line and return early,
//! unless `NNC_TEST_REQUIRE_TOOLS=1` is set (e.g. in CI), in which case the
//! test fails instead, so that a misconfigured machine cannot silently skip
//! coverage.
//!
//! Include from a test crate with
//! `#[path = "common/tools.rs"] mod tools;` (or `mod common;` with a
//! `common/mod.rs` containing `pub mod tools;`).
#![allow(dead_code)] // each test crate uses a different subset

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Environment variable that turns skips into failures.
pub const REQUIRE_TOOLS_ENV: &str = "NNC_TEST_REQUIRE_TOOLS";

/// Whether missing tools must fail the test (`NNC_TEST_REQUIRE_TOOLS=1`).
pub fn tools_required() -> bool {
    std::env::var(REQUIRE_TOOLS_ENV).is_ok_and(|v| v == "1")
}

/// Reports that a test cannot run: prints `SKIP: {reason}` and returns, or
/// panics when tools are required.
pub fn skip(reason: &str) {
    if tools_required() {
        panic!("{reason} ({REQUIRE_TOOLS_ENV}=1 is set, so this is an error)");
    }
    eprintln!("SKIP: {reason}");
}

/// The full path of `name` if it is an executable file on `PATH`.
pub fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        path.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        path.is_file()
    }
}

/// The Debian/Ubuntu package that provides a tool, for skip messages.
pub fn install_hint(name: &str) -> &'static str {
    match name {
        "qemu-aarch64" | "qemu-x86_64" => "qemu-user",
        "aarch64-linux-gnu-gcc" => "gcc-aarch64-linux-gnu",
        "aarch64-linux-gnu-objdump" | "aarch64-linux-gnu-readelf" => "binutils-aarch64-linux-gnu",
        "readelf" | "objdump" | "nm" | "ar" | "ld" => "binutils",
        "gcc" | "cc" => "gcc",
        "g++" | "c++" => "g++",
        "cmake" | "ctest" => "cmake",
        "make" => "make",
        "python3" => "python3",
        _ => "the package providing it",
    }
}

/// True if `name` is on `PATH`; otherwise reports a skip (see [`skip`]) and
/// returns false. Use as `if !require_tool("gcc") { return; }`.
pub fn require_tool(name: &str) -> bool {
    if find_tool(name).is_some() {
        return true;
    }
    skip(&format!(
        "`{name}` not found on PATH (install {})",
        install_hint(name)
    ));
    false
}

/// True if all `names` are on `PATH`; otherwise reports one skip naming every
/// missing tool and its package, and returns false.
pub fn require_tools(names: &[&str]) -> bool {
    let missing: Vec<&str> = names
        .iter()
        .copied()
        .filter(|name| find_tool(name).is_none())
        .collect();
    if missing.is_empty() {
        return true;
    }
    let mut packages: Vec<&str> = missing.iter().map(|name| install_hint(name)).collect();
    packages.dedup();
    skip(&format!(
        "{} not found on PATH (install {})",
        missing.join(", "),
        packages.join(" ")
    ));
    false
}

/// True if `path` exists (e.g. a cross sysroot); otherwise reports a skip
/// with `hint` and returns false.
pub fn require_path(path: impl AsRef<Path>, hint: &str) -> bool {
    let path = path.as_ref();
    if path.exists() {
        return true;
    }
    skip(&format!("{} does not exist ({hint})", path.display()));
    false
}

/// Checks for everything needed to build and run aarch64 Linux programs on
/// this machine: the cross compiler, qemu user mode and the cross sysroot.
pub fn require_aarch64_toolchain() -> bool {
    require_tools(&["aarch64-linux-gnu-gcc", "qemu-aarch64"])
        && require_path(AARCH64_SYSROOT, "install qemu-user gcc-aarch64-linux-gnu")
}

/// Sysroot of Debian's aarch64 cross toolchain; pass to `qemu-aarch64 -L`.
pub const AARCH64_SYSROOT: &str = "/usr/aarch64-linux-gnu";

/// Runs a command and returns its output, panicking with the command line,
/// exit status, stdout and stderr if it fails to start or exits unsuccessfully.
pub fn run(command: &mut Command) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|err| panic!("failed to start {}: {err}", describe(command)));
    if !output.status.success() {
        panic!(
            "{} failed with {}\n--- stdout\n{}\n--- stderr\n{}",
            describe(command),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    output
}

/// Like [`run`], returning stdout as a string.
pub fn run_stdout(command: &mut Command) -> String {
    String::from_utf8_lossy(&run(command).stdout).into_owned()
}

/// `qemu-aarch64 -L <sysroot> <program> <args...>`, ready to run.
pub fn qemu_aarch64(program: impl AsRef<OsStr>) -> Command {
    let mut command = Command::new("qemu-aarch64");
    command.arg("-L").arg(AARCH64_SYSROOT).arg(program);
    command
}

fn describe(command: &Command) -> String {
    let mut text = command.get_program().to_string_lossy().into_owned();
    for arg in command.get_args() {
        text.push(' ');
        text.push_str(&arg.to_string_lossy());
    }
    text
}

/// Whether this machine can run code built for x86-64 `cpu`.
pub fn host_runs(cpu: &str) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let v3 = std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma");
        match cpu {
            "x86-64-v3" => v3,
            "x86-64-v3+avxvnni" => v3 && std::arch::is_x86_feature_detected!("avxvnni"),
            "x86-64-v4" | "x86-64-v4+vnni" => {
                v3 && std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                    && std::arch::is_x86_feature_detected!("avx512dq")
                    && (cpu == "x86-64-v4" || std::arch::is_x86_feature_detected!("avx512vnni"))
            }
            _ => true,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = cpu;
        false
    }
}
