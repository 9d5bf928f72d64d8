#![no_main]
//! See nnc_fuzz_harness::dims_case.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    nnc_fuzz_harness::dims_case(data);
});
