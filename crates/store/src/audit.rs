//! How the redb store keeps the audit trail (the events themselves are
//! [`idemdb_core::AuditEvent`]s): events are encoded once, buffered, and written in segments,
//! one table entry per batch.

use serde::Serialize;

use idemdb_core::{
    AuditEvent, AuditKind, DecodeError, KeyHash, Timestamp, decode_versioned, encode_append, encode_versioned,
};

/// Version byte of an audit entry holding one event (what the first builds wrote; still read).
pub(crate) const AUDIT_EVENT_FORMAT: u8 = 1;
/// Version byte of an audit entry holding a segment: the events one commit wrote, oldest
/// first, keyed by the time of the newest.
pub(crate) const AUDIT_SEGMENT_FORMAT: u8 = 2;
/// Most events one segment holds.
pub(crate) const MAX_SEGMENT_EVENTS: usize = 1024;

/// What buffering an event left waiting.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Waiting {
    /// The event is the only one waiting (its wait starts now).
    pub(crate) first: bool,
    /// The count bound is reached: the events are due now.
    pub(crate) full: bool,
}

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
pub(crate) fn encode_segment(events: &[&EncodedEvent]) -> Vec<u8> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn event(correlation: Option<&str>, kind: AuditKind) -> AuditEvent {
        AuditEvent {
            at: Timestamp::from_millis(1_700_000_000_123),
            kind,
            tenant: "acme".into(),
            operation: "create_payment".into(),
            key_hash: KeyHash::compute(&[7; 32], b"k"),
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
        let stored: Vec<EncodedEvent> = events.iter().map(encoded).collect();
        let segment = encode_segment(&stored.iter().collect::<Vec<_>>());
        assert_eq!(segment, encode_versioned(AUDIT_SEGMENT_FORMAT, &events));
        assert_eq!(decode_entry(&segment).unwrap(), events);
        assert_eq!(encoded(&events[1]).decode().unwrap(), events[1]);
        // A single-event entry of the first format still reads.
        assert_eq!(decode_entry(&encode_versioned(AUDIT_EVENT_FORMAT, &events[0])).unwrap(), vec![events[0].clone()]);
    }
}
