//! Clocks: where a backend reads `now` when it does not take time from its database.
//!
//! The core reads no clock: every decision takes its times as arguments. The embedded store
//! reads a [`Clock`] (wall and monotonic readings) and derives store and retention time from it
//! (its clock guard); the PostgreSQL adapter reads the database's clock by default and takes a
//! [`Clock`] only when one is injected (tests, simulations). Both backends share these types.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use idemdb_core::Timestamp;

/// A source of time: the wall clock, in milliseconds since the Unix epoch, and optionally a
/// monotonic clock.
///
/// The store never trusts the wall clock to be right. Inside one open store it measures
/// elapsed time with [`Clock::monotonic`], so a wall-clock jump, forward or back, neither
/// stops nor speeds up store time, and a jump is never taken as time that passed until the
/// wall clock has kept it for ten minutes of monotonic time (see `docs/design.md`, "Time").
pub trait Clock: Send + Sync + 'static {
    /// The wall clock.
    fn now(&self) -> Timestamp;

    /// A monotonic clock: time elapsed since an arbitrary origin fixed for the clock's
    /// lifetime, never going backwards, unaffected by changes to the wall clock. `None` (the
    /// default) when the platform has none; the store then measures elapsed time with the
    /// wall clock, so a forward jump of the wall clock inside an open store counts as time
    /// that passed once it has been kept for the confirmation period.
    fn monotonic(&self) -> Option<Duration> {
        None
    }
}

/// The operating system's wall clock, and [`std::time::Instant`] as the monotonic clock.
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

    fn monotonic(&self) -> Option<Duration> {
        static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        Some(ORIGIN.get_or_init(std::time::Instant::now).elapsed())
    }
}

/// A clock moved by hand, for tests and simulations. Clones share the same time.
///
/// It keeps a wall clock and a monotonic clock apart, so a test can make time pass
/// ([`ManualClock::advance`] moves both) or make the wall clock jump without any time passing
/// ([`ManualClock::set_wall`]).
///
/// ```
/// use std::time::Duration;
/// use idemdb_interface::{Clock, ManualClock};
/// let clock = ManualClock::new(1_000);
/// clock.advance(Duration::from_secs(1));
/// assert_eq!(clock.now().as_millis(), 2_000);
/// clock.set_wall(1_000_000); // the wall clock jumps; no time passes
/// assert_eq!((clock.now().as_millis(), clock.monotonic()), (1_000_000, Some(Duration::from_secs(1))));
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<Mutex<ManualTime>>);

#[derive(Debug, Default)]
struct ManualTime {
    wall: u64,
    monotonic: u64,
    /// The latest wall-clock time that [`ManualClock::set`] or [`ManualClock::advance`] reached:
    /// the time that has passed, as opposed to where the wall clock was set.
    passed: u64,
}

impl ManualClock {
    /// A clock reading `millis` since the epoch (its monotonic reading starts at zero).
    pub fn new(millis: u64) -> Self {
        ManualClock(Arc::new(Mutex::new(ManualTime { wall: millis, monotonic: 0, passed: millis })))
    }

    fn with<T>(&self, f: impl FnOnce(&mut ManualTime) -> T) -> T {
        // Plain numbers: a panic elsewhere cannot leave them inconsistent.
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Sets the wall clock to `millis`. A time later than any that `set` or `advance` reached
    /// before means that the time in between passed (the monotonic clock moves by it); an
    /// earlier one is the wall clock set back (the monotonic clock stays).
    pub fn set(&self, millis: u64) {
        self.with(|time| {
            if millis > time.passed {
                time.monotonic = time.monotonic.saturating_add(millis - time.passed);
                time.passed = millis;
            }
            time.wall = millis;
        });
    }

    /// Moves time forward: the wall clock and the monotonic clock both advance by `by`.
    pub fn advance(&self, by: Duration) {
        let millis = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.with(|time| {
            time.wall = time.wall.saturating_add(millis);
            time.monotonic = time.monotonic.saturating_add(millis);
            time.passed = time.passed.saturating_add(millis);
        });
    }

    /// Sets the wall clock alone, forward or back: a wall-clock jump, no time passes.
    pub fn set_wall(&self, millis: u64) {
        self.with(|time| time.wall = millis);
    }

    /// Moves the monotonic clock alone: time passes while the wall clock stands still.
    pub fn advance_monotonic(&self, by: Duration) {
        let millis = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.with(|time| {
            time.monotonic = time.monotonic.saturating_add(millis);
            time.passed = time.passed.saturating_add(millis);
        });
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_millis(self.with(|time| time.wall))
    }

    fn monotonic(&self) -> Option<Duration> {
        Some(Duration::from_millis(self.with(|time| time.monotonic)))
    }
}
