//! Runs a structure-aware target on N pseudo-random inputs (seeded, so a run
//! reproduces) and groups the panics by message, writing one input per distinct panic
//! to OUT_DIR: a quick triage of what the fuzzers will keep hitting, on stable.
//!
//!     cargo run --release -p nnc-fuzz-harness --example sweep -- compile|differential|dims N SEED OUT_DIR

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, target, n, seed, out] = &args[..] else {
        eprintln!("usage: sweep compile|differential|dims N SEED OUT_DIR");
        std::process::exit(2);
    };
    let case: fn(&[u8]) = match target.as_str() {
        "compile" => nnc_fuzz_harness::compile_case,
        "differential" => nnc_fuzz_harness::differential_case,
        "dims" => |data: &[u8]| {
            nnc_fuzz_harness::dims_case(data);
        },
        _ => panic!("unknown target {target}"),
    };
    let n: u64 = n.parse().expect("N is a number");
    let mut state: u64 = seed.parse::<u64>().expect("SEED is a number") | 1;
    std::fs::create_dir_all(out).expect("OUT_DIR can be made");
    // The panic hook keeps the message and location; the default one would print them.
    let last = Arc::new(Mutex::new(String::new()));
    let sink = last.clone();
    std::panic::set_hook(Box::new(move |info| {
        let location = info.location().map(|l| l.to_string()).unwrap_or_default();
        let payload = info
            .payload()
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| info.payload().downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        let first_line = payload.lines().next().unwrap_or("").to_string();
        *sink.lock().unwrap_or_else(|p| p.into_inner()) = format!("{location}: {first_line}");
    }));
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..n {
        let len = 64 + (state % 960) as usize;
        let data: Vec<u8> = (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 56) as u8
            })
            .collect();
        if std::panic::catch_unwind(|| case(&data)).is_err() {
            let key = last.lock().unwrap_or_else(|p| p.into_inner()).clone();
            let count = seen.entry(key.clone()).or_insert(0);
            if *count == 0 {
                let file = format!("{out}/{target}-{i}");
                std::fs::write(&file, &data).expect("OUT_DIR is writable");
                println!("{file}: {key}");
            }
            *count += 1;
        }
    }
    for (key, count) in &seen {
        println!("{count:6} {key}");
    }
}
