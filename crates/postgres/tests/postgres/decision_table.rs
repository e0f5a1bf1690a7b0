//! The shared decision table (`tests/testdata/decisions.json`) against the PostgreSQL adapter,
//! through the store interface alone — the same runner the embedded store passes.

use idemdb_interface::conformance;
use idemdb_postgres::ManualClock;
use libtest_mimic::Failed;

use crate::support::{Env, Schemas, block_on};

pub fn run(env: &Env) -> Result<(), Failed> {
    block_on(async {
        let mut schemas = Schemas::new(env, "idemdb_decisions", 2, ManualClock::new(conformance::T)).await;
        let cases = conformance::run_decision_table(&mut schemas, "postgres").await;
        assert_eq!(cases, schemas.opened, "one fresh schema per case");
        assert!(cases >= 50, "the whole table ran ({cases} cases)");
        schemas.drop_all().await;
    });
    Ok(())
}
