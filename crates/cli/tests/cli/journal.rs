//! A store whose journal holds an application's rows after a crash: the operator's command is
//! refused with a message that names the table and says not to discard the journal, nothing
//! changes, and the application's next open replays the rows; after its clean close the
//! command works.

use std::process::Command;

use idemdb::Store;
use idemdb::redb::TableDefinition;

use super::{arg, idemdb};

/// The application's table, journaled with the store's own.
const ORDERS: TableDefinition<&str, u64> = TableDefinition::new("app_orders");
/// Set for the child process that writes and dies (the path of its store).
const CHILD: &str = "IDEMDB_CLI_TEST_CRASH_WRITER";

/// The application, registering its table.
fn open_as_the_application(path: &std::path::Path) -> Store {
    Store::builder().journaled_table(ORDERS).open(path).expect("the application opens its store")
}

/// Runs only as the child process of the test below (it is ignored otherwise): the
/// application writes one row through the journal and dies without closing the store.
#[test]
#[ignore = "the child process of a_crashed_applications_journal_is_refused_by_name_then_replayed"]
fn crash_writer_child() {
    let Some(path) = std::env::var_os(CHILD) else { return };
    let store = open_as_the_application(std::path::Path::new(&path));
    store.write(|txn| txn.table(ORDERS)?.insert("order-1", 10)).expect("write");
    std::process::abort();
}

#[test]
fn a_crashed_applications_journal_is_refused_by_name_then_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orders.idemdb");
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "journal::crash_writer_child", "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD, &path)
        .output()
        .expect("run the child");
    assert!(!child.status.success(), "the child aborts after its write: {child:?}");
    let journal = dir.path().join("orders.idemdb-journal");
    let journal_before = std::fs::read(&journal).expect("the journal beside the store");

    // The operator's tool does not know the table's types: refused, by name, with the advice
    // not to discard the journal that holds the acknowledged row, and without writing a byte
    // of it (redb's own crash recovery of the store file may run first; it keeps every
    // durable commit).
    let refused = idemdb(["stats", arg(&path)]).code(3);
    assert!(refused.stderr.contains("app_orders"), "{}", refused.stderr);
    assert!(refused.stderr.contains("do not discard"), "{}", refused.stderr);
    assert!(std::fs::read(&journal).unwrap() == journal_before, "the refused open wrote to the journal");

    // Nothing was lost: the application's next open replays the acknowledged row.
    let store = open_as_the_application(&path);
    let amount = store.write(|txn| Ok::<_, idemdb::Error>(txn.table(ORDERS)?.get("order-1")?.map(|v| v.value())));
    assert_eq!(amount.unwrap(), Some(10));
    drop(store);

    // A clean close left nothing to replay: the operator's command now works.
    let stats = idemdb(["stats", arg(&path)]).code(0);
    assert!(!stats.stdout.is_empty());
}
