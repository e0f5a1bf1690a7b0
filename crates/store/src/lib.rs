//! idemdb: an embedded idempotency-key engine on [redb](https://docs.rs/redb).
//!
//! An idempotency key names one intended mutation across unreliable deliveries. In one write
//! transaction the store reserves `(scope, key)` and binds it to the fingerprint of the
//! canonical request; it stores the result and replays it to true retries; it refuses a
//! reused key with a different request (mismatch), a duplicate that arrives while the first
//! is running (in progress), and a new effect while an earlier outcome is uncertain (needs
//! reconciliation). Tombstones outlive purged responses so a late retry never runs twice.
//!
//! ```
//! use idemdb::{Canonicalizer, Normaliser, Reservation, Reserve, Scope, Store};
//!
//! # let dir = tempfile::tempdir()?;
//! # let path = dir.path().join("payments.idemdb");
//! let store = Store::open(&path)?;
//! let scope = Scope::new("acme", "create_payment")?;
//! let canon = Canonicalizer::new().exclude("/trace_id")?.normalise("/currency", Normaliser::Uppercase)?;
//!
//! // The client made this key when the intent was created, and reuses it on every retry.
//! let key = Store::new_key()?;
//! let body = br#"{"amount":"10.50","currency":"brl","trace_id":"a1"}"#;
//! let fingerprint = canon.fingerprint(body)?;
//!
//! let mut charges = 0;
//! for _delivery in 0..3 {
//!     match store.reserve(Reserve::new(&scope, &key, &fingerprint))? {
//!         Reservation::Acquired(lease) => {
//!             charges += 1; // the effect
//!             store.complete(&lease, b"{\"charge\":\"ch_1\"}".to_vec())?;
//!         }
//!         Reservation::Replay { body, .. } => assert_eq!(body, b"{\"charge\":\"ch_1\"}"),
//!         other => panic!("unexpected {other:?}"),
//!     }
//! }
//! assert_eq!(charges, 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A live store is backed up with [`Store::backup_to`]: one verified file that opens alone,
//! holding every commit acknowledged before the call, written while writers carry on (never
//! copy the file of a live store: it lags its journal).
//!
//! The decision logic lives in [`idemdb_core`] (re-exported here) as pure functions; this
//! crate translates them into redb transactions. See `docs/design.md` for the state diagram,
//! the byte layout and the version history.
//!
//! # What this crate exports
//!
//! * The store's own names: [`Store`], [`StoreBuilder`], [`Txn`], its errors ([`Error`],
//!   [`OpenError`], [`StorageError`]), backup, rebuild, inspection and journal settings. What
//!   the rules refuse is not the store's own: it is [`Refusal`], the core's, carried by
//!   [`Error::Refused`] exactly as the PostgreSQL adapter's error carries it.
//! * The core's curated list, [`idemdb_core::prelude`], re-exported whole: the same names, the
//!   same items, as the PostgreSQL adapter (`idemdb-postgres`) offers, so code moves between
//!   the two by changing the crate name.
//! * The core itself as [`core`] for everything else (the pure decision
//!   functions, the codecs), the clocks, and [`redb`].
//!
//! A core name an adapter user needs is added to the prelude, never to one adapter's list.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod app_table;
mod audit;
mod audit_flush;
#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
mod backup;
#[cfg(all(test, not(target_arch = "wasm32")))]
mod backup_tests;
mod builder;
#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
mod business;
mod clock;
mod db;
mod durability;
mod engine;
mod error;
mod flush;
mod group;
#[cfg(test)]
mod group_tests;
mod inspect;
mod intents;
mod interface;
mod journal;
mod lockfile;
mod meta;
mod preflight;
mod purge;
mod rebuild;
// Row tables and the business write are left out of the WebAssembly build (its bindings do
// not expose them, and their redb table type would add to the `.wasm`).
#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
mod rows;
mod snapshot;
mod store;
mod tables;
#[cfg(test)]
mod test_support;
mod txn;
#[cfg(feature = "workflow")]
mod workflow;

pub use app_table::AppTable;
#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
pub use backup::{BackupError, BackupOptions, BackupProgress, BackupReport};
pub use builder::{DEFAULT_JOURNAL, StoreBuilder};
pub use durability::Durability;
pub use error::{Error, OpenError, StorageError};
#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
pub use idemdb_interface::SystemClock;
pub use idemdb_interface::{Clock, ManualClock};
pub use inspect::{ListFilter, ListedRecord, Listing, Problem, Stats, VerifyReport};
pub use intents::{IntentError, IntentPage, IntentPurge};
pub use interface::AsyncStore;
pub use journal::DEFAULT_JOURNAL_BYTES;
pub use journal::aside::{SetAside, SetAsideReason};
pub use journal::checkpoint::{CHECKPOINT_BYTES, CHECKPOINT_MS, CHECKPOINT_RECORDS};
pub use journal::commit::JournalStats;
pub use journal::report::JournalRecovery;
#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
pub use rebuild::rebuild;
#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
#[doc(hidden)]
pub use rebuild::rebuild_with_pause;
pub use rebuild::{RebuildError, RebuildReport};
pub use store::{ExecuteError, Executed, Store};
pub use tables::STORE_FORMAT;
pub use txn::Txn;
#[cfg(feature = "workflow")]
pub use workflow::EffectFilter;

/// The core itself, for what the prelude leaves out (`idemdb::core::decide`, the codecs).
pub use idemdb_core as core;
/// The core's names an adapter user needs: the one list both adapters re-export.
pub use idemdb_core::prelude::*;
/// Re-export of redb, whose `WriteTransaction` and tables the transaction API hands out.
pub use redb;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
