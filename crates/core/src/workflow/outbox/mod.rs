//! The outbox, as pure rules: an external effect (a charge, an e-mail) enqueued in the same
//! transaction that reserved the key, dispatched at least once under a **provider key**
//! derived stably from the local key, and reported back as confirmed, definitively failed,
//! retryable or unknown.
//!
//! A local transaction cannot make a remote call atomic. What makes one logical effect out of
//! at-least-once delivery is the provider's own idempotency: every dispatch of an item sends
//! the same provider key (`order-842:authorize-v1`), and the provider answers a repeat with
//! the first effect's result — for as long as it keeps the key. After that window a repeat
//! would be a new effect, so an item whose earlier dispatch has an unknown outcome is never
//! sent again past the window: it waits in the reconciliation queue until the application
//! records what the provider actually did ([`OutboxItem::resolve`], "query first, then
//! resolve").
//!
//! ```text
//!            claim                report(confirmed)
//!  Pending ─────────▶ Dispatching ─────────────────▶ Confirmed
//!     ▲  ▲                │  │  report(failed)
//!     │  │ report(retry)  │  └─────────────────────▶ Failed
//!     │  └────────────────┤
//!     │                   │ report(unknown), or a lease that expired past the window
//!     │ resolve(not found)▼
//!     └─────────────── Uncertain ── resolve(confirmed / failed) ──▶ Confirmed / Failed
//!         retry (within the window)
//! ```
//!
//! A dispatcher that dies mid-call leaves its claim's lease to expire; the next claim marks the
//! item *in doubt* and re-sends it with the same key while the provider still remembers it.
//!
//! ```
//! use std::time::Duration;
//! use idemdb_core::{Claim, EffectName, EffectReport, IdempotencyKey, Lease, OutboxItem, OutboxStateKind, Policy, Scope, ScopedKey, Timestamp};
//!
//! let policy = Policy::default().with_provider_key_retention(Duration::from_secs(3600));
//! let at = |s: u64| Timestamp::from_millis(1_700_000_000_000 + s * 1000);
//! let lease = Lease::new(ScopedKey::new(Scope::new("acme", "pay")?, IdempotencyKey::new("order-842")?), 7, at(60), 1);
//! let item = OutboxItem::new(&lease, EffectName::new("authorize")?, 1, b"{\"amount\":\"10.50\"}".to_vec(), at(0))?;
//! assert_eq!(item.provider_key.as_str(), "order-842:authorize-v1");
//!
//! let Claim::Claimed(dispatching) = item.claim(at(0), &policy) else { panic!() };
//! // ... call the provider with `dispatching.provider_key`; the response is lost: report unknown.
//! let uncertain = dispatching.report(dispatching.fence, EffectReport::Unknown { reason: "timeout".into() }, at(1), &policy)?;
//! assert_eq!(uncertain.state.kind(), OutboxStateKind::Uncertain);
//! // Within the provider's window, sending the same key again is safe: the provider replays.
//! let again = uncertain.retry(at(2), &policy)?;
//! let Claim::Claimed(dispatching) = again.claim(at(2), &policy) else { panic!() };
//! let done = dispatching.report(dispatching.fence, EffectReport::Confirmed { reference: "auth_1".into(), result: b"{}".to_vec() }, at(3), &policy)?;
//! assert_eq!(done.state.kind(), OutboxStateKind::Confirmed);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Byte layout
//!
//! Stored under `ScopedKey::encode · len:u8 · effect name`; the value is
//! `version:u8 (= 1) · bincode-standard(OutboxItem without its identity)`.

mod kind;
use core::time::Duration;
pub use kind::OutboxStateKind;

use serde::{Deserialize, Serialize};

use super::EffectName;
use crate::{
    DecodeError, ErrorCode, Failure, IdempotencyKey, KeyError, Lease, Policy, Record, Resolution, Scope, ScopedKey,
    State, Timestamp, TransitionError, UncertainCause, codec,
};

/// Format version of stored outbox items.
pub const OUTBOX_FORMAT: u8 = 1;
/// Longest reason text an outbox item keeps from a report, in bytes (longer ones are cut).
pub const MAX_REASON_LEN: usize = 1024;
/// Longest provider reference accepted, in bytes.
pub const MAX_REFERENCE_LEN: usize = 255;

/// Where an outbox item is in its life.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum OutboxState {
    /// Waiting to be dispatched at `due_at` (now, or after a backoff).
    Pending {
        /// When the item may be claimed.
        due_at: Timestamp,
    },
    /// A dispatcher holds the claim until `lease_expires_at`.
    Dispatching {
        /// End of the claim's lease.
        lease_expires_at: Timestamp,
    },
    /// The provider confirmed the effect.
    Confirmed {
        /// The provider's reference for it (a charge id).
        reference: String,
    },
    /// The provider refused the effect for good (card declined); nothing happened.
    Failed {
        /// The failure, as the application reported it.
        #[serde(with = "serde_bytes")]
        body: Vec<u8>,
    },
    /// Whether the effect happened is unknown: waiting in the reconciliation queue.
    Uncertain {
        /// Why.
        cause: EffectDoubt,
    },
}

impl OutboxStateKind {
    /// Whether the effect's outcome is still open (pending, being dispatched, or uncertain):
    /// its record may then be settled only through the effect (see [`check_effects_settled`]).
    pub fn unresolved(self) -> bool {
        matches!(self, OutboxStateKind::Pending | OutboxStateKind::Dispatching | OutboxStateKind::Uncertain)
    }
}

/// The rule for settling a record by hand (a [`Resolution`] through `reconcile`, by an
/// operator, the CLI, a binding or the reconciler): refused while one of its effects is
/// unresolved, since the record's answer could then contradict what the provider did (a
/// payment answered "failed" whose charge the dispatcher later confirms). The effect is
/// resolved instead, with the provider's facts, and settles the record in the same commit.
///
/// # Errors
/// [`TransitionError::EffectUnresolved`] naming the first unresolved effect.
pub fn check_effects_settled<'a>(
    effects: impl IntoIterator<Item = (&'a EffectName, OutboxStateKind)>,
) -> Result<(), TransitionError> {
    match effects.into_iter().find(|(_, state)| state.unresolved()) {
        Some((effect, state)) => Err(TransitionError::EffectUnresolved { effect: effect.clone(), state }),
        None => Ok(()),
    }
}

impl OutboxState {
    /// Which state this is.
    pub fn kind(&self) -> OutboxStateKind {
        match self {
            OutboxState::Pending { .. } => OutboxStateKind::Pending,
            OutboxState::Dispatching { .. } => OutboxStateKind::Dispatching,
            OutboxState::Confirmed { .. } => OutboxStateKind::Confirmed,
            OutboxState::Failed { .. } => OutboxStateKind::Failed,
            OutboxState::Uncertain { .. } => OutboxStateKind::Uncertain,
        }
    }
}

/// Why an effect's outcome is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum EffectDoubt {
    /// The dispatcher reported that it does not know (a timeout after sending).
    Reported,
    /// An earlier dispatch's outcome is unknown and the provider's key-retention window has
    /// passed: sending the key again could make a second effect. Query the provider first.
    ProviderKeyExpired,
}

crate::names!(EffectDoubt, "effect doubt", { Reported => "reported", ProviderKeyExpired => "provider_key_expired" });

/// What a dispatcher reports after calling the provider.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EffectReport {
    /// The provider confirmed the effect (a first effect, or its replay of the same key).
    Confirmed {
        /// The provider's reference.
        reference: String,
        /// What the local record completes with (the response the intent replays).
        result: Vec<u8>,
    },
    /// The provider refused for good; nothing happened. The local record fails definitively.
    Failed {
        /// The failure the local record replays.
        body: Vec<u8>,
    },
    /// The provider did not perform the effect and asked to try later (429, 503 before
    /// processing): dispatched again after a backoff.
    Retryable {
        /// What the provider said.
        reason: String,
    },
    /// The outcome is unknown (a timeout after sending, a connection lost mid-response).
    Unknown {
        /// What happened.
        reason: String,
    },
}

/// What the application learned by querying the provider about an uncertain effect.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProviderState {
    /// The effect happened.
    Confirmed {
        /// The provider's reference.
        reference: String,
        /// What the local record completes with.
        result: Vec<u8>,
    },
    /// The provider refused it; nothing happened.
    Failed {
        /// The failure the local record replays.
        body: Vec<u8>,
    },
    /// The provider has no trace of it: nothing happened, and it is sent again (its provider
    /// key starts a new window).
    NotFound,
}

/// What a [`ProviderState`] says, without its data: the name an operator or a resolution
/// request gives (`confirmed`, `failed`, `not_found`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProviderStateKind {
    /// [`ProviderState::Confirmed`].
    Confirmed,
    /// [`ProviderState::Failed`].
    Failed,
    /// [`ProviderState::NotFound`].
    NotFound,
}

crate::names!(ProviderStateKind, "provider state", {
    Confirmed => "confirmed",
    Failed => "failed",
    NotFound => "not_found",
});

impl ProviderState {
    /// What the state says, without its data.
    pub fn kind(&self) -> ProviderStateKind {
        match self {
            ProviderState::Confirmed { .. } => ProviderStateKind::Confirmed,
            ProviderState::Failed { .. } => ProviderStateKind::Failed,
            ProviderState::NotFound => ProviderStateKind::NotFound,
        }
    }

    /// What the intent's record completes with: the result of a confirmed effect, else `None`.
    pub fn result(&self) -> Option<Vec<u8>> {
        match self {
            ProviderState::Confirmed { result, .. } => Some(result.clone()),
            ProviderState::Failed { .. } | ProviderState::NotFound => None,
        }
    }
}

/// The outbox rules refused a change; the stored item is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OutboxRefusal {
    /// No outbox item exists for the key and effect.
    #[error("no outbox item for this key and effect")]
    NotFound,
    /// The key and effect already name an item with another payload.
    #[error("the key already has an effect of this name with a different payload")]
    PayloadMismatch,
    /// The claim's fence is not the item's: another dispatcher claimed it since.
    #[error("stale claim: fence {presented} is older than the item's fence {current}")]
    StaleClaim {
        /// The fence presented.
        presented: u64,
        /// The item's fence.
        current: u64,
    },
    /// The item is not in a state that allows this change.
    #[error("outbox item is {state}; cannot {action}")]
    WrongState {
        /// The item's state.
        state: OutboxStateKind,
        /// What was attempted.
        action: &'static str,
    },
    /// The provider's key-retention window has passed since the first dispatch: sending the
    /// key again could make a second effect. Query the provider and resolve instead.
    #[error(
        "the provider key was first sent {first_sent_at}; its retention window ended {window_ended}; query the provider and resolve"
    )]
    ProviderKeyExpired {
        /// When the key was first sent.
        first_sent_at: Timestamp,
        /// When the provider's retention ended.
        window_ended: Timestamp,
    },
    /// An earlier dispatch may still be applied by the provider until `until` (the last
    /// dispatch plus the policy's [provider settle time](Policy::provider_settle_time)): a
    /// lookup that finds nothing before then cannot tell "not made" from "not yet", so the
    /// effect is not resolved failed. Ask again after `until`, or resolve it confirmed when the
    /// provider shows it.
    #[error(
        "an earlier dispatch may still be applied by the provider until {until} (the provider's settle time after the last dispatch); resolve it failed only after that, or confirmed when the provider shows it"
    )]
    MayStillLand {
        /// When no earlier dispatch can land any more.
        until: Timestamp,
    },
    /// A provider reference was empty or over [`MAX_REFERENCE_LEN`] bytes.
    #[error("provider reference must be 1..={max} bytes (got {len})")]
    InvalidReference {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The linked record refused the transition.
    #[error(transparent)]
    Record(#[from] TransitionError),
}

impl OutboxRefusal {
    /// The stable code of this refusal.
    pub fn code(&self) -> ErrorCode {
        match self {
            OutboxRefusal::NotFound => ErrorCode::NotFound,
            OutboxRefusal::PayloadMismatch => ErrorCode::KeyMismatch,
            OutboxRefusal::StaleClaim { .. } => ErrorCode::StaleLease,
            OutboxRefusal::WrongState { .. } | OutboxRefusal::MayStillLand { .. } => ErrorCode::WrongState,
            OutboxRefusal::ProviderKeyExpired { .. } => ErrorCode::ProviderKeyExpired,
            OutboxRefusal::InvalidReference { .. } => ErrorCode::InvalidArgument,
            OutboxRefusal::Record(record) => record.code(),
        }
    }
}

crate::coded!(OutboxRefusal);

/// An effect to enqueue in the outbox in the same transaction as the reservation that
/// acquires its key (see [`Reserve::enqueuing`](crate::Reserve::enqueuing)): if the key is acquired, the
/// effect is in the outbox; if not, nothing is enqueued. No window exists in which a record is
/// in progress while its effect is still to be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEffect {
    /// The effect's name (`charge`): with the key, its provider key.
    pub effect: EffectName,
    /// The version of the effect's provider-key derivation.
    pub version: u16,
    /// What the dispatcher sends.
    pub payload: Vec<u8>,
}

/// One external effect of an intent.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutboxItem {
    /// The intent's scope.
    pub scope: Scope,
    /// The intent's (local) idempotency key.
    pub key: IdempotencyKey,
    /// Which effect of the intent this is.
    pub effect: EffectName,
    /// The version of the effect's contract (part of the provider key).
    pub version: u16,
    /// The key every dispatch sends to the provider: `<key>:<effect>-v<version>`.
    pub provider_key: IdempotencyKey,
    /// What to send (or a reference to it), as the application gave it.
    pub payload: Vec<u8>,
    /// The fence of the lease that enqueued the effect: the local record this item completes
    /// or fails.
    pub record_fence: u64,
    /// The state.
    pub state: OutboxState,
    /// Fence of the newest claim; a report must present it.
    pub fence: u64,
    /// Dispatches so far.
    pub dispatches: u32,
    /// When the provider key was first sent (the start of the provider's retention window).
    pub first_sent_at: Option<Timestamp>,
    /// Whether an earlier dispatch's outcome is unknown.
    pub in_doubt: bool,
    /// The last reason a dispatcher gave (retryable or unknown), cut to [`MAX_REASON_LEN`].
    pub last_reason: Option<String>,
    /// When the item was enqueued.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
}

/// What [`OutboxItem::claim`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Claim {
    /// The caller holds the claim (the item as written, in state `Dispatching`): call the
    /// provider with its `provider_key` and `payload`, then report with its `fence`.
    Claimed(OutboxItem),
    /// The item is not due yet, or another dispatcher's claim is live.
    NotDue,
    /// The item may not be sent again (an unknown outcome past the provider's window): write
    /// this uncertain item; it waits in the reconciliation queue.
    ToReconcile(OutboxItem),
    /// The item is finished or uncertain: nothing to dispatch.
    Finished,
}

impl OutboxItem {
    /// A new pending item for the intent `lease` holds, due at once.
    ///
    /// # Errors
    /// [`KeyError`] when the provider key `<key>:<effect>-v<version>` is not a valid key
    /// (over 255 bytes).
    pub fn new(
        lease: &Lease,
        effect: EffectName,
        version: u16,
        payload: Vec<u8>,
        now: Timestamp,
    ) -> Result<OutboxItem, KeyError> {
        let provider_key = effect.provider_key(lease.key(), version)?;
        Ok(OutboxItem {
            scope: lease.scope().clone(),
            key: lease.key().clone(),
            effect,
            version,
            provider_key,
            payload,
            record_fence: lease.fence(),
            state: OutboxState::Pending { due_at: now },
            fence: 0,
            dispatches: 0,
            first_sent_at: None,
            in_doubt: false,
            last_reason: None,
            created_at: now,
            updated_at: now,
        })
    }

    /// Enqueuing where `existing` may already be stored: the stored item comes back unchanged
    /// when it has the same payload and version (a retried transaction), and `new` is to be
    /// written when nothing was stored. Returns the item and whether it must be written.
    ///
    /// # Errors
    /// [`OutboxRefusal::PayloadMismatch`] when the stored item differs.
    pub fn enqueue(existing: Option<OutboxItem>, new: OutboxItem) -> Result<(OutboxItem, bool), OutboxRefusal> {
        match existing {
            Some(existing) if existing.payload == new.payload && existing.version == new.version => {
                Ok((existing, false))
            }
            Some(_) => Err(OutboxRefusal::PayloadMismatch),
            None => Ok((new, true)),
        }
    }

    /// When a dispatcher should look at the item next: the due time of a pending item, the
    /// lease end of a dispatching one; `None` for finished and uncertain items (they wait for
    /// a person or a query).
    pub fn due_at(&self) -> Option<Timestamp> {
        match self.state {
            OutboxState::Pending { due_at } => Some(due_at),
            OutboxState::Dispatching { lease_expires_at } => Some(lease_expires_at),
            _ => None,
        }
    }

    /// When retention removes a finished item: its record's whole retention after it
    /// finished (response and tombstone TTLs), so the effect is on record as long as the key is
    /// known.
    pub fn forget_at(&self, policy: &Policy) -> Option<Timestamp> {
        match self.state {
            OutboxState::Confirmed { .. } | OutboxState::Failed { .. } => {
                Some(self.updated_at.saturating_add(policy.response_ttl()).saturating_add(policy.tombstone_ttl()))
            }
            _ => None,
        }
    }

    /// Whether the item waits in the reconciliation queue.
    pub fn needs_reconciliation(&self) -> bool {
        matches!(self.state, OutboxState::Uncertain { .. })
    }

    /// The end of the provider's key-retention window, once the key was sent.
    pub fn window_ends_at(&self, policy: &Policy) -> Option<Timestamp> {
        self.first_sent_at.map(|first| first.saturating_add(policy.provider_key_retention()))
    }

    /// Claims the item for one dispatch at `now`: a pending item that is due, or a dispatching
    /// one whose claim expired (its dispatcher died: that dispatch's outcome is unknown, so the
    /// item is in doubt from then on). An item in doubt is sent again only inside the
    /// provider's key-retention window; past it, the claim turns it uncertain instead.
    pub fn claim(&self, now: Timestamp, policy: &Policy) -> Claim {
        let now = now.max(self.updated_at);
        let mut next = self.clone();
        match self.state {
            OutboxState::Pending { due_at } if now < due_at => return Claim::NotDue,
            OutboxState::Pending { .. } => {}
            OutboxState::Dispatching { lease_expires_at } if now < lease_expires_at => return Claim::NotDue,
            OutboxState::Dispatching { .. } => next.in_doubt = true,
            OutboxState::Confirmed { .. } | OutboxState::Failed { .. } | OutboxState::Uncertain { .. } => {
                return Claim::Finished;
            }
        }
        next.updated_at = now;
        if next.in_doubt && next.window_ends_at(policy).is_some_and(|end| now >= end) {
            next.state = OutboxState::Uncertain { cause: EffectDoubt::ProviderKeyExpired };
            return Claim::ToReconcile(next);
        }
        next.state = OutboxState::Dispatching { lease_expires_at: now.saturating_add(policy.lease_ttl()) };
        next.fence = next.fence.saturating_add(1);
        next.dispatches = next.dispatches.saturating_add(1);
        next.first_sent_at = Some(next.first_sent_at.unwrap_or(now));
        Claim::Claimed(next)
    }

    /// Applies a dispatcher's report for the claim with `fence`. A report after the claim's
    /// lease expired is still taken while nobody claimed the item again (it is the best
    /// evidence there is).
    ///
    /// # Errors
    /// [`OutboxRefusal::StaleClaim`], [`OutboxRefusal::WrongState`] when the item is not
    /// dispatching, [`OutboxRefusal::InvalidReference`].
    pub fn report(
        &self,
        fence: u64,
        report: EffectReport,
        now: Timestamp,
        policy: &Policy,
    ) -> Result<OutboxItem, OutboxRefusal> {
        if fence != self.fence {
            return Err(OutboxRefusal::StaleClaim { presented: fence, current: self.fence });
        }
        if !matches!(self.state, OutboxState::Dispatching { .. }) {
            return Err(OutboxRefusal::WrongState { state: self.state.kind(), action: "report a dispatch" });
        }
        let now = now.max(self.updated_at);
        let mut next = OutboxItem { updated_at: now, ..self.clone() };
        match report {
            EffectReport::Confirmed { reference, .. } => {
                check_reference(&reference)?;
                next.state = OutboxState::Confirmed { reference };
            }
            EffectReport::Failed { body } => next.state = OutboxState::Failed { body },
            EffectReport::Retryable { reason } => {
                next.last_reason = Some(cut(reason));
                next.state = OutboxState::Pending { due_at: now.saturating_add(backoff(self.dispatches, policy)) };
            }
            EffectReport::Unknown { reason } => {
                next.last_reason = Some(cut(reason));
                next.in_doubt = true;
                next.state = OutboxState::Uncertain { cause: EffectDoubt::Reported };
            }
        }
        Ok(next)
    }

    /// Sends an uncertain item again with the same provider key: safe only while the provider
    /// still remembers the key (it then answers with the first effect's result).
    ///
    /// # Errors
    /// [`OutboxRefusal::ProviderKeyExpired`] past the provider's window (query and
    /// [`resolve`](Self::resolve) instead), [`OutboxRefusal::WrongState`] when the item is not
    /// uncertain.
    pub fn retry(&self, now: Timestamp, policy: &Policy) -> Result<OutboxItem, OutboxRefusal> {
        if !self.needs_reconciliation() {
            return Err(OutboxRefusal::WrongState { state: self.state.kind(), action: "retry" });
        }
        let now = now.max(self.updated_at);
        if let (Some(first_sent_at), Some(window_ended)) = (self.first_sent_at, self.window_ends_at(policy))
            && now >= window_ended
        {
            return Err(OutboxRefusal::ProviderKeyExpired { first_sent_at, window_ended });
        }
        Ok(OutboxItem { state: OutboxState::Pending { due_at: now }, updated_at: now, ..self.clone() })
    }

    /// Until when a dispatch of this item may still be applied by the provider: its last
    /// dispatch plus the policy's [provider settle time](Policy::provider_settle_time), for an
    /// item being dispatched or uncertain (`None` otherwise: nothing of it is on its way). The
    /// item does not keep the moment it was sent; its last change (the report of an uncertain
    /// item, or the end of a claim's lease) comes after it, so the bound errs late, never early.
    pub fn may_still_land_until(&self, policy: &Policy) -> Option<Timestamp> {
        let last_dispatch = match self.state {
            OutboxState::Dispatching { lease_expires_at } => lease_expires_at.max(self.updated_at),
            OutboxState::Uncertain { .. } if self.dispatches > 0 => self.updated_at,
            _ => return None,
        };
        Some(last_dispatch.saturating_add(policy.provider_settle_time()))
    }

    /// Records what the provider says about an uncertain item (query first, then resolve).
    ///
    /// A provider's "confirmed" is a fact at once; its "not found" sends the item again under
    /// the same provider key (which the provider answers with the first effect if an earlier
    /// dispatch lands after all); "failed" answers the intent for good, so it is refused while
    /// an earlier dispatch [may still land](Self::may_still_land_until).
    ///
    /// # Errors
    /// [`OutboxRefusal::WrongState`] when the item is not uncertain,
    /// [`OutboxRefusal::MayStillLand`] for "failed" within the provider's settle time,
    /// [`OutboxRefusal::InvalidReference`].
    pub fn resolve(&self, state: ProviderState, now: Timestamp, policy: &Policy) -> Result<OutboxItem, OutboxRefusal> {
        if !self.needs_reconciliation() {
            return Err(OutboxRefusal::WrongState { state: self.state.kind(), action: "resolve" });
        }
        if let (ProviderState::Failed { .. }, Some(until)) = (&state, self.may_still_land_until(policy))
            && now < until
        {
            return Err(OutboxRefusal::MayStillLand { until });
        }
        let now = now.max(self.updated_at);
        let mut next = OutboxItem { updated_at: now, ..self.clone() };
        match state {
            ProviderState::Confirmed { reference, .. } => {
                check_reference(&reference)?;
                next.state = OutboxState::Confirmed { reference };
            }
            ProviderState::Failed { body } => next.state = OutboxState::Failed { body },
            ProviderState::NotFound => {
                // Nothing happened: send it again, starting a new provider window.
                next.state = OutboxState::Pending { due_at: now };
                next.in_doubt = false;
                next.first_sent_at = None;
            }
        }
        Ok(next)
    }

    /// What the intent's own record becomes now that the item is in its current state (it
    /// follows the effect): completed with `result` when the effect is confirmed, failed
    /// definitively when it failed, uncertain when its outcome is unknown, and, while the item
    /// waits to be dispatched, in progress with its lease held until the next dispatch can
    /// finish. `None`: the record is already where it should be, or has moved on (it was
    /// reconciled by hand, or taken over by a newer attempt), and is left alone.
    ///
    /// # Errors
    /// [`TransitionError`] from the record's transition (a result over the limit).
    pub fn record_after(
        &self,
        record: &Record,
        result: Option<Vec<u8>>,
        now: Timestamp,
        policy: &Policy,
    ) -> Result<Option<Record>, TransitionError> {
        if record.fence != self.record_fence {
            return Ok(None);
        }
        let holder_may_finish =
            matches!(record.state, State::InProgress { .. } | State::Uncertain { cause: UncertainCause::LeaseExpired });
        let reported = matches!(record.state, State::Uncertain { cause: UncertainCause::Reported });
        let finished = |completed: bool, body: Vec<u8>| -> Result<Option<Record>, TransitionError> {
            if holder_may_finish {
                if completed {
                    crate::complete(record, record.fence, body, now, policy).map(Some)
                } else {
                    crate::fail(record, record.fence, Failure::Definitive(body), now, policy).map(Some)
                }
            } else if reported {
                let resolution = if completed { Resolution::Completed(body) } else { Resolution::Failed(body) };
                crate::reconcile(record, resolution, now, policy).map(Some)
            } else {
                Ok(None)
            }
        };
        match &self.state {
            OutboxState::Confirmed { .. } => finished(true, result.unwrap_or_default()),
            OutboxState::Failed { body } => finished(false, body.clone()),
            OutboxState::Uncertain { .. } => match record.state {
                State::InProgress { .. } => {
                    crate::fail(record, record.fence, Failure::Uncertain, now, policy).map(Some)
                }
                _ => Ok(None),
            },
            OutboxState::Pending { .. } | OutboxState::Dispatching { .. } => match record.state {
                State::InProgress { lease_expires_at } => {
                    let next_dispatch = self.due_at().unwrap_or(now).max(now);
                    let hold = next_dispatch.saturating_add(policy.lease_ttl()).max(lease_expires_at);
                    if hold == lease_expires_at {
                        return Ok(None);
                    }
                    let now = now.max(record.updated_at);
                    Ok(Some(Record {
                        state: State::InProgress { lease_expires_at: hold },
                        updated_at: now,
                        ..record.clone()
                    }))
                }
                _ => Ok(None),
            },
        }
    }

    /// The item's table key: `ScopedKey::encode · len:u8 · effect name`.
    pub fn storage_key(&self) -> Vec<u8> {
        Self::key_of(&self.scope, &self.key, &self.effect)
    }

    /// The table key of the item of `effect` for `(scope, key)`.
    pub fn key_of(scope: &Scope, key: &IdempotencyKey, effect: &EffectName) -> Vec<u8> {
        let mut out = ScopedKey::encode_parts(scope, key);
        let name = effect.as_str().as_bytes();
        // Effect names are at most 64 bytes (EffectName::new), so the length fits a byte.
        out.push(u8::try_from(name.len()).unwrap_or(u8::MAX));
        out.extend_from_slice(name);
        out
    }

    /// The stored value (everything but the identity, which is the table key).
    pub fn encode(&self) -> Vec<u8> {
        codec::encode_versioned(OUTBOX_FORMAT, &StoredItemRef::of(self))
    }

    /// The item stored under `storage_key` with value `value`.
    ///
    /// # Errors
    /// [`DecodeError`] for a key or value that does not decode.
    pub fn decode(storage_key: &[u8], value: &[u8]) -> Result<OutboxItem, DecodeError> {
        let malformed = |reason: &str| DecodeError::Malformed { reason: reason.to_string() };
        let (scoped, rest) = ScopedKey::decode_prefix(storage_key).map_err(|error| malformed(&error.to_string()))?;
        let effect = match rest.split_first() {
            Some((&len, name)) if usize::from(len) == name.len() => {
                let name = core::str::from_utf8(name).map_err(|_| malformed("effect name is not UTF-8"))?;
                EffectName::new(name).map_err(|error| malformed(&error.to_string()))?
            }
            _ => return Err(malformed("outbox key does not end with its effect name")),
        };
        let stored: StoredItem = codec::decode_versioned(value, OUTBOX_FORMAT)?;
        Ok(OutboxItem {
            scope: scoped.scope,
            key: scoped.key,
            effect,
            version: stored.version,
            provider_key: stored.provider_key,
            payload: stored.payload,
            record_fence: stored.record_fence,
            state: stored.state,
            fence: stored.fence,
            dispatches: stored.dispatches,
            first_sent_at: stored.first_sent_at,
            in_doubt: stored.in_doubt,
            last_reason: stored.last_reason,
            created_at: stored.created_at,
            updated_at: stored.updated_at,
        })
    }
}

/// The backoff before the dispatch after `dispatches` dispatches: the policy's base doubled
/// per dispatch, capped at its maximum. (Jitter belongs to the dispatcher's schedule, not to
/// the stored due time, so two stores decide alike.)
pub fn backoff(dispatches: u32, policy: &Policy) -> Duration {
    let (base, max) = policy.dispatch_backoff();
    let factor = 1u32.checked_shl(dispatches.saturating_sub(1).min(31)).unwrap_or(u32::MAX);
    base.saturating_mul(factor).min(max)
}

fn check_reference(reference: &str) -> Result<(), OutboxRefusal> {
    if reference.is_empty() || reference.len() > MAX_REFERENCE_LEN {
        return Err(OutboxRefusal::InvalidReference { len: reference.len(), max: MAX_REFERENCE_LEN });
    }
    Ok(())
}

/// A reason cut to [`MAX_REASON_LEN`] bytes, at a character boundary.
fn cut(mut reason: String) -> String {
    if reason.len() > MAX_REASON_LEN {
        let mut end = MAX_REASON_LEN;
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        reason.truncate(end);
    }
    reason
}

/// The stored value, owned (for decoding).
#[derive(Deserialize)]
struct StoredItem {
    version: u16,
    provider_key: IdempotencyKey,
    #[serde(with = "serde_bytes")]
    payload: Vec<u8>,
    record_fence: u64,
    state: OutboxState,
    fence: u64,
    dispatches: u32,
    first_sent_at: Option<Timestamp>,
    in_doubt: bool,
    last_reason: Option<String>,
    created_at: Timestamp,
    updated_at: Timestamp,
}

/// The stored value, borrowed (for encoding): serialises to the same bytes.
#[derive(Serialize)]
struct StoredItemRef<'a> {
    version: u16,
    provider_key: &'a IdempotencyKey,
    #[serde(with = "serde_bytes")]
    payload: &'a [u8],
    record_fence: u64,
    state: &'a OutboxState,
    fence: u64,
    dispatches: u32,
    first_sent_at: Option<Timestamp>,
    in_doubt: bool,
    last_reason: Option<&'a str>,
    created_at: Timestamp,
    updated_at: Timestamp,
}

impl<'a> StoredItemRef<'a> {
    fn of(item: &'a OutboxItem) -> Self {
        StoredItemRef {
            version: item.version,
            provider_key: &item.provider_key,
            payload: &item.payload,
            record_fence: item.record_fence,
            state: &item.state,
            fence: item.fence,
            dispatches: item.dispatches,
            first_sent_at: item.first_sent_at,
            in_doubt: item.in_doubt,
            last_reason: item.last_reason.as_deref(),
            created_at: item.created_at,
            updated_at: item.updated_at,
        }
    }
}

#[cfg(test)]
mod tests;
