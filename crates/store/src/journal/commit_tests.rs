//! Every write path rides the journal: the store's own tables and the application's tables
//! written through [`Txn::table`](crate::Txn::table) commit with one journal append and no
//! checkpoint, and come back after a crash between the append and the next checkpoint.

use std::time::Duration;

use redb::{ReadableTable, TableDefinition};

use crate::test_support::Disk;
use crate::{
    Canonicalizer, Delivery, EffectName, Error, Fingerprint, IdempotencyKey, JobAnswer, JournalStats, ManualClock,
    NewerVersion, OpenError, Policy, Reservation, Reserve, Scope, Store,
};

const APP: TableDefinition<&str, u64> = TableDefinition::new("app_orders");
const T0: u64 = 1_700_000_000_000;

/// A journaled store on `file` and `journal`, with [`APP`] registered.
fn open(file: &Disk, journal: &Disk, clock: &ManualClock) -> Result<Store, OpenError> {
    Store::builder()
        .clock(clock.clone())
        .secret_seed([7; 32])
        .policy(
            "short",
            Policy::default().with_response_ttl(Duration::from_secs(1)).with_tombstone_ttl(Duration::from_secs(1)),
        )
        .journal(true)
        .journaled_table(APP)
        .open_backend_with_journal(file.clone(), journal.clone())
}

struct Fixture {
    file: Disk,
    journal: Disk,
    clock: ManualClock,
    store: Store,
}

impl Fixture {
    fn new() -> Fixture {
        let (file, journal, clock) = (Disk::default(), Disk::default(), ManualClock::new(T0));
        let store = open(&file, &journal, &clock).expect("open");
        Fixture { file, journal, clock, store }
    }

    fn stats(&self) -> JournalStats {
        self.store.journal_stats().expect("journaled")
    }

    /// Runs `write` and checks that it appended to the journal and checkpointed nothing.
    fn journaled<T>(&self, write: impl FnOnce(&Store) -> T) -> T {
        let before = self.stats();
        let out = write(&self.store);
        let after = self.stats();
        assert_eq!(after.checkpoints, before.checkpoints, "no checkpoint");
        assert!(after.appends > before.appends, "journal appended");
        out
    }

    /// The power goes: the handle never closes, and both disks keep only what was synced.
    /// Returns the store opened again and how many journal records its open replayed.
    fn crash(self) -> (Store, u64) {
        let Fixture { file, journal, clock, store } = self;
        std::mem::forget(store);
        let store = open(&file.crashed(), &journal.crashed(), &clock).expect("reopen after the crash");
        let recovered = store.journal_stats().expect("journaled").recovered;
        (store, recovered)
    }
}

fn scope() -> Scope {
    Scope::new("acme", "pay").expect("scope")
}

fn key(name: &str) -> IdempotencyKey {
    IdempotencyKey::new(name).expect("key")
}

#[test]
fn intents_survive_a_crash_before_the_checkpoint() {
    let fixture = Fixture::new();
    let canon = Canonicalizer::new();
    fixture.journaled(|store| store.create_intent(&scope(), &key("i-1"), br#"{"a":1}"#, &canon).unwrap());
    let (store, recovered) = fixture.crash();
    assert_eq!(recovered, 1);
    assert!(store.intent(&scope(), &key("i-1")).unwrap().is_some(), "the intent was replayed");
}

#[test]
fn the_outbox_and_its_due_index_survive_a_crash_before_the_checkpoint() {
    let fixture = Fixture::new();
    let effect = EffectName::new("authorize").unwrap();
    fixture.journaled(|store| {
        let Reservation::Acquired(lease) =
            store.reserve(Reserve::new(&scope(), &key("o-1"), &Fingerprint::from_bytes([1; 32]))).unwrap()
        else {
            panic!("acquired")
        };
        store.enqueue_effect(&lease, &effect, 1, b"{}".to_vec()).unwrap();
    });
    let (store, recovered) = fixture.crash();
    assert!(recovered >= 1);
    assert!(store.effect(&scope(), &key("o-1"), &effect).unwrap().is_some(), "the item was replayed");
    let claimed = store.claim_effects(8).unwrap();
    assert_eq!(claimed.len(), 1, "the due index entry was replayed too");
}

#[test]
fn the_inbox_survives_a_crash_before_the_checkpoint() {
    let fixture = Fixture::new();
    let delivery =
        Delivery::new("stripe", "evt_1", "sub_1", 1, "active", Fingerprint::from_bytes([2; 32]), vec![]).unwrap();
    fixture.journaled(|store| store.accept_delivery(&delivery, &NewerVersion).unwrap());
    let (store, recovered) = fixture.crash();
    assert_eq!(recovered, 1);
    assert!(store.delivery("stripe", "evt_1").unwrap().is_some(), "the delivery was replayed");
    assert_eq!(store.object("stripe", "sub_1").unwrap().map(|object| object.state), Some("active".to_string()));
}

#[test]
fn jobs_survive_a_crash_before_the_checkpoint() {
    let fixture = Fixture::new();
    let claimed = fixture.journaled(|store| store.claim_job(&scope(), &key("j-1"), &Fingerprint::from_bytes([3; 32])));
    assert!(matches!(claimed, Ok(JobAnswer::Claimed(_))), "{claimed:?}");
    let (store, recovered) = fixture.crash();
    assert_eq!(recovered, 1);
    assert!(store.job(&scope(), &key("j-1")).unwrap().is_some(), "the job was replayed");
}

#[test]
fn a_purge_survives_a_crash_before_the_checkpoint() {
    let fixture = Fixture::new();
    let short = Scope::new("acme", "short").unwrap();
    let Reservation::Acquired(lease) =
        fixture.store.reserve(Reserve::new(&short, &key("p-1"), &Fingerprint::from_bytes([4; 32]))).unwrap()
    else {
        panic!("acquired")
    };
    fixture.store.complete(&lease, b"done".to_vec()).unwrap();
    fixture.clock.advance(Duration::from_secs(60));
    // The first commit this long after the last checkpoint is one; the purge after it is not.
    fixture.store.flush().unwrap();
    let report = fixture.journaled(|store| store.purge_expired(100).unwrap());
    assert_eq!(report.forgotten + report.tombstoned, 1, "{report:?}");
    let before = fixture.store.get(&short, &key("p-1")).unwrap();
    let (store, _) = fixture.crash();
    assert_eq!(store.get(&short, &key("p-1")).unwrap(), before, "the purge was replayed");
}

#[test]
fn an_application_table_written_through_the_logged_api_is_journaled_and_survives_a_crash() {
    let fixture = Fixture::new();
    fixture.journaled(|store| {
        store
            .write(|txn| {
                let mut orders = txn.table(APP)?;
                orders.insert("order-1", 10)?;
                orders.insert("order-2", 20)?;
                assert!(orders.remove("order-2")?, "removed");
                assert_eq!(orders.get("order-1")?.map(|v| v.value()), Some(10));
                Ok::<_, Error>(())
            })
            .unwrap()
    });
    let (store, recovered) = fixture.crash();
    assert_eq!(recovered, 1);
    let rows = store
        .read(|tx| -> Result<Vec<(String, u64)>, Error> {
            let table = tx.open_table(APP)?;
            let mut rows = Vec::new();
            for entry in table.iter()? {
                let (key, value) = entry?;
                rows.push((key.value().to_owned(), value.value()));
            }
            Ok(rows)
        })
        .unwrap();
    assert_eq!(rows, vec![("order-1".to_owned(), 10)]);
}

#[test]
fn a_store_opened_without_the_table_its_journal_writes_refuses_to_open_and_loses_nothing() {
    let fixture = Fixture::new();
    fixture.journaled(|store| store.write(|txn| txn.table(APP)?.insert("order-1", 10)).unwrap());
    let Fixture { file, journal, store, clock } = fixture;
    std::mem::forget(store);
    let (file, journal) = (file.crashed(), journal.crashed());
    // An opener that does not know the table (an operator's tool) is told which table it
    // needs, not that the journal is damaged: discarding it would lose acknowledged commits.
    let refused = Store::builder().journal(true).open_backend_with_journal(file.clone(), journal.clone());
    let Err(OpenError::JournalNeedsTable { table, .. }) = &refused else { panic!("{refused:?}") };
    assert_eq!(table, "app_orders");
    assert_eq!(refused.as_ref().map(drop).unwrap_err().code(), idemdb_core::ErrorCode::InvalidArgument);
    let message = refused.map(drop).unwrap_err().to_string();
    assert!(message.contains("app_orders") && message.contains("do not discard"), "{message}");
    // The application's open (the table registered) replays the commit.
    let store = open(&file, &journal, &clock).unwrap();
    let amount = store.write(|txn| Ok::<_, Error>(txn.table(APP)?.get("order-1")?.map(|v| v.value()))).unwrap();
    assert_eq!(amount, Some(10));
}

#[test]
fn an_unregistered_table_or_other_types_are_refused() {
    const OTHER: TableDefinition<&str, u64> = TableDefinition::new("app_unregistered");
    const RETYPED: TableDefinition<&str, &[u8]> = TableDefinition::new("app_orders");
    let fixture = Fixture::new();
    for result in
        [fixture.store.write(|txn| txn.table(OTHER).map(drop)), fixture.store.write(|txn| txn.table(RETYPED).map(drop))]
    {
        assert!(matches!(result, Err(Error::UnregisteredTable { .. })), "{result:?}");
    }
}

#[test]
fn the_raw_escape_hatch_still_checkpoints() {
    let fixture = Fixture::new();
    let before = fixture.stats();
    fixture
        .store
        .write(|txn| {
            txn.tables_checkpointing().open_table(APP)?.insert("order-1", 10)?;
            Ok::<_, Error>(())
        })
        .unwrap();
    let after = fixture.stats();
    assert_eq!(after.checkpoints, before.checkpoints + 1, "one checkpoint");
    assert_eq!(after.appends, before.appends, "nothing journaled");
}

/// The flagship request: reserve, write the business row and enqueue the effect with the
/// completion's transaction, then the dispatcher's claim and report. Four commits, each one
/// journal append, none a checkpoint; after the first request (whose commits grow the store
/// file once) the store file is never flushed again.
#[test]
fn a_request_with_a_row_and_an_effect_is_four_appends_and_no_checkpoint() {
    let fixture = Fixture::new();
    let effect = EffectName::new("authorize").expect("name");
    let request = |name: &str| {
        let Reservation::Acquired(lease) = fixture
            .store
            .reserve(Reserve::new(&scope(), &key(name), &Fingerprint::from_bytes([5; 32])))
            .expect("reserve")
        else {
            panic!("acquired")
        };
        fixture
            .store
            .write(|txn| {
                txn.table(APP)?.insert(name, 1)?;
                txn.enqueue_effect(&lease, &effect, 1, b"{}".to_vec()).map(drop)
            })
            .expect("row and effect");
        let claims = fixture.store.claim_effects(4).expect("claim");
        assert_eq!(claims.len(), 1);
        for claim in claims {
            let report = crate::EffectReport::Confirmed { reference: "auth_1".into(), result: b"ok".to_vec() };
            fixture.store.report_effect(&claim, report).expect("report");
        }
    };
    request("r-0");
    let (before, file_syncs) = (fixture.stats(), fixture.file.syncs());
    for n in 1..=10 {
        request(&format!("r-{n}"));
    }
    let after = fixture.stats();
    assert_eq!(after.checkpoints, before.checkpoints, "no checkpoint");
    assert_eq!(after.appends, before.appends + 40, "one append per commit");
    assert_eq!(fixture.file.syncs(), file_syncs, "the store file is not flushed");
}
