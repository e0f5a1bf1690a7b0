//! The audit trail: what happened to which key, without the key itself.
//!
//! Each event names the key by a [`KeyHash`]: a BLAKE3 keyed hash of the encoded
//! `(scope, key)` under a secret made when the store was created and kept in its metadata.
//! Operators can correlate events and logs (`tracing` events carry the same hash) without the
//! raw key, the payload or any credential ever being written.

use core::fmt;

use serde::{Deserialize, Serialize};

use idemdb_core::{DecodeError, Fingerprint, Timestamp, decode_versioned, encode_append, encode_versioned};

/// Version byte of an audit entry holding one event (what the first builds wrote; still read).
pub(crate) const AUDIT_EVENT_FORMAT: u8 = 1;
/// Version byte of an audit entry holding a segment: the events one commit wrote, oldest
/// first, keyed by the time of the newest.
pub(crate) const AUDIT_SEGMENT_FORMAT: u8 = 2;
/// Most events one segment holds.
pub(crate) const MAX_SEGMENT_EVENTS: usize = 1024;

/// An audit event waiting for a commit, already in its stored encoding: building it costs
/// one allocation, and writing a segment only concatenates.
#[derive(Debug, Clone)]
pub(crate) struct EncodedEvent {
    pub(crate) at: Timestamp,
    /// bincode of the event, as an element of a segment.
    bytes: Vec<u8>,
}

/// The fields of an [`AuditEvent`], borrowed: serialises to the same bytes.
#[derive(Serialize)]
struct AuditEventRef<'a> {
    at: Timestamp,
    kind: AuditKind,
    tenant: &'a str,
    operation: &'a str,
    key_hash: KeyHash,
    fence: u64,
    fingerprint_prefix: Option<[u8; 8]>,
    correlation: Option<&'a str>,
}

impl EncodedEvent {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        at: Timestamp,
        kind: AuditKind,
        tenant: &str,
        operation: &str,
        key_hash: KeyHash,
        fence: u64,
        fingerprint_prefix: Option<[u8; 8]>,
        correlation: Option<&str>,
    ) -> Self {
        let event = AuditEventRef { at, kind, tenant, operation, key_hash, fence, fingerprint_prefix, correlation };
        // No version byte: a segment carries one for all its events.
        // Fixed fields take at most about 60 bytes; sized once, the buffer never grows.
        let mut bytes = Vec::with_capacity(64 + tenant.len() + operation.len() + correlation.map_or(0, str::len));
        encode_append(&mut bytes, &event);
        EncodedEvent { at, bytes }
    }

    /// The event itself (for readers of events not yet written).
    pub(crate) fn decode(&self) -> Result<AuditEvent, DecodeError> {
        let mut versioned = Vec::with_capacity(self.bytes.len() + 1);
        versioned.push(AUDIT_EVENT_FORMAT);
        versioned.extend_from_slice(&self.bytes);
        decode_versioned(&versioned, AUDIT_EVENT_FORMAT)
    }
}

/// Encodes events (at most [`MAX_SEGMENT_EVENTS`]) as one audit entry: the version byte,
/// the count, then the events — the encoding of a `Vec<AuditEvent>`.
pub(crate) fn encode_segment(events: &[EncodedEvent]) -> Vec<u8> {
    let mut out = encode_versioned(AUDIT_SEGMENT_FORMAT, &(events.len() as u64));
    out.reserve(events.iter().map(|event| event.bytes.len()).sum());
    for event in events {
        out.extend_from_slice(&event.bytes);
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;

    fn event(correlation: Option<&str>, kind: AuditKind) -> AuditEvent {
        AuditEvent {
            at: Timestamp::from_millis(1_700_000_000_123),
            kind,
            tenant: "acme".into(),
            operation: "create_payment".into(),
            key_hash: KeyHash([7; 16]),
            fence: 1_700_000_000_000,
            fingerprint_prefix: Some([1, 2, 3, 4, 5, 6, 7, 8]),
            correlation: correlation.map(str::to_string),
        }
    }

    fn encoded(event: &AuditEvent) -> EncodedEvent {
        EncodedEvent::new(
            event.at,
            event.kind,
            &event.tenant,
            &event.operation,
            event.key_hash,
            event.fence,
            event.fingerprint_prefix,
            event.correlation.as_deref(),
        )
    }

    #[test]
    fn a_segment_of_encoded_events_is_the_encoding_of_the_events() {
        let events = vec![event(None, AuditKind::Reserved), event(Some("req-42"), AuditKind::Replayed)];
        let segment = encode_segment(&events.iter().map(encoded).collect::<Vec<_>>());
        assert_eq!(segment, encode_versioned(AUDIT_SEGMENT_FORMAT, &events));
        assert_eq!(decode_entry(&segment).unwrap(), events);
        assert_eq!(encoded(&events[1]).decode().unwrap(), events[1]);
        // A single-event entry of the first format still reads.
        assert_eq!(decode_entry(&encode_versioned(AUDIT_EVENT_FORMAT, &events[0])).unwrap(), vec![events[0].clone()]);
    }
}
