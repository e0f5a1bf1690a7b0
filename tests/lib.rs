//! Shared helpers for the integration suite: identities, fingerprints, store snapshots and the
//! effect ledger that stands for the outside world (a payment provider) and counts effects.

use idemdb::{Fingerprint, FingerprintBuilder, IdempotencyKey, ListFilter, Record, Scope, ScopedKey, Store};

/// A fixed starting time for [`idemdb::ManualClock`]: 2023-11-14T22:13:20Z.
pub const T0: u64 = 1_700_000_000_000;

/// A scope, panicking on invalid input (tests only pass valid parts here).
pub fn scope(tenant: &str, operation: &str) -> Scope {
    Scope::new(tenant, operation).expect("test scope is valid")
}

/// An idempotency key, panicking on invalid input.
pub fn key(text: &str) -> IdempotencyKey {
    IdempotencyKey::new(text).expect("test key is valid")
}

/// A fingerprint of a request named by `n` (distinct `n` give distinct fingerprints).
pub fn fp(n: u32) -> Fingerprint {
    FingerprintBuilder::new().str_field("test request").field(&n.to_be_bytes()).finish()
}

/// Every record of the store, in key order, read through [`Store::list`] in pages of five (so
/// the listing cursor is exercised too).
pub fn snapshot(store: &Store) -> Vec<(ScopedKey, Record)> {
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let mut filter = ListFilter::default();
        filter.limit = 5;
        filter.after = after.take();
        let page = store.list(&filter).expect("list records");
        out.extend(page.records.into_iter().map(|listed| (listed.scoped, listed.record)));
        match page.next_cursor {
            Some(cursor) => after = Some(cursor),
            None => return out,
        }
    }
}

/// The outside world: every effect performed, per intent (the one ledger of the demo, the
/// reliability report and these tests). A test asserts on its counts, not only on what the
/// store answered.
pub use idemdb_fake_provider::EffectLedger;
