//! Behind PgBouncer in transaction pooling mode (`pool_mode = transaction`, the pooler
//! `scripts/with-postgres.sh` starts beside the server): with
//! `PgStoreBuilder::transaction_pooling(true)` the decision table and the workflow stories pass
//! exactly as on a direct connection, and a new key, a replay and a completion work across
//! the pooler's server connections; with the defaults the connection is refused (PgBouncer
//! does not accept the startup `options` that carry `statement_timeout`) — the control showing
//! that the pooler is really in the way.

use idemdb_interface::conformance;
use idemdb_postgres::{Fingerprint, IdempotencyKey, ManualClock, PgStore, Reservation, Reserve, Scope};
use libtest_mimic::Failed;

use crate::support::{Env, Schemas, admin, block_on, builder, count};

pub fn transaction_mode(env: &Env) -> Result<(), Failed> {
    let Some(url) = env.pgbouncer.clone() else {
        return Err("IDEMDB_PGBOUNCER_URL is not set: scripts/with-postgres.sh starts PgBouncer when the \
                    pgbouncer package is installed (it installs it when run as root)"
            .into());
    };
    let bounced = Env { url, transaction_pooling: true, ..env.clone() };
    block_on(async {
        // The control: the default settings cannot connect through the pooler.
        let refused = PgStore::builder(bounced.url.clone()).schema("idemdb_bouncer_control").connect().await;
        let refused = refused.expect_err("PgBouncer refuses the startup options");
        println!("pgbouncer: with the defaults: {refused}");

        let mut schemas = Schemas::new(&bounced, "idemdb_bouncer_decisions", 2, ManualClock::new(conformance::T)).await;
        let cases = conformance::run_decision_table(&mut schemas, "postgres behind PgBouncer").await;
        assert!(cases >= 50, "the whole table ran ({cases} cases)");
        schemas.drop_all().await;
        let mut schemas = Schemas::new(&bounced, "idemdb_bouncer_stories", 4, ManualClock::new(conformance::T)).await;
        assert_eq!(conformance::run_workflow_stories(&mut schemas, "postgres behind PgBouncer").await, 6);
        schemas.drop_all().await;
        let mut schemas = Schemas::new(&bounced, "idemdb_bouncer_business", 1, ManualClock::new(conformance::T)).await;
        assert_eq!(conformance::run_business_writes(&mut schemas, "postgres behind PgBouncer").await, 6);
        schemas.drop_all().await;

        // Many calls at once over few pooled server connections, with the database's clock.
        const S: &str = "idemdb_bouncer";
        let direct = admin(&env.url).await;
        direct.batch_execute(&format!("DROP SCHEMA IF EXISTS {S} CASCADE")).await.expect("drop schema");
        let store = builder(&bounced, S).pool_size(8).connect().await.expect("connect through PgBouncer");
        let scope = Scope::new("acme", "create_payment").expect("scope");
        let fingerprint = Fingerprint::from_bytes([6; 32]);
        let mut tasks = Vec::new();
        for n in 0..64 {
            let (store, scope) = (store.clone(), scope.clone());
            tasks.push(tokio::spawn(async move {
                let key = IdempotencyKey::new(format!("bounced-{}", n % 32)).expect("key");
                match store.reserve(Reserve::new(&scope, &key, &fingerprint)).await.expect("reserve") {
                    Reservation::Acquired(lease) => {
                        store.complete(&lease, b"ok".to_vec()).await.expect("complete");
                        1
                    }
                    _ => 0,
                }
            }));
        }
        let mut acquired = 0;
        for task in tasks {
            acquired += task.await.expect("task");
        }
        let completed =
            count(&direct, &format!("SELECT count(*) FROM {S}.idemdb_records WHERE state = 'completed'")).await;
        println!("pgbouncer: 64 reservations of 32 keys: {acquired} acquired, {completed} completed");
        assert_eq!((acquired, completed), (32, 32), "one lease and one completion per key");
        for n in 0..32 {
            let key = IdempotencyKey::new(format!("bounced-{n}")).expect("key");
            let replay = store.reserve(Reserve::new(&scope, &key, &fingerprint)).await.expect("replay");
            assert!(matches!(replay, Reservation::Replay { .. }), "{replay:?}");
        }
        direct.batch_execute(&format!("DROP SCHEMA {S} CASCADE")).await.expect("drop schema");
    });
    Ok(())
}
