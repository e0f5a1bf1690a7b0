//! The journal belongs to one store file, in one generation: regression tests for the ways an
//! operator's ordinary actions (a damaged sector, a symlink, a copy, a wiped header, a FIFO, a
//! rebuild) once made a store lose acknowledged commits or apply records that were not its own.
//! A crash is what `crash_copy` leaves: the store file and its journal copied while the store
//! is open.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use idemdb::{ManualClock, OpenError, Reservation, Reserve, Scope, StateKind, Store, StoreBuilder};
use idemdb_tests::{T0, fp, key, scope};

fn builder(clock: &ManualClock) -> StoreBuilder {
    Store::builder().clock(clock.clone()).journal(true).journal_bytes(1 << 20)
}

fn journal_of(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push("-journal");
    PathBuf::from(name)
}

/// What a crash at this instant leaves: the store file and its journal as they are now.
fn crash_copy(path: &Path, to: &Path) {
    fs::copy(path, to).expect("copy the store file");
    fs::copy(journal_of(path), journal_of(to)).expect("copy the journal");
}

fn complete(store: &Store, scope: &Scope, name: &str, body: &[u8]) {
    let Reservation::Acquired(lease) = store.reserve(Reserve::new(scope, &key(name), &fp(1))).expect("reserve") else {
        panic!("{name} is new");
    };
    store.complete(&lease, body.to_vec()).expect("complete");
}

/// The stored body of `name`, if it is completed.
fn body(store: &Store, scope: &Scope, name: &str) -> Option<Vec<u8>> {
    let record = store.get(scope, &key(name)).expect("get")?;
    if record.state.kind() != StateKind::Completed {
        return None;
    }
    match store.reserve(Reserve::new(scope, &key(name), &fp(1))).expect("replay") {
        Reservation::Replay { body, .. } => Some(body),
        other => panic!("{name}: {other:?}"),
    }
}

/// Finding 1: a recovery that stopped early at a damaged record left intact records of the
/// same run behind it; a later run's records lined up with them, and the next recovery applied
/// the old ones over the new: a 9,000-byte body replaced by an earlier 100-byte one, keys the
/// later run never wrote brought back. Records now carry their generation.
#[test]
fn records_left_behind_a_damaged_one_are_never_applied_after_a_later_run() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = ManualClock::new(T0);
    let scope = scope("acme", "pay");
    let live = dir.path().join("live.idemdb");
    let store = builder(&clock).open(&live).expect("open");
    // Ten one-block records: reserve and complete of k-0..k-4, 100-byte bodies.
    for i in 0..5 {
        complete(&store, &scope, &format!("k-{i}"), &[b'a'; 100]);
    }
    let first = dir.path().join("first.idemdb");
    crash_copy(&live, &first);
    drop(store);
    // One flipped byte in record 3 (k-1's reservation): recovery stops there.
    let journal = journal_of(&first);
    let mut bytes = fs::read(&journal).expect("journal");
    bytes[3 * 4096 + 40] ^= 0x55;
    fs::write(&journal, &bytes).expect("damage");

    let second = dir.path().join("second.idemdb");
    {
        // Intact records follow the damage: refused, then given up by the operator's discard.
        let refused = builder(&clock).open(&first);
        assert!(matches!(refused, Err(OpenError::JournalDamaged { .. })), "{refused:?}");
        let store = builder(&clock).discard_lost_journal(true).open(&first).expect("recovers a prefix");
        assert_eq!(store.journal_recovery().expect("report").given_up, 7);
        assert_eq!(body(&store, &scope, "k-0"), Some(vec![b'a'; 100]));
        for lost in ["k-1", "k-2", "k-3", "k-4"] {
            assert!(store.get(&scope, &key(lost)).expect("get").is_none(), "{lost} is behind the damage");
        }
        // The later run: k-3 again, with a body three blocks long, then a crash.
        complete(&store, &scope, "k-3", &[b'b'; 9000]);
        crash_copy(&first, &second);
    }
    let store = builder(&clock).open(&second).expect("open");
    assert_eq!(body(&store, &scope, "k-3"), Some(vec![b'b'; 9000]), "the later run's acknowledged body");
    for never in ["k-1", "k-2", "k-4"] {
        assert!(store.get(&scope, &key(never)).expect("get").is_none(), "{never} came back from an earlier run");
    }
    let mut verified = store;
    assert!(verified.verify().expect("verify").is_ok());
}

/// Finding 3: a store opened through a symlink journaled beside the link; an operator who
/// then wrote through the real path (after a crash) never saw those commits, and the app lost
/// them when it came back through the link.
#[cfg(unix)]
#[test]
fn a_store_reached_through_a_symlink_has_one_journal() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = ManualClock::new(T0);
    let scope = scope("acme", "pay");
    let real = dir.path().join("data").join("store.idemdb");
    fs::create_dir_all(real.parent().expect("parent")).expect("dir");
    let link = dir.path().join("app.idemdb");
    drop(builder(&clock).open(&real).expect("create"));
    std::os::unix::fs::symlink(&real, &link).expect("symlink");
    let acked = crash_writer(&link, &names("app", 20));
    assert_eq!(acked.len(), 20);
    assert!(!journal_of(&link).exists(), "no journal beside the link");
    {
        let operator = builder(&clock).open(&real).expect("the operator opens the real path");
        for name in &acked {
            assert_eq!(body(&operator, &scope, name), Some(b"ok".to_vec()), "the operator misses {name}");
        }
        complete(&operator, &scope, "op-1", b"by the operator");
    }
    let app = builder(&clock).open(&link).expect("the app comes back through the link");
    for name in &acked {
        assert_eq!(body(&app, &scope, name), Some(b"ok".to_vec()), "{name} lost");
    }
    assert_eq!(body(&app, &scope, "op-1"), Some(b"by the operator".to_vec()));
}

/// Runs [`child_writer`] in a child process (this test binary, filtered to it): it opens the
/// store at `path`, completes `names` with body `ok`, prints one line per acknowledgement and
/// aborts — a crash, with no destructor run. Returns the names acknowledged.
fn crash_writer(path: &Path, names: &[String]) -> Vec<String> {
    let output = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "journal_files::child_writer", "--ignored", "--nocapture", "--test-threads", "1"])
        .env("IDEMDB_CHILD_STORE", path)
        .env("IDEMDB_CHILD_KEYS", names.join(","))
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!output.status.success(), "the child crashes: {stdout}");
    // The harness prints "test … ... " before the child's first line, on the same line.
    stdout.lines().filter_map(|line| line.split("acked ").nth(1)).map(str::to_string).collect()
}

/// The child half of [`crash_writer`]; does nothing when run on its own.
#[test]
#[ignore = "run by crash_writer in a child process"]
fn child_writer() {
    let (Ok(path), Ok(keys)) = (std::env::var("IDEMDB_CHILD_STORE"), std::env::var("IDEMDB_CHILD_KEYS")) else {
        return;
    };
    let store = builder(&ManualClock::new(T0)).open(&path).expect("child open");
    let scope = scope("acme", "pay");
    for name in keys.split(',') {
        complete(&store, &scope, name, b"ok");
        println!("acked {name}");
    }
    std::process::abort();
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// Hard links and a rename after a crash: the same file under another name finds its journal
/// where it was last opened; a copy of the file never takes the original's journal.
#[cfg(unix)]
#[test]
fn a_renamed_or_hard_linked_store_finds_its_journal_and_a_copy_does_not() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = ManualClock::new(T0);
    let scope = scope("acme", "pay");
    let path = dir.path().join("a.idemdb");
    drop(builder(&clock).open(&path).expect("create"));
    let first = crash_writer(&path, &names("first", 12));
    assert_eq!(first.len(), 12);
    // Renamed after the crash; the journal stays where it was.
    let renamed = dir.path().join("renamed.idemdb");
    fs::rename(&path, &renamed).expect("rename");
    {
        let store = builder(&clock).open(&renamed).expect("the renamed file");
        for name in &first {
            assert_eq!(body(&store, &scope, name), Some(b"ok".to_vec()), "{name} lost after the rename");
        }
    }
    assert!(!journal_of(&path).exists(), "the earlier journal, recovered, is removed");
    // Written through one hard link, crashed, opened through another.
    let second = crash_writer(&renamed, &names("second", 8));
    let linked = dir.path().join("linked.idemdb");
    fs::hard_link(&renamed, &linked).expect("hard link");
    // A copy of the file (another inode) beside no journal never takes the original's.
    let copy = dir.path().join("copy.idemdb");
    fs::copy(&renamed, &copy).expect("copy");
    let refused = builder(&clock).open(&copy);
    assert!(matches!(refused, Err(OpenError::JournalMissing { .. })), "{refused:?}");
    let store = builder(&clock).open(&linked).expect("through the other hard link");
    for name in first.iter().chain(&second) {
        assert_eq!(body(&store, &scope, name), Some(b"ok".to_vec()), "{name} lost through the hard link");
    }
}

/// Finding 5: two stores that share a secret (one `secret_seed`, or a copied file) took each
/// other's journals: one applied the other's records and lost its own.
#[test]
fn stores_that_share_a_secret_never_take_each_others_journal() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = ManualClock::new(T0);
    let scope = scope("acme", "pay");
    let seeded = || builder(&clock).secret_seed([7; 32]);
    let (a, b) = (dir.path().join("a.idemdb"), dir.path().join("b.idemdb"));
    let (a_crash, b_crash) = (dir.path().join("a-crash.idemdb"), dir.path().join("b-crash.idemdb"));
    {
        let (store_a, store_b) = (seeded().open(&a).expect("a"), seeded().open(&b).expect("b"));
        complete(&store_a, &scope, "only-in-a", b"a");
        complete(&store_b, &scope, "only-in-b", b"b");
        crash_copy(&a, &a_crash);
        crash_copy(&b, &b_crash);
    }
    fs::copy(journal_of(&b_crash), journal_of(&a_crash)).expect("b's journal beside a");
    let refused = seeded().open(&a_crash);
    assert!(matches!(refused, Err(OpenError::JournalForeign { .. })), "{refused:?}");
    fs::copy(journal_of(&b_crash), journal_of(&b_crash).with_extension("keep")).expect("keep");
    let store_b = seeded().open(&b_crash).expect("b with its own journal");
    assert_eq!(body(&store_b, &scope, "only-in-b"), Some(b"b".to_vec()));
    assert!(store_b.get(&scope, &key("only-in-a")).expect("get").is_none());
}

/// Finding 6: a blank or short journal header was taken for an unfinished creation and the
/// journal re-initialised, dropping every acknowledged record; now each is a typed refusal
/// that changes nothing, and the store recovers everything once its journal is back.
#[test]
fn a_wiped_missing_or_short_journal_is_refused_and_nothing_is_lost() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = ManualClock::new(T0);
    let scope = scope("acme", "pay");
    let live = dir.path().join("live.idemdb");
    let store = builder(&clock).open(&live).expect("open");
    for i in 0..30 {
        complete(&store, &scope, &format!("k-{i}"), b"ok");
    }
    let crashed = dir.path().join("crashed.idemdb");
    crash_copy(&live, &crashed);
    drop(store);
    let journal = journal_of(&crashed);
    let good = fs::read(&journal).expect("journal");
    type Damage = fn(&Path, &[u8]);
    let cases: [(&str, Damage); 7] = [
        ("truncated after the header", |path, good| fs::write(path, &good[..4196]).expect("write")),
        ("first sector zeroed", |path, good| {
            let mut bytes = good.to_vec();
            bytes[..512].fill(0);
            bytes[512..1024].fill(0);
            fs::write(path, bytes).expect("write");
        }),
        ("emptied", |path, _| fs::write(path, b"").expect("write")),
        ("deleted", |path, _| fs::remove_file(path).expect("remove")),
        ("truncated below a block", |path, good| fs::write(path, &good[..4000]).expect("write")),
        ("replaced by a foreign file", |path, _| fs::write(path, vec![0x5a; 1000]).expect("write")),
        ("a dangling symlink", |path, _| {
            fs::remove_file(path).expect("remove");
            #[cfg(unix)]
            std::os::unix::fs::symlink(path.with_extension("nowhere"), path).expect("symlink");
        }),
    ];
    for (what, damage) in cases {
        damage(&journal, &good);
        let refused = builder(&clock).open(&crashed);
        assert!(
            matches!(refused, Err(OpenError::JournalMissing { .. } | OpenError::JournalDamaged { .. })),
            "{what}: {refused:?}"
        );
        let read_only = builder(&clock).open_read_only(&crashed);
        assert!(read_only.is_err(), "{what}: a read-only open does not show the store without its journal");
        let _ = fs::remove_file(&journal);
        fs::write(&journal, &good).expect("put the journal back");
    }
    let store = builder(&clock).open(&crashed).expect("with its journal back");
    for i in 0..30 {
        assert_eq!(body(&store, &scope, &format!("k-{i}")), Some(b"ok".to_vec()), "k-{i}");
    }
}

/// Finding 4: a FIFO at the journal's path hung every read-only open; now the type is checked
/// before any open, read-only or not.
#[cfg(unix)]
#[test]
fn a_fifo_at_the_journal_path_is_refused_without_waiting() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = ManualClock::new(T0);
    let scope = scope("acme", "pay");
    let live = dir.path().join("live.idemdb");
    let store = builder(&clock).open(&live).expect("open");
    complete(&store, &scope, "k-0", b"ok");
    let crashed = dir.path().join("crashed.idemdb");
    crash_copy(&live, &crashed);
    drop(store);
    for path in [&live, &crashed] {
        let journal = journal_of(path);
        fs::remove_file(&journal).expect("remove");
        assert!(std::process::Command::new("mkfifo").arg(&journal).status().expect("mkfifo").success());
        let (tx, rx) = std::sync::mpsc::channel();
        let (opened, clock2) = (path.clone(), clock.clone());
        std::thread::spawn(move || {
            let read_only = builder(&clock2).open_read_only(&opened).map(drop);
            let write = builder(&clock2).open(&opened).map(drop);
            let _ = tx.send((read_only, write));
        });
        let (read_only, write) = rx.recv_timeout(Duration::from_secs(20)).expect("the opens must not wait on a FIFO");
        assert!(matches!(write, Err(OpenError::NotAFile { .. })), "{write:?}");
        if path.ends_with("live.idemdb") {
            assert!(read_only.is_ok(), "a store closed cleanly never reads its journal: {read_only:?}");
        } else {
            // A crashed file needs redb's recovery first, or its journal is refused for its type.
            assert!(matches!(read_only, Err(OpenError::NotAFile { .. } | OpenError::NeedsRecovery)), "{read_only:?}");
        }
    }
}

/// A store file replaced by an older copy of itself (restored from a copy taken earlier in the
/// same run) beside the live journal: the journal is of a later generation than the file, and
/// holds commits the old file lacks; refused rather than silently losing them.
#[test]
fn an_older_copy_of_the_store_beside_a_later_journal_is_refused() {
    let dir = tempfile::tempdir().expect("dir");
    let clock = ManualClock::new(T0);
    let scope = scope("acme", "pay");
    let live = dir.path().join("live.idemdb");
    let store = builder(&clock).open(&live).expect("open");
    complete(&store, &scope, "early", b"ok");
    let old_file = dir.path().join("old.idemdb");
    fs::copy(&live, &old_file).expect("an early copy of the file");
    store.flush().expect("a checkpoint: the next generation");
    complete(&store, &scope, "late", b"ok");
    let restored = dir.path().join("restored.idemdb");
    crash_copy(&live, &restored);
    drop(store);
    fs::copy(&old_file, &restored).expect("the old file put back beside the later journal");
    let refused = builder(&clock).open(&restored);
    assert!(
        matches!(&refused, Err(OpenError::JournalForeign { reason, .. }) if reason.contains("older copy")),
        "{refused:?}"
    );
}

/// `compact --rebuild` used to copy only the store's own tables and drop an application's
/// (every payment row of the payments example): it now refuses, and changes nothing.
#[test]
fn a_rebuild_refuses_a_store_with_application_tables_instead_of_dropping_them() {
    const ORDERS: idemdb::redb::TableDefinition<&str, u64> = idemdb::redb::TableDefinition::new("app_orders");
    let dir = tempfile::tempdir().expect("dir");
    let clock = ManualClock::new(T0);
    let path = dir.path().join("app.idemdb");
    {
        let store = builder(&clock).open(&path).expect("open");
        store
            .write(|txn| -> Result<(), idemdb::Error> {
                txn.tables_checkpointing()
                    .open_table(ORDERS)
                    .map_err(idemdb::Error::from)?
                    .insert("o-1", 1050)
                    .map_err(idemdb::Error::from)?;
                Ok(())
            })
            .expect("write");
    }
    let refused = idemdb::rebuild(&path);
    assert!(
        matches!(&refused, Err(idemdb::RebuildError::UnknownTables(tables)) if tables == &["app_orders".to_string()]),
        "{refused:?}"
    );
    let store = builder(&clock).open(&path).expect("reopen");
    let order = store
        .read(|tx| -> Result<Option<u64>, idemdb::Error> {
            Ok(tx
                .open_table(ORDERS)
                .map_err(idemdb::Error::from)?
                .get("o-1")
                .map_err(idemdb::Error::from)?
                .map(|v| v.value()))
        })
        .expect("read");
    assert_eq!(order, Some(1050), "the application's row is still there");
}
