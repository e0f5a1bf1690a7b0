//! What the store file says about its journal, in the metadata table (`idemdb_meta`):
//!
//! | entry                | bytes                                   | meaning                                   |
//! |----------------------|-----------------------------------------|-------------------------------------------|
//! | `journal_checkpoint` | `u64` BE                                | last record sequence number applied       |
//! | `journal_id`         | 16 random bytes                         | the journal this file belongs with        |
//! | `journal_generation` | epoch `u64` BE · salt `u64` BE          | the generation whose records are current  |
//! | `journal_state`      | `u8`: 0 closed cleanly, 1 records may be pending | the clean-close marker           |
//! | `journal_path`       | the journal's resolved path (its bytes on Unix; UTF-8 elsewhere) | where the journal was when last opened |
//! | `journal_store_file` | device `u64` BE · inode `u64` BE        | which file the store was when last opened |
//! | `journal_file`       | device `u64` BE · inode `u64` BE        | which file the journal was then            |
//!
//! The metadata is the authority: a journal's header and records are taken only when they
//! carry this id and this generation (`docs/design.md`, "The journal").

use std::path::PathBuf;

use redb::{ReadableTable, Table};

use super::format::Generation;
use crate::tables::META_JOURNAL_CHECKPOINT;

pub(crate) const META_JOURNAL_ID: &str = "journal_id";
pub(crate) const META_JOURNAL_GENERATION: &str = "journal_generation";
pub(crate) const META_JOURNAL_STATE: &str = "journal_state";
pub(crate) const META_JOURNAL_PATH: &str = "journal_path";
pub(crate) const META_JOURNAL_STORE_FILE: &str = "journal_store_file";
pub(crate) const META_JOURNAL_FILE: &str = "journal_file";

const STATE_CLOSED: u8 = 0;
const STATE_OPEN: u8 = 1;

/// The journal entries of a store's metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct JournalMeta {
    /// The last sequence number a checkpoint applied (`None`: the store never journaled).
    pub(crate) checkpoint: Option<u64>,
    /// The journal's id (written with the first checkpoint: `None` only while the store never
    /// journaled).
    pub(crate) id: Option<[u8; 16]>,
    /// The current generation.
    pub(crate) generation: Generation,
    /// Whether the journal may hold records the file does not (set before the first append
    /// after an open, cleared by a clean close).
    pub(crate) open: bool,
    /// Where the journal was when the store was last opened for writing.
    pub(crate) path: Option<PathBuf>,
    /// Which file (device and inode) the store was then: the recorded journal path is looked at
    /// only by the same file (renamed, or through another hard link), never by a copy.
    pub(crate) file: Option<[u8; 16]>,
    /// Which file (device and inode) the journal was then: a journal found with this store's id
    /// but another identity is a copy, made earlier, which may lack the last records.
    pub(crate) journal_file: Option<[u8; 16]>,
}

/// How a store's journal history reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum History {
    /// The store never journaled, or was closed cleanly, or is a copy: any journal file beside
    /// it is re-created.
    None,
    /// A format-2 journal that may hold records.
    Pending,
}

impl JournalMeta {
    /// Reads the entries from the metadata table.
    pub(crate) fn read(meta: &impl ReadableTable<&'static str, &'static [u8]>) -> Result<JournalMeta, MetaFault> {
        let get = |name: &str| -> Result<Option<Vec<u8>>, MetaFault> {
            Ok(meta.get(name).map_err(MetaFault::Storage)?.map(|guard| guard.value().to_vec()))
        };
        let checkpoint = match get(META_JOURNAL_CHECKPOINT)? {
            None => None,
            Some(bytes) => Some(u64::from_be_bytes(fixed(&bytes, "journal checkpoint")?)),
        };
        let id = get(META_JOURNAL_ID)?.map(|bytes| fixed::<16>(&bytes, "journal id")).transpose()?;
        if checkpoint.is_some() && id.is_none() {
            // Every checkpoint this format writes names its journal: without one the entries
            // are a development build's (journal format 1), not this format's.
            return Err(MetaFault::Malformed("journal id"));
        }
        let generation = match get(META_JOURNAL_GENERATION)? {
            None => Generation::default(),
            Some(bytes) => Generation::from_bytes(fixed(&bytes, "journal generation")?),
        };
        let open = match get(META_JOURNAL_STATE)?.as_deref() {
            None => id.is_some(),
            Some([STATE_CLOSED]) => false,
            Some([STATE_OPEN]) => true,
            Some(_) => return Err(MetaFault::Malformed("journal state")),
        };
        let path = get(META_JOURNAL_PATH)?.map(|bytes| path_from_bytes(&bytes));
        let file = get(META_JOURNAL_STORE_FILE)?.map(|bytes| fixed::<16>(&bytes, "journal store file")).transpose()?;
        let journal_file = get(META_JOURNAL_FILE)?.map(|bytes| fixed::<16>(&bytes, "journal file")).transpose()?;
        Ok(JournalMeta { checkpoint, id, generation, open, path, file, journal_file })
    }

    /// What the entries say about records that may be waiting in a journal.
    pub(crate) fn history(&self) -> History {
        match (self.checkpoint, self.id) {
            (Some(_), Some(_)) if self.open => History::Pending,
            _ => History::None,
        }
    }

    /// Writes the entries of a journal opened (`open`) or closed cleanly.
    pub(crate) fn write(&self, meta: &mut Table<&'static str, &'static [u8]>) -> Result<(), redb::StorageError> {
        meta.insert(META_JOURNAL_CHECKPOINT, self.checkpoint.unwrap_or(0).to_be_bytes().as_slice())?;
        if let Some(id) = &self.id {
            meta.insert(META_JOURNAL_ID, id.as_slice())?;
        }
        meta.insert(META_JOURNAL_GENERATION, self.generation.to_bytes().as_slice())?;
        meta.insert(META_JOURNAL_STATE, [if self.open { STATE_OPEN } else { STATE_CLOSED }].as_slice())?;
        match &self.path {
            Some(path) => meta.insert(META_JOURNAL_PATH, path_bytes(path).as_ref())?,
            None => meta.remove(META_JOURNAL_PATH)?,
        };
        match &self.file {
            Some(file) => meta.insert(META_JOURNAL_STORE_FILE, file.as_slice())?,
            None => meta.remove(META_JOURNAL_STORE_FILE)?,
        };
        match &self.journal_file {
            Some(file) => meta.insert(META_JOURNAL_FILE, file.as_slice())?,
            None => meta.remove(META_JOURNAL_FILE)?,
        };
        Ok(())
    }
}

/// A checkpoint's entries: the last applied sequence number and the generation that starts.
pub(crate) fn write_checkpoint(
    meta: &mut Table<&'static str, &'static [u8]>,
    applied: u64,
    generation: Generation,
) -> Result<(), redb::StorageError> {
    meta.insert(META_JOURNAL_CHECKPOINT, applied.to_be_bytes().as_slice())?;
    meta.insert(META_JOURNAL_GENERATION, generation.to_bytes().as_slice())?;
    Ok(())
}

/// A clean close's entry: the journal holds nothing the file does not.
pub(crate) fn write_closed(meta: &mut Table<&'static str, &'static [u8]>) -> Result<(), redb::StorageError> {
    meta.insert(META_JOURNAL_STATE, [STATE_CLOSED].as_slice())?;
    Ok(())
}

/// Removes every journal entry: a copy of a store (a rebuild, a backup) starts with no
/// journal history, so a journal file beside it is re-created, never replayed.
pub(crate) fn forget(meta: &mut Table<&'static str, &'static [u8]>) -> Result<(), redb::StorageError> {
    for name in [
        META_JOURNAL_CHECKPOINT,
        META_JOURNAL_ID,
        META_JOURNAL_GENERATION,
        META_JOURNAL_STATE,
        META_JOURNAL_PATH,
        META_JOURNAL_STORE_FILE,
        META_JOURNAL_FILE,
    ] {
        meta.remove(name)?;
    }
    Ok(())
}

/// A path as stored: its exact bytes on Unix (a directory whose name is not UTF-8 is found
/// again), UTF-8 elsewhere.
fn path_bytes(path: &std::path::Path) -> std::borrow::Cow<'_, [u8]> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        std::borrow::Cow::Borrowed(path.as_os_str().as_bytes())
    }
    #[cfg(not(unix))]
    {
        match path.to_string_lossy() {
            std::borrow::Cow::Borrowed(text) => std::borrow::Cow::Borrowed(text.as_bytes()),
            std::borrow::Cow::Owned(text) => std::borrow::Cow::Owned(text.into_bytes()),
        }
    }
}

/// The inverse of [`path_bytes`].
fn path_from_bytes(bytes: &[u8]) -> PathBuf {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        PathBuf::from(std::ffi::OsStr::from_bytes(bytes))
    }
    #[cfg(not(unix))]
    {
        PathBuf::from(String::from_utf8_lossy(bytes).into_owned())
    }
}

/// A journal entry could not be read.
#[derive(Debug)]
pub(crate) enum MetaFault {
    Storage(redb::StorageError),
    Malformed(&'static str),
}

fn fixed<const N: usize>(bytes: &[u8], what: &'static str) -> Result<[u8; N], MetaFault> {
    <[u8; N]>::try_from(bytes).map_err(|_| MetaFault::Malformed(what))
}
