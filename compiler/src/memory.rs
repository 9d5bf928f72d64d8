//! Fallible allocation for the tools that hold whole tensors in this process (`nnc
//! run`, `nnc verify`, calibration, the interpreter): a tensor that does not fit in
//! memory becomes an error naming it, not an abort of the process.

/// A zero-filled buffer of `bytes`, or an error naming `what` when the allocator
/// refuses it.
pub fn zeroed_bytes(bytes: usize, what: &dyn Fn() -> String) -> Result<Vec<u8>, String> {
    let mut buffer = Vec::new();
    reserve(&mut buffer, bytes, what)?;
    buffer.resize(bytes, 0);
    Ok(buffer)
}

/// Reserves room for `additional` more elements in `v`, or an error naming `what`.
pub fn reserve<T>(
    v: &mut Vec<T>,
    additional: usize,
    what: &dyn Fn() -> String,
) -> Result<(), String> {
    v.try_reserve_exact(additional)
        .map_err(|_| does_not_fit(what(), additional * size_of::<T>()))
}

/// Checks that `bytes` can be allocated now (the block is freed at once), before code
/// that allocates infallibly (ndarray's maps, collects) makes a buffer of that size.
pub fn check_fits(bytes: usize, what: &dyn Fn() -> String) -> Result<(), String> {
    Vec::<u8>::new()
        .try_reserve_exact(bytes)
        .map_err(|_| does_not_fit(what(), bytes))
}

fn does_not_fit(what: String, bytes: usize) -> String {
    format!("{what} does not fit in memory: {bytes} bytes could not be allocated")
}
