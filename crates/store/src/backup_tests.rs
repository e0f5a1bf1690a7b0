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

use crate::{BackupError, BackupOptions, Reservation, Store};

fn complete(store: &Store, key: &str) {
    let scope = Scope::new("acme", "pay").expect("scope");
    let key = IdempotencyKey::new(key).expect("key");
    let Reservation::Acquired(lease) = store.reserve(&scope, &key, &Fingerprint::from_bytes([7; 32])).expect("reserve")
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
        let failed = store.backup_on(&dest, BackupOptions::new(), |file| {
            Ok(FullDisk { inner: FileBackend::new(file).map_err(crate::Error::from)?, budget: AtomicU64::new(budget) })
        });
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
