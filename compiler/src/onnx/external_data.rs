//! Reading a tensor's external data (`location`, `offset`, `length` beside the model),
//! confined to the model's folder: the file's real path (symlinks resolved) must lie
//! inside the folder's real path, must be a regular file, and must really hold the
//! bytes the tensor declares before any buffer is allocated for them.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};

use super::proto::TensorProto;
use crate::files;

/// Reads the `expected` bytes of `t`'s external data; `base_dir` is the model's folder.
pub fn read_external(
    t: &TensorProto,
    base_dir: Option<&Path>,
    expected: usize,
) -> Result<Vec<u8>, String> {
    let name = &t.name;
    let base = base_dir
        .ok_or_else(|| format!("tensor '{name}' uses external data, which is not allowed here"))?;
    let get = |k: &str| {
        t.external_data
            .iter()
            .find(|e| e.key == k)
            .map(|e| e.value.as_str())
    };
    let location = get("location")
        .ok_or_else(|| format!("tensor '{name}': external data without a location"))?;
    let parse = |k: &str| -> Result<Option<u64>, String> {
        get(k)
            .map(|v| {
                v.parse::<u64>()
                    .map_err(|_| format!("tensor '{name}': bad external data {k} '{v}'"))
            })
            .transpose()
    };
    let offset = parse("offset")?.unwrap_or(0);
    let length = parse("length")?.unwrap_or(expected as u64);
    if length != expected as u64 {
        return Err(format!(
            "tensor '{name}': external data length {length} but the tensor needs {expected} bytes"
        ));
    }
    let path = confined_path(base, location).map_err(|m| format!("tensor '{name}': {m}"))?;
    let shown = path.display();
    let mut file = files::open_regular(&path)
        .map_err(|e| format!("tensor '{name}': cannot open {shown}: {e}"))?;
    // The file's real size, not the tensor's word: a short (or sparse, or special)
    // file must not make nnc allocate what the model merely declares.
    let size = file
        .metadata()
        .map_err(|e| format!("tensor '{name}': {shown}: {e}"))?
        .len();
    if offset.checked_add(length).is_none_or(|end| end > size) {
        return Err(format!(
            "tensor '{name}': {shown} holds {size} bytes, too few for offset {offset} + length {length}"
        ));
    }
    file.seek(SeekFrom::Start(offset))
        .map_err(|e| format!("tensor '{name}': {shown}: {e}"))?;
    let mut buf = Vec::new();
    files::reserve(&mut buf, length).map_err(|e| format!("tensor '{name}': {shown}: {e}"))?;
    let read = file
        .take(length)
        .read_to_end(&mut buf)
        .map_err(|e| format!("tensor '{name}': {shown}: {e}"))?;
    if read as u64 != length {
        return Err(format!(
            "tensor '{name}': {shown} ended after {read} of {length} bytes at offset {offset}"
        ));
    }
    Ok(buf)
}

/// The real path of `location` relative to the model's folder `base`, refused unless
/// it stays inside the folder's real path. `..` and absolute paths are refused as
/// written; symlinks (to a file or a sub-folder) are followed and must stay inside too.
pub fn confined_path(base: &Path, location: &str) -> Result<PathBuf, String> {
    let rel = Path::new(location);
    if rel
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(format!(
            "external data path '{location}' must be relative and stay inside the model's folder"
        ));
    }
    // An empty parent (`model.onnx` in the working directory) is the current directory.
    let base = if base.as_os_str().is_empty() {
        Path::new(".")
    } else {
        base
    };
    let real_base = base
        .canonicalize()
        .map_err(|e| format!("cannot resolve the model's folder {}: {e}", base.display()))?;
    let joined = base.join(rel);
    let real = joined
        .canonicalize()
        .map_err(|e| format!("cannot open {}: {e}", joined.display()))?;
    if !real.starts_with(&real_base) {
        return Err(format!(
            "external data '{location}' resolves to {}, outside the model's folder {}",
            real.display(),
            real_base.display()
        ));
    }
    Ok(real)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn symlinks_inside_the_folder_are_followed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("data")).unwrap();
        std::fs::write(dir.path().join("data/w.bin"), b"1234").unwrap();
        symlink("data/w.bin", dir.path().join("w.bin")).unwrap();
        symlink("data", dir.path().join("d")).unwrap();
        for location in ["w.bin", "d/w.bin", "./data/w.bin"] {
            let p = confined_path(dir.path(), location).unwrap();
            assert_eq!(std::fs::read(p).unwrap(), b"1234", "{location}");
        }
    }

    #[test]
    fn symlinks_leaving_the_folder_are_refused() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"secret").unwrap();
        let dir = tempfile::tempdir().unwrap();
        symlink(outside.path().join("secret"), dir.path().join("w.bin")).unwrap();
        symlink(outside.path(), dir.path().join("sub")).unwrap();
        for location in ["w.bin", "sub/secret"] {
            let e = confined_path(dir.path(), location).unwrap_err();
            assert!(e.contains("outside the model's folder"), "{location}: {e}");
        }
    }
}
