//! WebAssembly bindings of [idemdb](../idemdb/index.html), built with wasm-bindgen.
//!
//! The npm package `idemdb` (in `bindings/npm`) wraps this crate's exports in an idiomatic
//! TypeScript API; use that rather than these raw bindings. Everything here adapts: the
//! engine (decisions, intents, the file format) is the `idemdb` crate, unchanged, so a store
//! written in a browser opens natively and the other way round.
//!
//! Backends ([`WasmStore`] constructors):
//! - memory (`openMemory`), optionally started from snapshot bytes;
//! - OPFS through a `FileSystemSyncAccessHandle` (`openOpfs`, dedicated workers), one
//!   `flush()` per durable commit;
//! - host callbacks (`openHost`): `read`/`write`/`size`/`truncate`/`flush`, used for a Node
//!   file descriptor and for an edge host's own storage.
//!
//! Keys and store secrets come from `crypto.getRandomValues`; time from `Date.now()`.
#![deny(missing_docs)]

mod backend;
mod convert;
mod js_backend;
mod random;
mod store;
mod types;
mod typescript;

pub use js_backend::HostStorage;
pub use store::{WasmLease, WasmStore, canonicalize, fingerprint, new_key};
