//! The webhook inbox, as pure rules.
//!
//! Providers deliver webhooks at least once and in any order. Two defences, in one
//! transaction:
//!
//! 1. **Delivery dedupe.** A delivery id seen before is a redelivery: it gets the earlier
//!    outcome back and changes nothing (a different payload under the same id is refused).
//! 2. **Domain guard.** Different delivery ids can describe the same object (a subscription
//!    updated twice, delivered out of order). An update is applied only when a
//!    [`DomainGuard`] admits it: [`NewerVersion`] (the source's version of the object is newer
//!    than the one applied), [`ValidTransition`] (the state change is valid by the
//!    application's rule), or a guard of the application's own.
//!
//! Deliveries (attempts) and objects (the business state they changed) are stored apart: a
//! [`DeliveryRecord`] per delivery id, an [`ObjectRecord`] per object.
//!
//! ```
//! use idemdb_core::{accept, Delivery, Fingerprint, InboxAnswer, NewerVersion, Timestamp};
//!
//! let at = Timestamp::from_millis(1_700_000_000_000);
//! let v2 = Delivery::new("stripe", "evt_2", "sub_1", 2, "active", Fingerprint::from_bytes([2; 32]), b"{}".to_vec())?;
//! let v1 = Delivery::new("stripe", "evt_1", "sub_1", 1, "trialing", Fingerprint::from_bytes([1; 32]), b"{}".to_vec())?;
//!
//! let first = accept(None, None, &v2, &NewerVersion, at)?;
//! assert_eq!(first.answer, InboxAnswer::Applied);
//! let object = first.object.expect("applied: the object is written");
//! // The older version arrives late, under another delivery id: recorded, never applied.
//! let late = accept(None, Some(&object), &v1, &NewerVersion, at)?;
//! assert_eq!(late.answer, InboxAnswer::Stale { current_version: 2 });
//! assert!(late.object.is_none());
//! // The first delivery again: the earlier outcome, nothing written.
//! let again = accept(first.delivery, Some(&object), &v2, &NewerVersion, at)?;
//! assert_eq!(again.answer, InboxAnswer::Duplicate { earlier: idemdb_core::DeliveryOutcome::Applied });
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Byte layout
//!
//! Deliveries under `len:u8 · source · len:u8 · delivery id`, objects under
//! `len:u8 · source · len:u8 · object id`; values `version:u8 (= 1) · bincode-standard(...)`.

use serde::{Deserialize, Serialize};

use super::{decode_pair, encode_pair};
use crate::key::validate;
use crate::{DecodeError, ErrorCode, Fingerprint, IdentityPart, KeyError, MAX_KEY_LEN, Timestamp, codec};

/// Format version of stored delivery records.
pub const DELIVERY_FORMAT: u8 = 1;
/// Format version of stored object records.
pub const OBJECT_FORMAT: u8 = 1;
/// Longest source or state name, in bytes.
const MAX_NAME_LEN: usize = 128;

/// A webhook delivery as it arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Delivery {
    /// Who sent it (`stripe`): deliveries and objects are scoped by source.
    pub source: String,
    /// The source's unique id of this delivery.
    pub delivery_id: String,
    /// The object it describes.
    pub object_id: String,
    /// The source's version of the object (its sequence number or update time); 0 when the
    /// source has none (then use [`ValidTransition`]).
    pub version: u64,
    /// The object's state according to this delivery.
    pub state: String,
    /// Fingerprint of the delivery's canonical payload (a redelivery carries the same).
    pub fingerprint: Fingerprint,
    /// The payload (or what of it the application keeps), stored with the object when applied.
    pub payload: Vec<u8>,
}

impl Delivery {
    /// The identity the audit trail records a delivery under: scope `(source, "webhook")`,
    /// key the delivery id. `None` when the parts do not make a scope and key (a source or id
    /// a key's alphabet does not allow): the delivery is then not audited.
    pub fn audit_identity(&self) -> Option<(crate::Scope, crate::IdempotencyKey)> {
        let scope = crate::Scope::new(self.source.as_str(), "webhook").ok()?;
        let key = crate::IdempotencyKey::new(self.delivery_id.as_str()).ok()?;
        Some((scope, key))
    }

    /// A delivery; `source` and `state` are 1..=128 bytes of printable ASCII, the ids
    /// 1..=255 bytes of visible ASCII.
    ///
    /// # Errors
    /// [`KeyError`] (part [`IdentityPart::Delivery`]) for an invalid part.
    pub fn new(
        source: impl Into<String>,
        delivery_id: impl Into<String>,
        object_id: impl Into<String>,
        version: u64,
        state: impl Into<String>,
        fingerprint: Fingerprint,
        payload: Vec<u8>,
    ) -> Result<Delivery, KeyError> {
        let delivery = Delivery {
            source: source.into(),
            delivery_id: delivery_id.into(),
            object_id: object_id.into(),
            version,
            state: state.into(),
            fingerprint,
            payload,
        };
        validate(IdentityPart::Delivery, &delivery.source, MAX_NAME_LEN, true)?;
        validate(IdentityPart::Delivery, &delivery.delivery_id, MAX_KEY_LEN, false)?;
        validate(IdentityPart::Delivery, &delivery.object_id, MAX_KEY_LEN, false)?;
        validate(IdentityPart::Delivery, &delivery.state, MAX_NAME_LEN, true)?;
        Ok(delivery)
    }

    /// The table key of this delivery: `source · delivery id`, length-prefixed.
    pub fn delivery_key(&self) -> Vec<u8> {
        encode_pair(&self.source, &self.delivery_id)
    }

    /// The table key of the object it describes: `source · object id`, length-prefixed.
    pub fn object_key(&self) -> Vec<u8> {
        encode_pair(&self.source, &self.object_id)
    }

    /// The table key of delivery `delivery_id` of `source`.
    ///
    /// # Errors
    /// [`KeyError`] for an invalid source or id.
    pub fn delivery_key_of(source: &str, delivery_id: &str) -> Result<Vec<u8>, KeyError> {
        validate(IdentityPart::Delivery, source, MAX_NAME_LEN, true)?;
        validate(IdentityPart::Delivery, delivery_id, MAX_KEY_LEN, false)?;
        Ok(encode_pair(source, delivery_id))
    }

    /// The table key of object `object_id` of `source`.
    ///
    /// # Errors
    /// [`KeyError`] for an invalid source or id.
    pub fn object_key_of(source: &str, object_id: &str) -> Result<Vec<u8>, KeyError> {
        validate(IdentityPart::Delivery, source, MAX_NAME_LEN, true)?;
        validate(IdentityPart::Delivery, object_id, MAX_KEY_LEN, false)?;
        Ok(encode_pair(source, object_id))
    }
}

/// What a delivery's first acceptance did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum DeliveryOutcome {
    /// The update was applied to the object.
    Applied,
    /// The object had a newer (or the same) version already; nothing changed.
    Stale {
        /// The version that was current.
        current_version: u64,
    },
    /// The guard refused the state change; nothing changed.
    InvalidTransition {
        /// The object's state at the time (`None`: no object yet).
        from: Option<String>,
    },
}

/// The name of a [`DeliveryOutcome`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DeliveryOutcomeKind {
    /// [`DeliveryOutcome::Applied`].
    Applied,
    /// [`DeliveryOutcome::Stale`].
    Stale,
    /// [`DeliveryOutcome::InvalidTransition`].
    InvalidTransition,
}

crate::names!(DeliveryOutcomeKind, "delivery outcome", {
    Applied => "applied",
    Stale => "stale",
    InvalidTransition => "invalid_transition",
});

impl DeliveryOutcome {
    /// Which outcome this is.
    pub fn kind(&self) -> DeliveryOutcomeKind {
        match self {
            DeliveryOutcome::Applied => DeliveryOutcomeKind::Applied,
            DeliveryOutcome::Stale { .. } => DeliveryOutcomeKind::Stale,
            DeliveryOutcome::InvalidTransition { .. } => DeliveryOutcomeKind::InvalidTransition,
        }
    }
}

/// One delivery, as stored (the attempt, apart from the business state).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DeliveryRecord {
    /// Fingerprint of its payload.
    pub fingerprint: Fingerprint,
    /// The object it described.
    pub object_id: String,
    /// The version it carried.
    pub version: u64,
    /// The state it carried.
    pub state: String,
    /// What its acceptance did.
    pub outcome: DeliveryOutcome,
    /// When it was accepted.
    pub received_at: Timestamp,
}

/// One object's business state, as the applied deliveries left it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ObjectRecord {
    /// The version last applied.
    pub version: u64,
    /// The state last applied.
    pub state: String,
    /// The payload last applied.
    #[serde(with = "serde_bytes")]
    pub payload: Vec<u8>,
    /// The delivery that applied it.
    pub delivery_id: String,
    /// When.
    pub updated_at: Timestamp,
}

/// What a [`DomainGuard`] says of an update.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Admission {
    /// Apply it.
    Apply,
    /// The object already has a version at least as new.
    Stale {
        /// The current version.
        current_version: u64,
    },
    /// The state change is not valid.
    InvalidTransition,
}

/// Decides whether an update may be applied to an object (the domain guard).
pub trait DomainGuard {
    /// Whether `incoming` may change the object whose current record is `current`.
    fn admits(&self, current: Option<&ObjectRecord>, incoming: &Delivery) -> Admission;
}

/// Applies an update only when its version is newer than the one applied.
#[derive(Debug, Clone, Copy, Default)]
pub struct NewerVersion;

impl DomainGuard for NewerVersion {
    fn admits(&self, current: Option<&ObjectRecord>, incoming: &Delivery) -> Admission {
        match current {
            Some(object) if incoming.version <= object.version => Admission::Stale { current_version: object.version },
            _ => Admission::Apply,
        }
    }
}

/// [`NewerVersion`] with a bound: an update more than `max_step` versions ahead of the
/// applied one (of 0 for an object not seen before) is refused as an invalid transition —
/// recorded under its delivery id, never applied. A sender's versions grow step by step; one
/// absurdly far ahead (a forged `2^63`) would otherwise make every later real version stale.
///
/// ```
/// use idemdb_core::{accept, Delivery, Fingerprint, InboxAnswer, NewerVersionWithin, Timestamp};
/// let at = Timestamp::from_millis(1);
/// let guard = NewerVersionWithin { max_step: 1_000 };
/// let forged = Delivery::new("p", "evt_x", "ch_1", 1 << 63, "refunded", Fingerprint::from_bytes([9; 32]), vec![])?;
/// assert!(matches!(accept(None, None, &forged, &guard, at)?.answer, InboxAnswer::InvalidTransition { .. }));
/// let real = Delivery::new("p", "evt_1", "ch_1", 2, "succeeded", Fingerprint::from_bytes([1; 32]), vec![])?;
/// assert_eq!(accept(None, None, &real, &guard, at)?.answer, InboxAnswer::Applied);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct NewerVersionWithin {
    /// The largest step ahead of the applied version that is accepted.
    pub max_step: u64,
}

impl DomainGuard for NewerVersionWithin {
    fn admits(&self, current: Option<&ObjectRecord>, incoming: &Delivery) -> Admission {
        let applied = current.map_or(0, |object| object.version);
        if incoming.version > applied.saturating_add(self.max_step) {
            return Admission::InvalidTransition;
        }
        NewerVersion.admits(current, incoming)
    }
}

/// Applies an update when the application's rule says the state change (`from` → `to`) is
/// valid; `from` is `None` for an object not seen before.
///
/// ```
/// use idemdb_core::ValidTransition;
/// // A subscription: trialing → active → cancelled, never back.
/// let guard = ValidTransition(|from: Option<&str>, to: &str| {
///     matches!((from, to), (None, _) | (Some("trialing"), "active") | (Some("active"), "cancelled"))
/// });
/// # let _ = guard;
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ValidTransition<F>(pub F);

impl<F: Fn(Option<&str>, &str) -> bool> DomainGuard for ValidTransition<F> {
    fn admits(&self, current: Option<&ObjectRecord>, incoming: &Delivery) -> Admission {
        if (self.0)(current.map(|object| object.state.as_str()), &incoming.state) {
            Admission::Apply
        } else {
            Admission::InvalidTransition
        }
    }
}

/// What [`accept`] answers.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum InboxAnswer {
    /// The update was applied (the application's own effect runs in the same transaction).
    Applied,
    /// A redelivery: the earlier outcome, nothing changed.
    Duplicate {
        /// What the first acceptance did.
        earlier: DeliveryOutcome,
    },
    /// The object has a version at least as new: recorded, not applied.
    Stale {
        /// The current version.
        current_version: u64,
    },
    /// The guard refused the state change: recorded, not applied.
    InvalidTransition {
        /// The object's state.
        from: Option<String>,
        /// The refused state.
        to: String,
    },
}

/// What [`accept`] decided: the answer, and what to write in the same transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxDecision {
    /// The answer.
    pub answer: InboxAnswer,
    /// The delivery record to write (`None` for a redelivery).
    pub delivery: Option<DeliveryRecord>,
    /// The object record to write (`Some` only when the update is applied).
    pub object: Option<ObjectRecord>,
}

/// The inbox refused a delivery; nothing was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InboxRefusal {
    /// The delivery id was seen before with a different payload.
    #[error("delivery id already seen with a different payload")]
    DeliveryMismatch,
}

impl InboxRefusal {
    /// The stable code of this refusal.
    pub fn code(&self) -> ErrorCode {
        match self {
            InboxRefusal::DeliveryMismatch => ErrorCode::DeliveryMismatch,
        }
    }
}

crate::coded!(InboxRefusal);

/// The operation name whose policy sets how long the deliveries of a webhook `source` are
/// kept: `webhook:<source>`. A store without a policy of that name uses its default policy.
///
/// ```
/// assert_eq!(idemdb_core::delivery_policy_name("stripe"), "webhook:stripe");
/// ```
pub fn delivery_policy_name(source: &str) -> String {
    format!("webhook:{source}")
}

/// Accepts a delivery: `existing` is the stored record of its delivery id, `object` the
/// stored record of the object it describes.
///
/// # Errors
/// [`InboxRefusal::DeliveryMismatch`] when the delivery id was seen with another payload.
pub fn accept(
    existing: Option<DeliveryRecord>,
    object: Option<&ObjectRecord>,
    incoming: &Delivery,
    guard: &impl DomainGuard,
    now: Timestamp,
) -> Result<InboxDecision, InboxRefusal> {
    if let Some(earlier) = existing {
        if earlier.fingerprint != incoming.fingerprint {
            return Err(InboxRefusal::DeliveryMismatch);
        }
        return Ok(InboxDecision {
            answer: InboxAnswer::Duplicate { earlier: earlier.outcome },
            delivery: None,
            object: None,
        });
    }
    let (answer, outcome, write) = match guard.admits(object, incoming) {
        Admission::Apply => {
            let updated = ObjectRecord {
                version: incoming.version,
                state: incoming.state.clone(),
                payload: incoming.payload.clone(),
                delivery_id: incoming.delivery_id.clone(),
                updated_at: object.map_or(now, |object| now.max(object.updated_at)),
            };
            (InboxAnswer::Applied, DeliveryOutcome::Applied, Some(updated))
        }
        Admission::Stale { current_version } => {
            (InboxAnswer::Stale { current_version }, DeliveryOutcome::Stale { current_version }, None)
        }
        Admission::InvalidTransition => {
            let from = object.map(|object| object.state.clone());
            let answer = InboxAnswer::InvalidTransition { from: from.clone(), to: incoming.state.clone() };
            (answer, DeliveryOutcome::InvalidTransition { from }, None)
        }
    };
    let delivery = DeliveryRecord {
        fingerprint: incoming.fingerprint,
        object_id: incoming.object_id.clone(),
        version: incoming.version,
        state: incoming.state.clone(),
        outcome,
        received_at: now,
    };
    Ok(InboxDecision { answer, delivery: Some(delivery), object: write })
}

impl DeliveryRecord {
    /// When retention forgets the delivery: received, plus the response and tombstone TTLs
    /// of its source's policy ([`delivery_policy_name`](crate::delivery_policy_name)).
    pub fn forget_at(&self, policy: &crate::Policy) -> Timestamp {
        self.received_at.saturating_add(policy.response_ttl()).saturating_add(policy.tombstone_ttl())
    }

    /// The stored value.
    pub fn encode(&self) -> Vec<u8> {
        codec::encode_versioned(DELIVERY_FORMAT, self)
    }

    /// Decodes a stored value.
    ///
    /// # Errors
    /// [`DecodeError`].
    pub fn decode(value: &[u8]) -> Result<DeliveryRecord, DecodeError> {
        codec::decode_versioned(value, DELIVERY_FORMAT)
    }

    /// The source and delivery id of a delivery table key.
    pub fn split_key(key: &[u8]) -> Option<(&str, &str)> {
        decode_pair(key)
    }
}

impl ObjectRecord {
    /// The stored value.
    pub fn encode(&self) -> Vec<u8> {
        codec::encode_versioned(OBJECT_FORMAT, self)
    }

    /// Decodes a stored value.
    ///
    /// # Errors
    /// [`DecodeError`].
    pub fn decode(value: &[u8]) -> Result<ObjectRecord, DecodeError> {
        codec::decode_versioned(value, OBJECT_FORMAT)
    }

    /// The source and object id of an object table key.
    pub fn split_key(key: &[u8]) -> Option<(&str, &str)> {
        decode_pair(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    fn delivery(id: &str, version: u64, state: &str) -> Delivery {
        let fp = crate::FingerprintBuilder::new().str_field(id).finish();
        Delivery::new("provider", id, "sub_1", version, state, fp, state.as_bytes().to_vec()).unwrap()
    }

    #[test]
    fn a_delivery_is_audited_as_its_source_s_webhook_and_forgotten_after_both_ttls() {
        let d = delivery("evt_1", 1, "active");
        let (scope, key) = d.audit_identity().expect("a key-shaped id");
        assert_eq!((scope.tenant(), scope.operation(), key.as_str()), ("provider", "webhook", "evt_1"));
        let spaced = Delivery { delivery_id: "evt 1".into(), ..d.clone() };
        assert_eq!(spaced.audit_identity(), None, "an id a key cannot hold is not audited");
        let record = accept(None, None, &d, &NewerVersion, at(1_000)).unwrap().delivery.unwrap();
        let policy = crate::Policy::default()
            .with_response_ttl(core::time::Duration::from_millis(20))
            .with_tombstone_ttl(core::time::Duration::from_millis(300));
        assert_eq!(record.forget_at(&policy), at(1_320));
    }

    #[test]
    fn a_newer_version_applies_and_an_older_one_is_recorded_as_stale() {
        let first = accept(None, None, &delivery("d1", 5, "active"), &NewerVersion, at(1)).unwrap();
        assert_eq!(first.answer, InboxAnswer::Applied);
        let object = first.object.clone().unwrap();
        assert_eq!((object.version, object.state.as_str(), object.delivery_id.as_str()), (5, "active", "d1"));
        for (id, version) in [("d0", 4), ("d5", 5)] {
            let late = accept(None, Some(&object), &delivery(id, version, "trialing"), &NewerVersion, at(2)).unwrap();
            assert_eq!(late.answer, InboxAnswer::Stale { current_version: 5 }, "{id}");
            assert_eq!(late.delivery.unwrap().outcome, DeliveryOutcome::Stale { current_version: 5 });
            assert!(late.object.is_none());
        }
        let newer = accept(None, Some(&object), &delivery("d6", 6, "past_due"), &NewerVersion, at(3)).unwrap();
        assert_eq!(newer.object.unwrap().state, "past_due");
    }

    #[test]
    fn a_redelivery_returns_the_earlier_outcome_and_a_changed_payload_is_refused() {
        let d = delivery("d1", 1, "active");
        let first = accept(None, None, &d, &NewerVersion, at(1)).unwrap();
        let again = accept(first.delivery.clone(), first.object.as_ref(), &d, &NewerVersion, at(2)).unwrap();
        assert_eq!(
            again,
            InboxDecision {
                answer: InboxAnswer::Duplicate { earlier: DeliveryOutcome::Applied },
                delivery: None,
                object: None
            }
        );
        let mut changed = d.clone();
        changed.fingerprint = Fingerprint::from_bytes([9; 32]);
        assert_eq!(accept(first.delivery, None, &changed, &NewerVersion, at(2)), Err(InboxRefusal::DeliveryMismatch));
    }

    #[test]
    fn a_transition_rule_refuses_invalid_changes() {
        let rule = ValidTransition(|from: Option<&str>, to: &str| {
            matches!((from, to), (None, "trialing") | (Some("trialing"), "active") | (Some("active"), "cancelled"))
        });
        let first = accept(None, None, &delivery("d1", 0, "trialing"), &rule, at(1)).unwrap();
        let object = first.object.unwrap();
        let back = accept(None, Some(&object), &delivery("d2", 0, "trialing"), &rule, at(2)).unwrap();
        assert_eq!(
            back.answer,
            InboxAnswer::InvalidTransition { from: Some("trialing".into()), to: "trialing".into() }
        );
        let skip = accept(None, Some(&object), &delivery("d3", 0, "cancelled"), &rule, at(2)).unwrap();
        assert!(matches!(skip.answer, InboxAnswer::InvalidTransition { .. }));
        let valid = accept(None, Some(&object), &delivery("d4", 0, "active"), &rule, at(2)).unwrap();
        assert_eq!(valid.answer, InboxAnswer::Applied);
        assert!(matches!(
            accept(None, None, &delivery("d5", 0, "active"), &rule, at(1)).unwrap().answer,
            InboxAnswer::InvalidTransition { from: None, .. }
        ));
    }

    #[test]
    fn records_round_trip_and_keys_are_injective() {
        let d = delivery("d1", 1, "active");
        let decision = accept(None, None, &d, &NewerVersion, at(1)).unwrap();
        let record = decision.delivery.unwrap();
        assert_eq!(DeliveryRecord::decode(&record.encode()), Ok(record));
        let object = decision.object.unwrap();
        assert_eq!(ObjectRecord::decode(&object.encode()), Ok(object));
        assert_eq!(DeliveryRecord::split_key(&d.delivery_key()), Some(("provider", "d1")));
        let a = Delivery::new("ab", "c", "o", 0, "s", Fingerprint::from_bytes([0; 32]), vec![]).unwrap();
        let b = Delivery::new("a", "bc", "o", 0, "s", Fingerprint::from_bytes([0; 32]), vec![]).unwrap();
        assert_ne!(a.delivery_key(), b.delivery_key());
        assert!(Delivery::new("", "d", "o", 0, "s", Fingerprint::from_bytes([0; 32]), vec![]).is_err());
        assert!(Delivery::new("p", "has space", "o", 0, "s", Fingerprint::from_bytes([0; 32]), vec![]).is_err());
    }
}
