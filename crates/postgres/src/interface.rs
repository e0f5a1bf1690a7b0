//! The PostgreSQL adapter behind the async store interface ([`IdempotencyStore`]): each method
//! is the inherent method of the same name.

use std::future::Future;

use idemdb_core::{
    Failure, Fingerprint, IdempotencyKey, KeyHash, Lease, Policy, PurgeReport, Record, Reservation, Resolution, Scope,
};
use idemdb_interface::IdempotencyStore;

use crate::{Error, PgStore};

impl IdempotencyStore for PgStore {
    type Error = Error;

    fn policy(&self, operation: &str) -> &Policy {
        PgStore::policy(self, operation)
    }

    fn key_hash(&self, scope: &Scope, key: &IdempotencyKey) -> KeyHash {
        PgStore::key_hash(self, scope, key)
    }

    fn reserve(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        correlation: Option<&str>,
    ) -> impl Future<Output = Result<Reservation, Error>> + Send {
        PgStore::reserve(self, scope, key, fingerprint, correlation)
    }

    fn complete(&self, lease: &Lease, result: Vec<u8>) -> impl Future<Output = Result<(), Error>> + Send {
        PgStore::complete(self, lease, result)
    }

    fn fail(&self, lease: &Lease, failure: Failure) -> impl Future<Output = Result<(), Error>> + Send {
        PgStore::fail(self, lease, failure)
    }

    fn renew(&self, lease: &Lease) -> impl Future<Output = Result<Lease, Error>> + Send {
        PgStore::renew(self, lease)
    }

    fn reconcile(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        resolution: Resolution,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        PgStore::reconcile(self, scope, key, resolution)
    }

    fn get(&self, scope: &Scope, key: &IdempotencyKey) -> impl Future<Output = Result<Option<Record>, Error>> + Send {
        PgStore::get(self, scope, key)
    }

    fn purge_expired(&self, budget: usize) -> impl Future<Output = Result<PurgeReport, Error>> + Send {
        PgStore::purge_expired(self, budget)
    }
}
