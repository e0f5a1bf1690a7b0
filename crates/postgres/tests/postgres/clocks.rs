//! Two instances whose host clocks are an hour apart (injected clocks) share one database.
//!
//! With the default time source (the database's clock) they agree on every lease and TTL: the
//! second instance sees the first's lease live for the rest of its term, never expired; the
//! expiry instants a record stores follow the database's clock whichever instance wrote them;
//! a renewal through the other instance extends the lease from database time. The same two
//! clocks used as the time source (`TimeSource::HostClock`) disagree at once — the instance an
//! hour ahead takes a fresh lease for expired — which shows that the injected skew is real and
//! that the agreement comes from the database's clock.

use std::time::Duration;

use idemdb_postgres::{
    Clock, Fingerprint, IdempotencyKey, ManualClock, PgStore, Policy, Reservation, Reserve, Scope, State, SystemClock,
    TimeSource,
};
use libtest_mimic::Failed;

use crate::support::{Env, block_on, builder, fresh_schema};

const SCHEMA: &str = "idemdb_clocks";
const HOUR_MS: u64 = 3_600_000;
const LEASE: Duration = Duration::from_secs(60);

fn policy() -> Policy {
    Policy::default()
        .with_lease_ttl(LEASE)
        .with_response_ttl(Duration::from_secs(24 * 3600))
        .with_tombstone_ttl(Duration::from_secs(7 * 24 * 3600))
}

async fn instance(env: &Env, clock: &ManualClock, source: TimeSource) -> PgStore {
    builder(env, SCHEMA)
        .policy("create_payment", policy())
        .clock(clock.clone())
        .time_source(source)
        .connect()
        .await
        .expect("connect")
}

pub fn run(env: &Env) -> Result<(), Failed> {
    block_on(async {
        fresh_schema(&env.url, SCHEMA).await;
        let now = SystemClock.now().as_millis();
        let clock_a = ManualClock::new(now);
        let clock_b = ManualClock::new(now + HOUR_MS);
        let scope = Scope::new("acme", "create_payment").expect("scope");
        let fingerprint = Fingerprint::from_bytes([5; 32]);

        // The control: deciding with the host clocks, the instances disagree.
        let a = instance(env, &clock_a, TimeSource::HostClock).await;
        let b = instance(env, &clock_b, TimeSource::HostClock).await;
        let key = IdempotencyKey::new("skewed-host-time").expect("key");
        let Reservation::Acquired(_) = a.reserve(Reserve::new(&scope, &key, &fingerprint)).await.expect("reserve")
        else {
            panic!("a new key is acquired")
        };
        let seen_by_b = b.reserve(Reserve::new(&scope, &key, &fingerprint)).await.expect("reserve");
        assert!(
            matches!(seen_by_b, Reservation::NeedsReconciliation { .. }),
            "with host time, the instance an hour ahead takes a fresh lease for expired: {seen_by_b:?}"
        );

        // The adapter's default: both decide with the database's clock.
        let a = instance(env, &clock_a, TimeSource::Database).await;
        let b = instance(env, &clock_b, TimeSource::Database).await;
        let skew_a = a.clock_skew().await.expect("skew");
        let skew_b = b.clock_skew().await.expect("skew");
        let apart = skew_a - skew_b;
        assert!(
            (HOUR_MS as i64 - 60_000..=HOUR_MS as i64 + 60_000).contains(&apart),
            "the injected clocks are an hour apart as the database sees them ({skew_a} ms, {skew_b} ms)"
        );

        for (round, (first, second)) in [(&a, &b), (&b, &a)].into_iter().enumerate() {
            let key = IdempotencyKey::new(format!("database-time-{round}")).expect("key");
            let Reservation::Acquired(lease) =
                first.reserve(Reserve::new(&scope, &key, &fingerprint)).await.expect("reserve")
            else {
                panic!("a new key is acquired")
            };
            // The lease's term is the database's: within a minute of the database's now, not
            // of either host clock (an hour apart, one of them is far off).
            let database_now = first.clock_skew().await.expect("skew") + clock_of(round, &clock_a, &clock_b) as i64;
            let expires = lease.expires_at().as_millis() as i64;
            assert!(
                (database_now..=database_now + LEASE.as_millis() as i64 + 5_000).contains(&expires),
                "round {round}: the lease ends one lease TTL after the database's now"
            );

            // The other instance sees the same lease, live.
            match second.reserve(Reserve::new(&scope, &key, &fingerprint)).await.expect("reserve") {
                Reservation::InProgress { retry_after } => {
                    assert!(retry_after <= LEASE && retry_after > Duration::ZERO, "round {round}: {retry_after:?}")
                }
                other => panic!("round {round}: the other instance must see the lease live, got {other:?}"),
            }
            let record_first = first.get(&scope, &key).await.expect("get").expect("record");
            let record_second = second.get(&scope, &key).await.expect("get").expect("record");
            assert_eq!(record_first, record_second, "one record for both");
            assert_eq!(record_first.state, State::InProgress { lease_expires_at: lease.expires_at() });

            // The lease renewed through the other instance: extended from database time, not
            // by an hour.
            let renewed = second.renew(&lease).await.expect("renew");
            assert!(renewed.expires_at() >= lease.expires_at(), "a renewal never shortens a lease");
            assert!(
                renewed.expires_at().as_millis() < lease.expires_at().as_millis() + 10 * 60_000,
                "round {round}: renewed from database time, not from a clock an hour ahead"
            );

            // Completed through the first instance; the other replays it, and the TTLs stored
            // follow the database's clock.
            first.complete(&renewed, b"ch_1".to_vec()).await.expect("complete");
            match second.reserve(Reserve::new(&scope, &key, &fingerprint)).await.expect("reserve") {
                Reservation::Replay { body, .. } => assert_eq!(body, b"ch_1"),
                other => panic!("round {round}: expected a replay, got {other:?}"),
            }
            let record = second.get(&scope, &key).await.expect("get").expect("record");
            let State::Completed { expires_at, forget_at, .. } = record.state else { panic!("{:?}", record.state) };
            assert_eq!(
                expires_at.as_millis(),
                record.updated_at.as_millis() + policy().response_ttl().as_millis() as u64
            );
            assert_eq!(forget_at.as_millis(), expires_at.as_millis() + policy().tombstone_ttl().as_millis() as u64);
            assert!(
                (record.updated_at.as_millis() as i64 - database_now).abs() < 60_000,
                "round {round}: the completion time is the database's"
            );
        }
    });
    Ok(())
}

/// The host clock of the instance that reserved in `round`.
fn clock_of(round: usize, a: &ManualClock, b: &ManualClock) -> u64 {
    if round == 0 { a.now().as_millis() } else { b.now().as_millis() }
}
