//! The reconciler: a task a service runs beside its router, which drives every entry of the
//! reconciliation queue it can to a fact, so that retries of those keys reach a final answer
//! without an operator.
//!
//! Every `interval` (5 s by default) a round takes up to `budget` entries (64 by default) of
//! [`WorkflowStore::reconciliation_queue`], oldest first, and for each:
//!
//! * an **uncertain effect** (the outbox lost the provider's answer), once no earlier dispatch
//!   of it can land any more — the policy's
//!   [provider settle time](idemdb_core::Policy::provider_settle_time) after the round first
//!   found it uncertain: before then a provider that has no trace of it may still apply it, so
//!   "not found" would not be a fact — goes to the application's
//!   [`EffectLookup`], which asks where the effect happened — the provider, by the effect's
//!   provider key — and resolves it through the store: confirmed (the application writes its
//!   business row and completes the record with a response retries replay, in one commit), or
//!   not found (resolved `not_found`, so the outbox sends it again under the same provider
//!   key, which the provider dedupes), or undecided (the provider could not be asked: next
//!   round);
//! * an **uncertain record** of an operation [declared](Reconciler::declare) to make its
//!   effects only through the outbox, with none of those effects enqueued, is released: its
//!   attempt provably made no effect (effects are enqueued only by the lease's holder while the
//!   record is in progress, so an uncertain record with none never gets one), and the retry runs;
//! * anything else is left, and the round says why ([`Left`], in the log with the key's hash
//!   and in [`LEFT_BY_REASON`]): an effect still pending or being dispatched (its dispatcher
//!   settles it; a call that outlives its deadline is reported unknown and asked about), an
//!   uncertain effect whose last dispatch may still land, a lookup with no fact this round, an
//!   operation not declared (or whose policy keeps expired leases for a person), or a store that
//!   could not be read.
//!
//! Every resolution is in the store's audit trail (`effect_resolved`, `reconciled`), in the log
//! (target `idemdb_http`, with the key's hash) and in the metrics:
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | [`QUEUE_DEPTH`] | gauge | | entries in the queue when the last round read it (all of them, whatever the budget) |
//! | [`LEFT`] | gauge | | of those, the entries no fact decided (or past the round's budget) |
//! | [`RESOLUTIONS`] | counter | `cause` | `confirmed`, `not_found`, `released` |
//! | [`LEFT_BY_REASON`] | counter | `reason` | entries left, by [`Left`] (`effect_in_flight`, `may_still_land`, `undecided`, `not_declared`, `store_unavailable`, `for_a_person`) |
//!
//! ```no_run
//! # async fn run(store: idemdb::Store) {
//! use idemdb_core::{EffectName, OutboxItem};
//! use idemdb_http::reconcile::{EffectDecision, EffectLookup, Reconciler};
//!
//! /// A provider that can be asked about a charge by its provider key.
//! struct Provider;
//!
//! impl EffectLookup<idemdb::AsyncStore> for Provider {
//!     async fn decide(&self, _store: &idemdb::AsyncStore, _item: &OutboxItem) -> EffectDecision {
//!         // Ask the provider about `item.provider_key`; resolve through the store.
//!         EffectDecision::Undecided
//!     }
//! }
//!
//! let charge = EffectName::new("charge").expect("a valid effect name");
//! let reconciler = Reconciler::new(store.asynchronous(), Provider).declare("create_payment", [charge]);
//! tokio::spawn(reconciler.run());
//! # }
//! ```

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use idemdb_core::{
    Attention, EffectName, ExpiredLease, IdempotencyKey, OutboxItem, Resolution, ResolutionCause, Scope, State,
};
use idemdb_interface::WorkflowStore;

/// How often a round runs, by default.
pub const DEFAULT_RECONCILE_INTERVAL: Duration = Duration::from_secs(5);
/// How many entries one round decides, by default.
pub const DEFAULT_RECONCILE_BUDGET: usize = 64;

/// Entries the last round found.
pub const QUEUE_DEPTH: &str = "idemdb_reconciliation_queue_depth";
/// Entries the last round left undecided.
pub const LEFT: &str = "idemdb_reconciliation_left";
/// Resolutions by cause.
pub const RESOLUTIONS: &str = "idemdb_reconciliation_resolutions_total";
/// Entries left, by reason.
pub const LEFT_BY_REASON: &str = "idemdb_reconciliation_left_total";

/// Why a round left an entry of the queue undecided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Left {
    /// The record's effect is still pending or being dispatched: its dispatcher reports the
    /// outcome (a call that outlives its deadline is reported unknown, then asked about).
    EffectInFlight,
    /// The effect is uncertain and its last dispatch may still be applied by the provider:
    /// the round first found it less than the policy's
    /// [provider settle time](idemdb_core::Policy::provider_settle_time) ago. It is asked about
    /// once that has passed (a lookup before then cannot tell "not made" from "not yet").
    MayStillLand,
    /// The application's lookup found no fact this round (the provider could not be asked).
    Undecided,
    /// The operation is not [declared](Reconciler::declare), or its policy keeps expired
    /// leases for a person: no fact the reconciler can learn releases the record.
    NotDeclared,
    /// The store could not be read or written this round.
    StoreUnavailable,
    /// An entry the reconciler never decides (a person's decision).
    ForAPerson,
}

impl Left {
    /// The reason's name, as logged and as the metric's `reason` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Left::EffectInFlight => "effect_in_flight",
            Left::MayStillLand => "may_still_land",
            Left::Undecided => "undecided",
            Left::NotDeclared => "not_declared",
            Left::StoreUnavailable => "store_unavailable",
            Left::ForAPerson => "for_a_person",
        }
    }
}

/// What the application found out about one uncertain effect, after resolving it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EffectDecision {
    /// The effect happened; the record was completed (with the application's business row).
    Confirmed,
    /// The effect did not happen; it was resolved `not_found` and will be sent again.
    NotFound,
    /// No fact this round (the provider or the store could not be reached).
    Undecided,
}

/// The application's part of reconciliation: finding out whether an uncertain effect
/// happened, and resolving it.
pub trait EffectLookup<S: WorkflowStore>: Send + Sync + 'static {
    /// Decides `item`, an effect whose outcome is unknown: ask where it happened (the provider,
    /// by `item.provider_key`) and resolve it through `store` —
    /// [`WorkflowStore::resolve_effect`], or the application's own transaction that writes its
    /// business row and resolves the effect in one commit — then say what was decided.
    /// Effects the application does not know are [`EffectDecision::Undecided`].
    fn decide(&self, store: &S, item: &OutboxItem) -> impl Future<Output = EffectDecision> + Send;
}

/// What one round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Round {
    /// Entries the round found in the queue (all of them; it decides at most its budget).
    pub found: usize,
    /// Effects the lookup confirmed (their records completed).
    pub confirmed: usize,
    /// Effects the lookup found not to have happened (sent again).
    pub not_found: usize,
    /// Uncertain records with no effect enqueued, released so their retry runs.
    pub released: usize,
    /// Entries no fact decided this round, and those past its budget.
    pub left: usize,
    /// Those, by why they were left.
    pub left_by: LeftBy,
}

/// How many entries a round left, by [`Left`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeftBy {
    /// [`Left::EffectInFlight`].
    pub effect_in_flight: usize,
    /// [`Left::MayStillLand`].
    pub may_still_land: usize,
    /// [`Left::Undecided`].
    pub undecided: usize,
    /// [`Left::NotDeclared`].
    pub not_declared: usize,
    /// [`Left::StoreUnavailable`].
    pub store_unavailable: usize,
    /// [`Left::ForAPerson`].
    pub for_a_person: usize,
}

impl LeftBy {
    fn add(&mut self, left: Left) {
        let count = match left {
            Left::EffectInFlight => &mut self.effect_in_flight,
            Left::MayStillLand => &mut self.may_still_land,
            Left::Undecided => &mut self.undecided,
            Left::NotDeclared => &mut self.not_declared,
            Left::StoreUnavailable => &mut self.store_unavailable,
            Left::ForAPerson => &mut self.for_a_person,
        };
        *count += 1;
    }
}

/// The reconciler (see the [module docs](self)).
#[derive(Debug)]
pub struct Reconciler<S, L> {
    store: S,
    lookup: L,
    interval: Duration,
    budget: usize,
    /// Operations whose effects all go through the outbox, with those effects' names.
    declared: BTreeMap<String, Vec<EffectName>>,
    /// When a round first found each uncertain effect (by its outbox key and claim fence): it
    /// became uncertain no later, so its last dispatch is settled a settle time after this.
    first_found: Mutex<HashMap<(Vec<u8>, u64), Instant>>,
}

impl<S: WorkflowStore + Clone + 'static, L: EffectLookup<S>> Reconciler<S, L> {
    /// A reconciler over `store` asking `lookup`, every 5 s, 64 entries a round.
    pub fn new(store: S, lookup: L) -> Self {
        Reconciler {
            store,
            lookup,
            interval: DEFAULT_RECONCILE_INTERVAL,
            budget: DEFAULT_RECONCILE_BUDGET,
            declared: BTreeMap::new(),
            first_found: Mutex::new(HashMap::new()),
        }
    }

    /// The time between rounds (at least 10 ms).
    #[must_use]
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval.max(Duration::from_millis(10));
        self
    }

    /// The entries one round decides (at least 1).
    #[must_use]
    pub fn budget(mut self, budget: usize) -> Self {
        self.budget = budget.max(1);
        self
    }

    /// Declares that `operation` makes its external effects only through the outbox, as
    /// `effects`: an uncertain record of it with none of them enqueued is released (its retry
    /// runs) when its policy's expired-lease rule is
    /// [`TakeoverIfNoEffect`](ExpiredLease::TakeoverIfNoEffect), the same rule the store
    /// applies to a retry after the lease.
    #[must_use]
    pub fn declare(mut self, operation: impl Into<String>, effects: impl IntoIterator<Item = EffectName>) -> Self {
        self.declared.entry(operation.into()).or_default().extend(effects);
        self
    }

    /// The lookup (to share its state with the rest of the application).
    pub fn lookup(&self) -> &L {
        &self.lookup
    }

    /// Runs rounds until the task is dropped or aborted.
    pub async fn run(self) {
        loop {
            tokio::time::sleep(self.interval).await;
            let round = self.round().await;
            if round.confirmed + round.not_found + round.released > 0 || round.left > 0 {
                tracing::info!(
                    target: "idemdb_http",
                    confirmed = round.confirmed,
                    not_found = round.not_found,
                    released = round.released,
                    left = round.left,
                    "reconciliation round"
                );
            }
        }
    }

    /// One round (see the [module docs](self)).
    pub async fn round(&self) -> Round {
        let mut round = Round::default();
        // The whole queue, for its true depth; the round decides at most `budget` of it.
        let queue = match self.store.reconciliation_queue(0).await {
            Ok(queue) => queue,
            Err(error) => {
                tracing::warn!(target: "idemdb_http", %error, "the reconciliation queue could not be read");
                return round;
            }
        };
        round.found = queue.len();
        let settled = self.settled_effects(&queue);
        for (attention, settled) in queue.into_iter().zip(settled).take(self.budget) {
            let left = match &attention {
                Attention::Effect { .. } if !settled => Some(Left::MayStillLand),
                Attention::Effect { item, .. } => match self.lookup.decide(&self.store, item).await {
                    EffectDecision::Confirmed => {
                        self.resolved(&item.scope, &item.key, "confirmed");
                        round.confirmed += 1;
                        None
                    }
                    EffectDecision::NotFound => {
                        self.resolved(&item.scope, &item.key, "not_found");
                        round.not_found += 1;
                        None
                    }
                    EffectDecision::Undecided => Some(Left::Undecided),
                },
                Attention::Record { scoped, record, .. } if matches!(record.state, State::Uncertain { .. }) => {
                    match self.release_if_effect_free(&scoped.scope, &scoped.key).await {
                        Ok(()) => {
                            self.resolved(&scoped.scope, &scoped.key, "released");
                            round.released += 1;
                            None
                        }
                        Err(left) => Some(left),
                    }
                }
                _ => Some(Left::ForAPerson),
            };
            if let Some(left) = left {
                round.left += 1;
                round.left_by.add(left);
                let (scope, key) = attention.scoped_key();
                self.left(scope, key, left);
            }
        }
        // What the round did not reach is left too, for the next round or a person.
        round.left += round.found.saturating_sub(self.budget);
        metrics::gauge!(QUEUE_DEPTH).set(round.found as f64);
        metrics::gauge!(LEFT).set(round.left as f64);
        round
    }

    /// For each entry of `queue`: whether it is not an uncertain effect whose last dispatch may
    /// still land (see [`Left::MayStillLand`]). Remembers when each uncertain effect was first
    /// found, and forgets those no longer in the queue.
    fn settled_effects(&self, queue: &[Attention]) -> Vec<bool> {
        let now = Instant::now();
        let mut first_found = self.first_found.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut seen = HashMap::with_capacity(queue.len());
        let settled = queue
            .iter()
            .map(|attention| {
                let Attention::Effect { item, .. } = attention else { return true };
                let id = (OutboxItem::key_of(&item.scope, &item.key, &item.effect), item.fence);
                let found = first_found.get(&id).copied().unwrap_or(now);
                seen.insert(id, found);
                let settle = self.store.policy(item.scope.operation()).provider_settle_time();
                now.saturating_duration_since(found) >= settle
            })
            .collect();
        *first_found = seen;
        settled
    }

    fn resolved(&self, scope: &Scope, key: &IdempotencyKey, cause: &'static str) {
        metrics::counter!(RESOLUTIONS, "cause" => cause).increment(1);
        let key_hash = self.store.key_hash(scope, key);
        tracing::info!(target: "idemdb_http", %key_hash, operation = scope.operation(), cause, "reconciled");
    }

    fn left(&self, scope: &Scope, key: &IdempotencyKey, left: Left) {
        metrics::counter!(LEFT_BY_REASON, "reason" => left.as_str()).increment(1);
        let key_hash = self.store.key_hash(scope, key);
        tracing::info!(target: "idemdb_http", %key_hash, operation = scope.operation(), reason = left.as_str(), "left for later");
    }

    /// Releases an uncertain record of a declared operation with no declared effect enqueued;
    /// otherwise says why it stays.
    async fn release_if_effect_free(&self, scope: &Scope, key: &IdempotencyKey) -> Result<(), Left> {
        let Some(effects) = self.declared.get(scope.operation()) else { return Err(Left::NotDeclared) };
        if self.store.policy(scope.operation()).expired_lease() != ExpiredLease::TakeoverIfNoEffect {
            return Err(Left::NotDeclared);
        }
        for effect in effects {
            match self.store.effect(scope, key, effect).await {
                Ok(None) => {}
                // The record follows its effect: the dispatcher (or the effect's own entry in
                // the queue) settles it.
                Ok(Some(_)) => return Err(Left::EffectInFlight),
                Err(_) => return Err(Left::StoreUnavailable),
            }
        }
        self.store
            .reconcile(scope, key, Resolution::Released, ResolutionCause::EffectFree)
            .await
            .map_err(|_| Left::StoreUnavailable)
    }
}

/// Registers the descriptions of the reconciler's metrics with the installed recorder.
pub fn describe() {
    metrics::describe_gauge!(QUEUE_DEPTH, "entries in the reconciliation queue at the last round");
    metrics::describe_gauge!(LEFT, "entries the last round left for a person");
    metrics::describe_counter!(RESOLUTIONS, "reconciler resolutions by cause");
    metrics::describe_counter!(LEFT_BY_REASON, "entries reconciliation rounds left, by reason");
}

/// The causes [`RESOLUTIONS`] counts.
const CAUSES: [&str; 3] = ["confirmed", "not_found", "released"];

/// Registers the reconciler's series at zero (the gauges and every cause), so the first
/// scrape, before any round, has them. A later round sets the gauges.
pub fn publish() {
    metrics::gauge!(QUEUE_DEPTH).set(0.0);
    metrics::gauge!(LEFT).set(0.0);
    for cause in CAUSES {
        metrics::counter!(RESOLUTIONS, "cause" => cause).increment(0);
    }
}
