//! Learning how a commit ended when its answer was lost (the connection dropped while
//! `COMMIT` was on its way, or the server did not answer in time).
//!
//! Two sources, asked on another connection:
//!
//! 1. **The transaction's status by id** (`txid_status`), while the server is the one that ran
//!    the transaction (same `pg_postmaster_start_time()`): committed, aborted, or still in
//!    progress — then the old backend, which has not noticed the lost connection, is
//!    terminated and the question asked again.
//! 2. **After a restart** (or a fail-over to another server) the id proves nothing: an id whose
//!    assignment never reached the write-ahead log is handed out again after crash recovery, so
//!    its status may be another transaction's. The adapter then reads back the rows it wrote:
//!    every row as written → committed; every row as it was before → not committed (a record
//!    never returns to an earlier state: fences, attempts and times only grow); anything else
//!    → [`Error::CommitUnknown`].
//!
//! When the database cannot be asked within [`OUTCOME_WINDOW`], the outcome is unknown too.

use std::time::Duration;

use deadpool_postgres::tokio_postgres::Row;

use idemdb_core::{IdempotencyKey, Refusal, Scope};

use crate::engine::Engine;
use crate::error::Error;
use crate::schema::{TERMINATE, TXID_STATUS};

/// How long the adapter keeps asking.
const OUTCOME_WINDOW: Duration = Duration::from_secs(5);

/// Who a transaction is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Identity {
    /// `None`: no id was assigned when it was read (nothing written then).
    xid: Option<i64>,
    backend: i32,
    /// `pg_postmaster_start_time()` in µs when the transaction ran.
    server_start: i64,
}

impl Identity {
    /// Reads the three columns of [`IDENTITY`](crate::schema::IDENTITY) starting at `first`.
    pub(crate) fn from_row(row: &Row, first: usize) -> Result<Identity, Error> {
        Ok(Identity {
            xid: row.try_get(first).map_err(Error::from_driver)?,
            backend: row.try_get(first + 1).map_err(Error::from_driver)?,
            server_start: row.try_get(first + 2).map_err(Error::from_driver)?,
        })
    }
}

/// What a row held before the transaction wrote it.
#[derive(Debug, Clone)]
pub(crate) enum Before {
    /// These bytes (`None`: no row).
    Known(Option<Vec<u8>>),
    /// Not known (an import that did not read first).
    Unknown,
}

/// One record row a transaction wrote.
#[derive(Debug, Clone)]
pub(crate) struct Written {
    pub(crate) scope: Scope,
    pub(crate) key: IdempotencyKey,
    pub(crate) before: Before,
    /// The bytes written (`None`: the row was removed).
    pub(crate) after: Option<Vec<u8>>,
}

/// The error of a commit whose outcome could not be learnt.
pub(crate) fn unknown(error: Error) -> Error {
    match error {
        Error::Unavailable(db) | Error::Database(db) | Error::CommitUnknown(db) => Error::CommitUnknown(db),
        other => other,
    }
}

/// The error of a commit learnt to have been rolled back: nothing was stored.
fn rolled_back(error: Error) -> Error {
    match error {
        Error::CommitUnknown(db) => Error::Unavailable(db),
        other => other,
    }
}

/// How the commit of `identity` ended: `Ok(())` if it committed, the original `error` (as
/// "nothing stored") if it was rolled back, [`Error::CommitUnknown`] if that cannot be learnt.
pub(crate) async fn learn(inner: &Engine, identity: &Identity, written: &[Written], error: Error) -> Result<(), Error> {
    // Within the call's deadline: a call that ran out of time is answered as unknown.
    let deadline = (tokio::time::Instant::now() + OUTCOME_WINDOW).min(inner.deadline());
    let mut pause = Duration::from_millis(20);
    while tokio::time::Instant::now() < deadline {
        match ask(inner, identity, written).await {
            Ok(Some(true)) => {
                tracing::info!(target: "idemdb", xid = ?identity.xid, "connection lost during commit; it committed");
                return Ok(());
            }
            Ok(Some(false)) => {
                tracing::info!(target: "idemdb", xid = ?identity.xid, "connection lost during commit; rolled back");
                return Err(rolled_back(error));
            }
            Ok(None) => break,
            // Still running, or the database could not be asked: again, a little later.
            Err(Retry) => {}
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(500));
    }
    tracing::warn!(target: "idemdb", xid = ?identity.xid, "connection lost during commit; outcome unknown");
    Err(unknown(error))
}

/// Ask again later.
struct Retry;

/// One question: `Some(committed?)`, `None` for "cannot be known", `Err(Retry)`.
async fn ask(inner: &Engine, identity: &Identity, written: &[Written]) -> Result<Option<bool>, Retry> {
    let connection = inner.connection().await.map_err(|_| Retry)?;
    // Without a transaction id (none was assigned when it was read), only the rows tell.
    let Some(xid) = identity.xid else { return read_back(inner, &connection, written).await };
    let row = inner
        .io(&connection, async {
            let rows = inner.statements.query(&connection, TXID_STATUS, &[&xid]).await.map_err(Error::from_driver)?;
            rows.into_iter().next().ok_or(Error::Refused(Refusal::NotFound))
        })
        .await
        .map_err(|_| Retry)?;
    let status: Option<String> = row.try_get(0).map_err(|_| Retry)?;
    let server_start: i64 = row.try_get(1).map_err(|_| Retry)?;
    if server_start != identity.server_start {
        return read_back(inner, &connection, written).await;
    }
    match status.as_deref() {
        Some("committed") => Ok(Some(true)),
        Some("aborted") => Ok(Some(false)),
        Some(_) => {
            // In progress: the old backend has not noticed that its client went away.
            let _ = inner
                .io(&connection, async {
                    inner
                        .statements
                        .query(&connection, TERMINATE, &[&identity.backend, &xid])
                        .await
                        .map_err(Error::from_driver)
                })
                .await;
            Err(Retry)
        }
        None => Ok(None),
    }
}

/// Compares the rows with what the transaction wrote and what they held before.
async fn read_back(inner: &Engine, connection: &crate::conn::Conn, written: &[Written]) -> Result<Option<bool>, Retry> {
    if written.is_empty() {
        return Ok(None);
    }
    let (mut as_written, mut as_before) = (0, 0);
    for row in written {
        let current = inner
            .query_keyed(connection, &inner.sql.get, &row.scope, &row.key)
            .await
            .map_err(|_| Retry)?
            .map(|found| found.try_get::<_, Vec<u8>>(0))
            .transpose()
            .map_err(|_| Retry)?;
        if current == row.after {
            as_written += 1;
        } else if matches!(&row.before, Before::Known(before) if *before == current) {
            as_before += 1;
        }
    }
    Ok(if as_written == written.len() {
        Some(true)
    } else if as_before == written.len() {
        Some(false)
    } else {
        None
    })
}
