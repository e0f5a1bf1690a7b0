//! The seed note's test list. Every test keeps an effect ledger (the payment provider, outside
//! the store) and asserts how many effects happened, not only what the store answered.

mod clock;
mod crashes;
mod durability;
mod expiry;
mod fencing;
mod isolation;
mod mismatch;
mod retries;
mod same_database;
mod uncertain;

use std::fs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use idemdb::redb::{ReadableTable, TableDefinition};
use idemdb::{
    Durability, Error, ExecuteError, Executed, ExpiredLease, Failure, Fingerprint, IdempotencyKey, Lease, ManualClock,
    OutcomeClass, Policy, Refusal, Reservation, Reserve, Resolution, Scope, ScopedKey, State, StateKind, Store,
    StoreBuilder, Timestamp, TransitionError, UncertainCause,
};
use idemdb_tests::{EffectLedger, T0, fp, key, scope, snapshot};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestRunner};
use tempfile::TempDir;

pub(super) const LEASE_MS: u64 = 10_000;
pub(super) const RESPONSE_MS: u64 = 100_000;
pub(super) const TOMBSTONE_MS: u64 = 1_000_000;
/// An operation whose effects are local, configured to take expired leases over.
pub(super) const LOCAL: &str = "local_ledger";
/// The default-policy operation: an external charge.
pub(super) const CHARGE: &str = "create_payment";

pub(super) fn policy() -> Policy {
    Policy::default()
        .with_lease_ttl(Duration::from_millis(LEASE_MS))
        .with_response_ttl(Duration::from_millis(RESPONSE_MS))
        .with_tombstone_ttl(Duration::from_millis(TOMBSTONE_MS))
}

pub(super) fn builder(clock: &ManualClock) -> StoreBuilder {
    Store::builder()
        .default_policy(policy())
        .policy(LOCAL, policy().with_expired_lease(ExpiredLease::Takeover))
        .clock(clock.clone())
}

/// A file store in a temporary directory, with a clock the test moves by hand.
pub(super) struct Fixture {
    dir: TempDir,
    path: PathBuf,
    clock: ManualClock,
    store: Option<Store>,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("payments.idemdb");
        let clock = ManualClock::new(T0);
        let store = builder(&clock).open(&path).expect("create store");
        Fixture { dir, path, clock, store: Some(store) }
    }

    fn store(&self) -> &Store {
        self.store.as_ref().expect("store is open")
    }

    /// The process goes away (the store is dropped without any further call) and starts again.
    fn restart(&mut self) {
        drop(self.store.take());
        self.store = Some(builder(&self.clock).open(&self.path).expect("reopen store"));
    }

    /// The bytes a crash at this instant would leave behind (every completed call's commit is
    /// in the file), opened as a store: redb runs its recovery on it.
    fn open_crash_image(&self, name: &str) -> Store {
        let copy = self.dir.path().join(name);
        fs::copy(&self.path, &copy).expect("copy the live file");
        copy_journal(&self.path, &copy);
        builder(&self.clock).open(&copy).expect("open the crash image")
    }

    fn advance(&self, ms: u64) {
        self.clock.advance(Duration::from_millis(ms));
    }
}

/// A crash leaves the journal beside the store file too: the copy gets it.
pub(super) fn copy_journal(from: &std::path::Path, to: &std::path::Path) {
    let journal = |path: &std::path::Path| {
        let mut name = path.as_os_str().to_os_string();
        name.push("-journal");
        std::path::PathBuf::from(name)
    };
    if journal(from).exists() {
        fs::copy(journal(from), journal(to)).expect("copy the live journal");
    }
}

pub(super) fn acquired(reservation: Reservation) -> Lease {
    match reservation {
        Reservation::Acquired(lease) => lease,
        other => panic!("expected a lease, got {other:?}"),
    }
}

pub(super) fn refused<T: std::fmt::Debug>(result: Result<T, Error>) -> TransitionError {
    match result {
        Err(Error::Refused(Refusal::Transition(error))) => error,
        other => panic!("expected a refused transition, got {other:?}"),
    }
}

pub(super) fn charge_result(intent: &str, n: u32) -> Vec<u8> {
    // Not UTF-8 at the end, so a replay that went through a text conversion would differ.
    let mut body = format!("{{\"charge\":\"ch_{intent}_{n}\"}}").into_bytes();
    body.extend_from_slice(&[0xff, 0x00, 0xfe]);
    body
}

/// What a client saw for one delivery.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Delivery {
    /// This delivery held the lease, performed the charge and stored its result.
    Ran(Vec<u8>),
    /// The store answered without running anything.
    Answered(Reservation),
}

/// One delivery of an intent: reserve; with a lease, charge the provider once and store the
/// result.
pub(super) fn deliver(
    store: &Store,
    ledger: &EffectLedger,
    scope: &Scope,
    key: &IdempotencyKey,
    fingerprint: &Fingerprint,
    intent: &str,
) -> Delivery {
    match store.reserve(Reserve::new(scope, key, fingerprint)).expect("reserve") {
        Reservation::Acquired(lease) => {
            let n = ledger.perform(intent).ordinal;
            let result = charge_result(intent, n);
            store.complete(&lease, result.clone()).expect("complete");
            Delivery::Ran(result)
        }
        other => Delivery::Answered(other),
    }
}

/// The application's own tables and errors, for the same-database tests.
#[derive(Debug)]
pub(super) enum AppError {
    Store(Error),
    Declined,
}

impl std::fmt::Display for AppError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AppError::Store(error) => write!(f, "store: {error}"),
            AppError::Declined => f.write_str("declined"),
        }
    }
}

impl From<Error> for AppError {
    fn from(error: Error) -> Self {
        AppError::Store(error)
    }
}

pub(super) const ORDERS: TableDefinition<&str, u64> = TableDefinition::new("app_orders");
pub(super) const BALANCES: TableDefinition<&str, i64> = TableDefinition::new("app_balances");

pub(super) fn read_order(store: &Store, order: &str) -> Option<u64> {
    store
        .write(|txn| -> Result<_, Error> {
            let table = txn.tables_checkpointing().open_table(ORDERS)?;
            let value = table.get(order)?.map(|guard| guard.value());
            Ok(value)
        })
        .expect("read app table")
}

pub(super) fn read_balance(store: &Store, account: &str) -> i64 {
    store
        .write(|txn| -> Result<_, Error> {
            let table = txn.tables_checkpointing().open_table(BALANCES)?;
            let value = table.get(account)?.map(|guard| guard.value());
            Ok(value.unwrap_or(0))
        })
        .expect("read app table")
}
