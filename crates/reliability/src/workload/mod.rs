//! Workloads with an effect ledger outside the store, run on a [`Disk`](crate::fault::Disk) that can fail or crash at
//! any operation, by a client that behaves as a real one would.
//!
//! One *run* ([`run`]) creates a store on a fresh disk with a fault armed, plays the workload's
//! script, and whenever the machine dies: builds the power-cut image, reopens (possibly crashing
//! again while the store recovers), checks integrity, checks that every outcome the client saw
//! is still replayed, and retries every intent the client has not seen finished. It ends with a
//! last power cut and the same checks, then counts effects in the ledger.
//!
//! What is counted ([`Counts`]):
//! * **lost**: an outcome the client saw returned (with durable commits) that a later reserve
//!   does not replay byte for byte (or, after its response TTL, as expired);
//! * **double**: effects beyond the first for one intent, counted in the provider's ledger (or,
//!   for same-database writes, in the application's own table);
//! * **reopen failures**: a disk that no longer opens as a store;
//! * **integrity failures**: `Store::verify` reports a problem after a reopen, or an
//!   application write and its completion did not commit together.
//!
//! The module is cut by job: `scenario.rs` (what a run exercises: the script, the client, the
//! fault), `counts.rs` (what runs found) and `sim.rs` (one run: the client, its store on the
//! disk, power cuts and recovery).

mod counts;
mod scenario;
mod sim;

pub use counts::Counts;
pub use scenario::{Adapter, Injection, JOURNAL_BYTES, Scenario, T0, Workload, start_time};
pub use sim::{probe_ops, run};
