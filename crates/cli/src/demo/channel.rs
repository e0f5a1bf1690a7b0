//! The unreliable channel between clients and the server: what goes wrong with one attempt.
//!
//! Every intent draws its fate up front from its own seeded generator, so the client that
//! reuses its key and the client that makes a new key per retry meet exactly the same faults,
//! attempt by attempt.

use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};

/// Most attempts a client makes before it gives up on an intent.
pub(crate) const MAX_ATTEMPTS: usize = 12;

/// What happens to one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Delivered both ways.
    None,
    /// The request never reaches the server.
    LoseRequest,
    /// The server dies inside the reservation's transaction, before it commits.
    CrashBeforeCommit,
    /// The server dies after the reservation committed, before calling the provider.
    CrashAfterReserve,
    /// The server dies after the provider charged, before the result is stored.
    CrashAfterEffect,
    /// The provider is slow: the client gives up waiting and retries while the attempt runs.
    Timeout,
    /// The server finishes, the response is lost on the way back.
    LoseResponse,
}

/// Per-attempt probabilities, in per mille.
const FAULTS: [(Fault, u32); 6] = [
    (Fault::LoseRequest, 80),
    (Fault::LoseResponse, 80),
    (Fault::Timeout, 50),
    (Fault::CrashBeforeCommit, 10),
    (Fault::CrashAfterReserve, 10),
    (Fault::CrashAfterEffect, 20),
];

/// One payment intent and everything the channel will do to it.
#[derive(Debug, Clone)]
pub(crate) struct Intent {
    pub(crate) id: u64,
    pub(crate) tenant: String,
    pub(crate) amount_cents: u64,
    /// The provider declines this card.
    pub(crate) card_ok: bool,
    /// The user double-clicks: a second send arrives while the first is running.
    pub(crate) double_submit: bool,
    /// After its answer, the client wrongly sends the same key with a different amount.
    pub(crate) reuses_key: bool,
    /// The fault of each attempt.
    pub(crate) faults: [Fault; MAX_ATTEMPTS],
}

impl Intent {
    /// Intent number `id` of the run with `seed`.
    pub(crate) fn draw(seed: u64, id: u64, tenants: u64) -> Intent {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut faults = [Fault::None; MAX_ATTEMPTS];
        for fault in &mut faults {
            let mut roll = rng.random_range(0..1_000u32);
            *fault = Fault::None;
            for (candidate, per_mille) in FAULTS {
                if roll < per_mille {
                    *fault = candidate;
                    break;
                }
                roll -= per_mille;
            }
        }
        Intent {
            id,
            tenant: format!("shop-{:02}", id % tenants.max(1) + 1),
            amount_cents: rng.random_range(100..100_000u64),
            card_ok: rng.random_range(0..1_000u32) >= 30,
            double_submit: rng.random_range(0..1_000u32) < 40,
            reuses_key: rng.random_range(0..1_000u32) < 20,
            faults,
        }
    }

    /// The request body of attempt `attempt`. Transport details differ between attempts (a
    /// fresh trace id, the amount and currency spelled differently); the canonical form and so
    /// the fingerprint do not. `edited` changes the amount: a different request.
    pub(crate) fn body(&self, attempt: usize, edited: bool) -> String {
        let cents = self.amount_cents + if edited { 100 } else { 0 };
        let (amount, currency) = if attempt.is_multiple_of(2) {
            (format!("{}.{:02}", cents / 100, cents % 100), "BRL")
        } else {
            (format!("{:03}.{:02}0", cents / 100, cents % 100), "brl")
        };
        format!(
            r#"{{"order":"order-{id}","amount":"{amount}","currency":"{currency}","trace_id":"t-{id}-{attempt}"}}"#,
            id = self.id
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_reproducible_and_varied() {
        let a = Intent::draw(7, 3, 20);
        let b = Intent::draw(7, 3, 20);
        assert_eq!((a.amount_cents, a.faults), (b.amount_cents, b.faults));
        let faults = (0..200).flat_map(|id| Intent::draw(7, id, 20).faults).filter(|f| *f != Fault::None).count();
        assert!(faults > 200 && faults < 1000, "about a quarter of attempts fail: {faults}");
    }
}
