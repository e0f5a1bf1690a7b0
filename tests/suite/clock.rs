//! The wall clock jumping forward or back and being put right: a known key is never made
//! unknown early, and a lease is never revived (docs/design.md, "Time").

use std::time::Duration;

use idemdb::{ManualClock, OutcomeClass, Policy, Reservation, Reserve, Store, StoreBuilder};
use idemdb_tests::{T0, fp, key, scope};

const MINUTE: u64 = 60_000;
const YEAR: u64 = 365 * 24 * 60 * MINUTE;

fn builder(clock: &ManualClock, response: Duration, tombstone: Duration) -> StoreBuilder {
    Store::builder()
        .default_policy(Policy::default().with_response_ttl(response).with_tombstone_ttl(tombstone))
        .clock(clock.clone())
}

/// Regression: the store persisted the highest wall-clock time it had seen. After a brief jump
/// of a year, put right a moment later, store time stayed a year ahead: records were forgotten
/// at once and a retry one minute after the completion acquired the key again (a second
/// effect).
#[test]
fn a_brief_forward_clock_jump_never_makes_a_finished_key_run_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("store.idemdb");
    let clock = ManualClock::new(T0);
    let ten_minutes = Duration::from_millis(10 * MINUTE);
    let open = || builder(&clock, ten_minutes, ten_minutes).open(&path).expect("open");
    let (charge, done) = (scope("acme", "charge"), key("order-842"));
    {
        let store = open();
        let Reservation::Acquired(lease) = store.reserve(Reserve::new(&charge, &done, &fp(1))).expect("reserve") else {
            panic!("a new key is acquired");
        };
        store.complete(&lease, b"charged".to_vec()).expect("complete");

        // The wall clock jumps a year ahead while the store is open, and the store is busy.
        clock.set_wall(T0 + YEAR);
        assert_eq!(store.purge_expired(100).expect("purge").forgotten, 0, "nothing is due in true time");
        assert!(matches!(
            store.reserve(Reserve::new(&charge, &key("other"), &fp(2))).expect("reserve"),
            Reservation::Acquired(_)
        ));
    }
    {
        // Reopened while the wall clock is still a year ahead.
        let store = open();
        assert_eq!(store.purge_expired(100).expect("purge").forgotten, 0);
        assert!(matches!(
            store.reserve(Reserve::new(&charge, &done, &fp(1))).expect("retry"),
            Reservation::Replay { .. }
        ));
    }
    // The clock is put right; a retry comes one minute after the completion.
    clock.set_wall(T0);
    clock.advance(Duration::from_millis(MINUTE));
    let store = open();
    assert_eq!(store.purge_expired(100).expect("purge").forgotten, 0);
    assert_eq!(
        store.reserve(Reserve::new(&charge, &done, &fp(1))).expect("retry"),
        Reservation::Replay { outcome: OutcomeClass::Completed, body: b"charged".to_vec() },
        "a retry within the retention replays, it never runs again"
    );
}

/// Regression: while the wall clock was behind the store's time, store time stood still, so a
/// result completed then was stamped with a time already in the past and, once the clock was
/// put right, expired before its TTL in true time.
#[test]
fn a_result_completed_while_the_clock_was_set_back_keeps_its_ttl_in_true_time() {
    let clock = ManualClock::new(T0);
    let half_hour = Duration::from_millis(30 * MINUTE);
    let store = builder(&clock, half_hour, half_hour).in_memory().expect("store");
    let (charge, done) = (scope("acme", "charge"), key("order-842"));
    assert_eq!(store.now().as_millis(), T0);

    clock.set_wall(T0 - 60 * MINUTE); // set back an hour
    clock.advance(Duration::from_millis(10 * MINUTE)); // ten minutes pass
    let Reservation::Acquired(lease) = store.reserve(Reserve::new(&charge, &done, &fp(1))).expect("reserve") else {
        panic!("a new key is acquired");
    };
    store.complete(&lease, b"charged".to_vec()).expect("complete");

    clock.set_wall(T0 + 10 * MINUTE); // put right
    clock.advance(Duration::from_millis(25 * MINUTE)); // 25 minutes after the completion
    assert!(
        matches!(store.reserve(Reserve::new(&charge, &done, &fp(1))).expect("retry"), Reservation::Replay { .. }),
        "25 minutes after the completion, within its 30-minute response TTL"
    );
    clock.advance(Duration::from_millis(5 * MINUTE + 1_000));
    assert_eq!(
        store.reserve(Reserve::new(&charge, &done, &fp(1))).expect("retry"),
        Reservation::Expired { outcome: OutcomeClass::Completed },
        "and expired once the TTL has passed in true time"
    );
}

/// One in-memory image shared by every store opened on it (a file that outlives a process).
#[derive(Debug, Clone, Default)]
struct Image(std::sync::Arc<idemdb::redb::backends::InMemoryBackend>);

impl idemdb::redb::StorageBackend for Image {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.0.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.0.read(offset, out)
    }
    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> Result<(), std::io::Error> {
        self.0.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        self.0.write(offset, data)
    }
}

/// Found by the full clock-fault run: a jump put right was seen only by a read-only answer,
/// and the process was killed before anything wrote the clock. The restarted store had
/// forgotten that the gap was a jump; when the clock jumped again by as much, it kept counting
/// the first gap's observation, confirmed it early, and forgot a key within its retention. A
/// reading that cancels a gap is now written before its answer — by the blocking call on its
/// caller's thread, and by the async interface off the runtime (a lookup never commits on a
/// runtime's worker), both checked here.
#[test]
fn a_jump_seen_put_right_is_not_forgotten_by_a_kill() {
    for lookup in [Lookup::Blocking, Lookup::Async] {
        a_jump_seen_put_right_survives_a_kill(lookup);
    }
}

#[derive(Debug, Clone, Copy)]
enum Lookup {
    Blocking,
    Async,
}

fn a_jump_seen_put_right_survives_a_kill(lookup: Lookup) {
    let image = Image::default();
    let clock = ManualClock::new(T0);
    let open = || {
        builder(&clock, Duration::from_millis(5 * MINUTE), Duration::from_millis(10 * MINUTE))
            .secret_seed([5; 32])
            .open_backend(image.clone())
            .expect("open")
    };
    let (charge, done) = (scope("acme", "charge"), key("order-842"));
    let store = open();
    let Reservation::Acquired(lease) = store.reserve(Reserve::new(&charge, &done, &fp(1))).expect("reserve") else {
        panic!("a new key is acquired");
    };
    store.complete(&lease, b"charged".to_vec()).expect("complete"); // forgotten at T0 + 15 min
    let write = |store: &Store, name: &str| {
        assert!(matches!(
            store.reserve(Reserve::new(&charge, &key(name), &fp(2))).expect("reserve"),
            Reservation::Acquired(_)
        ));
    };
    clock.advance(Duration::from_millis(MINUTE));
    clock.set_wall(T0 + MINUTE + 30 * MINUTE); // a jump of 30 minutes
    write(&store, "a");
    clock.advance(Duration::from_millis(8 * MINUTE));
    write(&store, "b"); // the jump has been kept 8 minutes, and that is persisted
    clock.set_wall(T0 + 9 * MINUTE); // put right; only a read-only answer sees it
    let seen = match lookup {
        Lookup::Blocking => store.reserve(Reserve::new(&charge, &done, &fp(1))).expect("retry"),
        Lookup::Async => pollster::block_on(idemdb_interface::IdempotencyStore::reserve(
            &store.asynchronous(),
            Reserve::new(&charge, &done, &fp(1)),
        ))
        .expect("retry"),
    };
    assert!(matches!(seen, Reservation::Expired { .. }), "{lookup:?}: {seen:?}");
    std::mem::forget(store); // kill -9: nothing runs on close
    clock.set_wall(T0 + 9 * MINUTE + 30 * MINUTE); // the clock jumps again, by as much
    let store = open();
    clock.advance(Duration::from_millis(3 * MINUTE)); // 12 minutes after the completion
    assert_eq!(
        store.reserve(Reserve::new(&charge, &done, &fp(1))).expect("retry"),
        Reservation::Expired { outcome: OutcomeClass::Completed },
        "{lookup:?}: within its 15-minute retention the key is still known"
    );
}
