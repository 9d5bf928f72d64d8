//! Opening the files a user or a model names (models, external data, tensors,
//! calibration sets): only regular files. A FIFO would block `open` forever and a
//! device would be read without end, so the file is opened without blocking and the
//! opened handle itself is checked (no check-then-open race).

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

/// Opens `path` for reading if it is a regular file (symlinks to one are followed);
/// anything else is an `InvalidInput` error that says what it is.
pub fn open_regular(path: &Path) -> io::Result<File> {
    let file = open_without_blocking(path)?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not a regular file ({})", describe(&meta.file_type())),
        ));
    }
    Ok(file)
}

/// The whole content of the regular file `path`. Its buffer is reserved fallibly: a
/// file too large for memory is an error, never an abort.
pub fn read_regular(path: &Path) -> io::Result<Vec<u8>> {
    let mut file = open_regular(path)?;
    let len = file.metadata()?.len();
    let mut bytes = Vec::new();
    reserve(&mut bytes, len)?;
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Reserves room for `len` more bytes, or fails with `OutOfMemory`.
pub fn reserve(buf: &mut Vec<u8>, len: u64) -> io::Result<()> {
    usize::try_from(len)
        .ok()
        .and_then(|n| buf.try_reserve_exact(n).ok())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!("cannot allocate {len} bytes to read it"),
            )
        })
}

#[cfg(unix)]
fn open_without_blocking(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    // O_NONBLOCK makes opening a FIFO with no writer return at once; it has no effect
    // on reads from the regular files that pass the check.
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
}

#[cfg(not(unix))]
fn open_without_blocking(path: &Path) -> io::Result<File> {
    File::open(path)
}

fn describe(t: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if t.is_dir() {
        "a directory"
    } else {
        "not a file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_files_open_and_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"abc").unwrap();
        assert_eq!(read_regular(&path).unwrap(), b"abc");
    }

    #[test]
    fn directories_and_devices_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let e = open_regular(dir.path()).unwrap_err();
        assert!(e.to_string().contains("a directory"), "{e}");
        #[cfg(unix)]
        {
            let e = read_regular(Path::new("/dev/zero")).unwrap_err();
            assert!(e.to_string().contains("a character device"), "{e}");
        }
    }
}
