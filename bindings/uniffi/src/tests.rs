//! The bindings' Rust side: conversions and the async forms. The Kotlin and Python suites
//! (bindings/uniffi/tests) call the same functions through the generated code.

use crate::*;

fn scope() -> Scope {
    Scope { tenant: "me".into(), operation: "pay".into() }
}

#[test]
fn intents_round_trip_through_the_records() {
    let store = IdemStore::in_memory().unwrap();
    let canon = Canonicalizer::new(vec!["/trace_id".into()], vec![], None).unwrap();
    let key = new_key().unwrap();
    let created =
        store.create_intent(scope(), key.clone(), br#"{"b":1,"a":2,"trace_id":"x"}"#.to_vec(), canon).unwrap();
    assert_eq!(created.request, br#"{"a":2,"b":1}"#);
    assert_eq!(created.state, "pending");
    assert_eq!(created.fingerprint, fingerprint_of_canonical(created.request.clone()));
    let attempted = store.record_attempt(scope(), key.clone(), AttemptOutcome::Status { code: 503 }).unwrap();
    assert_eq!((attempted.attempts, attempted.last_attempt.as_deref()), (1, Some("status")));
    assert_eq!(attempted.last_attempt_status, Some(503));
    let response = IntentResponse {
        status: 201,
        headers: vec![Header { name: "content-type".into(), value: "application/json".into() }],
        body: b"{}".to_vec(),
    };
    let done = store.record_response(scope(), key.clone(), response.clone()).unwrap();
    assert_eq!((done.state.as_str(), done.response), ("completed", Some(response)));
    assert!(store.pending_intents().unwrap().is_empty());
    let err = store.abandon_intent(scope(), key, "late".into()).unwrap_err();
    assert_eq!(err.code(), idemdb::ErrorCode::IntentFinished);
}

#[test]
fn a_lease_crosses_the_boundary_and_comes_back() {
    let store = IdemStore::in_memory().unwrap();
    let fp = fingerprint_of_canonical(b"{}".to_vec());
    let Reservation::Acquired { lease } = store.reserve(scope(), "k-1".into(), fp.clone()).unwrap() else { panic!() };
    let stale = Lease { fence: lease.fence - 1, ..lease.clone() };
    assert_eq!(store.complete(stale, b"x".to_vec()).unwrap_err().code(), idemdb::ErrorCode::StaleLease);
    store.fail(lease, Failure::Uncertain).unwrap();
    assert_eq!(
        store.reserve(scope(), "k-1".into(), fp).unwrap(),
        Reservation::NeedsReconciliation { cause: "reported".into() }
    );
    assert_eq!(store.get(scope(), "k-1".into()).unwrap().map(|r| r.state), Some("uncertain".into()));
}

#[test]
fn bad_input_is_a_coded_error() {
    let store = IdemStore::in_memory().unwrap();
    let err = store.reserve(scope(), String::new(), fingerprint_of_canonical(vec![])).unwrap_err();
    assert_eq!(err.code(), idemdb::ErrorCode::InvalidKey);
    let err = store.reserve(scope(), "k".into(), "abc".into()).unwrap_err();
    assert_eq!(err.code(), idemdb::ErrorCode::InvalidArgument);
    let err = Canonicalizer::new(vec!["no-slash".into()], vec![], None).unwrap_err();
    assert_eq!(err.code(), idemdb::ErrorCode::InvalidArgument);
    let canon = Canonicalizer::new(vec![], vec![], None).unwrap();
    assert_eq!(canon.fingerprint(b"{oops".to_vec()).unwrap_err().code(), idemdb::ErrorCode::InvalidRequest);
    assert_eq!(error_codes().len(), idemdb::ErrorCode::ALL.len());
}

#[test]
fn close_makes_every_call_a_closed_error_and_releases_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.idemdb").display().to_string();
    let store = IdemStore::open(path.clone()).unwrap();
    assert_eq!(IdemStore::open(path.clone()).unwrap_err().code(), idemdb::ErrorCode::StoreBusy);
    store.close();
    store.close();
    assert!(store.is_closed());
    assert_eq!(store.pending_intents().unwrap_err().code(), idemdb::ErrorCode::Closed);
    assert_eq!(pollster::block_on(store.pending_intents_async()).unwrap_err().code(), idemdb::ErrorCode::Closed);
    let again = IdemStore::open(path).unwrap();
    assert!(again.pending_intents().unwrap().is_empty());
}

#[test]
fn the_async_forms_answer_as_the_blocking_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.idemdb").display().to_string();
    let store = pollster::block_on(open_store_async(path)).unwrap();
    let canon = Canonicalizer::new(vec![], vec![], None).unwrap();
    let fp = canon.fingerprint(b"{\"n\":1}".to_vec()).unwrap();
    pollster::block_on(async {
        let Reservation::Acquired { lease } = store.reserve_async(scope(), "k".into(), fp.clone()).await.unwrap()
        else {
            panic!()
        };
        store.complete_async(lease, b"r".to_vec()).await.unwrap();
        let replay = store.reserve_async(scope(), "k".into(), fp.clone()).await.unwrap();
        assert_eq!(replay, Reservation::Replay { outcome: "completed".into(), body: b"r".to_vec() });
        store.create_intent_async(scope(), "i".into(), b"{}".to_vec(), canon.clone()).await.unwrap();
        assert_eq!(store.pending_intents_async().await.unwrap().len(), 1);
        store.abandon_intent_async(scope(), "i".into(), "no".into()).await.unwrap();
        assert!(store.pending_intents_async().await.unwrap().is_empty());
    });
}

#[test]
fn an_empty_path_is_refused_before_anything_is_created() {
    for path in ["", "a\0b"] {
        let err = IdemStore::open(path.into()).unwrap_err();
        assert_eq!((err.code(), err.transient()), (idemdb::ErrorCode::InvalidArgument, false), "{path:?}");
    }
    let err = pollster::block_on(open_store_async(String::new())).unwrap_err();
    assert_eq!(err.code(), idemdb::ErrorCode::InvalidArgument);
}

#[test]
fn statuses_and_headers_that_http_cannot_carry_are_refused() {
    let store = IdemStore::in_memory().unwrap();
    let canon = Canonicalizer::new(vec![], vec![], None).unwrap();
    store.create_intent(scope(), "k".into(), b"{}".to_vec(), canon).unwrap();
    let response = |status, name: &str, value: &str| IntentResponse {
        status,
        headers: vec![Header { name: name.into(), value: value.into() }],
        body: vec![],
    };
    for status in [0, 99, 600, 999] {
        let err = store.record_attempt(scope(), "k".into(), AttemptOutcome::Status { code: status }).unwrap_err();
        assert_eq!(err.code(), idemdb::ErrorCode::InvalidArgument, "{status}");
        let err = store.record_response(scope(), "k".into(), response(status, "a", "b")).unwrap_err();
        assert_eq!(err.code(), idemdb::ErrorCode::InvalidArgument, "{status}");
    }
    for (name, value) in [("a", "x\r\ny: z"), ("a", "\n"), ("a", "\0"), ("a b", "v"), ("a:", "v"), ("", "v")] {
        let err = store.record_response(scope(), "k".into(), response(200, name, value)).unwrap_err();
        assert_eq!(err.code(), idemdb::ErrorCode::InvalidArgument, "{name:?}: {value:?}");
    }
    assert_eq!(store.intent(scope(), "k".into()).unwrap().map(|i| (i.state, i.attempts)), Some(("pending".into(), 0)));
    let done = store.record_response(scope(), "k".into(), response(599, "content-type", "text/plain;\tx")).unwrap();
    assert_eq!(done.state, "completed");
}

#[test]
fn an_expired_lease_is_listed_and_reconciled() {
    let dir = tempfile::tempdir().unwrap();
    let options = StoreOptions {
        policies: [("pay".to_string(), PolicySettings { lease_ttl_ms: Some(1), ..PolicySettings::default() })].into(),
        ..StoreOptions::default()
    };
    let store = IdemStore::open_with(dir.path().join("s.idemdb").display().to_string(), options).unwrap();
    assert_eq!(store.policy("pay".into()).unwrap().lease_ttl_ms, Some(1));
    let fp = fingerprint_of_canonical(b"{}".to_vec());
    let Reservation::Acquired { .. } = store.reserve(scope(), "k".into(), fp.clone()).unwrap() else { panic!() };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while store.records_needing_reconciliation().unwrap().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let listed = store.records_needing_reconciliation().unwrap();
    assert_eq!(
        listed.iter().map(|r| (r.key.as_str(), r.record.state.as_str())).collect::<Vec<_>>(),
        [("k", "in_progress")]
    );
    let err = store.reconcile(scope(), "k".into(), Resolution::Released, "guess".into()).unwrap_err();
    assert_eq!(err.code(), idemdb::ErrorCode::UnknownName);
    pollster::block_on(store.reconcile_async(
        scope(),
        "k".into(),
        Resolution::Completed { body: b"r".to_vec() },
        "operator".into(),
    ))
    .unwrap();
    assert_eq!(
        store.reserve(scope(), "k".into(), fp).unwrap(),
        Reservation::Replay { outcome: "completed".into(), body: b"r".to_vec() }
    );
    assert!(store.records_needing_reconciliation().unwrap().is_empty());
    assert!(!store.journal_recovery().unwrap().unwrap().discarded);
}

#[test]
fn a_renewed_lease_completes_and_bad_policies_are_refused() {
    let store = IdemStore::in_memory().unwrap();
    let Reservation::Acquired { lease } = store.reserve(scope(), "k".into(), fingerprint_of_canonical(vec![])).unwrap()
    else {
        panic!()
    };
    let renewed = pollster::block_on(store.renew_async(lease.clone())).unwrap();
    assert_eq!((renewed.fence, renewed.attempt), (lease.fence, lease.attempt));
    assert!(renewed.expires_at_ms >= lease.expires_at_ms);
    store.complete(renewed.clone(), b"x".to_vec()).unwrap();
    assert_eq!(store.renew(renewed).unwrap_err().code(), idemdb::ErrorCode::WrongState);
    let bad = |policy: PolicySettings| {
        let options = StoreOptions { default_policy: Some(policy), ..StoreOptions::default() };
        IdemStore::open_with("unused.idemdb".into(), options).unwrap_err().code()
    };
    assert_eq!(
        bad(PolicySettings { lease_ttl_ms: Some(0), ..PolicySettings::default() }),
        idemdb::ErrorCode::InvalidPolicy
    );
    let rule = PolicySettings { expired_lease: Some("sometimes".into()), ..PolicySettings::default() };
    assert_eq!(bad(rule), idemdb::ErrorCode::UnknownName);
}
