//! Live backup: a complete, verified, closed copy of a store, written while writers carry on.
//!
//! A byte copy of a store file while a writer runs is not a backup: the file lags the journal
//! (`<path>-journal`), which holds every commit since the last checkpoint, and copying both
//! files one after the other races the next checkpoint. [`Store::backup_to`] copies from one
//! read snapshot of the open store instead. Commits are visible to readers once they are
//! durable (journaled or not), so a snapshot taken after the call starts holds every commit
//! acknowledged before it.
//!
//! The copy goes to a temporary file beside the destination
//! (`.<name>.backup-<pid>-<nonce>.partial`), is synced, opened alone and verified
//! ([`Store::verify`] plus the record and index counts of the snapshot), then moved into place
//! and the directory synced. A crash leaves at most that temporary file: before the copy's last
//! commit it holds no store at all (the metadata table, which makes a file an idemdb store, is
//! written only by that commit, so a copy cut short opens as "not an idemdb store" whatever
//! redb recovered of its earlier, unflushed commits); after it, a complete but unchecked copy.
//! Either way the destination is untouched, and the next backup to the same destination
//! removes the temporary file once its process is gone (`backup/destination.rs`).
//!
//! What a backup may do at its destination, and what it refuses, is in `backup/destination.rs`:
//! a replaced file is never a store in use nor one whose journal may hold records the file
//! lacks, and the destination's file system must have room for the copy and a margin.
//!
//! The name says what the call writes to: a new file at a path (`rebuild_into` also copies,
//! for compaction, and "snapshot" already names the store's cached read snapshot and the
//! in-memory images of the WebAssembly build).

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use redb::{Database, ReadTransaction, ReadableTableMetadata, TableDefinition, TableHandle};

use crate::engine::{Config, Engine};
use crate::meta::Initialiser;
use crate::rebuild::{CopyTable, RowsCopy, store_tables};
use crate::tables::{EXPIRY, RECORDS};
use crate::{DEFAULT_AUDIT_RETENTION, Durability, Error, OpenError, Store, VerifyReport};

mod destination;
mod error;

pub use error::BackupError;
use error::io;

/// How far a backup is: entries copied out of the snapshot's total.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackupProgress {
    /// Entries copied so far.
    pub copied: u64,
    /// Entries in the snapshot (every table the backup copies).
    pub total: u64,
}

/// Options of [`Store::backup_with`].
#[must_use]
#[derive(Default)]
pub struct BackupOptions<'a> {
    overwrite: bool,
    leave_out_unknown_tables: bool,
    tables: Vec<Box<dyn CopyTable + 'a>>,
    progress: Option<Box<dyn FnMut(BackupProgress) + 'a>>,
}

impl std::fmt::Debug for BackupOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackupOptions")
            .field("overwrite", &self.overwrite)
            .field("leave_out_unknown_tables", &self.leave_out_unknown_tables)
            .field("tables", &self.tables.iter().map(|t| t.table_name().to_string()).collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl<'a> BackupOptions<'a> {
    /// The defaults: never replace an existing file, refuse a store with tables the backup
    /// does not know, no progress callback.
    pub fn new() -> Self {
        Self::default()
    }

    /// Replaces an existing destination file (atomically: the old file stays whole until the
    /// verified copy takes its place). A destination that is a symbolic link is followed: the
    /// file it names is replaced and the link kept.
    ///
    /// A store that is open anywhere is never replaced: the backup takes the locks an open
    /// store holds on the file it replaces (the holder lock `<file>.lock`, the store file's
    /// lock and its journal's) before it starts and keeps them until the copy has taken the
    /// file's place, and refuses the backup when any is held
    /// ([`BackupError::DestinationOpen`]). A store whose journal may hold commits its file does
    /// not (it was not closed cleanly) is refused too ([`BackupError::DestinationPending`]).
    pub fn overwrite(mut self, overwrite: bool) -> Self {
        self.overwrite = overwrite;
        self
    }

    /// Copies an application table of the store's database too (a table the application writes
    /// through [`Txn::tables_checkpointing`](crate::Txn::tables_checkpointing) or
    /// [`Txn::table`](crate::Txn::table); row tables are copied unnamed): the store knows only its own tables' types,
    /// and redb copies a table only by its type.
    pub fn table<K: redb::Key + 'static, V: redb::Value + 'static>(
        mut self,
        table: TableDefinition<'static, K, V>,
    ) -> Self {
        self.tables.push(Box::new(table));
        self
    }

    /// Leaves out tables that are neither the store's nor named with [`BackupOptions::table`]
    /// instead of refusing the backup ([`BackupError::UnknownTables`]); the report names them
    /// ([`BackupReport::left_out`]).
    pub fn leave_out_unknown_tables(mut self, leave_out: bool) -> Self {
        self.leave_out_unknown_tables = leave_out;
        self
    }

    /// Calls `progress` after each chunk of copied entries (10,000 at most).
    pub fn progress(mut self, progress: impl FnMut(BackupProgress) + 'a) -> Self {
        self.progress = Some(Box::new(progress));
        self
    }

    /// The refusals of a backup to `dest` that `dest` alone decides, without a store: a file
    /// there without [`BackupOptions::overwrite`] ([`BackupError::DestinationExists`]), and,
    /// with it, a store there that is open ([`BackupError::DestinationOpen`]) or whose journal
    /// may hold commits its file does not ([`BackupError::DestinationPending`]). For a caller
    /// that opens the source store only to back it up (the CLI): opening a store left by a
    /// crash recovers it, a write, and a refused backup should have changed nothing. The
    /// backup checks again (and holds the destination) when it runs.
    ///
    /// # Errors
    /// The refusals above; I/O errors reading `dest`.
    pub fn check_destination(&self, dest: impl AsRef<Path>) -> Result<(), BackupError> {
        let dest = dest.as_ref();
        if fs::symlink_metadata(dest).is_err() {
            return Ok(());
        }
        if !self.overwrite {
            return Err(BackupError::DestinationExists(dest.to_path_buf()));
        }
        // A dangling symlink has no file to refuse: the backup decides.
        let Ok(target) = fs::canonicalize(dest) else { return Ok(()) };
        if !fs::metadata(&target).is_ok_and(|meta| meta.is_file()) {
            return Ok(());
        }
        destination::hold(&target).map(drop).map_err(|error| named(error, dest))
    }
}

/// What a backup wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackupReport {
    /// The backup file (a symbolic link at the destination resolved).
    pub path: PathBuf,
    /// Records in the backup (the snapshot's, checked in the copy).
    pub records: u64,
    /// Expiry index entries in the backup (the snapshot's, checked in the copy).
    pub index_entries: u64,
    /// Audit events in the backup.
    pub audit_events: u64,
    /// Entries copied over all tables.
    pub entries: u64,
    /// Size of the backup file in bytes.
    pub bytes: u64,
    /// Size of the store file when the backup started (`None` for a store without a file).
    pub source_bytes: Option<u64>,
    /// How long taking the snapshot took: writers wait at most this long (for one commit).
    pub snapshot_took: Duration,
    /// How long the whole backup took (copy, sync, verification, rename).
    pub took: Duration,
    /// Whether an existing file was replaced ([`BackupOptions::overwrite`]).
    pub replaced: bool,
    /// Tables left out ([`BackupOptions::leave_out_unknown_tables`]).
    pub left_out: Vec<String>,
    /// Temporary copies that earlier backups to the same destination left behind (their
    /// process was killed), removed by this one.
    pub removed_stale: Vec<PathBuf>,
}

impl Store {
    /// Writes a backup of this store to a new file at `dest` while writers carry on:
    /// [`Store::backup_with`] with the default [`BackupOptions`].
    ///
    /// ```
    /// # use idemdb::{Fingerprint, IdempotencyKey, Reservation, Reserve, Scope, Store};
    /// let dir = tempfile::tempdir()?;
    /// let store = Store::open(dir.path().join("live.idemdb"))?;
    /// let scope = Scope::new("acme", "pay")?;
    /// if let Reservation::Acquired(lease) =
    ///     store.reserve(Reserve::new(&scope, &IdempotencyKey::new("k-1")?, &Fingerprint::from_bytes([1; 32])))?
    /// {
    ///     store.complete(&lease, b"done".to_vec())?;
    /// }
    /// // The store stays open and writable; the backup is a closed store of its own.
    /// let report = store.backup_to(dir.path().join("backup.idemdb"))?;
    /// assert_eq!(report.records, 1);
    /// let backup = Store::open(&report.path)?;
    /// assert_eq!(backup.stats()?.records, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`Store::backup_with`].
    pub fn backup_to(&self, dest: impl AsRef<Path>) -> Result<BackupReport, BackupError> {
        self.backup_with(dest, BackupOptions::new())
    }

    /// Writes a backup of this store to `dest`: a complete, compact, closed store file that
    /// opens alone (no journal beside it), holding every commit acknowledged before the call
    /// started, while other threads and handles keep reading and writing.
    ///
    /// Writers wait only while the snapshot is taken: one durable commit that writes the
    /// buffered audit events (none on a read-only handle), then a redb read transaction, which
    /// blocks nobody. While the copy runs, redb keeps the snapshot's pages, so the store file
    /// may grow by what is written meanwhile. The copy is written beside `dest`, synced, opened
    /// on its own and checked ([`Store::verify`], and the snapshot's record and index counts
    /// found in it), then moved to `dest` and the directory synced.
    ///
    /// # Errors
    /// [`BackupError::DestinationExists`] (unless [`BackupOptions::overwrite`]),
    /// [`BackupError::SameFile`], [`BackupError::NoDirectory`], [`BackupError::NotAFile`],
    /// [`BackupError::UnknownTables`] for application tables not named, [`BackupError::NoSpace`],
    /// [`BackupError::Unverified`] and [`BackupError::Mismatch`] when the copy does not check
    /// out; I/O and storage errors. On every error the temporary copy is removed.
    pub fn backup_with(&self, dest: impl AsRef<Path>, options: BackupOptions<'_>) -> Result<BackupReport, BackupError> {
        self.backup_on(
            dest.as_ref(),
            options,
            Hooks {
                backend: |file| Ok(redb::backends::FileBackend::new(file).map_err(Error::from)?),
                available: destination::available_space,
            },
        )
    }

    /// [`Store::backup_with`] writing the copy through `hooks.backend` and reading the free
    /// space through `hooks.available` (tests put a full disk there).
    pub(crate) fn backup_on<B: redb::StorageBackend>(
        &self,
        dest: &Path,
        mut options: BackupOptions<'_>,
        hooks: Hooks<impl FnOnce(fs::File) -> Result<B, BackupError>, impl Fn(&Path) -> std::io::Result<Option<u64>>>,
    ) -> Result<BackupReport, BackupError> {
        let started = Instant::now();
        let target = self.destination(dest, options.overwrite)?;
        // A file to replace: its locks are taken now and held until the copy is in its place.
        let mut held = match fs::symlink_metadata(&target) {
            Ok(_) if options.overwrite => Some(destination::hold(&target).map_err(|e| named(e, dest))?),
            _ => None,
        };
        let source_bytes = self.path().and_then(|p| fs::metadata(p).ok()).map(|m| m.len());
        let directory = parent_of(&target);
        if let Some(store_bytes) = source_bytes {
            let available = (hooks.available)(directory).map_err(io("read the free space of", directory))?;
            if let Some(available) = available {
                destination::check_space(directory, store_bytes, available)?;
            }
        }
        let removed_stale = destination::remove_stale(&target);
        let read = self.copy_snapshot()?;
        let snapshot_took = started.elapsed();
        let (expected, total, left_out, rows) = self.survey(&read, &options)?;
        let temporary = destination::temporary_path(&target);
        let mut progress = options.progress.take();
        let written = (|| {
            let file = fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&temporary)
                .map_err(io("create", &temporary))?;
            let copy = Database::builder().create_with_backend((hooks.backend)(file)?).map_err(Error::from)?;
            let extra: Vec<&dyn CopyTable> = options
                .tables
                .iter()
                .map(|t| &**t as &dyn CopyTable)
                .chain(rows.iter().map(|row| row as &dyn CopyTable))
                .collect();
            let mut tick = |copied| {
                if let Some(progress) = progress.as_mut() {
                    progress(BackupProgress { copied, total });
                }
            };
            let (copy, report) = self.copy_from(&read, copy, &extra, &mut tick)?;
            drop(copy);
            let verified = self.check_copy(&temporary, expected)?;
            fs::File::open(&temporary).and_then(|f| f.sync_all()).map_err(io("sync", &temporary))?;
            Ok((report, verified))
        })();
        drop(read);
        let (report, verified) = match written {
            Ok(written) => written,
            Err(error) => {
                let _ = fs::remove_file(&temporary);
                return Err(no_space(error, &temporary));
            }
        };
        let replaced = match place(&temporary, &target, options.overwrite, &mut held) {
            Ok(replaced) => replaced,
            Err(error) => {
                let _ = fs::remove_file(&temporary);
                return Err(named(no_space(error, &temporary), dest));
            }
        };
        let synced = crate::builder::sync_parent(&target).map_err(io("sync the directory of", &target));
        // The replaced store's journal held nothing it needed (a store with pending records is
        // refused): it goes with the store, so the copy does not find it beside its name. Then
        // the replaced file's locks go, once its name is the copy's.
        if replaced && let Some(held) = &held {
            held.retire_journal();
        }
        drop(held);
        synced?;
        let bytes = fs::metadata(&target).map_err(io("read the size of", &target))?.len();
        Ok(BackupReport {
            path: target,
            records: verified.records,
            index_entries: verified.index_entries,
            audit_events: verified.audit_events,
            entries: report.entries,
            bytes,
            source_bytes,
            snapshot_took,
            took: started.elapsed(),
            replaced,
            left_out,
            removed_stale,
        })
    }

    /// Resolves `dest` (a symbolic link to its file) and refuses what a backup must not write.
    fn destination(&self, dest: &Path, overwrite: bool) -> Result<PathBuf, BackupError> {
        let Some(name) = dest.file_name() else {
            return Err(BackupError::NotAFile { path: dest.to_path_buf(), kind: "a path without a file name" });
        };
        let own = self.own_files();
        refuse_own(&own, dest, dest)?;
        let target = match fs::symlink_metadata(dest) {
            Ok(meta) => {
                let target = if meta.file_type().is_symlink() {
                    fs::canonicalize(dest).map_err(io("follow", dest))?
                } else {
                    dest.to_path_buf()
                };
                // What it is first: a directory is no file that "exists already".
                let meta = fs::metadata(&target).map_err(io("inspect", &target))?;
                if let Some(OpenError::NotAFile { kind, .. }) = OpenError::not_a_regular_file(&target, &meta) {
                    return Err(BackupError::NotAFile { path: dest.to_path_buf(), kind });
                }
                if !overwrite {
                    return Err(BackupError::DestinationExists(dest.to_path_buf()));
                }
                target
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                let parent = parent_of(dest);
                match fs::metadata(parent) {
                    Ok(meta) if meta.is_dir() => {}
                    _ => return Err(BackupError::NoDirectory(parent.to_path_buf())),
                }
                fs::canonicalize(parent).map_err(io("resolve", parent))?.join(name)
            }
            Err(source) => return Err(BackupError::Io { action: "inspect", path: dest.to_path_buf(), source }),
        };
        // Once more on the resolved path: a link in the directory's path may lead to the store.
        refuse_own(&own, dest, &target)?;
        Ok(target)
    }

    /// This store's own files, which a backup never writes: the store file (its resolved path,
    /// and the path it was opened by), the journal beside the resolved path, and the journal
    /// where the store's metadata says it was last opened (a renamed store's).
    fn own_files(&self) -> Vec<(PathBuf, &'static str)> {
        let Some(path) = self.path() else { return Vec::new() };
        let mut own = vec![(path.to_path_buf(), "file")];
        let resolved = fs::canonicalize(path).ok();
        if let Some(resolved) = &resolved {
            own.push((resolved.clone(), "file"));
        }
        own.push((crate::journal::files::journal_path(resolved.as_deref().unwrap_or(path)), "journal"));
        let recorded = self.engine.db.begin_read().ok().and_then(|read| {
            let table = read.open_table(crate::tables::META).ok()?;
            crate::journal::meta::JournalMeta::read(&table).ok()?.path
        });
        if let Some(recorded) = recorded {
            own.push((recorded, "journal"));
        }
        own
    }

    /// The snapshot's record and index counts, its entries over the copied tables, the
    /// tables left out, and the row tables to copy (those not named in `options`: every row
    /// table is copied without being named).
    fn survey(
        &self,
        read: &ReadTransaction,
        options: &BackupOptions<'_>,
    ) -> Result<(Expected, u64, Vec<String>, Vec<RowsCopy>), BackupError> {
        let known = store_tables();
        let declared = |name: &str| options.tables.iter().any(|t| t.table_name() == name);
        let rows: Vec<RowsCopy> = crate::rebuild::row_tables(read, &known)?
            .into_iter()
            .filter(|name| !declared(name))
            .map(RowsCopy)
            .collect();
        let mut unknown = Vec::new();
        let mut total = 0;
        for table in read.list_tables().map_err(Error::from)? {
            let name = table.name().to_string();
            let copied = declared(&name) || rows.iter().any(|row| row.0 == name);
            if known.contains(&name) || copied {
                total += read.open_untyped_table(table).map_err(Error::from)?.len().map_err(Error::from)?;
            } else {
                unknown.push(name);
            }
        }
        unknown.extend(
            read.list_multimap_tables()
                .map_err(Error::from)?
                .map(|table| redb::MultimapTableHandle::name(&table).to_string()),
        );
        unknown.sort();
        if !unknown.is_empty() && !options.leave_out_unknown_tables {
            return Err(BackupError::UnknownTables(unknown));
        }
        let records = read.open_table(RECORDS).map_err(Error::from)?.len().map_err(Error::from)?;
        let index_entries = read.open_table(EXPIRY).map_err(Error::from)?.len().map_err(Error::from)?;
        Ok((Expected { records, index_entries }, total, unknown, rows))
    }

    /// Opens the copy at `path` on its own handle, verifies it and checks its counts.
    fn check_copy(&self, path: &Path, expected: Expected) -> Result<VerifyReport, BackupError> {
        let db = Database::builder().open(path).map_err(|e| BackupError::Open(e.into()))?;
        let config = Config {
            policies: Default::default(),
            durability: Durability::Immediate,
            audit: true,
            audit_retention: DEFAULT_AUDIT_RETENTION,
            trust_clock_at_open: false,
            apps: self.engine.config.apps.clone(),
        };
        let init = Initialiser { allow_init: false, seed: None, created_at: 0 };
        let engine = Engine::from_parts(
            crate::db::Db::Writable(db),
            Some(path.to_path_buf()),
            config,
            self.engine.clock.source(),
            init,
            None,
        )
        .map_err(BackupError::Open)?;
        let mut copy = Store::from_engine(engine);
        let report = copy.verify()?;
        drop(copy);
        if !report.is_ok() {
            return Err(BackupError::Unverified(Box::new(report)));
        }
        for (what, snapshot, copy) in [
            ("records", expected.records, report.records),
            ("index entries", expected.index_entries, report.index_entries),
        ] {
            if snapshot != copy {
                return Err(BackupError::Mismatch { what, snapshot, copy });
            }
        }
        Ok(report)
    }
}

/// What [`Store::backup_on`] writes and reads through: the copy's storage backend and the
/// destination file system's free space.
pub(crate) struct Hooks<F, A> {
    pub(crate) backend: F,
    pub(crate) available: A,
}

/// Refuses `path` when it is one of the store's own files (`own`, from [`Store::own_files`]),
/// compared by file identity where both exist and by resolved path otherwise.
fn refuse_own(own: &[(PathBuf, &'static str)], dest: &Path, path: &Path) -> Result<(), BackupError> {
    match own.iter().find(|(file, _)| same_file(file, path)) {
        Some((_, what)) => Err(BackupError::SameFile { dest: dest.to_path_buf(), what }),
        None => Ok(()),
    }
}

/// The directory `path` is in (`.` for a bare name).
fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

/// A refusal of the file to replace named by the destination as the caller gave it.
fn named(error: BackupError, dest: &Path) -> BackupError {
    match error {
        BackupError::DestinationOpen { locked, source, .. } => {
            BackupError::DestinationOpen { path: dest.to_path_buf(), locked, source }
        }
        BackupError::DestinationPending { journal, reason, .. } => {
            BackupError::DestinationPending { path: dest.to_path_buf(), journal, reason }
        }
        other => other,
    }
}

/// What the copy must hold: the snapshot's counts.
#[derive(Debug, Clone, Copy)]
struct Expected {
    records: u64,
    index_entries: u64,
}

/// Whether `a` and `b` (which may not exist) name the same file.
fn same_file(a: &Path, b: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if let (Ok(a), Ok(b)) = (fs::metadata(a), fs::metadata(b)) {
            return (a.dev(), a.ino()) == (b.dev(), b.ino());
        }
    }
    let resolve = |path: &Path| -> Option<PathBuf> {
        if let Ok(path) = fs::canonicalize(path) {
            return Some(path);
        }
        let parent = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        Some(fs::canonicalize(parent).ok()?.join(path.file_name()?))
    };
    matches!((resolve(a), resolve(b)), (Some(a), Some(b)) if a == b)
}

/// Moves the verified copy to `target`: without `overwrite` through a hard link, which never
/// replaces a file that appeared meanwhile; with it, by a rename over the old file, whose locks
/// (`held`) are taken first when a file appeared at `target` after the backup started. Returns
/// whether a file was replaced.
fn place(
    temporary: &Path,
    target: &Path,
    overwrite: bool,
    held: &mut Option<destination::Held>,
) -> Result<bool, BackupError> {
    if overwrite && held.is_some() {
        fs::rename(temporary, target).map_err(io("move the backup to", target))?;
        return Ok(true);
    }
    match fs::hard_link(temporary, target) {
        Ok(()) => {
            fs::remove_file(temporary).map_err(io("remove", temporary))?;
            Ok(false)
        }
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
            if !overwrite {
                return Err(BackupError::DestinationExists(target.to_path_buf()));
            }
            // A file appeared at the destination while the copy was written: replaced only
            // under its locks, like one that was there from the start.
            *held = Some(destination::hold(target)?);
            fs::rename(temporary, target).map_err(io("move the backup to", target))?;
            Ok(true)
        }
        // No hard links on this file system: look, then rename.
        Err(_) if fs::symlink_metadata(target).is_ok() => {
            if !overwrite {
                return Err(BackupError::DestinationExists(target.to_path_buf()));
            }
            *held = Some(destination::hold(target)?);
            fs::rename(temporary, target).map_err(io("move the backup to", target))?;
            Ok(true)
        }
        Err(_) => {
            fs::rename(temporary, target).map_err(io("move the backup to", target))?;
            Ok(false)
        }
    }
}

/// `error`, or [`BackupError::NoSpace`] when a full file system or quota caused it.
fn no_space(error: BackupError, path: &Path) -> BackupError {
    fn full(io: &std::io::Error) -> bool {
        matches!(io.kind(), std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded)
    }
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(&error);
    let mut is_full = false;
    while let Some(cause) = current {
        let io = if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            Some(io)
        } else if let Some(redb::Error::Io(io)) = cause.downcast_ref::<redb::Error>() {
            Some(io)
        } else if let Some(redb::Error::Io(io)) = cause.downcast_ref::<std::sync::Arc<redb::Error>>().map(|e| &**e) {
            Some(io)
        } else if let Some(redb::StorageError::Io(io)) = cause.downcast_ref::<redb::StorageError>() {
            Some(io)
        } else {
            None
        };
        if io.is_some_and(full) {
            is_full = true;
            break;
        }
        current = cause.source();
    }
    if is_full { BackupError::NoSpace { path: path.to_path_buf(), source: Box::new(error) } } else { error }
}
