//! The audit trail: events are written in segments (one B-tree entry per batch), and every
//! reader — `audit_events`, `stats`, `verify`, purge — counts events, not entries.

use std::collections::HashMap;
use std::time::Duration;

use idemdb::redb::{Database, ReadableDatabase, ReadableTableMetadata, TableDefinition};
use idemdb::{AuditKind, ManualClock, Reservation, Store, StoreBuilder};
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
            let Reservation::Acquired(lease) = store.reserve(&scope, &key(&format!("k-{i}")), &fp(1)).expect("reserve")
            else {
                panic!("key {i} was new");
            };
            store.complete(&lease, vec![7; 32]).expect("complete");
        }
        for i in 0..replays {
            let answer = store.reserve(&scope, &key(&format!("k-{}", i % keys)), &fp(1)).expect("replay");
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
    assert!(entries >= 1 && entries * 100 < (2 * keys + replays) as u64, "{entries} entries for 2,600 events");

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
    assert!(matches!(store.reserve(&scope, &key("k-0"), &fp(1)).expect("replay"), Reservation::Replay { .. }));
}
