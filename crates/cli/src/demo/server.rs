//! The server: an in-process request handler over a store file. It can "crash": its store
//! handle is dropped mid-request and opened again from the file, as a restarted process would.

use std::path::{Path, PathBuf};
use std::time::Duration;

use idemdb::{
    Durability, Failure, Fingerprint, IdempotencyKey, Lease, ManualClock, Policy, Reservation, Reserve, Resolution,
    Scope, Store,
};

use crate::error::CliError;

/// The lease an attempt gets: short, in simulated time, so crashed attempts are found quickly.
pub(crate) const LEASE_TTL: Duration = Duration::from_secs(5);

/// A server process and its store handle.
pub(crate) struct Server {
    path: PathBuf,
    clock: ManualClock,
    durability: Durability,
    /// `None` only between a crash and the restart.
    store: Option<Store>,
    /// Times the handle was dropped and reopened.
    pub(crate) restarts: u64,
}

/// Why a transaction was deliberately not committed.
#[derive(Debug)]
struct Crash;

impl From<idemdb::Error> for Crash {
    fn from(_: idemdb::Error) -> Self {
        Crash
    }
}

impl Server {
    /// Starts a server over the store at `path` (created if missing).
    pub(crate) fn start(path: &Path, clock: &ManualClock, durability: Durability) -> Result<Server, CliError> {
        let store = open(path, clock, durability)?;
        Ok(Server { path: path.to_path_buf(), clock: clock.clone(), durability, store: Some(store), restarts: 0 })
    }

    /// The store file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The live store handle.
    pub(crate) fn store(&self) -> Result<&Store, CliError> {
        self.store.as_ref().ok_or_else(|| CliError::runtime_msg(Some(&self.path), "demo server: the store is not open"))
    }

    /// The process dies and restarts: the handle is dropped, whatever was in flight is lost,
    /// and the store is opened again from the file.
    pub(crate) fn crash(&mut self) -> Result<(), CliError> {
        // Open a new handle only after the old one is gone: a store is opened by one handle.
        drop(self.store.take());
        self.store = Some(open(&self.path, &self.clock, self.durability)?);
        self.restarts += 1;
        Ok(())
    }

    /// The process dies inside the reservation's write transaction, before its commit: the
    /// transaction is rolled back, then the store is reopened.
    pub(crate) fn crash_before_commit(
        &mut self,
        scope: &Scope,
        key: &IdempotencyKey,
        fp: &Fingerprint,
    ) -> Result<(), CliError> {
        let rolled_back = self.store()?.write(|txn| {
            txn.reserve(Reserve::new(scope, key, fp))?;
            Err::<(), Crash>(Crash)
        });
        debug_assert!(rolled_back.is_err());
        self.crash()
    }

    pub(crate) fn reserve(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fp: &Fingerprint,
    ) -> Result<Reservation, CliError> {
        self.store()?.reserve(Reserve::new(scope, key, fp)).map_err(|error| self.error("reserve", &error))
    }

    pub(crate) fn complete(&self, lease: &Lease, body: Vec<u8>) -> Result<(), CliError> {
        self.store()?.complete(lease, body).map_err(|error| self.error("complete", &error))
    }

    pub(crate) fn fail(&self, lease: &Lease, failure: Failure) -> Result<(), CliError> {
        self.store()?.fail(lease, failure).map_err(|error| self.error("fail", &error))
    }

    pub(crate) fn reconcile(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        resolution: Resolution,
    ) -> Result<(), CliError> {
        self.store()?
            .reconcile(scope, key, resolution, idemdb::ResolutionCause::Operator)
            .map_err(|error| self.error("reconcile", &error))
    }

    /// Makes every commit durable (for [`Durability::Eventual`]).
    pub(crate) fn flush(&self) -> Result<(), CliError> {
        self.store()?.flush().map_err(|error| self.error("flush", &error))
    }

    fn error(&self, action: &str, error: &idemdb::Error) -> CliError {
        CliError::runtime_ctx(&self.path, &format!("demo server: {action} failed"), error)
    }
}

fn open(path: &Path, clock: &ManualClock, durability: Durability) -> Result<Store, CliError> {
    Store::builder()
        .default_policy(Policy::default().with_lease_ttl(LEASE_TTL))
        .clock(clock.clone())
        .durability(durability)
        .open(path)
        .map_err(|error| CliError::open(path, &error))
}
