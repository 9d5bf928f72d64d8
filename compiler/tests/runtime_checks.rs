//! Run-time checks of the generated code (issue 18): an index read from an input that
//! is out of range makes `infer` return NNC_ERR_INDEX_OUT_OF_RANGE (the default,
//! `IndexChecks::Error`) or is clamped as before (`IndexChecks::Clamp`), and never
//! touches memory outside a buffer (valgrind); integer Div and Mod never trap:
//! `MIN / -1` wraps and `x / 0`, `x % 0` are 0, as in the interpreter.

#[path = "common/graphs.rs"]
mod graphs;
#[path = "common/runner.rs"]
mod runner;
#[path = "common/tools.rs"]
mod tools;

use graphs::{one_node, In};
use nnc::codegen::{compile_graph, Arch, CompileOptions, IndexChecks, Target};
use nnc::ir::{DType, Graph, Tensor};
use nnc::ops::{BinaryOp, Op, ScatterReduction};
use nnc_runtime_abi::abi::NNC_ERR_INDEX_OUT_OF_RANGE;
use runner::Compiled;

fn opts(checks: IndexChecks) -> CompileOptions {
    let mut o = runner::options(Target::host());
    o.index_checks = checks;
    o
}

/// One index op with its data, (bad) indices and, for scatters, updates.
struct Case {
    name: &'static str,
    op: Op,
    inputs: Vec<Tensor>,
    /// `inputs` with the indices clamped as `IndexChecks::Clamp` does.
    clamped: Vec<Tensor>,
}

fn data23() -> Tensor {
    Tensor::from_vec(&[2, 3], (0..6).map(|v| v as f32).collect::<Vec<f32>>())
}

/// Every index op with an index past the end and one before `-len` (in separate
/// cases, so each alone must make the call fail).
fn bad_cases() -> Vec<Case> {
    let mut cases = vec![];
    let upd23 = Tensor::from_vec(&[2, 3], vec![10f32, 11., 12., 13., 14., 15.]);
    // An index past the end, then one before -len (clamped to 2 and 0).
    for (bad, clamp) in [(3i64, 2i64), (-4, 0)] {
        // Gather along axis 1 of [2, 3]: one bad index among good ones.
        let idx = Tensor::from_vec(&[2], vec![-1i64, bad]);
        let cl = Tensor::from_vec(&[2], vec![-1i64, clamp]);
        cases.push(Case {
            name: if bad > 0 { "Gather +" } else { "Gather -" },
            op: Op::Gather { axis: 1 },
            inputs: vec![data23(), idx],
            clamped: vec![data23(), cl],
        });
        let idx = Tensor::from_vec(&[2, 3], vec![0i64, 1, 2, -1, bad, 0]);
        let cl = Tensor::from_vec(&[2, 3], vec![0i64, 1, 2, -1, clamp, 0]);
        cases.push(Case {
            name: if bad > 0 {
                "GatherElements +"
            } else {
                "GatherElements -"
            },
            op: Op::GatherElements { axis: 1 },
            inputs: vec![data23(), idx.clone()],
            clamped: vec![data23(), cl.clone()],
        });
        for reduction in [ScatterReduction::None, ScatterReduction::Add] {
            cases.push(Case {
                name: if bad > 0 {
                    "ScatterElements +"
                } else {
                    "ScatterElements -"
                },
                op: Op::ScatterElements { axis: 1, reduction },
                inputs: vec![data23(), idx.clone(), upd23.clone()],
                clamped: vec![data23(), cl.clone(), upd23.clone()],
            });
        }
        // Index tuples into [2, 3]: the second component (axis of 3) is bad.
        let tuples = Tensor::from_vec(&[2, 2], vec![1i64, -3, 0, bad]);
        let cl = Tensor::from_vec(&[2, 2], vec![1i64, -3, 0, clamp]);
        cases.push(Case {
            name: if bad > 0 { "GatherND +" } else { "GatherND -" },
            op: Op::GatherND { batch_dims: 0 },
            inputs: vec![data23(), tuples.clone()],
            clamped: vec![data23(), cl.clone()],
        });
        let upd = Tensor::from_vec(&[2], vec![20f32, 21.]);
        cases.push(Case {
            name: if bad > 0 {
                "ScatterND +"
            } else {
                "ScatterND -"
            },
            op: Op::ScatterND {
                reduction: ScatterReduction::None,
            },
            inputs: vec![data23(), tuples, upd.clone()],
            clamped: vec![data23(), cl, upd],
        });
    }
    cases
}

fn graph(c: &Case) -> Graph {
    one_node(
        c.op.clone(),
        c.inputs.iter().cloned().map(In::Given).collect(),
        0,
    )
    .0
}

#[test]
fn out_of_range_indices_return_index_out_of_range() {
    let mut failures = vec![];
    for c in bad_cases() {
        let g = graph(&c);
        let lib = Compiled::with_options(&g, &opts(IndexChecks::Error)).expect("compiles");
        match lib.run_status(&g, &c.inputs) {
            Ok((status, _)) if status == NNC_ERR_INDEX_OUT_OF_RANGE => {}
            Ok((status, _)) => failures.push(format!("{}: infer returned {status}", c.name)),
            Err(e) => failures.push(format!("{}: {e}", c.name)),
        }
        // The interpreter, the reference of `nnc verify`, refuses them too.
        if nnc::interp::run_graph(&g, &c.inputs).is_ok() {
            failures.push(format!("{}: the interpreter accepted it", c.name));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn index_checks_clamp_keeps_the_clamped_values() {
    let mut failures = vec![];
    for c in bad_cases() {
        let g = graph(&c);
        let lib = Compiled::with_options(&g, &opts(IndexChecks::Clamp)).expect("compiles");
        let expected = nnc::interp::run_graph(&g, &c.clamped).expect("in range");
        match lib.run_status(&g, &c.inputs) {
            Ok((0, out)) if out == expected => {}
            Ok((status, out)) => failures.push(format!(
                "{}: status {status}, {out:?} instead of {expected:?}",
                c.name
            )),
            Err(e) => failures.push(format!("{}: {e}", c.name)),
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// In-range indices, negative ones included, give the interpreter's values with the
/// checks on, for every index dtype (unsigned ones are never negative).
#[test]
fn in_range_indices_pass_the_checks() {
    let mut failures = vec![];
    for c in bad_cases() {
        for dtype in [DType::I64, DType::I32, DType::I8, DType::U64, DType::U16] {
            let fix = |inputs: &[Tensor]| -> Vec<Tensor> {
                let mut v = inputs.to_vec();
                let idx = v[1].to_i64_vec();
                // Clamped indices are in range; unsigned ones are made non-negative.
                let dims = data23().shape().to_vec();
                let idx: Vec<i64> = idx
                    .iter()
                    .map(|&i| {
                        if dtype.is_signed_int() || i >= 0 {
                            i
                        } else {
                            i + dims[1] as i64
                        }
                    })
                    .collect();
                v[1] = Tensor::from_vec(v[1].shape(), idx).cast(dtype);
                v
            };
            let inputs = fix(&c.clamped);
            let (g, _) = one_node(
                c.op.clone(),
                inputs.iter().cloned().map(In::Given).collect(),
                0,
            );
            let expected = nnc::interp::run_graph(&g, &inputs).expect("in range");
            let lib = Compiled::with_options(&g, &opts(IndexChecks::Error)).expect("compiles");
            match lib.run_status(&g, &inputs) {
                Ok((0, out)) if out == expected => {}
                Ok((status, out)) => failures.push(format!(
                    "{} {dtype}: status {status}, {out:?} instead of {expected:?}",
                    c.name
                )),
                Err(e) => failures.push(format!("{} {dtype}: {e}", c.name)),
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A u64 index above i64::MAX is out of range, not a negative index that wraps.
#[test]
fn huge_unsigned_indices_are_out_of_range() {
    let idx = Tensor::from_vec(&[1], vec![u64::MAX]);
    let (g, _) = one_node(
        Op::Gather { axis: 1 },
        vec![In::Given(data23()), In::Given(idx.clone())],
        0,
    );
    let lib = Compiled::with_options(&g, &opts(IndexChecks::Error)).expect("compiles");
    let (status, _) = lib.run_status(&g, &[data23(), idx.clone()]).expect("runs");
    assert_eq!(status, NNC_ERR_INDEX_OUT_OF_RANGE);
    let err = nnc::interp::run_graph(&g, &[data23(), idx]).expect_err("the interpreter too");
    assert!(err.contains("out of range"), "{err}");
}

/// A failing node stops the model: a later node's output keeps what the caller put
/// there, and the call after a failure with good input succeeds.
#[test]
fn a_failed_call_does_not_poison_the_next_one() {
    let c = &bad_cases()[0];
    let g = graph(c);
    let lib = Compiled::with_options(&g, &opts(IndexChecks::Error)).expect("compiles");
    let (status, _) = lib.run_status(&g, &c.inputs).expect("runs");
    assert_eq!(status, NNC_ERR_INDEX_OUT_OF_RANGE);
    let expected = nnc::interp::run_graph(&g, &c.clamped).expect("in range");
    let (status, out) = lib.run_status(&g, &c.clamped).expect("runs");
    assert_eq!((status, out), (0, expected));
}

/// The checked code also compiles for aarch64.
#[test]
fn checked_index_ops_compile_for_aarch64() {
    let target = Target::new(Arch::Aarch64, None).expect("aarch64");
    for c in bad_cases() {
        let mut o = runner::options(target.clone());
        o.index_checks = IndexChecks::Error;
        compile_graph(&graph(&c), &o).unwrap_or_else(|e| panic!("{}: {e}", c.name));
    }
}

/// Each bad index case, run by the C harness under valgrind: the call fails with
/// NNC_ERR_INDEX_OUT_OF_RANGE (the harness exits 3) and valgrind reports no error.
#[test]
fn out_of_range_indices_are_clean_under_valgrind() {
    if !tools::require_tools(&["valgrind", "cc"]) {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root");
    let harness = dir.path().join("nnc_run");
    tools::run(
        std::process::Command::new("cc")
            .args(["-O1", "-std=c11", "-I"])
            .arg(root.join("runtime-abi/include"))
            .arg(root.join("tests/harness/nnc_run.c"))
            .arg("-o")
            .arg(&harness)
            .arg("-ldl"),
    );
    for (k, c) in bad_cases().iter().enumerate() {
        let case_dir = dir.path().join(format!("case{k}"));
        let (in_dir, out_dir) = (case_dir.join("in"), case_dir.join("out"));
        std::fs::create_dir_all(&in_dir).expect("dir");
        std::fs::create_dir_all(&out_dir).expect("dir");
        let lib = runner::write_library(&graph(c), &opts(IndexChecks::Error), &case_dir)
            .expect("compiles");
        for (i, t) in c.inputs.iter().enumerate() {
            std::fs::write(in_dir.join(format!("input_{i}.bin")), t.to_le_bytes()).expect("w");
        }
        let out = std::process::Command::new("valgrind")
            .args(["-q", "--error-exitcode=99", "--leak-check=no"])
            .arg(&harness)
            .arg(&lib)
            .arg("")
            .arg(&in_dir)
            .arg(&out_dir)
            .output()
            .expect("valgrind runs");
        let log = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(3),
            "{}: expected the harness's 'infer failed' exit; valgrind said:\n{log}",
            c.name
        );
        assert!(!log.contains("Invalid"), "{}: {log}", c.name);
    }
}

/// `op` on two int64-domain inputs of `dtype`, compiled and interpreted.
fn int_binary(op: BinaryOp, a: Tensor, b: Tensor) -> (Tensor, Tensor) {
    let (g, _) = one_node(
        Op::Binary(op),
        vec![In::Given(a.clone()), In::Given(b.clone())],
        0,
    );
    let lib = Compiled::with_options(&g, &opts(IndexChecks::Error)).expect("compiles");
    let (status, out) = lib.run_status(&g, &[a.clone(), b.clone()]).expect("runs");
    assert_eq!(status, 0);
    let expected = nnc::interp::run_graph(&g, &[a, b]).expect("interpreter");
    (out[0].clone(), expected[0].clone())
}

/// `MIN / -1` wraps to MIN with remainder 0; `x / 0` and `x % 0` are 0; for every
/// integer dtype, compiled and interpreted, against hand-computed values.
#[test]
fn integer_division_never_traps() {
    let signed = [DType::I8, DType::I16, DType::I32, DType::I64];
    let unsigned = [DType::U8, DType::U16, DType::U32, DType::U64];
    for dtype in signed.into_iter().chain(unsigned) {
        let bits = 8 * dtype.size() as u32;
        // Columns: MIN / -1 (signed) or 10 / 3, x / 0 twice, and an ordinary division.
        type Columns = (Vec<i64>, Vec<i64>, Vec<i64>, Vec<i64>, Vec<i64>);
        let (x, y, div, floor_mod, fmod): Columns = if dtype.is_signed_int() {
            let min = -(1i128 << (bits - 1)) as i64;
            (
                vec![min, 7, -7, -5],
                vec![-1, 0, 0, 2],
                vec![min, 0, 0, -2],
                vec![0, 0, 0, 1],
                vec![0, 0, 0, -1],
            )
        } else {
            (
                vec![10, 7, 9, 5],
                vec![3, 0, 0, 2],
                vec![3, 0, 0, 2],
                vec![1, 0, 0, 1],
                vec![1, 0, 0, 1],
            )
        };
        let t = |v: &Vec<i64>| Tensor::from_vec(&[4], v.clone()).cast(dtype);
        for (op, want) in [
            (BinaryOp::Div, &div),
            (BinaryOp::Mod { fmod: false }, &floor_mod),
            (BinaryOp::Mod { fmod: true }, &fmod),
        ] {
            let (compiled, interpreted) = int_binary(op, t(&x), t(&y));
            assert_eq!(compiled, t(want), "{op:?} {dtype}: compiled");
            assert_eq!(interpreted, t(want), "{op:?} {dtype}: interpreter");
        }
    }
}
