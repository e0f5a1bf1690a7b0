//! Shared helpers for the integration suite: identities, fingerprints, store snapshots and an
//! effect ledger that stands for the outside world (a payment provider) and counts effects.

use std::collections::HashMap;
use std::sync::Mutex;

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

/// The outside world: every effect performed, per intent. A test asserts on these counts, not
/// only on what the store answered.
#[derive(Debug, Default)]
pub struct EffectLedger {
    effects: Mutex<HashMap<String, u32>>,
}

impl EffectLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    /// Performs the effect of `intent` (a charge) and returns how many times it has now been
    /// performed.
    pub fn perform(&self, intent: &str) -> u32 {
        let mut effects = self.effects.lock().expect("ledger lock");
        let count = effects.entry(intent.to_string()).or_insert(0);
        *count += 1;
        *count
    }

    /// How many times `intent` was performed.
    pub fn count(&self, intent: &str) -> u32 {
        self.effects.lock().expect("ledger lock").get(intent).copied().unwrap_or(0)
    }

    /// All effects performed, over every intent.
    pub fn total(&self) -> u32 {
        self.effects.lock().expect("ledger lock").values().sum()
    }

    /// Intents performed more than once (must stay empty).
    pub fn duplicates(&self) -> Vec<(String, u32)> {
        let effects = self.effects.lock().expect("ledger lock");
        let mut out: Vec<_> = effects.iter().filter(|(_, n)| **n > 1).map(|(k, n)| (k.clone(), *n)).collect();
        out.sort();
        out
    }
}
