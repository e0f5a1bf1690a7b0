//! The write-ahead journal: commits acknowledged through the journal survive a crash (a copy
//! of the store file and its journal taken while the store is open), a clean close leaves one
//! complete file, and everything that opens a store sees journaled data.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use idemdb::redb::StorageBackend;
use idemdb::redb::backends::InMemoryBackend;
use idemdb::{
    CHECKPOINT_RECORDS, Error, ManualClock, OpenError, Reservation, Reserve, Scope, StateKind, Store, StoreBuilder,
    rebuild,
};
use idemdb_tests::{T0, fp, key, scope};

const ORDERS: idemdb::redb::TableDefinition<&str, u64> = idemdb::redb::TableDefinition::new("app_orders");

fn builder(clock: &ManualClock) -> StoreBuilder {
    Store::builder().clock(clock.clone()).journal(true).journal_bytes(1 << 20)
}

fn journal_of(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push("-journal");
    PathBuf::from(name)
}

/// What a crash at this instant leaves: the store file and its journal as they are now.
fn crash_copy(path: &Path, to: &Path, with_journal: bool) {
    fs::copy(path, to).expect("copy the store file");
    if with_journal {
        fs::copy(journal_of(path), journal_of(to)).expect("copy the journal");
    }
}

/// Reserves and completes `n` keys `k-{from}..`, one group commit each.
fn complete_keys(store: &Store, scope: &Scope, from: usize, n: usize) {
    for i in from..from + n {
        let Reservation::Acquired(lease) =
            store.reserve(Reserve::new(scope, &key(&format!("k-{i}")), &fp(1))).expect("reserve")
        else {
            panic!("k-{i} is new");
        };
        store.complete(&lease, format!("result {i}").into_bytes()).expect("complete");
    }
}

/// How many of `k-0..k-{n}` a store holds completed with their result (lost = n − this).
fn completed(store: &Store, scope: &Scope, n: usize) -> usize {
    (0..n)
        .filter(|i| {
            let record = store.get(scope, &key(&format!("k-{i}"))).expect("get");
            record.is_some_and(|record| {
                record.state.kind() == StateKind::Completed
                    && matches!(
                        store.reserve(Reserve::new(scope, &key(&format!("k-{i}")), &fp(1))).expect("replay"),
                        Reservation::Replay { ref body, .. } if *body == format!("result {i}").into_bytes()
                    )
            })
        })
        .count()
}

#[test]
fn acknowledged_journaled_commits_survive_a_crash_and_only_the_journal_holds_them() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = ManualClock::new(T0);
    let path = dir.path().join("live.idemdb");
    let scope = scope("acme", "pay");
    let store = builder(&clock).open(&path).expect("open");
    complete_keys(&store, &scope, 0, 40);
    let stats = store.journal_stats().expect("journaled");
    assert_eq!(stats.appends, 80, "one journal record per commit (reserve, complete)");
    assert_eq!(stats.checkpoints, 0, "no checkpoint before {CHECKPOINT_RECORDS} records");

    let crashed = dir.path().join("crashed.idemdb");
    crash_copy(&path, &crashed, true);
    let file_only = dir.path().join("file-only.idemdb");
    crash_copy(&path, &file_only, false);
    {
        let recovered = builder(&clock).open(&crashed).expect("recovery");
        assert_eq!(completed(&recovered, &scope, 40), 40, "0 lost acknowledged commits");
    }
    {
        // Without its journal the file is at its last checkpoint (the commits never flushed
        // redb's pages), and its metadata says records may be pending: the open refuses rather
        // than silently losing them, and names where the journal should be.
        let refused = builder(&clock).open(&file_only);
        assert!(
            matches!(&refused, Err(OpenError::JournalMissing { journal, .. }) if *journal == journal_of(&fs::canonicalize(&file_only).expect("path"))),
            "{refused:?}"
        );
        // An operator who accepts the loss opens it at its last checkpoint.
        let alone = builder(&clock).discard_lost_journal(true).open(&file_only).expect("the file alone opens");
        assert_eq!(alone.stats().expect("stats").records, 0);
    }
    // A recovered copy is checkpointed and closed cleanly: its file alone holds everything.
    let again = dir.path().join("again.idemdb");
    crash_copy(&crashed, &again, false);
    let reopened = builder(&clock).open(&again).expect("open");
    assert_eq!(completed(&reopened, &scope, 40), 40);
}

#[test]
fn a_clean_close_leaves_one_complete_file_and_read_only_opens_refuse_a_pending_journal() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = ManualClock::new(T0);
    let path = dir.path().join("live.idemdb");
    let scope = scope("acme", "pay");
    let store = builder(&clock).open(&path).expect("open");
    complete_keys(&store, &scope, 0, 10);
    let crashed = dir.path().join("crashed.idemdb");
    crash_copy(&path, &crashed, true);
    drop(store);

    let alone = dir.path().join("alone.idemdb");
    crash_copy(&path, &alone, false);
    assert_eq!(completed(&builder(&clock).open(&alone).expect("open"), &scope, 10), 10, "closed: the file is complete");
    let read_only = builder(&clock).open_read_only(&path).expect("a closed store opens read-only");
    assert_eq!(read_only.stats().expect("stats").records, 10);
    drop(read_only);

    let refused = builder(&clock).open_read_only(&crashed);
    assert!(
        matches!(refused, Err(OpenError::JournalPending { .. } | OpenError::NeedsRecovery)),
        "a read-only open cannot replay: {refused:?}"
    );
    drop(builder(&clock).open(&crashed).expect("a write open replays"));
    let read_only = builder(&clock).open_read_only(&crashed).expect("then it opens read-only");
    assert_eq!(read_only.stats().expect("stats").records, 10);
}

#[test]
fn application_tables_commit_durably_and_periodic_checkpoints_bound_the_journal() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = ManualClock::new(T0);
    let path = dir.path().join("live.idemdb");
    let scope = scope("acme", "pay");
    let store = builder(&clock).open(&path).expect("open");
    let Reservation::Acquired(lease) = store.reserve(Reserve::new(&scope, &key("order-1"), &fp(1))).expect("reserve")
    else {
        panic!("new");
    };
    store
        .write(|txn| {
            txn.tables_checkpointing()
                .open_table(ORDERS)
                .map_err(Error::from)?
                .insert("order-1", 1050)
                .map_err(Error::from)?;
            txn.complete(&lease, b"placed".to_vec())
        })
        .expect("write");
    assert_eq!(store.journal_stats().expect("journaled").checkpoints, 1, "a transaction with app tables checkpoints");
    let alone = dir.path().join("alone.idemdb");
    crash_copy(&path, &alone, false);
    {
        // The file alone (its journal given up) already holds the checkpointed transaction.
        let copy = builder(&clock).discard_lost_journal(true).open(&alone).expect("open");
        let order = copy
            .read(|tx| -> Result<Option<u64>, Error> {
                Ok(tx.open_table(ORDERS).map_err(Error::from)?.get("order-1").map_err(Error::from)?.map(|v| v.value()))
            })
            .expect("read");
        assert_eq!(order, Some(1050), "the app write is in the file itself");
        assert_eq!(copy.get(&scope, &key("order-1")).expect("get").map(|r| r.state.kind()), Some(StateKind::Completed));
    }

    // Past the record bound, a commit is a checkpoint: the file alone then holds the commits
    // before it.
    let n = usize::try_from(CHECKPOINT_RECORDS).expect("small") / 2 + 20;
    complete_keys(&store, &scope, 0, n);
    let stats = store.journal_stats().expect("journaled");
    assert!(stats.checkpoints >= 2, "{stats:?}");
    let alone = dir.path().join("alone-2.idemdb");
    crash_copy(&path, &alone, false);
    let copy = builder(&clock).discard_lost_journal(true).open(&alone).expect("open");
    let in_file = completed(&copy, &scope, n);
    assert!(in_file >= usize::try_from(CHECKPOINT_RECORDS).expect("small") / 2 - 1, "{in_file} in the file");
    drop(copy);
    let crashed = dir.path().join("crashed.idemdb");
    crash_copy(&path, &crashed, true);
    assert_eq!(completed(&builder(&clock).open(&crashed).expect("open"), &scope, n), n, "0 lost");
}

#[test]
fn rebuild_verify_and_a_journal_off_open_see_journaled_commits() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = ManualClock::new(T0);
    let path = dir.path().join("live.idemdb");
    let scope = scope("acme", "pay");
    let store = builder(&clock).open(&path).expect("open");
    complete_keys(&store, &scope, 0, 25);
    for name in ["rebuilt", "off", "verified"] {
        crash_copy(&path, &dir.path().join(format!("{name}.idemdb")), true);
    }
    drop(store);

    let rebuilt = dir.path().join("rebuilt.idemdb");
    let report = rebuild(&rebuilt).expect("rebuild replays, then copies");
    assert_eq!(report.records, 25);
    let reopened = builder(&clock).open(&rebuilt).expect("the rebuilt store opens");
    assert_eq!(completed(&reopened, &scope, 25), 25);
    drop(reopened);

    let off = dir.path().join("off.idemdb");
    let store = builder(&clock).journal(false).open(&off).expect("open with the journal off");
    assert!(store.journal_stats().is_none());
    assert_eq!(completed(&store, &scope, 25), 25, "replayed although the journal is off");
    complete_keys(&store, &scope, 25, 5);
    drop(store);
    let store = builder(&clock).open(&off).expect("and on again");
    assert_eq!(completed(&store, &scope, 30), 30, "nothing stale was replayed over the direct commits");
    drop(store);

    let mut verified = builder(&clock).open(dir.path().join("verified.idemdb")).expect("open");
    let report = verified.verify().expect("verify");
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(report.records, 25);
}

#[test]
fn a_torn_last_record_is_dropped_and_another_stores_journal_is_refused() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = ManualClock::new(T0);
    let path = dir.path().join("live.idemdb");
    let scope = scope("acme", "pay");
    let store = builder(&clock).open(&path).expect("open");
    complete_keys(&store, &scope, 0, 3);
    let crashed = dir.path().join("crashed.idemdb");
    crash_copy(&path, &crashed, true);
    drop(store);
    // Record 6 (the last completion) lost its last sector: the write was torn.
    let journal = journal_of(&crashed);
    let mut bytes = fs::read(&journal).expect("journal");
    let last = 6 * 4096;
    bytes[last + 4096 - 512..last + 4096].fill(0);
    bytes[last + 100] ^= 0xff;
    fs::write(&journal, &bytes).expect("tear");
    let recovered = builder(&clock).open(&crashed).expect("a torn record ends recovery");
    assert_eq!(completed(&recovered, &scope, 2), 2);
    assert_eq!(
        recovered.get(&scope, &key("k-2")).expect("get").map(|r| r.state.kind()),
        Some(StateKind::InProgress),
        "the torn completion was never acknowledged; its reservation was"
    );
    drop(recovered);

    // Another store's journal beside this one is never applied: beside a store closed
    // cleanly it is not even read (and is re-created), beside a crashed one it is refused.
    let other = dir.path().join("other.idemdb");
    drop(builder(&clock).open(&other).expect("other"));
    fs::copy(journal_of(&crashed), journal_of(&other)).expect("swap journals");
    let reopened = builder(&clock).open(&other).expect("a closed store needs no journal");
    assert_eq!(reopened.stats().expect("stats").records, 0, "nothing of the other journal applied");
    complete_keys(&reopened, &scope, 100, 2);
    let other_crashed = dir.path().join("other-crashed.idemdb");
    crash_copy(&other, &other_crashed, false);
    drop(reopened);
    fs::copy(journal_of(&crashed), journal_of(&other_crashed)).expect("swap journals");
    let refused = builder(&clock).open(&other_crashed);
    assert!(matches!(refused, Err(OpenError::JournalForeign { .. })), "{refused:?}");
}

/// An in-memory file whose writes can be made to fail, and whose storage operations (writes
/// and syncs) can be made to stop for good after a countdown (a machine that dies there: what
/// was written before stays, as if every unsynced write had reached the disk).
#[derive(Debug, Clone, Default)]
struct Flaky {
    image: Arc<InMemoryBackend>,
    fail_writes: Arc<Mutex<bool>>,
    writes: Arc<AtomicU64>,
    /// Operations left before every later one fails.
    countdown: Arc<Mutex<Option<u64>>>,
}

impl Flaky {
    fn from_image(bytes: &[u8]) -> Flaky {
        let flaky = Flaky::default();
        flaky.image.set_len(bytes.len() as u64).expect("len");
        flaky.image.write(0, bytes).expect("write");
        flaky
    }

    fn snapshot(&self) -> Vec<u8> {
        let mut out = vec![0; usize::try_from(self.image.len().expect("len")).expect("small")];
        self.image.read(0, &mut out).expect("read");
        out
    }

    fn tick(&self) -> Result<(), std::io::Error> {
        let mut countdown = self.countdown.lock().expect("lock");
        match countdown.as_mut() {
            Some(0) => Err(std::io::Error::other("the machine is down")),
            Some(left) => {
                *left -= 1;
                Ok(())
            }
            None => Ok(()),
        }
    }
}

impl StorageBackend for Flaky {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.image.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.image.read(offset, out)
    }
    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.tick()?;
        self.image.set_len(len)
    }
    fn sync_data(&self) -> Result<(), std::io::Error> {
        self.tick()?;
        self.image.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        if *self.fail_writes.lock().expect("lock") {
            return Err(std::io::Error::other("injected"));
        }
        self.tick()?;
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.image.write(offset, data)
    }
}

fn open_on(clock: &ManualClock, file: &Flaky, journal: &Flaky) -> Result<Store, OpenError> {
    Store::builder()
        .clock(clock.clone())
        .secret_seed([5; 32])
        .journal_bytes(1 << 20)
        .open_backend_with_journal(file.clone(), journal.clone())
}

#[test]
fn a_crash_at_every_operation_of_recovery_leaves_a_store_that_recovers_the_same() {
    let clock = ManualClock::new(T0);
    let scope = scope("acme", "pay");
    let (file, journal) = (Flaky::default(), Flaky::default());
    let store = open_on(&clock, &file, &journal).expect("open");
    complete_keys(&store, &scope, 0, 5);
    let stats = store.journal_stats().expect("journaled");
    assert_eq!((stats.appends, stats.checkpoints), (10, 0), "every commit only in the journal");
    // The crash: both files as they are, the store never closed.
    let (file_image, journal_image) = (file.snapshot(), journal.snapshot());
    drop(store);

    let mut crashed_inside = 0;
    for budget in 0.. {
        let (file, journal) = (Flaky::from_image(&file_image), Flaky::from_image(&journal_image));
        *file.countdown.lock().expect("lock") = Some(budget);
        *journal.countdown.lock().expect("lock") = Some(budget);
        let first = open_on(&clock, &file, &journal);
        let finished = first.is_ok();
        drop(first);
        // The machine died at that operation of recovery (or later, on close): restart it.
        *file.countdown.lock().expect("lock") = None;
        *journal.countdown.lock().expect("lock") = None;
        let (file, journal) = (Flaky::from_image(&file.snapshot()), Flaky::from_image(&journal.snapshot()));
        let recovered = open_on(&clock, &file, &journal).expect("a store whose recovery crashed opens");
        assert_eq!(completed(&recovered, &scope, 5), 5, "budget {budget}: 0 lost acknowledged commits");
        assert_eq!(recovered.stats().expect("stats").records, 5, "budget {budget}: nothing applied twice or lost");
        drop(recovered);
        if finished {
            break;
        }
        crashed_inside += 1;
    }
    assert!(crashed_inside >= 3, "recovery took several operations, each one crashed once: {crashed_inside}");
}

#[test]
fn a_record_with_a_bad_checksum_stops_replay_even_with_good_records_after_it() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = ManualClock::new(T0);
    let path = dir.path().join("live.idemdb");
    let scope = scope("acme", "pay");
    let store = builder(&clock).open(&path).expect("open");
    complete_keys(&store, &scope, 0, 4);
    let crashed = dir.path().join("crashed.idemdb");
    crash_copy(&path, &crashed, true);
    drop(store);
    // Records 1..8 sit at blocks 1..8: flip one payload byte of record 3 (k-1's reservation).
    let journal = journal_of(&crashed);
    let mut bytes = fs::read(&journal).expect("journal");
    bytes[3 * 4096 + 40] ^= 0x01;
    fs::write(&journal, &bytes).expect("damage");
    // Intact records follow the bad one: an open refuses (they cannot be applied in order) and
    // says so; only a discard applies the records before it, keeping the file aside.
    let refused = builder(&clock).open(&crashed);
    assert!(
        matches!(&refused, Err(OpenError::JournalDamaged { reason, .. }) if reason.contains("5 intact record(s) follow it")),
        "{refused:?}"
    );
    let recovered =
        builder(&clock).discard_lost_journal(true).open(&crashed).expect("recovery stops at the bad record");
    let report = recovered.journal_recovery().expect("report");
    assert_eq!((report.applied, report.given_up, report.set_aside.len()), (2, 5, 1), "{report:?}");
    assert_eq!(completed(&recovered, &scope, 1), 1, "records 1 and 2 applied");
    for i in 1..4 {
        assert!(
            recovered.get(&scope, &key(&format!("k-{i}"))).expect("get").is_none(),
            "k-{i}: nothing after the bad record is applied"
        );
    }
    assert_eq!(recovered.stats().expect("stats").records, 1);
}

#[test]
fn with_the_journal_off_commits_flush_redb_and_no_journal_file_is_made() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = ManualClock::new(T0);
    let path = dir.path().join("live.idemdb");
    let scope = scope("acme", "pay");
    let store = builder(&clock).journal(false).open(&path).expect("open");
    assert!(store.journal_stats().is_none());
    complete_keys(&store, &scope, 0, 6);
    assert!(!journal_of(&path).exists(), "no journal file beside the store");
    // Every commit is in the file itself while the store is open.
    let alone = dir.path().join("alone.idemdb");
    crash_copy(&path, &alone, false);
    assert_eq!(completed(&builder(&clock).journal(false).open(&alone).expect("open"), &scope, 6), 6);
    // Eventual durability never journals either.
    let eventual = dir.path().join("eventual.idemdb");
    let store = builder(&clock).durability(idemdb::Durability::Eventual).open(&eventual).expect("open");
    assert!(store.journal_stats().is_none());
    assert!(!journal_of(&eventual).exists());
}

#[test]
fn a_failed_journal_write_stops_the_handle_and_a_reopen_agrees_with_what_was_acknowledged() {
    let clock = ManualClock::new(T0);
    let (file, journal) = (Flaky::default(), Flaky::default());
    let open = || {
        Store::builder()
            .clock(clock.clone())
            .secret_seed([5; 32])
            .journal_bytes(1 << 16)
            .open_backend_with_journal(file.clone(), journal.clone())
            .expect("open")
    };
    let scope = scope("acme", "pay");
    let store = open();
    complete_keys(&store, &scope, 0, 3);
    *journal.fail_writes.lock().expect("lock") = true;
    let failed = store.reserve(Reserve::new(&scope, &key("k-3"), &fp(1)));
    assert!(matches!(failed, Err(Error::CommitUnknown(_))), "{failed:?}");
    *journal.fail_writes.lock().expect("lock") = false;
    assert!(
        matches!(store.reserve(Reserve::new(&scope, &key("k-4"), &fp(1))), Err(Error::JournalFailed)),
        "the handle refuses"
    );
    assert!(matches!(store.flush(), Err(Error::JournalFailed)));
    assert!(store.get(&scope, &key("k-3")).expect("reads still work").is_none(), "never visible");
    drop(store);
    let store = open();
    assert_eq!(completed(&store, &scope, 3), 3, "0 lost acknowledged commits");
    let answer = store.reserve(Reserve::new(&scope, &key("k-3"), &fp(1))).expect("the unknown commit is retried");
    assert!(matches!(answer, Reservation::Acquired(_)), "{answer:?}");
    assert_eq!(store.journal_stats().expect("journaled").appends, 1);
}

#[test]
fn row_tables_ride_the_journal_and_survive_a_crash_a_backup_and_a_rebuild_unregistered() {
    use idemdb::{BusinessWrite, RowTable};
    const PAYMENTS: RowTable = RowTable::new("app_payments");

    let dir = tempfile::tempdir().expect("dir");
    let clock = ManualClock::new(T0);
    let path = dir.path().join("live.idemdb");
    let scope = scope("acme", "pay");
    let store = builder(&clock).open(&path).expect("open");
    for i in 0..20 {
        let Reservation::Acquired(lease) =
            store.reserve(Reserve::new(&scope, &key(&format!("k-{i}")), &fp(1))).expect("reserve")
        else {
            panic!("k-{i} is new");
        };
        let write = BusinessWrite::new()
            .put(PAYMENTS, "acme", format!("pay-{i:02}"), format!("payment {i}").into_bytes())
            .complete(&lease, format!("result {i}").into_bytes());
        store.commit_business(write).expect("commit");
    }
    assert_eq!(store.journal_stats().expect("journaled").checkpoints, 0, "every commit was one journal append");

    // A crash: the file alone does not hold the rows, the journal does; an open that was not
    // told of the table replays them (every row table has one type).
    let crashed = dir.path().join("crashed.idemdb");
    crash_copy(&path, &crashed, true);
    let alone = dir.path().join("alone.idemdb");
    crash_copy(&path, &alone, false);
    let file_only = builder(&clock).discard_lost_journal(true).open(&alone).expect("open the file alone");
    assert!(file_only.rows(PAYMENTS, "acme", None, 0).expect("rows").len() < 20, "the rows were only in the journal");
    drop(file_only);
    let recovered = builder(&clock).open(&crashed).expect("recovery needs no registration");
    let rows = recovered.rows(PAYMENTS, "acme", None, 0).expect("rows");
    assert_eq!(rows.len(), 20, "0 lost");
    assert_eq!(rows[7].value, b"payment 7", "{:?}", rows[7]);
    assert_eq!(completed(&recovered, &scope, 20), 20);

    // A backup and a rebuild copy the row table without being told of it.
    let backup = dir.path().join("backup.idemdb");
    recovered.backup_to(&backup).expect("backup copies row tables unnamed");
    drop(recovered);
    let restored = builder(&clock).open(&backup).expect("open the backup");
    assert_eq!(restored.rows(PAYMENTS, "acme", None, 0).expect("rows"), rows, "the backup holds every row");
    drop(restored);
    rebuild(&crashed).expect("a rebuild copies row tables unnamed");
    let rebuilt = builder(&clock).open(&crashed).expect("open the rebuilt store");
    assert_eq!(rebuilt.rows(PAYMENTS, "acme", None, 0).expect("rows"), rows, "the rebuild kept every row");
    assert_eq!(completed(&rebuilt, &scope, 20), 20);
}
