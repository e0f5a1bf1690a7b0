//! The audit trail: events are written in segments (one B-tree entry per batch), and every
//! reader — `audit_events`, `stats`, `verify`, purge — counts events, not entries.

use std::collections::HashMap;
use std::time::Duration;

use idemdb::redb::{Database, ReadableDatabase, ReadableTableMetadata, TableDefinition};
use idemdb::{AuditKind, ManualClock, Reservation, Reserve, Store, StoreBuilder};
use idemdb_tests::{T0, fp, key, scope};

const AUDIT: TableDefinition<[u8; 16], &[u8]> = TableDefinition::new("idemdb_audit");

fn builder(clock: &ManualClock) -> StoreBuilder {
    Store::builder().clock(clock.clone()).audit_retention(Duration::from_secs(10))
}

#[test]
fn audit_events_are_stored_in_segments_and_every_reader_counts_events() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("audit.idemdb");
    let clock = ManualClock::new(T0);
    let scope = scope("acme", "create_payment");
    let (keys, replays) = (300usize, 2_000usize);
    {
        let store = builder(&clock).open(&path).expect("open");
        for i in 0..keys {
            clock.advance(Duration::from_millis(1));
            let Reservation::Acquired(lease) =
                store.reserve(Reserve::new(&scope, &key(&format!("k-{i}")), &fp(1))).expect("reserve")
            else {
                panic!("key {i} was new");
            };
            store.complete(&lease, vec![7; 32]).expect("complete");
        }
        for i in 0..replays {
            let answer = store.reserve(Reserve::new(&scope, &key(&format!("k-{}", i % keys)), &fp(1))).expect("replay");
            assert!(matches!(answer, Reservation::Replay { .. }), "replay {i}: {answer:?}");
        }
        store.flush().expect("flush");

        let events = store.audit_events(usize::MAX).expect("events");
        let mut kinds: HashMap<AuditKind, usize> = HashMap::new();
        for event in &events {
            *kinds.entry(event.kind).or_default() += 1;
        }
        assert_eq!(kinds.get(&AuditKind::Reserved), Some(&keys));
        assert_eq!(kinds.get(&AuditKind::Completed), Some(&keys));
        assert_eq!(kinds.get(&AuditKind::Replayed), Some(&replays));
        assert_eq!(events.len(), 2 * keys + replays);
        assert!(events.windows(2).all(|pair| pair[0].at <= pair[1].at), "events come oldest first");
        // The newest events, when fewer are asked for.
        let newest = store.audit_events(10).expect("newest");
        assert_eq!(newest.as_slice(), &events[events.len() - 10..]);
        assert_eq!(store.stats().expect("stats").audit_events, events.len() as u64);
    }
    let entries = {
        let db = Database::open(&path).expect("redb");
        let read = db.begin_read().expect("read");
        read.open_table(AUDIT).expect("audit table").len().expect("len")
    };
    // A decision's events are written by its own commit: one entry per commit (600 here). The
    // 2,000 replays changed nothing; their events wait and go out in segments of up to
    // AuditBatch::EVENTS, so they take a handful of entries, not one each.
    let decisions = (2 * keys) as u64;
    assert!(entries >= decisions, "{entries} entries for {decisions} decision commits");
    assert!((entries - decisions) * 100 < replays as u64, "{} entries for {replays} replays", entries - decisions);

    // Verify counts events; purge removes them once all of a segment is past retention.
    let mut store = builder(&clock).open(&path).expect("reopen");
    let report = store.verify().expect("verify");
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(report.audit_events, (2 * keys + replays) as u64);
    clock.advance(Duration::from_secs(11));
    assert_eq!(store.purge_preview().expect("preview").audit_removed, (2 * keys + replays) as u64);
    let mut removed = 0;
    loop {
        let report = store.purge_expired(2).expect("purge");
        removed += report.audit_removed;
        if !report.more {
            break;
        }
    }
    assert_eq!(removed, (2 * keys + replays) as u64);
    assert!(store.audit_events(usize::MAX).expect("events").is_empty());
    // The records themselves are still inside their response TTL: untouched.
    assert!(matches!(
        store.reserve(Reserve::new(&scope, &key("k-0"), &fp(1))).expect("replay"),
        Reservation::Replay { .. }
    ));
}

/// A store image whose writes can be made to fail (a disk that filled up or went bad).
#[derive(Debug, Clone, Default)]
struct FailingDisk {
    image: std::sync::Arc<idemdb::redb::backends::InMemoryBackend>,
    failing: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl FailingDisk {
    fn check(&self) -> Result<(), std::io::Error> {
        if self.failing.load(std::sync::atomic::Ordering::SeqCst) {
            Err(std::io::Error::other("the disk is failing"))
        } else {
            Ok(())
        }
    }
}

impl idemdb::redb::StorageBackend for FailingDisk {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.image.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.image.read(offset, out)
    }
    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.check()?;
        self.image.set_len(len)
    }
    fn sync_data(&self) -> Result<(), std::io::Error> {
        self.check()?;
        self.image.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        self.check()?;
        self.image.write(offset, data)
    }
}

/// Found by the concurrent crash points: a disk that fails every write, under a stream of
/// answers that write nothing (replays), let their waiting audit events grow without end (the
/// writer thread retried in a tight loop and put them back each time; memory grew by about
/// 20 MB/s). At most `AuditBatch::MAX_WAITING` events now wait; later ones are dropped and
/// counted, and the answers themselves stay correct. (Waiting events are lost with the
/// failed open, as a crash loses about the last second's; a decision's event never waits.)
#[test]
fn a_failing_disk_bounds_the_waiting_audit_events() {
    // The journal's disk fails: commits fail before they reach the store file, which redb
    // would otherwise mark failed until a reopen.
    let (image, disk) = (FailingDisk::default(), FailingDisk::default());
    let clock = ManualClock::new(T0);
    let scope = scope("acme", "create_payment");
    let open = || builder(&clock).open_backend_with_journal(image.clone(), disk.clone()).expect("open");
    let store = open();
    let Reservation::Acquired(lease) = store.reserve(Reserve::new(&scope, &key("paid"), &fp(1))).expect("reserve")
    else {
        panic!("a new key is acquired");
    };
    store.complete(&lease, b"receipt".to_vec()).expect("complete");
    store.flush().expect("flush");
    let before = store.audit_events(usize::MAX).expect("events").len();

    disk.failing.store(true, std::sync::atomic::Ordering::SeqCst);
    let answers = 3 * idemdb::core::AuditBatch::MAX_WAITING;
    for i in 0..answers {
        let answer = store.reserve(Reserve::new(&scope, &key("paid"), &fp(1))).expect("a replay needs no write");
        assert!(
            matches!(&answer, Reservation::Replay { body, .. } if body == b"receipt"),
            "answer {i} on a failing disk: {answer:?}"
        );
    }
    let buffered = store.audit_events(usize::MAX).expect("events").len() - before;
    assert!(buffered <= idemdb::core::AuditBatch::MAX_WAITING, "{buffered} events wait");
    let dropped = store.stats().expect("stats").audit_events_dropped;
    assert_eq!(dropped + buffered as u64, answers as u64, "every answer's event is either waiting or counted");
    assert!(dropped >= (answers - idemdb::core::AuditBatch::MAX_WAITING) as u64, "{dropped} dropped");

    disk.failing.store(false, std::sync::atomic::Ordering::SeqCst);
    let error = store.flush().expect_err("a failed journal stays failed until the store is reopened");
    assert!(error.reopen_required(), "{error:?}");
    drop(store);
    let store = open();
    let answer = store.reserve(Reserve::new(&scope, &key("paid"), &fp(1))).expect("reserve after the reopen");
    assert!(matches!(&answer, Reservation::Replay { body, .. } if body == b"receipt"), "{answer:?}");
    assert_eq!(store.stats().expect("stats").audit_events_dropped, 0, "the count is of this open");
}
