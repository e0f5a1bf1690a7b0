//! `idemdb backup`: a copy that opens alone with every record, refused destinations, a source
//! that never changes, and a store a service holds.

use super::*;

fn keys_of(path: &Path) -> Vec<String> {
    let store = Store::builder().open_read_only(path).expect("the backup opens alone");
    let mut filter = idemdb::ListFilter::default();
    filter.limit = 10_000;
    let listing = store.list(&filter).expect("list");
    let mut keys: Vec<String> = listing.records.iter().map(|r| r.scoped.key.as_str().to_string()).collect();
    keys.sort();
    keys
}

#[test]
fn backup_writes_a_copy_that_opens_alone_with_every_record() {
    let dir = TempDir::new().expect("dir");
    let source = many_records(&dir, 300);
    let before = std::fs::read(&source).expect("source bytes");
    let dest = dir.path().join("elsewhere");
    std::fs::create_dir(&dest).expect("dir");
    let dest = dest.join("backup.idemdb");
    let run = idemdb(["--json", "backup", arg(&source), arg(&dest)]).code(0);
    let report = run.json();
    assert_eq!(report["records"], 300);
    assert_eq!(report["verified"], true);
    assert_eq!(report["replaced"], false);
    assert!(!PathBuf::from(format!("{}-journal", dest.display())).exists(), "no journal beside the backup");
    assert_eq!(keys_of(&dest), keys_of(&source), "every record of the store, nothing else");
    assert!(before == std::fs::read(&source).expect("source bytes"), "the source is not changed");
    let verify = idemdb(["--json", "verify", arg(&dest)]).code(0).json();
    assert_eq!(verify["records"], 300);
    let human = idemdb(["backup", arg(&source), arg(&dir.path().join("b2.idemdb"))]).code(0).stdout;
    assert!(human.contains("records") && human.contains("300") && human.contains("verified"), "{human}");
}

#[test]
fn backup_refuses_an_existing_destination_unless_asked_to_overwrite() {
    let dir = TempDir::new().expect("dir");
    let source = sample_store(&dir);
    let dest = dir.path().join("backup.idemdb");
    std::fs::write(&dest, b"an older file").expect("write");
    let run = idemdb(["backup", arg(&source), arg(&dest)]).code(2);
    assert!(run.stderr.contains("exists already"), "{}", run.stderr);
    assert_eq!(std::fs::read(&dest).expect("read"), b"an older file", "the destination is untouched");
    let run = idemdb(["backup", arg(&source), arg(&source), "--overwrite"]).code(2);
    assert!(run.stderr.contains("the store's own file"), "{}", run.stderr);
    let report = idemdb(["--json", "backup", arg(&source), arg(&dest), "--overwrite"]).code(0).json();
    assert_eq!(report["replaced"], true);
    assert_eq!(keys_of(&dest).len(), 6);
    let missing = dir.path().join("no-such-dir").join("b.idemdb");
    let run = idemdb(["backup", arg(&source), arg(&missing)]).code(4);
    assert!(run.stderr.contains("no such directory"), "{}", run.stderr);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .expect("dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".backup-"))
        .collect();
    assert!(leftovers.is_empty(), "no temporary left: {leftovers:?}");
}

#[test]
fn backup_of_a_store_a_service_holds_points_at_the_service() {
    let dir = TempDir::new().expect("dir");
    let source = sample_store(&dir);
    let held = Store::open(&source).expect("held open, as by a service");
    let dest = dir.path().join("backup.idemdb");
    let run = idemdb(["backup", arg(&source), arg(&dest)]).code(3);
    assert!(run.stderr.contains("back it up through that service"), "{}", run.stderr);
    assert!(!dest.exists());
    // The service's way: the library call on the handle it holds.
    let report = held.backup_to(&dest).expect("backup through the holder");
    assert_eq!(report.records, 6);
}

#[test]
fn backup_refuses_unknown_tables_unless_told_to_leave_them_out() {
    let dir = TempDir::new().expect("dir");
    let source = sample_store(&dir);
    {
        let store = Store::open(&source).expect("open");
        const APP: idemdb::redb::TableDefinition<&str, u64> = idemdb::redb::TableDefinition::new("app_things");
        store
            .write(|txn| {
                txn.tables_checkpointing()
                    .open_table(APP)
                    .map_err(idemdb::Error::from)?
                    .insert("a", 1)
                    .map_err(idemdb::Error::from)?;
                Ok::<_, idemdb::Error>(())
            })
            .expect("app table");
    }
    let dest = dir.path().join("backup.idemdb");
    let run = idemdb(["backup", arg(&source), arg(&dest)]).code(4);
    assert!(run.stderr.contains("app_things"), "{}", run.stderr);
    assert!(!dest.exists());
    let report = idemdb(["--json", "backup", arg(&source), arg(&dest), "--leave-out-unknown-tables"]).code(0).json();
    assert_eq!(report["left_out"], serde_json::json!(["app_things"]));
    assert_eq!(report["records"], 6);
}
