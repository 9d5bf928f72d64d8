//! `nnc conformance`: runs a suite, each case in a child process, with a per-family
//! table, a results file and regression checking against a list of passing cases.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::conformance::{family, find_cases};

pub struct SuiteOptions {
    pub suite_dir: PathBuf,
    pub filter: Option<String>,
    pub results: Option<PathBuf>,
    pub expect_passing: Option<PathBuf>,
    pub write_passing: Option<PathBuf>,
    pub jobs: usize,
    pub timeout: Duration,
}

pub struct CaseOutcome {
    pub name: String,
    pub passed: bool,
    pub message: String,
}

/// Runs one case in a child process (`exe conformance-case DIR`), killing it after
/// `timeout`.
fn spawn_case(exe: &Path, case: &Path) -> std::io::Result<std::process::Child> {
    Command::new(exe)
        .arg("conformance-case")
        .arg(case)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
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
            match spawn_case(&exe, case) {
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

/// The child side: runs one case, prints `pass\tN data sets` or `fail\tREASON`.
pub fn run_one(case: &Path) -> bool {
    let work = std::env::temp_dir().join(format!("nnc-case-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&work);
    let result = crate::conformance::run_case(case, &work);
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
