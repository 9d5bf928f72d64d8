//! The scratch of the Cranelift families that need some besides their operands:
//! sorting (TopK with k at run time, NonMaxSuppression), Unique, and Resize over
//! run-time extents. The kernel plan reserves these bytes; lowering lays its buffers
//! out the same way.

use crate::ir::DType;

/// Scratch bytes of TopK with k read at run time over an axis of `dim` elements of
/// `dtype`: float32 sorts the whole axis once, as (key, position) pairs; other types
/// pick each of the k in turn and need none.
pub fn top_k_sorted_scratch(dtype: DType, dim: usize) -> usize {
    match dtype {
        DType::F32 => dim * 8 + sort_scratch(dim),
        _ => 0,
    }
}

/// Scratch bytes `lower::sort::sort_by_key` needs for `n` pairs besides the pairs themselves: the
/// other buffer of each pass and one count per byte value.
pub fn sort_scratch(n: usize) -> usize {
    n * 8 + 256 * 8
}

/// Scratch bytes of Unique: one int64 per slice.
pub fn unique_scratch(dim: usize) -> usize {
    dim * 8
}

/// Scratch bytes of NonMaxSuppression with `n` boxes and `per_class` kept at most: a
/// (score, box) pair per box and the sort's buffers, then the kept boxes' extents.
pub fn nms_scratch(n: usize, per_class: usize) -> usize {
    n * 8 + sort_scratch(n) + kept_columns(per_class) * 5 * 4
}

/// The kept boxes' extents, stored as five columns of `lanes` f32 each (x min, x max,
/// y min, y max, area), so four kept boxes are checked at once.
pub(crate) fn kept_columns(per_class: usize) -> usize {
    per_class.div_ceil(4) * 4
}

/// Bytes of one output column's taps in the scratch: the two input columns (i32) and
/// their weights (f32).
pub(crate) const TAP_BYTES: usize = 16;

/// Scratch bytes of a Resize whose output rows hold at most `width` elements.
pub fn resize_scratch(width: usize) -> usize {
    ScratchLayout::new(width).bytes
}

/// The scratch of a linear Resize: the columns' taps, then two slots each holding one
/// input row sampled at the output columns (an input row serves every output row
/// between its neighbours: an upsampling by 8 samples each row once, not 8 times), and
/// the input row each slot holds (row `j` goes to slot `j % 2`: the two rows an output
/// row blends are then in different slots).
pub(crate) struct ScratchLayout {
    pub(crate) slots: usize,
    pub(crate) slot_bytes: usize,
    pub(crate) tags: usize,
    pub(crate) bytes: usize,
}

impl ScratchLayout {
    pub(crate) fn new(width: usize) -> ScratchLayout {
        let slots = width * TAP_BYTES;
        let slot_bytes = (width * 4).next_multiple_of(16);
        let tags = slots + 2 * slot_bytes;
        ScratchLayout {
            slots,
            slot_bytes,
            tags,
            bytes: tags + 16,
        }
    }

    pub(crate) fn slot(&self, k: usize) -> usize {
        self.slots + k * self.slot_bytes
    }

    pub(crate) fn tag(&self, k: usize) -> usize {
        self.tags + 8 * k
    }
}
