//! The audit trail in PostgreSQL: one row per event, written by the transaction of the decision
//! it records. Answers that change nothing (replay, in progress, mismatch, expired, uncertain)
//! are decided without a write transaction; their events wait in memory and go out with the
//! next write transaction, or in one multi-row insert once [`AuditBatch::EVENTS`] wait or the
//! oldest has waited [`AuditBatch::DELAY_MS`] — the core's one rule, as the embedded store
//! keeps it. The age bound holds with no later call too: the first waiting event starts a
//! timer task that writes the buffer when its second is up. A crash can lose the events of
//! about the last second of such answers, never a decision or the event of a decision.

use std::sync::{Mutex, MutexGuard, PoisonError};

use deadpool_postgres::Client;
use deadpool_postgres::tokio_postgres::Row;
use deadpool_postgres::tokio_postgres::types::ToSql;

use idemdb_core::{
    AuditBatch, AuditEvent, AuditKind, Corrupt, Fingerprint, IdempotencyKey, KeyHash, Named, Scope, ScopedKey,
    Timestamp,
};

use crate::error::{DbError, Error};

/// The event of a decision or answer on `(scope, key)`, hashed under the store's `secret`;
/// emits the event's `tracing` event (the key and the tenant as keyed hashes, never raw).
#[allow(clippy::too_many_arguments)]
pub(crate) fn event(
    at: Timestamp,
    kind: AuditKind,
    scope: &Scope,
    key: &IdempotencyKey,
    secret: &[u8; 32],
    fence: u64,
    fingerprint: Option<&Fingerprint>,
    correlation: Option<&str>,
) -> AuditEvent {
    let key_hash = KeyHash::compute(secret, &ScopedKey::encode_parts(scope, key));
    tracing::debug!(
        target: "idemdb",
        event = kind.as_str(),
        key_hash = %key_hash,
        tenant_hash = %KeyHash::tenant(secret, scope.tenant()),
        operation = scope.operation(),
        fence,
        correlation = correlation.unwrap_or(""),
    );
    AuditEvent::new(at, kind, scope, key_hash, fence, fingerprint, correlation)
}

/// The columns a single-row insert binds besides time, scope and fence: kind, key hash,
/// fingerprint prefix, correlation.
pub(crate) fn columns(event: &AuditEvent) -> (&'static str, &[u8], Option<&[u8]>, Option<&str>) {
    (
        event.kind.as_str(),
        event.key_hash.as_bytes().as_slice(),
        event.fingerprint_prefix.as_ref().map(|p| p.as_slice()),
        event.correlation.as_deref(),
    )
}

/// Milliseconds as a `bigint` (values past `i64::MAX`, "never", saturate; order is kept).
pub(crate) fn to_sql_ms(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// Inserts rows in one statement (arrays unnested by the server); the statement's row: the
/// transaction's identity (`None` when there were no rows).
pub(crate) async fn insert(
    statements: &crate::stmt::Statements,
    client: &Client,
    sql: &str,
    rows: &[AuditEvent],
) -> Result<Option<Row>, Error> {
    if rows.is_empty() {
        return Ok(None);
    }
    let at: Vec<i64> = rows.iter().map(|r| to_sql_ms(r.at.as_millis())).collect();
    let kind: Vec<&str> = rows.iter().map(|r| r.kind.as_str()).collect();
    let tenant: Vec<&str> = rows.iter().map(|r| r.tenant.as_str()).collect();
    let operation: Vec<&str> = rows.iter().map(|r| r.operation.as_str()).collect();
    let key_hash: Vec<&[u8]> = rows.iter().map(|r| r.key_hash.as_bytes().as_slice()).collect();
    let fence: Vec<i64> = rows.iter().map(|r| to_sql_ms(r.fence)).collect();
    let prefix: Vec<Option<&[u8]>> = rows.iter().map(|r| r.fingerprint_prefix.as_ref().map(|p| p.as_slice())).collect();
    let correlation: Vec<Option<&str>> = rows.iter().map(|r| r.correlation.as_deref()).collect();
    let params: [&(dyn ToSql + Sync); 8] = [&at, &kind, &tenant, &operation, &key_hash, &fence, &prefix, &correlation];
    statements.query_opt(client, sql, &params).await.map_err(Error::from_driver)
}

/// Decodes a row of `Sql::audit_read`.
pub(crate) fn decode(row: &Row) -> Result<AuditEvent, Error> {
    let corrupt = |reason: String| {
        Error::Corrupt(Corrupt { what: "audit event", source: idemdb_core::DecodeError::Malformed { reason } })
    };
    let get_err = |e: deadpool_postgres::tokio_postgres::Error| Error::Database(DbError::from(e));
    let at: i64 = row.try_get(0).map_err(get_err)?;
    let kind: String = row.try_get(1).map_err(get_err)?;
    let key_hash: Vec<u8> = row.try_get(4).map_err(get_err)?;
    let fence: i64 = row.try_get(5).map_err(get_err)?;
    let prefix: Option<Vec<u8>> = row.try_get(6).map_err(get_err)?;
    let mut hash = [0u8; 16];
    if key_hash.len() != 16 {
        return Err(corrupt(format!("key hash of {} bytes", key_hash.len())));
    }
    hash.copy_from_slice(&key_hash);
    let fingerprint_prefix = match prefix {
        None => None,
        Some(bytes) => Some(<[u8; 8]>::try_from(bytes.as_slice()).map_err(|_| corrupt("fingerprint prefix".into()))?),
    };
    Ok(AuditEvent {
        at: Timestamp::from_millis(u64::try_from(at).unwrap_or(0)),
        kind: AuditKind::parse_name(&kind).map_err(|e| corrupt(e.to_string()))?,
        tenant: row.try_get(2).map_err(get_err)?,
        operation: row.try_get(3).map_err(get_err)?,
        key_hash: KeyHash::from_bytes(hash),
        fence: u64::try_from(fence).unwrap_or(0),
        fingerprint_prefix,
        correlation: row.try_get(7).map_err(get_err)?,
    })
}

/// What pushing an event left waiting.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Waiting {
    /// The event is the only one waiting.
    pub(crate) first: bool,
    /// The waiting events are due now.
    pub(crate) due: bool,
}

/// Events of answers that wrote nothing, waiting for a write.
#[derive(Debug, Default)]
pub(crate) struct Buffer(Mutex<Vec<AuditEvent>>);

impl Buffer {
    fn lock(&self) -> MutexGuard<'_, Vec<AuditEvent>> {
        // Only pushes, appends and takes happen under this lock: a panic cannot leave it
        // inconsistent.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps an event; returns what now waits: whether it is the only waiting event (its wait
    /// starts now) and whether the buffer should be written now ([`AuditBatch::due`]).
    pub(crate) fn push(&self, event: AuditEvent) -> Waiting {
        let mut buffer = self.lock();
        let now = event.at;
        let due = AuditBatch::due(buffer.len(), buffer.first().map(|oldest| oldest.at), 1, now);
        buffer.push(event);
        Waiting { first: buffer.len() == 1, due }
    }

    /// Takes every buffered event (a write transaction carries them).
    pub(crate) fn take(&self) -> Vec<AuditEvent> {
        std::mem::take(&mut *self.lock())
    }

    /// Puts back events whose write failed.
    pub(crate) fn restore(&self, mut rows: Vec<AuditEvent>) {
        if !rows.is_empty() {
            let mut buffer = self.lock();
            rows.append(&mut buffer);
            *buffer = rows;
        }
    }

    /// Copies of the buffered events.
    pub(crate) fn snapshot(&self) -> Vec<AuditEvent> {
        self.lock().clone()
    }
}
