//! End to end: the payments example started as a process on port 0, driven over real HTTP,
//! on redb and (when `IDEMDB_PG_URL` names a server) on PostgreSQL.

// The helpers of a test binary panic on what cannot happen in a passing test, as the tests
// themselves do (clippy's test allowance covers only `#[test]` functions).
#![allow(clippy::unwrap_used)]

mod admin_api;
mod backup;
mod edges;
mod headers;
mod metrics;
mod payments;
mod postgres;
mod promises;
mod readme;
mod retry_after;
mod support;
