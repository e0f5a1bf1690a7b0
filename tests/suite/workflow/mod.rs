//! The workflow primitives end to end on the redb store: the outbox with a provider that keeps
//! keys for a window, the seed note's `order-842:authorize-v1` story, the webhook inbox and
//! queue jobs. Effects are counted at the provider or in an effect ledger.

mod inbox;
mod jobs;
mod outbox;

use std::time::Duration;

use idemdb::{ManualClock, Policy, Store};

/// Milliseconds of the tests' clock at the start.
pub(super) const T0: u64 = 1_700_000_000_000;
/// The provider's key-retention window in these tests.
pub(super) const WINDOW_MS: u64 = 3_600_000;
/// The lease TTL in these tests.
pub(super) const LEASE_MS: u64 = 10_000;

pub(super) fn policy() -> Policy {
    Policy::default()
        .with_lease_ttl(Duration::from_millis(LEASE_MS))
        .with_provider_key_retention(Duration::from_millis(WINDOW_MS))
        .with_dispatch_backoff(Duration::from_secs(1), Duration::from_secs(60))
}

pub(super) fn store(clock: &ManualClock) -> Store {
    Store::builder().clock(clock.clone()).default_policy(policy()).in_memory().expect("open a memory store")
}
