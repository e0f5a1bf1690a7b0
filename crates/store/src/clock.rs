//! The store's clock guard: store time and retention time from a [`Clock`]'s wall and
//! monotonic readings, so that a wall-clock jump alone never makes a known key unknown (see
//! `docs/design.md`, "Time"). The clocks themselves live in `idemdb-interface`.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use idemdb_core::{DecisionTime, Timestamp};

use crate::Clock;

/// Monotonic time the wall clock must keep a forward gap before the gap counts as time that
/// passed (for retention): ten minutes.
pub(crate) const CONFIRM_AFTER_MS: u64 = 10 * 60 * 1000;
/// How far the wall clock may stray from elapsed monotonic time and still be followed: one
/// second, plus one millisecond per second elapsed since the store was opened.
const TOLERANCE_MS: u64 = 1_000;
const TOLERANCE_DRIFT_DIVISOR: u64 = 1_000;
/// Most unconfirmed gaps kept apart (older ones are merged).
const MAX_GAPS: usize = 16;
/// Version byte of the `clock_pending` meta entry.
const PENDING_FORMAT: u8 = 1;
/// Retention time moved this far since it was last persisted makes the next write persist it.
const PERSIST_EVERY_MS: u64 = 1_000;

/// A forward gap of the wall clock not yet confirmed: `observed` is the monotonic time for
/// which the wall clock has kept it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Gap {
    pub(crate) gap: u64,
    pub(crate) observed: u64,
}

/// The clock state a store persists: retention time (meta `clock_high_water`) and the
/// unconfirmed gaps (meta `clock_pending`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ClockState {
    pub(crate) trusted: u64,
    pub(crate) pending: Vec<Gap>,
}

impl ClockState {
    /// `clock_pending`: a version byte, then per gap its size and observed time (ms, `u64` BE).
    pub(crate) fn encode_pending(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(1 + 16 * self.pending.len());
        out.push(PENDING_FORMAT);
        for gap in &self.pending {
            out.extend_from_slice(&gap.gap.to_be_bytes());
            out.extend_from_slice(&gap.observed.to_be_bytes());
        }
        out
    }

    /// Reads `clock_pending`. An entry that does not decode is dropped: forgetting unconfirmed
    /// gaps is safe (the wall clock is compared with retention time afresh).
    pub(crate) fn decode_pending(bytes: &[u8]) -> Vec<Gap> {
        let Some((&PENDING_FORMAT, body)) = bytes.split_first() else { return Vec::new() };
        if !body.len().is_multiple_of(16) {
            return Vec::new();
        }
        body.chunks_exact(16)
            .filter_map(|chunk| {
                let (gap, observed) = chunk.split_at(8);
                Some(Gap {
                    gap: u64::from_be_bytes(gap.try_into().ok()?),
                    observed: u64::from_be_bytes(observed.try_into().ok()?),
                })
            })
            .take(MAX_GAPS)
            .collect()
    }

    fn pending_total(&self) -> u64 {
        self.pending.iter().fold(0u64, |sum, gap| sum.saturating_add(gap.gap))
    }
}

/// Turns wall-clock and monotonic readings into store time and retention time.
///
/// * **Retention time** (`R`) advances with the monotonic clock from where the store was
///   opened, following the wall clock only while it stays within the tolerance of that; it
///   never goes backwards, and it is what the store persists.
/// * A wall clock ahead of `R` plus the gaps already pending is a new **gap**: time that
///   passed while the store was closed, or a jump. It counts for store time at once, and for
///   retention time once the wall clock has kept it for [`CONFIRM_AFTER_MS`] of monotonic
///   time (summed over every open of the store: the gaps are persisted).
/// * A wall clock behind that cancels the newest gaps by as much: it was put right, so they
///   were a jump and never count for retention.
/// * **Store time** (`S`) is `R` plus the pending gaps.
pub(crate) struct ClockGuard {
    clock: Arc<dyn Clock>,
    state: Mutex<GuardState>,
    /// `GuardState::cancelled`, readable without the lock (every lock-free answer asks);
    /// written only under it.
    cancelled: std::sync::atomic::AtomicBool,
}

struct GuardState {
    current: ClockState,
    /// Retention time and monotonic reading where this handle started measuring.
    anchor: Option<(u64, u64)>,
    last_monotonic: u64,
    persisted_trusted: u64,
    pending_changed: bool,
    /// Pending gaps were cancelled (the wall clock went back) since the state was last
    /// persisted: the store persists that at once, or a restart would forget that the gaps
    /// were a jump.
    cancelled: bool,
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl ClockGuard {
    /// A guard that starts measuring now (when the store is opened). With `trust_gap`, the
    /// forward gap the wall clock shows now (and any still pending) counts as time that passed
    /// at once.
    pub(crate) fn new(clock: Arc<dyn Clock>, persisted: ClockState, trust_gap: bool) -> Self {
        let guard = ClockGuard {
            clock,
            state: Mutex::new(GuardState {
                persisted_trusted: persisted.trusted,
                current: persisted,
                anchor: None,
                last_monotonic: 0,
                pending_changed: false,
                cancelled: false,
            }),
            cancelled: std::sync::atomic::AtomicBool::new(false),
        };
        guard.read();
        if trust_gap {
            guard.confirm_pending();
        }
        guard
    }

    /// Counts every pending gap as time that passed.
    fn confirm_pending(&self) {
        let mut state = self.lock();
        let pending = state.current.pending_total();
        if pending == 0 {
            return;
        }
        state.current.pending.clear();
        state.current.trusted = state.current.trusted.saturating_add(pending);
        state.anchor = state.anchor.map(|(trusted, monotonic)| (trusted.saturating_add(pending), monotonic));
        state.pending_changed = true;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GuardState> {
        // Plain numbers, updated together under the lock: a panic cannot leave them torn.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads the clocks: store time and retention time.
    pub(crate) fn read(&self) -> DecisionTime {
        let wall = self.clock.now().as_millis();
        let monotonic = self.clock.monotonic().map_or(wall, millis);
        let mut guard = self.lock();
        let state = &mut *guard;
        let (anchor_trusted, anchor_monotonic) = *state.anchor.get_or_insert_with(|| {
            // A store that never kept a time (new) starts at the wall clock.
            if state.current.trusted == 0 && state.current.pending.is_empty() {
                state.current.trusted = wall;
            }
            state.last_monotonic = monotonic;
            (state.current.trusted, monotonic)
        });
        let elapsed = monotonic.saturating_sub(anchor_monotonic);
        let projected = anchor_trusted.saturating_add(elapsed);
        let tolerance = TOLERANCE_MS.saturating_add(elapsed / TOLERANCE_DRIFT_DIVISOR);
        let observed = monotonic.saturating_sub(state.last_monotonic);
        state.last_monotonic = state.last_monotonic.max(monotonic);
        let expected = projected.saturating_add(state.current.pending_total());
        if wall > expected.saturating_add(tolerance) {
            state.current.pending.push(Gap { gap: wall - expected, observed: 0 });
            if state.current.pending.len() > MAX_GAPS {
                // Merge the two newest: the merged gap keeps the shorter observation.
                if let (Some(newest), Some(previous)) = (state.current.pending.pop(), state.current.pending.last_mut())
                {
                    previous.gap = previous.gap.saturating_add(newest.gap);
                    previous.observed = previous.observed.min(newest.observed);
                }
            }
            state.pending_changed = true;
        } else if wall.saturating_add(tolerance) < expected {
            let mut behind = expected - wall;
            while behind > 0 {
                let Some(newest) = state.current.pending.last_mut() else { break };
                let cancelled = newest.gap.min(behind);
                newest.gap -= cancelled;
                behind -= cancelled;
                if newest.gap == 0 {
                    state.current.pending.pop();
                }
                state.pending_changed = true;
                state.cancelled = true;
                self.cancelled.store(true, std::sync::atomic::Ordering::Release);
            }
        } else {
            let mut confirmed = 0u64;
            for gap in &mut state.current.pending {
                gap.observed = gap.observed.saturating_add(observed);
            }
            while state.current.pending.first().is_some_and(|gap| gap.observed >= CONFIRM_AFTER_MS) {
                confirmed = confirmed.saturating_add(state.current.pending.remove(0).gap);
                state.pending_changed = true;
            }
            if confirmed > 0 {
                state.anchor = Some((anchor_trusted.saturating_add(confirmed), anchor_monotonic));
            }
        }
        let pending = state.current.pending_total();
        let projected = state.anchor.map_or(projected, |(trusted, _)| trusted.saturating_add(elapsed));
        let followed = wall
            .saturating_sub(pending)
            .clamp(projected.saturating_sub(tolerance), projected.saturating_add(tolerance));
        let trusted = state.current.trusted.max(followed);
        state.current.trusted = trusted;
        DecisionTime::new(Timestamp::from_millis(trusted.saturating_add(pending)), Timestamp::from_millis(trusted))
    }

    /// The state to persist now, if it is due (or `force`): retention time moved on by a
    /// second since it was last persisted, or the gaps changed. Marks it persisted.
    pub(crate) fn take_due(&self, force: bool) -> Option<ClockState> {
        let mut state = self.lock();
        let due = force
            || state.pending_changed
            || state.current.trusted >= state.persisted_trusted.saturating_add(PERSIST_EVERY_MS);
        if !due {
            return None;
        }
        state.persisted_trusted = state.persisted_trusted.max(state.current.trusted);
        state.pending_changed = false;
        state.cancelled = false;
        self.cancelled.store(false, std::sync::atomic::Ordering::Release);
        Some(state.current.clone())
    }

    /// Whether pending gaps were cancelled since the state was last persisted.
    pub(crate) fn cancelled(&self) -> bool {
        self.cancelled.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether the state moved since it was last persisted.
    pub(crate) fn changed(&self) -> bool {
        let state = self.lock();
        state.pending_changed || state.current.trusted > state.persisted_trusted
    }

    /// The clock this guard reads (a backup's check reads the copy with it).
    #[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
    pub(crate) fn source(&self) -> Arc<dyn Clock> {
        Arc::clone(&self.clock)
    }

    /// The current state (for a rebuilt copy).
    pub(crate) fn snapshot(&self) -> ClockState {
        self.lock().current.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ManualClock;

    const T0: u64 = 1_700_000_000_000;
    const MINUTE: u64 = 60_000;
    const YEAR: u64 = 365 * 24 * 60 * MINUTE;

    fn guard(clock: &ManualClock, state: ClockState) -> ClockGuard {
        ClockGuard::new(Arc::new(clock.clone()), state, false)
    }

    fn read(guard: &ClockGuard) -> (u64, u64) {
        let at = guard.read();
        (at.now.as_millis(), at.retention.as_millis())
    }

    #[test]
    fn a_new_store_starts_at_the_wall_clock_and_follows_elapsed_time() {
        let clock = ManualClock::new(T0);
        let guard = guard(&clock, ClockState::default());
        assert_eq!(read(&guard), (T0, T0));
        clock.advance(Duration::from_millis(5 * MINUTE));
        assert_eq!(read(&guard), (T0 + 5 * MINUTE, T0 + 5 * MINUTE));
    }

    #[test]
    fn a_forward_jump_moves_store_time_but_not_retention_time_and_is_cancelled_when_put_right() {
        let clock = ManualClock::new(T0);
        let guard = guard(&clock, ClockState::default());
        read(&guard);
        clock.set_wall(T0 + YEAR);
        assert_eq!(read(&guard), (T0 + YEAR, T0));
        clock.advance(Duration::from_millis(MINUTE));
        assert_eq!(read(&guard), (T0 + YEAR + MINUTE, T0 + MINUTE));
        clock.set_wall(T0 + MINUTE);
        assert_eq!(read(&guard), (T0 + MINUTE, T0 + MINUTE), "the jump is cancelled");
        assert_eq!(guard.snapshot().pending, Vec::new());
    }

    #[test]
    fn a_gap_kept_for_the_confirmation_period_counts_for_retention() {
        let clock = ManualClock::new(T0);
        let guard = guard(&clock, ClockState { trusted: T0 - YEAR, pending: Vec::new() });
        assert_eq!(read(&guard), (T0, T0 - YEAR), "a year since the store last ran: unconfirmed");
        clock.advance(Duration::from_millis(CONFIRM_AFTER_MS - 1));
        assert_eq!(read(&guard).1, T0 - YEAR + CONFIRM_AFTER_MS - 1);
        clock.advance(Duration::from_millis(1));
        assert_eq!(read(&guard), (T0 + CONFIRM_AFTER_MS, T0 + CONFIRM_AFTER_MS), "confirmed");
    }

    #[test]
    fn a_trusted_open_counts_the_gap_at_once() {
        let clock = ManualClock::new(T0);
        let guard =
            ClockGuard::new(Arc::new(clock.clone()), ClockState { trusted: T0 - YEAR, pending: Vec::new() }, true);
        assert_eq!(read(&guard), (T0, T0));
        clock.set_wall(T0 + YEAR); // a jump after the open is not trusted
        assert_eq!(read(&guard), (T0 + YEAR, T0));
    }

    #[test]
    fn observation_of_a_gap_adds_up_across_opens() {
        let clock = ManualClock::new(T0);
        let mut state = ClockState { trusted: T0 - YEAR, pending: Vec::new() };
        for _ in 0..10 {
            let guard = guard(&clock, state.clone());
            read(&guard);
            clock.advance(Duration::from_millis(CONFIRM_AFTER_MS / 10));
            read(&guard);
            state = guard.take_due(true).expect("state");
        }
        let guard = guard(&clock, state);
        assert_eq!(read(&guard).1, T0 + CONFIRM_AFTER_MS, "ten opens of a tenth of the period each");
    }

    #[test]
    fn a_wall_clock_set_back_neither_stops_nor_reverses_time() {
        let clock = ManualClock::new(T0);
        let guard = guard(&clock, ClockState::default());
        read(&guard);
        clock.set_wall(T0 - YEAR);
        clock.advance(Duration::from_millis(10 * MINUTE));
        let (now, retention) = read(&guard);
        assert!(now >= T0 + 10 * MINUTE - 2 * TOLERANCE_MS && now == retention, "{now}");
        clock.set_wall(T0 + 10 * MINUTE);
        assert_eq!(read(&guard), (T0 + 10 * MINUTE, T0 + 10 * MINUTE));
    }

    #[test]
    fn retention_time_never_runs_ahead_of_elapsed_time_by_more_than_the_tolerance() {
        let clock = ManualClock::new(T0);
        let guard = guard(&clock, ClockState::default());
        read(&guard);
        for step in 1..=100u64 {
            clock.advance_monotonic(Duration::from_millis(MINUTE));
            clock.set_wall(T0 + step * MINUTE + 999); // the wall creeps ahead, within tolerance
            let (_, retention) = read(&guard);
            let tolerance = TOLERANCE_MS + step * MINUTE / TOLERANCE_DRIFT_DIVISOR;
            assert!(retention <= T0 + step * MINUTE + tolerance, "step {step}");
        }
    }

    #[test]
    fn pending_gaps_round_trip_and_bad_bytes_are_dropped() {
        let state = ClockState { trusted: 5, pending: vec![Gap { gap: 7, observed: 9 }, Gap { gap: 1, observed: 0 }] };
        assert_eq!(ClockState::decode_pending(&state.encode_pending()), state.pending);
        assert_eq!(ClockState::decode_pending(&[]), Vec::new());
        assert_eq!(ClockState::decode_pending(&[2, 0]), Vec::new());
        assert_eq!(ClockState::decode_pending(&[1, 0, 0]), Vec::new());
    }
}
