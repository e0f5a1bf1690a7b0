//! The payment provider: the world outside the store, where effects happen and are counted.
//!
//! It has no idempotency of its own: every call charges (unless the card is declined). Its
//! ledger is the one idemdb counts effects with everywhere ([`idemdb_fake_provider::EffectLedger`]):
//! it is both how the demo counts effects and how the server reconciles an uncertain attempt
//! (providers let a merchant look a payment up by its order reference).

use idemdb_fake_provider::EffectLedger;

/// What one call did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Charge {
    /// Money moved: the charge's id.
    Charged(String),
    /// The card was declined: nothing moved.
    Declined,
}

/// The provider and its ledger, with the demo's intents (numbers) as the ledger's names.
#[derive(Debug, Default)]
pub(crate) struct Provider {
    ledger: EffectLedger,
}

impl Provider {
    /// Charges the intent's card: the effect.
    pub(crate) fn charge(&self, intent: u64, card_ok: bool) -> Charge {
        if !card_ok {
            self.ledger.decline(&intent.to_string());
            return Charge::Declined;
        }
        Charge::Charged(self.ledger.perform(&intent.to_string()).id)
    }

    /// What happened to the intent so far, as a reconciliation query sees it.
    pub(crate) fn lookup(&self, intent: u64) -> Option<Charge> {
        let name = intent.to_string();
        if let Some(first) = self.ledger.first(&name) {
            return Some(Charge::Charged(first.id));
        }
        self.ledger.was_declined(&name).then_some(Charge::Declined)
    }

    /// The ids of the charges made for the intent, in order.
    pub(crate) fn charges_of(&self, intent: u64) -> Vec<String> {
        self.ledger.effects_of(&intent.to_string()).into_iter().map(|effect| effect.id).collect()
    }

    /// All charges made.
    pub(crate) fn effects(&self) -> u64 {
        self.ledger.total()
    }

    /// Charges beyond the first of each intent.
    pub(crate) fn duplicate_effects(&self) -> u64 {
        self.ledger.doubles()
    }

    /// Intents charged at least once.
    pub(crate) fn charged_intents(&self) -> u64 {
        self.ledger.intents()
    }
}
