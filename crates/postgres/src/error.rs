//! Errors: [`ConnectError`] for connecting and migrating, [`Error`] for operations, both
//! wrapping [`DbError`] for what the driver or the server reported.
//!
//! The classification is the point: a database that cannot be reached is
//! [`ErrorCode::Unavailable`] (nothing was changed; repeat the call), a commit whose outcome the
//! adapter could not learn is [`ErrorCode::CommitUnknown`] (repeat the call: every call is
//! idempotent), and neither is ever reported as "not found" or as an answer.

use std::fmt;
use std::sync::Arc;

use idemdb_core::{Coded, Corrupt, ErrorCode, PolicyError, Refusal};

use crate::schema::SCHEMA_VERSION;

/// What kind of failure a [`DbError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The server could not be reached, went away, refused or timed out.
    Unreachable,
    /// A serialization failure or deadlock: the transaction was rolled back and may be repeated.
    Conflict,
    /// The schema is not what this build expects (a table or the schema is missing).
    Schema,
    /// Anything else the server or driver reported.
    Other,
}

/// A failure reported by the PostgreSQL driver, the pool or the server.
///
/// Cheap to clone. [`DbError::sqlstate`] gives the server's SQLSTATE when there is one.
#[derive(Clone)]
pub struct DbError {
    kind: Kind,
    sqlstate: Option<String>,
    source: Arc<dyn std::error::Error + Send + Sync>,
}

impl DbError {
    fn new(kind: Kind, sqlstate: Option<String>, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        DbError { kind, sqlstate, source: Arc::new(source) }
    }

    /// A failure the adapter itself detected (a call that did not finish in time).
    pub(crate) fn unreachable(message: impl Into<String>) -> Self {
        DbError::new(Kind::Unreachable, None, Message(message.into()))
    }

    /// The schema is not what this build expects (found by the adapter itself).
    pub(crate) fn schema(message: impl Into<String>) -> Self {
        DbError::new(Kind::Schema, None, Message(message.into()))
    }

    /// The server's SQLSTATE code (`40001`, `57P01`, ...), when the server reported the error.
    pub fn sqlstate(&self) -> Option<&str> {
        self.sqlstate.as_deref()
    }

    /// Whether the failure says the database could not be reached (connection refused or lost,
    /// server shutting down, pool exhausted, timed out).
    pub fn is_unreachable(&self) -> bool {
        self.kind == Kind::Unreachable
    }

    fn code(&self) -> ErrorCode {
        match self.kind {
            Kind::Unreachable => ErrorCode::Unavailable,
            Kind::Schema => ErrorCode::SchemaMismatch,
            Kind::Conflict | Kind::Other => ErrorCode::Storage,
        }
    }
}

impl fmt::Debug for DbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DbError").field("kind", &self.kind).field("sqlstate", &self.sqlstate).finish_non_exhaustive()
    }
}

impl fmt::Display for DbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.sqlstate {
            Some(state) => write!(f, "{} (SQLSTATE {state})", self.source),
            None => write!(f, "{}", self.source),
        }
    }
}

impl std::error::Error for DbError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

#[derive(Debug)]
struct Message(String);

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Message {}

/// SQLSTATE classes and codes that mean "the server is not there for us right now".
fn unreachable_state(code: &str) -> bool {
    code.starts_with("08") // connection exception
        || code.starts_with("53") // insufficient resources (too many connections, out of memory)
        || code.starts_with("57P") // admin shutdown, crash shutdown, cannot connect now
        || code == "57014" // statement timeout / query cancelled
        || code == "55P03" // lock not available
}

impl From<tokio_postgres::Error> for DbError {
    fn from(error: tokio_postgres::Error) -> Self {
        if let Some(db) = error.as_db_error() {
            let code = db.code().code().to_string();
            let kind = match code.as_str() {
                "40001" | "40P01" => Kind::Conflict,
                "42P01" | "3F000" => Kind::Schema,
                c if unreachable_state(c) => Kind::Unreachable,
                _ => Kind::Other,
            };
            return DbError::new(kind, Some(code), error);
        }
        let io = std::error::Error::source(&error).is_some_and(|source| source.is::<std::io::Error>());
        let kind = if error.is_closed() || io { Kind::Unreachable } else { Kind::Other };
        DbError::new(kind, None, error)
    }
}

impl From<deadpool_postgres::PoolError> for DbError {
    fn from(error: deadpool_postgres::PoolError) -> Self {
        match error {
            deadpool_postgres::PoolError::Backend(driver) => DbError::from(driver),
            // Timeouts (no connection free in time, or connecting took too long), a closed
            // pool, or a failed recycle: the database is not available to this caller now.
            other => DbError::new(Kind::Unreachable, None, other),
        }
    }
}

/// The schema version in the database is not the one this build uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaMismatch {
    schema: String,
    found: u32,
}

impl SchemaMismatch {
    pub(crate) fn new(schema: &str, found: u32) -> Self {
        SchemaMismatch { schema: schema.to_string(), found }
    }

    /// The version found (0: idemdb was never migrated into this schema).
    pub fn found(&self) -> u32 {
        self.found
    }

    /// The version this build uses.
    pub fn expected(&self) -> u32 {
        SCHEMA_VERSION
    }

    /// Whether the database was migrated by a newer version of idemdb (this build refuses to
    /// touch it).
    pub fn is_newer(&self) -> bool {
        self.found > SCHEMA_VERSION
    }
}

impl fmt::Display for SchemaMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let schema = &self.schema;
        match self.found {
            0 => write!(
                f,
                "schema `{schema}` has no idemdb tables; run the migrations (PgStore::migrate, or connect with migrations on)"
            ),
            found if found > SCHEMA_VERSION => write!(
                f,
                "schema `{schema}` is at version {found}, written by a newer version of idemdb (this build uses version {SCHEMA_VERSION})"
            ),
            found => write!(
                f,
                "schema `{schema}` is at version {found} and needs the migrations to version {SCHEMA_VERSION} (PgStore::migrate)"
            ),
        }
    }
}

/// Connecting to the database, checking or migrating its schema failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The connection URL or an option was rejected.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The schema name is one PostgreSQL reserves (`pg_catalog`, `information_schema`, any
    /// `pg_*`): idemdb's tables never go there.
    #[error("schema `{0}` is reserved by PostgreSQL; choose another (for example `idemdb`)")]
    ReservedSchema(String),
    /// A policy was invalid.
    #[error("invalid policy for operation {operation:?}: {source}")]
    Policy {
        /// The operation (`None` for the default policy).
        operation: Option<String>,
        /// What is wrong.
        #[source]
        source: PolicyError,
    },
    /// The database could not be reached (or refused the connection).
    #[error("database unavailable: {0}")]
    Unavailable(#[source] DbError),
    /// The schema version is not the one this build uses.
    #[error("{0}")]
    SchemaMismatch(SchemaMismatch),
    /// The database reported another error.
    #[error("database error: {0}")]
    Database(#[source] DbError),
    /// The metadata row is missing or malformed.
    #[error("idemdb metadata is corrupt: {0}")]
    CorruptMeta(String),
}

impl ConnectError {
    /// Classifies a driver error.
    pub(crate) fn from_driver(error: impl Into<DbError>) -> Self {
        let error = error.into();
        match error.kind {
            Kind::Unreachable => ConnectError::Unavailable(error),
            _ => ConnectError::Database(error),
        }
    }

    /// The stable code of this error (see [`ErrorCode`]).
    pub fn code(&self) -> ErrorCode {
        match self {
            ConnectError::Config(_) | ConnectError::ReservedSchema(_) => ErrorCode::InvalidArgument,
            ConnectError::Policy { .. } => ErrorCode::InvalidPolicy,
            ConnectError::Unavailable(_) => ErrorCode::Unavailable,
            ConnectError::SchemaMismatch(_) => ErrorCode::SchemaMismatch,
            ConnectError::Database(db) => db.code(),
            ConnectError::CorruptMeta(_) => ErrorCode::Corrupt,
        }
    }
}

/// An operation on a connected store failed. Nothing stored was changed unless the variant
/// says otherwise.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The database could not be reached, or the connection was lost before the transaction
    /// committed (the adapter checked: it was rolled back). Nothing was changed; repeat the call.
    #[error("database unavailable, nothing was changed: {0}")]
    Unavailable(#[source] DbError),
    /// The connection was lost while the transaction committed and the adapter could not learn
    /// whether it took effect. Repeat the call: every call is idempotent, so the repeat tells
    /// what was stored.
    #[error("commit outcome unknown, repeat the call: {0}")]
    CommitUnknown(#[source] DbError),
    /// The database reported an error (the transaction was rolled back).
    #[error("database error: {0}")]
    Database(#[source] DbError),
    /// A stored value did not decode (the core's [`Corrupt`], as on every backend).
    #[error(transparent)]
    Corrupt(#[from] Corrupt),
    /// The rules refused the operation (no record, a stale fence, a wrong state, an invalid
    /// key, an outbox, inbox or job rule, a row over the limits): the same [`Refusal`], with the
    /// same code, as on every backend. Nothing was changed (the transaction was rolled back).
    #[error(transparent)]
    Refused(Refusal),
    /// The record of the key changed under every attempt to decide on it (it was inserted and
    /// removed again between statements, repeatedly). Nothing was changed; repeat the call.
    #[error("the record kept changing under the decision; nothing was changed")]
    Contention,
}

idemdb_core::refused_from!(Error, Error::Refused);

impl Error {
    /// Classifies a driver error seen before any commit was attempted.
    pub(crate) fn from_driver(error: impl Into<DbError>) -> Self {
        let error = error.into();
        match error.kind {
            Kind::Unreachable => Error::Unavailable(error),
            _ => Error::Database(error),
        }
    }

    /// The stable code of this error (see [`ErrorCode`]).
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::Unavailable(_) => ErrorCode::Unavailable,
            Error::CommitUnknown(_) => ErrorCode::CommitUnknown,
            Error::Database(db) => db.code(),
            Error::Corrupt(corrupt) => corrupt.code(),
            Error::Refused(refusal) => refusal.code(),
            Error::Contention => ErrorCode::Storage,
        }
    }

    /// The rules' refusal, when the error is one ([`Error::Refused`]).
    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            Error::Refused(refusal) => Some(refusal),
            _ => None,
        }
    }

    /// Whether the server itself reported this error for a statement (a database error with a
    /// SQLSTATE that is not about reaching the server): the transaction was aborted.
    pub(crate) fn server_refused(&self) -> bool {
        matches!(self, Error::Database(db) if db.sqlstate.is_some() && db.kind != Kind::Unreachable)
    }

    /// Whether the call may be repeated at once by the adapter itself: nothing was committed
    /// and the failure was transient (connection lost or refused, serialization failure).
    pub(crate) fn retry_safe(&self) -> bool {
        match self {
            Error::Unavailable(_) | Error::Contention => true,
            Error::Database(db) => db.kind == Kind::Conflict,
            _ => false,
        }
    }
}

impl From<deadpool_postgres::PoolError> for Error {
    fn from(error: deadpool_postgres::PoolError) -> Self {
        Error::from_driver(error)
    }
}

impl From<tokio_postgres::Error> for Error {
    fn from(error: tokio_postgres::Error) -> Self {
        Error::from_driver(error)
    }
}

impl Coded for Error {
    fn code(&self) -> ErrorCode {
        Error::code(self)
    }
}

impl Coded for ConnectError {
    fn code(&self) -> ErrorCode {
        ConnectError::code(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_follow_the_kind() {
        let down = DbError::unreachable("timed out");
        assert_eq!(Error::from_driver(down.clone()).code(), ErrorCode::Unavailable);
        assert!(Error::from_driver(down.clone()).retry_safe());
        assert_eq!(Error::CommitUnknown(down.clone()).code(), ErrorCode::CommitUnknown);
        assert!(!Error::CommitUnknown(down.clone()).retry_safe());
        assert_eq!(ConnectError::from_driver(down).code(), ErrorCode::Unavailable);
        assert!(unreachable_state("57P01") && unreachable_state("08006") && !unreachable_state("23505"));
    }

    #[test]
    fn schema_mismatch_says_what_to_do() {
        assert!(SchemaMismatch::new("public", 0).to_string().contains("run the migrations"));
        let newer = SchemaMismatch::new("public", SCHEMA_VERSION + 1);
        assert!(newer.is_newer() && newer.to_string().contains("newer version"));
        assert_eq!(ConnectError::SchemaMismatch(newer).code(), ErrorCode::SchemaMismatch);
    }
}
