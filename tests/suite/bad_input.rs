//! The bad-input table: every kind of bad input gets a typed error, nothing already stored is
//! lost or changed (snapshots before and after), and nothing panics.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use idemdb::redb::{self, ReadableDatabase, TableDefinition};
use idemdb::{
    CanonicalError, Canonicalizer, Corrupt, Error, Failure, IdempotencyKey, KeyError, ManualClock, Normaliser,
    OpenError, OutcomeClass, Policy, PolicyError, Refusal, Reservation, Reserve, Resolution, STORE_FORMAT, Scope,
    ScopedKey, StateKind, Store, StoreBuilder, TransitionError,
};
use idemdb_core::{DecodeError, IdentityPart, MAX_KEY_LEN, MAX_SCOPE_PART_LEN};
use idemdb_tests::{T0, fp, key, scope, snapshot};

const META: TableDefinition<&str, &[u8]> = TableDefinition::new("idemdb_meta");
const RECORDS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idemdb_records");
const CHARGE: &str = "create_payment";
/// An operation with a 16-byte result limit.
const TINY: &str = "tiny_result";
const TINY_LIMIT: usize = 16;

fn builder(clock: &ManualClock) -> StoreBuilder {
    Store::builder()
        .policy(TINY, Policy::default().with_max_result_bytes(TINY_LIMIT))
        .clock(clock.clone())
        .secret_seed([3; 32])
}

/// A store holding one record in each of several states: `done` (completed), `declined`
/// (failed), `running` (in progress), `unsure` (uncertain).
fn populated(store: &Store) {
    let scope = scope("acme", CHARGE);
    let lease = |name: &str| match store.reserve(Reserve::new(&scope, &key(name), &fp(1))).expect("reserve") {
        Reservation::Acquired(lease) => lease,
        other => panic!("set-up: {other:?}"),
    };
    store.complete(&lease("done"), b"ok".to_vec()).expect("complete");
    store.fail(&lease("declined"), Failure::Definitive(b"declined".to_vec())).expect("fail");
    lease("running");
    store.fail(&lease("unsure"), Failure::Uncertain).expect("fail");
}

/// A closed store file with [`populated`] records.
fn populated_file(dir: &Path) -> PathBuf {
    let path = dir.join("store.idemdb");
    let store = builder(&ManualClock::new(T0)).open(&path).expect("create");
    populated(&store);
    drop(store);
    path
}

fn open(path: &Path) -> Result<Store, OpenError> {
    builder(&ManualClock::new(T0)).open(path)
}

fn key_error<T: std::fmt::Debug>(result: Result<T, KeyError>) -> KeyError {
    result.expect_err("refused")
}

fn refused<T: std::fmt::Debug>(result: Result<T, Error>) -> TransitionError {
    match result {
        Err(Error::Refused(Refusal::Transition(error))) => error,
        other => panic!("expected a refused transition, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Keys, scopes, correlation ids.

#[test]
fn invalid_idempotency_keys_are_refused_with_typed_errors_and_the_store_is_unchanged() {
    let store = builder(&ManualClock::new(T0)).in_memory().expect("store");
    populated(&store);
    let before = snapshot(&store);

    let part = IdentityPart::Key;
    let cases: Vec<(String, KeyError)> = vec![
        (String::new(), KeyError::Empty { part }),
        ("k".repeat(256), KeyError::TooLong { part, len: 256, max: MAX_KEY_LEN }),
        ("clé-1".into(), KeyError::InvalidByte { part, byte: 0xc3, offset: 2 }),
        ("order 842".into(), KeyError::InvalidByte { part, byte: b' ', offset: 5 }),
        ("order\t842".into(), KeyError::InvalidByte { part, byte: b'\t', offset: 5 }),
        ("order\n".into(), KeyError::InvalidByte { part, byte: b'\n', offset: 5 }),
        ("order\u{0}".into(), KeyError::InvalidByte { part, byte: 0, offset: 5 }),
        ("order\u{7f}".into(), KeyError::InvalidByte { part, byte: 0x7f, offset: 5 }),
    ];
    for (text, expected) in cases {
        assert_eq!(key_error(IdempotencyKey::new(text.clone())), expected, "{text:?}");
        // A key arriving in a JSON body is validated the same way.
        let json = serde_json::to_string(&text).expect("json string");
        assert!(serde_json::from_str::<IdempotencyKey>(&json).is_err(), "{text:?} through serde");
    }
    // The edges of what is accepted.
    assert!(IdempotencyKey::new("k".repeat(MAX_KEY_LEN)).is_ok());
    assert!(IdempotencyKey::new("!~").is_ok());
    assert_eq!(snapshot(&store), before);
}

#[test]
fn invalid_tenants_and_operations_are_refused_with_typed_errors() {
    let long = "t".repeat(MAX_SCOPE_PART_LEN + 1);
    for (part, make) in [
        (IdentityPart::Tenant, (|value: &str| Scope::new(value, "op")) as fn(&str) -> Result<Scope, KeyError>),
        (IdentityPart::Operation, |value: &str| Scope::new("acme", value)),
    ] {
        assert_eq!(key_error(make("")), KeyError::Empty { part });
        assert_eq!(key_error(make(&long)), KeyError::TooLong { part, len: 129, max: MAX_SCOPE_PART_LEN });
        assert_eq!(key_error(make("acmé")), KeyError::InvalidByte { part, byte: 0xc3, offset: 3 });
        assert_eq!(key_error(make("ac\nme")), KeyError::InvalidByte { part, byte: b'\n', offset: 2 });
        assert_eq!(key_error(make("acme\u{0}")), KeyError::InvalidByte { part, byte: 0, offset: 4 });
        // Scope parts, unlike keys, may hold spaces; 128 bytes is the edge.
        assert!(make("acme corp").is_ok());
        assert!(make(&long[..MAX_SCOPE_PART_LEN]).is_ok());
    }
}

#[test]
fn malformed_identity_bytes_are_refused_on_decode() {
    let good = ScopedKey::new(scope("acme", CHARGE), key("k-1")).encode();
    assert_eq!(ScopedKey::decode(&good).expect("decode").key.as_str(), "k-1");
    let mut trailing = good.clone();
    trailing.push(b'x');
    let mut spaced = good.clone();
    let last = spaced.len() - 1;
    spaced[last] = b' ';
    let cases: Vec<(&str, Vec<u8>, KeyError)> = vec![
        ("empty", Vec::new(), KeyError::MalformedEncoding),
        ("truncated", good[..good.len() - 1].to_vec(), KeyError::MalformedEncoding),
        ("trailing byte", trailing, KeyError::MalformedEncoding),
        ("not UTF-8", vec![1, 0xff, 1, b'o', 1, b'k'], KeyError::MalformedEncoding),
        ("empty tenant", vec![0, 1, b'o', 1, b'k'], KeyError::Empty { part: IdentityPart::Tenant }),
        ("space in key", spaced, KeyError::InvalidByte { part: IdentityPart::Key, byte: b' ', offset: 2 }),
    ];
    for (name, bytes, expected) in cases {
        assert_eq!(key_error(ScopedKey::decode(&bytes)), expected, "{name}");
    }
}

#[test]
fn an_invalid_correlation_id_is_refused_where_the_request_is_built() {
    let store = builder(&ManualClock::new(T0)).in_memory().expect("store");
    populated(&store);
    let (scope, fresh, fingerprint) = (scope("acme", CHARGE), key("fresh"), fp(1));
    let part = IdentityPart::Correlation;
    let long = "c".repeat(129);
    for (correlation, expected) in [
        ("", KeyError::Empty { part }),
        (long.as_str(), KeyError::TooLong { part, len: 129, max: 128 }),
        ("req 1", KeyError::InvalidByte { part, byte: b' ', offset: 3 }),
        ("req\u{1b}[31m", KeyError::InvalidByte { part, byte: 0x1b, offset: 3 }),
    ] {
        // No store call can take an unchecked id: the request refuses it when it is given.
        let refused = Reserve::new(&scope, &fresh, &fingerprint).traced(correlation);
        assert_eq!(refused.err(), Some(expected), "{correlation:?}");
        // Inside a transaction the refusal is the store's error, and nothing is written.
        let inside = store.write(|txn| txn.reserve(Reserve::new(&scope, &fresh, &fingerprint).traced(correlation)?));
        assert!(matches!(inside, Err(Error::Refused(Refusal::Key(_)))), "{correlation:?}: {inside:?}");
    }
    assert_eq!(store.get(&scope, &fresh).expect("get"), None, "nothing reserved");
    let traced = Reserve::new(&scope, &fresh, &fingerprint).traced("req-1").expect("a valid id");
    assert!(matches!(store.reserve(traced), Ok(Reservation::Acquired(_))));
    let fresh_2 = key("fresh-2");
    let inside = store.write(|txn| txn.reserve(Reserve::new(&scope, &fresh_2, &fingerprint).traced("req-2")?));
    assert!(matches!(inside, Ok(Reservation::Acquired(_))), "{inside:?}");
}

// ---------------------------------------------------------------------------------------------
// Results over the limit.

#[test]
fn a_result_over_the_default_limit_is_refused_and_the_record_stays_in_progress() {
    let store = builder(&ManualClock::new(T0)).in_memory().expect("store");
    let (scope, key) = (scope("acme", CHARGE), key("big"));
    let limit = idemdb::Policy::default().max_result_bytes();
    assert_eq!(limit, 1024 * 1024);
    let Reservation::Acquired(lease) = store.reserve(Reserve::new(&scope, &key, &fp(1))).expect("reserve") else {
        panic!("lease")
    };
    let before = store.get(&scope, &key).expect("get");

    let too_large = TransitionError::ResultTooLarge { len: limit + 1, max: limit };
    assert_eq!(refused(store.complete(&lease, vec![7; limit + 1])), too_large);
    assert_eq!(refused(store.fail(&lease, Failure::Definitive(vec![7; limit + 1]))), too_large);
    assert_eq!(store.get(&scope, &key).expect("get"), before, "still in progress, unchanged");

    // The limit itself is accepted, and replayed byte for byte.
    store.complete(&lease, vec![7; limit]).expect("complete at the limit");
    assert_eq!(
        store.reserve(Reserve::new(&scope, &key, &fp(1))).expect("reserve"),
        Reservation::Replay { outcome: OutcomeClass::Completed, body: vec![7; limit] }
    );
}

#[test]
fn a_result_over_an_operation_limit_is_refused_by_every_transition_that_stores_one() {
    let clock = ManualClock::new(T0);
    let store = builder(&clock).in_memory().expect("store");
    let (scope, key) = (scope("acme", TINY), key("small"));
    let Reservation::Acquired(lease) = store.reserve(Reserve::new(&scope, &key, &fp(1))).expect("reserve") else {
        panic!("lease")
    };
    let oversized = vec![b'x'; TINY_LIMIT + 1];
    let too_large = TransitionError::ResultTooLarge { len: TINY_LIMIT + 1, max: TINY_LIMIT };

    let in_progress = store.get(&scope, &key).expect("get");
    assert_eq!(refused(store.complete(&lease, oversized.clone())), too_large);
    assert_eq!(refused(store.fail(&lease, Failure::Definitive(oversized.clone()))), too_large);
    assert_eq!(store.get(&scope, &key).expect("get"), in_progress);

    store.fail(&lease, Failure::Uncertain).expect("uncertain");
    let uncertain = store.get(&scope, &key).expect("get");
    assert_eq!(
        refused(store.reconcile(
            &scope,
            &key,
            Resolution::Completed(oversized.clone()),
            idemdb::ResolutionCause::Operator
        )),
        too_large
    );
    assert_eq!(
        refused(store.reconcile(&scope, &key, Resolution::Failed(oversized), idemdb::ResolutionCause::Operator)),
        too_large
    );
    assert_eq!(store.get(&scope, &key).expect("get"), uncertain, "still uncertain, unchanged");

    store
        .reconcile(&scope, &key, Resolution::Completed(vec![b'x'; TINY_LIMIT]), idemdb::ResolutionCause::Operator)
        .expect("at the limit");
    assert_eq!(store.get(&scope, &key).expect("get").expect("record").state.kind(), StateKind::Completed);
}

// ---------------------------------------------------------------------------------------------
// Request bodies.

#[test]
fn bodies_that_cannot_be_canonicalised_get_typed_errors() {
    let canon = Canonicalizer::new()
        .max_body_bytes(64)
        .normalise("/currency", Normaliser::Uppercase)
        .expect("pointer")
        .normalise("/amount", Normaliser::DecimalAmount)
        .expect("pointer");
    let over = format!("{{\"memo\":\"{}\"}}", "m".repeat(60));
    assert_eq!(over.len(), 71);
    assert_eq!(canon.fingerprint(over.as_bytes()), Err(CanonicalError::BodyTooLarge { len: 71, max: 64 }));

    let invalid_json: [&[u8]; 6] = [b"", b"{", b"{\"a\":1} x", b"{\"a\":1}{\"b\":2}", b"{'a':1}", b"\xff\xfe"];
    for body in invalid_json {
        assert!(
            matches!(canon.fingerprint(body), Err(CanonicalError::InvalidJson { .. })),
            "{:?}: {:?}",
            String::from_utf8_lossy(body),
            canon.fingerprint(body)
        );
    }
    let not_i_json: [&[u8]; 3] = [br#"{"a":1,"a":2}"#, br#"{"a":"\ud800"}"#, br#"{"a":1e400}"#];
    for body in not_i_json {
        assert!(
            matches!(canon.fingerprint(body), Err(CanonicalError::NotCanonicalisable { .. })),
            "{:?}: {:?}",
            String::from_utf8_lossy(body),
            canon.fingerprint(body)
        );
    }
    let deep = format!("{}{}", "[".repeat(65), "]".repeat(65));
    let deep_canon = Canonicalizer::new();
    assert!(matches!(deep_canon.fingerprint(deep.as_bytes()), Err(CanonicalError::TooDeep { .. })));
    assert!(deep_canon.fingerprint(format!("{}{}", "[".repeat(64), "]".repeat(64)).as_bytes()).is_ok());

    assert!(matches!(
        canon.fingerprint(br#"{"currency":5}"#),
        Err(CanonicalError::NormaliserTypeMismatch { ref pointer, found: "number", .. }) if pointer == "/currency"
    ));
    assert!(matches!(
        canon.fingerprint(br#"{"amount":"1e3"}"#),
        Err(CanonicalError::InvalidDecimal { ref pointer, .. }) if pointer == "/amount"
    ));
    assert!(canon.fingerprint(br#"{"amount":"10.50","currency":"brl"}"#).is_ok());
}

// ---------------------------------------------------------------------------------------------
// Files that are not (this version's) stores.

/// Deterministic noise (xorshift64).
fn noise(len: usize, mut state: u64) -> Vec<u8> {
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

/// Opens `path`, expects a refusal, and checks the file's bytes were not touched.
fn open_refused(path: &Path) -> OpenError {
    let before = fs::read(path).expect("read file");
    let error = match open(path) {
        Err(error) => error,
        Ok(store) => panic!("{} opened as a store: {store:?}", path.display()),
    };
    assert_eq!(fs::read(path).expect("read file"), before, "a refused open must not modify {}", path.display());
    error
}

#[test]
fn a_file_of_random_bytes_is_not_a_store_and_is_left_untouched() {
    let dir = tempfile::tempdir().expect("dir");
    for (n, len) in [(0, 100), (1, 4096), (2, 65_536), (3, 1 << 20)] {
        let path = dir.path().join(format!("noise-{n}.bin"));
        fs::write(&path, noise(len, 0x9e37_79b9_7f4a_7c15 + n)).expect("write");
        let error = open_refused(&path);
        assert!(matches!(error, OpenError::NotAStore { .. }), "{len} random bytes: {error:?}");
    }
}

#[test]
fn a_zero_filled_file_is_not_a_store_and_is_left_untouched() {
    let dir = tempfile::tempdir().expect("dir");
    for len in [1, 512, 4096, 65_536] {
        let path = dir.path().join(format!("zeros-{len}.bin"));
        fs::write(&path, vec![0; len]).expect("write");
        let error = open_refused(&path);
        assert!(matches!(error, OpenError::NotAStore { .. }), "{len} zero bytes: {error:?}");
    }
}

#[test]
fn a_truncated_store_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().expect("dir");
    let original = populated_file(dir.path());
    let bytes = fs::read(&original).expect("read");
    // Shorter than redb's header (which begins with a valid magic number), a few pages, half,
    // all but one byte. (An empty file counts as "no store yet" and is created.)
    for len in [1, 9, 16, 100, 511, 512, 4096, bytes.len() / 2, bytes.len() - 1] {
        let path = dir.path().join(format!("truncated-{len}.idemdb"));
        fs::write(&path, &bytes[..len]).expect("write");
        let error = open_refused(&path);
        assert!(matches!(error, OpenError::NotAStore { .. }), "truncated to {len} of {}: {error:?}", bytes.len());
    }
    // The intact store still opens with every record.
    let store = open(&original).expect("open");
    assert_eq!(snapshot(&store).len(), 4);
}

#[test]
fn a_redb_file_of_another_application_is_refused_as_foreign_and_its_data_kept() {
    const APP: TableDefinition<&str, u64> = TableDefinition::new("app_stuff");
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("other.redb");
    {
        let db = redb::Database::create(&path).expect("redb");
        let tx = db.begin_write().expect("write");
        tx.open_table(APP).expect("table").insert("answer", 42).expect("insert");
        tx.commit().expect("commit");
    }
    match open(&path) {
        Err(OpenError::Foreign { tables }) => assert!(tables.contains("app_stuff"), "{tables}"),
        other => panic!("expected a foreign-file refusal, got {other:?}"),
    }
    let db = redb::Database::open(&path).expect("still a redb file");
    let read = db.begin_read().expect("read");
    let value = read.open_table(APP).expect("table").get("answer").expect("get").map(|v| v.value());
    assert_eq!(value, Some(42), "the application's data is intact");
    let tables: Vec<String> =
        read.list_tables().expect("tables").map(|t| redb::TableHandle::name(&t).to_string()).collect();
    assert_eq!(tables, ["app_stuff"], "no idemdb table was added");

    // A redb file with no tables at all is not adopted either.
    let empty = dir.path().join("empty.redb");
    drop(redb::Database::create(&empty).expect("redb"));
    assert!(matches!(open(&empty), Err(OpenError::Foreign { .. })));
}

/// Promise 8 ("nothing already stored is lost") read strictly: idemdb must not write to a file
/// it refuses. Today it does: `StoreBuilder::open` opens the file read-write with redb before it
/// reads the metadata, and redb's close then rewrites header and allocator pages (about 14 KB of
/// a small foreign file, 2 KB of a newer-format store change). The data stays readable (see the
/// two tests above and below), but an older build writing into a newer build's file, or into
/// another application's database, is what the refusal exists to prevent. Fix: inspect the
/// metadata through `redb::Builder::open_read_only` first and refuse before any read-write open.
#[test]
fn a_refused_open_of_a_foreign_or_newer_format_file_does_not_write_to_it() {
    let dir = tempfile::tempdir().expect("dir");
    let foreign = dir.path().join("other.redb");
    {
        const APP: TableDefinition<&str, u64> = TableDefinition::new("app_stuff");
        let db = redb::Database::create(&foreign).expect("redb");
        let tx = db.begin_write().expect("write");
        tx.open_table(APP).expect("table").insert("answer", 42).expect("insert");
        tx.commit().expect("commit");
    }
    assert!(matches!(open_refused(&foreign), OpenError::Foreign { .. }));

    let newer = populated_file(dir.path());
    set_meta(&newer, "format", Some(&(STORE_FORMAT + 1).to_be_bytes()));
    assert!(matches!(open_refused(&newer), OpenError::NewerFormat { .. }));
}

/// Rewrites one meta entry of a closed store with redb directly.
fn set_meta(path: &Path, name: &str, value: Option<&[u8]>) {
    let db = redb::Database::open(path).expect("redb");
    let tx = db.begin_write().expect("write");
    {
        let mut meta = tx.open_table(META).expect("meta");
        match value {
            Some(value) => meta.insert(name, value).expect("insert"),
            None => meta.remove(name).expect("remove"),
        };
    }
    tx.commit().expect("commit");
}

#[test]
fn a_store_of_a_newer_format_is_refused_with_a_message_saying_so_and_kept_intact() {
    let dir = tempfile::tempdir().expect("dir");
    let path = populated_file(dir.path());

    set_meta(&path, "format", Some(&(STORE_FORMAT + 1).to_be_bytes()));
    let error = open(&path).expect_err("newer format");
    assert!(
        matches!(error, OpenError::NewerFormat { found, supported } if found == STORE_FORMAT + 1 && supported == STORE_FORMAT),
        "{error:?}"
    );
    assert!(error.to_string().contains("newer"), "{error}");

    set_meta(&path, "format", Some(&(STORE_FORMAT - 1).to_be_bytes()));
    assert!(matches!(open(&path), Err(OpenError::OlderFormat { found: 0, .. })));
    set_meta(&path, "format", Some(b"\x01"));
    assert!(matches!(open(&path), Err(OpenError::CorruptMeta(_))));
    set_meta(&path, "magic", Some(b"nope"));
    assert!(matches!(open(&path), Err(OpenError::Foreign { .. })));

    // Nothing was lost: with the metadata restored, every record is there.
    set_meta(&path, "magic", Some(b"idemdb"));
    set_meta(&path, "format", Some(&STORE_FORMAT.to_be_bytes()));
    let store = open(&path).expect("open");
    let records = snapshot(&store);
    assert_eq!(records.len(), 4);
    assert_eq!(
        store.reserve(Reserve::new(&scope("acme", CHARGE), &key("done"), &fp(1))).expect("reserve"),
        Reservation::Replay { outcome: OutcomeClass::Completed, body: b"ok".to_vec() }
    );
}

#[test]
fn opening_a_store_that_is_already_open_is_refused_and_the_first_handle_keeps_working() {
    let dir = tempfile::tempdir().expect("dir");
    let path = populated_file(dir.path());
    let first = open(&path).expect("first handle");
    let before = snapshot(&first);
    assert!(matches!(open(&path), Err(OpenError::AlreadyOpen)));
    assert_eq!(snapshot(&first), before);
    assert!(matches!(
        first.reserve(Reserve::new(&scope("acme", CHARGE), &key("new"), &fp(1))),
        Ok(Reservation::Acquired(_))
    ));
    drop(first);
    let second = open(&path).expect("opens once the first handle is gone");
    assert_eq!(snapshot(&second).len(), 5);
}

#[test]
fn an_invalid_policy_is_refused_before_any_file_is_created() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("never.idemdb");
    let clock = ManualClock::new(T0);
    let cases = [
        (
            Store::builder().default_policy(Policy::default().with_lease_ttl(Duration::ZERO)),
            None,
            PolicyError::ZeroLeaseTtl,
        ),
        (
            Store::builder().default_policy(Policy::default().with_lease_ttl(Duration::from_micros(999))),
            None,
            PolicyError::ZeroLeaseTtl,
        ),
        (
            Store::builder().policy("refund", Policy::default().with_max_result_bytes(0)),
            Some("refund".to_string()),
            PolicyError::ZeroResultLimit,
        ),
    ];
    for (builder, operation, source) in cases {
        match builder.clock(clock.clone()).open(&path) {
            Err(OpenError::Policy { operation: found, source: error }) => {
                assert_eq!((found, error), (operation, source));
            }
            other => panic!("expected a policy error, got {other:?}"),
        }
        assert!(!path.exists(), "no file is created for a refused configuration");
    }
    let in_memory = Store::builder().default_policy(Policy::default().with_lease_ttl(Duration::ZERO)).in_memory();
    assert!(matches!(in_memory, Err(OpenError::Policy { source: PolicyError::ZeroLeaseTtl, .. })));
}

// ---------------------------------------------------------------------------------------------
// Damaged records.

fn corrupt_record(path: &Path, scoped: &ScopedKey, value: &[u8]) {
    let db = redb::Database::open(path).expect("redb");
    let tx = db.begin_write().expect("write");
    tx.open_table(RECORDS).expect("records").insert(scoped.encode().as_slice(), value).expect("insert");
    tx.commit().expect("commit");
}

#[test]
fn a_corrupt_record_is_a_typed_error_and_the_other_records_stay_readable() {
    let dir = tempfile::tempdir().expect("dir");
    let path = populated_file(dir.path());
    let charge = scope("acme", CHARGE);
    let damaged = [
        ("garbage", key("done"), vec![1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]),
        ("empty", key("declined"), Vec::new()),
        ("newer", key("unsure"), vec![2, 0, 0]),
    ];
    for (_, key, value) in &damaged {
        corrupt_record(&path, &ScopedKey::new(charge.clone(), key.clone()), value);
    }
    let clock = ManualClock::new(T0);
    let mut store = builder(&clock).open(&path).expect("a damaged record does not stop the store from opening");

    for (what, key, _) in &damaged {
        for result in
            [store.reserve(Reserve::new(&charge, key, &fp(1))), store.reserve(Reserve::new(&charge, key, &fp(2)))]
        {
            assert!(matches!(result, Err(Error::Corrupt(Corrupt { what: "record", .. }))), "{what}: {result:?}");
        }
        assert!(matches!(store.get(&charge, key), Err(Error::Corrupt(_))), "{what}");
        assert!(
            matches!(
                store.reconcile(&charge, key, Resolution::Released, idemdb::ResolutionCause::Operator),
                Err(Error::Corrupt(_))
            ),
            "{what}"
        );
    }
    match store.get(&charge, &key("declined")) {
        Err(Error::Corrupt(Corrupt { source, .. })) => assert_eq!(source, DecodeError::Empty),
        other => panic!("{other:?}"),
    }
    match store.get(&charge, &key("unsure")) {
        Err(Error::Corrupt(Corrupt { source, .. })) => {
            assert_eq!(source, DecodeError::NewerFormat { found: 2, supported: 1 })
        }
        other => panic!("{other:?}"),
    }

    // The undamaged record and new keys work as before.
    let running = store.get(&charge, &key("running")).expect("get").expect("record");
    assert_eq!(running.state.kind(), StateKind::InProgress);
    assert!(matches!(
        store.reserve(Reserve::new(&charge, &key("running"), &fp(1))),
        Ok(Reservation::InProgress { .. })
    ));
    let Ok(Reservation::Acquired(new)) = store.reserve(Reserve::new(&charge, &key("new"), &fp(1))) else {
        panic!("new key acquires")
    };
    store.complete(&new, b"ok".to_vec()).expect("complete beside damaged records");

    // A listing stops at the damage with the same typed error (documented). A purge steps over
    // damaged records, counts them, and still applies retention to the others.
    assert!(matches!(store.list(&idemdb::ListFilter::default()), Err(Error::Corrupt(_))));
    clock.advance(idemdb::Policy::default().response_ttl() + Duration::from_secs(1));
    let before_purge = store.get(&charge, &key("running")).expect("get");
    let purged = store.purge_expired(100).expect("purge steps over damaged records");
    assert!(purged.corrupt >= 1, "{purged:?}");
    assert_eq!(purged.tombstoned, 1, "the healthy due record still got its tombstone: {purged:?}");
    let new_state = store.get(&charge, &key("new")).expect("get").expect("record").state.kind();
    assert_eq!(new_state, StateKind::Tombstone);
    assert_eq!(store.get(&charge, &key("running")).expect("get"), before_purge);

    // Verification names the damage instead of failing or panicking.
    let report = store.verify().expect("verify runs");
    assert!(!report.is_ok());
    let damaged_records = report.problems.iter().filter(|p| p.table == "idemdb_records").count();
    assert_eq!(damaged_records, 3, "{report:?}");
}

/// Every 97th byte of a real store file, flipped one at a time.
fn flipped_copies(dir: &Path) -> impl Iterator<Item = (usize, PathBuf)> {
    let original = populated_file(dir);
    let bytes = fs::read(&original).expect("read");
    let dir = dir.to_path_buf();
    (0..bytes.len()).step_by(97).map(move |offset| {
        let mut damaged = bytes.clone();
        damaged[offset] ^= 0x5a;
        let path = dir.join(format!("flipped-{offset}.idemdb"));
        // One damaged copy at a time: each step removes the previous copy and the files its
        // open left beside it (journal, lock), so the test needs the disk of two stores, not 800.
        let previous = format!("flipped-{}.idemdb", offset.wrapping_sub(97));
        for entry in fs::read_dir(&dir).expect("list").flatten() {
            if entry.file_name().to_string_lossy().starts_with(&previous) {
                let _ = fs::remove_file(entry.path());
            }
        }
        fs::write(&path, &damaged).expect("write");
        (offset, path)
    })
}

/// A damaged byte anywhere in the file: the open refuses with a typed error or succeeds, and
/// an opened store answers reads (get, list, and reserves that find a record) with records or
/// typed errors. Never a panic. (Audit is off so that the reads write nothing. Closing such a
/// store can panic inside redb: that is the next, ignored, test.)
#[test]
fn a_store_with_a_damaged_byte_never_panics_on_open_or_read() {
    use std::panic::{AssertUnwindSafe, catch_unwind};
    let dir = tempfile::tempdir().expect("dir");
    let (mut refused_open, mut opened) = (0, 0);
    for (offset, path) in flipped_copies(dir.path()) {
        let store = match catch_unwind(|| builder(&ManualClock::new(T0)).audit(false).open(&path)) {
            Err(_) => panic!("offset {offset}: opening a damaged file panicked"),
            // A flipped format byte reads as another format version: a typed refusal too.
            Ok(Err(
                OpenError::NotAStore { .. }
                | OpenError::Foreign { .. }
                | OpenError::CorruptMeta(_)
                | OpenError::NewerFormat { .. }
                | OpenError::OlderFormat { .. },
            )) => {
                refused_open += 1;
                continue;
            }
            Ok(Err(other)) => panic!("offset {offset}: an unexpected refusal: {other:?}"),
            Ok(Ok(store)) => store,
        };
        opened += 1;
        let reads = catch_unwind(AssertUnwindSafe(|| {
            let scope = scope("acme", CHARGE);
            for name in ["done", "declined", "running", "unsure"] {
                // A record, or a typed error; either is fine here.
                let _ = store.get(&scope, &key(name));
                let _ = store.reserve(Reserve::new(&scope, &key(name), &fp(1)));
            }
            let _ = store.list(&idemdb::ListFilter::default());
        }));
        assert!(reads.is_ok(), "offset {offset}: reading a damaged store panicked");
        // Known redb panic on close for some damaged files (see the next test).
        let _ = catch_unwind(AssertUnwindSafe(move || drop(store)));
    }
    assert!(refused_open > 0, "damage to the header is detected at open");
    assert!(opened > 0, "damage to unused space does not stop the store");
}

/// The first commit on some damaged files panics inside redb 4.6 (`AccessGuard::value`, "range
/// end index .. out of range for slice of length 4096", reached from
/// `WriteTransaction::commit` → `store_data_freed_pages` when a system-table page is damaged;
/// one of the 802 flips here). redb trusts page contents it has not checksummed. idemdb
/// reaches it from any write, from `Store::drop` (whose flush commits) and from redb's own
/// close (which commits allocator state): the panic happens in a destructor, which aborts the
/// process if it is already unwinding. idemdb's mitigation: `StoreBuilder::check_on_open`
/// (on by default) runs redb's integrity check, which checksums every page at open, so a
/// damaged file is repaired or refused before any write reaches the damaged page.
#[test]
fn a_write_or_close_of_a_store_with_a_damaged_byte_is_a_typed_error_not_a_panic() {
    use std::panic::{AssertUnwindSafe, catch_unwind};
    let dir = tempfile::tempdir().expect("dir");
    let mut panicked = Vec::new();
    for (offset, path) in flipped_copies(dir.path()) {
        let Ok(Ok(store)) = catch_unwind(|| open(&path)) else { continue };
        let write = catch_unwind(AssertUnwindSafe(|| {
            let _ = store.reserve(Reserve::new(&scope("acme", CHARGE), &key("brand-new"), &fp(1)));
        }));
        let close = catch_unwind(AssertUnwindSafe(move || drop(store)));
        if write.is_err() || close.is_err() {
            panicked.push((offset, write.is_err(), close.is_err()));
        }
    }
    assert!(panicked.is_empty(), "(offset, write panicked, close panicked): {panicked:?}");
}

/// `verify` exists to tell an operator what is wrong with a file. When redb's integrity check
/// finds a damaged page it returns an error (`Corrupted("Primary is corrupted despite 2-phase
/// commit")` for 69 of the 802 flips this test makes) and `Store::verify` passes it on with `?`,
/// so the operator gets no report, though `VerifyReport::storage_ok` exists for exactly this.
/// Fix: in `Store::verify`, turn `Err(redb::DatabaseError::Storage(StorageError::Corrupted(..)))`
/// (and other content errors) from `check_integrity` into `storage_ok: false` plus a `Problem`,
/// then check what can still be read.
#[test]
fn verify_reports_damage_found_by_the_integrity_check_instead_of_failing() {
    let dir = tempfile::tempdir().expect("dir");
    let mut failures = Vec::new();
    for (offset, path) in flipped_copies(dir.path()) {
        let Ok(mut store) = builder(&ManualClock::new(T0)).audit(false).open(&path) else { continue };
        if let Err(error) = store.verify() {
            failures.push((offset, error.to_string()));
        }
    }
    assert!(
        failures.is_empty(),
        "verify failed instead of reporting, at {} offsets: {:?}",
        failures.len(),
        failures.first()
    );
}

/// Regression: fences grew with `saturating_add`. A record whose fence was near `u64::MAX`
/// (an import accepted one) handed out the same fence twice, so a stale lease completed a
/// newer attempt. Such a record is refused, and at the largest fence a reservation fails with
/// a typed error instead of reusing a fence.
#[test]
fn fences_never_saturate_so_a_stale_lease_cannot_complete_a_newer_attempt() {
    let store = builder(&ManualClock::new(T0)).in_memory().expect("store");
    let (scope, key) = (scope("acme", CHARGE), key("order-842"));
    let scoped = ScopedKey::new(scope.clone(), key.clone());
    let released = |fence: u64| idemdb::Record {
        fingerprint: fp(1),
        state: idemdb::State::Released { forget_at: idemdb::Timestamp::MAX },
        fence,
        attempts: 1,
        created_at: idemdb::Timestamp::from_millis(T0),
        updated_at: idemdb::Timestamp::from_millis(T0),
    };
    let imported = store.write(|txn| txn.import(&scoped, &released(u64::MAX - 1), false));
    assert!(
        matches!(imported, Err(Error::Refused(Refusal::InvalidRecord(_)))),
        "a fence near u64::MAX is refused: {imported:?}"
    );
    assert_eq!(store.get(&scope, &key).expect("get"), None, "and nothing was written");

    // At the largest fence a record may hold, the next lease has no fence left.
    store.write(|txn| txn.import(&scoped, &released(idemdb_core::MAX_FENCE - 1), false)).expect("import");
    let Reservation::Acquired(first) = store.reserve(Reserve::new(&scope, &key, &fp(1))).expect("reserve") else {
        panic!("a released key is acquired again");
    };
    assert_eq!(first.fence(), idemdb_core::MAX_FENCE);
    store.fail(&first, Failure::Retryable).expect("release");
    let second = store.reserve(Reserve::new(&scope, &key, &fp(1)));
    assert!(
        matches!(second, Err(Error::Refused(Refusal::Transition(TransitionError::FenceExhausted { .. })))),
        "no fence is handed out twice: {second:?}"
    );
    assert!(store.complete(&first, b"late".to_vec()).is_err(), "the stale lease completes nothing");
    assert_eq!(store.get(&scope, &key).expect("get").expect("record").state.kind(), StateKind::Released);
}
