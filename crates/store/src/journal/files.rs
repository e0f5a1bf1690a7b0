//! The journal file beside a store file: its name (beside the store file's resolved path, so
//! a store opened through a symlink journals beside the real file), and opening it safely:
//! the file type checked before and after the open (a FIFO, a device or a directory is refused,
//! and the open never waits on a FIFO), and the file locked with the store.

use std::fs;
use std::path::{Path, PathBuf};

use crate::OpenError;

/// The journal file of the store at `path`: `<path>-journal`. `path` should be resolved
/// ([`resolve`]) so that every name of a store file finds the same journal.
pub(crate) fn journal_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push("-journal");
    PathBuf::from(name)
}

/// The store file's path with every symlink resolved (the file exists).
///
/// # Errors
/// [`OpenError::Io`] (a symlink loop among them).
pub(crate) fn resolve(path: &Path) -> Result<PathBuf, OpenError> {
    fs::canonicalize(path).map_err(|source| OpenError::Io { action: "resolve", path: path.to_path_buf(), source })
}

/// Which file `path` is: device and inode, big-endian (`None` where the platform has no such
/// thing, or the file cannot be inspected).
pub(crate) fn identity(path: &Path) -> Option<[u8; 16]> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let meta = fs::metadata(path).ok()?;
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&meta.dev().to_be_bytes());
        out[8..].copy_from_slice(&meta.ino().to_be_bytes());
        Some(out)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

/// Which file an open `file` is: device and inode, big-endian (`None` where the platform has no
/// such thing).
pub(crate) fn identity_of(file: &fs::File) -> Option<[u8; 16]> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let meta = file.metadata().ok()?;
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&meta.dev().to_be_bytes());
        out[8..].copy_from_slice(&meta.ino().to_be_bytes());
        Some(out)
    }
    #[cfg(not(unix))]
    {
        let _ = file;
        None
    }
}

/// Refuses a journal path that exists and is not a regular file (a directory, a FIFO, a
/// device), before anything opens the store for writing, so a refused open changes nothing.
pub(crate) fn refuse_odd_journal(journal: &Path) -> Result<(), OpenError> {
    match fs::metadata(journal) {
        Ok(meta) => OpenError::not_a_regular_file(journal, &meta).map_or(Ok(()), Err),
        // Missing, or a dangling symlink: the open decides what that means for this store.
        Err(_) => Ok(()),
    }
}

/// Refuses a journal path whose file another handle holds (a store open elsewhere through
/// another name), before anything is created or written: [`OpenError::AlreadyOpen`].
pub(crate) fn refuse_held_journal(journal: &Path) -> Result<(), OpenError> {
    match open_journal(journal, Access::Read) {
        Err(OpenError::AlreadyOpen) => Err(OpenError::AlreadyOpen),
        // Anything else is for the open to decide (the lock taken here is dropped at once).
        _ => Ok(()),
    }
}

/// How a journal file is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Read and written by the store that holds it: locked exclusively.
    Write { create: bool },
    /// Read by a read-only check: a shared lock.
    Read,
}

/// Opens the journal at `path`; `None` when there is no file there (and `access` does not
/// create one). The type is checked before opening and again on the opened file, and the open
/// does not block (a FIFO swapped in between is refused, not waited on). The lock is held as
/// long as the returned file (or a handle made from it) is open.
///
/// # Errors
/// [`OpenError::NotAFile`] for anything but a regular file; [`OpenError::AlreadyOpen`] when
/// another handle holds the journal; [`OpenError::Io`].
pub(crate) fn open_journal(path: &Path, access: Access) -> Result<Option<fs::File>, OpenError> {
    let io = |action: &'static str| {
        let path = path.to_path_buf();
        move |source| OpenError::Io { action, path, source }
    };
    match fs::metadata(path) {
        Ok(meta) => {
            if let Some(refused) = OpenError::not_a_regular_file(path, &meta) {
                return Err(refused);
            }
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            if !matches!(access, Access::Write { create: true }) {
                return Ok(None);
            }
            // A dangling symlink is not created through: that would put the journal wherever
            // the link points.
            if fs::symlink_metadata(path).is_ok() {
                return Ok(None);
            }
        }
        Err(source) => return Err(OpenError::Io { action: "inspect", path: path.to_path_buf(), source }),
    }
    let mut options = fs::OpenOptions::new();
    options.read(true);
    if let Access::Write { create } = access {
        options.write(true).create(create).truncate(false);
    }
    non_blocking(&mut options);
    let file = match options.open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(io("open")(source)),
    };
    let meta = file.metadata().map_err(io("inspect"))?;
    if let Some(refused) = OpenError::not_a_regular_file(path, &meta) {
        return Err(refused);
    }
    let locked = match access {
        Access::Write { .. } => file.try_lock(),
        Access::Read => file.try_lock_shared(),
    };
    match locked {
        Ok(()) => Ok(Some(file)),
        Err(fs::TryLockError::WouldBlock) => Err(OpenError::AlreadyOpen),
        Err(fs::TryLockError::Error(source)) => Err(io("lock")(source)),
    }
}

#[cfg(unix)]
fn non_blocking(options: &mut fs::OpenOptions) {
    use std::os::unix::fs::OpenOptionsExt;
    options.custom_flags(libc::O_NONBLOCK);
}

#[cfg(not(unix))]
fn non_blocking(_options: &mut fs::OpenOptions) {}

/// A file read through a redb backend without writing it.
#[derive(Debug)]
pub(crate) struct ReadOnlyFile(pub(crate) std::sync::Mutex<fs::File>);

impl redb::StorageBackend for ReadOnlyFile {
    fn len(&self) -> Result<u64, std::io::Error> {
        Ok(self.0.lock().map_err(|_| std::io::Error::other("poisoned"))?.metadata()?.len())
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        use std::io::{Read, Seek, SeekFrom};
        let mut file = self.0.lock().map_err(|_| std::io::Error::other("poisoned"))?;
        file.seek(SeekFrom::Start(offset))?;
        file.read_exact(out)
    }
    fn set_len(&self, _len: u64) -> Result<(), std::io::Error> {
        Err(std::io::Error::other("read-only"))
    }
    fn sync_data(&self) -> Result<(), std::io::Error> {
        Ok(())
    }
    fn write(&self, _offset: u64, _data: &[u8]) -> Result<(), std::io::Error> {
        Err(std::io::Error::other("read-only"))
    }
}
