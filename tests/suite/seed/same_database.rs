//! The seed note's test list: the same-database path.

use super::*;

fn credit(by: i64, runs: &AtomicU32) -> impl FnOnce(&mut idemdb::Txn<'_>) -> Result<Vec<u8>, Error> + '_ {
    move |txn| {
        runs.fetch_add(1, Ordering::SeqCst);
        let mut balances = txn.tables_checkpointing().open_table(BALANCES)?;
        let old = balances.get("alice")?.map(|guard| guard.value()).unwrap_or(0);
        balances.insert("alice", old + by)?;
        Ok((old + by).to_string().into_bytes())
    }
}

#[test]
fn execute_credits_a_balance_once_across_retries_and_restarts() {
    let mut fixture = Fixture::new();
    let runs = AtomicU32::new(0);
    let (scope, key, fingerprint) = (scope("acme", "credit"), key("credit-17"), fp(1));

    let first = fixture.store().execute(Reserve::new(&scope, &key, &fingerprint), credit(100, &runs)).expect("execute");
    assert_eq!(first, Executed::Ran { result: b"100".to_vec() });
    for attempt in 0..4 {
        if attempt == 2 {
            fixture.restart();
        }
        let again =
            fixture.store().execute(Reserve::new(&scope, &key, &fingerprint), credit(100, &runs)).expect("execute");
        assert_eq!(
            again,
            Executed::Answered(Reservation::Replay { outcome: OutcomeClass::Completed, body: b"100".to_vec() })
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the operation ran once");
    assert_eq!(read_balance(fixture.store(), "alice"), 100, "credited once");
}

#[test]
fn an_operation_error_in_execute_rolls_back_the_reservation_and_the_app_write() {
    let fixture = Fixture::new();
    let store = fixture.store();
    let runs = AtomicU32::new(0);
    let (scope, key, fingerprint) = (scope("acme", "credit"), key("credit-17"), fp(1));
    let before = snapshot(store);

    let failed = store.execute(Reserve::new(&scope, &key, &fingerprint), |txn| -> Result<Vec<u8>, AppError> {
        runs.fetch_add(1, Ordering::SeqCst);
        let mut balances = txn.tables_checkpointing().open_table(BALANCES).map_err(|e| AppError::Store(e.into()))?;
        balances.insert("alice", 100).map_err(|e| AppError::Store(e.into()))?;
        Err(AppError::Declined)
    });
    assert!(matches!(failed, Err(ExecuteError::Operation(AppError::Declined))), "{failed:?}");
    assert_eq!(snapshot(store), before, "no reservation left behind");
    assert_eq!(read_balance(store, "alice"), 0, "the app write was rolled back");

    // The key is free, and the next try is a first attempt that credits once.
    let ran = store.execute(Reserve::new(&scope, &key, &fingerprint), credit(100, &runs)).expect("execute");
    assert_eq!(ran, Executed::Ran { result: b"100".to_vec() });
    assert_eq!(read_balance(store, "alice"), 100);
    assert_eq!(store.get(&scope, &key).expect("get").expect("record").attempts, 1);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[test]
fn an_app_write_and_the_completion_commit_together_in_one_write() {
    let mut fixture = Fixture::new();
    let (scope, key, fingerprint) = (scope("acme", "place_order"), key("order-842"), fp(1));
    let lease = acquired(fixture.store().reserve(Reserve::new(&scope, &key, &fingerprint)).expect("reserve"));

    // A completion refused (over the result limit) takes the app write down with it.
    let oversized = vec![b'x'; idemdb::Policy::default().max_result_bytes() + 1];
    let refused_write: Result<(), Error> = fixture.store().write(|txn| {
        txn.tables_checkpointing().open_table(ORDERS)?.insert("order-842", 1050)?;
        txn.complete(&lease, oversized)
    });
    assert!(
        matches!(refused_write, Err(Error::Refused(Refusal::Transition(TransitionError::ResultTooLarge { .. })))),
        "{refused_write:?}"
    );
    assert_eq!(read_order(fixture.store(), "order-842"), None);
    assert_eq!(fixture.store().get(&scope, &key).expect("get").expect("record").state.kind(), StateKind::InProgress);

    fixture
        .store()
        .write(|txn| -> Result<(), Error> {
            txn.tables_checkpointing().open_table(ORDERS)?.insert("order-842", 1050)?;
            txn.complete(&lease, b"order placed".to_vec())
        })
        .expect("one commit");
    fixture.restart();
    assert_eq!(read_order(fixture.store(), "order-842"), Some(1050));
    assert_eq!(
        fixture.store().reserve(Reserve::new(&scope, &key, &fingerprint)).expect("reserve"),
        Reservation::Replay { outcome: OutcomeClass::Completed, body: b"order placed".to_vec() }
    );
}

#[test]
fn one_write_interleaving_record_writes_and_raw_table_access_keeps_every_write() {
    // A transaction keeps the record table open between its own reads and writes, and closes
    // it whenever it hands out the raw redb transaction: reserve, raw write, reserve again,
    // raw read of what it wrote, complete both — all in one commit.
    let mut fixture = Fixture::new();
    let scope = scope("acme", "place_order");
    let (first, second) = (key("order-1"), key("order-2"));
    let answers = fixture
        .store()
        .write(|txn| -> Result<_, Error> {
            let one = acquired(txn.reserve(Reserve::new(&scope, &first, &fp(1)))?);
            txn.tables_checkpointing().open_table(ORDERS)?.insert("order-1", 10)?;
            let two = acquired(txn.reserve(Reserve::new(&scope, &second, &fp(2)))?);
            let seen = txn.tables_checkpointing().open_table(ORDERS)?.get("order-1")?.map(|guard| guard.value());
            txn.tables_checkpointing().open_table(ORDERS)?.insert("order-2", 20)?;
            let again = txn.reserve(Reserve::new(&scope, &first, &fp(1)))?;
            txn.complete(&one, b"one".to_vec())?;
            txn.complete(&two, b"two".to_vec())?;
            Ok((seen, again))
        })
        .expect("one commit");
    assert_eq!(answers.0, Some(10), "the raw read sees the raw write of the same transaction");
    assert!(matches!(answers.1, Reservation::InProgress { .. }), "the second reserve sees the first: {:?}", answers.1);

    fixture.restart();
    assert_eq!((read_order(fixture.store(), "order-1"), read_order(fixture.store(), "order-2")), (Some(10), Some(20)));
    for (key, fingerprint, body) in [(&first, fp(1), b"one".to_vec()), (&second, fp(2), b"two".to_vec())] {
        assert_eq!(
            fixture.store().reserve(Reserve::new(&scope, key, &fingerprint)).expect("reserve"),
            Reservation::Replay { outcome: OutcomeClass::Completed, body }
        );
    }
}
