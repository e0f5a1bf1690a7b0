//! idemdb on PostgreSQL: the same idempotency engine as the embedded store, for a service that
//! runs as many instances behind a load balancer and shares one database.
//!
//! ```no_run
//! use idemdb_postgres::{Fingerprint, PgStore, Reservation, Reserve, Scope};
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
//!     match store.reserve(Reserve::new(&scope, &key, &fingerprint)).await? {
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
//! * **One statement for a new key**: `reserve` sends one autocommit
//!   `INSERT … ON CONFLICT DO NOTHING` of the new record with its audit event (a CTE), which
//!   also returns the record already there, if any: a new key and every answer that changes
//!   nothing (replay, in progress, mismatch, expired, uncertain) cost one round trip. The new
//!   record is decided at this host's monotonic clock corrected by the last reading of the
//!   database's clock; the statement inserts only if that time is within 250 ms of the
//!   database's clock and the fence above the floor.
//! * **One transaction per changing decision**, `READ COMMITTED`: `SELECT … FOR UPDATE` on the
//!   record's row, decide, write, commit (a lost race reads the winner's row and decides
//!   again).
//! * **One deadline per call** (`operation_timeout`, retries included): a round trip cut by it
//!   is cancelled on the server and its connection closed.
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
//!
//! # Workflow primitives (schema migration 2)
//!
//! [`PgStore`] implements [`WorkflowStore`] as the embedded store does: the outbox
//! ([`PgStore::enqueue_effect`], [`PgTxn::enqueue_effect`] in the application's own
//! transaction, [`PgStore::claim_effects`], [`PgStore::report_effect`], [`PgTxn::report_effect`]),
//! the reconciliation queue ([`PgStore::reconciliation_queue`]), the webhook inbox
//! ([`PgStore::accept_delivery`]) and queue jobs ([`PgStore::claim_job`] and its steps). The
//! rules are the core's ([`OutboxItem`], [`idemdb_core::accept`], [`idemdb_core::claim_job`]);
//! the values are stored as the core encodes them, and the workflow stories
//! (`idemdb_interface::conformance::run_workflow_stories`) pass here exactly as on redb.
//! Migration 2 adds the tables; a database at schema 1 is migrated at the next connect.
//!
//! | table | key | derived, indexed columns | value |
//! |---|---|---|---|
//! | `idemdb_outbox` | `(tenant, operation, key, effect)` | `state`, `due_at` (dispatchers), `forget_at` (retention), `reconcile_since` (the queue) | `item`: the core's encoded [`OutboxItem`] |
//! | `idemdb_deliveries` | `(source, delivery_id)` | `outcome`, `received_at`, `forget_at` | `delivery`: [`DeliveryRecord`] |
//! | `idemdb_objects` | `(source, object_id)` | `version`, `state` | `object`: [`ObjectRecord`] |
//! | `idemdb_jobs` | `(tenant, operation, job)` | `state`, `forget_at` | `record`: [`JobRecord`] |
//!
//! Dispatchers on many instances share the outbox: a claim takes due rows with
//! `FOR UPDATE SKIP LOCKED`, so each item is claimed by one of them at a time. An outbox
//! change locks the item's row, then the intent's record row, and moves the record along in
//! the same transaction; a delivery takes transaction-scoped advisory locks on its delivery id
//! and on its object; a job change one on the job. Retention removes finished items, old
//! deliveries and finished jobs through their `forget_at` indexes ([`PgStore::purge_expired`];
//! on a timer, in batches that skip rows others hold: [`PurgeTask`]).
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
//!
//! # What this crate exports
//!
//! * The adapter's own names: [`PgStore`], [`PgStoreBuilder`], [`PgTxn`], its errors
//!   ([`Error`], [`ConnectError`], [`DbError`], [`SchemaMismatch`]), the purge task, the
//!   outbox listener and the connection settings. What the rules refuse is not the adapter's
//!   own: it is [`Refusal`], the core's, carried by [`Error::Refused`] exactly as the embedded
//!   store's error carries it.
//! * The core's curated list, [`idemdb_core::prelude`], re-exported whole: the same names, the
//!   same items, as the embedded store's `idemdb` crate offers (`idemdb_postgres::Scope` is
//!   `idemdb::Scope`), so code moves between the two by changing the crate name.
//! * The core itself as [`core`] for everything else (the pure decision
//!   functions, the codecs), the storage traits and clocks of `idemdb-interface`, and the
//!   driver ([`tokio_postgres`]).
//!
//! A core name an adapter user needs is added to the prelude, never to one adapter's list.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod audit;
mod builder;
mod conn;
mod engine;
mod error;
mod import;
mod interface;
mod migrate;
mod outcome;
mod purge;
mod rows;
mod schema;
mod settings;
mod stmt;
mod store;
mod task;
mod time;
mod txn;
mod workflow;

pub use builder::PgStoreBuilder;
pub use error::{ConnectError, DbError, Error, SchemaMismatch};
pub use import::ImportReport;
pub use schema::SCHEMA_VERSION;
pub use settings::{ENVIRONMENT, connection_config, describe};
pub use store::PgStore;
pub use task::{DEFAULT_PURGE_BATCH, DEFAULT_PURGE_INTERVAL, PurgeHandle, PurgeRound, PurgeTask};
pub use time::TimeSource;
pub use txn::PgTxn;
pub use workflow::OutboxListener;

/// The core itself, for what the prelude leaves out (`idemdb_postgres::core::decide`, the codecs).
pub use idemdb_core as core;
/// The core's names an adapter user needs: the one list both adapters re-export.
pub use idemdb_core::prelude::*;
pub use idemdb_interface::{Clock, IdempotencyStore, ManualClock, SystemClock, WorkflowStore};
/// Re-export of the driver, whose `Client` the transaction API hands out.
pub use tokio_postgres;
