//! The shared decision table, as a runner every backend calls.
//!
//! `tests/testdata/decisions.json` writes the idempotency state table once, as data: every
//! stored state × same/different fingerprint × before/at/after each TTL, with the answer and
//! the state afterwards. [`run_decision_table`] plays each case against a fresh store of a
//! [`Backend`] through [`IdempotencyStore`] alone, so the redb store (file and memory, native
//! and wasm32), the PostgreSQL adapter and the pure core all answer the same table.
//!
//! ```
//! let table = idemdb_interface::conformance::table();
//! assert!(table.cases.len() >= 50);
//! ```

use std::future::Future;
use std::time::Duration;

use idemdb_core::{ExpiredLease, Failure, Fingerprint, IdempotencyKey, Policy, Reservation, Reserve, Scope};
use serde::Deserialize;

use crate::IdempotencyStore;

const TABLE: &str = include_str!("../../../tests/testdata/decisions.json");

/// The instant every stored state is reached (milliseconds since the epoch).
pub const T: u64 = 1_000_000_000;
/// The result a completed case stores.
pub const RESULT: &[u8] = b"{\"charge\":\"ch_1\"}";
/// The failure a definitively failed case stores.
pub const DECLINED: &[u8] = b"{\"error\":\"card_declined\"}";
/// The operation whose policy makes an expired lease uncertain.
pub const OP_UNCERTAIN: &str = "op-uncertain";
/// The operation whose policy lets a retry take an expired lease over.
pub const OP_TAKEOVER: &str = "op-takeover";
/// The operation the workflow stories give [`ExpiredLease::TakeoverIfNoEffect`](idemdb_core::ExpiredLease).
pub const OP_CLASSIFIED: &str = "op-classified";

/// The table.
#[derive(Debug, Deserialize)]
pub struct Table {
    /// The TTLs every case runs under.
    pub policy: PolicyMs,
    /// The cases.
    pub cases: Vec<Case>,
}

/// TTLs of the table's policy, in milliseconds.
#[derive(Debug, Deserialize, Clone, Copy)]
pub struct PolicyMs {
    /// Lease TTL.
    pub lease_ms: u64,
    /// Response TTL.
    pub response_ms: u64,
    /// Tombstone TTL.
    pub tombstone_ms: u64,
}

/// One case: a stored state, a request at a time, and what must happen.
#[derive(Debug, Deserialize)]
#[allow(missing_docs)] // The fields are the table's columns; `about` in the JSON explains them.
pub struct Case {
    pub name: String,
    pub stored: String,
    pub request: String,
    pub at: String,
    pub delta_ms: i64,
    pub expired_lease: String,
    pub verdict: String,
    pub then: String,
    pub fence: Option<String>,
    pub attempt: Option<u32>,
    pub retry_after_ms: Option<u64>,
    pub outcome: Option<String>,
    pub cause: Option<String>,
    pub stored_kind: Option<String>,
}

/// The table, parsed.
///
/// # Panics
/// If the embedded table does not parse (a build with a broken `decisions.json`).
pub fn table() -> Table {
    serde_json::from_str(TABLE).expect("decisions.json parses")
}

impl PolicyMs {
    /// The policy of a case's `expired_lease` rule (`uncertain` or `takeover`).
    ///
    /// # Panics
    /// On a rule the table does not define.
    pub fn policy(&self, rule: &str) -> Policy {
        let rule: ExpiredLease = rule.parse().expect("expired_lease rule");
        Policy::default()
            .with_lease_ttl(Duration::from_millis(self.lease_ms))
            .with_response_ttl(Duration::from_millis(self.response_ms))
            .with_tombstone_ttl(Duration::from_millis(self.tombstone_ms))
            .with_expired_lease(rule)
    }

    /// When a case's request arrives.
    ///
    /// # Panics
    /// On a time point the table does not define.
    pub fn query_time(&self, case: &Case) -> u64 {
        let base = match case.at.as_str() {
            "start" => T,
            "lease" => T + self.lease_ms,
            "response" => T + self.response_ms,
            "forget" => T + self.response_ms + self.tombstone_ms,
            other => panic!("unknown time point {other}"),
        };
        base.checked_add_signed(case.delta_ms).expect("time in range")
    }

    /// The operations a backend must configure: [`OP_UNCERTAIN`] and [`OP_TAKEOVER`] with
    /// their policies.
    pub fn operations(&self) -> [(&'static str, Policy); 2] {
        [(OP_UNCERTAIN, self.policy("uncertain")), (OP_TAKEOVER, self.policy("takeover"))]
    }
}

/// The fingerprint of a case's request (`same` or `different`).
///
/// # Panics
/// On a request the table does not define.
pub fn fingerprint(request: &str) -> Fingerprint {
    match request {
        "same" => Fingerprint::from_bytes([1; 32]),
        "different" => Fingerprint::from_bytes([2; 32]),
        other => panic!("unknown request {other}"),
    }
}

/// What a backend answered, in the table's vocabulary.
#[derive(Debug, PartialEq, Eq, Default)]
#[allow(missing_docs)] // The table's columns.
pub struct Observed {
    pub verdict: String,
    pub then: String,
    pub fence: Option<u64>,
    pub attempt: Option<u32>,
    pub retry_after_ms: Option<u64>,
    pub outcome: Option<String>,
    pub cause: Option<String>,
    pub stored_kind: Option<String>,
    pub body: Option<Vec<u8>>,
}

impl Observed {
    /// The observation of an answer; `then` is the state name afterwards (`absent` if none).
    pub fn of(answer: Reservation, then: String) -> Self {
        let mut observed = Observed { verdict: answer.name().to_string(), then, ..Observed::default() };
        match answer {
            Reservation::Acquired(lease) => {
                observed.fence = Some(lease.fence());
                observed.attempt = Some(lease.attempt());
            }
            Reservation::Replay { outcome, body } => {
                observed.outcome = Some(outcome.as_str().into());
                observed.body = Some(body);
            }
            Reservation::InProgress { retry_after } => {
                observed.retry_after_ms = Some(u64::try_from(retry_after.as_millis()).unwrap_or(u64::MAX));
            }
            Reservation::Mismatch { stored } => observed.stored_kind = Some(stored.as_str().into()),
            Reservation::NeedsReconciliation { cause } => observed.cause = Some(cause.as_str().into()),
            Reservation::Expired { outcome } => observed.outcome = Some(outcome.as_str().into()),
            other => panic!("an answer the table does not know: {other:?}"),
        }
        observed
    }
}

/// Checks an observation against its case.
///
/// # Panics
/// On any difference, naming the backend and the case.
pub fn check(case: &Case, backend: &str, observed: &Observed, previous_fence: u64, at_ms: u64) {
    let context = format!("{backend}: {} ({case:?})", case.name);
    assert_eq!(observed.verdict, case.verdict, "verdict, {context}");
    assert_eq!(observed.then, case.then, "state afterwards, {context}");
    let expected_fence = case.fence.as_deref().map(|rule| match rule {
        "fresh" => at_ms.max(previous_fence + 1),
        "previous+1" => previous_fence + 1,
        other => panic!("unknown fence rule {other}"),
    });
    assert_eq!(observed.fence, expected_fence, "fence, {context}");
    assert_eq!(observed.attempt, case.attempt, "attempt, {context}");
    assert_eq!(observed.retry_after_ms, case.retry_after_ms, "retry-after, {context}");
    assert_eq!(observed.outcome, case.outcome, "outcome, {context}");
    assert_eq!(observed.cause, case.cause, "cause, {context}");
    assert_eq!(observed.stored_kind, case.stored_kind, "stored state in a mismatch, {context}");
    if case.verdict == "replay" {
        let expected: &[u8] = if case.outcome.as_deref() == Some("failed") { DECLINED } else { RESULT };
        assert_eq!(observed.body.as_deref(), Some(expected), "replayed body, {context}");
    }
}

/// A backend the table can run against.
pub trait Backend {
    /// The store it opens.
    type Store: IdempotencyStore;

    /// Opens a fresh, empty store with these operations' policies, reading the time last given
    /// to [`Backend::set_time`]. Time only moves forward after the open (the runner never sets
    /// it back), as a store's own notion of time does.
    fn open(&mut self, operations: &[(&'static str, Policy)]) -> impl Future<Output = Self::Store>;

    /// Sets the time the stores of this backend read, in milliseconds since the epoch.
    fn set_time(&mut self, millis: u64);
}

/// Plays every case of the table against fresh stores of `backend`, through
/// [`IdempotencyStore`] alone; returns the number of cases.
///
/// # Panics
/// On the first answer, state or body that differs from the table (naming `name` and the
/// case), or when the backend fails.
pub async fn run_decision_table<B: Backend>(backend: &mut B, name: &str) -> usize {
    let table = table();
    let operations = table.policy.operations();
    let key = IdempotencyKey::new("order-842:authorize-v1").expect("key");
    for case in &table.cases {
        // Every setup runs at T; an expired lease was taken a lease TTL earlier, so that
        // store is opened then (stores never let their time go back).
        let start = if case.stored == "uncertain_lease_expired" { T - table.policy.lease_ms } else { T };
        backend.set_time(start);
        let store = backend.open(&operations).await;
        let operation = if case.expired_lease == "takeover" { OP_TAKEOVER } else { OP_UNCERTAIN };
        let scope = Scope::new("tenant-a", operation).expect("scope");
        set_up(&store, backend, &scope, &key, &case.stored, table.policy).await;
        let previous_fence = get(&store, &scope, &key).await.map_or(0, |record| record.fence);
        let at_ms = table.policy.query_time(case);
        backend.set_time(at_ms);
        let answer = store.reserve(Reserve::new(&scope, &key, &fingerprint(&case.request))).await.expect("reserve");
        let then = get(&store, &scope, &key)
            .await
            .map(|record| record.state.kind().as_str().to_string())
            .unwrap_or_else(|| "absent".into());
        check(case, name, &Observed::of(answer, then), previous_fence, at_ms);
    }
    table.cases.len()
}

async fn get<S: IdempotencyStore>(store: &S, scope: &Scope, key: &IdempotencyKey) -> Option<idemdb_core::Record> {
    store.get(scope, key).await.expect("get")
}

/// Brings `(scope, key)` into the case's stored state, through the interface.
async fn set_up<B: Backend>(
    store: &B::Store,
    backend: &mut B,
    scope: &Scope,
    key: &IdempotencyKey,
    stored: &str,
    limits: PolicyMs,
) {
    let fp = fingerprint("same");
    let acquire = || async {
        match store.reserve(Reserve::new(scope, key, &fp)).await.expect("reserve") {
            Reservation::Acquired(lease) => lease,
            other => panic!("setup expected a lease, got {other:?}"),
        }
    };
    match stored {
        "none" => {}
        "in_progress" => {
            acquire().await;
        }
        "completed" | "tombstone_completed" => {
            store.complete(&acquire().await, RESULT.to_vec()).await.expect("complete")
        }
        "failed" | "tombstone_failed" => {
            store.fail(&acquire().await, Failure::Definitive(DECLINED.to_vec())).await.expect("fail");
        }
        "released" => store.fail(&acquire().await, Failure::Retryable).await.expect("release"),
        "uncertain_reported" => store.fail(&acquire().await, Failure::Uncertain).await.expect("uncertain"),
        "uncertain_lease_expired" => {
            // The store was opened a lease TTL before T: the lease runs out as time passes.
            acquire().await;
            backend.set_time(T);
            let observed = store.reserve(Reserve::new(scope, key, &fp)).await.expect("reserve");
            assert!(matches!(observed, Reservation::NeedsReconciliation { .. }), "got {observed:?}");
        }
        other => panic!("unknown stored state {other}"),
    }
    if stored.starts_with("tombstone_") {
        backend.set_time(T + limits.response_ms);
        let report = store.purge_expired(100).await.expect("purge");
        assert_eq!(report.tombstoned, 1, "purge made the tombstone");
    }
}

/// The workflow stories every [`WorkflowStore`](crate::WorkflowStore) backend must tell alike:
/// the seed note's `order-842:authorize-v1` (provider authorises, the response is lost, the
/// retry inside the provider's window returns the original authorisation, the intent
/// completes with it — one authorisation), an effect in doubt past the window that waits for a
/// provider query, a redelivered and an out-of-order webhook, a job resumed after its worker
/// died, and the expired-lease rule [`TakeoverIfNoEffect`](idemdb_core::ExpiredLease) under
/// [`OP_CLASSIFIED`] (an attempt that died before enqueueing any effect runs again; one that
/// enqueued its effect does not); a record whose effect is unresolved is never settled by
/// hand. Returns the number of stories.
///
/// # Panics
/// On the first answer that differs, naming `name`.
pub async fn run_workflow_stories<B>(backend: &mut B, name: &str) -> usize
where
    B: Backend,
    B::Store: crate::WorkflowStore,
{
    use idemdb_core::{
        Attention, Delivery, EffectName, EffectReport, InboxAnswer, JobAnswer, NewerVersion, OutboxStateKind,
        ProviderState,
    };
    use idemdb_fake_provider::Provider;

    use crate::WorkflowStore;

    const WINDOW_MS: u64 = 3_600_000;
    let lease_ms = 10_000;
    let policy = Policy::default()
        .with_lease_ttl(Duration::from_millis(lease_ms))
        .with_provider_key_retention(Duration::from_millis(WINDOW_MS));
    let classified_policy = policy.clone().with_expired_lease(idemdb_core::ExpiredLease::TakeoverIfNoEffect);
    let operations = [(OP_UNCERTAIN, policy.clone()), (OP_TAKEOVER, policy), (OP_CLASSIFIED, classified_policy)];
    let scope = Scope::new("shop", OP_UNCERTAIN).expect("scope");
    let authorize = EffectName::new("authorize").expect("effect name");
    let fp = fingerprint("same");
    let ms = |t: u64| T + t;

    // 1. order-842: the response is lost, the retry is replayed by the provider.
    backend.set_time(ms(0));
    let store = backend.open(&operations).await;
    let provider = Provider::new(WINDOW_MS);
    let key = IdempotencyKey::new("order-842").expect("key");
    let Reservation::Acquired(lease) = store.reserve(Reserve::new(&scope, &key, &fp)).await.expect("reserve") else {
        panic!("{name}: a new key is acquired")
    };
    store.enqueue_effect(&lease, &authorize, 1, b"{\"amount\":\"10.50\"}".to_vec()).await.expect("enqueue");
    let claims = store.claim_effects(8).await.expect("claim");
    assert_eq!(claims.len(), 1, "{name}: one due effect");
    assert_eq!(claims[0].provider_key.as_str(), "order-842:authorize-v1", "{name}");
    let first = provider.call(claims[0].provider_key.as_str(), ms(0));
    store.report_effect(&claims[0], EffectReport::Unknown { reason: "response lost".into() }).await.expect("report");
    let queue = store.reconciliation_queue(0).await.expect("queue");
    assert!(matches!(&queue[..], [Attention::Effect { .. }]), "{name}: the effect waits: {queue:?}");
    backend.set_time(ms(60_000));
    store
        .retry_effect(&scope, &key, &authorize, idemdb_core::ResolutionCause::Application)
        .await
        .expect("retry inside the window");
    let claims = store.claim_effects(8).await.expect("claim");
    let again = provider.call(claims[0].provider_key.as_str(), ms(60_000));
    assert_eq!(again, first.replayed(), "{name}: the provider replays the first authorisation");
    let report = EffectReport::Confirmed { reference: again.reference().to_string(), result: again.body().to_vec() };
    store.report_effect(&claims[0], report).await.expect("report");
    let item = store.effect(&scope, &key, &authorize).await.expect("effect").expect("an item");
    assert_eq!(item.state.kind(), OutboxStateKind::Confirmed, "{name}");
    let replay = store.reserve(Reserve::new(&scope, &key, &fp)).await.expect("reserve");
    assert!(matches!(replay, Reservation::Replay { ref body, .. } if body == first.body()), "{name}: {replay:?}");
    assert_eq!(provider.ledger().total(), 1, "{name}: one authorisation");

    // 2. In doubt past the window: never sent again; resolved by a query.
    let key = IdempotencyKey::new("order-843").expect("key");
    let Reservation::Acquired(lease) = store.reserve(Reserve::new(&scope, &key, &fp)).await.expect("reserve") else {
        panic!("{name}: a new key is acquired")
    };
    store.enqueue_effect(&lease, &authorize, 1, Vec::new()).await.expect("enqueue");
    let claims = store.claim_effects(8).await.expect("claim");
    provider.call(claims[0].provider_key.as_str(), ms(60_000));
    backend.set_time(ms(60_000 + WINDOW_MS));
    assert!(store.claim_effects(8).await.expect("claim").is_empty(), "{name}: not re-sent past the window");
    assert!(
        store.retry_effect(&scope, &key, &authorize, idemdb_core::ResolutionCause::Application).await.is_err(),
        "{name}: retry refused past the window"
    );
    let found = provider.query("order-843:authorize-v1").expect("the provider charged it");
    let resolved = ProviderState::Confirmed { reference: found.id, result: found.body };
    store
        .resolve_effect(&scope, &key, &authorize, resolved, idemdb_core::ResolutionCause::Application)
        .await
        .expect("resolve");
    assert!(store.reconciliation_queue(0).await.expect("queue").is_empty(), "{name}");
    assert_eq!(provider.ledger().doubles(), 0, "{name}");

    // 3. Webhooks: a redelivery and an older version arriving late.
    let newer = Delivery::new("psp", "evt_2", "sub_1", 2, "active", fingerprint("same"), Vec::new()).expect("delivery");
    let older =
        Delivery::new("psp", "evt_1", "sub_1", 1, "trialing", fingerprint("different"), Vec::new()).expect("delivery");
    assert_eq!(store.accept_delivery(&newer, NewerVersion).await.expect("accept"), InboxAnswer::Applied, "{name}");
    assert!(
        matches!(store.accept_delivery(&newer, NewerVersion).await.expect("accept"), InboxAnswer::Duplicate { .. }),
        "{name}"
    );
    assert_eq!(
        store.accept_delivery(&older, NewerVersion).await.expect("accept"),
        InboxAnswer::Stale { current_version: 2 },
        "{name}"
    );
    assert_eq!(
        store.object("psp", "sub_1").await.expect("object").map(|o| o.state).as_deref(),
        Some("active"),
        "{name}"
    );

    // 4. A job whose worker died after its first step resumes at the second.
    let job = IdempotencyKey::new("job-1").expect("key");
    let JobAnswer::Claimed(lease) = store.claim_job(&scope, &job, &fp).await.expect("claim") else {
        panic!("{name}: a new job is claimed")
    };
    let step = EffectName::new("reserve_stock").expect("step");
    store.record_step(&lease, &step, b"held".to_vec(), None).await.expect("step");
    let now = ms(60_000 + WINDOW_MS + lease_ms);
    backend.set_time(now);
    let JobAnswer::Claimed(resumed) = store.claim_job(&scope, &job, &fp).await.expect("claim") else {
        panic!("{name}: the redelivery takes over")
    };
    assert_eq!(resumed.result_of(&step), Some(&b"held"[..]), "{name}");
    store.finish_job(&resumed, b"done".to_vec()).await.expect("finish");
    assert!(store.finish_job(&lease, b"late".to_vec()).await.is_err(), "{name}: the dead worker's lease is stale");
    assert_eq!(
        store.claim_job(&scope, &job, &fp).await.expect("claim"),
        JobAnswer::Completed { result: b"done".to_vec() },
        "{name}"
    );

    // 5. Effects declared through the outbox: an attempt that died before it enqueued any is
    //    provably effect-free and its retry runs; one that enqueued its effect is not run again.
    let scope = Scope::new("shop", OP_CLASSIFIED).expect("scope");
    let acquire = |reservation: Reservation| match reservation {
        Reservation::Acquired(lease) => lease,
        other => panic!("{name}: expected a lease, got {other:?}"),
    };
    let (idle, busy) = (IdempotencyKey::new("order-844").expect("key"), IdempotencyKey::new("order-845").expect("key"));
    let dead = acquire(store.reserve(Reserve::new(&scope, &idle, &fp)).await.expect("reserve"));
    let busy_lease = acquire(store.reserve(Reserve::new(&scope, &busy, &fp)).await.expect("reserve"));
    store.enqueue_effect(&busy_lease, &authorize, 1, Vec::new()).await.expect("enqueue");
    backend.set_time(now + lease_ms);
    let retry = acquire(store.reserve(Reserve::new(&scope, &idle, &fp)).await.expect("reserve"));
    assert_eq!(
        (retry.attempt(), retry.fence()),
        (2, dead.fence() + 1),
        "{name}: the effect-free attempt is taken over"
    );
    assert!(
        store.enqueue_effect(&dead, &authorize, 1, Vec::new()).await.is_err(),
        "{name}: the holder that was taken over can add no effect"
    );
    store.enqueue_effect(&retry, &authorize, 1, Vec::new()).await.expect("the new holder enqueues");
    assert!(
        matches!(
            store.reserve(Reserve::new(&scope, &busy, &fp)).await.expect("reserve"),
            Reservation::NeedsReconciliation { .. }
        ),
        "{name}: an attempt with an effect enqueued is not run again"
    );

    // 6. A record whose effect is unresolved is never settled by hand: completing, failing or
    //    releasing it could contradict what the provider did. The effect is resolved instead.
    let settle_by_hand = [
        idemdb_core::Resolution::Released,
        idemdb_core::Resolution::Completed(b"made up".to_vec()),
        idemdb_core::Resolution::Failed(b"made up".to_vec()),
    ];
    let refused = |error: &<B::Store as IdempotencyStore>::Error| {
        use idemdb_core::Coded;
        error.code() == idemdb_core::ErrorCode::WrongState && error.to_string().contains("authorize")
    };
    for resolution in settle_by_hand.clone() {
        let error = store
            .reconcile(&scope, &busy, resolution, idemdb_core::ResolutionCause::Operator)
            .await
            .expect_err("an effect still pending: refused");
        assert!(refused(&error), "{name}: refused naming the effect: {error}");
    }
    let claims = store.claim_effects(8).await.expect("claim");
    let claim = claims.iter().find(|item| item.key == busy).expect("the busy key's effect is due");
    store.report_effect(claim, EffectReport::Unknown { reason: "timeout".into() }).await.expect("report");
    for resolution in settle_by_hand {
        let error = store
            .reconcile(&scope, &busy, resolution, idemdb_core::ResolutionCause::Operator)
            .await
            .expect_err("an effect uncertain: refused");
        assert!(refused(&error), "{name}: refused naming the effect: {error}");
    }
    let confirmed = ProviderState::Confirmed { reference: "auth_845".into(), result: b"authorised".to_vec() };
    store
        .resolve_effect(&scope, &busy, &authorize, confirmed, idemdb_core::ResolutionCause::Operator)
        .await
        .expect("the effect is resolved with the provider's facts");
    assert!(
        matches!(
            store.reserve(Reserve::new(&scope, &busy, &fp)).await.expect("reserve"),
            Reservation::Replay { ref body, .. } if body == b"authorised"
        ),
        "{name}: the record settled with its effect"
    );
    6
}

/// The business-write stories every [`BusinessStore`](crate::BusinessStore) backend must tell
/// alike: rows and a completion in one commit; a refused settlement that rolls its rows back;
/// rows with an effect's report (and a second report of the same claim refused, with its row);
/// rows with the resolution of an uncertain effect; a row the limits refuse, with nothing
/// written; listing in byte order of ids, by partition, with a cursor and a limit; deletes.
/// Returns the number of stories.
///
/// # Panics
/// On the first answer that differs, naming `name`.
pub async fn run_business_writes<B>(backend: &mut B, name: &str) -> usize
where
    B: Backend,
    B::Store: crate::BusinessStore + crate::WorkflowStore,
{
    use idemdb_core::{
        BusinessWrite, Coded, EffectName, EffectReport, ErrorCode, OutboxStateKind, ProviderState, ResolutionCause,
        RowTable, StateKind,
    };

    use crate::{BusinessStore, WorkflowStore};

    const ORDERS: RowTable = RowTable::new("app_orders");
    let policy = Policy::default().with_lease_ttl(Duration::from_secs(60));
    backend.set_time(T);
    let store = backend.open(&[(OP_UNCERTAIN, policy)]).await;
    let scope = Scope::new("shop", OP_UNCERTAIN).expect("scope");
    let fp = fingerprint("same");
    let acquire = |key: &'static str| {
        let store = &store;
        let scope = &scope;
        async move {
            match store
                .reserve(Reserve::new(scope, &IdempotencyKey::new(key).expect("key"), &fp))
                .await
                .expect("reserve")
            {
                Reservation::Acquired(lease) => lease,
                other => panic!("{name}: {key} is new, got {other:?}"),
            }
        }
    };
    let row = |partition: &'static str, id: &'static str| {
        let store = &store;
        async move { store.row(ORDERS, partition, id).await.expect("row") }
    };
    let state = |key: &'static str| {
        let store = &store;
        let scope = &scope;
        async move {
            let record = store.get(scope, &IdempotencyKey::new(key).expect("key")).await.expect("get");
            record.map(|record| record.state.kind())
        }
    };

    // 1. A row and the completion of its key, in one commit.
    let lease = acquire("order-1").await;
    let write = BusinessWrite::new().put(ORDERS, "acme", "order-1", b"1050".to_vec()).complete(&lease, RESULT.to_vec());
    assert!(store.commit_business(write).await.expect("commit").is_empty(), "{name}: no effect settled");
    assert_eq!(row("acme", "order-1").await.as_deref(), Some(&b"1050"[..]), "{name}");
    let replay = store.reserve(Reserve::new(&scope, lease.key(), &fp)).await.expect("reserve");
    assert!(matches!(replay, Reservation::Replay { ref body, .. } if body == RESULT), "{name}: {replay:?}");

    // 2. A settlement the store refuses (the lease already completed) rolls its rows back.
    let write = BusinessWrite::new().put(ORDERS, "acme", "order-1b", b"x".to_vec()).complete(&lease, b"again".to_vec());
    let refused = store.commit_business(write).await.expect_err("a completed lease completes once");
    assert_eq!(refused.code(), ErrorCode::WrongState, "{name}: {refused}");
    assert_eq!(row("acme", "order-1b").await, None, "{name}: the refused write's row was not written");

    // 3. A row with the report of a claimed effect: the report completes the key.
    let lease = acquire("order-2").await;
    let charge = EffectName::new("charge").expect("effect");
    store.enqueue_effect(&lease, &charge, 1, Vec::new()).await.expect("enqueue");
    let claims = store.claim_effects(8).await.expect("claim");
    assert_eq!(claims.len(), 1, "{name}");
    let confirmed = || EffectReport::Confirmed { reference: "ch_2".into(), result: b"paid".to_vec() };
    let write =
        BusinessWrite::new().put(ORDERS, "acme", "order-2", b"2000".to_vec()).report_effect(&claims[0], confirmed());
    let items = store.commit_business(write).await.expect("commit");
    assert_eq!(items.iter().map(|item| item.state.kind()).collect::<Vec<_>>(), [OutboxStateKind::Confirmed], "{name}");
    assert_eq!(state("order-2").await, Some(StateKind::Completed), "{name}");
    let again =
        BusinessWrite::new().put(ORDERS, "acme", "order-2-again", Vec::new()).report_effect(&claims[0], confirmed());
    assert!(store.commit_business(again).await.is_err(), "{name}: a claim is reported once");
    assert_eq!(row("acme", "order-2-again").await, None, "{name}: with its row");

    // 4. A row with the resolution of an uncertain effect.
    let lease = acquire("order-3").await;
    store.enqueue_effect(&lease, &charge, 1, Vec::new()).await.expect("enqueue");
    let claims = store.claim_effects(8).await.expect("claim");
    let unknown = EffectReport::Unknown { reason: "timed out".into() };
    let uncertain = store.report_effect(&claims[0], unknown).await.expect("report");
    let found = ProviderState::Confirmed { reference: "ch_3".into(), result: b"paid".to_vec() };
    let write = BusinessWrite::new().put(ORDERS, "acme", "order-3", b"3000".to_vec()).resolve_effect(
        &uncertain,
        found,
        ResolutionCause::Application,
    );
    store.commit_business(write).await.expect("resolve with the row");
    assert_eq!(state("order-3").await, Some(StateKind::Completed), "{name}");
    assert_eq!(row("acme", "order-3").await.as_deref(), Some(&b"3000"[..]), "{name}");

    // 5. A row the limits refuse: nothing written, the key still in progress.
    let lease = acquire("order-4").await;
    let write = BusinessWrite::new()
        .put(ORDERS, "acme", "order-4", b"ok".to_vec())
        .put(ORDERS, "acme", "order\0", Vec::new())
        .complete(&lease, RESULT.to_vec());
    let refused = store.commit_business(write).await.expect_err("a NUL byte is refused");
    assert_eq!(refused.code(), ErrorCode::InvalidArgument, "{name}: {refused}");
    assert_eq!(row("acme", "order-4").await, None, "{name}");
    assert_eq!(state("order-4").await, Some(StateKind::InProgress), "{name}");

    // 6. Listing: by partition, in byte order of ids, with a cursor and a limit; deletes.
    let mut write = BusinessWrite::new();
    for (partition, id) in [("list", "b"), ("list", "é"), ("list", "B"), ("list", "a"), ("other", "a")] {
        write = write.put(ORDERS, partition, id, format!("{partition}/{id}").into_bytes());
    }
    store.commit_business(write).await.expect("rows alone");
    let ids = |rows: Vec<idemdb_core::Row>| rows.into_iter().map(|row| row.id).collect::<Vec<_>>();
    assert_eq!(ids(store.rows(ORDERS, "list", None, 0).await.expect("rows")), ["B", "a", "b", "é"], "{name}");
    assert_eq!(ids(store.rows(ORDERS, "list", Some("a"), 2).await.expect("rows")), ["b", "é"], "{name}");
    assert_eq!(ids(store.rows(ORDERS, "list", Some("é"), 0).await.expect("rows")), Vec::<String>::new(), "{name}");
    assert_eq!(ids(store.rows(ORDERS, "nobody", None, 0).await.expect("rows")), Vec::<String>::new(), "{name}");
    let unknown_table = RowTable::new("app_never_written");
    assert_eq!(store.rows(unknown_table, "list", None, 0).await.expect("rows"), Vec::new(), "{name}");
    assert_eq!(store.row(unknown_table, "list", "a").await.expect("row"), None, "{name}");
    store
        .commit_business(BusinessWrite::new().delete(ORDERS, "list", "a").delete(ORDERS, "list", "zz"))
        .await
        .expect("delete");
    assert_eq!(ids(store.rows(ORDERS, "list", None, 0).await.expect("rows")), ["B", "b", "é"], "{name}");
    assert_eq!(row("other", "a").await.as_deref(), Some(&b"other/a"[..]), "{name}: other partitions untouched");
    6
}

/// The transaction contract every backend keeps alike: **an operation that returns an error
/// leaves no write behind**. A reservation whose effects are refused after the reservation
/// (and earlier effects) were written — the same effect twice with two payloads, or with two
/// versions — returns the error and stores nothing: no record, no outbox
/// item, no audit event; the key is then new to a retry. A refused completion changes neither
/// the record nor the trail. Returns the number of stories.
///
/// # Panics
/// On the first write a refused call left behind, naming `name`.
pub async fn run_failed_operations_write_nothing<B>(backend: &mut B, name: &str) -> usize
where
    B: Backend,
    B::Store: crate::InspectStore,
{
    use idemdb_core::{Coded, EffectName, ErrorCode, NewEffect};

    use crate::{InspectStore, WorkflowStore};

    let policy = Policy::default().with_lease_ttl(Duration::from_secs(60));
    backend.set_time(T);
    let store = backend.open(&[(OP_UNCERTAIN, policy)]).await;
    let scope = Scope::new("shop", OP_UNCERTAIN).expect("scope");
    let fp = fingerprint("same");
    let charge = EffectName::new("charge").expect("effect name");
    let effect = |payload: &[u8]| NewEffect { effect: charge.clone(), version: 1, payload: payload.to_vec() };
    // What the store holds for a key: its record, its outbox item, its audit events (when the
    // backend reads its trail back).
    let traces = |key: IdempotencyKey| {
        let (store, scope, charge) = (&store, &scope, &charge);
        async move {
            let record = store.get(scope, &key).await.expect("get");
            let item = store.effect(scope, &key, charge).await.expect("effect");
            let events = store.key_history(scope, &key, 100_000).await.expect("history").unwrap_or_default();
            (record.map(|record| record.state.kind()), item.is_some(), events.len())
        }
    };
    let nothing = (None, false, 0);

    // 1. The same effect twice with two payloads: the second is refused after the reservation
    //    and the first were written.
    let key = IdempotencyKey::new("order-900").expect("key");
    let twice = vec![effect(b"10.50"), effect(b"99.99")];
    let request = Reserve::new(&scope, &key, &fp).traced("req-1").expect("valid id").enqueuing(twice);
    let refused = store.reserve(request).await.expect_err("refused");
    assert_eq!(refused.code(), ErrorCode::KeyMismatch, "{name}: {refused}");
    assert_eq!(traces(key.clone()).await, nothing, "{name}: a refused enqueue stores nothing");
    let retry = Reserve::new(&scope, &key, &fp).traced("req-2").expect("valid id").enqueuing(vec![effect(b"10.50")]);
    let Reservation::Acquired(lease) = store.reserve(retry).await.expect("retry") else {
        panic!("{name}: the key is new to a retry")
    };
    assert_eq!((lease.attempt(), traces(key.clone()).await.1), (1, true), "{name}: the first attempt, with its effect");

    // 2. Two effects written, then the third refused (the second's name with another
    //    version): neither stays.
    let key2 = IdempotencyKey::new("order-901").expect("key");
    let refund = EffectName::new("refund").expect("effect name");
    let three = vec![
        NewEffect { effect: refund.clone(), version: 1, payload: b"r".to_vec() },
        effect(b"1"),
        NewEffect { effect: charge.clone(), version: 2, payload: b"1".to_vec() },
    ];
    let refused = store.reserve(Reserve::new(&scope, &key2, &fp).enqueuing(three)).await.expect_err("refused");
    assert_eq!(refused.code(), ErrorCode::KeyMismatch, "{name}: {refused}");
    assert_eq!(traces(key2.clone()).await, nothing, "{name}: a refused third effect stores nothing");
    assert_eq!(store.effect(&scope, &key2, &refund).await.expect("effect"), None, "{name}: nor the first effect");

    // 3. A completion refused (the lease completed already) changes neither record nor trail.
    store.complete(&lease, RESULT.to_vec()).await.expect("complete");
    let before = traces(key.clone()).await;
    assert!(store.complete(&lease, b"again".to_vec()).await.is_err(), "{name}: a lease completes once");
    assert_eq!(traces(key.clone()).await, before, "{name}: the refused completion wrote nothing");
    let replay = store.reserve(Reserve::new(&scope, &key, &fp)).await.expect("reserve");
    assert!(matches!(replay, Reservation::Replay { ref body, .. } if body == RESULT), "{name}: {replay:?}");
    3
}
