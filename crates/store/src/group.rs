//! Group commit: concurrent single-record calls (reserve, complete, fail, renew, reconcile)
//! share one write transaction and one flush.
//!
//! Leader/follower: a caller queues its operation; if no leader is running, it becomes the
//! leader, takes up to [`MAX_BATCH`] queued operations in arrival order, runs each against the
//! same transaction exactly as it would run alone (each sees the writes of those before it),
//! commits once, and hands every caller its own answer. Nobody is answered before the commit
//! returned. A lone caller commits at once, so batching adds no latency to it; under load a
//! batch holds whatever arrived during the previous commit, and the leader lingers briefly
//! (while fewer operations are queued than the last batch answered: at most half the last
//! commit's duration and [`MAX_LINGER`], 1 ms) so that callers taking turns share commits.
//!
//! **The transaction contract: an operation that returns an error leaves no write behind**,
//! in a batch as alone (`docs/design.md`, "Transaction contract"). It is kept here, for every
//! queued operation, not by each operation: the leader runs each one through
//! [`Txn::operation`], which keeps an undo log while the operation runs (each key's value
//! before the operation's first write to it, and how far the journal log, the audit events and
//! the read-back list had got) and, when the operation returns `Err`, puts every key back and
//! drops the rest, its audit events included. The others in the batch commit as if it had
//! never run. (An operation alone in its batch keeps no log: its error leaves the transaction
//! uncommitted.) An error that leaves the transaction in doubt — the undo itself failing, or a
//! failing operation that wrote around the log — fails the whole batch, and so does a storage
//! failure at commit: every caller in it gets the error, and nothing of it is committed.
//!
//! Wake-ups are targeted: every caller waits on its own slot. After a commit the leader first
//! hands leadership to the caller of the oldest queued operation (so the next batch starts at
//! once), then wakes exactly the callers of the batch it committed. Nobody else is woken, so
//! a commit costs one wake-up per operation, not one per waiting thread.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::Error;
use crate::engine::Engine;
use crate::txn::{Begun, Txn};

/// Most operations one commit carries.
pub(crate) const MAX_BATCH: usize = 256;

/// One queued operation, type-erased.
trait Queued: Send {
    /// Makes its caller the next leader.
    fn promote(&self);
    /// Runs the operation in the shared transaction ([`Txn::operation`]: `undoable` when
    /// others share it); its answer waits for the commit.
    fn execute(self: Box<Self>, txn: &mut Txn<'_>, undoable: bool) -> Box<dyn AwaitingCommit>;
    /// The transaction could not even begin: answer with that error.
    fn abort(self: Box<Self>, error: &Error);
}

/// An operation that ran and waits for the commit outcome.
trait AwaitingCommit: Send {
    fn finish(self: Box<Self>, commit: &Result<(), Error>);
}

/// What a waiting caller is told.
enum Turn<R> {
    /// Still queued or in a batch being committed.
    Wait,
    /// Take the queue and commit the next batch.
    Lead,
    /// The answer, after its batch committed.
    Done(Result<R, Error>),
}

/// Where one caller waits.
struct Slot<R> {
    turn: Mutex<Turn<R>>,
    changed: Condvar,
}

impl<R> Slot<R> {
    fn set(&self, turn: Turn<R>) {
        let mut current = lock(&self.turn);
        // An answer is final: a leadership hand-off never overwrites it.
        if !matches!(*current, Turn::Done(_)) {
            *current = turn;
        }
        drop(current);
        self.changed.notify_one();
    }

    /// Blocks until told to lead or answered.
    fn wait(&self) -> Turn<R> {
        let mut turn = lock(&self.turn);
        loop {
            match std::mem::replace(&mut *turn, Turn::Wait) {
                Turn::Wait => turn = self.changed.wait(turn).unwrap_or_else(PoisonError::into_inner),
                told => return told,
            }
        }
    }
}

/// The way back to a waiting caller. Dropped without an answer (a panic unwinding through
/// the leader), it answers with an error, so no caller waits for ever.
struct Reply<R> {
    slot: Option<Arc<Slot<R>>>,
}

impl<R> Reply<R> {
    fn send(mut self, answer: Result<R, Error>) {
        if let Some(slot) = self.slot.take() {
            slot.set(Turn::Done(answer));
        }
    }
}

impl<R> Drop for Reply<R> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            slot.set(Turn::Done(Err(abandoned())));
        }
    }
}

struct Pending<R, F> {
    operation: F,
    reply: Reply<R>,
}

struct Ran<R> {
    answer: Result<R, Error>,
    reply: Reply<R>,
}

impl<R: Send + 'static, F: FnOnce(&mut Txn<'_>) -> Result<R, Error> + Send> Queued for Pending<R, F> {
    fn promote(&self) {
        if let Some(slot) = &self.reply.slot {
            slot.set(Turn::Lead);
        }
    }

    fn execute(self: Box<Self>, txn: &mut Txn<'_>, undoable: bool) -> Box<dyn AwaitingCommit> {
        let Pending { operation, reply } = *self;
        Box::new(Ran { answer: txn.operation(undoable, operation), reply })
    }

    fn abort(self: Box<Self>, error: &Error) {
        self.reply.send(Err(error.clone()));
    }
}

impl<R: Send> AwaitingCommit for Ran<R> {
    fn finish(self: Box<Self>, commit: &Result<(), Error>) {
        let answer = match (commit, self.answer) {
            // The operation's own error stands: its writes were taken back (`Txn::operation`).
            (_, Err(own)) => Err(own),
            (Ok(()), Ok(value)) => Ok(value),
            (Err(shared), Ok(_)) => Err(shared.clone()),
        };
        self.reply.send(answer);
    }
}

#[derive(Default)]
struct Queue {
    operations: Vec<Box<dyn Queued>>,
    /// Whether some caller leads. While one does, queued operations wait for it to hand over;
    /// while none does, the queue is empty.
    leader_active: bool,
    /// How many operations the last batch answered: callers that are likely to come back.
    last_batch: usize,
    /// How long the last commit took.
    last_commit: Duration,
    /// Batches led so far (for tests that count commits).
    #[cfg(test)]
    batches: usize,
    /// Whether a leader waits for arrivals (only then does a new arrival signal).
    lingering: bool,
}

/// The group-commit queue of a store.
#[derive(Default)]
pub(crate) struct GroupCommit {
    queue: Mutex<Queue>,
    /// Signalled when an operation arrives while a leader lingers.
    arrived: Condvar,
}

/// The longest a leader waits for callers of the last batch to come back, as a fraction of a
/// commit: `1 / LINGER_DIVISOR` of the last commit's duration.
const LINGER_DIVISOR: u32 = 2;
/// And never longer than this.
const MAX_LINGER: Duration = Duration::from_millis(1);

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding these locks cannot leave them inconsistent (plain pushes/pops).
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl GroupCommit {
    /// How many operations wait in the queue (for tests that line callers up).
    #[cfg(test)]
    pub(crate) fn queued(&self) -> usize {
        lock(&self.queue).operations.len()
    }

    /// How many batches were led (for tests that count commits: redb may flush more than once
    /// per commit, when its file grows).
    #[cfg(test)]
    pub(crate) fn batches(&self) -> usize {
        lock(&self.queue).batches
    }

    /// Runs `operation` in a shared write transaction and returns its answer once the
    /// transaction has committed.
    pub(crate) fn run<R, F>(&self, engine: &Engine, operation: F) -> Result<R, Error>
    where
        R: Send + 'static,
        F: FnOnce(&mut Txn<'_>) -> Result<R, Error> + Send + 'static,
    {
        let slot = Arc::new(Slot { turn: Mutex::new(Turn::Wait), changed: Condvar::new() });
        let lead_now = {
            let mut queue = lock(&self.queue);
            queue.operations.push(Box::new(Pending { operation, reply: Reply { slot: Some(Arc::clone(&slot)) } }));
            if queue.lingering {
                self.arrived.notify_one();
            }
            !std::mem::replace(&mut queue.leader_active, true)
        };
        if !lead_now {
            match slot.wait() {
                Turn::Done(answer) => return answer,
                Turn::Lead | Turn::Wait => {}
            }
        }
        // Leading: this caller's operation is the oldest queued one, so the batch holds it.
        self.lead(engine);
        match slot.wait() {
            Turn::Done(answer) => answer,
            // Unreachable: the batch this caller committed answered its own operation, and a
            // leader is never promoted again while its operation is queued.
            Turn::Lead | Turn::Wait => unreachable_turn(),
        }
    }

    /// Commits one batch from the front of the queue, then hands over.
    fn lead(&self, engine: &Engine) {
        let handover = Handover { group: self };
        let batch: Vec<Box<dyn Queued>> = {
            let mut queue = self.linger(lock(&self.queue));
            let take = queue.operations.len().min(MAX_BATCH);
            queue.last_batch = take;
            #[cfg(test)]
            {
                queue.batches += 1;
            }
            queue.operations.drain(..take).collect()
        };
        let started = Started::now();
        let begun = match Begun::new(engine) {
            Ok(begun) => begun,
            Err(error) => {
                drop(handover);
                batch.into_iter().for_each(|operation| operation.abort(&error));
                return;
            }
        };
        let mut txn = begun.txn();
        let undoable = batch.len() > 1;
        let ran: Vec<Box<dyn AwaitingCommit>> =
            batch.into_iter().map(|operation| operation.execute(&mut txn, undoable)).collect();
        let commit = txn.finish().and_then(|finished| begun.commit(finished));
        if let Some(took) = started.and_then(|started| started.elapsed()) {
            lock(&self.queue).last_commit = took;
        }
        // The next leader starts on its batch while this one answers its own.
        drop(handover);
        for operation in ran {
            operation.finish(&commit);
        }
    }

    /// Under load, waits briefly for the callers the last batch answered to come back, so
    /// that callers who take turns share commits instead of alternating between batches of
    /// one. Waits only while fewer operations are queued than the last batch answered, at most
    /// half the last commit's duration (and [`MAX_LINGER`]); a lone caller never waits.
    fn linger<'q>(&self, mut queue: MutexGuard<'q, Queue>) -> MutexGuard<'q, Queue> {
        let limit = (queue.last_commit / LINGER_DIVISOR).min(MAX_LINGER);
        if queue.operations.len() >= queue.last_batch || limit.is_zero() {
            return queue;
        }
        let Some(started) = Started::now() else { return queue };
        queue.lingering = true;
        while queue.operations.len() < queue.last_batch {
            let Some(waited) = started.elapsed() else { break };
            let Some(left) = limit.checked_sub(waited).filter(|left| !left.is_zero()) else { break };
            queue = self.arrived.wait_timeout(queue, left).unwrap_or_else(PoisonError::into_inner).0;
        }
        queue.lingering = false;
        queue
    }
}

/// A monotonic instant where the platform has one (not on `wasm32-unknown-unknown`, whose
/// single thread never batches anyway).
struct Started(#[cfg(not(target_arch = "wasm32"))] std::time::Instant);

impl Started {
    #[cfg(not(target_arch = "wasm32"))]
    fn now() -> Option<Self> {
        Some(Started(std::time::Instant::now()))
    }

    #[cfg(target_arch = "wasm32")]
    fn now() -> Option<Self> {
        None
    }

    #[cfg(not(target_arch = "wasm32"))]
    fn elapsed(&self) -> Option<Duration> {
        Some(self.0.elapsed())
    }

    #[cfg(target_arch = "wasm32")]
    fn elapsed(&self) -> Option<Duration> {
        None
    }
}

/// Passes leadership on when a leader is done with the queue, also when a panic unwinds
/// through it: the caller of the oldest queued operation leads next, or nobody leads when
/// the queue is empty.
struct Handover<'g> {
    group: &'g GroupCommit,
}

impl Drop for Handover<'_> {
    fn drop(&mut self) {
        let mut queue = lock(&self.group.queue);
        match queue.operations.first() {
            Some(next) => next.promote(),
            None => queue.leader_active = false,
        }
    }
}

/// The answer of an operation whose batch was abandoned by a panic in the leader.
fn abandoned() -> Error {
    Error::Internal("the group commit this call joined was abandoned by a panic; nothing of it was committed")
}

/// A leader's own slot is answered by its own batch; reported rather than panicking should
/// that ever not hold.
fn unreachable_turn<R>() -> Result<R, Error> {
    Err(Error::Internal("a group commit did not answer its own leader"))
}
