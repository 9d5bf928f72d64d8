//! Inputs a model reads as shapes (a Reshape's target, a Resize's sizes, a Tile's
//! repeats...), compiled as the values the model's declared output shapes imply and
//! checked by the run: the data-dependent shape becomes a fact about the input's
//! values, as a `match_cast` makes it one in TVM Relax.

use super::ValueId;

/// Which values a graph input the compiled shapes were derived from may hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputGuard {
    /// The graph input (its elements, read as integers: floats truncate toward zero).
    pub input: ValueId,
    /// The values each element may hold, in element order.
    pub allowed: Vec<Vec<i64>>,
    /// Whether one element may instead be -1 (a Reshape's inferred axis: with the
    /// element count fixed, the others determine it).
    pub one_inferred: bool,
    /// The node and its input, for messages: `node 'Reshape_3' (Reshape) input 1 (shape)`.
    pub site: String,
}

impl InputGuard {
    /// Whether `values` are among those the compiled shapes allow.
    pub fn admits(&self, values: &[i64]) -> bool {
        if values.len() != self.allowed.len() {
            return false;
        }
        let mut inferred = 0;
        for (v, allowed) in values.iter().zip(&self.allowed) {
            if allowed.contains(v) {
                continue;
            }
            if *v == -1 && self.one_inferred {
                inferred += 1;
                continue;
            }
            return false;
        }
        inferred <= 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_only_the_allowed_values_and_one_inferred_axis() {
        let g = InputGuard {
            input: ValueId(0),
            allowed: vec![vec![2, 0], vec![12]],
            one_inferred: true,
            site: String::new(),
        };
        assert!(g.admits(&[2, 12]));
        assert!(g.admits(&[0, 12]));
        assert!(g.admits(&[-1, 12]));
        assert!(!g.admits(&[-1, -1]));
        assert!(!g.admits(&[3, 12]));
        assert!(!g.admits(&[2]));
        let strict = InputGuard {
            one_inferred: false,
            ..g
        };
        assert!(!strict.admits(&[-1, 12]));
    }
}
