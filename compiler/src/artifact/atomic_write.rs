//! Crash- and failure-safe file output.
//!
//! Artifacts are written to a temporary file in the destination directory,
//! flushed to disk, and renamed over the destination. A reader therefore sees
//! either the old file or the complete new one, never a truncated library, and
//! a failed compile leaves no partial output behind.
//!
//! Files that describe each other (a library and its header) are renamed into
//! place together under an exclusive `flock` of their directory
//! ([`write_atomically_together`]): of several processes writing the same pair,
//! the last to take the lock leaves both of its files, never one file of each.

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

/// One file of [`write_atomically_together`]: its destination, contents and
/// permission bits (`None`: the defaults for new files).
pub struct FileToWrite<'a> {
    pub path: &'a Path,
    pub bytes: &'a [u8],
    pub mode: Option<u32>,
}

/// Replaces every file of `files` (all in one directory) so that they change
/// together: each is written to a temporary and flushed first, then all are
/// renamed into place while this process holds an exclusive lock on the
/// directory, which every nnc writing to that directory takes too. On failure
/// nothing new is left behind (files already renamed are removed).
pub fn write_atomically_together(files: &[FileToWrite]) -> io::Result<()> {
    let Some(first) = files.first() else {
        return Ok(());
    };
    let (dir, _) = split_path(first.path)?;
    let mut temps: Vec<PathBuf> = Vec::with_capacity(files.len());
    let cleanup = |temps: &[PathBuf]| {
        for t in temps {
            let _ = fs::remove_file(t);
        }
    };
    for f in files {
        let (file_dir, file_name) = split_path(f.path)?;
        if file_dir != dir {
            cleanup(&temps);
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} and {} are not in one directory",
                    first.path.display(),
                    f.path.display()
                ),
            ));
        }
        let written = create_temp_file(&dir, &file_name).and_then(|(temp, file)| {
            temps.push(temp.clone());
            fill(file, f.bytes, f.mode)
        });
        if let Err(e) = written {
            cleanup(&temps);
            return Err(e);
        }
    }
    let lock = lock_directory(&dir);
    let mut renamed = Vec::with_capacity(files.len());
    for (f, temp) in files.iter().zip(&temps) {
        if let Err(e) = fs::rename(temp, f.path) {
            for path in &renamed {
                let _ = fs::remove_file(path);
            }
            cleanup(&temps[renamed.len()..]);
            return Err(e);
        }
        renamed.push(f.path);
    }
    drop(lock);
    sync_directory(&dir);
    Ok(())
}

/// An exclusive `flock` of `dir`, released when the handle drops. `None` where the
/// directory cannot be opened for reading (write-only directories): the files are
/// then still each replaced atomically, only not as a pair against concurrent nnc runs.
fn lock_directory(dir: &Path) -> Option<File> {
    let handle = File::open(dir).ok()?;
    handle.lock().ok()?;
    Some(handle)
}

fn write_impl(path: &Path, bytes: &[u8], mode: Option<u32>) -> io::Result<()> {
    write_atomically_together(&[FileToWrite { path, bytes, mode }])
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

fn fill(mut file: File, bytes: &[u8], mode: Option<u32>) -> io::Result<()> {
    file.write_all(bytes)?;
    if let Some(mode) = mode {
        set_mode(&file, mode)?;
    }
    // Data must be on disk before the rename makes it visible, otherwise a
    // crash could leave a complete-looking but empty file.
    file.sync_all()
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
    fn files_written_together_replace_both_or_neither() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("libm.so"), dir.path().join("libm.h"));
        let files = |x: &'static [u8]| {
            [(&a, x), (&b, x)].map(|(path, bytes)| FileToWrite {
                path,
                bytes,
                mode: None,
            })
        };
        write_atomically_together(&files(b"one")).unwrap();
        assert_eq!(
            (fs::read(&a).unwrap(), fs::read(&b).unwrap()),
            (b"one".to_vec(), b"one".to_vec())
        );
        // The header's name is taken by a non-empty directory: its rename fails, and
        // the library renamed before it is removed.
        fs::remove_file(&b).unwrap();
        fs::create_dir(&b).unwrap();
        fs::write(b.join("inner"), b"x").unwrap();
        assert!(write_atomically_together(&files(b"two")).is_err());
        assert!(!a.exists());
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn concurrent_pairs_stay_pairs() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("libm.so"), dir.path().join("libm.h"));
        std::thread::scope(|scope| {
            for t in 0..4u8 {
                let (a, b) = (&a, &b);
                scope.spawn(move || {
                    for round in 0..25u8 {
                        let bytes = [t, round];
                        let files = [a, b].map(|path| FileToWrite {
                            path,
                            bytes: &bytes,
                            mode: None,
                        });
                        write_atomically_together(&files).unwrap();
                    }
                });
            }
        });
        assert_eq!(fs::read(&a).unwrap(), fs::read(&b).unwrap());
    }

    #[test]
    fn missing_directory_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("no/such/dir/out.so");
        assert!(write_atomically(&path, b"data").is_err());
    }
}
