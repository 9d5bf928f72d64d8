//! Helpers shared by the bench targets: argument parsing, paths, timing, tables, JSON.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// The options of `--bench models`.
pub const MODELS_OPTIONS: &[&str] = &[
    "models-dir",
    "pin",
    "models",
    "rounds",
    "budget-ms",
    "cpu",
    "clock",
    "json",
    "md",
    "python",
    "nnc-bin",
    "vzeroupper",
];

/// The options of `--bench gemm`.
pub const GEMM_OPTIONS: &[&str] = &[
    "shapes",
    "cpus",
    "rounds",
    "budget-ms",
    "clock",
    "json",
    "md",
    "nnc-bin",
];

/// `--flag value` arguments after `cargo bench ... --`. Cargo itself appends `--bench`,
/// which is ignored, as is anything cargo's libtest filter syntax might add.
pub struct Args {
    pairs: Vec<(String, String)>,
}

impl Args {
    /// Parses `--name value` and `--name=value`; `known` lists the accepted names.
    pub fn parse(known: &[&str], usage: &str) -> Args {
        let mut pairs = vec![];
        let mut it = std::env::args().skip(1);
        while let Some(a) = it.next() {
            if a == "--bench" || a == "--nocapture" {
                continue;
            }
            if a == "--help" || a == "-h" {
                println!("{usage}");
                std::process::exit(0);
            }
            let Some(flag) = a.strip_prefix("--") else {
                die(&format!("unexpected argument '{a}'\n{usage}"));
            };
            let (name, value) = match flag.split_once('=') {
                Some((n, v)) => (n.to_string(), v.to_string()),
                None => {
                    let v = it
                        .next()
                        .unwrap_or_else(|| die(&format!("--{flag} needs a value\n{usage}")));
                    (flag.to_string(), v)
                }
            };
            if !known.contains(&name.as_str()) {
                // `cargo bench -p nnc-benches -- OPTIONS` hands the same options to
                // both benches: one meant for the other bench is skipped.
                if MODELS_OPTIONS.contains(&name.as_str()) || GEMM_OPTIONS.contains(&name.as_str())
                {
                    continue;
                }
                die(&format!("unknown option --{name}\n{usage}"));
            }
            pairs.push((name, value));
        }
        Args { pairs }
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn num<T: std::str::FromStr>(&self, name: &str, default: T) -> T {
        match self.get(name) {
            None => default,
            Some(v) => v
                .parse()
                .unwrap_or_else(|_| die(&format!("--{name} {v}: not a number"))),
        }
    }
}

pub fn die(msg: &str) -> ! {
    eprintln!("error: {msg}");
    std::process::exit(2)
}

/// The workspace root: `cargo bench` runs bench binaries from the package directory
/// (`benches/`), so relative paths given on the command line are taken from the
/// workspace root first (where `cargo bench` is usually typed), then from the
/// current directory.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("benches/ has a parent")
        .to_path_buf()
}

pub fn resolve_input(p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() {
        return p.to_path_buf();
    }
    let from_root = workspace_root().join(p);
    if from_root.exists() {
        from_root
    } else {
        std::env::current_dir()
            .map(|d| d.join(p))
            .unwrap_or(from_root)
    }
}

pub fn resolve_output(p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        workspace_root().join(p)
    }
}

pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

static CPU_CLOCK: AtomicBool = AtomicBool::new(true);

/// Picks the clock from `--clock cpu|wall` (default cpu) and returns its name.
///
/// `cpu` is the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID): on a machine shared
/// with other work it leaves out the time the thread was not running, and on an idle
/// machine it equals wall time for these single-threaded engines. `wall` is the
/// monotonic clock.
pub fn set_clock(args: &Args) -> &'static str {
    let cpu = match args.get("clock").unwrap_or("cpu") {
        "cpu" => true,
        "wall" => false,
        c => die(&format!("--clock {c}: expected cpu or wall")),
    };
    CPU_CLOCK.store(cpu, Ordering::Relaxed);
    clock_name()
}

pub fn cpu_clock() -> bool {
    CPU_CLOCK.load(Ordering::Relaxed)
}

pub fn clock_name() -> &'static str {
    if cpu_clock() {
        "thread CPU time"
    } else {
        "wall time"
    }
}

/// Seconds on the chosen clock.
pub fn seconds() -> f64 {
    let clock = if cpu_clock() {
        libc::CLOCK_THREAD_CPUTIME_ID
    } else {
        libc::CLOCK_MONOTONIC
    };
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid out pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Milliseconds per call over `calls` calls of `f`.
pub fn time_calls(calls: usize, mut f: impl FnMut()) -> f64 {
    let t0 = seconds();
    for _ in 0..calls {
        f();
    }
    (seconds() - t0) * 1e3 / calls as f64
}

/// How many calls of `once_ms` fill `budget_ms` (at least one).
pub fn calls_for(budget_ms: f64, once_ms: f64) -> usize {
    ((budget_ms / once_ms.max(1e-4)) as usize).clamp(1, 1_000_000)
}

/// The CPU model name from /proc/cpuinfo (what `lscpu` prints as "Model name").
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

pub fn today_utc() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = secs.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// A markdown table: a header row and rows of cells, columns padded for reading.
pub fn markdown_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let width = |s: &str| s.chars().count();
    let mut w: Vec<usize> = header.iter().map(|h| width(h)).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(width(c));
        }
    }
    let line = |cells: Vec<String>| {
        let mut s = String::from("|");
        for (i, c) in cells.iter().enumerate() {
            // `format!` pads by chars, which is what the columns are measured in.
            if i == 0 {
                s += &format!(" {c:<width$} |", width = w[i]);
            } else {
                s += &format!(" {c:>width$} |", width = w[i]);
            }
        }
        s + "\n"
    };
    let mut out = line(header.iter().map(|h| h.to_string()).collect());
    out += "|";
    for (i, wi) in w.iter().enumerate() {
        out += &if i == 0 {
            format!(" {} |", "-".repeat(*wi))
        } else {
            format!(" {}: |", "-".repeat(wi.saturating_sub(1).max(1)))
        };
    }
    out += "\n";
    for r in rows {
        out += &line(r.clone());
    }
    out
}

/// A JSON string literal.
pub fn json_str(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o += "\\\"",
            '\\' => o += "\\\\",
            '\n' => o += "\\n",
            c if (c as u32) < 0x20 => o += &format!("\\u{:04x}", c as u32),
            c => o.push(c),
        }
    }
    o + "\""
}

/// A JSON number, `null` for NaN and infinities.
pub fn json_num(x: f64) -> String {
    if x.is_finite() {
        format!("{x}")
    } else {
        "null".into()
    }
}

/// Compiles `onnx` into the shared library `so` for `--cpu cpu`: in this process with the
/// workspace's `nnc` crate, or with an `nnc` executable when `nnc_bin` is given (to
/// measure another build, e.g. another checkout's `target/release/nnc`).
pub fn compile_so(onnx: &Path, cpu: &str, so: &Path, nnc_bin: Option<&Path>) -> Result<(), String> {
    if let Some(bin) = nnc_bin {
        let out = std::process::Command::new(bin)
            .arg("compile")
            .arg(onnx)
            .arg("--cpu")
            .arg(cpu)
            .arg("-o")
            .arg(so)
            .output()
            .map_err(|e| format!("{}: {e}", bin.display()))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        return Ok(());
    }
    let target = nnc::codegen::Target::new(nnc::codegen::Arch::host(), Some(cpu))
        .map_err(|e| e.to_string())?;
    let opts = nnc::codegen::CompileOptions::new(target);
    let compiled =
        nnc::driver::compile_model(onnx, &Default::default(), &opts).map_err(|e| e.to_string())?;
    nnc::driver::write_artifacts(&compiled, so, "").map_err(|e| e.to_string())?;
    Ok(())
}

/// `--nnc-bin PATH`, resolved like other input paths.
pub fn nnc_bin(args: &Args) -> Option<PathBuf> {
    args.get("nnc-bin").map(|p| {
        let p = resolve_input(p);
        if !p.is_file() {
            die(&format!("--nnc-bin {}: no such file", p.display()));
        }
        p
    })
}
