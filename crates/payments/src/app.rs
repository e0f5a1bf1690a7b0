//! What the handlers and the dispatcher share: the ledger, the provider, the charges' wake-ups,
//! the admin settings and the webhook verifier; and who a request's tenant is.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::http::{HeaderMap, header};
use idemdb_core::{EffectName, KeyError, OutboxItem, OutboxStateKind, ScopedKey};
use idemdb_http::{HeldKeys, StoredResponse, WebhookVerifier};
use idemdb_interface::WorkflowStore;
use tokio::sync::{Notify, oneshot};

use crate::backend::POLL;
use crate::charge::CHARGE_EFFECT;
use crate::provider::Provider;

/// What the handlers share.
#[derive(Debug)]
pub struct App<B> {
    /// Payments and the idempotency store.
    pub backend: B,
    /// The simulated provider.
    pub provider: Provider,
    /// What the payment handlers and the dispatcher share.
    pub(crate) charges: Charges,
    /// Admin requests (`None`: not enabled).
    pub(crate) admin: Option<Admin>,
    /// The verifier of the provider's webhook signatures (`None`: deliveries are not signed).
    pub(crate) webhooks: Option<WebhookVerifier>,
}

/// The tenant of a request: the token of `Authorization: Bearer <tenant>`.
pub fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| token.to_string())
}

/// The operator's side of the service: the token admin requests carry and where backups go.
#[derive(Clone)]
pub struct Admin {
    token: String,
    pub(crate) backup_dir: Option<PathBuf>,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin").field("backup_dir", &self.backup_dir).finish_non_exhaustive()
    }
}

impl Admin {
    /// Admin requests authenticated by `token` (at least 16 bytes), writing backups into
    /// `backup_dir` (`None`: the backend has no backup here, the endpoint says so).
    ///
    /// # Errors
    /// A token shorter than 16 bytes.
    pub fn new(token: impl Into<String>, backup_dir: Option<PathBuf>) -> Result<Admin, String> {
        let token = token.into();
        if token.len() < 16 {
            return Err("the admin token must be at least 16 bytes".into());
        }
        Ok(Admin { token, backup_dir })
    }

    /// Whether `headers` carry the admin token (compared in constant time).
    pub(crate) fn authorised(&self, headers: &HeaderMap) -> bool {
        let Some(given) = bearer(headers) else { return false };
        let (given, token) = (given.as_bytes(), self.token.as_bytes());
        given.len() == token.len() && given.iter().zip(token).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }
}

/// What a payment's handler and the dispatcher share: the effect's name, a wake-up for the
/// dispatcher, the handlers waiting for a charge, each handed by the dispatcher (through a
/// channel of its own) the response the payment's record was finished with, and the layer's
/// register of the keys this process works on.
#[derive(Debug)]
pub(crate) struct Charges {
    pub(crate) effect: EffectName,
    pub(crate) wake: Notify,
    /// The idempotency layer's register of held keys: the dispatcher holds a payment's key
    /// while it sends its charge, so a retry meanwhile is told to come back in a second; after
    /// a restart, a key nothing holds is told when its charge is due again.
    pub(crate) held: HeldKeys,
    /// Waiting handlers by the encoded `(scope, key)` of their charge.
    waiting: Mutex<HashMap<Vec<u8>, Vec<Waiter>>>,
    /// Whether another instance's dispatcher may dispatch a charge (a shared store): it tells
    /// no handler here, so a waiting handler also looks at the store every [`POLL`].
    shared: bool,
}

/// A waiting handler's end of its channel: the record's response, or `None` when the dispatch
/// ended without finishing the record.
type Waiter = oneshot::Sender<Option<StoredResponse>>;

/// How a handler's wait for its charge ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WaitOutcome {
    /// This process's dispatcher finished the payment's record with this response (committed).
    Answered(StoredResponse),
    /// The store shows the charge finished or uncertain (its state): another instance's
    /// dispatcher, a reconciliation, or a dispatch whose word did not reach this handler. The
    /// record says the answer.
    Seen(OutboxStateKind),
    /// Still pending or dispatching at the limit, or gone.
    Waiting,
}

impl Charges {
    pub(crate) fn new(shared: bool, held: HeldKeys) -> Result<Charges, KeyError> {
        let effect = EffectName::new(CHARGE_EFFECT)?;
        Ok(Charges { effect, wake: Notify::new(), held, waiting: Mutex::default(), shared })
    }

    fn waiting(&self) -> MutexGuard<'_, HashMap<Vec<u8>, Vec<Waiter>>> {
        // Only inserts and removals happen under this lock: a panic cannot leave it inconsistent.
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Tells the dispatcher that a charge was enqueued (or is due again).
    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }

    /// Tells the handlers waiting for `item` that its dispatch has ended (the dispatcher calls
    /// this after its report, whatever it was), with the response the payment's record was
    /// finished with when the report committed.
    pub(crate) fn dispatched(&self, item: &OutboxItem, answer: Option<&StoredResponse>) {
        let waiters = self.waiting().remove(&ScopedKey::encode_parts(&item.scope, &item.key));
        for waiter in waiters.into_iter().flatten() {
            // A handler that gave up has dropped its receiver: nothing to tell.
            let _ = waiter.send(answer.cloned());
        }
    }

    /// Waits, at most `limit`, until the dispatcher hands over the response of `item`'s
    /// payment or the store shows the charge finished or uncertain. `Err`: the store could not
    /// be read.
    pub(crate) async fn settled<S: WorkflowStore>(
        &self,
        store: &S,
        item: &OutboxItem,
        limit: Duration,
    ) -> Result<WaitOutcome, S::Error> {
        let scoped = ScopedKey::encode_parts(&item.scope, &item.key);
        let settled = self.wait(store, item, &scoped, tokio::time::Instant::now() + limit).await;
        // Whatever the answer, this handler waits no more: drop its (now closed) channels.
        let mut waiting = self.waiting();
        if let Some(waiters) = waiting.get_mut(&scoped) {
            waiters.retain(|waiter| !waiter.is_closed());
            if waiters.is_empty() {
                waiting.remove(&scoped);
            }
        }
        settled
    }

    async fn wait<S: WorkflowStore>(
        &self,
        store: &S,
        item: &OutboxItem,
        scoped: &[u8],
        until: tokio::time::Instant,
    ) -> Result<WaitOutcome, S::Error> {
        let settled = |kind: OutboxStateKind| !matches!(kind, OutboxStateKind::Pending | OutboxStateKind::Dispatching);
        loop {
            // Registered before the store is read, so a dispatch that ends in between is told.
            let (told, dispatched) = oneshot::channel();
            self.waiting().entry(scoped.to_vec()).or_default().push(told);
            let Some(current) = store.effect(&item.scope, &item.key, &item.effect).await? else {
                return Ok(WaitOutcome::Waiting);
            };
            let kind = current.state.kind();
            if settled(kind) {
                return Ok(WaitOutcome::Seen(kind));
            }
            if tokio::time::Instant::now() >= until {
                return Ok(WaitOutcome::Waiting);
            }
            let wait_until = if self.shared { until.min(tokio::time::Instant::now() + POLL) } else { until };
            // Handed the response: done. Told without one, timed out, or (a dropped
            // dispatcher) closed: look at the store again.
            if let Ok(Ok(Some(response))) = tokio::time::timeout_at(wait_until, dispatched).await {
                return Ok(WaitOutcome::Answered(response));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idemdb_core::{EffectReport, Fingerprint, IdempotencyKey, Reservation, Reserve, Scope};
    use idemdb_interface::IdempotencyStore;
    use std::sync::Arc;

    /// The charges of a service over an unshared (`false`) or shared store.
    fn test_charges(shared: bool) -> Charges {
        let store = idemdb::Store::in_memory().unwrap().asynchronous();
        let layer = idemdb_http::IdempotencyLayer::new(store, idemdb_http::SingleTenant::new("acme"));
        Charges::new(shared, layer.held_keys()).unwrap()
    }

    /// A store holding one claimed charge, and that claim.
    async fn claimed_charge(charges: &Charges) -> (idemdb::AsyncStore, OutboxItem) {
        let store = idemdb::Store::in_memory().unwrap().asynchronous();
        let (scope, key) = (Scope::new("acme", "create_payment").unwrap(), IdempotencyKey::new("k-1").unwrap());
        let fingerprint = Fingerprint::of_canonical_json(b"{}");
        let Reservation::Acquired(lease) = store.reserve(Reserve::new(&scope, &key, &fingerprint)).await.unwrap()
        else {
            panic!("a new key is acquired");
        };
        store.enqueue_effect(&lease, &charges.effect, 1, b"{}".to_vec()).await.unwrap();
        let claim = store.claim_effects(1).await.unwrap().pop().expect("the charge is due");
        (store, claim)
    }

    /// The response a confirmed charge finishes the record with.
    fn paid() -> StoredResponse {
        let headers = axum::http::HeaderMap::new();
        StoredResponse::new(axum::http::StatusCode::CREATED, &headers, idemdb_http::DEFAULT_REPLAY_HEADERS, "paid")
    }

    fn confirmed() -> EffectReport {
        EffectReport::Confirmed { reference: "ch_1".into(), result: paid().encode() }
    }

    /// A handler waiting (at most `limit`) for `claim`, once it has registered its channel.
    async fn waiting_handler(
        charges: &Arc<Charges>,
        store: &idemdb::AsyncStore,
        claim: &OutboxItem,
        limit: Duration,
    ) -> tokio::task::JoinHandle<Result<WaitOutcome, idemdb::Error>> {
        let waiter = {
            let (charges, store, claim) = (Arc::clone(charges), store.clone(), claim.clone());
            tokio::spawn(async move { charges.settled(&store, &claim, limit).await })
        };
        while charges.waiting().is_empty() {
            tokio::task::yield_now().await;
        }
        waiter
    }

    #[tokio::test]
    async fn a_waiting_handler_is_handed_the_dispatchers_response_and_the_waiting_list_empties() {
        let charges = Arc::new(test_charges(false));
        let (store, claim) = claimed_charge(&charges).await;
        // A limit no test run reaches: only the dispatcher's word ends this wait.
        let waiter = waiting_handler(&charges, &store, &claim, Duration::from_secs(3_600)).await;
        // No report in the store: it still says dispatching, so only the channel can answer,
        // and it hands over the response itself, not a cue to read the record back.
        charges.dispatched(&claim, Some(&paid()));
        let settled = tokio::time::timeout(Duration::from_secs(60), waiter).await.expect("told").unwrap().unwrap();
        assert_eq!(settled, WaitOutcome::Answered(paid()));
        assert!(charges.waiting().is_empty(), "no channel is left behind");
    }

    #[tokio::test]
    async fn a_dispatch_that_did_not_finish_the_record_sends_the_handler_to_the_store() {
        let charges = Arc::new(test_charges(false));
        let (store, claim) = claimed_charge(&charges).await;
        let waiter = waiting_handler(&charges, &store, &claim, Duration::from_secs(3_600)).await;
        // The provider's answer was lost: the charge is uncertain, the record not finished.
        store.report_effect(&claim, EffectReport::Unknown { reason: "timeout".into() }).await.unwrap();
        charges.dispatched(&claim, None);
        let settled = tokio::time::timeout(Duration::from_secs(60), waiter).await.expect("told").unwrap().unwrap();
        assert_eq!(settled, WaitOutcome::Seen(OutboxStateKind::Uncertain));
        assert!(charges.waiting().is_empty(), "no channel is left behind");
    }

    /// Reports `claim` confirmed behind the handlers' back (no `dispatched`) once a handler
    /// waits for it; the handler's answer and how long it waited.
    async fn settled_unannounced(shared: bool, limit: Duration) -> (WaitOutcome, Duration) {
        let charges = Arc::new(test_charges(shared));
        let (store, claim) = claimed_charge(&charges).await;
        let started = tokio::time::Instant::now();
        let waiter = waiting_handler(&charges, &store, &claim, limit).await;
        store.report_effect(&claim, confirmed()).await.unwrap();
        let settled = tokio::time::timeout(Duration::from_secs(60), waiter).await.expect("answered").unwrap().unwrap();
        assert!(charges.waiting().is_empty(), "no channel is left behind");
        (settled, started.elapsed())
    }

    #[tokio::test]
    async fn an_unshared_store_is_not_polled_the_last_look_is_at_the_limit() {
        let limit = Duration::from_millis(400);
        let (settled, waited) = settled_unannounced(false, limit).await;
        assert_eq!(settled, WaitOutcome::Seen(OutboxStateKind::Confirmed), "the look at the limit sees the report");
        // Only this process's dispatcher reports its charges: nothing made it look earlier.
        assert!(waited >= limit, "looked again after {waited:?}, before the limit");
    }

    #[tokio::test]
    async fn with_a_shared_store_another_instances_report_is_seen_before_the_limit() {
        // Another instance's dispatcher tells nobody here: the store is looked at every POLL.
        let (settled, _) = settled_unannounced(true, Duration::from_secs(3_600)).await;
        assert_eq!(settled, WaitOutcome::Seen(OutboxStateKind::Confirmed));
    }
}
