//! The world outside an idemdb store: where effects happen and are counted.
//!
//! idemdb exists to keep effects at one per intent, so its tests, its demo and its
//! reliability report count **effects**, not only answers. [`EffectLedger`] is that count:
//! every effect performed, per intent, with a distinct result each. [`Provider`] is a payment
//! provider built on it that, like real ones, keeps an idempotency key for a retention window
//! and answers a repeat inside it with the first effect — and performs a second effect for a
//! repeat after it, which is exactly what an outbox must never let happen.
//!
//! ```
//! use idemdb_fake_provider::{Provider, ProviderAnswer};
//! let provider = Provider::new(3_600_000); // keys kept for an hour
//! let first = provider.call("order-842:authorize-v1", 0);
//! assert!(matches!(first, ProviderAnswer::Performed { .. }));
//! // The response was lost; a retry with the same key inside the window replays it.
//! assert_eq!(provider.call("order-842:authorize-v1", 60_000), first.replayed());
//! assert_eq!(provider.ledger().count("order-842:authorize-v1"), 1);
//! // After the window the provider has forgotten the key: a repeat is a second charge.
//! provider.call("order-842:authorize-v1", 3_600_000);
//! assert_eq!(provider.ledger().doubles(), 1);
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// One effect performed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effect {
    /// Which effect of its intent this is (1 for the first).
    pub ordinal: u32,
    /// A ledger-wide id (`ch_000001`), as a provider's charge id.
    pub id: String,
    /// The effect's result body: `ch:<intent>:<ordinal>` followed by the bytes `ff 00`, so it
    /// is distinct per effect and a replay that went through a text conversion would differ.
    pub body: Vec<u8>,
}

#[derive(Debug, Default)]
struct Entries {
    effects: BTreeMap<String, Vec<Effect>>,
    declined: BTreeMap<String, u32>,
    issued: u64,
}

/// Every effect performed, per intent. Shared across threads (`&self` methods).
#[derive(Debug, Default)]
pub struct EffectLedger {
    entries: Mutex<Entries>,
}

impl EffectLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Entries> {
        // Only inserts and reads happen under this lock: a panic cannot leave it inconsistent.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Performs the effect of `intent` (a charge) and returns it.
    pub fn perform(&self, intent: &str) -> Effect {
        let mut entries = self.lock();
        entries.issued += 1;
        let id = format!("ch_{:06}", entries.issued);
        let list = entries.effects.entry(intent.to_string()).or_default();
        let ordinal = u32::try_from(list.len() + 1).unwrap_or(u32::MAX);
        let mut body = format!("ch:{intent}:{ordinal}").into_bytes();
        body.extend_from_slice(&[0xff, 0x00]);
        let effect = Effect { ordinal, id, body };
        list.push(effect.clone());
        effect
    }

    /// Records that `intent` was refused (a declined card): no effect.
    pub fn decline(&self, intent: &str) {
        *self.lock().declined.entry(intent.to_string()).or_default() += 1;
    }

    /// Whether `intent` was ever declined.
    pub fn was_declined(&self, intent: &str) -> bool {
        self.lock().declined.contains_key(intent)
    }

    /// The first effect of `intent`: what a reconciliation job learns when it asks.
    pub fn first(&self, intent: &str) -> Option<Effect> {
        self.lock().effects.get(intent).and_then(|list| list.first().cloned())
    }

    /// Every effect of `intent`, in order.
    pub fn effects_of(&self, intent: &str) -> Vec<Effect> {
        self.lock().effects.get(intent).cloned().unwrap_or_default()
    }

    /// Effects performed for `intent`.
    pub fn count(&self, intent: &str) -> usize {
        self.lock().effects.get(intent).map_or(0, Vec::len)
    }

    /// Effects performed in total.
    pub fn total(&self) -> u64 {
        self.lock().effects.values().map(|list| list.len() as u64).sum()
    }

    /// Effects beyond the first, summed over every intent (must be 0).
    pub fn doubles(&self) -> u64 {
        self.lock().effects.values().map(|list| list.len().saturating_sub(1) as u64).sum()
    }

    /// Intents performed more than once, with their counts (must be empty).
    pub fn duplicates(&self) -> Vec<(String, usize)> {
        self.lock().effects.iter().filter(|(_, list)| list.len() > 1).map(|(k, list)| (k.clone(), list.len())).collect()
    }

    /// Intents performed at least once.
    pub fn intents(&self) -> u64 {
        self.lock().effects.values().filter(|list| !list.is_empty()).count() as u64
    }
}

/// What [`Provider::call`] answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderAnswer {
    /// A new effect was performed.
    Performed {
        /// Its reference.
        reference: String,
        /// Its result body.
        body: Vec<u8>,
    },
    /// The key was seen inside the window: the first effect, replayed.
    Replayed {
        /// Its reference.
        reference: String,
        /// Its result body.
        body: Vec<u8>,
    },
}

impl ProviderAnswer {
    /// The reference either way.
    pub fn reference(&self) -> &str {
        match self {
            ProviderAnswer::Performed { reference, .. } | ProviderAnswer::Replayed { reference, .. } => reference,
        }
    }

    /// The result body either way.
    pub fn body(&self) -> &[u8] {
        match self {
            ProviderAnswer::Performed { body, .. } | ProviderAnswer::Replayed { body, .. } => body,
        }
    }

    /// The same answer as a replay.
    pub fn replayed(&self) -> ProviderAnswer {
        ProviderAnswer::Replayed { reference: self.reference().to_string(), body: self.body().to_vec() }
    }
}

/// A payment provider with idempotency keys kept for a retention window, effects counted per
/// key in its [`EffectLedger`]. Times are milliseconds on the caller's clock.
#[derive(Debug)]
pub struct Provider {
    retention_ms: u64,
    ledger: EffectLedger,
    /// First-seen time and effect of each key it still remembers.
    keys: Mutex<HashMap<String, (u64, Effect)>>,
}

impl Provider {
    /// A provider that keeps keys for `retention_ms`.
    pub fn new(retention_ms: u64) -> Self {
        Provider { retention_ms, ledger: EffectLedger::new(), keys: Mutex::new(HashMap::new()) }
    }

    /// Performs the effect of `key` at `now_ms`, or replays the first one while the key is
    /// remembered (`now_ms` before first-seen + retention).
    pub fn call(&self, key: &str, now_ms: u64) -> ProviderAnswer {
        let mut keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((seen, effect)) = keys.get(key)
            && now_ms < seen.saturating_add(self.retention_ms)
        {
            return ProviderAnswer::Replayed { reference: effect.id.clone(), body: effect.body.clone() };
        }
        let effect = self.ledger.perform(key);
        keys.insert(key.to_string(), (now_ms, effect.clone()));
        ProviderAnswer::Performed { reference: effect.id, body: effect.body }
    }

    /// What a state query says of `key` — by the merchant's reference, so it works after the
    /// key itself was forgotten: the first effect, if any.
    pub fn query(&self, key: &str) -> Option<Effect> {
        self.ledger.first(key)
    }

    /// The effects, per key.
    pub fn ledger(&self) -> &EffectLedger {
        &self.ledger
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ledger_counts_effects_and_doubles() {
        let ledger = EffectLedger::new();
        let a = ledger.perform("a");
        assert_eq!((a.ordinal, a.id.as_str()), (1, "ch_000001"));
        assert_eq!(a.body, b"ch:a:1\xff\x00");
        ledger.perform("b");
        assert_eq!(ledger.perform("a").ordinal, 2);
        ledger.decline("c");
        assert_eq!((ledger.total(), ledger.doubles(), ledger.intents()), (3, 1, 2));
        assert_eq!(ledger.duplicates(), [("a".to_string(), 2)]);
        assert!(ledger.was_declined("c") && !ledger.was_declined("a"));
        assert_eq!(ledger.first("a"), Some(a));
    }

    #[test]
    fn the_provider_replays_inside_its_window_only() {
        let provider = Provider::new(100);
        let first = provider.call("k", 10);
        assert_eq!(provider.call("k", 109), first.replayed());
        assert!(matches!(provider.call("k", 110), ProviderAnswer::Performed { .. }));
        assert_eq!(provider.ledger().count("k"), 2);
        assert_eq!(provider.query("k").map(|e| e.id), Some(first.reference().to_string()));
    }
}
