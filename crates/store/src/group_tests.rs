//! Group commit seen from the public handle: callers queued behind a stalled commit share
//! one flush, keep their own answers, and survive a panicking operation.

use std::sync::{Arc, Condvar, Mutex};
use std::thread;

use redb::StorageBackend;
use redb::backends::InMemoryBackend;

use crate::{
    Error, Fingerprint, IdempotencyKey, ManualClock, Refusal, Reservation, Reserve, Scope, Store, TransitionError,
};

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
    let Reservation::Acquired(done) = store.reserve(Reserve::new(&scope, &key(999), &fp)).unwrap() else { panic!() };
    store.complete(&done, b"ok".to_vec()).unwrap();

    // The first caller's commit stalls in its flush.
    gate.state.lock().unwrap().closed = true;
    let first = {
        let (store, scope) = (Arc::clone(&store), scope.clone());
        thread::spawn(move || store.reserve(Reserve::new(&scope, &key(0), &fp)))
    };
    wait_until(&gate, |state| state.waiting == 1);
    let batches_before = store.group.batches();

    // Twenty more line up: ten new reservations, ten calls that must fail on their own.
    let mut callers = Vec::new();
    for i in 1..=20 {
        let (store, scope, done) = (Arc::clone(&store), scope.clone(), done.clone());
        callers.push(thread::spawn(move || match i % 4 {
            0 => store.complete(&done, b"again".to_vec()).map(|()| None),
            1 => store.renew(&done).map(|_| None),
            _ => store.reserve(Reserve::new(&scope, &key(i), &fp)).map(Some),
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
    assert_eq!(store.group.batches() - batches_before, 1, "one commit for the twenty queued calls");
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
        thread::spawn(move || store.reserve(Reserve::new(&scope, &key(0), &fp)))
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
        thread::spawn(move || store.reserve(Reserve::new(&scope, &key(1), &fp)))
    };
    wait_for_queue(&store, 2);
    open_gate(&gate);
    assert!(matches!(first.join().unwrap().unwrap(), Reservation::Acquired(_)));
    assert!(panicking.join().is_err(), "the panic reaches its own caller");
    let answer = behind.join().unwrap();
    assert!(answer.is_err(), "the batch was abandoned, and its other caller told so: {answer:?}");
    assert!(store.get(&scope, &key(1)).unwrap().is_none(), "nothing of the abandoned batch was committed");
    // The queue works on: a new leader is elected.
    assert!(matches!(store.reserve(Reserve::new(&scope, &key(1), &fp)).unwrap(), Reservation::Acquired(_)));
}

/// The refused enqueue of `reserve_enqueuing`: the same effect twice with two payloads. The
/// reservation and the first effect are written before the second is refused.
#[cfg(feature = "workflow")]
fn conflicting_effects() -> Vec<crate::NewEffect> {
    let charge = crate::EffectName::new("charge").unwrap();
    vec![
        crate::NewEffect { effect: charge.clone(), version: 1, payload: b"10.50".to_vec() },
        crate::NewEffect { effect: charge, version: 1, payload: b"99.99".to_vec() },
    ]
}

#[cfg(feature = "workflow")]
fn one_effect() -> Vec<crate::NewEffect> {
    vec![crate::NewEffect { effect: crate::EffectName::new("charge").unwrap(), version: 1, payload: b"1".to_vec() }]
}

/// What a store holds for `(scope, key)`: its record, its outbox items and its audit events.
#[cfg(feature = "workflow")]
fn traces(store: &Store, scope: &Scope, key: &IdempotencyKey) -> (bool, usize, usize) {
    let hash = store.key_hash(scope, key);
    let items = store.effects(&crate::EffectFilter::default()).unwrap();
    let events = store.audit_events(1_000_000).unwrap();
    (
        store.get(scope, key).unwrap().is_some(),
        items.iter().filter(|item| item.key == *key && item.scope == *scope).count(),
        events.iter().filter(|event| event.key_hash == hash).count(),
    )
}

#[cfg(feature = "workflow")]
#[test]
fn operations_that_fail_after_writing_leave_nothing_and_their_batch_commits_the_others() {
    use crate::ScopedKey;

    let (gate, store) = gated_store();
    let (scope, fp) = (Scope::new("acme", "pay").unwrap(), Fingerprint::from_bytes([1; 32]));

    // The first caller's commit stalls in its flush; the rest queue behind it as one batch.
    gate.state.lock().unwrap().closed = true;
    let first = {
        let (store, scope) = (Arc::clone(&store), scope.clone());
        thread::spawn(move || store.reserve(Reserve::new(&scope, &key(0), &fp)))
    };
    wait_until(&gate, |state| state.waiting == 1);
    let batches_before = store.group.batches();

    let mut callers = Vec::new();
    for i in 1..=30 {
        let (caller, scope) = (Arc::clone(&store), scope.clone());
        callers.push((
            i,
            thread::spawn(move || -> Result<(), Error> {
                match i % 3 {
                    // A reservation with effects that succeeds.
                    0 => caller
                        .reserve(Reserve::new(&scope, &key(i), &fp).traced("req")?.enqueuing(one_effect()))
                        .map(drop),
                    // A reservation whose second effect is refused after the reservation and
                    // the first effect were written.
                    1 => caller
                        .reserve(Reserve::new(&scope, &key(i), &fp).traced("req")?.enqueuing(conflicting_effects()))
                        .map(drop),
                    // An operation that overwrites a record an earlier operation of the batch
                    // wrote (the one of key i - 2), writes a new one, then fails.
                    _ => caller.group.run(&caller.engine, move |txn| {
                        let earlier = ScopedKey::new(scope.clone(), key(i - 2));
                        if let Some(mut record) = txn.get(&scope, &key(i - 2))? {
                            record.attempts += 7;
                            txn.import(&earlier, &record, true)?;
                        }
                        txn.reserve(Reserve::new(&scope, &key(i), &fp))?;
                        Err(Error::Internal("failed after writing"))
                    }),
                }
            }),
        ));
        wait_for_queue(&store, i);
    }
    let before: Vec<_> = (1..=30).map(|i| traces(&store, &scope, &key(i))).collect();
    assert!(before.iter().all(|&traced| traced == (false, 0, 0)), "nothing committed yet");
    open_gate(&gate);

    assert!(matches!(first.join().unwrap().unwrap(), Reservation::Acquired(_)));
    let answers: Vec<_> = callers.into_iter().map(|(i, caller)| (i, caller.join().unwrap())).collect();
    assert_eq!(store.group.batches() - batches_before, 1, "one commit for the thirty queued calls");
    for (i, answer) in answers {
        let traced = traces(&store, &scope, &key(i));
        match i % 3 {
            0 => {
                assert!(answer.is_ok(), "{i}: {answer:?}");
                // The record, its effect, and the events of the reservation and the enqueue.
                assert_eq!(traced, (true, 1, 2), "{i}: committed whole");
            }
            1 => {
                assert!(
                    matches!(answer, Err(Error::Refused(Refusal::Outbox(crate::OutboxRefusal::PayloadMismatch)))),
                    "{i}: {answer:?}"
                );
                assert_eq!(traced, (false, 0, 0), "{i}: a refused enqueue stores nothing");
            }
            _ => {
                assert!(matches!(answer, Err(Error::Internal("failed after writing"))), "{i}: {answer:?}");
                assert_eq!(traced, (false, 0, 0), "{i}: its own reservation was taken back");
            }
        }
    }
    // The records the failing operations overwrote are as the batch's successful ones left them.
    for i in (1..=30).filter(|i| i % 3 == 2 && (i - 2) % 3 == 0) {
        let record = store.get(&scope, &key(i - 2)).unwrap().expect("committed record");
        assert_eq!(record.attempts, 1, "{i}: the overwrite of key {} was taken back", i - 2);
    }
    let mut store = Arc::try_unwrap(store).expect("the only handle");
    let report = store.verify().unwrap();
    assert!(report.problems.is_empty(), "the indexes agree with the records: {:?}", report.problems);
}
