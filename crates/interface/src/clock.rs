//! Clocks: where a backend reads `now` when it does not take time from its database.
//!
//! The core reads no clock: every decision takes `now` as an argument. The embedded store reads
//! a [`Clock`] once per write transaction (and keeps the highest time it has seen); the
//! PostgreSQL adapter reads the database's clock by default and takes a [`Clock`] only when one
//! is injected (tests, simulations). Both backends share these types.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use idemdb_core::Timestamp;

/// A source of wall-clock time in milliseconds since the Unix epoch.
///
/// Backends never trust a clock to move forward: they keep the highest time they have seen and
/// never decide with an earlier one, so a clock that jumps backwards cannot revive an expired
/// lease or shorten a TTL.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> Timestamp;
}

/// The operating system's wall clock.
///
/// Not available on `wasm32-unknown-unknown`, where the host supplies time
/// (the WebAssembly bindings pass `Date.now()`).
#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or(Duration::ZERO);
        Timestamp::from_millis(u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX))
    }
}

/// A clock moved by hand, for tests and simulations. Clones share the same time.
///
/// ```
/// use std::time::Duration;
/// use idemdb_interface::{Clock, ManualClock};
/// let clock = ManualClock::new(1_000);
/// clock.advance(Duration::from_secs(1));
/// assert_eq!(clock.now().as_millis(), 2_000);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock reading `millis` since the epoch.
    pub fn new(millis: u64) -> Self {
        ManualClock(Arc::new(AtomicU64::new(millis)))
    }

    /// Sets the time (it may go backwards, to test how a backend copes).
    pub fn set(&self, millis: u64) {
        self.0.store(millis, Ordering::SeqCst);
    }

    /// Moves the time forward.
    pub fn advance(&self, by: Duration) {
        let millis = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        let _ = self.0.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| Some(now.saturating_add(millis)));
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_millis(self.0.load(Ordering::SeqCst))
    }
}
