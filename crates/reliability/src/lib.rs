//! The reliability harness of idemdb: proves "one effect per intent, no lost result" under
//! crashes, `kill -9`, races and bad input, with numbers.
//!
//! * [`fault`]: a redb storage backend that keeps the live and the durable image apart and
//!   fails, fails for good, or crashes at the N-th write / `set_len` / `sync_data`, leaving a
//!   random subset of unsynced writes, some torn at 512-byte boundaries;
//! * `idemdb_fake_provider::EffectLedger`: the remote provider whose effect counts are the ground truth;
//! * [`workload`]: scripts (remote effect, same-database write, uncertain outcomes with
//!   reconciliation, purge while traffic runs) and a client that retries after every crash;
//!   [`workload::Adapter`] also holds deliberately broken clients and disks, so tests can prove
//!   the harness reports them;
//! * [`sweep`]: every operation index of every workload × damage seeds, plus random points;
//! * [`concurrent`]: faults landing inside group commits shared by several client threads;
//! * [`clock_faults`]: wall-clock jumps forward and back, put right later, around deliveries,
//!   purges and reopens, checked in true time;
//! * [`kill`]: a child process on a file store, killed with SIGKILL at random moments;
//! * [`http_flow`]: the payments example served as a process, with clients hanging up at
//!   random points and the service killed with requests in flight; every key must reach a
//!   final answer without an operator;
//! * [`http_edges`]: the same service with a provider slower than the lease, duplicate
//!   requests sent at once while answers are lost, an operator's resolutions racing the
//!   dispatcher, and SIGTERM under load; every answer checked against the service's ledger;
//! * [`live_backup`]: backups taken by a writer process at random moments while it writes and
//!   is killed, each opened alone, verified and checked against what was acknowledged before it;
//! * [`races`]: threads racing on shared keys over file and memory stores;
//! * [`operators`]: the `idemdb` binary compacting, rebuilding, importing and purging a store
//!   while a writer process opens, writes and closes it in a loop, with `kill -9` on both sides;
//! * [`operator_sequences`]: seeded sequences of operator steps (`kill -9`, `mv`, `ln`, `cp` of
//!   a store and its journal, a new store at an old name, `recover [--discard-journal]`,
//!   `backup [--overwrite]`, `compact --rebuild`) beside a journaling writer, checked for lost
//!   acknowledged writes, foreign records, and refusals that are untyped or change data;
//! * [`batch_atomicity`]: calls that fail after writing, mixed into concurrent group commits,
//!   checked for partial writes (records, outbox items, audit events);
//! * [`audit_durability`]: a child deciding, resolving and replaying, killed with SIGKILL;
//!   decision and resolution events must all survive, lock-free ones within the core's bound;
//! * [`fuzzing`]: the bodies of the cargo-fuzz targets (in `fuzz/`), callable from tests so
//!   every crash found becomes a regression test.
//!
//! ```
//! use idemdb::Durability;
//! use idemdb_reliability::fault::{FaultKind, FaultPlan};
//! use idemdb_reliability::workload::{run, Injection, Scenario, Workload};
//!
//! let scenario = Scenario::new(Workload::Charge, Durability::Immediate);
//! let injection = Injection {
//!     plan: Some(FaultPlan { at: 40, kind: FaultKind::Crash }),
//!     damage_seed: 3,
//!     recovery_crashes: 1,
//! };
//! let counts = run(scenario, &injection);
//! assert!(counts.clean(), "{counts:?}");
//! assert_eq!((counts.lost, counts.double), (0, 0));
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod audit_durability;
pub mod batch_atomicity;
pub mod clock_faults;
pub mod concurrent;
pub mod fault;
pub mod fuzzing;
pub mod http_edges;
pub mod http_flow;
mod http_wire;
pub mod journal_aliases;
pub mod journal_damage;
pub mod journal_replace;
pub mod kill;
pub mod live_backup;
pub mod operator_sequences;
pub mod operators;
pub mod outbox;
pub mod races;
pub mod rng;
pub mod sweep;
pub mod workload;
