//! How the ONNX backend node suite fares on each op, for `nnc inspect`: the op types of
//! every case (`tests/onnx_node_ops.tsv`, written by `scripts/suite_ops.py`) and the
//! cases that pass end to end (`tests/onnx_node_passing.txt`, which the conformance
//! test keeps honest), both compiled into the binary.

const CASE_OPS: &str = include_str!("../../../tests/onnx_node_ops.tsv");
const PASSING: &str = include_str!("../../../tests/onnx_node_passing.txt");

/// The node-suite cases whose model uses an op, and how many of them pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpStatus {
    pub cases: usize,
    pub passing: usize,
}

/// The status of `op_type` (matched in any domain).
pub fn op_status(op_type: &str) -> OpStatus {
    let passing: std::collections::HashSet<&str> = PASSING.lines().map(str::trim).collect();
    let mut status = OpStatus {
        cases: 0,
        passing: 0,
    };
    for line in CASE_OPS.lines() {
        let Some((case, ops)) = line.split_once('\t') else {
            continue;
        };
        let uses = ops
            .split(',')
            .any(|op| op.rsplit(':').next() == Some(op_type));
        if uses {
            status.cases += 1;
            status.passing += passing.contains(case) as usize;
        }
    }
    status
}

/// One line for `nnc inspect`: what the suite says about an op nnc cannot compile.
pub fn describe(op_type: &str) -> String {
    match op_status(op_type) {
        OpStatus { cases: 0, .. } => "not in the ONNX node suite".to_string(),
        OpStatus { cases, passing } => {
            format!("ONNX node suite: {passing} of {cases} cases using {op_type} pass")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_cases_by_op() {
        let gs = op_status("GridSample");
        assert_eq!(gs.cases, 18, "{gs:?}");
        assert!(gs.passing <= gs.cases);
        assert_eq!(op_status("NoSuchOp").cases, 0);
        // Domain-qualified ops match by type.
        assert!(op_status("FlexAttention").cases >= 11);
    }
}
