//! `nnc conformance`: runs a suite, each case in a child process, with a per-family
//! table, a results file and regression checking against a list of passing cases.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::conformance::{family, find_cases, CaseTarget};

/// Debian's aarch64 cross sysroot (`apt-get install qemu-user gcc-aarch64-linux-gnu`).
const AARCH64_SYSROOT: &str = "/usr/aarch64-linux-gnu";

/// The C harness that runs a compiled model on raw tensor files, built for aarch64.
const HARNESS_SOURCE: &str = include_str!("../../../tests/harness/nnc_run.c");

pub struct SuiteOptions {
    pub suite_dir: PathBuf,
    pub filter: Option<String>,
    /// Run only this many cases, spread evenly over the (filtered) sorted list.
    pub sample: Option<usize>,
    /// Compile for aarch64 and run under qemu instead of on the host.
    pub aarch64: bool,
    pub results: Option<PathBuf>,
    pub expect_passing: Option<PathBuf>,
    pub write_passing: Option<PathBuf>,
    pub jobs: usize,
    pub timeout: Duration,
    /// Bind no input to its data set's value (`--no-freeze`).
    pub no_freeze: bool,
}

pub struct CaseOutcome {
    pub name: String,
    pub passed: bool,
    pub message: String,
}

/// Runs one case in a child process (`exe conformance-case DIR`), killing it after
/// `timeout`.
fn spawn_case(
    exe: &Path,
    case: &Path,
    harness: Option<&Path>,
    no_freeze: bool,
) -> std::io::Result<std::process::Child> {
    let mut command = Command::new(exe);
    command.arg("conformance-case").arg(case);
    if let Some(h) = harness {
        command.arg("--aarch64-harness").arg(h);
    }
    if no_freeze {
        command.arg("--no-freeze");
    }
    command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
}

/// `count` of `cases`, evenly spaced, so a sample spans every family.
fn sample(cases: Vec<PathBuf>, count: usize) -> Vec<PathBuf> {
    let n = cases.len();
    if count >= n {
        return cases;
    }
    (0..count).map(|i| cases[i * n / count].clone()).collect()
}

/// A directory removed when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Builds tests/harness/nnc_run.c for aarch64 with the cross compiler, in `dir`.
fn build_aarch64_harness(dir: &Path) -> Result<PathBuf, String> {
    if !Path::new(AARCH64_SYSROOT).is_dir() {
        return Err(format!(
            "--target aarch64 runs cases under qemu and needs the aarch64 sysroot {AARCH64_SYSROOT} \
             (apt-get install qemu-user gcc-aarch64-linux-gnu)"
        ));
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let write = |name: &str, text: &str| {
        std::fs::write(dir.join(name), text).map_err(|e| format!("{}: {e}", dir.display()))
    };
    write("nnc.h", nnc_runtime_abi::NNC_H)?;
    write("nnc_pool.h", nnc_runtime_abi::NNC_POOL_H)?;
    write("nnc_run.c", HARNESS_SOURCE)?;
    let exe = dir.join("nnc_run");
    let out = Command::new("aarch64-linux-gnu-gcc")
        .args(["-O1", "-std=c11", "-Wall", "-pthread", "-I"])
        .arg(dir)
        .arg(dir.join("nnc_run.c"))
        .arg("-o")
        .arg(&exe)
        .arg("-ldl")
        .output()
        .map_err(|e| {
            format!("aarch64-linux-gnu-gcc: {e} (apt-get install qemu-user gcc-aarch64-linux-gnu)")
        })?;
    if !out.status.success() {
        return Err(format!(
            "building the aarch64 harness failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(exe)
}

fn poll(
    child: &mut std::process::Child,
    name: String,
    started: Instant,
    timeout: Duration,
) -> Option<CaseOutcome> {
    match child.try_wait() {
        Ok(Some(status)) => {
            let mut out = String::new();
            if let Some(mut s) = child.stdout.take() {
                let _ = std::io::Read::read_to_string(&mut s, &mut out);
            }
            let line = out.lines().last().unwrap_or("").to_string();
            let passed = status.success() && line.starts_with("pass");
            let message = if passed {
                String::new()
            } else if line.is_empty() {
                format!("crashed ({status})")
            } else {
                line.trim_start_matches("fail\t").to_string()
            };
            Some(CaseOutcome {
                name,
                passed,
                message,
            })
        }
        Ok(None) if started.elapsed() > timeout => {
            let _ = child.kill();
            let _ = child.wait();
            Some(CaseOutcome {
                name,
                passed: false,
                message: format!("timed out after {} s", timeout.as_secs()),
            })
        }
        Ok(None) => None,
        Err(e) => Some(CaseOutcome {
            name,
            passed: false,
            message: format!("wait failed: {e}"),
        }),
    }
}

pub fn run_suite(opts: &SuiteOptions) -> Result<bool, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let cases: Vec<PathBuf> = find_cases(&opts.suite_dir)
        .into_iter()
        .filter(|c| {
            opts.filter
                .as_ref()
                .is_none_or(|f| c.to_string_lossy().contains(f.as_str()))
        })
        .collect();
    if cases.is_empty() {
        return Err(format!(
            "no cases (directories with model.onnx) under {}",
            opts.suite_dir.display()
        ));
    }
    let cases = match opts.sample {
        Some(n) => sample(cases, n),
        None => cases,
    };
    let harness_dir =
        TempDir(std::env::temp_dir().join(format!("nnc-aarch64-harness-{}", std::process::id())));
    let harness = if opts.aarch64 {
        Some(build_aarch64_harness(&harness_dir.0)?)
    } else {
        None
    };
    let suite_name = opts
        .suite_dir
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    let mut outcomes: Vec<(PathBuf, CaseOutcome)> = vec![];
    let mut running: Vec<(PathBuf, std::process::Child, Instant)> = vec![];
    let mut queue = cases.iter();
    loop {
        while running.len() < opts.jobs.max(1) {
            let Some(case) = queue.next() else { break };
            match spawn_case(&exe, case, harness.as_deref(), opts.no_freeze) {
                Ok(child) => running.push((case.clone(), child, Instant::now())),
                Err(e) => return Err(format!("cannot start a case: {e}")),
            }
        }
        if running.is_empty() {
            break;
        }
        let mut progressed = false;
        let mut i = 0;
        while i < running.len() {
            let (case, child, started) = &mut running[i];
            let name = case
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            match poll(child, name, *started, opts.timeout) {
                Some(outcome) => {
                    let (case, _, _) = running.remove(i);
                    eprint!("\r{} / {}", outcomes.len() + 1, cases.len());
                    outcomes.push((case, outcome));
                    progressed = true;
                }
                None => i += 1,
            }
        }
        if !progressed {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    eprintln!();
    report(&suite_name, &outcomes, opts)
}

fn report(
    suite: &str,
    outcomes: &[(PathBuf, CaseOutcome)],
    opts: &SuiteOptions,
) -> Result<bool, String> {
    let mut families: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for (case, o) in outcomes {
        let e = families.entry(family(case)).or_default();
        if o.passed {
            e.0 += 1;
        } else {
            e.1 += 1;
        }
    }
    println!("{:<32} {:>6} {:>6}", "family", "pass", "fail");
    for (f, (p, q)) in &families {
        println!("{f:<32} {p:>6} {q:>6}");
    }
    if let Some(path) = &opts.results {
        let mut f = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
        for (_, o) in outcomes {
            let _ = writeln!(
                f,
                "{}\t{}\t{}",
                o.name,
                if o.passed { "pass" } else { "fail" },
                o.message.replace(['\n', '\t'], " ")
            );
        }
    }
    let mut passing: Vec<&str> = outcomes
        .iter()
        .filter(|(_, o)| o.passed)
        .map(|(_, o)| o.name.as_str())
        .collect();
    passing.sort_unstable();
    if let Some(path) = &opts.write_passing {
        std::fs::write(path, passing.join("\n") + "\n")
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let mut ok = true;
    if let Some(path) = &opts.expect_passing {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let ran: std::collections::HashSet<&str> =
            outcomes.iter().map(|(_, o)| o.name.as_str()).collect();
        let now: std::collections::HashSet<&str> = passing.iter().copied().collect();
        let regressions: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && ran.contains(l) && !now.contains(l))
            .collect();
        for r in &regressions {
            let msg = outcomes
                .iter()
                .find(|(_, o)| o.name == *r)
                .map(|(_, o)| o.message.as_str())
                .unwrap_or("");
            println!("REGRESSION {r}: {msg}");
        }
        ok = regressions.is_empty();
    }
    let passed = passing.len();
    println!(
        "{suite}: {} passed, {} failed",
        passed,
        outcomes.len() - passed
    );
    Ok(ok)
}

/// The child side: runs one case (on aarch64 under qemu when `aarch64_harness` is
/// given), prints `pass\tN data sets` or `fail\tREASON`.
pub fn run_one(case: &Path, aarch64_harness: Option<PathBuf>, freeze: bool) -> bool {
    let work = std::env::temp_dir().join(format!("nnc-case-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&work);
    let target = match aarch64_harness {
        Some(harness) => CaseTarget::Aarch64Qemu {
            harness,
            sysroot: AARCH64_SYSROOT.into(),
        },
        None => CaseTarget::Host,
    };
    let result = crate::conformance::run_case_on(case, &work, &target, freeze);
    let _ = std::fs::remove_dir_all(&work);
    match result {
        Ok(n) => {
            println!("pass\t{n} data sets");
            true
        }
        Err(e) => {
            println!("fail\t{}", e.replace('\n', " "));
            false
        }
    }
}
