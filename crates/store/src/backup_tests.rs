//! Tests of [`Store::backup_with`]: completeness under concurrent writers, the destinations it
//! refuses, a full disk, application tables.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use idemdb_core::{Fingerprint, IdempotencyKey, Scope};
use redb::backends::FileBackend;
use redb::{ReadableTableMetadata, StorageBackend, TableDefinition};

use crate::backup::Hooks;
use crate::{BackupError, BackupOptions, Reservation, Reserve, Store};

fn complete(store: &Store, key: &str) {
    let scope = Scope::new("acme", "pay").expect("scope");
    let key = IdempotencyKey::new(key).expect("key");
    let Reservation::Acquired(lease) =
        store.reserve(Reserve::new(&scope, &key, &Fingerprint::from_bytes([7; 32]))).expect("reserve")
    else {
        panic!("a new key is acquired");
    };
    store.complete(&lease, b"done".to_vec()).expect("complete");
}

fn keys_in(path: &Path) -> BTreeSet<String> {
    let store = Store::open(path).expect("the backup opens alone");
    let listing = store.list(&crate::ListFilter { limit: 1_000_000, ..Default::default() }).expect("list");
    listing.records.into_iter().map(|listed| listed.scoped.key.as_str().to_string()).collect()
}

fn leftovers(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .expect("dir")
        .map(|entry| entry.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(".backup-"))
        .collect();
    names.sort();
    names
}

#[test]
fn a_backup_taken_while_writers_run_holds_every_acknowledged_completion() {
    let dir = tempfile::tempdir().expect("dir");
    let store = Store::open(dir.path().join("live.idemdb")).expect("open");
    for i in 0..200 {
        complete(&store, &format!("before-{i}"));
    }
    let acknowledged = Arc::new(Mutex::new(BTreeSet::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let (store, acknowledged, stop, written) =
                (store.clone(), Arc::clone(&acknowledged), Arc::clone(&stop), Arc::clone(&written));
            std::thread::spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("w{w}-{i}");
                    complete(&store, &key);
                    acknowledged.lock().expect("lock").insert(key);
                    written.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
            })
        })
        .collect();
    let mut checked = 0;
    for round in 0..5 {
        while written.load(Ordering::Relaxed) < (round + 1) * 50 {
            std::thread::yield_now();
        }
        let before: BTreeSet<String> = acknowledged.lock().expect("lock").clone();
        let path = dir.path().join(format!("backup-{round}.idemdb"));
        let report = store.backup_to(&path).expect("backup");
        let present = keys_in(&path);
        let missing: Vec<_> = before.difference(&present).collect();
        assert!(missing.is_empty(), "round {round}: {} acknowledged completions missing", missing.len());
        assert!((0..200).all(|i| present.contains(&format!("before-{i}"))));
        assert_eq!(report.records, present.len() as u64, "the report counts what the backup holds");
        checked += before.len();
    }
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.join().expect("writer");
    }
    assert!(checked > 0);
    assert!(leftovers(dir.path()).is_empty(), "no temporary left: {:?}", leftovers(dir.path()));
}

#[test]
fn destinations_a_backup_refuses() {
    let dir = tempfile::tempdir().expect("dir");
    let source = dir.path().join("live.idemdb");
    let store = Store::open(&source).expect("open");
    complete(&store, "k-1");
    let existing = dir.path().join("existing.idemdb");
    fs::write(&existing, b"keep me").expect("write");

    let refused = store.backup_to(&existing);
    assert!(matches!(refused, Err(BackupError::DestinationExists(_))), "{refused:?}");
    assert_eq!(fs::read(&existing).expect("read"), b"keep me", "an existing file is untouched");

    let refused = store.backup_to(&source);
    assert!(matches!(refused, Err(BackupError::SameFile { what: "file", .. })), "{refused:?}");
    let refused = store.backup_with(&source, BackupOptions::new().overwrite(true));
    assert!(matches!(refused, Err(BackupError::SameFile { what: "file", .. })), "{refused:?}");
    let journal = dir.path().join("live.idemdb-journal");
    assert!(journal.exists(), "the journal is on by default");
    let refused = store.backup_with(&journal, BackupOptions::new().overwrite(true));
    assert!(matches!(refused, Err(BackupError::SameFile { what: "journal", .. })), "{refused:?}");

    let missing = dir.path().join("no-such-dir").join("b.idemdb");
    let refused = store.backup_to(&missing);
    assert!(matches!(refused, Err(BackupError::NoDirectory(_))), "{refused:?}");
    assert!(!dir.path().join("no-such-dir").exists(), "the directory is not created");

    let refused = store.backup_with(dir.path(), BackupOptions::new().overwrite(true));
    assert!(matches!(refused, Err(BackupError::NotAFile { .. })), "{refused:?}");

    #[cfg(unix)]
    {
        let link = dir.path().join("link.idemdb");
        std::os::unix::fs::symlink(&source, &link).expect("symlink");
        let refused = store.backup_with(&link, BackupOptions::new().overwrite(true));
        assert!(matches!(refused, Err(BackupError::SameFile { .. })), "a link to the store: {refused:?}");
        let to_existing = dir.path().join("link-existing.idemdb");
        std::os::unix::fs::symlink(&existing, &to_existing).expect("symlink");
        let refused = store.backup_to(&to_existing);
        assert!(matches!(refused, Err(BackupError::DestinationExists(_))), "{refused:?}");
        let report = store.backup_with(&to_existing, BackupOptions::new().overwrite(true)).expect("overwrite");
        assert!(report.replaced);
        assert!(fs::symlink_metadata(&to_existing).expect("link").file_type().is_symlink(), "the link is kept");
        assert_eq!(report.path, fs::canonicalize(&existing).expect("target"));
        assert_eq!(keys_in(&existing).len(), 1, "the file the link names holds the backup");
    }
    assert_eq!(store.stats().expect("stats").records, 1, "the store is unchanged");
    assert!(leftovers(dir.path()).is_empty(), "{:?}", leftovers(dir.path()));
}

#[test]
fn overwrite_replaces_an_existing_backup() {
    let dir = tempfile::tempdir().expect("dir");
    let store = Store::open(dir.path().join("live.idemdb")).expect("open");
    complete(&store, "k-1");
    let path = dir.path().join("b.idemdb");
    assert!(!store.backup_to(&path).expect("first").replaced);
    complete(&store, "k-2");
    let report = store.backup_with(&path, BackupOptions::new().overwrite(true)).expect("second");
    assert!(report.replaced);
    assert_eq!(keys_in(&path), ["k-1".to_string(), "k-2".to_string()].into());
}

/// A replaced backup that had been opened (and so had a journal beside it) left that journal
/// behind: the new copy's first open found another store's journal at its name and set it
/// aside. The replaced store's journal, which held nothing it needed, now goes with it.
#[test]
fn overwrite_takes_the_replaced_stores_journal_with_it() {
    let dir = tempfile::tempdir().expect("dir");
    let store = Store::open(dir.path().join("live.idemdb")).expect("open");
    complete(&store, "k-1");
    let path = dir.path().join("b.idemdb");
    store.backup_to(&path).expect("first");
    drop(Store::open(&path).expect("the first backup, opened once"));
    let journal = dir.path().join("b.idemdb-journal");
    assert!(journal.exists(), "an opened store has a journal beside it");
    complete(&store, "k-2");
    assert!(store.backup_with(&path, BackupOptions::new().overwrite(true)).expect("second").replaced);
    assert!(!journal.exists(), "the replaced store's journal went with it");
    let reopened = Store::open(&path).expect("the second backup");
    assert!(reopened.journal_recovery().expect("report").set_aside.is_empty(), "nothing to set aside");
}

/// A file backend that fails every write, length change and sync with `ENOSPC` once `budget`
/// bytes were written.
struct FullDisk {
    inner: FileBackend,
    budget: AtomicU64,
}

impl std::fmt::Debug for FullDisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FullDisk")
    }
}

impl FullDisk {
    fn spend(&self, bytes: u64) -> Result<(), std::io::Error> {
        let left = self.budget.load(Ordering::Relaxed);
        if left < bytes {
            self.budget.store(0, Ordering::Relaxed);
            return Err(std::io::ErrorKind::StorageFull.into());
        }
        self.budget.store(left - bytes, Ordering::Relaxed);
        Ok(())
    }
}

impl StorageBackend for FullDisk {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.inner.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.inner.read(offset, out)
    }
    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        let grow = len.saturating_sub(self.inner.len()?);
        self.spend(grow)?;
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> Result<(), std::io::Error> {
        self.spend(0)?;
        self.inner.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        self.spend(data.len() as u64)?;
        self.inner.write(offset, data)
    }
}

#[test]
fn a_full_disk_is_a_typed_error_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().expect("dir");
    let store = Store::open(dir.path().join("live.idemdb")).expect("open");
    for i in 0..2_000 {
        complete(&store, &format!("k-{i}"));
    }
    let dest = dir.path().join("b.idemdb");
    for budget in [0u64, 64 * 1024, 512 * 1024] {
        let failed = store.backup_on(
            &dest,
            BackupOptions::new(),
            Hooks {
                backend: |file| {
                    Ok(FullDisk {
                        inner: FileBackend::new(file).map_err(crate::Error::from)?,
                        budget: AtomicU64::new(budget),
                    })
                },
                available: |_: &Path| Ok(None),
            },
        );
        let error = failed.expect_err("the disk is full");
        assert!(matches!(error, BackupError::NoSpace { .. }), "budget {budget}: {error:?}");
        assert_eq!(error.code(), idemdb_core::ErrorCode::Storage);
        assert!(!dest.exists(), "nothing at the destination");
        assert!(leftovers(dir.path()).is_empty(), "temporary removed: {:?}", leftovers(dir.path()));
    }
    assert_eq!(store.stats().expect("stats").records, 2_000, "the store carries on");
    complete(&store, "after");
}

const APP: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("app_rows");

#[test]
fn application_tables_are_copied_when_named_and_refused_otherwise() {
    let dir = tempfile::tempdir().expect("dir");
    let store = Store::open(dir.path().join("live.idemdb")).expect("open");
    complete(&store, "k-1");
    store
        .write(|txn| {
            let mut rows = txn.tables_checkpointing().open_table(APP).map_err(crate::Error::from)?;
            for i in 0..25u64 {
                rows.insert(("acme", i), b"row".as_slice()).map_err(crate::Error::from)?;
            }
            Ok::<_, crate::Error>(())
        })
        .expect("app rows");
    let refused = store.backup_to(dir.path().join("a.idemdb"));
    match refused {
        Err(BackupError::UnknownTables(tables)) => assert_eq!(tables, vec!["app_rows".to_string()]),
        other => panic!("{other:?}"),
    }
    assert!(!dir.path().join("a.idemdb").exists());

    let mut seen = Vec::new();
    let report = store
        .backup_with(dir.path().join("b.idemdb"), BackupOptions::new().table(APP).progress(|p| seen.push(p)))
        .expect("named");
    assert!(report.left_out.is_empty());
    assert_eq!(seen.last().map(|p| (p.copied, p.total)), Some((report.entries, report.entries)), "{seen:?}");
    let backup = Store::open(dir.path().join("b.idemdb")).expect("open");
    let rows = backup.read(|tx| tx.open_table(APP).map_err(crate::Error::from)?.len().map_err(crate::Error::from));
    assert_eq!(rows.expect("rows"), 25);

    let report = store
        .backup_with(dir.path().join("c.idemdb"), BackupOptions::new().leave_out_unknown_tables(true))
        .expect("left out");
    assert_eq!(report.left_out, vec!["app_rows".to_string()]);
    assert_eq!(report.records, 1);
}

#[test]
fn a_read_only_or_in_memory_store_backs_up_too() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("live.idemdb");
    {
        let store = Store::open(&path).expect("open");
        complete(&store, "k-1");
    }
    let before = fs::read(&path).expect("bytes");
    let read_only = Store::builder().open_read_only(&path).expect("read-only");
    let report = read_only.backup_to(dir.path().join("b.idemdb")).expect("backup");
    assert_eq!(report.records, 1);
    drop(read_only);
    assert!(before == fs::read(&path).expect("bytes"), "a read-only backup changes no byte of the store");

    let memory = Store::in_memory().expect("memory");
    complete(&memory, "m-1");
    complete(&memory, "m-2");
    let report = memory.backup_to(dir.path().join("m.idemdb")).expect("backup");
    assert_eq!(report.records, 2);
    assert_eq!(report.source_bytes, None);
    assert_eq!(keys_in(&dir.path().join("m.idemdb")).len(), 2);
}

#[test]
fn overwrite_refuses_a_store_another_handle_holds_and_its_later_writes_survive() {
    let dir = tempfile::tempdir().expect("dir");
    let held = dir.path().join("held.idemdb");
    let holder = Store::open(&held).expect("the holder opens its store");
    complete(&holder, "held-0");
    let source = Store::open(dir.path().join("source.idemdb")).expect("open");
    complete(&source, "source-1");

    let refused = source.backup_with(&held, BackupOptions::new().overwrite(true));
    let error = refused.expect_err("a store another handle holds is never replaced");
    let text = error.to_string();
    assert!(text.contains(&*held.to_string_lossy()) && text.contains("open"), "{text}");
    assert!(matches!(error, BackupError::DestinationOpen { .. }), "{error:?}");
    assert!(leftovers(dir.path()).is_empty(), "{:?}", leftovers(dir.path()));

    // The holder writes on, and every write is in its file once it closes.
    for i in 1..=50 {
        complete(&holder, &format!("held-{i}"));
    }
    drop(holder);
    let keys = keys_in(&held);
    assert_eq!(keys.len(), 51, "every acknowledged write of the holder: {keys:?}");
    assert!(!keys.contains("source-1"), "nothing of the backup's source");

    // Closed, the store may be replaced.
    let report = source.backup_with(&held, BackupOptions::new().overwrite(true)).expect("closed: replaced");
    assert!(report.replaced);
    assert_eq!(keys_in(&held), ["source-1".to_string()].into());
}

#[test]
fn overwrite_refuses_a_store_whose_journal_may_hold_pending_records() {
    let dir = tempfile::tempdir().expect("dir");
    let live = dir.path().join("live.idemdb");
    let crashed = dir.path().join("crashed.idemdb");
    {
        // A copy of a running store's file and journal: what a crash leaves (records after
        // the file's last checkpoint, the "records may be pending" marker set).
        let running = Store::open(&live).expect("open");
        for i in 0..20 {
            complete(&running, &format!("k-{i}"));
        }
        fs::copy(&live, &crashed).expect("copy the file");
        fs::copy(dir.path().join("live.idemdb-journal"), dir.path().join("crashed.idemdb-journal"))
            .expect("copy the journal");
    }
    let file_before = fs::read(&crashed).expect("bytes");
    let journal_before = fs::read(dir.path().join("crashed.idemdb-journal")).expect("bytes");
    let source = Store::open(dir.path().join("source.idemdb")).expect("open");
    complete(&source, "source-1");
    let refused = source.backup_with(&crashed, BackupOptions::new().overwrite(true));
    let error = refused.expect_err("pending journal records are never given up by a backup");
    let text = error.to_string();
    assert!(text.contains(&*crashed.to_string_lossy()) && text.contains("journal"), "{text}");
    assert!(matches!(error, BackupError::DestinationPending { .. }), "{error:?}");
    assert!(fs::read(&crashed).expect("bytes") == file_before, "the store file is untouched");
    assert!(
        fs::read(dir.path().join("crashed.idemdb-journal")).expect("bytes") == journal_before,
        "its journal is untouched"
    );
    // Its records are all there for the next open.
    assert_eq!(keys_in(&crashed).len(), 20);
}

#[cfg(unix)]
#[test]
fn the_live_journal_of_a_store_opened_through_a_symlink_is_refused() {
    let dir = tempfile::tempdir().expect("dir");
    let real = dir.path().join("real.idemdb");
    let link = dir.path().join("link.idemdb");
    drop(Store::open(&real).expect("create"));
    std::os::unix::fs::symlink(&real, &link).expect("symlink");
    let store = Store::open(&link).expect("open through the link");
    for i in 0..10 {
        complete(&store, &format!("k-{i}"));
    }
    let journal = dir.path().join("real.idemdb-journal");
    assert!(journal.exists(), "the journal is beside the real file");
    let to_journal = dir.path().join("to-journal");
    std::os::unix::fs::symlink(&journal, &to_journal).expect("symlink");
    let before = fs::read(&journal).expect("bytes");
    for dest in [&journal, &to_journal] {
        let refused = store.backup_with(dest, BackupOptions::new().overwrite(true));
        let error = refused.expect_err("the live journal is never a backup's destination");
        assert!(matches!(error, BackupError::SameFile { what: "journal", .. }), "{}: {error:?}", dest.display());
    }
    assert!(fs::read(&journal).expect("bytes") == before, "the journal is untouched");
    let refused = store.backup_with(&real, BackupOptions::new().overwrite(true));
    assert!(matches!(refused, Err(BackupError::SameFile { what: "file", .. })), "{refused:?}");
    for i in 10..20 {
        complete(&store, &format!("k-{i}"));
    }
    // A crash now (the handle leaked, nothing closed) and a new open find every write.
    std::mem::forget(store);
    let copy = dir.path().join("after.idemdb");
    fs::copy(&real, &copy).expect("copy");
    fs::copy(&journal, dir.path().join("after.idemdb-journal")).expect("copy");
    assert_eq!(keys_in(&copy).len(), 20);
}

#[test]
fn a_directory_destination_is_named_as_a_directory() {
    let dir = tempfile::tempdir().expect("dir");
    let store = Store::open(dir.path().join("live.idemdb")).expect("open");
    complete(&store, "k-1");
    let target = dir.path().join("backups");
    fs::create_dir(&target).expect("dir");
    for overwrite in [false, true] {
        let error = store.backup_with(&target, BackupOptions::new().overwrite(overwrite)).expect_err("a directory");
        let text = error.to_string();
        assert!(text.contains("is a directory") && !text.contains("exists already"), "{text}");
        assert!(matches!(error, BackupError::NotAFile { kind: "a directory", .. }), "{error:?}");
    }
    assert_eq!(fs::read_dir(&target).expect("dir").count(), 0, "nothing written into it");
}

#[cfg(unix)]
#[test]
fn stale_temporary_copies_of_dead_backups_are_removed_and_nothing_else() {
    let dir = tempfile::tempdir().expect("dir");
    let store = Store::open(dir.path().join("live.idemdb")).expect("open");
    complete(&store, "k-1");
    // A process that has ended: its pid names no running process (a reused pid is kept).
    let mut child = std::process::Command::new("true").spawn().expect("spawn");
    let dead = child.id();
    child.wait().expect("wait");
    let stale = dir.path().join(format!(".b.idemdb.backup-{dead}-0123456789ab.partial"));
    let stale_empty = dir.path().join(format!(".b.idemdb.backup-{dead}-ba9876543210.partial"));
    fs::write(&stale, vec![7u8; 64 * 1024]).expect("write");
    fs::write(&stale_empty, b"").expect("write");
    let running = dir.path().join(format!(".b.idemdb.backup-{}-aaaaaaaaaaaa.partial", std::process::id()));
    fs::write(&running, b"in progress").expect("write");
    let foreign = [
        dir.path().join(".b.idemdb.backup-notes.partial"),
        dir.path().join(format!(".c.idemdb.backup-{dead}-0123456789ab.partial")),
        dir.path().join(format!("b.idemdb.backup-{dead}-0123456789ab.partial")),
        dir.path().join(format!(".b.idemdb.backup-{dead}-0123456789ab.partial.keep")),
    ];
    for file in &foreign {
        fs::write(file, b"not ours").expect("write");
    }
    store.backup_to(dir.path().join("b.idemdb")).expect("backup");
    assert!(!stale.exists() && !stale_empty.exists(), "the dead backups' copies are removed");
    assert!(running.exists(), "a running process's copy is kept");
    for file in &foreign {
        assert_eq!(fs::read(file).expect("kept"), b"not ours", "{} is kept", file.display());
    }
}

#[test]
fn a_destination_without_room_for_the_copy_and_a_margin_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().expect("dir");
    let store = Store::open(dir.path().join("live.idemdb")).expect("open");
    for i in 0..200 {
        complete(&store, &format!("k-{i}"));
    }
    let store_bytes = fs::metadata(dir.path().join("live.idemdb")).expect("size").len();
    let dest = dir.path().join("b.idemdb");
    let asked = std::cell::Cell::new(0);
    let free = 4 * 1024 * 1024;
    let refused = store.backup_on(
        &dest,
        BackupOptions::new(),
        Hooks {
            backend: |file| Ok(FileBackend::new(file).map_err(crate::Error::from)?),
            available: |path: &Path| {
                asked.set(asked.get() + 1);
                assert_eq!(fs::canonicalize(path).expect("dir"), fs::canonicalize(dir.path()).expect("dir"));
                Ok(Some(free))
            },
        },
    );
    let error = refused.expect_err("4 MiB free is less than the store and the margin");
    match &error {
        BackupError::InsufficientSpace { available, needed, .. } => {
            assert_eq!(*available, free);
            assert!(*needed >= store_bytes + 16 * 1024 * 1024, "{needed} for a store of {store_bytes}");
        }
        other => panic!("{other:?}"),
    }
    let text = error.to_string();
    assert!(text.contains(&free.to_string()) && text.contains("bytes free"), "{text}");
    assert_eq!(asked.get(), 1);
    assert!(!dest.exists() && leftovers(dir.path()).is_empty(), "nothing written: {:?}", leftovers(dir.path()));
    complete(&store, "after");
    assert_eq!(store.stats().expect("stats").records, 201, "the store carries on");

    // With room, the same backup is written; the real figure of this file system is read.
    let report = store.backup_to(&dest).expect("room enough here");
    assert_eq!(report.records, 201);
}
