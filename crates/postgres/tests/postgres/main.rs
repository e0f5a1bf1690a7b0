//! The PostgreSQL adapter against a real server: one test binary with its own harness.
//!
//! The tests need a server: `IDEMDB_PG_URL` names it (and `IDEMDB_PG_RESTART`, a command that
//! restarts it in immediate mode, for the fault test). `bash scripts/with-postgres.sh cargo test
//! -p idemdb-postgres --test postgres` starts a throwaway server and sets both; so does the
//! project's test command. Without `IDEMDB_PG_URL` every test is reported **ignored**, with the
//! reason printed, never passed; with `IDEMDB_PG_REQUIRED=1` the binary fails instead.
//!
//! Tests run one at a time: the fault test restarts the server under everyone's feet.

mod basics;
mod clocks;
mod deadline;
mod decision_table;
mod faults;
mod pgbouncer;
mod proxy;
mod purge_task;
mod race;
mod support;
mod wire;
mod workflow;

use std::process::ExitCode;

use libtest_mimic::{Arguments, Failed, Trial};

use support::Env;

type Test = fn(&Env) -> Result<(), Failed>;

const TESTS: &[(&str, Test)] = &[
    ("decision_table_matches_the_embedded_store", decision_table::run),
    ("four_processes_racing_make_one_effect_per_key", race::run),
    ("killed_connections_and_a_restart_lose_nothing_and_double_nothing", faults::run),
    ("a_transaction_killed_before_commit_is_rolled_back_and_repeats_safely", faults::killed_mid_transaction),
    ("unreachable_database_and_lost_commits_are_typed", proxy::run),
    (
        "a_commit_waiting_for_a_standby_is_never_taken_for_nothing_changed",
        proxy::a_commit_waiting_for_a_standby_is_never_taken_for_nothing_changed,
    ),
    ("a_locked_table_ends_each_call_at_its_deadline", deadline::locked_table),
    ("instances_with_clocks_an_hour_apart_agree", clocks::run),
    ("migrations_are_versioned_and_checked_at_connect", basics::migrations),
    ("reserved_schema_names_are_refused", basics::reserved_schemas_are_refused),
    ("application_rows_and_completion_commit_together", basics::transaction_api),
    ("audit_trail_keeps_keyed_hashes_only", basics::audit_trail),
    ("retention_and_the_fence_floor", basics::retention),
    ("records_imported_from_the_embedded_store_answer_alike", basics::import),
    ("cli_export_then_import_into_postgres", basics::cli_import),
    ("passwords_are_never_printed_by_the_cli", basics::passwords_never_printed),
    ("an_import_of_100k_records_is_one_transaction_and_linear", basics::import_at_scale),
    ("crate_docs_example", basics::crate_docs_example),
    ("a_new_key_and_a_replay_are_one_statement_in_one_round_trip", wire::statements_per_call),
    ("read_only_work_takes_no_transaction_id", wire::read_only_work_takes_no_transaction_id),
    ("workflow_stories_match_the_embedded_store", workflow::stories),
    ("business_writes_match_the_embedded_store", workflow::business_writes),
    ("a_failed_operation_writes_nothing_as_on_the_embedded_store", workflow::failed_operations_write_nothing),
    ("behind_pgbouncer_in_transaction_mode_everything_works", pgbouncer::transaction_mode),
    ("an_effect_enqueued_in_the_application_transaction_commits_with_it", workflow::effect_in_application_transaction),
    ("an_effect_enqueued_with_the_reservation_exists_exactly_when_the_key_was_acquired", workflow::reserve_enqueuing),
    ("dispatchers_on_many_connections_claim_each_item_once", workflow::dispatchers_claim_each_item_once),
    ("the_reconciliation_queue_lists_uncertain_records_and_effects", workflow::reconciliation_queue),
    ("concurrent_deliveries_of_one_object_apply_the_newest_once_each", workflow::concurrent_deliveries),
    ("retention_removes_finished_workflow_rows", workflow::workflow_retention),
    ("listeners_wake_on_committed_enqueues", workflow::listeners_wake_on_committed_enqueues),
    ("the_purge_task_runs_in_batches_and_keeps_the_retention_rules", purge_task::batches_keep_the_rules),
    ("a_row_locked_by_another_transaction_does_not_block_the_purge", purge_task::a_locked_row_does_not_block_the_purge),
    ("two_purgers_at_once_change_each_row_once", purge_task::two_purgers_change_each_row_once),
    ("a_spawned_purge_task_runs_until_stopped", purge_task::a_spawned_task_runs_until_stopped),
    (
        "an_older_instance_beside_a_newer_schema_keeps_running_and_a_new_one_is_refused",
        purge_task::an_older_instance_beside_a_newer_schema,
    ),
];

fn main() -> ExitCode {
    if let Some(code) = race::worker_main() {
        return code;
    }
    let mut args = Arguments::from_args();
    if args.test_threads.is_none() {
        args.test_threads = Some(1);
    }
    let env = Env::from_env();
    let required = std::env::var("IDEMDB_PG_REQUIRED").is_ok_and(|v| v == "1");
    if env.is_ok() && !args.list {
        println!("idemdb-postgres: running the {} PostgreSQL tests against a server", TESTS.len());
    }
    if let Err(reason) = &env {
        if required {
            eprintln!("error: IDEMDB_PG_REQUIRED=1 but {reason}");
            return ExitCode::FAILURE;
        }
        if !args.list {
            println!(
                "idemdb-postgres: {reason}: the {} PostgreSQL tests are IGNORED, not run. Run them with a \
                 throwaway server: bash scripts/with-postgres.sh cargo test -p idemdb-postgres --test postgres",
                TESTS.len()
            );
        }
    }
    let trials = TESTS
        .iter()
        .map(|&(name, test)| {
            let ignored = env.is_err();
            let env = env.clone();
            Trial::test(name, move || match &env {
                Ok(env) => test(env),
                Err(reason) => Err(Failed::from(format!("{reason}: cannot run without a PostgreSQL server"))),
            })
            .with_ignored_flag(ignored)
        })
        .collect();
    libtest_mimic::run(&args, trials).exit_code()
}
