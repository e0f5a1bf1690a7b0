//! The journal file beside a store file: its name, and the read-only check that refuses a
//! store whose journal holds commits the file does not (a read-only open cannot replay).

use std::fs;
use std::path::{Path, PathBuf};

use redb::{ReadableDatabase, StorageBackend};

use crate::OpenError;

/// The journal file of the store at `path`: `<path>-journal`.
pub(crate) fn journal_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push("-journal");
    PathBuf::from(name)
}

/// A read-only open cannot replay a journal: it refuses a store whose journal holds records
/// the file does not.
pub(crate) fn refuse_pending_journal(db: &redb::ReadOnlyDatabase, path: &Path) -> Result<(), OpenError> {
    let journal_path = journal_path(path);
    let file = match fs::File::open(&journal_path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => return Err(OpenError::Io { action: "open", path: journal_path, source }),
    };
    let read = db.begin_read()?;
    if crate::journal::wal::has_pending(&read, &ReadOnlyFile(std::sync::Mutex::new(file)), &journal_path)? {
        return Err(OpenError::JournalPending { path: journal_path });
    }
    Ok(())
}

/// A file read through a redb backend without writing (or locking) it.
#[derive(Debug)]
struct ReadOnlyFile(std::sync::Mutex<fs::File>);

impl StorageBackend for ReadOnlyFile {
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
