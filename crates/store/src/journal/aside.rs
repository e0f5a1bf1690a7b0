//! Journal files that are kept, never rewritten: a journal that an open cannot use (another
//! store's, a damaged one, one whose commits an operator chose to give up) is renamed aside
//! under a name that says whose it is, so that whatever it holds can still be read back.
//!
//! The name is `<journal file name>.set-aside-<journal id, 32 hex digits>-<unix seconds>`
//! (`unknown` in place of the id when its header names none), in the journal's directory. A
//! store whose records may be pending looks for set-aside files carrying its journal id beside
//! its journal and beside the journal path its metadata recorded, so a journal moved aside by
//! a new store at the old name is found again by the store it belongs to.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use redb::StorageBackend;

use super::format::{self, BLOCK, RECORD_HEADER, Seal, Stop};
use super::{Header, JournalError};

/// Why a journal file was set aside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SetAsideReason {
    /// It is not this store's journal (another store's, a copy's, or bytes that are not a
    /// journal at all): a new journal was started beside the store instead of writing over it.
    NotThisStores,
    /// It is this store's journal, and the open gave up commits it holds (a damaged or cut
    /// journal opened with `discard_lost_journal`), or an earlier copy of it: the file keeps
    /// them.
    GivenUp,
    /// The name is a symbolic link, or the file has other hard links: the file is another
    /// name's too and is never written through this one (only the name was moved aside).
    Shared,
}

impl std::fmt::Display for SetAsideReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SetAsideReason::NotThisStores => "not this store's journal",
            SetAsideReason::GivenUp => "holds commits this open gave up, or an earlier copy of them",
            SetAsideReason::Shared => "a link to a file another name shares",
        })
    }
}

/// One journal file moved aside by an open.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SetAside {
    /// Where the journal was.
    pub from: PathBuf,
    /// Where it is now.
    pub to: PathBuf,
    /// Why.
    pub reason: SetAsideReason,
}

/// The journal id as it appears in a set-aside name.
pub(crate) fn id_hex(id: &[u8; 16]) -> String {
    id.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn name_of(path: &Path) -> Option<String> {
    path.file_name().map(|name| name.to_string_lossy().into_owned())
}

/// Renames the journal at `path` aside (its owner's id in the name, `None`: unknown) and makes
/// the rename durable. The caller holds the file's lock. Returns the new path.
///
/// # Errors
/// I/O errors (nothing was renamed then).
pub(crate) fn set_aside(path: &Path, owner: Option<&[u8; 16]>, now_ms: u64) -> io::Result<PathBuf> {
    let name = name_of(path).ok_or_else(|| io::Error::other("the journal path has no file name"))?;
    let owner = owner.map_or_else(|| "unknown".to_string(), id_hex);
    let base = format!("{name}.set-aside-{owner}-{}", now_ms / 1000);
    let mut target = path.with_file_name(&base);
    let mut n = 1;
    while fs::symlink_metadata(&target).is_ok() {
        n += 1;
        target = path.with_file_name(format!("{base}-{n}"));
    }
    fs::rename(path, &target)?;
    sync_dir(path);
    Ok(target)
}

/// Makes a rename or an unlink in `path`'s directory durable (best effort: not every
/// platform can sync a directory).
pub(crate) fn sync_dir(path: &Path) {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    if let Ok(dir) = fs::File::open(dir) {
        let _ = dir.sync_all();
    }
}

/// Whether the journal name `path` is a symbolic link, or its file has other hard links.
pub(crate) fn is_shared(path: &Path) -> bool {
    let Ok(meta) = fs::symlink_metadata(path) else { return false };
    if meta.file_type().is_symlink() {
        return true;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        meta.nlink() > 1
    }
    #[cfg(not(unix))]
    {
        false
    }
}

/// Set-aside files of the journal `id` beside `journal` (named after it), newest first.
pub(crate) fn candidates(journal: &Path, id: &[u8; 16]) -> Vec<PathBuf> {
    let Some(name) = name_of(journal) else { return Vec::new() };
    let prefix = format!("{name}.set-aside-{}-", id_hex(id));
    let dir = match journal.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let Ok(entries) = fs::read_dir(&dir) else { return Vec::new() };
    let mut found: Vec<(u64, u64, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let file_name = entry.file_name().to_string_lossy().into_owned();
            let rest = file_name.strip_prefix(&prefix)?;
            let mut parts = rest.splitn(2, '-');
            let secs = parts.next()?.parse::<u64>().ok()?;
            let n = parts.next().map_or(Some(1), |n| n.parse::<u64>().ok())?;
            Some((secs, n, entry.path()))
        })
        .collect();
    found.sort_by_key(|(secs, n, _)| std::cmp::Reverse((*secs, *n)));
    found.into_iter().map(|(_, _, path)| path).collect()
}

/// Whether a journal file holds nothing at all: empty, or zeros from end to end (a journal
/// whose creation was cut short before its header was written).
pub(crate) fn holds_nothing(file: &impl StorageBackend) -> Result<bool, JournalError> {
    let len = file.len()?;
    let mut block = vec![0u8; 1 << 20];
    let mut at = 0;
    while at < len {
        let take = usize::try_from((len - at).min(block.len() as u64)).unwrap_or(block.len());
        file.read(at, &mut block[..take])?;
        if block[..take].iter().any(|byte| *byte != 0) {
            return Ok(false);
        }
        at += take as u64;
    }
    Ok(true)
}

/// The journal ids a header names (for a set-aside name: the newest valid one).
pub(crate) fn owner(header: &Header) -> Option<[u8; 16]> {
    header
        .slots
        .iter()
        .filter_map(|slot| match slot {
            format::Slot::Current(info) => Some((info.generation.epoch, info.id)),
            _ => None,
        })
        .max_by_key(|(epoch, _)| *epoch)
        .map(|(_, id)| id)
}

/// Intact records sealed with `seal` found after the place a scan stopped (`stopped_at`),
/// with sequence numbers above `after`: records that exist but cannot be applied, because the
/// one before them is damaged. A crash never leaves these (each record is written only after
/// the one before it is durable), so finding any means damage in the middle of the journal.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Beyond {
    /// How many.
    pub(crate) count: u64,
    /// The lowest and highest sequence number among them.
    pub(crate) first: u64,
    pub(crate) last: u64,
}

/// Looks for [`Beyond`] records, block by block, below `limit`.
pub(crate) fn intact_beyond(
    backend: &impl StorageBackend,
    seal: Seal,
    stopped_at: u64,
    limit: u64,
    after: u64,
) -> Result<Beyond, JournalError> {
    let mut found = Beyond::default();
    let mut at = stopped_at.saturating_add(BLOCK as u64);
    let mut first = vec![0u8; RECORD_HEADER];
    while limit.saturating_sub(at) >= BLOCK as u64 {
        backend.read(at, &mut first)?;
        let left = usize::try_from(limit - at).unwrap_or(usize::MAX).saturating_sub(RECORD_HEADER);
        let Some((len, seq)) = format::peek(&first, left) else {
            at += BLOCK as u64;
            continue;
        };
        if seq <= after {
            at += BLOCK as u64;
            continue;
        }
        let size = format::blocks_for(len) * BLOCK;
        if size as u64 > limit - at {
            at += BLOCK as u64;
            continue;
        }
        let mut record = vec![0u8; size];
        backend.read(at, &mut record)?;
        match format::decode_record(&record, seal, seq) {
            Ok(_) | Err(Stop::Malformed) => {
                if found.count == 0 {
                    found.first = seq;
                }
                found.count += 1;
                found.first = found.first.min(seq);
                found.last = found.last.max(seq);
                at += record.len() as u64;
            }
            Err(_) => at += BLOCK as u64,
        }
    }
    Ok(found)
}
