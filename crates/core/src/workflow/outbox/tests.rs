//! Tests of the outbox rules: enqueue, claims and leases, reports, backoff, the provider-key
//! window and resolution.

use super::*;

fn at(s: u64) -> Timestamp {
    Timestamp::from_millis(1_000_000 + s * 1_000)
}

fn policy() -> Policy {
    Policy::default()
        .with_lease_ttl(Duration::from_secs(10))
        .with_provider_key_retention(Duration::from_secs(100))
        .with_dispatch_backoff(Duration::from_secs(1), Duration::from_secs(8))
}

fn item() -> OutboxItem {
    let scoped = ScopedKey::new(Scope::new("acme", "pay").unwrap(), IdempotencyKey::new("order-842").unwrap());
    let lease = Lease::new(scoped, 5, at(10), 1);
    OutboxItem::new(&lease, EffectName::new("authorize").unwrap(), 1, b"p".to_vec(), at(0)).unwrap()
}

fn claimed(item: &OutboxItem, now: Timestamp) -> OutboxItem {
    match item.claim(now, &policy()) {
        Claim::Claimed(item) => item,
        other => panic!("expected a claim, got {other:?}"),
    }
}

fn confirmed() -> EffectReport {
    EffectReport::Confirmed { reference: "auth_1".into(), result: b"r".to_vec() }
}

#[test]
fn the_provider_key_is_derived_from_the_local_key_and_the_effect() {
    let item = item();
    assert_eq!(item.provider_key.as_str(), "order-842:authorize-v1");
    assert_eq!(item.record_fence, 5);
    assert_eq!(item.due_at(), Some(at(0)));
    // Every valid key can be dispatched: a derived key over 255 bytes takes its hashed form.
    let item_of = |key: String| {
        let scoped = ScopedKey::new(Scope::new("a", "b").unwrap(), IdempotencyKey::new(key).unwrap());
        let lease = Lease::new(scoped, 1, at(1), 1);
        OutboxItem::new(&lease, EffectName::new("authorize").unwrap(), 1, vec![], at(0)).unwrap().provider_key
    };
    let longest = item_of("k".repeat(255));
    assert_eq!(longest, item_of("k".repeat(255)), "stable");
    assert!(longest.as_str().starts_with(crate::HASHED_KEY_PREFIX) && longest.as_str().ends_with("~authorize-v1"));
    assert_ne!(longest, item_of("k".repeat(254)));
    assert_eq!(item_of("k".repeat(242)).as_str(), format!("{}:authorize-v1", "k".repeat(242)));
    assert!(item_of("k".repeat(243)).as_str().starts_with(crate::HASHED_KEY_PREFIX));
}

#[test]
fn hashed_provider_keys_never_equal_a_short_form() {
    let effect = EffectName::new("e").unwrap();
    let long = IdempotencyKey::new("x".repeat(255)).unwrap();
    let hashed = effect.provider_key(&long, 7).unwrap();
    assert!(!hashed.as_str().contains(':'));
    // A local key spelled like the hash part gets a short form, with a `:`: another key.
    let hash_part = hashed.as_str().strip_suffix("~e-v7").unwrap();
    let lookalike = effect.provider_key(&IdempotencyKey::new(hash_part).unwrap(), 7).unwrap();
    assert_ne!(lookalike, hashed);
    assert_eq!(lookalike.as_str(), format!("{hash_part}:e-v7"));
    // The hash covers the whole short form: the version and the name change it.
    assert_ne!(effect.provider_key(&long, 8).unwrap().as_str().get(..67), hashed.as_str().get(..67));
    let other = EffectName::new("f").unwrap().provider_key(&long, 7).unwrap();
    assert_ne!(other.as_str().get(..67), hashed.as_str().get(..67));
}

#[test]
fn a_claim_fences_each_dispatch_and_a_stale_report_is_refused() {
    let first = claimed(&item(), at(0));
    assert_eq!((first.fence, first.dispatches, first.first_sent_at), (1, 1, Some(at(0))));
    assert_eq!(first.claim(at(5), &policy()), Claim::NotDue, "a live claim is not taken over");
    // The dispatcher died: after the lease, the next claim re-sends the same key, in doubt.
    let second = claimed(&first, at(10));
    assert_eq!((second.fence, second.in_doubt, second.first_sent_at), (2, true, Some(at(0))));
    assert_eq!(second.provider_key, first.provider_key);
    assert_eq!(
        second.report(1, confirmed(), at(11), &policy()),
        Err(OutboxRefusal::StaleClaim { presented: 1, current: 2 })
    );
    let done = second.report(2, confirmed(), at(11), &policy()).unwrap();
    assert_eq!(done.state, OutboxState::Confirmed { reference: "auth_1".into() });
    assert_eq!(done.claim(at(12), &policy()), Claim::Finished);
    assert!(matches!(done.report(2, confirmed(), at(12), &policy()), Err(OutboxRefusal::WrongState { .. })));
}

#[test]
fn retryable_reports_back_off_exponentially_up_to_the_cap() {
    let mut current = item();
    let mut dues = Vec::new();
    for n in 0..6 {
        let now = current.due_at().unwrap();
        let dispatching = claimed(&current, now);
        current = dispatching
            .report(dispatching.fence, EffectReport::Retryable { reason: "503".into() }, now, &policy())
            .unwrap();
        dues.push(current.due_at().unwrap().as_millis() - now.as_millis());
        assert!(!current.in_doubt, "a retryable answer is not a doubt ({n})");
    }
    assert_eq!(dues, [1_000, 2_000, 4_000, 8_000, 8_000, 8_000]);
    assert_eq!(current.claim(at(0), &policy()), Claim::NotDue);
}

#[test]
fn an_unknown_outcome_is_retried_only_inside_the_provider_window() {
    let dispatching = claimed(&item(), at(0));
    let uncertain =
        dispatching.report(1, EffectReport::Unknown { reason: "timeout".into() }, at(1), &policy()).unwrap();
    assert!(uncertain.needs_reconciliation());
    assert_eq!(uncertain.claim(at(2), &policy()), Claim::Finished, "an uncertain item is never dispatched by itself");
    assert!(uncertain.retry(at(99), &policy()).is_ok());
    assert_eq!(
        uncertain.retry(at(100), &policy()),
        Err(OutboxRefusal::ProviderKeyExpired { first_sent_at: at(0), window_ended: at(100) })
    );
    // Past the window, only what the provider says resolves it.
    let resent = uncertain.resolve(ProviderState::NotFound, at(150), &policy()).unwrap();
    assert_eq!((resent.in_doubt, resent.first_sent_at), (false, None));
    let again = claimed(&resent, at(150));
    assert_eq!(again.first_sent_at, Some(at(150)), "a new window");
    let failed = uncertain.resolve(ProviderState::Failed { body: b"declined".to_vec() }, at(150), &policy()).unwrap();
    assert_eq!(failed.state.kind(), OutboxStateKind::Failed);
}

#[test]
fn failed_is_refused_while_an_earlier_dispatch_may_still_land() {
    // A provider that may apply a call up to 30 s after it was sent (its settle time).
    let policy = policy().with_provider_settle_time(Duration::from_secs(30));
    let dispatching = claimed(&item(), at(0));
    assert_eq!(dispatching.may_still_land_until(&policy), Some(at(40)), "the claim's lease end, plus 30 s");
    let uncertain = dispatching.report(1, EffectReport::Unknown { reason: "timeout".into() }, at(5), &policy).unwrap();
    assert_eq!(uncertain.may_still_land_until(&policy), Some(at(35)), "the report, plus 30 s");
    let declined = || ProviderState::Failed { body: b"declined".to_vec() };
    // A lookup that finds nothing at 10 s cannot tell "not made" from "not yet".
    for now in [at(5), at(10), at(34)] {
        assert_eq!(uncertain.resolve(declined(), now, &policy), Err(OutboxRefusal::MayStillLand { until: at(35) }));
    }
    let refusal = uncertain.resolve(declined(), at(10), &policy).unwrap_err();
    assert_eq!(refusal.code(), crate::ErrorCode::WrongState);
    assert!(refusal.to_string().contains("may still be applied by the provider until"), "{refusal}");
    // Confirmed is a fact at once; not found sends it again under the same provider key.
    let confirmed =
        uncertain.resolve(ProviderState::Confirmed { reference: "ch_1".into(), result: vec![] }, at(6), &policy);
    assert_eq!(confirmed.unwrap().state.kind(), OutboxStateKind::Confirmed);
    assert_eq!(
        uncertain.resolve(ProviderState::NotFound, at(6), &policy).unwrap().state.kind(),
        OutboxStateKind::Pending
    );
    // Once nothing can land any more, failed is taken.
    assert_eq!(uncertain.resolve(declined(), at(35), &policy).unwrap().state.kind(), OutboxStateKind::Failed);
    // A provider that applies a call before it answers (settle time zero): failed at once.
    let synchronous = policy.clone().with_provider_settle_time(Duration::ZERO);
    assert_eq!(uncertain.resolve(declined(), at(5), &synchronous).unwrap().state.kind(), OutboxStateKind::Failed);
    // Nothing of a pending item is on its way.
    assert_eq!(item().may_still_land_until(&policy), None);
}

#[test]
fn a_dispatcher_that_died_past_the_window_sends_the_item_to_reconciliation() {
    let dispatching = claimed(&item(), at(0));
    let Claim::ToReconcile(uncertain) = dispatching.claim(at(100), &policy()) else { panic!() };
    assert_eq!(uncertain.state, OutboxState::Uncertain { cause: EffectDoubt::ProviderKeyExpired });
    assert_eq!(uncertain.fence, dispatching.fence, "no new claim was issued");
    // A retryable answer never makes an item in doubt: it may be dispatched after the window.
    let pending = dispatching.report(1, EffectReport::Retryable { reason: "429".into() }, at(1), &policy()).unwrap();
    assert!(matches!(pending.claim(at(500), &policy()), Claim::Claimed(_)));
}

#[test]
fn enqueue_is_idempotent_and_refuses_another_payload() {
    let first = item();
    assert_eq!(OutboxItem::enqueue(None, first.clone()), Ok((first.clone(), true)));
    assert_eq!(OutboxItem::enqueue(Some(first.clone()), first.clone()), Ok((first.clone(), false)));
    let other = OutboxItem { payload: b"q".to_vec(), ..first.clone() };
    assert_eq!(OutboxItem::enqueue(Some(first), other), Err(OutboxRefusal::PayloadMismatch));
}

#[test]
fn the_intent_record_follows_its_effect() {
    use crate::{DecisionContext, Fingerprint, decide};
    let policy = policy();
    let (scope, key) = (Scope::new("acme", "pay").unwrap(), IdempotencyKey::new("order-842").unwrap());
    let reserved =
        decide(None, &scope, &key, &Fingerprint::from_bytes([1; 32]), DecisionContext::new(at(0), &policy)).unwrap();
    let record = reserved.write.unwrap();
    let lease = reserved.answer.lease().unwrap().clone();
    let item = OutboxItem::new(&lease, EffectName::new("authorize").unwrap(), 1, vec![], at(0)).unwrap();
    // Waiting for a dispatch after a backoff: the record's lease is held until then.
    let waiting = OutboxItem { state: OutboxState::Pending { due_at: at(30) }, ..item.clone() };
    let held = waiting.record_after(&record, None, at(1), &policy).unwrap().unwrap();
    assert_eq!(held.state, State::InProgress { lease_expires_at: at(40) });
    // Confirmed: the record completes with the result.
    let dispatching = claimed(&item, at(1));
    let done = dispatching.report(1, confirmed(), at(2), &policy).unwrap();
    let completed = done.record_after(&held, Some(b"r".to_vec()), at(2), &policy).unwrap().unwrap();
    assert!(matches!(completed.state, State::Completed { ref result, .. } if result == b"r"));
    assert_eq!(done.record_after(&completed, Some(b"r".to_vec()), at(3), &policy), Ok(None), "already there");
    // Unknown, then confirmed by a query: uncertain, then reconciled.
    let unknown = dispatching.report(1, EffectReport::Unknown { reason: "t".into() }, at(2), &policy).unwrap();
    let uncertain = unknown.record_after(&held, None, at(2), &policy).unwrap().unwrap();
    assert_eq!(uncertain.state, State::Uncertain { cause: UncertainCause::Reported });
    let resolved = unknown
        .resolve(ProviderState::Confirmed { reference: "a".into(), result: b"q".to_vec() }, at(3), &policy)
        .unwrap();
    let reconciled = resolved.record_after(&uncertain, Some(b"q".to_vec()), at(3), &policy).unwrap().unwrap();
    assert!(matches!(reconciled.state, State::Completed { ref result, .. } if result == b"q"));
    // A record taken over by a newer attempt is left alone.
    let newer = Record { fence: record.fence + 1, ..held };
    assert_eq!(done.record_after(&newer, Some(b"r".to_vec()), at(4), &policy), Ok(None));
}

#[test]
fn items_round_trip_through_their_encoding() {
    let mut item = claimed(&item(), at(3));
    item.last_reason = Some("x".repeat(10));
    let key = item.storage_key();
    assert_eq!(OutboxItem::decode(&key, &item.encode()), Ok(item.clone()));
    assert!(OutboxItem::decode(&key[..key.len() - 1], &item.encode()).is_err());
    assert!(OutboxItem::decode(&key, &[OUTBOX_FORMAT + 1]).is_err());
    assert_eq!(cut("é".repeat(1000)).len(), 1024);
}
