//! Group commit seen from the public handle: callers queued behind a stalled commit share
//! one flush, keep their own answers, and survive a panicking operation.

use std::sync::{Arc, Condvar, Mutex};
use std::thread;

use redb::StorageBackend;
use redb::backends::InMemoryBackend;

use crate::{Error, Fingerprint, IdempotencyKey, ManualClock, Refusal, Reservation, Scope, Store, TransitionError};

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

fn open_gate(gate: &Gate) {
    let mut state = gate.state.lock().unwrap();
    state.closed = false;
    gate.changed.notify_all();
}

fn wait_for_queue(store: &Store, length: usize) {
    while queued(store) < length {
        thread::yield_now();
    }
}

/// A store whose flushes wait at the returned gate.
fn gated_store() -> (Arc<Gate>, Arc<Store>) {
    let gate = Arc::new(Gate::default());
    let backend = GatedBackend { inner: InMemoryBackend::new(), gate: Arc::clone(&gate) };
    (Arc::clone(&gate), Arc::new(Store::builder().clock(ManualClock::new(1_000)).open_backend(backend).unwrap()))
}

fn key(i: usize) -> IdempotencyKey {
    IdempotencyKey::new(format!("k-{i}")).unwrap()
}

fn queued(store: &Store) -> usize {
    store.group.queued()
}

#[test]
fn callers_queued_behind_a_commit_share_one_flush_and_keep_their_own_answers() {
    let (gate, store) = gated_store();
    let (scope, fp) = (Scope::new("acme", "pay").unwrap(), Fingerprint::from_bytes([1; 32]));

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
    wait_for_queue(&store, 20);
    open_gate(&gate);

    assert!(matches!(first.join().unwrap().unwrap(), Reservation::Acquired(_)));
    let (mut acquired, mut refused) = (0, 0);
    for caller in callers {
        match caller.join().unwrap() {
            Ok(Some(Reservation::Acquired(_))) => acquired += 1,
            Err(Error::Refused(Refusal::Transition(TransitionError::WrongState { .. }))) => refused += 1,
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

#[test]
fn a_panicking_operation_fails_its_batch_without_stranding_anyone() {
    let (gate, store) = gated_store();
    let (scope, fp) = (Scope::new("acme", "pay").unwrap(), Fingerprint::from_bytes([1; 32]));

    gate.state.lock().unwrap().closed = true;
    let first = {
        let (store, scope) = (Arc::clone(&store), scope.clone());
        thread::spawn(move || store.reserve(&scope, &key(0), &fp))
    };
    wait_until(&gate, |state| state.waiting == 1);
    // Queued behind the stalled commit: an operation that panics, then a reservation.
    let panicking = {
        let store = Arc::clone(&store);
        thread::spawn(move || {
            store.group.run(&store.engine, |_txn| -> Result<(), Error> { panic!("an operation bug") })
        })
    };
    wait_for_queue(&store, 1);
    let behind = {
        let (store, scope) = (Arc::clone(&store), scope.clone());
        thread::spawn(move || store.reserve(&scope, &key(1), &fp))
    };
    wait_for_queue(&store, 2);
    open_gate(&gate);
    assert!(matches!(first.join().unwrap().unwrap(), Reservation::Acquired(_)));
    assert!(panicking.join().is_err(), "the panic reaches its own caller");
    let answer = behind.join().unwrap();
    assert!(answer.is_err(), "the batch was abandoned, and its other caller told so: {answer:?}");
    assert!(store.get(&scope, &key(1)).unwrap().is_none(), "nothing of the abandoned batch was committed");
    // The queue works on: a new leader is elected.
    assert!(matches!(store.reserve(&scope, &key(1), &fp).unwrap(), Reservation::Acquired(_)));
}
