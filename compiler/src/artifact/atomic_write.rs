//! Crash- and failure-safe file output.
//!
//! Artifacts are written to a temporary file in the destination directory,
//! flushed to disk, and renamed over the destination. A reader therefore sees
//! either the old file or the complete new one, never a truncated library, and
//! a failed compile leaves no partial output behind.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Atomically replaces `path` with `bytes`.
///
/// The new file gets the default permissions for new files (0666 minus the
/// umask on Unix). Use [`write_atomically_with_mode`] for executables and
/// shared libraries.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_impl(path, bytes, None)
}

/// Like [`write_atomically`], but sets the file's permission bits to `mode`
/// (e.g. `0o755` for a `.so`) before it becomes visible. `mode` is ignored on
/// non-Unix platforms.
pub fn write_atomically_with_mode(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    write_impl(path, bytes, Some(mode))
}

fn write_impl(path: &Path, bytes: &[u8], mode: Option<u32>) -> io::Result<()> {
    let (dir, file_name) = split_path(path)?;
    let (temp_path, file) = create_temp_file(&dir, &file_name)?;
    let result = fill_and_rename(file, &temp_path, path, bytes, mode);
    if result.is_err() {
        // Best effort: the original error is the one worth reporting.
        let _ = fs::remove_file(&temp_path);
        return result;
    }
    sync_directory(&dir);
    Ok(())
}

fn split_path(path: &Path) -> io::Result<(PathBuf, String)> {
    let file_name = path
        .file_name()
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} does not name a file", path.display()),
            )
        })?
        .to_string_lossy()
        .into_owned();
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((dir, file_name))
}

/// Creates a fresh, uniquely named file next to the destination (same
/// directory, hence same file system, so the final rename is atomic).
fn create_temp_file(dir: &Path, file_name: &str) -> io::Result<(PathBuf, File)> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let pid = std::process::id();
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let candidate = dir.join(format!(".{file_name}.{pid}.{n}.tmp"));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&candidate)
        {
            Ok(file) => return Ok((candidate, file)),
            // Left over by a crashed process with a recycled pid: try the next name.
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(err) => return Err(err),
        }
    }
}

fn fill_and_rename(
    mut file: File,
    temp_path: &Path,
    path: &Path,
    bytes: &[u8],
    mode: Option<u32>,
) -> io::Result<()> {
    file.write_all(bytes)?;
    if let Some(mode) = mode {
        set_mode(&file, mode)?;
    }
    // Data must be on disk before the rename makes it visible, otherwise a
    // crash could leave a complete-looking but empty file.
    file.sync_all()?;
    drop(file);
    fs::rename(temp_path, path)
}

#[cfg(unix)]
fn set_mode(file: &File, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    file.set_permissions(fs::Permissions::from_mode(mode))
}

#[cfg(not(unix))]
fn set_mode(_file: &File, _mode: u32) -> io::Result<()> {
    Ok(())
}

/// Persists the rename itself. Failure here is not reported: the data is
/// already safely in place from the point of view of every reader.
fn sync_directory(dir: &Path) {
    #[cfg(unix)]
    if let Ok(handle) = File::open(dir) {
        let _ = handle.sync_all();
    }
    #[cfg(not(unix))]
    let _ = dir;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leftovers(dir: &Path) -> Vec<String> {
        fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".tmp"))
            .collect()
    }

    #[test]
    fn replaces_existing_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.bin");
        fs::write(&path, b"old contents that are longer").unwrap();
        write_atomically(&path, b"new").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new");
        assert!(leftovers(dir.path()).is_empty());
    }

    #[cfg(unix)]
    #[test]
    fn sets_requested_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("libx.so");
        write_atomically_with_mode(&path, b"\x7fELF", 0o755).unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o755);
    }

    #[test]
    fn failed_rename_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        // Renaming a file over a non-empty directory fails.
        let path = dir.path().join("occupied");
        fs::create_dir(&path).unwrap();
        fs::write(path.join("inner"), b"x").unwrap();
        assert!(write_atomically(&path, b"data").is_err());
        assert!(leftovers(dir.path()).is_empty());
        assert!(path.is_dir());
    }

    #[test]
    fn missing_directory_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("no/such/dir/out.so");
        assert!(write_atomically(&path, b"data").is_err());
    }
}
