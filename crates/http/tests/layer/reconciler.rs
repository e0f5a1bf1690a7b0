//! The library reconciler over the redb store: each uncertain effect goes to the lookup once a
//! round, declared operations' uncertain records with no effect are released, and the rest is
//! left for a person.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use idemdb::{
    AsyncStore, AuditKind, EffectName, EffectReport, ExpiredLease, Failure, Fingerprint, IdempotencyKey, OutboxItem,
    Policy, ProviderState, Reservation, Reserve, ResolutionCause, Scope, Store,
};
use idemdb_http::reconcile::{EffectDecision, EffectLookup, LeftBy, Reconciler, Round};
use idemdb_interface::{InspectStore, WorkflowStore};

/// A provider that has no trace of any charge: every lookup resolves `not_found`.
#[derive(Clone, Default)]
struct NothingCharged(Arc<AtomicUsize>);

impl EffectLookup<AsyncStore> for NothingCharged {
    async fn decide(&self, store: &AsyncStore, item: &OutboxItem) -> EffectDecision {
        self.0.fetch_add(1, Ordering::SeqCst);
        match WorkflowStore::resolve_effect(
            store,
            &item.scope,
            &item.key,
            &item.effect,
            ProviderState::NotFound,
            ResolutionCause::ProviderNotFound,
        )
        .await
        {
            Ok(_) => EffectDecision::NotFound,
            Err(_) => EffectDecision::Undecided,
        }
    }
}

fn acquire(store: &Store, scope: &Scope, key: &str) -> idemdb::Lease {
    let key = IdempotencyKey::new(key).unwrap();
    match store.reserve(Reserve::new(scope, &key, &Fingerprint::from_bytes([1; 32]))).unwrap() {
        Reservation::Acquired(lease) => lease,
        other => panic!("{other:?}"),
    }
}

/// The resolutions in the audit trail of `(scope, key)`: each event's kind and cause.
async fn causes(store: &Store, scope: &Scope, key: &str) -> Vec<(AuditKind, ResolutionCause)> {
    let key = IdempotencyKey::new(key).unwrap();
    let history = store
        .asynchronous()
        .key_history(scope, &key, 10_000)
        .await
        .unwrap()
        .expect("the redb store reads its trail back");
    history.iter().filter_map(|event| Some((event.kind, event.cause()?))).collect()
}

#[tokio::test]
async fn a_round_decides_what_facts_can_and_leaves_the_rest() {
    // A provider that applies a call before it answers: nothing lands later (settle time 0).
    let policy = Policy::default()
        .with_expired_lease(ExpiredLease::TakeoverIfNoEffect)
        .with_provider_settle_time(std::time::Duration::ZERO);
    let store = Store::builder().policy("pay", policy.clone()).policy("other", policy).in_memory().unwrap();
    let (pay, other) = (Scope::new("acme", "pay").unwrap(), Scope::new("acme", "other").unwrap());
    let charge = EffectName::new("charge").unwrap();
    // An effect whose outcome is unknown.
    let lease = acquire(&store, &pay, "lost-answer");
    store.enqueue_effect(&lease, &charge, 1, b"{}".to_vec()).unwrap();
    let claimed = store.claim_effects(1).unwrap();
    store.report_effect(&claimed[0], EffectReport::Unknown { reason: "timeout".into() }).unwrap();
    // An uncertain record of the declared operation with no charge: provably effect-free.
    let gave_up = acquire(&store, &pay, "gave-up");
    store.fail(&gave_up, Failure::Uncertain).unwrap();
    // The same of an undeclared operation: nobody knows its effects, so a person decides.
    let unknown = acquire(&store, &other, "unknown");
    store.fail(&unknown, Failure::Uncertain).unwrap();

    let lookups = NothingCharged::default();
    let reconciler = Reconciler::new(store.asynchronous(), lookups.clone()).declare("pay", [charge.clone()]);
    let round = reconciler.round().await;
    let left_by = LeftBy { not_declared: 1, ..LeftBy::default() };
    assert_eq!(round, Round { found: 3, confirmed: 0, not_found: 1, released: 1, left: 1, left_by });
    assert_eq!(lookups.0.load(Ordering::SeqCst), 1, "one lookup for the one uncertain effect");
    // Every resolution is in the audit trail with its cause.
    assert_eq!(
        causes(&store, &pay, "lost-answer").await,
        [(AuditKind::EffectResolved, ResolutionCause::ProviderNotFound)]
    );
    assert_eq!(causes(&store, &pay, "gave-up").await, [(AuditKind::Reconciled, ResolutionCause::EffectFree)]);
    assert!(causes(&store, &other, "unknown").await.is_empty(), "what no fact decides is not resolved");
    // The released key runs again; the effect is pending again (sent under the same provider key).
    let again = acquire(&store, &pay, "gave-up");
    assert_eq!(again.attempt(), 2);
    let resent = store.claim_effects(10).unwrap();
    assert_eq!(resent.len(), 1, "the charge is dispatched again");
    // Until the re-sent charge is reported, its record stays listed (it has an effect, so it
    // is never released); once reported, it completes.
    // The round says why: one record's charge is in flight, the other operation is undeclared.
    let left_by = LeftBy { effect_in_flight: 1, not_declared: 1, ..LeftBy::default() };
    assert_eq!(reconciler.round().await, Round { found: 2, left: 2, left_by, ..Round::default() });
    let confirmed = EffectReport::Confirmed { reference: "ch_1".into(), result: b"paid".to_vec() };
    store.report_effect(&resent[0], confirmed).unwrap();
    // What is left is left: the next round finds only the undeclared record.
    let next = reconciler.round().await;
    let left_by = LeftBy { not_declared: 1, ..LeftBy::default() };
    assert_eq!(next, Round { found: 1, left: 1, left_by, ..Round::default() });
    assert_eq!(lookups.0.load(Ordering::SeqCst), 1);
}

/// An uncertain effect is not asked about while its last dispatch may still land: the round
/// leaves it (`may_still_land`) without a lookup until the provider's settle time has passed
/// since a round first found it. Old code asked at once, and a provider slower than the call's
/// deadline answered "no such charge" for a charge still on its way: it was sent again.
#[tokio::test(start_paused = true)]
async fn an_effect_whose_call_may_still_land_is_asked_about_after_the_settle_time() {
    let settle = std::time::Duration::from_secs(30);
    let policy = Policy::default().with_provider_settle_time(settle);
    let store = Store::builder().policy("pay", policy).in_memory().unwrap();
    let pay = Scope::new("acme", "pay").unwrap();
    let charge = EffectName::new("charge").unwrap();
    let lease = acquire(&store, &pay, "slow-call");
    store.enqueue_effect(&lease, &charge, 1, b"{}".to_vec()).unwrap();
    let claimed = store.claim_effects(1).unwrap();
    store.report_effect(&claimed[0], EffectReport::Unknown { reason: "deadline".into() }).unwrap();

    let lookups = NothingCharged::default();
    let reconciler = Reconciler::new(store.asynchronous(), lookups.clone());
    let waiting =
        Round { found: 1, left: 1, left_by: LeftBy { may_still_land: 1, ..LeftBy::default() }, ..Round::default() };
    assert_eq!(reconciler.round().await, waiting);
    tokio::time::advance(settle - std::time::Duration::from_millis(1)).await;
    assert_eq!(reconciler.round().await, waiting, "still inside the settle time");
    assert_eq!(lookups.0.load(Ordering::SeqCst), 0, "no lookup while the call may land");
    tokio::time::advance(std::time::Duration::from_millis(1)).await;
    assert_eq!(reconciler.round().await, Round { found: 1, not_found: 1, ..Round::default() });
    assert_eq!(lookups.0.load(Ordering::SeqCst), 1, "asked once the call can no longer land");
    assert_eq!(store.claim_effects(10).unwrap().len(), 1, "sent again under the same provider key");
}
