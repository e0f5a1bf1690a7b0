//! The outbox: one logical effect per intent across lost responses, dead dispatchers and the
//! end of the provider's key-retention window.

use std::time::Duration;

use idemdb::{
    Attention, EffectName, EffectReport, Fingerprint, IdempotencyKey, ManualClock, OutboxStateKind, ProviderState,
    Refusal, Reservation, Reserve, Scope, Store,
};
use idemdb_fake_provider::Provider;

use super::{LEASE_MS, T0, WINDOW_MS, store};

fn authorize() -> EffectName {
    EffectName::new("authorize").expect("name")
}

/// Reserves the intent and enqueues its effect in one transaction; returns the lease's fence.
fn place(store: &Store, scope: &Scope, key: &IdempotencyKey) -> u64 {
    store
        .write(|txn| {
            let Reservation::Acquired(lease) =
                txn.reserve(Reserve::new(scope, key, &Fingerprint::from_bytes([1; 32])))?
            else {
                panic!("a new key is acquired")
            };
            txn.enqueue_effect(&lease, &authorize(), 1, b"{\"amount\":\"10.50\"}".to_vec())?;
            Ok::<_, idemdb::Error>(lease.fence())
        })
        .expect("place the order")
}

/// One dispatcher pass: claims what is due, calls the provider, and reports — unless the
/// response is "lost" (`lose` returns true for it), in which case the dispatcher reports an
/// unknown outcome.
fn dispatch(store: &Store, provider: &Provider, clock: &ManualClock, lose: &mut dyn FnMut() -> bool) -> usize {
    let claims = store.claim_effects(64).expect("claim");
    for claim in &claims {
        let answer = provider.call(claim.provider_key.as_str(), clock.now_millis());
        let report = if lose() {
            EffectReport::Unknown { reason: "timeout after sending".into() }
        } else {
            EffectReport::Confirmed { reference: answer.reference().to_string(), result: answer.body().to_vec() }
        };
        store.report_effect(claim, report).expect("report");
    }
    claims.len()
}

trait Millis {
    fn now_millis(&self) -> u64;
}

impl Millis for ManualClock {
    fn now_millis(&self) -> u64 {
        idemdb::Clock::now(self).as_millis()
    }
}

/// The seed note's story: the service sends `order-842:authorize-v1`; the provider authorises
/// but the response is lost; the retry with the same key returns the original authorisation;
/// the service records the reference and completes — one authorisation.
#[test]
fn order_842_authorised_once_although_the_first_response_was_lost() {
    let clock = ManualClock::new(T0);
    let store = store(&clock);
    let provider = Provider::new(WINDOW_MS);
    let (scope, key) = (Scope::new("shop", "authorize_payment").unwrap(), IdempotencyKey::new("order-842").unwrap());
    place(&store, &scope, &key);

    let mut first = true;
    assert_eq!(dispatch(&store, &provider, &clock, &mut || std::mem::take(&mut first)), 1);
    let item = store.effect(&scope, &key, &authorize()).unwrap().unwrap();
    assert_eq!(item.provider_key.as_str(), "order-842:authorize-v1");
    assert_eq!(item.state.kind(), OutboxStateKind::Uncertain);
    let queue = store.reconciliation_queue(0).unwrap();
    assert!(queue.iter().any(|entry| matches!(entry, Attention::Effect { item, .. } if item.key == key)), "{queue:?}");
    assert!(matches!(
        store.reserve(Reserve::new(&scope, &key, &Fingerprint::from_bytes([1; 32]))).unwrap(),
        Reservation::NeedsReconciliation { .. }
    ));

    // Inside the provider's window, the same key is sent again: the provider replays.
    clock.advance(Duration::from_secs(60));
    store.retry_effect(&scope, &key, &authorize(), idemdb::ResolutionCause::Operator).unwrap();
    assert_eq!(dispatch(&store, &provider, &clock, &mut || false), 1);
    let item = store.effect(&scope, &key, &authorize()).unwrap().unwrap();
    let original = provider.query("order-842:authorize-v1").unwrap();
    assert_eq!(item.state, idemdb::OutboxState::Confirmed { reference: original.id.clone() });
    assert_eq!(provider.ledger().count("order-842:authorize-v1"), 1, "one authorisation");
    // The intent completed with the original authorisation, and replays it.
    let replay = store.reserve(Reserve::new(&scope, &key, &Fingerprint::from_bytes([1; 32]))).unwrap();
    assert_eq!(replay, Reservation::Replay { outcome: idemdb::OutcomeClass::Completed, body: original.body });
    assert!(store.reconciliation_queue(0).unwrap().is_empty());
}

#[test]
fn a_dead_dispatcher_is_replaced_inside_the_window_and_the_provider_replays() {
    let clock = ManualClock::new(T0);
    let store = store(&clock);
    let provider = Provider::new(WINDOW_MS);
    let scope = Scope::new("shop", "pay").unwrap();
    let keys: Vec<IdempotencyKey> = (0..20).map(|i| IdempotencyKey::new(format!("order-{i}")).unwrap()).collect();
    for key in &keys {
        place(&store, &scope, key);
    }
    // A dispatcher claims everything, calls the provider for all, then dies before reporting.
    let claims = store.claim_effects(64).unwrap();
    assert_eq!(claims.len(), 20);
    for claim in &claims {
        provider.call(claim.provider_key.as_str(), clock.now_millis());
    }
    assert!(store.claim_effects(64).unwrap().is_empty(), "live claims are not taken over");
    clock.advance(Duration::from_millis(LEASE_MS));
    assert_eq!(dispatch(&store, &provider, &clock, &mut || false), 20, "expired claims are dispatched again");
    assert_eq!(provider.ledger().doubles(), 0, "every repeat was replayed by the provider");
    assert_eq!(provider.ledger().total(), 20);
    for key in &keys {
        let item = store.effect(&scope, key, &authorize()).unwrap().unwrap();
        assert!(item.in_doubt && item.dispatches == 2);
        assert!(matches!(
            store.reserve(Reserve::new(&scope, key, &Fingerprint::from_bytes([1; 32]))).unwrap(),
            Reservation::Replay { .. }
        ));
    }
    // The stale reports of the dead dispatcher are refused.
    let stale = store.report_effect(&claims[0], EffectReport::Failed { body: vec![] });
    assert!(
        matches!(stale, Err(idemdb::Error::Refused(Refusal::Outbox(idemdb::OutboxRefusal::StaleClaim { .. })))),
        "{stale:?}"
    );
}

#[test]
fn past_the_provider_window_an_uncertain_effect_is_never_sent_again_without_a_query() {
    let clock = ManualClock::new(T0);
    let store = store(&clock);
    let provider = Provider::new(WINDOW_MS);
    let scope = Scope::new("shop", "pay").unwrap();
    let (sent, unsent) = (IdempotencyKey::new("order-a").unwrap(), IdempotencyKey::new("order-b").unwrap());
    place(&store, &scope, &sent);
    place(&store, &scope, &unsent);
    // Both claimed; the dispatcher reaches the provider for `order-a` only, then dies.
    let claims = store.claim_effects(64).unwrap();
    for claim in claims.iter().filter(|claim| claim.key == sent) {
        provider.call(claim.provider_key.as_str(), clock.now_millis());
    }
    // The dispatchers come back after the provider forgot the keys.
    clock.advance(Duration::from_millis(WINDOW_MS + 1));
    assert_eq!(dispatch(&store, &provider, &clock, &mut || false), 0, "nothing in doubt is sent past the window");
    assert_eq!(provider.ledger().total(), 1);
    for key in [&sent, &unsent] {
        let retry = store.retry_effect(&scope, key, &authorize(), idemdb::ResolutionCause::Operator);
        assert!(
            matches!(
                retry,
                Err(idemdb::Error::Refused(Refusal::Outbox(idemdb::OutboxRefusal::ProviderKeyExpired { .. })))
            ),
            "{retry:?}"
        );
    }
    let queue = store.reconciliation_queue(0).unwrap();
    assert_eq!(queue.len(), 2, "both effects wait (their records follow them, and are not listed twice): {queue:?}");
    assert!(queue.iter().all(|entry| matches!(entry, Attention::Effect { .. })));
    // Query first, then resolve: the provider did charge `order-a`, and never saw `order-b`.
    let found = provider.query("order-a:authorize-v1").unwrap();
    store
        .resolve_effect(
            &scope,
            &sent,
            &authorize(),
            ProviderState::Confirmed { reference: found.id, result: found.body.clone() },
            idemdb::ResolutionCause::Operator,
        )
        .unwrap();
    assert_eq!(provider.query("order-b:authorize-v1"), None);
    store
        .resolve_effect(&scope, &unsent, &authorize(), ProviderState::NotFound, idemdb::ResolutionCause::Operator)
        .unwrap();
    assert_eq!(dispatch(&store, &provider, &clock, &mut || false), 1, "only the effect that never happened is sent");
    assert_eq!((provider.ledger().total(), provider.ledger().doubles()), (2, 0));
    for key in [&sent, &unsent] {
        let answer = store.reserve(Reserve::new(&scope, key, &Fingerprint::from_bytes([1; 32]))).unwrap();
        assert!(matches!(answer, Reservation::Replay { .. }), "{answer:?}");
    }
    assert!(store.reconciliation_queue(0).unwrap().is_empty());
}

#[test]
fn retryable_answers_back_off_and_a_definitive_failure_fails_the_intent() {
    let clock = ManualClock::new(T0);
    let store = store(&clock);
    let scope = Scope::new("shop", "pay").unwrap();
    let key = IdempotencyKey::new("order-9").unwrap();
    place(&store, &scope, &key);
    let claim = store.claim_effects(1).unwrap().remove(0);
    let item = store.report_effect(&claim, EffectReport::Retryable { reason: "429".into() }).unwrap();
    assert_eq!(item.due_at().map(|due| due.as_millis() - T0), Some(1_000));
    assert!(store.claim_effects(1).unwrap().is_empty(), "not before the backoff");
    // The intent's lease is held while the effect waits, so a retry hears "in progress".
    let answer = store.reserve(Reserve::new(&scope, &key, &Fingerprint::from_bytes([1; 32]))).unwrap();
    assert!(matches!(answer, Reservation::InProgress { .. }), "{answer:?}");
    clock.advance(Duration::from_secs(1));
    let claim = store.claim_effects(1).unwrap().remove(0);
    store.report_effect(&claim, EffectReport::Failed { body: b"{\"error\":\"card_declined\"}".to_vec() }).unwrap();
    let answer = store.reserve(Reserve::new(&scope, &key, &Fingerprint::from_bytes([1; 32]))).unwrap();
    assert_eq!(
        answer,
        Reservation::Replay { outcome: idemdb::OutcomeClass::Failed, body: b"{\"error\":\"card_declined\"}".to_vec() }
    );
}

#[test]
fn a_new_attempt_after_a_refusal_is_a_new_key_linked_in_the_audit_trail() {
    let clock = ManualClock::new(T0);
    let store = store(&clock);
    let scope = Scope::new("shop", "pay").unwrap();
    let (old, new) = (IdempotencyKey::new("order-9").unwrap(), IdempotencyKey::new("order-9-retry-1").unwrap());
    assert!(matches!(store.supersede(&scope, &old, &new), Err(idemdb::Error::Refused(Refusal::NotFound))));
    place(&store, &scope, &old);
    store.supersede(&scope, &old, &new).unwrap();
    let events = store.audit_events(1000).unwrap();
    let link = events.iter().find(|event| event.kind == idemdb::AuditKind::Superseded).expect("a superseded event");
    assert_eq!(link.key_hash, store.key_hash(&scope, &new));
    assert_eq!(link.correlation.as_deref(), Some(format!("supersedes:{}", store.key_hash(&scope, &old)).as_str()));
}
