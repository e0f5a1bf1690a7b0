//! The webhook inbox: redeliveries, out-of-order deliveries of one object, invalid
//! transitions and concurrent deliveries — each business effect applied once.

use std::sync::{Arc, Barrier};
use std::thread;

use idemdb::redb::{ReadableTable, TableDefinition};
use idemdb::{
    Delivery, DeliveryOutcome, Fingerprint, FingerprintBuilder, InboxAnswer, ManualClock, NewerVersion, Refusal,
    ValidTransition,
};
use idemdb_fake_provider::EffectLedger;

use super::{T0, store};

/// The application's own table, changed only when an update is applied.
const SUBSCRIPTIONS: TableDefinition<&str, &str> = TableDefinition::new("app_subscriptions");

fn delivery(id: &str, object: &str, version: u64, state: &str) -> Delivery {
    let fp = FingerprintBuilder::new().str_field(id).str_field(state).finish();
    Delivery::new("provider", id, object, version, state, fp, state.as_bytes().to_vec()).expect("delivery")
}

#[test]
fn the_same_delivery_twice_is_applied_once() {
    let clock = ManualClock::new(T0);
    let store = store(&clock);
    let ledger = EffectLedger::new();
    let d = delivery("evt_1", "sub_1", 1, "active");
    let apply = |tx: &idemdb::redb::WriteTransaction, object: &idemdb::ObjectRecord| {
        ledger.perform(&object.delivery_id);
        tx.open_table(SUBSCRIPTIONS)?.insert("sub_1", object.state.as_str())?;
        Ok::<(), idemdb::redb::Error>(())
    };
    assert_eq!(store.accept_delivery_with(&d, &NewerVersion, apply).unwrap(), InboxAnswer::Applied);
    assert_eq!(
        store.accept_delivery_with(&d, &NewerVersion, apply).unwrap(),
        InboxAnswer::Duplicate { earlier: DeliveryOutcome::Applied }
    );
    assert_eq!(ledger.total(), 1, "the business effect ran once");
    let read = store.write(|txn| {
        let table = txn.tables_checkpointing().open_table(SUBSCRIPTIONS)?;
        Ok::<_, idemdb::Error>(table.get("sub_1")?.map(|state| state.value().to_string()))
    });
    assert_eq!(read.unwrap().as_deref(), Some("active"));
    let mut changed = d.clone();
    changed.fingerprint = Fingerprint::from_bytes([7; 32]);
    let refused = store.accept_delivery(&changed, &NewerVersion);
    assert!(
        matches!(refused, Err(idemdb::Error::Refused(Refusal::Inbox(idemdb::InboxRefusal::DeliveryMismatch)))),
        "{refused:?}"
    );
}

#[test]
fn an_older_version_delivered_late_is_recorded_but_never_applied() {
    let clock = ManualClock::new(T0);
    let store = store(&clock);
    let ledger = EffectLedger::new();
    let apply = |_: &idemdb::redb::WriteTransaction, object: &idemdb::ObjectRecord| {
        ledger.perform(&format!("{}@{}", object.state, object.version));
        Ok::<(), idemdb::Error>(())
    };
    // Version 3 arrives first; 1 and 2 (other delivery ids, same object) come late.
    assert_eq!(
        store.accept_delivery_with(&delivery("evt_3", "sub_1", 3, "cancelled"), &NewerVersion, apply).unwrap(),
        InboxAnswer::Applied
    );
    for (id, version, state) in [("evt_1", 1, "trialing"), ("evt_2", 2, "active")] {
        let answer = store.accept_delivery_with(&delivery(id, "sub_1", version, state), &NewerVersion, apply).unwrap();
        assert_eq!(answer, InboxAnswer::Stale { current_version: 3 }, "{id}");
        let record = store.delivery("provider", id).unwrap().expect("recorded apart from the object");
        assert_eq!(record.outcome, DeliveryOutcome::Stale { current_version: 3 });
    }
    let object = store.object("provider", "sub_1").unwrap().unwrap();
    assert_eq!((object.version, object.state.as_str(), object.delivery_id.as_str()), (3, "cancelled", "evt_3"));
    assert_eq!(ledger.total(), 1);
    assert_eq!(store.deliveries(0).unwrap().len(), 3, "every attempt is on record");
}

#[test]
fn an_invalid_transition_is_refused_by_the_application_rule() {
    let clock = ManualClock::new(T0);
    let store = store(&clock);
    let rule = ValidTransition(|from: Option<&str>, to: &str| {
        matches!((from, to), (None, "trialing") | (Some("trialing"), "active") | (Some("active"), "cancelled"))
    });
    assert_eq!(store.accept_delivery(&delivery("e1", "sub_9", 0, "trialing"), &rule).unwrap(), InboxAnswer::Applied);
    let answer = store.accept_delivery(&delivery("e2", "sub_9", 0, "cancelled"), &rule).unwrap();
    assert_eq!(answer, InboxAnswer::InvalidTransition { from: Some("trialing".into()), to: "cancelled".into() });
    assert_eq!(store.accept_delivery(&delivery("e3", "sub_9", 0, "active"), &rule).unwrap(), InboxAnswer::Applied);
    assert_eq!(store.object("provider", "sub_9").unwrap().unwrap().state, "active");
}

#[test]
fn concurrent_deliveries_apply_each_update_once_and_leave_the_newest() {
    let clock = ManualClock::new(T0);
    let store = store(&clock);
    let ledger = Arc::new(EffectLedger::new());
    const THREADS: usize = 8;
    let barrier = Arc::new(Barrier::new(THREADS));
    let mut handles = Vec::new();
    for t in 0..THREADS {
        let (store, ledger, barrier) = (store.clone(), Arc::clone(&ledger), Arc::clone(&barrier));
        handles.push(thread::spawn(move || {
            barrier.wait();
            // Every thread delivers every version (redeliveries), in its own order.
            for i in 0..10u64 {
                let version = (i + t as u64 * 3) % 10 + 1;
                let d = delivery(&format!("evt_{version}"), "sub_c", version, &format!("s{version}"));
                let apply = |_: &idemdb::redb::WriteTransaction, object: &idemdb::ObjectRecord| {
                    ledger.perform(&object.delivery_id);
                    Ok::<(), idemdb::Error>(())
                };
                store.accept_delivery_with(&d, &NewerVersion, apply).unwrap();
            }
        }));
    }
    for handle in handles {
        handle.join().unwrap();
    }
    assert_eq!(ledger.doubles(), 0, "no update applied twice: {:?}", ledger.duplicates());
    let object = store.object("provider", "sub_c").unwrap().unwrap();
    assert_eq!(object.version, 10, "the newest version wins whatever the order");
    assert_eq!(store.deliveries(0).unwrap().len(), 10);
    // Each applied update is a newer version than the one before it.
    let applied = ledger.total();
    assert!((1..=10).contains(&applied), "{applied}");
}
