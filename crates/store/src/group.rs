//! Group commit: concurrent single-record calls (reserve, complete, fail, renew, reconcile)
//! share one write transaction and one flush.
//!
//! Leader/follower: a caller queues its operation; if no leader is running, it becomes the
//! leader, takes up to [`MAX_BATCH`] queued operations in arrival order, runs each against the
//! same transaction exactly as it would run alone (each sees the writes of those before it),
//! commits once, and hands every caller its own answer. Nobody is answered before the commit
//! returned. An operation that fails on its own (a stale fence, a conflict, a corrupt record)
//! fails before it writes anything, so it does not affect the others; a storage failure fails
//! the whole batch, and every caller in it gets the error. The leader never waits to fill a
//! batch: a lone caller commits at once, so batching adds no latency, and under load a batch
//! holds whatever arrived during the previous commit.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use crate::txn::Txn;
use crate::{Error, Store};

/// Most operations one commit carries.
pub(crate) const MAX_BATCH: usize = 256;

/// One queued operation, type-erased.
trait Queued: Send {
    /// Whether a leader took it.
    fn taken(&self) -> &AtomicBool;
    /// Runs the operation in the shared transaction; its answer waits for the commit.
    fn execute(self: Box<Self>, txn: &mut Txn<'_>) -> Box<dyn Executed>;
    /// The transaction could not even begin: answer with that error.
    fn abort(self: Box<Self>, error: &Error);
}

/// An operation that ran and waits for the commit outcome.
trait Executed: Send {
    fn finish(self: Box<Self>, commit: &Result<(), Error>);
}

struct Slot<R> {
    answer: Mutex<Option<Result<R, Error>>>,
    taken: AtomicBool,
}

struct Pending<R, F> {
    operation: F,
    slot: Arc<Slot<R>>,
}

struct Ran<R> {
    answer: Result<R, Error>,
    slot: Arc<Slot<R>>,
}

impl<R: Send + 'static, F: FnOnce(&mut Txn<'_>) -> Result<R, Error> + Send> Queued for Pending<R, F> {
    fn taken(&self) -> &AtomicBool {
        &self.slot.taken
    }

    fn execute(self: Box<Self>, txn: &mut Txn<'_>) -> Box<dyn Executed> {
        let Pending { operation, slot } = *self;
        Box::new(Ran { answer: operation(txn), slot })
    }

    fn abort(self: Box<Self>, error: &Error) {
        *lock(&self.slot.answer) = Some(Err(error.clone()));
    }
}

impl<R: Send> Executed for Ran<R> {
    fn finish(self: Box<Self>, commit: &Result<(), Error>) {
        let answer = match (commit, self.answer) {
            // The operation's own error stands: it wrote nothing.
            (_, Err(own)) => Err(own),
            (Ok(()), Ok(value)) => Ok(value),
            (Err(shared), Ok(_)) => Err(shared.clone()),
        };
        *lock(&self.slot.answer) = Some(answer);
    }
}

#[derive(Default)]
struct Queue {
    operations: Vec<Box<dyn Queued>>,
    leader_active: bool,
}

/// The group-commit queue of a store.
#[derive(Default)]
pub(crate) struct GroupCommit {
    queue: Mutex<Queue>,
    changed: Condvar,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding these locks cannot leave them inconsistent (plain pushes/pops).
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl GroupCommit {
    /// Runs `operation` in a shared write transaction and returns its answer once the
    /// transaction has committed.
    pub(crate) fn run<R, F>(&self, store: &Store, operation: F) -> Result<R, Error>
    where
        R: Send + 'static,
        F: FnOnce(&mut Txn<'_>) -> Result<R, Error> + Send + 'static,
    {
        let slot = Arc::new(Slot { answer: Mutex::new(None), taken: AtomicBool::new(false) });
        let mut queue = lock(&self.queue);
        queue.operations.push(Box::new(Pending { operation, slot: Arc::clone(&slot) }));
        loop {
            if let Some(answer) = lock(&slot.answer).take() {
                return answer;
            }
            if !queue.leader_active && !slot.taken.load(Ordering::SeqCst) {
                queue.leader_active = true;
                let take = queue.operations.len().min(MAX_BATCH);
                let batch: Vec<Box<dyn Queued>> = queue.operations.drain(..take).collect();
                for operation in &batch {
                    operation.taken().store(true, Ordering::SeqCst);
                }
                drop(queue);
                lead(store, batch);
                queue = lock(&self.queue);
                queue.leader_active = false;
                self.changed.notify_all();
                continue;
            }
            queue = self.changed.wait(queue).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

fn lead(store: &Store, batch: Vec<Box<dyn Queued>>) {
    let mut txn = match Txn::begin(store) {
        Ok(txn) => txn,
        Err(error) => {
            batch.into_iter().for_each(|operation| operation.abort(&error));
            return;
        }
    };
    let ran: Vec<Box<dyn Executed>> = batch.into_iter().map(|operation| operation.execute(&mut txn)).collect();
    let commit = txn.commit();
    for operation in ran {
        operation.finish(&commit);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Condvar, Mutex};
    use std::thread;

    use redb::StorageBackend;
    use redb::backends::InMemoryBackend;

    use crate::{Error, Fingerprint, IdempotencyKey, ManualClock, Reservation, Scope, Store, TransitionError};

    /// An in-memory backend whose flushes can be held at a gate, to line callers up behind a
    /// commit in progress.
    #[derive(Debug, Default)]
    struct Gate {
        state: Mutex<GateState>,
        changed: Condvar,
    }

    #[derive(Debug, Default)]
    struct GateState {
        closed: bool,
        waiting: usize,
        flushes: usize,
    }

    #[derive(Debug)]
    struct GatedBackend {
        inner: InMemoryBackend,
        gate: Arc<Gate>,
    }

    impl StorageBackend for GatedBackend {
        fn len(&self) -> Result<u64, std::io::Error> {
            self.inner.len()
        }
        fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
            self.inner.read(offset, out)
        }
        fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
            self.inner.set_len(len)
        }
        fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
            self.inner.write(offset, data)
        }
        fn sync_data(&self) -> Result<(), std::io::Error> {
            let mut state = self.gate.state.lock().unwrap();
            state.waiting += 1;
            self.gate.changed.notify_all();
            while state.closed {
                state = self.gate.changed.wait(state).unwrap();
            }
            state.waiting -= 1;
            state.flushes += 1;
            self.inner.sync_data()
        }
    }

    fn wait_until(gate: &Gate, done: impl Fn(&GateState) -> bool) {
        let mut state = gate.state.lock().unwrap();
        while !done(&state) {
            state = gate.changed.wait(state).unwrap();
        }
    }

    fn queued(store: &Store) -> usize {
        store.group.queue.lock().unwrap().operations.len()
    }

    #[test]
    fn callers_queued_behind_a_commit_share_one_flush_and_keep_their_own_answers() {
        let gate = Arc::new(Gate::default());
        let backend = GatedBackend { inner: InMemoryBackend::new(), gate: Arc::clone(&gate) };
        let store = Arc::new(Store::builder().clock(ManualClock::new(1_000)).open_backend(backend).unwrap());
        let scope = Scope::new("acme", "pay").unwrap();
        let fp = Fingerprint::from_bytes([1; 32]);
        let key = |i: usize| IdempotencyKey::new(format!("k-{i}")).unwrap();

        // A finished record whose lease can no longer complete or renew.
        let Reservation::Acquired(done) = store.reserve(&scope, &key(999), &fp).unwrap() else { panic!() };
        store.complete(&done, b"ok".to_vec()).unwrap();

        // The first caller's commit stalls in its flush.
        gate.state.lock().unwrap().closed = true;
        let first = {
            let (store, scope) = (Arc::clone(&store), scope.clone());
            thread::spawn(move || store.reserve(&scope, &key(0), &fp))
        };
        wait_until(&gate, |state| state.waiting == 1);
        let flushes_before = gate.state.lock().unwrap().flushes;

        // Twenty more line up: ten new reservations, ten calls that must fail on their own.
        let mut callers = Vec::new();
        for i in 1..=20 {
            let (store, scope, done) = (Arc::clone(&store), scope.clone(), done.clone());
            callers.push(thread::spawn(move || match i % 4 {
                0 => store.complete(&done, b"again".to_vec()).map(|()| None),
                1 => store.renew(&done).map(|_| None),
                _ => store.reserve(&scope, &key(i), &fp).map(Some),
            }));
        }
        while queued(&store) < 20 {
            thread::yield_now();
        }
        {
            let mut state = gate.state.lock().unwrap();
            state.closed = false;
            gate.changed.notify_all();
        }

        assert!(matches!(first.join().unwrap().unwrap(), Reservation::Acquired(_)));
        let (mut acquired, mut refused) = (0, 0);
        for caller in callers {
            match caller.join().unwrap() {
                Ok(Some(Reservation::Acquired(_))) => acquired += 1,
                Err(Error::Transition(TransitionError::WrongState { .. })) => refused += 1,
                other => panic!("unexpected answer {other:?}"),
            }
        }
        assert_eq!((acquired, refused), (10, 10));
        let flushes = gate.state.lock().unwrap().flushes - flushes_before;
        assert_eq!(flushes, 2, "the stalled commit, then one commit for the twenty queued calls");
        for i in (1..=20).filter(|i| i % 4 >= 2) {
            assert!(store.get(&scope, &key(i)).unwrap().is_some(), "reservation {i} was stored");
        }
    }
}
