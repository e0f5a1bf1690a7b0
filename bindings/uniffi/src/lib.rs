//! Kotlin, Swift and Python bindings of the embedded idemdb store, through
//! [UniFFI](https://mozilla.github.io/uniffi-rs/) (proc-macro interface): what an Android, iOS
//! or desktop app needs, and nothing that only a server needs.
//!
//! - [`IdemStore`]: open a file (or memory, for tests), with policies ([`StoreOptions`]),
//!   close; client intents (create before the first send, record attempts and the response,
//!   pending list for resume, needs attention, abandon); reserve / complete / fail / renew /
//!   replay for apps that apply their own queued commands; the way out for keys nobody will
//!   finish (records needing reconciliation, reconcile, a lost journal given up by choice).
//!   Every store call has a blocking form and an `_async` form (`suspend` / `async`) that runs
//!   on a thread pool; once started, an async call runs to its end and delivers its result
//!   even if its caller is cancelled (the generated Kotlin and Python get that from this
//!   crate's `uniffi-bindgen`, see `src/bin/uniffi-bindgen/patch.rs`).
//! - [`Canonicalizer`]: the core's canonical form and fingerprint; [`new_key`] makes keys.
//! - [`IdemdbError`]: one typed exception per stable error code (`IDEMDB_...`).
//!
//! The Rust side of a call, as Kotlin or Swift sees it:
//!
//! ```
//! use idemdb_uniffi::{Canonicalizer, IdemStore, Reservation, Scope, new_key};
//!
//! let store = IdemStore::in_memory()?;
//! let scope = Scope { tenant: "me".into(), operation: "create_payment".into() };
//! let canon = Canonicalizer::new(vec!["/trace_id".into()], vec![], None)?;
//! let fingerprint = canon.fingerprint(br#"{"amount":"10.50","trace_id":"t1"}"#.to_vec())?;
//! let key = new_key()?;
//! let Reservation::Acquired { lease } = store.reserve(scope.clone(), key.clone(), fingerprint.clone())? else {
//!     panic!("a new key is acquired")
//! };
//! store.complete(lease, b"ch_1".to_vec())?;
//! let again = store.reserve(scope, key, fingerprint)?;
//! assert_eq!(again, Reservation::Replay { outcome: "completed".into(), body: b"ch_1".to_vec() });
//! # Ok::<(), idemdb_uniffi::IdemdbError>(())
//! ```

mod canon;
mod error;
mod options;
mod recovery;
mod store;
#[cfg(test)]
mod tests;
mod types;

pub use canon::{Canonicalizer, FieldNormaliser, Normaliser, error_codes, fingerprint_of_canonical, new_key};
pub use error::IdemdbError;
pub use options::{PolicySettings, StoreOptions};
pub use recovery::{JournalRecovery, JournalSetAside, Resolution, ScopedRecord};
pub use store::{IdemStore, open_store_async, open_store_with_async};
pub use types::{AttemptOutcome, Failure, Header, Intent, IntentResponse, Lease, RecordInfo, Reservation, Scope};

uniffi::setup_scaffolding!();
