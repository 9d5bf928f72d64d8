//! What runs around the compiler core on the machine that compiles: compiled graphs
//! loaded into this process ([`LoaderRunner`], the core's
//! [`nnc::quant::host::HostRunner`], over nnc-runtime-abi's loader), `.npy` tensors
//! ([`npy`]) and INT8 calibration samples ([`calibration_data`]). The `nnc` command
//! line uses all of it; nnc-build uses it for `quantize_int8` (feature `int8`).

pub mod calibration_data;
pub mod npy;
mod runner;

pub use calibration_data::CalibrationFiles;
pub use runner::{LoadedModel, LoaderRunner};
