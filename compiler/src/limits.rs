//! Resource limits that keep a hostile or broken model from exhausting the machine
//! that compiles it. The defaults fit every real model nnc targets; each has a command
//! line flag to raise it.

use std::fmt;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// Sizes nnc refuses to go past, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest tensor (graph input, output, intermediate or constant) a model may
    /// declare or produce: `--max-tensor-bytes`.
    pub max_tensor_bytes: u64,
    /// Largest tensor constant folding computes at compile time; a node whose result
    /// would be bigger is left to run in `infer`: `--max-fold-bytes`.
    pub max_fold_bytes: u64,
    /// Total weights (initializers, external data and `Constant` nodes) a model may
    /// carry: `--max-weight-bytes`.
    pub max_weight_bytes: u64,
}

impl Limits {
    pub const DEFAULT_MAX_TENSOR_BYTES: u64 = 16 * GIB;
    pub const DEFAULT_MAX_FOLD_BYTES: u64 = 256 * MIB;
    pub const DEFAULT_MAX_WEIGHT_BYTES: u64 = 8 * GIB;
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_tensor_bytes: Limits::DEFAULT_MAX_TENSOR_BYTES,
            max_fold_bytes: Limits::DEFAULT_MAX_FOLD_BYTES,
            max_weight_bytes: Limits::DEFAULT_MAX_WEIGHT_BYTES,
        }
    }
}

/// A byte count as the command line takes it: digits with an optional binary suffix
/// `K`, `M`, `G` or `T` (`KiB`... also accepted), e.g. `512M`, `16G`.
pub fn parse_byte_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, suffix) = t.split_at(digits_end);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("'{text}' is not a byte count (e.g. 4096, 512M, 16G)"))?;
    let unit = match suffix.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => KIB,
        "M" | "MB" | "MIB" => MIB,
        "G" | "GB" | "GIB" => GIB,
        "T" | "TB" | "TIB" => 1 << 40,
        _ => {
            return Err(format!(
                "'{text}': unknown unit '{suffix}' (use K, M, G or T)"
            ))
        }
    };
    n.checked_mul(unit)
        .ok_or_else(|| format!("'{text}' is too large"))
}

/// Prints a byte count the way [`parse_byte_size`] reads it back, in the largest exact
/// unit: `16G`, `256M`, `1000`.
pub struct ByteSize(pub u64);

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        for (unit, s) in [(1u64 << 40, "T"), (GIB, "G"), (MIB, "M"), (KIB, "K")] {
            if n >= unit && n.is_multiple_of(unit) {
                return write!(f, "{}{s}", n / unit);
            }
        }
        write!(f, "{n}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes_parse_with_binary_units() {
        assert_eq!(parse_byte_size("4096"), Ok(4096));
        assert_eq!(parse_byte_size("512M"), Ok(512 * MIB));
        assert_eq!(parse_byte_size("16GiB"), Ok(16 * GIB));
        assert_eq!(parse_byte_size(" 2k "), Ok(2 * KIB));
        assert!(parse_byte_size("").is_err());
        assert!(parse_byte_size("-1").is_err());
        assert!(parse_byte_size("3X").is_err());
        assert!(parse_byte_size("99999999999T").is_err());
    }

    #[test]
    fn byte_sizes_print_in_their_largest_exact_unit() {
        assert_eq!(ByteSize(16 * GIB).to_string(), "16G");
        assert_eq!(ByteSize(3 * MIB + 1).to_string(), "3145729");
        assert_eq!(ByteSize(0).to_string(), "0");
    }
}
