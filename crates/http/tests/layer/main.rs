//! The idempotency layer against mock handlers and the redb store: every row of the status
//! table, replays, the allow-list, limits, keys, tenants, panics and handler-owned commits.
//! Each test counts the handler's runs (its effects), not only the answers.

// The helpers of a test binary panic on what cannot happen in a passing test, as the tests
// themselves do (clippy's test allowance covers only `#[test]` functions).
#![allow(clippy::unwrap_used)]

mod admin;
mod cancel;
mod counted;
mod effects;
mod handler;
mod logs;
mod reconciler;
mod replay;
mod router;
mod statuses;
mod support;
