//! Durable single-caller workloads, interleaved round by round so that drift of the disk hits
//! every system alike: the write+fdatasync floor, raw redb, idemdb and SQLite.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use idemdb::redb::{self, ReadableDatabase, ReadableTableMetadata, TableDefinition, WriteTransaction};
use idemdb::{Executed, Reservation, Reserve, Scope, Store};
use idemdb_core::encode_record;

use crate::backend::{CountingBackend, Io, IoCounters};
use crate::data::{self, Res};
use crate::measure::{Run, Series, Summary, timed};
use crate::sqlite;

/// The one table of the raw redb baseline: the same key and value bytes idemdb stores.
pub(crate) const RAW: TableDefinition<&[u8], &[u8]> = TableDefinition::new("records");
/// The application's own table for same-database effects.
const PAYMENTS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("app_payments");

/// An idemdb store on the counting backend.
pub(crate) struct Counted<T> {
    pub(crate) inner: T,
    /// Every call that reached the store's files (its journal included).
    pub(crate) counters: Arc<IoCounters>,
    /// The journal's calls alone, when the store journals.
    pub(crate) journal: Option<Arc<IoCounters>>,
}

/// Opens an idemdb file store with immediate durability and the journal off, through the
/// counting backend.
pub(crate) fn open_store(path: &Path, audit: bool) -> Res<Counted<Store>> {
    let (backend, counters) = CountingBackend::open(path)?;
    let inner = Store::builder().audit(audit).journal(false).open_backend(backend)?;
    Ok(Counted { inner, counters, journal: None })
}

/// Opens an idemdb file store with the default settings (immediate durability, the journal on,
/// `<path>-journal`), both files through counting backends; the application's table is
/// registered, so its rows ride the journal.
pub(crate) fn open_store_journaled(path: &Path, audit: bool) -> Res<Counted<Store>> {
    let (backend, counters) = CountingBackend::open(path)?;
    let journal = Arc::new(IoCounters::default());
    let mut journal_path = path.as_os_str().to_os_string();
    journal_path.push("-journal");
    let journal_file =
        CountingBackend::open_shared(Path::new(&journal_path), Arc::clone(&counters), Arc::clone(&journal))?;
    let inner = Store::builder()
        .audit(audit)
        .journal(true)
        .journaled_table(PAYMENTS)
        .open_backend_with_journal(backend, journal_file)?;
    Ok(Counted { inner, counters, journal: Some(journal) })
}

/// Journal flushes against journal records and checkpoints over some calls.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct JournalIo {
    /// `fdatasync` calls on the journal file.
    pub(crate) journal_syncs: u64,
    /// Journal records appended (one per group-commit batch).
    pub(crate) appends: u64,
    /// Checkpoints (durable redb commits).
    pub(crate) checkpoints: u64,
    /// `fdatasync` calls on the store file (the checkpoints').
    pub(crate) store_syncs: u64,
    /// Calls made.
    pub(crate) ops: u64,
}

impl JournalIo {
    /// The counts of `store` now (`ops` 0).
    pub(crate) fn now(store: &Counted<Store>) -> JournalIo {
        let stats = store.inner.journal_stats().unwrap_or_default();
        let journal = store.journal.as_ref().map_or(0, |j| j.snapshot().syncs);
        JournalIo {
            journal_syncs: journal,
            appends: stats.appends,
            checkpoints: stats.checkpoints,
            store_syncs: store.counters.snapshot().syncs - journal,
            ops: 0,
        }
    }

    /// What happened between `earlier` and `self`, over `ops` calls.
    pub(crate) fn since(self, earlier: JournalIo, ops: u64) -> JournalIo {
        JournalIo {
            journal_syncs: self.journal_syncs - earlier.journal_syncs,
            appends: self.appends - earlier.appends,
            checkpoints: self.checkpoints - earlier.checkpoints,
            store_syncs: self.store_syncs - earlier.store_syncs,
            ops,
        }
    }

    pub(crate) fn add(&mut self, other: JournalIo) {
        self.journal_syncs += other.journal_syncs;
        self.appends += other.appends;
        self.checkpoints += other.checkpoints;
        self.store_syncs += other.store_syncs;
        self.ops += other.ops;
    }
}

/// Opens a raw redb database through the counting backend.
pub(crate) fn open_raw(path: &Path) -> Res<Counted<redb::Database>> {
    let (backend, counters) = CountingBackend::open(path)?;
    let inner = redb::Builder::new().create_with_backend(backend)?;
    Ok(Counted { inner, counters, journal: None })
}

/// Blocks of the in-place floor's file.
const IN_PLACE_BLOCKS: usize = 64;

/// Every row of the single-caller section.
pub(crate) struct Durable {
    pub(crate) floor: Summary,
    pub(crate) floor_in_place: Summary,
    pub(crate) raw_redb: Summary,
    pub(crate) reserve: Summary,
    pub(crate) reserve_no_audit: Summary,
    pub(crate) complete: Summary,
    pub(crate) reserve_complete: Summary,
    pub(crate) two_commit: Summary,
    pub(crate) execute: Summary,
    pub(crate) journal_reserve: Summary,
    pub(crate) journal_complete: Summary,
    pub(crate) journal_two_commit: Summary,
    pub(crate) journal_execute: Summary,
    /// Journal flushes of the journaled reserve and complete runs.
    pub(crate) journal_io: JournalIo,
    pub(crate) sqlite_full_reserve: Option<Summary>,
    pub(crate) sqlite_full_complete: Option<Summary>,
    pub(crate) sqlite_full_one_txn: Option<Summary>,
    pub(crate) sqlite_normal_reserve: Option<Summary>,
    pub(crate) sqlite_normal_complete: Option<Summary>,
}

/// Key-space offset of workload `w` in round `r` (each round has fewer than 2^28 requests).
fn base(w: u64, round: usize) -> u64 {
    (w << 40) + ((round as u64) << 28)
}

fn acquired(reservation: Reservation) -> Res<idemdb::Lease> {
    match reservation {
        Reservation::Acquired(lease) => Ok(lease),
        other => Err(format!("expected a fresh reservation, got {}", other.name()).into()),
    }
}

/// The two-commit path of a same-database effect: reserve (one commit), then the application
/// row and the completion in a second.
fn reserve_then_write(store: &Store, scope: &Scope, r: &data::Request, body: &[u8]) -> Res<()> {
    let lease = acquired(store.reserve(Reserve::new(scope, &r.key, &r.fingerprint))?)?;
    store.write(|txn| -> Result<(), idemdb::Error> {
        txn.tables_checkpointing()
            .open_table(PAYMENTS)
            .map_err(idemdb::Error::from)?
            .insert(r.encoded.as_slice(), &body[..64])
            .map_err(idemdb::Error::from)?;
        txn.complete(&lease, body.to_vec())
    })?;
    Ok(())
}

/// [`reserve_then_write`] with the application row journaled (`Txn::table`).
fn reserve_then_write_journaled(store: &Store, scope: &Scope, r: &data::Request, body: &[u8]) -> Res<()> {
    let lease = acquired(store.reserve(Reserve::new(scope, &r.key, &r.fingerprint))?)?;
    store.write(|txn| -> Result<(), idemdb::Error> {
        txn.table(PAYMENTS)?.insert(r.encoded.as_slice(), &body[..64])?;
        txn.complete(&lease, body.to_vec())
    })?;
    Ok(())
}

/// [`execute_once`] with the application row journaled (`Txn::table`).
fn execute_once_journaled(store: &Store, scope: &Scope, r: &data::Request, body: &[u8]) -> Res<()> {
    let executed = store.execute(Reserve::new(scope, &r.key, &r.fingerprint), |txn| {
        txn.table(PAYMENTS)?.insert(r.encoded.as_slice(), &body[..64])?;
        Ok::<_, idemdb::Error>(body.to_vec())
    })?;
    match executed {
        Executed::Ran { .. } => Ok(()),
        other => Err(format!("execute did not run: {other:?}").into()),
    }
}

/// The one-commit path: `execute` with the application row written through the escape hatch
/// (`Txn::tables_checkpointing`: a checkpoint).
fn execute_once(store: &Store, scope: &Scope, r: &data::Request, body: &[u8]) -> Res<()> {
    let executed = store.execute(Reserve::new(scope, &r.key, &r.fingerprint), |txn| {
        app_insert(txn.tables_checkpointing(), r.encoded.as_slice(), body)?;
        Ok::<_, redb::Error>(body.to_vec())
    })?;
    match executed {
        Executed::Ran { .. } => Ok(()),
        other => Err(format!("execute did not run: {other:?}").into()),
    }
}

fn app_insert(tables: &WriteTransaction, key: &[u8], body: &[u8]) -> Result<(), redb::Error> {
    tables.open_table(PAYMENTS)?.insert(key, &body[..64])?;
    Ok(())
}

pub(crate) fn run(dir: &Path, rounds: usize, n: usize) -> Res<Durable> {
    let scope = data::scope()?;
    let floor_file =
        OpenOptions::new().create(true).read(true).write(true).truncate(true).open(dir.join("floor.bin"))?;
    // A second floor without file growth: overwrite blocks of a preallocated, flushed file.
    let in_place_file =
        OpenOptions::new().create(true).read(true).write(true).truncate(true).open(dir.join("floor-in-place.bin"))?;
    in_place_file.write_all_at(&vec![0u8; IN_PLACE_BLOCKS * 4096], 0)?;
    in_place_file.sync_all()?;
    let raw = open_raw(&dir.join("raw.redb"))?;
    let store = open_store(&dir.join("idemdb.redb"), true)?;
    let store_no_audit = open_store(&dir.join("idemdb-no-audit.redb"), false)?;
    let journaled = open_store_journaled(&dir.join("idemdb-journal.redb"), true)?;
    let mut sqlite_full = sqlite::Durable::open(&dir.join("full.sqlite"), sqlite::Sync::Full)?;
    let mut sqlite_normal = sqlite::Durable::open(&dir.join("normal.sqlite"), sqlite::Sync::Normal)?;

    let mut floor = Series::new("floor: append 4 KiB + fdatasync");
    let mut floor_in_place = Series::new("floor: overwrite 4 KiB in place + fdatasync");
    let mut raw_redb = Series::new("raw redb: one-table insert, Immediate");
    let mut reserve = Series::new("idemdb reserve (default: audit on)");
    let mut reserve_no_audit = Series::new("idemdb reserve, audit off");
    let mut complete = Series::new("idemdb complete (200 B result)");
    let mut reserve_complete = Series::new("idemdb reserve + complete (2 commits)");
    let mut two_commit = Series::new("idemdb reserve; write(app row + complete)");
    let mut execute = Series::new("idemdb execute (app row, 1 commit)");
    let mut journal_reserve = Series::new("journal on: idemdb reserve");
    let mut journal_complete = Series::new("journal on: idemdb complete");
    let mut journal_two_commit = Series::new("journal on: reserve; write(app row + complete)");
    let mut journal_execute = Series::new("journal on: execute (app row, 1 commit)");
    let mut journal_io = JournalIo::default();
    let mut s_full_reserve = Series::new("SQLite FULL reserve");
    let mut s_full_complete = Series::new("SQLite FULL complete");
    let mut s_full_one = Series::new("SQLite FULL reserve+app row+complete, 1 txn");
    let mut s_normal_reserve = Series::new("SQLite NORMAL reserve");
    let mut s_normal_complete = Series::new("SQLite NORMAL complete");

    let block = vec![0xa5u8; 4096];
    let mut floor_offset = 0u64;
    for round in 0..rounds {
        // The physical floor: append one block and flush it.
        let mut run = timed(n, None, |_| {
            floor_file.write_all_at(&block, floor_offset)?;
            floor_offset += block.len() as u64;
            floor_file.sync_data()?;
            Ok(())
        })?;
        run.io = Some(Io { syncs: n as u64, writes: n as u64, bytes: (n * block.len()) as u64, grows: 0 });
        floor.push(run);
        let mut run = timed(n, None, |i| {
            in_place_file.write_all_at(&block, ((i % IN_PLACE_BLOCKS) * block.len()) as u64)?;
            in_place_file.sync_data()?;
            Ok(())
        })?;
        run.io = Some(Io { syncs: n as u64, writes: n as u64, bytes: (n * block.len()) as u64, grows: 0 });
        floor_in_place.push(run);

        // Raw redb: the same key and in-progress record bytes, one durable transaction each.
        let requests = data::requests(&scope, base(1, round), n)?;
        let values: Vec<Vec<u8>> = requests
            .iter()
            .map(|r| encode_record(&data::in_progress_record(r.fingerprint, crate::env::now_ms_u64())))
            .collect();
        raw_redb.push(timed(n, Some(&raw.counters), |i| {
            let mut tx = raw.inner.begin_write()?;
            tx.set_durability(redb::Durability::Immediate)?;
            tx.open_table(RAW)?.insert(requests[i].encoded.as_slice(), values[i].as_slice())?;
            tx.commit()?;
            Ok(())
        })?);

        // idemdb reserve, then complete the same records.
        let requests = data::requests(&scope, base(2, round), n)?;
        let mut leases = Vec::with_capacity(n);
        reserve.push(timed(n, Some(&store.counters), |i| {
            let r = &requests[i];
            leases.push(acquired(store.inner.reserve(Reserve::new(&scope, &r.key, &r.fingerprint))?)?);
            Ok(())
        })?);
        let bodies: Vec<Vec<u8>> = (0..n as u64).map(|i| data::result_body(base(2, round) + i)).collect();
        complete.push(timed(n, Some(&store.counters), |i| {
            store.inner.complete(&leases[i], bodies[i].clone())?;
            Ok(())
        })?);

        let requests = data::requests(&scope, base(3, round), n)?;
        reserve_no_audit.push(timed(n, Some(&store_no_audit.counters), |i| {
            let r = &requests[i];
            acquired(store_no_audit.inner.reserve(Reserve::new(&scope, &r.key, &r.fingerprint))?)?;
            Ok(())
        })?);

        // One request = reserve, then complete: two durable commits.
        let requests = data::requests(&scope, base(4, round), n)?;
        reserve_complete.push(timed(n, Some(&store.counters), |i| {
            let r = &requests[i];
            let lease = acquired(store.inner.reserve(Reserve::new(&scope, &r.key, &r.fingerprint))?)?;
            store.inner.complete(&lease, bodies[i].clone())?;
            Ok(())
        })?);

        // Same-database effect: the two-commit path against execute's single commit.
        let requests = data::requests(&scope, base(5, round), n)?;
        two_commit.push(timed(n, Some(&store.counters), |i| {
            reserve_then_write(&store.inner, &scope, &requests[i], &bodies[i])
        })?);
        let requests = data::requests(&scope, base(6, round), n)?;
        execute
            .push(timed(n, Some(&store.counters), |i| execute_once(&store.inner, &scope, &requests[i], &bodies[i]))?);

        // The same calls on a journaled store (the default of a file store).
        let requests = data::requests(&scope, base(10, round), n)?;
        let mut leases = Vec::with_capacity(n);
        let before = JournalIo::now(&journaled);
        journal_reserve.push(timed(n, Some(&journaled.counters), |i| {
            let r = &requests[i];
            leases.push(acquired(journaled.inner.reserve(Reserve::new(&scope, &r.key, &r.fingerprint))?)?);
            Ok(())
        })?);
        journal_complete.push(timed(n, Some(&journaled.counters), |i| {
            journaled.inner.complete(&leases[i], bodies[i].clone())?;
            Ok(())
        })?);
        journal_io.add(JournalIo::now(&journaled).since(before, 2 * n as u64));
        let requests = data::requests(&scope, base(11, round), n)?;
        journal_two_commit.push(timed(n, Some(&journaled.counters), |i| {
            reserve_then_write_journaled(&journaled.inner, &scope, &requests[i], &bodies[i])
        })?);
        let requests = data::requests(&scope, base(12, round), n)?;
        journal_execute.push(timed(n, Some(&journaled.counters), |i| {
            execute_once_journaled(&journaled.inner, &scope, &requests[i], &bodies[i])
        })?);

        // SQLite, same requests and fields.
        if let Some(db) = sqlite_full.as_mut() {
            let requests = data::requests(&scope, base(7, round), n)?;
            s_full_reserve.push(sqlite_run(n, |i| db.reserve(&requests[i], crate::env::now_ms()))?);
            s_full_complete.push(sqlite_run(n, |i| db.complete(&requests[i], &bodies[i], crate::env::now_ms()))?);
            let requests = data::requests(&scope, base(8, round), n)?;
            s_full_one
                .push(sqlite_run(n, |i| db.reserve_run_complete(&requests[i], &bodies[i], crate::env::now_ms()))?);
        }
        if let Some(db) = sqlite_normal.as_mut() {
            let requests = data::requests(&scope, base(9, round), n)?;
            s_normal_reserve.push(sqlite_run(n, |i| db.reserve(&requests[i], crate::env::now_ms()))?);
            s_normal_complete.push(sqlite_run(n, |i| db.complete(&requests[i], &bodies[i], crate::env::now_ms()))?);
        }
    }
    // Make sure what was reserved reads back (the harness measures a working store).
    let check = data::request(&scope, base(2, 0))?;
    if store.inner.get(&scope, &check.key)?.is_none() {
        return Err("idemdb lost a reserved record".into());
    }
    let check = data::request(&scope, base(10, 0))?;
    if journaled.inner.get(&scope, &check.key)?.is_none() {
        return Err("idemdb with the journal lost a reserved record".into());
    }
    let raw_count = raw.inner.begin_read()?.open_table(RAW)?.len()?;
    if raw_count != (rounds * n) as u64 {
        return Err(format!("raw redb holds {raw_count} rows, expected {}", rounds * n).into());
    }

    let sqlite_summary = |series: &Series, present: bool| present.then(|| series.summary());
    Ok(Durable {
        floor: floor.summary().with_note("physical floor (one append and one flush)"),
        floor_in_place: floor_in_place.summary().with_note("no file-size change to journal"),
        raw_redb: raw_redb.summary(),
        reserve: reserve.summary(),
        reserve_no_audit: reserve_no_audit.summary(),
        complete: complete.summary(),
        reserve_complete: reserve_complete.summary().with_note("per request"),
        two_commit: two_commit.summary().with_note("per request"),
        execute: execute.summary().with_note("per request"),
        journal_reserve: journal_reserve.summary(),
        journal_complete: journal_complete.summary(),
        journal_two_commit: journal_two_commit.summary().with_note("per request"),
        journal_execute: journal_execute.summary().with_note("per request"),
        journal_io,
        sqlite_full_reserve: sqlite_summary(&s_full_reserve, sqlite_full.is_some()),
        sqlite_full_complete: sqlite_summary(&s_full_complete, sqlite_full.is_some()),
        sqlite_full_one_txn: sqlite_summary(&s_full_one, sqlite_full.is_some()).map(|s| s.with_note("per request")),
        sqlite_normal_reserve: sqlite_summary(&s_normal_reserve, sqlite_normal.is_some())
            .map(|s| s.with_note("not durable on power loss")),
        sqlite_normal_complete: sqlite_summary(&s_normal_complete, sqlite_normal.is_some())
            .map(|s| s.with_note("not durable on power loss")),
    })
}

/// SQLite runs have no redb counters; `/proc/self/io` gives their device bytes.
fn sqlite_run(n: usize, op: impl FnMut(usize) -> Res<()>) -> Res<Run> {
    timed(n, None, op)
}
