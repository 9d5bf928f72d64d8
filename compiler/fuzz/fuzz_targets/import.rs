#![no_main]
//! See nnc_fuzz_harness::import_bytes.

libfuzzer_sys::fuzz_target!(|data: &[u8]| nnc_fuzz_harness::import_bytes(data));
