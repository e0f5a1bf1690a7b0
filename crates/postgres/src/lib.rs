//! idemdb on PostgreSQL: the same idempotency engine as the embedded store, for a service that
//! runs as many instances behind a load balancer and shares one database.
//!
//! ```no_run
//! use idemdb_postgres::{Fingerprint, PgStore, Reservation, Scope};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! // Connects, checks the schema version (applying migrations on first use) and reads the
//! // audit secret the first migration made in the database.
//! let store = PgStore::connect("postgresql://app@127.0.0.1/payments").await?;
//! let scope = Scope::new("acme", "create_payment")?;
//! let key = idemdb_postgres::IdempotencyKey::new("order-842:authorize-v1")?;
//! let fingerprint = Fingerprint::from_bytes([1; 32]);
//!
//! let mut charges = 0;
//! for _delivery in 0..3 {
//!     match store.reserve(&scope, &key, &fingerprint, None).await? {
//!         Reservation::Acquired(lease) => {
//!             charges += 1; // the effect
//!             store.complete(&lease, br#"{"charge":"ch_1"}"#.to_vec()).await?;
//!         }
//!         Reservation::Replay { body, .. } => assert_eq!(body, br#"{"charge":"ch_1"}"#),
//!         other => panic!("unexpected {other:?}"),
//!     }
//! }
//! assert_eq!(charges, 1);
//! # Ok(()) }
//! ```
//!
//! This example needs a server, so it is compiled, not run, here; the test suite runs the same
//! steps against a real server (`tests/postgres/basics.rs`, `crate_docs_example`).
//!
//! # One engine, two storages
//!
//! The decisions are the core's pure functions ([`decide`](idemdb_core::decide), the
//! transitions, [`Record::retention`](idemdb_core::Record::retention)); records are stored as
//! the core encodes them ([`encode_record`](idemdb_core::encode_record): a version byte and
//! bincode), in one `bytea` column beside the indexed columns PostgreSQL needs (`state`,
//! `due_at`). There is no second copy of the rules in SQL: the adapter only translates —
//! lock the row, decide, write, commit. The shared decision table
//! (`idemdb_interface::conformance`) passes on this adapter exactly as on the embedded store.
//!
//! * **One transaction per decision**, `READ COMMITTED`: `SELECT … FOR UPDATE` on the record's
//!   row, or `INSERT … ON CONFLICT DO NOTHING` when there is none (a lost race reads the winner's
//!   row and decides again). Answers that change nothing (replay, in progress, mismatch,
//!   expired, uncertain) come from one lock-free read.
//! * **Identity**: primary key `(tenant, operation, key)`, `COLLATE "C"` (byte equality).
//! * **Time from the database**: `clock_timestamp()` read once per decision, in the statement
//!   that follows the row lock, so instances whose clocks differ agree on every lease and TTL
//!   ([`TimeSource`]).
//! * **Fences** come from the record, the database time and a fence floor kept in the database
//!   (raised when retention removes a record), so they grow across instances.
//! * **Audit trail** with keyed hashes: the 32-byte secret is made by the first migration from
//!   the server's random source and kept in `idemdb_meta`; every instance hashes alike.
//! * **Migrations** are versioned and applied at connect (or by [`PgStoreBuilder::migrate`]);
//!   the version is checked at every connect ([`ConnectError::SchemaMismatch`]).
//! * **The application's rows and the completion in one transaction**: [`PgStore::begin`]
//!   gives a [`PgTxn`] whose [`client`](PgTxn::client) runs the application's statements inside
//!   the transaction that also completes the record.
//! * **Failures are typed**: an unreachable database is [`ErrorCode::Unavailable`] (nothing
//!   changed); a connection lost during `COMMIT` is resolved by asking the database about the
//!   transaction id (`txid_status`), and only when it cannot be asked is the call
//!   [`ErrorCode::CommitUnknown`]. Neither is ever a "not found" or an answer. Calls that failed
//!   before anything committed are retried a few times by the adapter.
//!
//! Not here yet: the workflow primitives (`idemdb_interface::WorkflowStore`: outbox,
//! reconciliation queue, webhook inbox, jobs). The embedded store implements them; this adapter
//! does not, so code that needs them runs on the embedded store only for now.
//!
//! # Why tokio-postgres and deadpool
//!
//! The adapter needs a handful of fixed statements, pipelining (the row lock and the time read
//! go out in one round trip), prepared-statement caching and a pool — no query builder, no
//! compile-time checked SQL, no migrations framework. `tokio-postgres` with `deadpool-postgres`
//! gives exactly that and compiles far lighter than `sqlx` (no macros that connect at build
//! time, no per-database feature matrix), which matters on small CI machines. Both are widely
//! used and maintained. TLS is the caller's choice of connector
//! ([`PgStoreBuilder::connect_with_tls`]); the adapter compiles no TLS stack itself.
//!
//! # Runtime
//!
//! The adapter runs on Tokio (the driver runs each connection as a task): call it from inside a
//! Tokio runtime.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod audit;
mod builder;
mod error;
mod import;
mod interface;
mod outcome;
mod purge;
mod schema;
mod store;
mod time;
mod txn;

pub use builder::{DEFAULT_AUDIT_RETENTION, PgStoreBuilder};
pub use error::{ConnectError, DbError, Error, SchemaMismatch};
pub use import::ImportReport;
pub use schema::SCHEMA_VERSION;
pub use store::PgStore;
pub use time::TimeSource;
pub use txn::PgTxn;

pub use idemdb_core::{
    AuditEvent, AuditKind, Coded, ErrorCode, ExpiredLease, Failure, Fingerprint, IdempotencyKey, KeyHash, Lease,
    OutcomeClass, Policy, PurgeReport, Record, Reservation, Resolution, Scope, ScopedKey, State, StateKind, Timestamp,
    TransitionError,
};
pub use idemdb_interface::{Clock, IdempotencyStore, ManualClock, SystemClock};
/// Re-export of the driver, whose `Client` the transaction API hands out.
pub use tokio_postgres;
