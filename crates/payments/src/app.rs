//! What the handlers and the dispatcher share: the ledger, the provider, the charges' wake-ups,
//! the admin settings and the webhook verifier; and who a request's tenant is.

use std::path::PathBuf;
use std::time::Duration;

use axum::http::{HeaderMap, header};
use idemdb_core::{EffectName, KeyError, OutboxItem, OutboxStateKind};
use idemdb_http::WebhookVerifier;
use idemdb_interface::WorkflowStore;
use tokio::sync::{Notify, watch};

use crate::charge::CHARGE_EFFECT;
use crate::ledger::POLL;
use crate::provider::Provider;

/// What the handlers share.
#[derive(Debug)]
pub struct App<L> {
    /// Payments and the idempotency store.
    pub ledger: L,
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
/// dispatcher, and a counter of settled charges the handlers watch.
#[derive(Debug)]
pub(crate) struct Charges {
    pub(crate) effect: EffectName,
    pub(crate) wake: Notify,
    pub(crate) settled: watch::Sender<u64>,
}

impl Charges {
    pub(crate) fn new() -> Result<Charges, KeyError> {
        Ok(Charges { effect: EffectName::new(CHARGE_EFFECT)?, wake: Notify::new(), settled: watch::Sender::new(0) })
    }

    /// Tells the dispatcher that a charge was enqueued (or is due again).
    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }

    /// Waits until `item` is finished or uncertain (its state then), at most `limit`.
    /// `Ok(None)`: it is still pending or dispatching (or gone); `Err`: the store could not be
    /// read.
    pub(crate) async fn settled<S: WorkflowStore>(
        &self,
        store: &S,
        item: &OutboxItem,
        limit: Duration,
    ) -> Result<Option<OutboxStateKind>, S::Error> {
        let mut settled = self.settled.subscribe();
        let until = tokio::time::Instant::now() + limit;
        loop {
            settled.borrow_and_update();
            let Some(current) = store.effect(&item.scope, &item.key, &item.effect).await? else { return Ok(None) };
            match current.state.kind() {
                OutboxStateKind::Pending | OutboxStateKind::Dispatching => {}
                finished => return Ok(Some(finished)),
            }
            if tokio::time::Instant::now() >= until {
                return Ok(None);
            }
            // Another instance's dispatcher does not notify: look again after a while anyway.
            let _ = tokio::time::timeout_at(until.min(tokio::time::Instant::now() + POLL), settled.changed()).await;
        }
    }
}
