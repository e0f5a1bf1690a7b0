//! The audit trail: what happened to which key, without the key itself.
//!
//! Each event names the key by a [`KeyHash`]: a BLAKE3 keyed hash of the encoded
//! `(scope, key)` under a secret made when the store was created and kept in its metadata.
//! Operators can correlate events and logs (`tracing` events carry the same hash) without the
//! raw key, the payload or any credential ever being written.

use core::fmt;

use serde::{Deserialize, Serialize};

use idemdb_core::{decode_versioned, encode_versioned, DecodeError, Fingerprint, Timestamp};

/// Version byte of an audit entry holding one event (what the first builds wrote; still read).
pub(crate) const AUDIT_EVENT_FORMAT: u8 = 1;
/// Version byte of an audit entry holding a segment: the events one commit wrote, oldest
/// first, keyed by the time of the newest.
pub(crate) const AUDIT_SEGMENT_FORMAT: u8 = 2;
/// Most events one segment holds.
pub(crate) const MAX_SEGMENT_EVENTS: usize = 1024;

/// Encodes events (at most [`MAX_SEGMENT_EVENTS`]) as one audit entry.
pub(crate) fn encode_segment(events: &[AuditEvent]) -> Vec<u8> {
    encode_versioned(AUDIT_SEGMENT_FORMAT, &events)
}

/// Decodes an audit entry of either version into its events.
///
/// # Errors
/// [`DecodeError`] for a malformed entry or a version this build does not know.
pub(crate) fn decode_entry(bytes: &[u8]) -> Result<Vec<AuditEvent>, DecodeError> {
    match bytes.first() {
        Some(&AUDIT_EVENT_FORMAT) => decode_versioned(bytes, AUDIT_EVENT_FORMAT).map(|event| vec![event]),
        _ => decode_versioned(bytes, AUDIT_SEGMENT_FORMAT),
    }
}

/// A keyed hash of a `(scope, key)`: 16 bytes, shown as 32 hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct KeyHash([u8; 16]);

impl KeyHash {
    pub(crate) fn compute(secret: &[u8; 32], scoped: &[u8]) -> Self {
        let hash = blake3::keyed_hash(secret, scoped);
        let mut out = [0u8; 16];
        out.copy_from_slice(&hash.as_bytes()[..16]);
        KeyHash(out)
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
}

impl AuditKind {
    /// A short lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditKind::Reserved => "reserved",
            AuditKind::Replayed => "replayed",
            AuditKind::Conflict => "conflict",
            AuditKind::InProgress => "in_progress",
            AuditKind::NeedsReconciliation => "needs_reconciliation",
            AuditKind::Expired => "expired",
            AuditKind::Completed => "completed",
            AuditKind::Failed => "failed",
            AuditKind::Reconciled => "reconciled",
            AuditKind::Renewed => "renewed",
            AuditKind::Purged => "purged",
        }
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
    /// The caller's correlation id, if given.
    pub correlation: Option<String>,
}

pub(crate) fn fingerprint_prefix(fingerprint: &Fingerprint) -> [u8; 8] {
    let mut out = [0u8; 8];
    out.copy_from_slice(&fingerprint.as_bytes()[..8]);
    out
}
