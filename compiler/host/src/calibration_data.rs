//! Calibration samples for `--quantize int8 --calibration PATH`: the layouts users keep
//! representative inputs in, read into one `Vec<Tensor>` (the model's inputs, in order)
//! per sample.
//!
//! Accepted (also in `nnc compile --help`):
//! * a `.npy` file, for a model with one input;
//! * a folder of `.npy` files named after the inputs (`NAME.npy`);
//! * a folder of `.npz` files keyed by input name (samples of all files, in file-name
//!   order);
//! * a folder of ONNX `test_data_set_*` folders (or one such folder), each holding
//!   `input_K.pb` TensorProtos for the model's K-th input: one sample per folder.
//!
//! In the `.npy` and `.npz` forms each array holds N samples for an input of shape
//! `[B, d1, ...]`, either stacked along the batch axis (`[N·B, d1, ...]`) or along a new
//! leading axis (`[N, B, d1, ...]`). Every input must give the same N; a dtype that
//! differs from the input's is an error, not a silent cast.

use std::io::Read;
use std::path::{Path, PathBuf};

use nnc::ir::Tensor;
pub use nnc::quant::host::InputSpec;
use nnc::quant::host::{BoxError, CalibrationSource};

/// The samples under a path, as `--calibration PATH` names them.
#[derive(Clone, Debug)]
pub struct CalibrationFiles(pub PathBuf);

impl CalibrationSource for CalibrationFiles {
    fn samples(&self, inputs: &[InputSpec]) -> Result<Vec<Vec<Tensor>>, BoxError> {
        load(&self.0, inputs).map_err(BoxError::from)
    }
}

/// Reads every sample under `path` for `inputs`. Errors name the file and the input.
pub fn load(path: &Path, inputs: &[InputSpec]) -> Result<Vec<Vec<Tensor>>, String> {
    let shown = path.display();
    if inputs.is_empty() {
        return Err(format!("{shown}: the model has no inputs to calibrate"));
    }
    // Anything but a folder is read as a file, which refuses what is not a regular one.
    if !path.is_dir() {
        return match extension(path) {
            Some("npy") if inputs.len() == 1 => {
                let t = crate::npy::read(path)?;
                split_samples(&t, &inputs[0]).map_err(|e| format!("{shown}: {e}"))
            }
            Some("npy") => Err(format!(
                "{shown}: a lone .npy file calibrates a one-input model; this one has {} \
                 inputs ({}): give a folder of NAME.npy files",
                inputs.len(),
                names(inputs)
            )),
            Some("npz") => from_npz_files(&[path.to_path_buf()], inputs),
            _ => Err(format!("{shown}: expected a .npy or .npz file or a folder")),
        };
    }
    let entries = sorted_entries(path)?;
    let data_sets: Vec<PathBuf> = entries
        .iter()
        .filter(|p| p.is_dir() && file_name(p).starts_with("test_data_set_"))
        .cloned()
        .collect();
    if !data_sets.is_empty() {
        return data_sets.iter().map(|d| from_data_set(d, inputs)).collect();
    }
    if entries
        .iter()
        .any(|p| file_name(p).starts_with("input_") && extension(p) == Some("pb"))
    {
        return Ok(vec![from_data_set(path, inputs)?]);
    }
    let npz: Vec<PathBuf> = entries
        .iter()
        .filter(|p| p.is_file() && extension(p) == Some("npz"))
        .cloned()
        .collect();
    if !npz.is_empty() {
        return from_npz_files(&npz, inputs);
    }
    from_npy_folder(path, inputs)
}

fn extension(p: &Path) -> Option<&str> {
    p.extension().and_then(|e| e.to_str())
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn names(inputs: &[InputSpec]) -> String {
    inputs
        .iter()
        .map(|i| i.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn sorted_entries(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let read = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut entries: Vec<PathBuf> = read.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    Ok(entries)
}

/// The samples of one input's array (see the module docs for the two stackings).
fn split_samples(t: &Tensor, input: &InputSpec) -> Result<Vec<Vec<Tensor>>, String> {
    Ok(split_one(t, input)?.into_iter().map(|s| vec![s]).collect())
}

fn split_one(t: &Tensor, input: &InputSpec) -> Result<Vec<Tensor>, String> {
    let want = &input.ty.shape;
    let got = t.shape();
    if t.dtype() != input.ty.dtype {
        return Err(format!(
            "input '{}' is {} but the calibration array is {}",
            input.name,
            input.ty.dtype,
            t.dtype()
        ));
    }
    check_finite(t, want.iter().product(), &input.name)?;
    let per_sample: usize = want.iter().product();
    let count = if got.len() == want.len() + 1 && got[1..] == want[..] {
        got[0]
    } else if got.len() == want.len()
        && !want.is_empty()
        && got[1..] == want[1..]
        && want[0] > 0
        && got[0].is_multiple_of(want[0])
    {
        got[0] / want[0]
    } else {
        return Err(format!(
            "input '{}' has shape {want:?}; a calibration array must be [N·{}, ...] (stacked \
             along the batch axis) or [N, {}] (a new leading axis), not {got:?}",
            input.name,
            want.first().copied().unwrap_or(1),
            want.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    };
    if count == 0 {
        return Err(format!(
            "the array for input '{}' holds no samples",
            input.name
        ));
    }
    let bytes = t.to_le_bytes();
    let sample_bytes = per_sample * t.dtype().size();
    (0..count)
        .map(|i| {
            Tensor::from_le_bytes(&input.ty, &bytes[i * sample_bytes..(i + 1) * sample_bytes])
                .ok_or_else(|| format!("sample {i} of input '{}'", input.name))
        })
        .collect()
}

/// Refuses an inf or NaN in a float array of samples of `per_sample` elements each,
/// naming the input, the first bad sample and its value: one such value would set the
/// input's range, and every scale after it, to nothing useful.
fn check_finite(t: &Tensor, per_sample: usize, input: &str) -> Result<(), String> {
    if !t.dtype().is_float() {
        return Ok(());
    }
    match t.f64_values().enumerate().find(|(_, v)| !v.is_finite()) {
        None => Ok(()),
        Some((at, value)) => Err(format!(
            "input '{input}': sample {} holds {value} (element {} of the sample): \
                 calibration samples must be finite",
            at / per_sample.max(1),
            at % per_sample.max(1)
        )),
    }
}

/// Per-input sample lists (all of one length) zipped into samples.
fn zip_inputs(
    per_input: Vec<Vec<Tensor>>,
    inputs: &[InputSpec],
) -> Result<Vec<Vec<Tensor>>, String> {
    let n = per_input[0].len();
    if let Some((i, other)) = per_input.iter().enumerate().find(|(_, s)| s.len() != n) {
        return Err(format!(
            "input '{}' has {n} calibration samples but '{}' has {}",
            inputs[0].name,
            inputs[i].name,
            other.len()
        ));
    }
    let mut iters: Vec<_> = per_input.into_iter().map(Vec::into_iter).collect();
    Ok((0..n)
        .map(|_| {
            iters
                .iter_mut()
                .map(|it| it.next().expect("same lengths"))
                .collect()
        })
        .collect())
}

fn from_npy_folder(dir: &Path, inputs: &[InputSpec]) -> Result<Vec<Vec<Tensor>>, String> {
    let mut per_input = vec![];
    for input in inputs {
        let file = dir.join(format!("{}.npy", input.name));
        if !file.is_file() {
            return Err(format!(
                "{}: no {} for input '{}' (a calibration folder holds NAME.npy per input \
                 ({}), .npz files or test_data_set_* folders)",
                dir.display(),
                file.display(),
                input.name,
                names(inputs)
            ));
        }
        let t = crate::npy::read(&file)?;
        per_input.push(split_one(&t, input).map_err(|e| format!("{}: {e}", file.display()))?);
    }
    zip_inputs(per_input, inputs)
}

fn from_npz_files(files: &[PathBuf], inputs: &[InputSpec]) -> Result<Vec<Vec<Tensor>>, String> {
    let mut samples = vec![];
    for file in files {
        let shown = file.display();
        let f = nnc::files::open_regular(file).map_err(|e| format!("{shown}: {e}"))?;
        let mut archive =
            zip::ZipArchive::new(f).map_err(|e| format!("{shown}: not an .npz: {e}"))?;
        let mut per_input = vec![];
        for input in inputs {
            let mut entry = archive
                .by_name(&format!("{}.npy", input.name))
                .map_err(|_| {
                    format!(
                        "{shown}: no array named '{}' (inputs: {})",
                        input.name,
                        names(inputs)
                    )
                })?;
            let mut bytes = vec![];
            entry
                .read_to_end(&mut bytes)
                .map_err(|e| format!("{shown}: {}: {e}", input.name))?;
            let t =
                crate::npy::parse(&bytes).map_err(|e| format!("{shown}: {}: {e}", input.name))?;
            per_input.push(split_one(&t, input).map_err(|e| format!("{shown}: {e}"))?);
        }
        samples.extend(zip_inputs(per_input, inputs).map_err(|e| format!("{shown}: {e}"))?);
    }
    Ok(samples)
}

/// One sample from `input_K.pb` files, K in the model's input order.
fn from_data_set(dir: &Path, inputs: &[InputSpec]) -> Result<Vec<Tensor>, String> {
    inputs
        .iter()
        .enumerate()
        .map(|(k, input)| {
            let file = dir.join(format!("input_{k}.pb"));
            let shown = file.display();
            let bytes = nnc::files::read_regular(&file)
                .map_err(|e| format!("{shown} (input '{}'): {e}", input.name))?;
            let proto = <nnc::onnx::proto::TensorProto as prost::Message>::decode(bytes.as_slice())
                .map_err(|e| format!("{shown}: {e}"))?;
            let t = nnc::onnx::tensor_proto::tensor_from_proto(&proto, Some(dir))
                .map_err(|e| format!("{shown}: {e}"))?;
            if t.ty() != input.ty {
                return Err(format!(
                    "{shown}: input '{}' is {} but the file holds {}",
                    input.name,
                    input.ty,
                    t.ty()
                ));
            }
            check_finite(&t, t.len(), &input.name).map_err(|e| format!("{shown}: {e}"))?;
            Ok(t)
        })
        .collect()
}
