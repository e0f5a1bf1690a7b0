//! The payment provider: the world outside the store, where effects happen and are counted.
//!
//! It has no idempotency of its own: every call charges (unless the card is declined). It
//! keeps a ledger per intent, which is both how the demo counts effects and how the server
//! reconciles an uncertain attempt (providers let a merchant look a payment up by its order
//! reference).

use std::collections::HashMap;

/// What one call did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Charge {
    /// Money moved: the charge's id.
    Charged(String),
    /// The card was declined: nothing moved.
    Declined,
}

/// The provider and its ledger.
#[derive(Debug, Default)]
pub(crate) struct Provider {
    /// Charges made per intent, in order.
    charges: HashMap<u64, Vec<String>>,
    /// Intents whose card was declined at least once.
    declined: HashMap<u64, u64>,
    next_id: u64,
}

impl Provider {
    /// Charges the intent's card: the effect.
    pub(crate) fn charge(&mut self, intent: u64, card_ok: bool) -> Charge {
        if !card_ok {
            *self.declined.entry(intent).or_default() += 1;
            return Charge::Declined;
        }
        self.next_id += 1;
        let id = format!("ch_{:06}", self.next_id);
        self.charges.entry(intent).or_default().push(id.clone());
        Charge::Charged(id)
    }

    /// What happened to the intent so far, as a reconciliation query sees it.
    pub(crate) fn lookup(&self, intent: u64) -> Option<Charge> {
        if let Some(first) = self.charges.get(&intent).and_then(|ids| ids.first()) {
            return Some(Charge::Charged(first.clone()));
        }
        self.declined.contains_key(&intent).then_some(Charge::Declined)
    }

    /// Charges made for the intent.
    pub(crate) fn charges_of(&self, intent: u64) -> &[String] {
        self.charges.get(&intent).map(Vec::as_slice).unwrap_or_default()
    }

    /// All charges made.
    pub(crate) fn effects(&self) -> u64 {
        self.charges.values().map(|ids| ids.len() as u64).sum()
    }

    /// Charges beyond the first of each intent.
    pub(crate) fn duplicate_effects(&self) -> u64 {
        self.charges.values().map(|ids| ids.len().saturating_sub(1) as u64).sum()
    }

    /// Intents charged at least once.
    pub(crate) fn charged_intents(&self) -> u64 {
        self.charges.values().filter(|ids| !ids.is_empty()).count() as u64
    }
}
