//! Shared helpers for the integration suite.
