//! The shared decision table (`tests/testdata/decisions.json`) against the PostgreSQL adapter,
//! through the store interface alone — the same runner the embedded store passes.

use idemdb_interface::conformance::{self, Backend};
use idemdb_postgres::tokio_postgres;
use idemdb_postgres::{ManualClock, PgStore, Policy, TimeSource};
use libtest_mimic::Failed;

use crate::support::{Env, admin, block_on, builder};

/// A fresh schema per case, every store on one manual clock (the table moves time through
/// each boundary, which the database's clock cannot do).
struct Schemas {
    env: Env,
    admin: tokio_postgres::Client,
    clock: ManualClock,
    opened: usize,
}

const PREFIX: &str = "idemdb_decisions";

impl Backend for Schemas {
    type Store = PgStore;

    async fn open(&mut self, operations: &[(&'static str, Policy)]) -> PgStore {
        self.opened += 1;
        let schema = format!("{PREFIX}_{}", self.opened);
        self.admin.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE")).await.expect("drop schema");
        let mut store =
            builder(&self.env, &schema).clock(self.clock.clone()).time_source(TimeSource::HostClock).pool_size(2);
        for (operation, policy) in operations {
            store = store.policy(*operation, policy.clone());
        }
        store.connect().await.expect("connect")
    }

    fn set_time(&mut self, millis: u64) {
        self.clock.set(millis);
    }
}

pub fn run(env: &Env) -> Result<(), Failed> {
    block_on(async {
        let mut schemas = Schemas {
            env: env.clone(),
            admin: admin(&env.url).await,
            clock: ManualClock::new(conformance::T),
            opened: 0,
        };
        let cases = conformance::run_decision_table(&mut schemas, "postgres").await;
        assert_eq!(cases, schemas.opened, "one fresh schema per case");
        assert!(cases >= 50, "the whole table ran ({cases} cases)");
        for case in 1..=schemas.opened {
            schemas.admin.batch_execute(&format!("DROP SCHEMA {PREFIX}_{case} CASCADE")).await.expect("drop schema");
        }
    });
    Ok(())
}
