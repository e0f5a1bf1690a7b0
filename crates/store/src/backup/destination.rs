//! What a backup checks and holds at its destination before it writes there:
//!
//! * **A store in use is never replaced.** [`hold`] takes every lock an open store holds on
//!   the file it replaces — the holder lock every runtime takes (`<file>.lock`, `lockfile.rs`),
//!   the store file's own lock (the `flock` redb's file backend takes, exclusive for a writer
//!   and shared for a reader, so either refuses ours) and the journal's (`<file>-journal`) —
//!   and keeps them until the copy has been renamed over the file. An open elsewhere fails on
//!   them meanwhile, and a handle that holds the file refuses the backup.
//! * **Pending journal records are never given up.** A store whose metadata says its journal
//!   may hold commits the file does not (it was not closed cleanly) is refused: replacing the
//!   file would leave those commits in a journal no store reads.
//! * **The disk is not filled.** [`check_space`] compares the destination file system's free
//!   space with the store file's size plus a margin before anything is written: a backup that
//!   fills the disk the store is on makes every writer of the store fail.
//! * **Temporary copies left by killed backups are removed**, and nothing else: a temporary
//!   copy is named `.<name>.backup-<pid>-<12 hex digits>.partial`, and [`remove_stale`]
//!   removes only regular files of exactly that form for the same destination whose process
//!   has ended and which nobody holds locked.

use std::fs;
use std::path::{Path, PathBuf};

use redb::TableHandle;

use super::error::{BackupError, io};
use crate::journal::files::{Access, ReadOnlyFile, journal_path, open_journal};
use crate::journal::meta::{History, JournalMeta};
use crate::lockfile;
use crate::{Error, OpenError};

/// The locks of a store file about to be replaced, held until dropped (after the rename).
#[derive(Debug)]
pub(super) struct Held {
    _holder: lockfile::HolderLock,
    _file: fs::File,
    journal: Option<fs::File>,
    /// Where the journal is (beside the resolved path).
    journal_at: PathBuf,
}

impl Held {
    /// Removes the replaced store's journal, while it is still locked and only if its name
    /// still leads to the file locked: it held nothing the store needed (a store whose records
    /// may be pending is refused), and left beside the copy it would be another store's journal
    /// to set aside at the copy's first open.
    pub(super) fn retire_journal(&self) {
        let Some(journal) = &self.journal else { return };
        let held = crate::journal::files::identity_of(journal);
        if held.is_some()
            && crate::journal::files::identity(&self.journal_at) == held
            && fs::remove_file(&self.journal_at).is_ok()
        {
            crate::journal::aside::sync_dir(&self.journal_at);
        }
    }
}

/// Takes the locks of the existing file at `target` (resolved: not a symbolic link), refusing a
/// store that is open anywhere or whose journal may hold records its file does not.
///
/// # Errors
/// [`BackupError::DestinationOpen`], [`BackupError::DestinationPending`], and I/O errors.
pub(super) fn hold(target: &Path) -> Result<Held, BackupError> {
    let resolved = fs::canonicalize(target).map_err(io("resolve", target))?;
    let holder = match lockfile::acquire(&resolved, lockfile::Access::Write) {
        Ok(holder) => holder,
        Err(OpenError::AlreadyOpen) => return Err(open(target, lockfile::lock_path(&resolved), None)),
        Err(error @ OpenError::HeldElsewhere { .. }) => {
            return Err(open(target, lockfile::lock_path(&resolved), Some(error)));
        }
        Err(error) => return Err(BackupError::Open(error)),
    };
    let file = open_no_wait(&resolved).map_err(io("open", target))?;
    let meta = file.metadata().map_err(io("inspect", target))?;
    if let Some(OpenError::NotAFile { kind, .. }) = OpenError::not_a_regular_file(target, &meta) {
        return Err(BackupError::NotAFile { path: target.to_path_buf(), kind });
    }
    match file.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => return Err(open(target, resolved, None)),
        Err(fs::TryLockError::Error(source)) => {
            return Err(BackupError::Io { action: "lock", path: target.to_path_buf(), source });
        }
    }
    let beside = journal_path(&resolved);
    let journal = match open_journal(&beside, Access::Write { create: false }) {
        Ok(journal) => journal,
        Err(OpenError::AlreadyOpen) => return Err(open(target, beside, None)),
        Err(error) => return Err(BackupError::Open(error)),
    };
    if let Some(pending) = pending(target, &file, &beside)? {
        return Err(pending);
    }
    Ok(Held { _holder: holder, _file: file, journal, journal_at: beside })
}

fn open(path: &Path, locked: PathBuf, source: Option<OpenError>) -> BackupError {
    BackupError::DestinationOpen { path: path.to_path_buf(), locked, source: source.map(Box::new) }
}

/// Opens `path` for reading without waiting (a FIFO swapped in is refused by the type check).
fn open_no_wait(path: &Path) -> std::io::Result<fs::File> {
    let mut options = fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    options.open(path)
}

/// The refusal of a store file (read through `file`, whose lock this process holds) whose
/// journal may hold records the file does not; `None` for a store closed cleanly, a store that
/// never journaled, and a file that is not an idemdb store.
fn pending(target: &Path, file: &fs::File, beside: &Path) -> Result<Option<BackupError>, BackupError> {
    let refuse = |journal: PathBuf, reason: &'static str| {
        Ok(Some(BackupError::DestinationPending { path: target.to_path_buf(), journal, reason }))
    };
    let clone = file.try_clone().map_err(io("open", target))?;
    let backend = ReadOnlyFile(std::sync::Mutex::new(clone));
    let db = match std::panic::catch_unwind(|| redb::Builder::new().open_read_only_with_backend(backend)) {
        Ok(Ok(db)) => db,
        Ok(Err(redb::DatabaseError::RepairAborted)) => {
            return refuse(beside.to_path_buf(), "it was not closed cleanly");
        }
        // Not a database (or damaged beyond reading): no journal can belong to it.
        Ok(Err(_)) | Err(_) => return Ok(None),
    };
    let read = redb::ReadableDatabase::begin_read(&db).map_err(Error::from)?;
    let has_meta = read.list_tables().map_err(Error::from)?.any(|table| table.name() == crate::tables::META.name());
    if !has_meta {
        return Ok(None);
    }
    let table = read.open_table(crate::tables::META).map_err(Error::from)?;
    let Ok(meta) = JournalMeta::read(&table) else {
        return refuse(beside.to_path_buf(), "its journal entries cannot be read");
    };
    match meta.history() {
        History::None => Ok(None),
        History::Pending => {
            refuse(meta.path.clone().unwrap_or_else(|| beside.to_path_buf()), "it was not closed cleanly")
        }
    }
}

/// The least free space a backup leaves: the larger of this and a tenth of the store file.
pub(super) const SPACE_MARGIN: u64 = 16 * 1024 * 1024;

/// Refuses a backup of a store file of `store_bytes` into `dir` whose file system has
/// `available` bytes free: it needs the file's size and a margin ([`SPACE_MARGIN`], or a
/// tenth of the file when that is more).
///
/// # Errors
/// [`BackupError::InsufficientSpace`] with both figures.
pub(super) fn check_space(dir: &Path, store_bytes: u64, available: u64) -> Result<(), BackupError> {
    let needed = store_bytes.saturating_add(SPACE_MARGIN.max(store_bytes / 10));
    if available < needed {
        return Err(BackupError::InsufficientSpace { path: dir.to_path_buf(), available, needed });
    }
    Ok(())
}

/// The bytes an unprivileged process may still write on the file system of `dir` (`None`
/// where the platform does not say).
pub(super) fn available_space(dir: &Path) -> std::io::Result<Option<u64>> {
    #[cfg(unix)]
    {
        let stat = rustix::fs::statvfs(dir).map_err(std::io::Error::from)?;
        Ok(Some(stat.f_bavail.saturating_mul(stat.f_frsize)))
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(None)
    }
}

/// `.<name>.backup-<pid>-<nonce>.partial` beside `target`: hidden, named for what it is, and
/// by the process that writes it, so that a later backup to `target` recognises its own.
pub(super) fn temporary_path(target: &Path) -> PathBuf {
    let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let seed = format!("{}:{:?}:{:?}", std::process::id(), std::time::Instant::now(), std::time::SystemTime::now());
    let nonce = blake3::hash(seed.as_bytes()).to_hex();
    target.with_file_name(format!(".{name}.backup-{}-{}.partial", std::process::id(), &nonce[..12]))
}

/// The process id in `file_name` when it is a temporary copy [`temporary_path`] made for
/// `target`.
fn temporary_of(target: &Path, file_name: &str) -> Option<u32> {
    let name = target.file_name()?.to_str()?;
    let rest = file_name.strip_prefix('.')?.strip_prefix(name)?.strip_prefix(".backup-")?.strip_suffix(".partial")?;
    let (pid, nonce) = rest.split_once('-')?;
    let digits = |s: &str, hex: bool| {
        !s.is_empty()
            && s.bytes()
                .all(|b| if hex { b.is_ascii_digit() || (b'a'..=b'f').contains(&b) } else { b.is_ascii_digit() })
    };
    if !digits(pid, false) || nonce.len() != 12 || !digits(nonce, true) || pid.starts_with('0') {
        return None;
    }
    pid.parse().ok()
}

/// Removes the temporary copies earlier backups to `target` left behind (they were killed):
/// files named as [`temporary_path`] names them for `target`, regular files, whose process is
/// gone and which no one holds locked. Returns the files removed; one that cannot be judged or
/// removed is left.
pub(super) fn remove_stale(target: &Path) -> Vec<PathBuf> {
    let dir = match target.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let Ok(entries) = fs::read_dir(dir) else { return Vec::new() };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|name| temporary_of(target, name)) else { continue };
        if pid == std::process::id() || process_exists(pid) {
            continue;
        }
        let path = entry.path();
        if remove_if_unheld(&path) {
            removed.push(path);
        }
    }
    removed.sort();
    removed
}

/// Removes `path` if it is a regular file (not a link) that nobody holds locked and that is
/// still the file inspected when it is removed.
fn remove_if_unheld(path: &Path) -> bool {
    let Ok(before) = fs::symlink_metadata(path) else { return false };
    if !before.file_type().is_file() {
        return false;
    }
    let Ok(file) = open_no_wait(path) else { return false };
    if file.try_lock().is_err() {
        return false;
    }
    let (Ok(opened), Ok(now)) = (file.metadata(), fs::symlink_metadata(path)) else { return false };
    if !same_identity(&opened, &now) || !same_identity(&before, &now) {
        return false;
    }
    fs::remove_file(path).is_ok()
}

#[cfg(unix)]
fn same_identity(a: &fs::Metadata, b: &fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    (a.dev(), a.ino()) == (b.dev(), b.ino())
}

#[cfg(not(unix))]
fn same_identity(_a: &fs::Metadata, _b: &fs::Metadata) -> bool {
    false
}

/// Whether a process with id `pid` exists (one that is not ours to signal included). Where the
/// platform cannot tell, it is taken to exist: nothing is removed.
fn process_exists(pid: u32) -> bool {
    #[cfg(unix)]
    {
        let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) else { return true };
        !matches!(rustix::process::test_kill_process(pid), Err(rustix::io::Errno::SRCH))
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each lock an open store may hold on a file refuses its replacement on its own: a redb
    /// handle without the holder lock file (a store file opened by redb itself, or by an
    /// older version), a journal held by its store, a holder lock file of another runtime.
    #[cfg(unix)]
    #[test]
    fn each_lock_of_an_open_store_refuses_its_replacement() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("s.idemdb");
        drop(crate::Store::open(&path).expect("create"));
        let resolved = fs::canonicalize(&path).expect("resolve");

        let raw = redb::Database::create(&path).expect("redb holds the file");
        match hold(&path) {
            Err(BackupError::DestinationOpen { locked, .. }) => assert_eq!(locked, resolved),
            other => panic!("{other:?}"),
        }
        drop(raw);
        let read_only = redb::Builder::new().open_read_only(&path).expect("a reader");
        assert!(matches!(hold(&path), Err(BackupError::DestinationOpen { .. })), "a reader's shared lock");
        drop(read_only);

        let journal = fs::File::open(journal_path(&resolved)).expect("the journal");
        journal.try_lock().expect("held as its store holds it");
        match hold(&path) {
            Err(BackupError::DestinationOpen { locked, .. }) => assert_eq!(locked, journal_path(&resolved)),
            other => panic!("{other:?}"),
        }
        drop(journal);

        let sleeper = std::process::Command::new("sleep").arg("60").spawn().expect("sleep");
        let lock = lockfile::lock_path(&path);
        fs::write(&lock, lockfile::content(sleeper.id(), "node", lockfile::Access::Write, None, "00"))
            .expect("a Node holder");
        let refused = hold(&path);
        let mut sleeper = sleeper;
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        match refused {
            Err(error @ BackupError::DestinationOpen { .. }) => {
                let chain = format!(
                    "{error}: {}",
                    std::error::Error::source(&error).map(ToString::to_string).unwrap_or_default()
                );
                assert!(chain.contains("node") && chain.contains(&sleeper.id().to_string()), "{chain}");
            }
            other => panic!("{other:?}"),
        }
        fs::remove_file(&lock).expect("remove");

        let held = hold(&path).expect("nobody holds it now");
        assert!(crate::Store::open(&path).is_err(), "an open waits for the replacement");
        drop(held);
        drop(crate::Store::open(&path).expect("released"));
    }

    #[test]
    fn only_names_made_for_the_same_destination_are_temporary_copies() {
        let target = Path::new("/backups/b.idemdb");
        assert_eq!(temporary_of(target, ".b.idemdb.backup-4242-0123456789ab.partial"), Some(4242));
        let made = temporary_path(target);
        let name = made.file_name().and_then(|n| n.to_str()).expect("name");
        assert_eq!(temporary_of(target, name), Some(std::process::id()), "{name}");
        for foreign in [
            "b.idemdb.backup-4242-0123456789ab.partial",
            ".c.idemdb.backup-4242-0123456789ab.partial",
            ".b.idemdb.backup-0123456789ab.partial",
            ".b.idemdb.backup-4242-0123456789AB.partial",
            ".b.idemdb.backup-4242-0123456789a.partial",
            ".b.idemdb.backup-04242-0123456789ab.partial",
            ".b.idemdb.backup--0123456789ab.partial",
            ".b.idemdb.backup-4242-0123456789ab.partial.keep",
            ".b.idemdb.backup-notes.partial",
        ] {
            assert_eq!(temporary_of(target, foreign), None, "{foreign}");
        }
    }

    #[test]
    fn the_space_check_needs_the_store_and_a_margin_and_names_both_figures() {
        let dir = Path::new("/backups");
        assert!(check_space(dir, 1_000, 1_000 + SPACE_MARGIN).is_ok());
        let refused = check_space(dir, 1_000, 1_000 + SPACE_MARGIN - 1).expect_err("one byte short");
        match &refused {
            BackupError::InsufficientSpace { available, needed, .. } => {
                assert_eq!((*available, *needed), (1_000 + SPACE_MARGIN - 1, 1_000 + SPACE_MARGIN));
            }
            other => panic!("{other:?}"),
        }
        let text = refused.to_string();
        assert!(text.contains(&(1_000 + SPACE_MARGIN - 1).to_string()), "{text}");
        assert!(text.contains(&(1_000 + SPACE_MARGIN).to_string()), "{text}");
        // A large store: a tenth of it.
        let big = 10 * 1024 * 1024 * 1024u64;
        assert!(check_space(dir, big, big + big / 10 - 1).is_err());
        assert!(check_space(dir, big, big + big / 10).is_ok());
        assert_eq!(refused.code(), idemdb_core::ErrorCode::Storage);
    }
}
