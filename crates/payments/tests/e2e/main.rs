//! End to end: the payments example started as a process on port 0, driven over real HTTP.

// The helpers of a test binary panic on what cannot happen in a passing test, as the tests
// themselves do (clippy's test allowance covers only `#[test]` functions).
#![allow(clippy::unwrap_used)]

mod payments;
mod readme;
mod support;
