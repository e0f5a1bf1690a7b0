//! The lock every runtime takes (`<store>.lock`): a store another runtime's process holds (a
//! Node app through the npm package) is refused by every command, changing nothing; a lock
//! whose process is gone is taken over.

use std::process::{Child, Command};

use idemdb::Store;
use tempfile::TempDir;

use super::{arg, idemdb, sample_store};

/// A live process standing for a Node app that holds the store: `sleep`, killed and reaped on
/// drop.
struct Holder(Child);

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The start time `/proc/<pid>/stat` gives (field 22), as the npm package records it.
fn started(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat[stat.rfind(')')? + 1..].split_whitespace().nth(19).map(str::to_string))
        .unwrap_or_else(|| "-".into())
}

/// The lock file the npm package's Node file store writes while it holds `pid`'s store.
fn node_lock(pid: u32) -> String {
    format!("{pid}\nidemdb-holder 1 runtime=node access=write started={} token=00112233aabbccdd\n", started(pid))
}

#[test]
fn every_command_refuses_a_store_a_node_process_holds_and_changes_nothing() {
    let dir = TempDir::new().expect("dir");
    let store = sample_store(&dir);
    let lock = {
        let mut name = std::fs::canonicalize(&store).expect("real path").into_os_string();
        name.push(".lock");
        std::path::PathBuf::from(name)
    };
    let before = std::fs::read(&store).expect("bytes");
    let node = Holder(Command::new("sleep").arg("60").spawn().expect("sleep"));
    let pid = node.0.id();
    std::fs::write(&lock, node_lock(pid)).expect("lock");
    let export = dir.path().join("export.jsonl");
    let backup = dir.path().join("backup.idemdb");
    for args in [
        vec!["stats", arg(&store)],
        vec!["verify", arg(&store)],
        vec!["list", arg(&store)],
        vec!["export", arg(&store), "--output", arg(&export)],
        vec!["purge", arg(&store)],
        vec!["compact", arg(&store)],
        vec!["recover", arg(&store)],
        vec!["backup", arg(&store), arg(&backup)],
    ] {
        let run = idemdb(&args).code(3);
        assert!(
            run.stderr.contains(&format!("held by process {pid} (node runtime)")) && run.stderr.contains(arg(&lock)),
            "{args:?}: {}",
            run.stderr
        );
    }
    assert_eq!(std::fs::read(&store).expect("bytes"), before, "no refused command changed the store");
    assert_eq!(std::fs::read_to_string(&lock).expect("lock"), node_lock(pid), "nor the holder's lock");
    assert!(!backup.exists());
    drop(node);
    // Its process is gone: the next command takes the lock over, and releases it.
    idemdb(["stats", arg(&store)]).code(0);
    assert!(!lock.exists(), "released after the command");
    // A native holder is refused to the CLI as before, and the lock file names it.
    let held = Store::open(&store).expect("held natively");
    idemdb(["stats", arg(&store)]).code(3);
    assert!(std::fs::read_to_string(&lock).expect("lock").starts_with(&format!("{}\n", std::process::id())));
    drop(held);
}
