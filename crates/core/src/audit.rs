//! The audit vocabulary: what happened to which key, without the key itself.
//!
//! Each event names the key by a [`KeyHash`]: a BLAKE3 keyed hash of the encoded
//! `(scope, key)` under a secret made when the store was created. Operators can correlate
//! events and logs (`tracing` events carry the same hash) without the raw key, the payload or
//! any credential ever being written. Storage adapters decide how events are stored.

use core::fmt;

use serde::{Deserialize, Serialize};

use crate::{Fingerprint, ReservationKind, StateKind, Timestamp};

/// A keyed hash of a `(scope, key)`: 16 bytes, shown as 32 hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct KeyHash([u8; 16]);

impl KeyHash {
    /// The keyed hash of an encoded `(scope, key)` ([`ScopedKey::encode`](crate::ScopedKey::encode))
    /// under a store's 32-byte secret: BLAKE3 in keyed mode, the first 16 bytes.
    pub fn compute(secret: &[u8; 32], scoped: &[u8]) -> Self {
        let hash = blake3::keyed_hash(secret, scoped);
        let mut out = [0u8; 16];
        out.copy_from_slice(&hash.as_bytes()[..16]);
        KeyHash(out)
    }

    /// The keyed hash that logs show for a tenant, under a store's 32-byte secret: BLAKE3 in
    /// keyed mode with a key derived from the secret for this purpose alone, so a tenant's
    /// hash is stable across a store's logs (and its instances, which share the secret),
    /// never equals any key's hash, and tells nothing about the tenant to whoever reads logs
    /// without the secret.
    ///
    /// ```
    /// use idemdb_core::KeyHash;
    /// let secret = [7; 32];
    /// assert_eq!(KeyHash::tenant(&secret, "acme"), KeyHash::tenant(&secret, "acme"));
    /// assert_ne!(KeyHash::tenant(&secret, "acme"), KeyHash::tenant(&secret, "acne"));
    /// assert_ne!(KeyHash::tenant(&secret, "acme"), KeyHash::compute(&secret, b"acme"));
    /// assert!(!KeyHash::tenant(&secret, "acme").to_string().contains("acme"));
    /// ```
    pub fn tenant(secret: &[u8; 32], tenant: &str) -> Self {
        let key = blake3::derive_key("idemdb 2026-12 tenant hash for logs", secret);
        KeyHash::compute(&key, tenant.as_bytes())
    }

    /// A hash read back from storage (an adapter that keeps the audit trail in columns).
    ///
    /// ```
    /// use idemdb_core::KeyHash;
    /// let hash = KeyHash::compute(&[7; 32], b"k");
    /// assert_eq!(KeyHash::from_bytes(*hash.as_bytes()), hash);
    /// ```
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        KeyHash(bytes)
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
}

impl fmt::Display for KeyHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|byte| write!(f, "{byte:02x}"))
    }
}

impl fmt::Debug for KeyHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyHash({self})")
    }
}

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum AuditKind {
    /// A lease was issued.
    Reserved,
    /// A stored result was replayed.
    Replayed,
    /// A request with a different fingerprint was refused.
    Conflict,
    /// A duplicate arrived while an attempt held the lease.
    InProgress,
    /// A request was refused because the record is uncertain.
    NeedsReconciliation,
    /// A request found only a tombstone.
    Expired,
    /// The record was completed.
    Completed,
    /// The attempt failed (definitively, retryably or uncertainly).
    Failed,
    /// An uncertain record was resolved.
    Reconciled,
    /// A lease was renewed.
    Renewed,
    /// Retention turned the record into a tombstone or removed it.
    Purged,
    /// An external effect was enqueued in the outbox.
    EffectEnqueued,
    /// A dispatcher claimed an outbox effect.
    EffectClaimed,
    /// A dispatcher reported an effect's outcome.
    EffectReported,
    /// An uncertain effect was resolved (or sent again inside the provider's window).
    EffectResolved,
    /// A webhook delivery was accepted (applied, stale, refused or a redelivery).
    DeliveryAccepted,
    /// A worker claimed a job.
    JobClaimed,
    /// A job step finished.
    JobStep,
    /// A job finished, was abandoned, or a compensation ran.
    JobChanged,
    /// A new intent with a new key replaces an earlier one (after a refusal or a changed
    /// request); the event's correlation names the earlier key's hash.
    Superseded,
}

impl AuditKind {
    /// The event of an intent's record that a change of its effect moved along
    /// ([`OutboxItem::record_after`](crate::OutboxItem::record_after)): `Completed`, `Failed`
    /// for a record now failed or uncertain, else `Renewed` (its lease kept while the effect is
    /// on its way). Both adapters record this one.
    pub fn after_effect(record: StateKind) -> AuditKind {
        match record {
            StateKind::Completed => AuditKind::Completed,
            StateKind::Failed | StateKind::Uncertain => AuditKind::Failed,
            _ => AuditKind::Renewed,
        }
    }
}

crate::names!(AuditKind, "audit event kind", {
    Reserved => "reserved",
    Replayed => "replayed",
    Conflict => "conflict",
    InProgress => "in_progress",
    NeedsReconciliation => "needs_reconciliation",
    Expired => "expired",
    Completed => "completed",
    Failed => "failed",
    Reconciled => "reconciled",
    Renewed => "renewed",
    Purged => "purged",
    EffectEnqueued => "effect_enqueued",
    EffectClaimed => "effect_claimed",
    EffectReported => "effect_reported",
    EffectResolved => "effect_resolved",
    DeliveryAccepted => "delivery_accepted",
    JobClaimed => "job_claimed",
    JobStep => "job_step",
    JobChanged => "job_changed",
    Superseded => "superseded",
});

impl From<ReservationKind> for AuditKind {
    /// The event a reservation answer records.
    fn from(kind: ReservationKind) -> Self {
        match kind {
            ReservationKind::Acquired => AuditKind::Reserved,
            ReservationKind::Replay => AuditKind::Replayed,
            ReservationKind::InProgress => AuditKind::InProgress,
            ReservationKind::Mismatch => AuditKind::Conflict,
            ReservationKind::NeedsReconciliation => AuditKind::NeedsReconciliation,
            ReservationKind::Expired => AuditKind::Expired,
        }
    }
}

/// How long audit events are kept before a purge removes them, unless the store is told
/// otherwise: 90 days.
pub const DEFAULT_AUDIT_RETENTION: core::time::Duration = core::time::Duration::from_secs(90 * 24 * 3600);

/// When audit events are written: the one rule every storage adapter follows.
///
/// * The events of a **decision** (a reservation that acquired, a completion, a failure, a
///   renewal, a resolution, an outbox or job change) are written by the decision's own
///   transaction: they are on record exactly when the decision is, and a crash never loses one.
/// * The events of **answers that change nothing** (a replay, a key in progress, a mismatch, an
///   expired or uncertain key) are decided without a write transaction. They wait in memory and
///   are written by the next transaction, or on their own once [`AuditBatch::EVENTS`] are
///   waiting or the oldest has waited [`AuditBatch::DELAY_MS`] — whichever comes first. A crash
///   loses at most the answers of about the last [`AuditBatch::DELAY_MS`], and never more than
///   [`AuditBatch::EVENTS`] of them.
///
/// ```
/// use idemdb_core::{AuditBatch, Timestamp};
/// let at = |ms| Timestamp::from_millis(ms);
/// // Nothing buffered and nothing of its own: nothing to write.
/// assert!(!AuditBatch::due(0, None, 0, at(5_000)));
/// // A few young events wait for a later commit...
/// assert!(!AuditBatch::due(3, Some(at(4_500)), 0, at(5_000)));
/// // ...until the oldest is a second old, or a batch has gathered.
/// assert!(AuditBatch::due(3, Some(at(4_000)), 0, at(5_000)));
/// assert!(AuditBatch::due(AuditBatch::EVENTS - 1, Some(at(4_900)), 1, at(5_000)));
/// // How long a writer of waiting events may still sleep.
/// assert_eq!(AuditBatch::wait_ms(0, 0), None);
/// assert_eq!(AuditBatch::wait_ms(3, 400), Some(600));
/// assert_eq!(AuditBatch::wait_ms(3, 1_500), Some(0));
/// assert_eq!(AuditBatch::wait_ms(AuditBatch::EVENTS, 0), Some(0));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct AuditBatch;

impl AuditBatch {
    /// Waiting events that are written at once.
    pub const EVENTS: usize = 256;
    /// Milliseconds after which waiting events are written.
    pub const DELAY_MS: u64 = 1_000;
    /// The most events that wait in memory. Writes that keep failing (a full or failing disk)
    /// would otherwise let a stream of answers grow the buffer without end; beyond this, an
    /// answer's event is dropped and counted (`Stats::audit_events_dropped`), never a
    /// decision's, which its own commit writes.
    pub const MAX_WAITING: usize = 16 * Self::EVENTS;

    /// How long `waiting` events, the oldest of which has waited `waited_ms`, may still wait
    /// before they must be written: `None` when nothing waits, `Some(0)` when they are due now.
    pub fn wait_ms(waiting: usize, waited_ms: u64) -> Option<u64> {
        if waiting == 0 {
            None
        } else if waiting >= Self::EVENTS {
            Some(0)
        } else {
            Some(Self::DELAY_MS.saturating_sub(waited_ms))
        }
    }

    /// Whether a commit at `now` should write the waiting events: `buffered` events wait, the
    /// oldest decided at `oldest`, and the commit brings `own` new ones ([`AuditBatch::wait_ms`]
    /// in store time).
    pub fn due(buffered: usize, oldest: Option<Timestamp>, own: usize, now: Timestamp) -> bool {
        let waited = oldest.map_or(0, |oldest| now.as_millis().saturating_sub(oldest.as_millis()));
        Self::wait_ms(buffered + own, waited) == Some(0)
    }
}

/// One entry of the audit trail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEvent {
    /// When.
    pub at: Timestamp,
    /// What.
    pub kind: AuditKind,
    /// The tenant of the scope.
    pub tenant: String,
    /// The operation of the scope.
    pub operation: String,
    /// The keyed hash of `(scope, key)`.
    pub key_hash: KeyHash,
    /// The fence involved (0 when none).
    pub fence: u64,
    /// The first 8 bytes of the request fingerprint, when a request was involved.
    pub fingerprint_prefix: Option<[u8; 8]>,
    /// The caller's correlation id, if given; for an outbox event, the effect's name; for a
    /// resolution, its [`ResolutionCause`](crate::ResolutionCause) too (see
    /// [`AuditEvent::resolution_correlation`]).
    pub correlation: Option<String>,
}

impl AuditEvent {
    /// The event of a decision or answer on `scope`, whose `(scope, key)` hashes to
    /// `key_hash`: what every adapter records, whichever way it stores it.
    ///
    /// ```
    /// use idemdb_core::{AuditEvent, AuditKind, Fingerprint, KeyHash, Scope, Timestamp};
    /// let scope = Scope::new("acme", "pay").unwrap();
    /// let fingerprint = Fingerprint::of_canonical_json(b"{}");
    /// let hash = KeyHash::from_bytes([3; 16]);
    /// let event =
    ///     AuditEvent::new(Timestamp::from_millis(9), AuditKind::Reserved, &scope, hash, 9, Some(&fingerprint), Some("req-1"));
    /// assert_eq!((event.tenant.as_str(), event.operation.as_str()), ("acme", "pay"));
    /// assert_eq!(event.fingerprint_prefix, Some(fingerprint.prefix()));
    /// assert_eq!(event.correlation.as_deref(), Some("req-1"));
    /// ```
    pub fn new(
        at: Timestamp,
        kind: AuditKind,
        scope: &crate::Scope,
        key_hash: KeyHash,
        fence: u64,
        fingerprint: Option<&crate::Fingerprint>,
        correlation: Option<&str>,
    ) -> Self {
        AuditEvent {
            at,
            kind,
            tenant: scope.tenant().to_string(),
            operation: scope.operation().to_string(),
            key_hash,
            fence,
            fingerprint_prefix: fingerprint.map(crate::Fingerprint::prefix),
            correlation: correlation.map(str::to_string),
        }
    }

    /// Why a resolution event's record or effect was resolved; `None` for other events (and
    /// for resolutions written before causes were recorded).
    ///
    /// ```
    /// use idemdb_core::{AuditEvent, AuditKind, KeyHash, ResolutionCause, Timestamp};
    /// let event = AuditEvent {
    ///     at: Timestamp::from_millis(1),
    ///     kind: AuditKind::Reconciled,
    ///     tenant: "acme".into(),
    ///     operation: "pay".into(),
    ///     key_hash: KeyHash::from_bytes([0; 16]),
    ///     fence: 1,
    ///     fingerprint_prefix: None,
    ///     correlation: Some(ResolutionCause::EffectFree.as_str().into()),
    /// };
    /// assert_eq!(event.cause(), Some(ResolutionCause::EffectFree));
    /// ```
    pub fn cause(&self) -> Option<crate::ResolutionCause> {
        match self.kind {
            AuditKind::Reconciled | AuditKind::EffectResolved => {
                self.correlation.as_deref()?.rsplit(' ').next()?.parse().ok()
            }
            _ => None,
        }
    }

    /// What a resolution event records as its correlation: the cause's name, after the
    /// effect's name and a space for an outbox effect (effect names have no spaces).
    ///
    /// ```
    /// use idemdb_core::{AuditEvent, ResolutionCause};
    /// assert_eq!(AuditEvent::resolution_correlation(None, ResolutionCause::Operator), "operator");
    /// assert_eq!(
    ///     AuditEvent::resolution_correlation(Some("charge-v1"), ResolutionCause::ProviderNotFound),
    ///     "charge-v1 provider_not_found"
    /// );
    /// ```
    pub fn resolution_correlation(effect: Option<&str>, cause: crate::ResolutionCause) -> String {
        match effect {
            Some(effect) => format!("{effect} {}", cause.as_str()),
            None => cause.as_str().to_string(),
        }
    }
}

impl Fingerprint {
    /// The first 8 bytes, as audit events record them.
    pub fn prefix(&self) -> [u8; 8] {
        let mut out = [0u8; 8];
        out.copy_from_slice(&self.as_bytes()[..8]);
        out
    }
}
