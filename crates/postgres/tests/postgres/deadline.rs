//! One deadline for one whole call, retries included (`operation_timeout`): a table locked by
//! another session far longer than the deadline (the server stays up and never answers the
//! adapter's statements) ends each call with a typed error by its deadline, not after one
//! deadline per attempt; the statements cut short are cancelled on the server (they hold no
//! locks and wait for nothing afterwards); their connections are closed, and the store works
//! as soon as the lock goes.

use std::time::{Duration, Instant};

use idemdb_postgres::{ErrorCode, Fingerprint, IdempotencyKey, Reservation, Reserve, Scope};
use libtest_mimic::Failed;

use crate::support::{Env, admin, block_on, builder, count, fresh_schema};

const SCHEMA: &str = "idemdb_deadline";
const APP: &str = "idemdb-deadline-test";
const DEADLINE: Duration = Duration::from_secs(2);

pub fn locked_table(env: &Env) -> Result<(), Failed> {
    block_on(async {
        fresh_schema(&env.url, SCHEMA).await;
        let store = builder(env, SCHEMA)
            .operation_timeout(DEADLINE)
            // Longer than the lock is held: only the adapter's deadline can end the calls.
            .statement_timeout(Duration::from_secs(60))
            .pool_size(2)
            .application_name(APP)
            .connect()
            .await
            .expect("connect");
        let scope = Scope::new("acme", "create_payment").expect("scope");
        let fingerprint = Fingerprint::from_bytes([4; 32]);
        let key = |name: &str| IdempotencyKey::new(name).expect("key");
        let Reservation::Acquired(lease) =
            store.reserve(Reserve::new(&scope, &key("held"), &fingerprint)).await.expect("reserve")
        else {
            panic!("a new key is acquired")
        };

        let locker = admin(&env.url).await;
        locker
            .batch_execute(&format!("BEGIN; LOCK TABLE {SCHEMA}.idemdb_records IN ACCESS EXCLUSIVE MODE"))
            .await
            .expect("lock the records table");
        for call in ["reserve", "complete", "get"] {
            let started = Instant::now();
            let error = match call {
                "reserve" => store.reserve(Reserve::new(&scope, &key("new"), &fingerprint)).await.map(drop),
                "complete" => store.complete(&lease, b"done".to_vec()).await,
                _ => store.get(&scope, &key("held")).await.map(drop),
            }
            .expect_err("the table is locked");
            let elapsed = started.elapsed();
            println!(
                "deadline: {call} answered {} after {} ms (deadline {} ms)",
                error.code(),
                elapsed.as_millis(),
                DEADLINE.as_millis()
            );
            assert!(matches!(error.code(), ErrorCode::Unavailable | ErrorCode::CommitUnknown), "{call}: {error}");
            // A bound, not a speed: the lock is held for minutes if need be; one deadline per
            // attempt (four attempts) would take four times as long.
            assert!(elapsed < DEADLINE * 2, "{call} took {elapsed:?} with a deadline of {DEADLINE:?}");
        }
        // The cut statements were cancelled: none of the store's sessions waits for the lock.
        let waiting = format!(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = '{APP}' AND wait_event_type = 'Lock'"
        );
        let mut still = count(&locker, &waiting).await;
        for _ in 0..50 {
            if still == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            still = count(&locker, &waiting).await;
        }
        assert_eq!(still, 0, "statements cut by the deadline still wait for the lock on the server");
        locker.batch_execute("ROLLBACK").await.expect("unlock");

        // Back at once, on fresh connections; the cut reservation inserted nothing.
        store.complete(&lease, b"done".to_vec()).await.expect("complete once the lock is gone");
        let answer = store.reserve(Reserve::new(&scope, &key("new"), &fingerprint)).await.expect("reserve");
        assert!(matches!(answer, Reservation::Acquired(_)), "{answer:?}");
        let rows = count(&locker, &format!("SELECT count(*) FROM {SCHEMA}.idemdb_records")).await;
        assert_eq!(rows, 2);
        locker.batch_execute(&format!("DROP SCHEMA {SCHEMA} CASCADE")).await.expect("drop schema");
        Ok(())
    })
}
