//! The low-precision element formats of `nnc::ir::low_precision` against onnx's
//! reference implementation (`tests/scripts/low_precision_reference.py`, onnx's
//! ReferenceEvaluator on one-node Cast and QuantizeLinear models): `decode` of every
//! code, `pack`/`unpack` against onnx's packed layout, and `encode` (every format,
//! saturate on and off, every FLOAT8E8M0 round mode) and `encode_quantized` on a large
//! value set: every float16 value, every code's value and each format's rounding
//! midpoints and overflow thresholds with their float32 neighbours, FLOAT8E8M0's
//! exponent and rounding boundaries, half-integers and int32 limits for the integer
//! formats, ±0, ±inf, NaNs with several payloads, and random float32s. Every result,
//! NaN codes included, must match bit for bit (the reference's NaN codes do not
//! depend on the input's payload, only on its sign).
//!
//! Needs python3 with onnx (Cast opset 25), numpy and ml_dtypes: skipped otherwise,
//! an error under NNC_TEST_REQUIRE_TOOLS=1.

#[path = "common/graphs.rs"]
mod graphs;
#[path = "common/tools.rs"]
mod tools;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use graphs::Rng;
use nnc::ir::low_precision::{pack, packed_len, unpack, E8m0Rounding, EncodeTable, Format};

/// Why python3 cannot run the reference, if it cannot.
fn reference_unavailable() -> Option<String> {
    let probe = "import onnx, numpy, ml_dtypes; \
                 assert onnx.defs.onnx_opset_version() >= 25, onnx.__version__";
    match Command::new("python3").args(["-c", probe]).output() {
        Err(err) => Some(format!("python3 cannot be run ({err})")),
        Ok(out) if !out.status.success() => Some(format!(
            "python3 with onnx (opset 25), numpy and ml_dtypes is needed: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
                .trim()
        )),
        Ok(_) => None,
    }
}

/// `x`, its float32 neighbours, and their negations.
fn push_around(values: &mut Vec<f32>, x: f32) {
    for v in [x, x.next_up(), x.next_down()] {
        values.push(v);
        values.push(-v);
    }
}

fn value_set() -> Vec<f32> {
    let mut values = Vec::new();
    // Every float16 (infinities and NaNs with payloads included).
    values.extend((0..=u16::MAX).map(|b| half::f16::from_bits(b).to_f32()));
    // Specials: ±0, ±inf, NaNs (quiet, signalling, payloads, both signs), float32
    // subnormal and normal limits.
    values.extend(
        [
            0x0000_0000u32,
            0x8000_0000,
            0x7F80_0000,
            0xFF80_0000,
            0x7FC0_0000,
            0xFFC0_0000,
            0x7F80_0001,
            0xFF80_0001,
            0x7FA0_0000,
            0x7FE0_0000,
            0x7FC0_0001,
            0x7FFF_FFFF,
            0xFFFF_FFFF,
            0x0000_0001,
            0x8000_0001,
            0x003F_FFFF,
            0x0040_0000,
            0x0040_0001,
            0x007F_FFFF,
            0x0080_0000,
            0x7F7F_FFFF,
            0xFF7F_FFFF,
        ]
        .map(f32::from_bits),
    );
    // The sign-magnitude float formats: every code's value and every rounding
    // threshold (midpoints and the overflow threshold), with neighbours.
    for format in Format::ALL {
        let EncodeTable::Float(table) = format.encode_table(false, E8m0Rounding::Up) else {
            continue;
        };
        for code in 0..=table.max_finite {
            push_around(&mut values, format.decode(code));
        }
        for &mid in table.mids {
            push_around(&mut values, mid);
        }
        let max = format.decode(table.max_finite);
        for scale in [1.01f32, 1.5, 2.0, 1e3] {
            push_around(&mut values, max * scale);
        }
    }
    // FLOAT8E8M0: for every float32 exponent field, the mantissa fields around its
    // rounding boundaries.
    for exponent in 0..=0xFEu32 {
        for mantissa in [0u32, 1, 2, 0x3F_FFFF, 0x40_0000, 0x40_0001, 0x7F_FFFF] {
            let x = f32::from_bits(exponent << 23 | mantissa);
            values.push(x);
            values.push(-x);
        }
    }
    // The integer formats: half-integers over and beyond every range, with neighbours.
    for k in -80..=80 {
        push_around(&mut values, k as f32 * 0.5);
    }
    // Large values, up to and past the int32 range.
    for n in 3..=40 {
        let p = (n as f32).exp2();
        for x in [p, p + 1.0, p + 3.0, p * 1.5, p - 1.0] {
            push_around(&mut values, x);
        }
    }
    for x in [
        2_147_483_520.0f32,
        2_147_483_648.0,
        4_294_967_296.0,
        1e10,
        1e20,
    ] {
        push_around(&mut values, x);
    }
    // Random values: any bit pattern, and dense in the float8 and integer ranges.
    let mut rng = Rng::new(0x1234_5678_9ABC_DEF1);
    values.extend((0..100_000).map(|_| f32::from_bits(rng.bits32())));
    values.extend((0..50_000).map(|_| rng.uniform_f32() * 600.0));
    values.extend((0..50_000).map(|_| rng.uniform_f32() * 20.0));
    values.extend((0..20_000).map(|_| rng.uniform_f32() * 1e-2));
    values
}

fn read(dir: &Path, file: &str) -> Vec<u8> {
    std::fs::read(dir.join(file)).unwrap_or_else(|err| panic!("reading {file}: {err}"))
}

fn rounding_name(rounding: E8m0Rounding) -> &'static str {
    match rounding {
        E8m0Rounding::Up => "up",
        E8m0Rounding::Down => "down",
        E8m0Rounding::Nearest => "nearest",
    }
}

/// Mismatches found so far, with the first few of each case written out.
#[derive(Default)]
struct Report {
    failures: usize,
    compared: usize,
    text: String,
}

impl Report {
    /// Compares per-value codes from `ours` with the reference's `file`.
    fn codes(&mut self, dir: &Path, file: &str, values: &[f32], ours: impl Fn(f32) -> u8) {
        let reference = read(dir, file);
        assert_eq!(reference.len(), values.len(), "{file}: wrong length");
        self.compared += values.len();
        let mut shown = 0;
        for (&x, &expected) in values.iter().zip(&reference) {
            let got = ours(x);
            if got != expected {
                self.failures += 1;
                if shown < 8 {
                    shown += 1;
                    let _ = writeln!(
                        self.text,
                        "{file}: x = {x:e} ({:#010x}): nnc {got:#04x}, onnx {expected:#04x}",
                        x.to_bits()
                    );
                }
            }
        }
    }
}

#[test]
fn formats_match_onnx_reference() {
    if let Some(reason) = reference_unavailable() {
        tools::skip(&reason);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let values = value_set();
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let values_path = dir.path().join("values.bin");
    std::fs::write(&values_path, bytes).unwrap();
    let out: PathBuf = dir.path().join("reference");
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/low_precision_reference.py");
    let version = tools::run_stdout(
        Command::new("python3")
            .arg(&script)
            .arg(&values_path)
            .arg(&out),
    );
    eprintln!("reference: {}", version.trim());

    let mut report = Report::default();
    for format in Format::ALL {
        let name = format.name();
        let count = 1usize << format.bits();
        let codes: Vec<u8> = (0..count).map(|c| c as u8).collect();

        // decode, through Cast(format -> FLOAT).
        let decoded = read(&out, &format!("decode_{name}.f32"));
        assert_eq!(decoded.len(), 4 * count, "decode_{name}.f32");
        for (&code, chunk) in codes.iter().zip(decoded.chunks(4)) {
            let expected = f32::from_le_bytes(chunk.try_into().unwrap());
            let got = format.decode(code);
            let same = if expected.is_nan() {
                got.is_nan()
            } else {
                got.to_bits() == expected.to_bits()
            };
            if !same {
                report.failures += 1;
                let _ = writeln!(
                    report.text,
                    "decode {name} {code:#04x}: nnc {got:e}, onnx {expected:e}"
                );
            }
        }

        // pack / unpack, against onnx's packed raw_data (an odd number of codes).
        let mut odd = codes.clone();
        odd.push(1);
        let packed = read(&out, &format!("packed_{name}.bin"));
        assert_eq!(pack(format, &odd), packed, "pack {name}");
        assert_eq!(packed.len(), packed_len(format, odd.len()), "{name}");
        assert_eq!(unpack(format, &packed, odd.len()), odd, "unpack {name}");

        // encode: Cast from float32.
        let compared_before = report.compared;
        for saturate in [false, true] {
            let sat = u8::from(saturate);
            if format == Format::F8E8M0 {
                for rounding in [E8m0Rounding::Up, E8m0Rounding::Down, E8m0Rounding::Nearest] {
                    let file = format!("cast_{name}_sat{sat}_{}.u8", rounding_name(rounding));
                    report.codes(&out, &file, &values, |x| {
                        format.encode(x, saturate, rounding)
                    });
                }
            } else {
                let file = format!("cast_{name}_sat{sat}.u8");
                report.codes(&out, &file, &values, |x| {
                    format.encode(x, saturate, E8m0Rounding::Up)
                });
            }
        }

        // encode_quantized: QuantizeLinear with scale 1.
        let zero_points: &[i32] = match format {
            Format::U4 => &[0, 3, 15],
            Format::I4 => &[0, -3, 5, -8],
            Format::U2 => &[0, 1, 3],
            Format::I2 => &[0, -1, -2, 1],
            _ => &[],
        };
        for &zp in zero_points {
            let file = format!("quant_{name}_zp{zp}.u8");
            for saturate in [false, true] {
                report.codes(&out, &file, &values, |x| {
                    format.encode_quantized(x, zp, saturate)
                });
            }
        }
        if format.is_float() && format != Format::F8E8M0 {
            for saturate in [false, true] {
                let file = format!("quant_{name}_sat{}.u8", u8::from(saturate));
                report.codes(&out, &file, &values, |x| {
                    format.encode_quantized(x, 0, saturate)
                });
            }
        }
        let compared = report.compared - compared_before;
        eprintln!(
            "{name}: {count} codes decoded; {} values x {} encodings = {compared} codes compared",
            values.len(),
            compared / values.len()
        );
    }
    assert!(
        report.failures == 0,
        "{} mismatches with onnx's reference; first ones:\n{}",
        report.failures,
        report.text
    );
}
