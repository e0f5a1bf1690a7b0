//! Opening a store's journal: finding the journal that belongs to the store file, replaying
//! the records a crash left, and starting a new journal generation with a new journal id.
//!
//! The store's metadata is the authority (`meta.rs`). At every open for writing:
//!
//! 1. The metadata says whether the journal may hold records (the clean-close marker) and
//!    which journal id and generation they carry. A store closed cleanly, never journaled, or
//!    copied (a rebuild, a backup) needs nothing from any journal file: one beside it is
//!    re-created quietly. A store whose records may be pending needs *its* journal: the one
//!    beside the store's resolved path, or the one at the path its metadata recorded (a store
//!    renamed or reached through another hard link after a crash), whichever carries its id. A
//!    missing, blank, short, damaged or foreign journal is a typed refusal; nothing is changed.
//! 2. The records of the metadata's generation, in sequence from the checkpoint on, are read
//!    (never past the journal's recorded capacity or the file's end).
//! 3. A new journal id and the next generation are written into a header slot of the journal
//!    file (not the slot the current generation's records depend on) and synced.
//! 4. One durable redb commit applies the records and records the checkpoint, the new id and
//!    generation, the marker and the journal's path. Only then may records be appended.
//!
//! A crash anywhere in 3–4 leaves the metadata naming the old id and generation, whose slot and
//! records are untouched, so the next open does the same again. After 4, every record in the
//! file is of an earlier generation or journal id, so none is ever applied again; a copy of the
//! store that is opened with its own journal gets its own id at once.

use std::fs;
use std::path::{Path, PathBuf};

use redb::{Database, ReadableDatabase, StorageBackend};

use super::apply::{Applied, apply_put, apply_remove};
use super::aside::{self, SetAside, SetAsideReason};
use super::commit::{JournalFile, OpenJournal};
use super::files::{Access, ReadOnlyFile, identity_of, journal_path, open_journal, resolve};
use super::format::{BLOCK, Generation, Seal, Slot, fresh_salt};
use super::meta::{History, JournalMeta, MetaFault};
use super::report::JournalRecovery;
use super::{Header, Journal, JournalError, ScanEnd, scan};
use crate::tables::{META, TableId};
use crate::{Error, OpenError};

/// The byte of a record naming an application table (`TableId::Application`).
const APPLICATION: u8 = TableId::Application.byte();

/// Where the journal of a store being opened is.
pub(crate) enum JournalSource {
    /// A backend the caller gave (custom storage, fault-injection tests): no path.
    Backend(JournalFile),
    /// The journal file beside a store file, found from the store file's resolved path.
    File {
        /// The store file's path with symlinks resolved.
        store: PathBuf,
        /// Which file it is (device and inode; `None` where the platform has no such thing).
        identity: Option<[u8; 16]>,
    },
}

/// What the open hands the engine.
pub(crate) struct JournalSetup {
    pub(crate) source: JournalSource,
    /// The size of a journal created now.
    pub(crate) capacity: u64,
    /// Whether commits are journaled after recovery (off: the journal is replayed and left
    /// alone, and the store is marked closed).
    pub(crate) active: bool,
    /// Open a store whose journal is missing, damaged or foreign anyway, accepting the loss of
    /// the commits that journal held.
    pub(crate) discard_lost: bool,
    /// The application tables registered for the journal: recovery replays their mutations
    /// with these types.
    pub(crate) apps: crate::app_table::AppTables,
}

/// A journal file found for reading, with where it is (`None`: a backend the caller gave) and
/// which file it is (device and inode, when known), so that it is removed later only if the
/// name still leads to it.
struct Located<F = JournalFile> {
    file: F,
    path: Option<PathBuf>,
    identity: Option<[u8; 16]>,
}

/// What the journal held for the store.
#[derive(Default)]
struct Read {
    batches: Vec<Vec<Mutation>>,
    /// The newest header slot of the store's journal, when one was found (the new generation
    /// is written into the other slot).
    slot_epoch: Option<u64>,
    /// Intact records after a damaged one, given up (only with `discard_lost`).
    given_up: u64,
    /// Whether the open gives up what the journal may hold past where it could be read (a
    /// damaged record with intact ones after it, or a file cut short).
    gave_up: bool,
    /// Why the records stopped before the end of the journal's records, when they did.
    stopped_by: Option<String>,
}

/// The store whose journal is looked for.
struct Wanted<'a> {
    /// The store file (resolved).
    store: &'a Path,
    /// Which file it is.
    identity: Option<[u8; 16]>,
    meta: &'a JournalMeta,
    discard_lost: bool,
}

use super::Mutation;

fn meta_error(fault: MetaFault) -> OpenError {
    match fault {
        MetaFault::Storage(storage) => OpenError::from(storage),
        MetaFault::Malformed(what) => OpenError::CorruptMeta(format!("{what} malformed")),
    }
}

fn io_error(path: Option<&Path>) -> impl Fn(JournalError) -> OpenError + '_ {
    move |error| match error {
        JournalError::Io(source) => match path {
            Some(path) => OpenError::Io { action: "read the journal", path: path.to_path_buf(), source },
            None => OpenError::Storage(redb::StorageError::Io(source).into()),
        },
        JournalError::Malformed { seq } => OpenError::JournalDamaged {
            store: PathBuf::new(),
            journal: path.map(Path::to_path_buf).unwrap_or_default(),
            reason: format!("record {seq} is complete and checksummed but does not parse"),
        },
        other => {
            OpenError::Journal { path: path.map(Path::to_path_buf).unwrap_or_default(), reason: other.to_string() }
        }
    }
}

/// Reads the store's journal entries.
fn read_meta(read: &redb::ReadTransaction) -> Result<JournalMeta, OpenError> {
    JournalMeta::read(&read.open_table(META)?).map_err(meta_error)
}

/// Recovery at open (see the module docs). Returns the journal commits use from now on
/// (`None` when the journal is off) and what the open did with the journal files.
pub(crate) fn recover(
    db: &Database,
    setup: JournalSetup,
    now: u64,
) -> Result<(Option<OpenJournal>, JournalRecovery), OpenError> {
    let JournalSetup { source, capacity, active, discard_lost, apps } = setup;
    let meta = read_meta(&db.begin_read()?)?;
    let mut report = JournalRecovery::default();
    let mut history = meta.history();
    if !active && history == History::None {
        // Nothing to read, nothing to journal: the file alone is the store.
        return Ok((None, report));
    }
    let checkpoint = meta.checkpoint.unwrap_or(0);
    let (store_path, beside, identity) = match &source {
        JournalSource::File { store, identity } => (store.clone(), Some(journal_path(store)), *identity),
        JournalSource::Backend(_) => (PathBuf::new(), None, None),
    };

    // 1–2: the journal that belongs to the store, and its records.
    let given = match source {
        JournalSource::Backend(file) => Some(file),
        JournalSource::File { .. } => None,
    };
    let mut read = Read::default();
    let mut found_at: Option<Located> = None;
    let found = match history {
        History::None => Ok(None),
        History::Pending => {
            let wanted = Wanted { store: &store_path, identity, meta: &meta, discard_lost };
            read_pending(given.clone(), beside.as_deref(), &wanted, checkpoint)
        }
    };
    match found {
        Ok(None) => {}
        Ok(Some((located, records))) => {
            read = records;
            found_at = Some(located);
        }
        Err(refused) if discard_lost && is_lost_journal(&refused) => {
            tracing::error!(
                target: "idemdb::journal",
                store = %store_path.display(),
                error = %refused,
                "opening without the journal: the commits it held are given up (discard_lost_journal)"
            );
            report.discarded = true;
            report.stopped_by = Some(refused.to_string());
            history = History::None;
        }
        Err(refused) => {
            tracing::warn!(target: "idemdb::journal", store = %store_path.display(), error = %refused, "open refused");
            return Err(refused);
        }
    }
    if read.gave_up {
        report.discarded = true;
    }
    report.applied = read.batches.len() as u64;
    report.given_up = read.given_up;
    report.stopped_by = report.stopped_by.take().or_else(|| read.stopped_by.clone());
    report.read_from = found_at.as_ref().and_then(|located| located.path.clone());
    let applied = checkpoint
        .checked_add(read.batches.len() as u64)
        .ok_or_else(|| OpenError::CorruptMeta("journal checkpoint out of range".into()))?;

    // Every application table the records write must be registered (replaying needs its
    // types): refuse now, before anything is written, rather than half-way through the apply.
    if let Some(table) = unregistered_table(&read.batches, &apps) {
        let journal = report.read_from.clone().or(beside).unwrap_or_default();
        return Err(OpenError::JournalNeedsTable { store: store_path, journal, table });
    }

    // 3: the new journal id and generation, in the slot the current records do not depend on.
    let id = fresh_id();
    let generation = next_generation(meta.generation, read.slot_epoch, applied)?;
    // The journal file read from elsewhere (the recorded path, a set-aside file) stays open,
    // and so locked, until it is removed below.
    let beside_identity = beside.as_deref().and_then(super::files::identity);
    let (from_beside, elsewhere) = match found_at {
        Some(located) if located.path.is_none() || located.path == beside => (Some(located), None),
        // The file beside the store is the one read, under another name too (hard links): it is
        // held already (a second open would meet its own lock). It has another name, so it is
        // set aside rather than reused, and the recorded name is retired.
        Some(located) if located.identity.is_some() && located.identity == beside_identity => {
            let held = Located { file: located.file.clone(), path: beside.clone(), identity: located.identity };
            (Some(held), Some(located))
        }
        other => (None, other),
    };
    let journal = if active {
        let keep = !report.discarded && (from_beside.is_some() || history == History::None);
        let (file, reused) = match (given, &beside) {
            (Some(file), _) => (file, true),
            (None, Some(path)) => {
                let held = from_beside.map(|located| located.file);
                beside_journal(path, held, meta.id, keep, &store_path, now, &mut report)?
            }
            (None, None) => {
                return Err(OpenError::Journal { path: PathBuf::new(), reason: "no journal backend".into() });
            }
        };
        let len = file.len().map_err(|error| io_error(beside.as_deref())(error.into()))?;
        // A file is preallocated afresh only when it holds nothing the store still needs.
        let fresh = !reused || len < 2 * BLOCK as u64;
        let fresh = fresh && (len != capacity.max(2 * BLOCK as u64) / BLOCK as u64 * BLOCK as u64);
        let journal =
            Journal::start(file, id, generation, applied, capacity, fresh).map_err(io_error(beside.as_deref()))?;
        let shown = beside.as_ref().map(|path| path.display().to_string()).unwrap_or_else(|| "(backend)".into());
        if fresh {
            tracing::info!(
                target: "idemdb::journal",
                journal = %shown,
                bytes = journal.capacity(),
                epoch = generation.epoch,
                "journal initialised (preallocated with zeros)"
            );
        } else {
            tracing::debug!(target: "idemdb::journal", journal = %shown, epoch = generation.epoch, "journal reopened");
        }
        Some(journal)
    } else {
        None
    };

    // 4: apply, checkpoint, and name the new journal in one durable commit.
    let mut tx = db.begin_write()?;
    tx.set_durability(redb::Durability::Immediate)?;
    if let Err(refused) = apply_records(&tx, &apps, &read.batches, checkpoint) {
        let journal = report.read_from.clone().or(beside).unwrap_or_default();
        return Err(refused.into_open_error(store_path, journal));
    }
    {
        let mut table = tx.open_table(META)?;
        let entries = JournalMeta {
            checkpoint: Some(applied),
            id: Some(id),
            generation,
            open: active,
            journal_file: beside.as_deref().and_then(super::files::identity),
            path: beside,
            file: identity,
        };
        entries.write(&mut table)?;
    }
    tx.commit()?;
    if let Some(located) = elsewhere {
        // The store's records are applied and its journal is the one beside it now: the
        // earlier file (at the recorded path, or set aside) is of no further use — unless the
        // open gave up records it holds, which it keeps. Removed while it is still open and
        // locked, and only if the name still leads to the file that was read.
        retire(located, identity, &mut report, now);
    }
    let recovered = read.batches.len() as u64;
    Ok((journal.map(|journal| OpenJournal::new(journal, now, recovered)), report))
}

/// The first application table the records write that the store does not know.
fn unregistered_table(batches: &[Vec<Mutation>], apps: &crate::app_table::AppTables) -> Option<String> {
    let app_keys = batches.iter().flatten().filter_map(|mutation| match mutation {
        Mutation::Put { table: APPLICATION, key, .. } | Mutation::Remove { table: APPLICATION, key } => {
            Some(key.as_slice())
        }
        _ => None,
    });
    apps.first_unregistered(app_keys)
}

/// The generation a recovery starts: the next epoch, in the header slot the records just
/// read do not depend on (`slot_epoch`: the epoch of the slot they were read under).
fn next_generation(current: Generation, slot_epoch: Option<u64>, applied: u64) -> Result<Generation, OpenError> {
    let mut epoch = current.epoch.checked_add(1);
    if let (Some(next), Some(slot)) = (epoch, slot_epoch)
        && next % 2 == slot % 2
    {
        epoch = next.checked_add(1);
    }
    let epoch = epoch.ok_or_else(|| OpenError::CorruptMeta("journal generation out of range".into()))?;
    Ok(Generation { epoch, salt: fresh_salt(current, applied) })
}

/// Why a record could not be applied.
enum NotApplied {
    Storage(crate::Error),
    Unregistered(String),
    /// The record numbered `seq` names no table of the store.
    Malformed {
        seq: u64,
    },
}

impl NotApplied {
    fn into_open_error(self, store: PathBuf, journal: PathBuf) -> OpenError {
        match self {
            NotApplied::Storage(error) => storage(error),
            NotApplied::Unregistered(table) => OpenError::JournalNeedsTable { store, journal, table },
            NotApplied::Malformed { seq } => OpenError::JournalDamaged {
                store,
                journal,
                reason: format!("record {seq} names no table of the store"),
            },
        }
    }
}

/// Applies the records read, numbered from `checkpoint + 1`, to `tx`.
fn apply_records(
    tx: &redb::WriteTransaction,
    apps: &crate::app_table::AppTables,
    batches: &[Vec<Mutation>],
    checkpoint: u64,
) -> Result<(), NotApplied> {
    for (at, batch) in batches.iter().enumerate() {
        for mutation in batch {
            let result = match mutation {
                Mutation::Put { table, key, value } => match TableId::from_byte(*table) {
                    Some(table) => apply_put(tx, apps, table, key, value),
                    None => Err(Applied::Malformed),
                },
                Mutation::Remove { table, key } => match TableId::from_byte(*table) {
                    Some(table) => apply_remove(tx, apps, table, key),
                    None => Err(Applied::Malformed),
                },
            };
            match result {
                Ok(()) => {}
                Err(Applied::Storage(error)) => return Err(NotApplied::Storage(error)),
                Err(Applied::Unregistered(table)) => return Err(NotApplied::Unregistered(table)),
                Err(Applied::Malformed) => return Err(NotApplied::Malformed { seq: checkpoint + at as u64 + 1 }),
            }
        }
    }
    Ok(())
}

/// The journal file beside the store, ready to be started: the one already held (read from),
/// or the file there now. It is reused when it is the store's own journal (`own`, and `reuse`:
/// the open gave nothing up) or holds nothing at all; anything else there is set aside, never
/// written over, and a new file is made. Returns the file and whether it was reused.
fn beside_journal(
    path: &Path,
    held: Option<JournalFile>,
    own: Option<[u8; 16]>,
    reuse: bool,
    store: &Path,
    now: u64,
    report: &mut JournalRecovery,
) -> Result<(JournalFile, bool), OpenError> {
    let was_read = held.is_some();
    let file = match held {
        Some(file) => Some(file),
        None => match open_journal(path, Access::Write { create: false })? {
            Some(file) => Some(backend(file, path)?),
            None => None,
        },
    };
    let Some(file) = file else {
        // A symbolic link that leads nowhere: no journal is created through it (that would put
        // it wherever the link points), and the store needs nothing from it here, so the link
        // is set aside (kept, under a name that says so) and a new journal made.
        if fs::symlink_metadata(path).is_ok_and(|meta| meta.file_type().is_symlink()) {
            set_aside_reported(path, None, SetAsideReason::Shared, now, report)?;
        }
        return Ok((open_beside(path, store)?, false));
    };
    let header = Header::read(&file).map_err(io_error(Some(path)))?;
    let owner = aside::owner(&header);
    // A file reached through a symlink or with other hard links is another name's too (a copy
    // of the store whose journal was linked beside it): never written in place.
    let shared = aside::is_shared(path);
    if !shared {
        if reuse && (was_read || own.is_some_and(|id| header.newest_of(&id).is_some())) {
            return Ok((file, true));
        }
        if aside::holds_nothing(&file).map_err(io_error(Some(path)))? {
            return Ok((file, false));
        }
    }
    let reason = if shared {
        SetAsideReason::Shared
    } else if owner.is_some() && owner == own {
        SetAsideReason::GivenUp
    } else {
        SetAsideReason::NotThisStores
    };
    set_aside_reported(path, owner.as_ref(), reason, now, report)?;
    // The old file stays open (and locked) until the new one is made.
    let fresh = open_beside(path, store)?;
    drop(file);
    Ok((fresh, false))
}

/// Sets the journal file at `path` aside (renamed, never written over: [`aside::set_aside`]),
/// says so, and records it in `report`; a new journal is started beside the store next.
fn set_aside_reported(
    path: &Path,
    owner: Option<&[u8; 16]>,
    reason: SetAsideReason,
    now: u64,
    report: &mut JournalRecovery,
) -> Result<(), OpenError> {
    let to = aside::set_aside(path, owner, now).map_err(|source| OpenError::Io {
        action: "set aside the journal",
        path: path.to_path_buf(),
        source,
    })?;
    tracing::warn!(
        target: "idemdb::journal",
        journal = %path.display(),
        set_aside = %to.display(),
        %reason,
        "journal set aside, not written over; a new journal is started beside the store"
    );
    report.set_aside.push(SetAside { from: path.to_path_buf(), to, reason });
    Ok(())
}

/// Removes (or, when it holds records the open gave up, sets aside) the store's earlier
/// journal file once its records are applied. Best effort: the store is consistent either way.
fn retire(located: Located, store: Option<[u8; 16]>, report: &mut JournalRecovery, now: u64) {
    let Some(path) = located.path.clone() else { return };
    let still_there = located.identity.is_some() && super::files::identity(&path) == located.identity;
    if !still_there {
        tracing::warn!(
            target: "idemdb::journal",
            journal = %path.display(),
            "the store's earlier journal was replaced by another file meanwhile: left as it is"
        );
        return;
    }
    let is_aside = path.file_name().is_some_and(|name| name.to_string_lossy().contains(".set-aside-"));
    if !is_aside && let Some(other) = other_store_of(&path, store) {
        tracing::info!(
            target: "idemdb::journal",
            journal = %path.display(),
            store = %other.display(),
            "the store's earlier journal is beside another store file (a copy made from this one): left to it"
        );
        return;
    }
    if report.discarded {
        if !is_aside && let Ok(to) = aside::set_aside(&path, None, now) {
            report.set_aside.push(SetAside { from: path, to, reason: SetAsideReason::GivenUp });
        }
    } else if fs::remove_file(&path).is_ok() {
        aside::sync_dir(&path);
        tracing::info!(target: "idemdb::journal", journal = %path.display(), "removed the store's earlier journal");
        report.removed = Some(path);
    }
    drop(located);
}

/// The store file the journal at `journal` sits beside (its name without `-journal`), when
/// there is one there and it is not the store `store` (device and inode): a copy of the store
/// made with its journal, whose unapplied records that journal still holds.
fn other_store_of(journal: &Path, store: Option<[u8; 16]>) -> Option<PathBuf> {
    let name = journal.file_name()?.to_str()?.strip_suffix("-journal")?;
    let other = journal.with_file_name(name);
    let identity = super::files::identity(&other)?;
    (Some(identity) != store).then_some(other)
}

/// Whether an open refusal says the journal's commits are out of reach (what
/// `discard_lost_journal` accepts), as opposed to an I/O error or a busy file.
fn is_lost_journal(error: &OpenError) -> bool {
    matches!(
        error,
        OpenError::JournalMissing { .. } | OpenError::JournalDamaged { .. } | OpenError::JournalForeign { .. }
    )
}

/// Opens (creating it) the journal beside the store, for a journal that holds nothing needed.
fn open_beside(path: &Path, store: &Path) -> Result<JournalFile, OpenError> {
    let file = open_journal(path, Access::Write { create: true })?.ok_or_else(|| OpenError::JournalMissing {
        store: store.to_path_buf(),
        journal: path.to_path_buf(),
        recorded: None,
        reason: "is a dangling symlink".into(),
    })?;
    backend(file, path)
}

fn backend(file: fs::File, path: &Path) -> Result<JournalFile, OpenError> {
    let backend = redb::backends::FileBackend::new(file).map_err(|error| OpenError::Journal {
        path: path.to_path_buf(),
        reason: format!("cannot use the file: {error}"),
    })?;
    Ok(JournalFile(std::sync::Arc::new(backend)))
}

/// Finds the journal of a store whose records may be pending and reads its records.
fn read_pending(
    given: Option<JournalFile>,
    beside: Option<&Path>,
    wanted: &Wanted<'_>,
    checkpoint: u64,
) -> Result<Option<(Located, Read)>, OpenError> {
    let Some(id) = wanted.meta.id else { return Ok(None) };
    let located = locate(given, beside, wanted, &id, Access::Write { create: false }, backend)?;
    let read = examine(&located.file, located.path.as_deref(), wanted, &id, checkpoint, false)?;
    Ok(Some((located, read)))
}

/// Reads the records of the store's journal `file` after `checkpoint` (only the first with
/// `first_only`). A record that is damaged with intact records after it, or a file cut short
/// after records, is a refusal that says what is intact — or, with `discard_lost`, what the
/// open gives up.
fn examine<F: StorageBackend>(
    file: &F,
    path: Option<&Path>,
    wanted: &Wanted<'_>,
    id: &[u8; 16],
    checkpoint: u64,
    first_only: bool,
) -> Result<Read, OpenError> {
    let (meta, store) = (wanted.meta, wanted.store);
    let header = Header::read(file).map_err(io_error(path))?;
    let slot = check_header(&header, id, meta, store, path)?;
    let from =
        checkpoint.checked_add(1).ok_or_else(|| OpenError::CorruptMeta("journal checkpoint out of range".into()))?;
    let limit = header.len.min(slot.capacity);
    let seal = Seal { id: *id, generation: meta.generation };
    let found = scan(file, seal, from, limit, first_only).map_err(|error| with_store(io_error(path)(error), store))?;
    if !first_only {
        log_recovery(path, 2, from, &found.batches, found.stopped_at, found.end);
    }
    let intact = found.batches.len() as u64;
    let next = from + intact;
    let mut read = Read { slot_epoch: Some(slot.generation.epoch), ..Read::default() };
    let damaged = |reason: String| OpenError::JournalDamaged {
        store: store.to_path_buf(),
        journal: path.map(Path::to_path_buf).unwrap_or_default(),
        reason,
    };
    let beyond = match found.end {
        ScanEnd::NotARecord | ScanEnd::OutOfSequence(_) => {
            aside::intact_beyond(file, seal, found.stopped_at, limit, next - 1).map_err(io_error(path))?
        }
        ScanEnd::Blank | ScanEnd::End => aside::Beyond::default(),
    };
    let cut = header.len < slot.capacity && found.end != ScanEnd::Blank;
    if beyond.count > 0 {
        let reason = format!(
            "record {next} (at byte {}) is damaged, and {} intact record(s) follow it ({}..={}), which cannot be \
             applied without it; the {intact} record(s) before it are intact",
            found.stopped_at, beyond.count, beyond.first, beyond.last
        );
        if !wanted.discard_lost {
            return Err(damaged(reason));
        }
        read.given_up = beyond.count;
        read.gave_up = true;
        read.stopped_by = Some(reason);
    } else if cut {
        let reason = format!(
            "it is {} bytes long, but was made {} bytes long: it was cut after record {} ({intact} intact record(s) \
             after the checkpoint); any record after the cut is gone",
            header.len,
            slot.capacity,
            next - 1
        );
        if !wanted.discard_lost {
            return Err(damaged(reason));
        }
        read.gave_up = true;
        read.stopped_by = Some(reason);
    } else if matches!(found.end, ScanEnd::NotARecord | ScanEnd::OutOfSequence(_)) {
        // The usual end after a crash: a last write that did not finish.
        read.stopped_by = Some(format!("after record {}: {}", next - 1, found.end.describe()));
    }
    read.batches = found.batches;
    Ok(read)
}

/// The journal of the store `id`: the given backend; the file beside the store if it carries
/// the id; else — only when the store is the very file (device and inode) that last opened it,
/// renamed or reached through another hard link — the file at the path the metadata recorded,
/// or a set-aside file of this journal id beside either ([`aside::candidates`]), if it carries
/// the id. A copy of the store file never looks past its own name: the journal at the recorded
/// path is the original's. When nothing carries the id, the refusal names what is beside the
/// store and where the store last opened its journal.
fn locate<F>(
    given: Option<F>,
    beside: Option<&Path>,
    wanted: &Wanted<'_>,
    id: &[u8; 16],
    access: Access,
    wrap: impl Fn(fs::File, &Path) -> Result<F, OpenError>,
) -> Result<Located<F>, OpenError>
where
    F: StorageBackend,
{
    let (store, meta) = (wanted.store, wanted.meta);
    if let Some(file) = given {
        return Ok(Located { file, path: None, identity: None });
    }
    let Some(beside) = beside else {
        return Err(OpenError::Journal { path: PathBuf::new(), reason: "no journal backend".into() });
    };
    let recorded = meta.path.as_deref().filter(|recorded| *recorded != beside);
    let same_file = wanted.identity.is_some() && wanted.identity == meta.file;
    // When the store is the very file that last opened its journal, the journal can be at the
    // recorded path, beside the store, or set aside beside either (a new store took one of the
    // names since) — and more than one of them can carry its id when one is a copy of another:
    // a journal copied beside the store's new name while the store went on writing at the old
    // one, or the store moved with its journal and a copy put back at the old name. A copy was
    // made earlier and holds a prefix of the records, so the one with the most records after
    // the checkpoint is the one the store wrote last (on a tie, the one beside the store). One
    // file under two names (hard links) is read once, through the first name found.
    if same_file {
        let mut places: Vec<PathBuf> = recorded.into_iter().map(Path::to_path_buf).collect();
        places.push(beside.to_path_buf());
        places.extend(aside::candidates(beside, id));
        if let Some(recorded) = recorded {
            places.extend(aside::candidates(recorded, id));
        }
        let mut seen = Vec::new();
        let mut best: Option<(u64, Located<F>)> = None;
        for place in places {
            let Some(located) = carrying(&place, id, access, &wrap)? else { continue };
            if located.identity.is_some() {
                if seen.contains(&located.identity) {
                    continue;
                }
                seen.push(located.identity);
            }
            // The very file the store last wrote (its device and inode are recorded) is its
            // journal wherever it is found, whatever a copy holds.
            let original = meta.journal_file.is_some() && located.identity == meta.journal_file;
            let records = records_after(&located.file, id, meta);
            let wins = original
                || best.as_ref().is_none_or(|(most, _)| records > *most || (records == *most && place == beside));
            if wins {
                best = Some((records, located));
            }
            if original {
                break;
            }
        }
        if let Some((_, located)) = &best
            && let Some(expected) = meta.journal_file
            && located.identity.is_some_and(|found| found != expected)
        {
            // Only copies of the journal were found: the file the store wrote last is elsewhere
            // (moved to a name no open looks at) and may hold records the copies lack.
            let (device, inode) = split_identity(&expected);
            return Err(OpenError::JournalForeign {
                store: store.to_path_buf(),
                journal: located.path.clone().unwrap_or_default(),
                reason: format!(
                    "it carries this store's journal id {} but is a copy: the journal the store last wrote is another \
                     file (device {device}, inode {inode}; {}), which may hold later records. Put that file back beside \
                     the store (e.g. find it with `find DIR -inum {inode}`), or open with discard_lost_journal to give up \
                     what it holds",
                    aside::id_hex(id),
                    recorded.map_or_else(
                        || "it was beside the store when the store was opened".to_string(),
                        |recorded| format!("it was at {} when the store was opened", recorded.display())
                    ),
                ),
            });
        }
        if let Some((records, located)) = best {
            if located.path.as_deref() != Some(beside) {
                tracing::info!(
                    target: "idemdb::journal",
                    store = %store.display(),
                    journal = %located.path.as_deref().unwrap_or(beside).display(),
                    records,
                    "the store's journal is not beside the store (renamed, another hard link, or set aside): it is read from there"
                );
            }
            return Ok(located);
        }
    }
    let mut at_beside = None;
    if let Some(file) = open_journal(beside, access)? {
        let identity = identity_of(&file);
        let file = wrap(file, beside)?;
        let header = Header::read(&file).map_err(io_error(Some(beside)))?;
        if header.newest_of(id).is_some() {
            return Ok(Located { file, path: Some(beside.to_path_buf()), identity });
        }
        at_beside = Some((Located { file, path: Some(beside.to_path_buf()), identity }, header));
    }
    let last_opened = match recorded {
        Some(recorded) if same_file => {
            format!("; the store last opened its journal at {}, which does not hold it either", recorded.display())
        }
        Some(recorded) => format!(
            "; the store file is not the one that last opened it (a copy), so its journal at {} was not looked at",
            recorded.display()
        ),
        None => String::new(),
    };
    match at_beside {
        Some((located, header)) if aside::owner(&header).is_some() => Err(OpenError::JournalForeign {
            store: store.to_path_buf(),
            journal: located.path.unwrap_or_default(),
            reason: format!(
                "its header names journal {} (another store's journal, or a copy of this store that was opened since), \
                 not this store's {}{last_opened}",
                aside::owner(&header).map_or_else(String::new, |owner| aside::id_hex(&owner)),
                aside::id_hex(id)
            ),
        }),
        // Beside the store, with no journal id at all: this store's journal, damaged (the
        // header check says how).
        Some((located, _)) => Ok(located),
        None => {
            let reason = if fs::symlink_metadata(beside).is_ok() { "is a dangling symlink" } else { "does not exist" };
            Err(OpenError::JournalMissing {
                store: store.to_path_buf(),
                journal: beside.to_path_buf(),
                recorded: recorded.map(Path::to_path_buf),
                reason: format!("{reason}{last_opened}"),
            })
        }
    }
}

/// The journal file at `place`, opened and locked, when its header names the journal `id`.
/// A file that cannot be opened (missing, held by another store, not a regular file) is not
/// it.
fn carrying<F: StorageBackend>(
    place: &Path,
    id: &[u8; 16],
    access: Access,
    wrap: &impl Fn(fs::File, &Path) -> Result<F, OpenError>,
) -> Result<Option<Located<F>>, OpenError> {
    let file = match open_journal(place, access) {
        Ok(Some(file)) => file,
        Ok(None) => return Ok(None),
        Err(error) => {
            tracing::debug!(target: "idemdb::journal", journal = %place.display(), %error, "not usable");
            return Ok(None);
        }
    };
    let identity = identity_of(&file);
    let file = wrap(file, place)?;
    let header = Header::read(&file).map_err(io_error(Some(place)))?;
    Ok(header.newest_of(id).is_some().then(|| Located { file, path: Some(place.to_path_buf()), identity }))
}

/// The device and inode of a file identity ([`super::files::identity`]).
fn split_identity(identity: &[u8; 16]) -> (u64, u64) {
    let (device, inode) = identity.split_at(8);
    let number = |bytes: &[u8]| u64::from_be_bytes(bytes.try_into().unwrap_or([0; 8]));
    (number(device), number(inode))
}

/// How many intact records after the store's checkpoint the journal `file` of `id` holds (0
/// when it cannot be read): which of two copies of one journal the store wrote last.
fn records_after<F: StorageBackend>(file: &F, id: &[u8; 16], meta: &JournalMeta) -> u64 {
    let Ok(header) = Header::read(file) else { return 0 };
    let Some(slot) = header.newest_of(id) else { return 0 };
    let from = meta.checkpoint.unwrap_or(0).saturating_add(1);
    let seal = Seal { id: *id, generation: meta.generation };
    scan(file, seal, from, header.len.min(slot.capacity), false).map_or(0, |found| found.batches.len() as u64)
}

/// Checks that a journal's header names the store's journal id, at a generation no later
/// than the store's; returns the newest such slot.
fn check_header(
    header: &Header,
    id: &[u8; 16],
    meta: &JournalMeta,
    store: &Path,
    path: Option<&Path>,
) -> Result<super::format::SlotInfo, OpenError> {
    let journal = path.map(Path::to_path_buf).unwrap_or_default();
    if let Some(slot) = header.newest_of(id) {
        if slot.generation.epoch > meta.generation.epoch {
            return Err(OpenError::JournalForeign {
                store: store.to_path_buf(),
                journal,
                reason: format!(
                    "the journal is at generation {}, later than the store file's {}: the store file was replaced by an \
                     older copy of itself",
                    slot.generation.epoch, meta.generation.epoch
                ),
            });
        }
        return Ok(slot);
    }
    let others = header.slots.iter().any(|slot| matches!(slot, Slot::Current(_)));
    if others {
        return Err(OpenError::JournalForeign {
            store: store.to_path_buf(),
            journal,
            reason: "its header names another journal id (another store's journal, or a copy of this store that was \
                     opened since)"
                .into(),
        });
    }
    let reason = if header.len < BLOCK as u64 * 2 {
        format!("it is {} bytes long, shorter than a journal", header.len)
    } else if header.is_blank() {
        "its header is blank".into()
    } else if let Some(Slot::OtherFormat(format)) =
        header.slots.iter().find(|slot| matches!(slot, Slot::OtherFormat(_)))
    {
        format!("its header is of format {format}, which this build does not read")
    } else {
        "its header is damaged".into()
    };
    Err(OpenError::JournalDamaged { store: store.to_path_buf(), journal, reason })
}

fn with_store(error: OpenError, store: &Path) -> OpenError {
    match error {
        OpenError::JournalDamaged { journal, reason, .. } => {
            OpenError::JournalDamaged { store: store.to_path_buf(), journal, reason }
        }
        other => other,
    }
}

fn log_recovery(path: Option<&Path>, format: u32, from: u64, batches: &[Vec<Mutation>], stopped_at: u64, end: ScanEnd) {
    let journal = path.map(|path| path.display().to_string()).unwrap_or_else(|| "(backend)".into());
    let last = from + batches.len() as u64;
    if batches.is_empty() {
        tracing::debug!(target: "idemdb::journal", %journal, format, "journal holds no records after the checkpoint");
    } else {
        tracing::info!(
            target: "idemdb::journal",
            %journal,
            format,
            records = batches.len(),
            first = from,
            last = last - 1,
            stopped_at,
            stopped_by = %end.describe(),
            "journal recovered: records after the checkpoint applied"
        );
    }
}

fn storage(error: Error) -> OpenError {
    match error {
        Error::Storage(storage) | Error::CommitUnknown(storage) => OpenError::Storage(storage),
        other => OpenError::CorruptMeta(other.to_string()),
    }
}

/// The journal refusals an open for writing would make, decided on the store's metadata as it
/// reads now (`read`: a read-only or in-memory view) before anything is written: a missing,
/// damaged, cut or foreign journal (unless `discard_lost`), a busy journal, a journal that
/// writes an unregistered application table. Reads the journal, never writes it.
pub(crate) fn preflight(
    read: &redb::ReadTransaction,
    path: &Path,
    discard_lost: bool,
    apps: &crate::app_table::AppTables,
) -> Result<(), OpenError> {
    let meta = read_meta(read)?;
    if meta.history() != History::Pending {
        return Ok(());
    }
    let Some(id) = meta.id else { return Ok(()) };
    let store = resolve(path)?;
    let beside = journal_path(&store);
    let identity = super::files::identity(&store);
    let wanted = Wanted { store: &store, identity, meta: &meta, discard_lost };
    let wrap = |file: fs::File, _: &Path| Ok(ReadOnlyFile(std::sync::Mutex::new(file)));
    let checkpoint = meta.checkpoint.unwrap_or(0);
    let found = locate(None, Some(&beside), &wanted, &id, Access::Read, wrap).and_then(|located| {
        let read = examine(&located.file, located.path.as_deref(), &wanted, &id, checkpoint, false)?;
        Ok((located.path, read))
    });
    match found {
        Ok((journal, read)) => match unregistered_table(&read.batches, apps) {
            Some(table) => {
                Err(OpenError::JournalNeedsTable { store: store.clone(), journal: journal.unwrap_or(beside), table })
            }
            None => Ok(()),
        },
        Err(refused) if discard_lost && is_lost_journal(&refused) => Ok(()),
        Err(refused) => Err(refused),
    }
}

/// A read-only open cannot replay a journal: it refuses a store whose journal holds records
/// the file does not, and a store whose journal should hold them but cannot be read. A store
/// closed cleanly (or that never journaled) never has its journal file opened.
pub(crate) fn check_read_only(db: &redb::ReadOnlyDatabase, path: &Path) -> Result<(), OpenError> {
    let meta = read_meta(&db.begin_read()?)?;
    let history = meta.history();
    if history == History::None {
        return Ok(());
    }
    let store = resolve(path)?;
    let beside = journal_path(&store);
    let Some(id) = meta.id else { return Ok(()) };
    let checkpoint = meta.checkpoint.unwrap_or(0);
    let wrap = |file: fs::File, _: &Path| Ok(ReadOnlyFile(std::sync::Mutex::new(file)));
    let identity = super::files::identity(&store);
    let wanted = Wanted { store: &store, identity, meta: &meta, discard_lost: false };
    let located = locate(None, Some(&beside), &wanted, &id, Access::Read, wrap)?;
    let journal = located.path.unwrap_or_default();
    let read = examine(&located.file, Some(&journal), &wanted, &id, checkpoint, true)?;
    if read.batches.is_empty() { Ok(()) } else { Err(OpenError::JournalPending { path: journal }) }
}

/// A new random journal id.
#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
fn fresh_id() -> [u8; 16] {
    *uuid::Uuid::new_v4().as_bytes()
}

// The WebAssembly build keeps no journal (its open refuses one before this is reached); this
// only keeps the module compiling there.
#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
fn fresh_id() -> [u8; 16] {
    [0; 16]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Store;
    use crate::tables::META_JOURNAL_CHECKPOINT;

    /// A development build's journal format 1 left a checkpoint without a journal id. No
    /// release wrote it: such metadata is refused as malformed, and the file is not changed.
    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn a_checkpoint_without_a_journal_id_is_refused_as_malformed() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("s.idemdb");
        drop(Store::builder().journal(false).open(&path).expect("create"));
        {
            let db = redb::Database::open(&path).expect("db");
            let tx = db.begin_write().expect("tx");
            tx.open_table(META)
                .expect("meta")
                .insert(META_JOURNAL_CHECKPOINT, 4u64.to_be_bytes().as_slice())
                .expect("put");
            tx.commit().expect("commit");
        }
        let before = fs::read(&path).expect("read");
        let refused = Store::builder().journal(true).open(&path);
        assert!(
            matches!(&refused, Err(OpenError::CorruptMeta(what)) if what.contains("journal id")),
            "{:?}",
            refused.err()
        );
        assert!(fs::read(&path).expect("read") == before, "the refused open changed nothing");
    }

    /// Recovering a renamed store removed its earlier journal by path after releasing its lock:
    /// a new store that had opened a journal at that name meanwhile lost it. The earlier file
    /// is now removed while it is still held, and only if the name still leads to it.
    #[cfg(unix)]
    #[test]
    fn an_earlier_journal_is_removed_only_while_the_name_still_leads_to_it() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("old.idemdb-journal");
        let hold = |path: &Path| {
            let file = open_journal(path, Access::Write { create: false }).expect("open").expect("exists");
            let identity = identity_of(&file);
            Located { file: backend(file, path).expect("backend"), path: Some(path.to_path_buf()), identity }
        };
        fs::write(&path, b"the recovered journal").expect("write");
        let located = hold(&path);
        // Another store's journal replaces the name before the removal.
        let other = dir.path().join("new-journal");
        fs::write(&other, b"a new store's live journal").expect("write");
        fs::rename(&other, &path).expect("rename over");
        let mut report = JournalRecovery::default();
        retire(located, None, &mut report, 0);
        assert_eq!(fs::read(&path).expect("kept"), b"a new store's live journal", "the new file is never removed");
        assert!(report.removed.is_none());
        // Still the file that was read: removed, and reported.
        let located = hold(&path);
        retire(located, None, &mut report, 0);
        assert!(!path.exists());
        assert_eq!(report.removed.as_deref(), Some(path.as_path()));

        // A store file beside the earlier journal that is not the recovered store (a copy
        // made with its journal): the journal is that copy's too, and stays.
        fs::write(&path, b"the journal a copy still needs").expect("write");
        fs::write(dir.path().join("old.idemdb"), b"a copy of the store").expect("write");
        let mut report = JournalRecovery::default();
        retire(hold(&path), Some([9; 16]), &mut report, 0);
        assert_eq!(fs::read(&path).expect("kept"), b"the journal a copy still needs");
        assert!(report.removed.is_none());
    }
}
