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

#[test]
fn backup_overwrite_refuses_a_store_another_process_holds_and_its_writes_survive() {
    let dir = TempDir::new().expect("dir");
    let source = sample_store(&dir);
    let held_path = dir.path().join("held.idemdb");
    let holder = Store::open(&held_path).expect("held open, as by a service");
    let scope = Scope::new("acme", "held").expect("scope");
    let complete = |key: &str| {
        let key = IdempotencyKey::new(key).expect("key");
        let Reservation::Acquired(lease) =
            holder.reserve(Reserve::new(&scope, &key, &Fingerprint::from_bytes([3; 32]))).expect("reserve")
        else {
            panic!("a new key");
        };
        holder.complete(&lease, b"done".to_vec()).expect("complete");
    };
    complete("before");
    // SRC and DEST swapped, as in a cron line written the wrong way round.
    let run = idemdb(["backup", arg(&source), arg(&held_path), "--overwrite"]).code(3);
    assert!(run.stderr.contains(arg(&held_path)) && run.stderr.contains("is a store that is open"), "{}", run.stderr);
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    for i in 0..50 {
        complete(&format!("after-{i}"));
    }
    drop(holder);
    assert_eq!(keys_of(&held_path).len(), 51, "every write acknowledged to the holder is in its store");
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .expect("dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".backup-"))
        .collect();
    assert!(leftovers.is_empty(), "no temporary left: {leftovers:?}");
    // Closed, it may be replaced.
    let report = idemdb(["--json", "backup", arg(&source), arg(&held_path), "--overwrite"]).code(0).json();
    assert_eq!(report["replaced"], true);
    assert_eq!(keys_of(&held_path).len(), 6);
}

/// SRC left by a crash (here: a copy of a running store, which needs redb's crash recovery)
/// and DEST a store that is open: the backup opened SRC first, which recovered it (a write),
/// and only then refused DEST — a refused command had changed SRC. What DEST decides is now
/// refused before SRC is opened, for a store that is open and for one whose journal may hold
/// commits alike.
#[test]
fn a_backup_refused_for_its_destination_leaves_the_source_as_it_was() {
    let dir = TempDir::new().expect("dir");
    let live = dir.path().join("live.idemdb");
    let running = Store::builder().journal(false).open(&live).expect("a running store");
    let scope = Scope::new("acme", "pay").expect("scope");
    let lease = lease(&running, &scope, "k-1", 1);
    running.complete(&lease, b"ok".to_vec()).expect("complete");
    let source = dir.path().join("copied-while-running.idemdb");
    std::fs::copy(&live, &source).expect("cp of a running store");
    let before = std::fs::read(&source).expect("bytes");
    let held_path = dir.path().join("held.idemdb");
    let holder = Store::open(&held_path).expect("DEST, held as by a service");
    let run = idemdb(["backup", arg(&source), arg(&held_path), "--overwrite"]).code(3);
    assert!(run.stderr.contains("is a store that is open"), "{}", run.stderr);
    assert!(std::fs::read(&source).expect("bytes") == before, "the refused backup changed SRC");
    drop(holder);
    drop(running);
    // Once DEST is free, the backup runs (and recovers SRC to read it).
    let report = idemdb(["--json", "backup", arg(&source), arg(&held_path), "--overwrite"]).code(0).json();
    assert_eq!(report["records"], 1);
}

#[test]
fn backup_names_a_directory_destination_and_removes_only_its_own_stale_temporaries() {
    let dir = TempDir::new().expect("dir");
    let source = sample_store(&dir);
    let target = dir.path().join("backups");
    std::fs::create_dir(&target).expect("dir");
    for extra in [None, Some("--overwrite")] {
        let mut args = vec!["backup", arg(&source), arg(&target)];
        args.extend(extra);
        let run = idemdb(args).code(2);
        assert!(run.stderr.contains("is a directory") && !run.stderr.contains("exists already"), "{}", run.stderr);
    }
    let mut child = std::process::Command::new("true").spawn().expect("spawn");
    let dead = child.id();
    child.wait().expect("wait");
    let stale = target.join(format!(".b.idemdb.backup-{dead}-0123456789ab.partial"));
    std::fs::write(&stale, vec![1u8; 4096]).expect("write");
    let foreign = target.join(".b.idemdb.backup-mine.partial");
    std::fs::write(&foreign, b"keep").expect("write");
    let report = idemdb(["--json", "backup", arg(&source), arg(&target.join("b.idemdb"))]).code(0).json();
    assert_eq!(report["removed_stale"], serde_json::json!([stale.display().to_string()]), "{report}");
    assert!(!stale.exists());
    assert_eq!(std::fs::read(&foreign).expect("kept"), b"keep");
}

/// A file system of 2 MiB (tmpfs), mounted for the test where the test may mount one.
#[cfg(target_os = "linux")]
struct SmallFs(PathBuf);

#[cfg(target_os = "linux")]
impl SmallFs {
    fn mount(dir: &Path) -> Option<SmallFs> {
        let at = dir.join("small");
        std::fs::create_dir(&at).ok()?;
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=2m", "tmpfs", arg(&at)])
            .stderr(std::process::Stdio::null())
            .status()
            .ok()?;
        mounted.success().then_some(SmallFs(at))
    }
}

#[cfg(target_os = "linux")]
impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[cfg(target_os = "linux")]
#[test]
fn backup_onto_a_file_system_without_room_is_refused_with_both_figures() {
    let dir = TempDir::new().expect("dir");
    let source = many_records(&dir, 300);
    let Some(small) = SmallFs::mount(dir.path()) else {
        // Mounting needs privileges; the library's tests check the same refusal with an
        // injected figure.
        eprintln!("skipped: no tmpfs can be mounted here");
        return;
    };
    let dest = small.0.join("b.idemdb");
    let run = idemdb(["backup", arg(&source), arg(&dest)]).code(4);
    assert!(run.stderr.contains("bytes free on its file system") && run.stderr.contains("needs"), "{}", run.stderr);
    assert_eq!(std::fs::read_dir(&small.0).expect("dir").count(), 0, "nothing written");
}
