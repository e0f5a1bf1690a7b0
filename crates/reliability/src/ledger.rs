//! The effect ledger: a remote provider (a payment service) that lives outside the store and
//! counts every effect by intent. Crashes of the store's machine never touch it. Tests count
//! effects here, not only the answers the store gave.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// The provider. Each effect gets a distinct result body (`ch:<intent>:<n>`), so a replay of the
/// wrong attempt's result is visible too.
#[derive(Debug, Default)]
pub struct Provider {
    effects: Mutex<BTreeMap<String, Vec<Vec<u8>>>>,
}

impl Provider {
    /// A provider that has seen nothing.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Vec<Vec<u8>>>> {
        self.effects.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Performs the effect of `intent` and returns its result body.
    pub fn charge(&self, intent: &str) -> Vec<u8> {
        let mut effects = self.lock();
        let list = effects.entry(intent.to_string()).or_default();
        let mut body = format!("ch:{intent}:{}", list.len() + 1).into_bytes();
        // Not UTF-8 at the end, so a replay that went through a text conversion would differ.
        body.extend_from_slice(&[0xff, 0x00]);
        list.push(body.clone());
        body
    }

    /// What a reconciliation job learns when it asks the provider about `intent`: the result of
    /// its first effect, if any.
    pub fn lookup(&self, intent: &str) -> Option<Vec<u8>> {
        self.lock().get(intent).and_then(|list| list.first().cloned())
    }

    /// Effects performed for `intent`.
    pub fn count(&self, intent: &str) -> usize {
        self.lock().get(intent).map_or(0, Vec::len)
    }

    /// Effects beyond the first, summed over every intent (must be 0).
    pub fn doubles(&self) -> u64 {
        self.lock().values().map(|list| list.len().saturating_sub(1) as u64).sum()
    }

    /// Effects performed in total.
    pub fn total(&self) -> u64 {
        self.lock().values().map(|list| list.len() as u64).sum()
    }
}
