//! What the compare harness's counting backend (`benches/compare/backend.rs`) takes from its
//! `data` module.

/// A result whose error crosses threads.
pub(crate) type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;
