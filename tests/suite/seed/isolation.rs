//! The seed note's test list: tenant isolation.

use super::*;

fn part(allow_space: bool) -> impl Strategy<Value = String> {
    let separators: Vec<char> =
        if allow_space { vec![':', '/', '|', ' ', 'a', 'b', '0'] } else { vec![':', '/', '|', 'a', 'b', '0'] };
    let regex = if allow_space { "[ -~]{1,12}" } else { "[!-~]{1,12}" };
    prop_oneof![
        proptest::collection::vec(proptest::sample::select(separators), 1..8)
            .prop_map(|chars| chars.into_iter().collect()),
        proptest::string::string_regex(regex).expect("regex"),
    ]
}

fn triple() -> impl Strategy<Value = (String, String, String)> {
    (part(true), part(true), part(false))
}

/// Cuts the concatenation of a triple at other places: under `tenant:operation:key`-style
/// concatenation these would all name the same record.
fn resplit((tenant, operation, key): &(String, String, String), cut1: usize, cut2: usize) -> Option<ScopedKey> {
    let joined = format!("{tenant}{operation}{key}");
    let len = joined.len();
    let (a, b) = (1 + cut1 % (len - 1).max(1), 1 + cut2 % (len - 1).max(1));
    let (a, b) = (a.min(b), a.max(b));
    let scope = Scope::new(&joined[..a], &joined[a..b]).ok()?;
    Some(ScopedKey::new(scope, IdempotencyKey::new(&joined[b..]).ok()?))
}

fn scoped((tenant, operation, key): &(String, String, String)) -> ScopedKey {
    ScopedKey::new(
        Scope::new(tenant.clone(), operation.clone()).expect("scope"),
        IdempotencyKey::new(key.clone()).expect("key"),
    )
}

fn isolation_config() -> Config {
    let mut config = Config { failure_persistence: None, ..Config::default() };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = 512;
    }
    if std::env::var_os("PROPTEST_RNG_SEED").is_none() {
        config.rng_seed = RngSeed::Fixed(0x7e4a_4715_0001);
    }
    config
}

#[test]
fn scoped_key_encoding_is_injective_and_round_trips_whatever_separators_the_parts_hold() {
    let mut runner = TestRunner::new(isolation_config());
    let result = runner.run(&(triple(), triple(), any::<usize>(), any::<usize>()), |(x, y, cut1, cut2)| {
        let x_key = scoped(&x);
        for y_key in std::iter::once(scoped(&y)).chain(resplit(&x, cut1, cut2)) {
            prop_assert_eq!(x_key.encode() == y_key.encode(), x_key == y_key, "{:?} vs {:?}", x_key, y_key);
            prop_assert_eq!(ScopedKey::decode(&y_key.encode()).expect("decode"), y_key.clone());
        }
        prop_assert_eq!(ScopedKey::decode(&x_key.encode()).expect("decode"), x_key);
        Ok(())
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

#[test]
fn a_record_of_one_tenant_is_never_reachable_from_another_tenant() {
    let clock = ManualClock::new(T0);
    let mut runner = TestRunner::new(isolation_config());
    let strategy = (triple(), triple(), any::<usize>(), any::<usize>(), any::<bool>());
    let result = runner.run(&strategy, |(a, b, cut1, cut2, same_body)| {
        let store = builder(&clock).audit(false).in_memory().expect("store");
        let ledger = EffectLedger::new();
        let a_key = scoped(&a);
        // Tenant A has a completed record and an in-progress one.
        let Delivery::Ran(a_result) = deliver(&store, &ledger, &a_key.scope, &a_key.key, &fp(1), "a") else {
            return Err(TestCaseError::fail("the first request of tenant A runs"));
        };
        let a_probe = acquired(store.reserve(Reserve::new(&a_key.scope, &key("probe"), &fp(1))).expect("reserve"));
        let fingerprint = if same_body { fp(1) } else { fp(2) };

        let mut seen = std::collections::HashSet::new();
        for b_key in std::iter::once(scoped(&b)).chain(resplit(&a, cut1, cut2)) {
            if b_key.scope.tenant() == a_key.scope.tenant() {
                continue;
            }
            for probe in [b_key.key.clone(), key("probe"), a_key.key.clone()] {
                if !seen.insert((b_key.scope.clone(), probe.clone())) {
                    continue;
                }
                prop_assert_eq!(store.get(&b_key.scope, &probe).expect("get"), None, "tenant B reads nothing of A");
                let answer = store.reserve(Reserve::new(&b_key.scope, &probe, &fingerprint)).expect("reserve");
                prop_assert!(
                    matches!(&answer, Reservation::Acquired(lease) if lease.attempt() == 1),
                    "tenant {:?} key {:?} reached a record of tenant {:?}: {:?}",
                    b_key.scope.tenant(),
                    probe,
                    a_key.scope.tenant(),
                    answer
                );
            }
        }
        // Tenant A's records are as they were.
        prop_assert_eq!(
            store.reserve(Reserve::new(&a_key.scope, &a_key.key, &fp(1))).expect("reserve"),
            Reservation::Replay { outcome: OutcomeClass::Completed, body: a_result }
        );
        let probe_record = store.get(&a_key.scope, &key("probe")).expect("get").expect("record");
        prop_assert_eq!(probe_record.state, State::InProgress { lease_expires_at: a_probe.expires_at() });
        prop_assert_eq!(ledger.count("a"), 1);
        Ok(())
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
}
