//! Writing the audit events of answers that changed nothing, off the caller's thread.
//!
//! A replay, a key in progress, a mismatch, an expired or uncertain key are answered from a
//! read snapshot: no write transaction, no flush. Their audit events wait in the engine's
//! buffer; every commit writes them (`Txn::finish`), and when no commit comes, this module's
//! thread does, as [`AuditBatch`] rules: once [`AuditBatch::EVENTS`] are waiting or the oldest
//! has waited [`AuditBatch::DELAY_MS`], whichever comes first. A crash therefore loses at most
//! about a second of such answers' events, never an event of a decision (those are written by
//! the decision's own commit).
//!
//! The thread starts with the first waiting event of a store handle's life and is stopped
//! (and joined) when the last handle goes, before the store closes, so closing stays on the
//! caller's thread; it holds the engine while it runs. Where no thread can be started (the
//! WebAssembly build), a full buffer is written by the answering caller, and the age bound
//! holds only as far as later commits come.
//!
//! When the write fails (a full or failing disk) the events go back to the buffer and the
//! next try comes [`AuditBatch::DELAY_MS`] later; at most [`AuditBatch::MAX_WAITING`] events
//! wait, later answers' events are dropped and counted (`Stats::audit_events_dropped`).

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

#[cfg(not(target_arch = "wasm32"))]
use idemdb_core::AuditBatch;

use crate::audit::Waiting;
use crate::engine::Engine;
use crate::group::GroupCommit;

/// The audit writer of a store: a thread started on demand.
#[derive(Default)]
pub(crate) struct AuditFlusher {
    shared: Arc<Shared>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    /// When the oldest waiting event (as far as this thread knows) was buffered.
    #[cfg(not(target_arch = "wasm32"))]
    since: Option<std::time::Instant>,
    /// The count bound was reached: write now.
    full: bool,
    /// The last write failed: the next try waits [`AuditBatch::DELAY_MS`] however many
    /// events wait, so a failing disk is not hammered in a loop.
    #[cfg(not(target_arch = "wasm32"))]
    failed: bool,
    /// Stop the thread.
    stop: bool,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Plain field updates under these locks: a panic cannot leave them inconsistent.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl AuditFlusher {
    /// Tells the writer what an answer's buffered event left waiting: starts the clock of the
    /// oldest event, or asks for a write now. Returns `false` when no writer thread runs (the
    /// caller then writes a full buffer itself).
    pub(crate) fn waiting(&self, engine: &Arc<Engine>, group: &Arc<GroupCommit>, waiting: Waiting) -> bool {
        if !waiting.first && !waiting.full {
            return true;
        }
        if !self.ensure_started(engine, group) {
            return false;
        }
        let mut state = lock(&self.shared.state);
        #[cfg(not(target_arch = "wasm32"))]
        if state.since.is_none() {
            state.since = Some(std::time::Instant::now());
        }
        state.full |= waiting.full;
        drop(state);
        self.shared.changed.notify_one();
        true
    }

    /// Starts the thread unless it runs; whether it runs.
    #[cfg(not(target_arch = "wasm32"))]
    fn ensure_started(&self, engine: &Arc<Engine>, group: &Arc<GroupCommit>) -> bool {
        let mut thread = lock(&self.thread);
        if thread.is_some() {
            return true;
        }
        let (shared, engine, group) = (Arc::clone(&self.shared), Arc::clone(engine), Arc::clone(group));
        let spawned =
            std::thread::Builder::new().name("idemdb-audit".into()).spawn(move || run(&shared, &engine, &group));
        match spawned {
            Ok(handle) => {
                *thread = Some(handle);
                true
            }
            Err(_) => false,
        }
    }

    #[cfg(target_arch = "wasm32")]
    fn ensure_started(&self, _engine: &Arc<Engine>, _group: &Arc<GroupCommit>) -> bool {
        false
    }

    /// Stops the thread and waits for it (it lets go of the engine); a later waiting event
    /// starts it again. Waiting events stay buffered for the next commit or the close.
    pub(crate) fn stop(&self) {
        let Some(handle) = lock(&self.thread).take() else { return };
        lock(&self.shared.state).stop = true;
        self.shared.changed.notify_one();
        // A panic in the thread has nothing to hand back: the events stay buffered.
        let _ = handle.join();
        *lock(&self.shared.state) = State::default();
    }
}

impl Drop for AuditFlusher {
    /// The last handle went: the thread lets go of the engine before the store closes.
    fn drop(&mut self) {
        self.stop();
    }
}

/// The thread: sleeps until the waiting events are due ([`AuditBatch::wait_ms`]), then
/// writes them with an empty commit through the group-commit queue (so it shares a batch with
/// whatever writes are running).
#[cfg(not(target_arch = "wasm32"))]
fn run(shared: &Shared, engine: &Engine, group: &GroupCommit) {
    let mut state = lock(&shared.state);
    loop {
        if state.stop {
            return;
        }
        let Some(since) = state.since else {
            state = shared.changed.wait(state).unwrap_or_else(PoisonError::into_inner);
            continue;
        };
        let waited = u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX);
        let count = if state.failed {
            // Due once the delay has passed since the failure, like a single waiting event.
            1
        } else if state.full {
            AuditBatch::EVENTS
        } else {
            engine.audit_waiting()
        };
        match AuditBatch::wait_ms(count, waited) {
            // A commit wrote them meanwhile.
            None => state.since = None,
            Some(0) => {
                state.since = None;
                state.full = false;
                drop(state);
                // On failure the events go back to the buffer: try again a delay later.
                let written = group.run(engine, |_| Ok(()));
                state = lock(&shared.state);
                state.failed = written.is_err();
                if state.failed {
                    state.since = Some(std::time::Instant::now());
                }
            }
            Some(left) => {
                let timeout = std::time::Duration::from_millis(left);
                state = shared.changed.wait_timeout(state, timeout).unwrap_or_else(PoisonError::into_inner).0;
            }
        }
    }
}
