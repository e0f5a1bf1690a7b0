//! End-to-end tests of the `idemdb` binary on real store files: every command's output and
//! exit code, the JSON shapes, damaged and foreign files, and the demo's promises.

use std::path::{Path, PathBuf};
use std::time::Duration;

use idemdb::{
    Clock, Failure, Fingerprint, IdempotencyKey, ManualClock, Policy, Reservation, Reserve, Scope, Store, SystemClock,
};
use serde_json::Value;
use tempfile::TempDir;

/// What one run of the binary produced.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", self.stdout))
    }

    /// Asserts the exit code, showing the output when it differs.
    fn code(self, expected: i32) -> Self {
        assert_eq!(self.code, expected, "exit code\nstdout:\n{}\nstderr:\n{}", self.stdout, self.stderr);
        self
    }
}

fn idemdb<I, S>(args: I) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let output = assert_cmd::cargo::cargo_bin_cmd!("idemdb").args(args).output().expect("run idemdb");
    let run = Run {
        code: output.status.code().expect("exited normally"),
        stdout: String::from_utf8(output.stdout).expect("utf-8 stdout"),
        stderr: String::from_utf8(output.stderr).expect("utf-8 stderr"),
    };
    // Whatever happens, never a panic message or a Rust debug dump.
    for bad in ["panicked", "RUST_BACKTRACE", "Os {", "Error {", "kind:"] {
        assert!(!run.stderr.contains(bad), "stderr has `{bad}`:\n{}", run.stderr);
    }
    run
}

#[path = "cli/backup.rs"]
mod backup;
#[path = "cli/http_reconcile.rs"]
mod http_reconcile;
#[path = "cli/journal.rs"]
mod journal;
#[path = "cli/lock.rs"]
mod lock;

fn arg(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

fn scope(tenant: &str, operation: &str) -> Scope {
    Scope::new(tenant, operation).expect("scope")
}

fn key(name: &str) -> IdempotencyKey {
    IdempotencyKey::new(name).expect("key")
}

fn lease(store: &Store, scope: &Scope, name: &str, fp: u8) -> idemdb::Lease {
    match store.reserve(Reserve::new(scope, &key(name), &Fingerprint::from_bytes([fp; 32]))).expect("reserve") {
        Reservation::Acquired(lease) => lease,
        other => panic!("expected a lease, got {other:?}"),
    }
}

/// A store with one record in each state, over two tenants and two operations:
/// acme/create_payment: `paid` (completed), `declined` (failed), `running` (in progress),
/// `unsure` (uncertain); globex/refund: `retry` (released), `refund-1` (completed).
fn sample_store(dir: &TempDir) -> PathBuf {
    let path = dir.path().join("sample.idemdb");
    let store = Store::open(&path).expect("create");
    let pay = scope("acme", "create_payment");
    let refund = scope("globex", "refund");
    store.complete(&lease(&store, &pay, "paid", 1), b"{\"charge\":\"ch_1\"}".to_vec()).expect("complete");
    store.fail(&lease(&store, &pay, "declined", 2), Failure::Definitive(b"card declined".to_vec())).expect("fail");
    lease(&store, &pay, "running", 3);
    store.fail(&lease(&store, &pay, "unsure", 4), Failure::Uncertain).expect("uncertain");
    store.fail(&lease(&store, &refund, "retry", 5), Failure::Retryable).expect("release");
    store.complete(&lease(&store, &refund, "refund-1", 6), b"{\"refund\":\"re_1\"}".to_vec()).expect("complete");
    path
}

/// A store with `n` completed records spread over three tenants.
fn many_records(dir: &TempDir, n: usize) -> PathBuf {
    let path = dir.path().join("many.idemdb");
    let store = Store::open(&path).expect("create");
    for i in 0..n {
        let scope = scope(["t-a", "t-b", "t-c"][i % 3], "op");
        let lease = lease(&store, &scope, &format!("key-{i:03}"), 1);
        store.complete(&lease, format!("result {i}").into_bytes()).expect("complete");
    }
    path
}

#[test]
fn help_documents_every_command_and_the_exit_codes() {
    let help = idemdb(["--help"]).code(0).stdout;
    for word in [
        "demo",
        "stats",
        "get",
        "list",
        "purge",
        "compact",
        "backup",
        "verify",
        "export",
        "import",
        "outbox",
        "inbox",
        "reconcile",
        "Exit codes",
        "--json",
    ] {
        assert!(help.contains(word), "--help lacks `{word}`:\n{help}");
    }
    for code in
        ["0  success", "1  problems found", "2  usage error", "3  the store could not be opened", "4  any other"]
    {
        assert!(help.contains(code), "--help lacks exit code `{code}`");
    }
    for command in [
        "demo",
        "stats",
        "get",
        "list",
        "purge",
        "compact",
        "backup",
        "verify",
        "export",
        "import",
        "outbox",
        "inbox",
        "reconcile",
    ] {
        let text = idemdb([command, "--help"]).code(0).stdout;
        assert!(text.contains("Usage: idemdb") && text.contains("--json"), "{command} --help:\n{text}");
    }
    assert!(idemdb(["--version"]).code(0).stdout.starts_with("idemdb "));
}

#[test]
fn usage_errors_exit_with_2() {
    let dir = TempDir::new().expect("tempdir");
    let path = sample_store(&dir);
    assert!(idemdb(["frobnicate"]).code(2).stderr.contains("unrecognized subcommand"));
    idemdb(["get", arg(&path)]).code(2);
    idemdb(["get", arg(&path), "--key", "paid"]).code(2); // needs --tenant and --operation too
    let bad_state = idemdb(["list", arg(&path), "--state", "done"]).code(2);
    assert!(bad_state.stderr.contains("in_progress, completed"), "{}", bad_state.stderr);
    idemdb(["demo", "--intents", "0"]).code(2);
}

#[test]
fn stats_counts_records_by_state_and_operation() {
    let dir = TempDir::new().expect("tempdir");
    let path = sample_store(&dir);
    let stats = idemdb(["stats", arg(&path), "--json"]).code(0).json();
    assert_eq!(stats["records"], 6);
    assert_eq!(stats["by_state"]["completed"], 2);
    assert_eq!(stats["by_state"]["failed"], 1);
    assert_eq!(stats["by_state"]["in_progress"], 1);
    assert_eq!(stats["by_state"]["uncertain"], 1);
    assert_eq!(stats["by_state"]["released"], 1);
    assert_eq!(stats["by_state"]["tombstone"], 0);
    assert_eq!(stats["by_operation"]["create_payment"]["completed"], 1);
    assert_eq!(stats["by_operation"]["refund"]["released"], 1);
    assert!(stats["oldest_in_progress"].as_u64().is_some());
    assert!(stats["horizon"].as_u64() > stats["next_due"].as_u64());
    assert!(stats["file_bytes"].as_u64().expect("file size") > 0);
    assert!(stats["allocated_bytes"].as_u64().expect("allocated") > 0);

    let text = idemdb(["stats", arg(&path)]).code(0).stdout;
    for line in ["records", "oldest in-progress lease", "expiry horizon", "file size", "allocated"] {
        assert!(text.contains(line), "stats lacks `{line}`:\n{text}");
    }
    let row = text.lines().find(|l| l.starts_with("create_payment")).expect("create_payment row");
    assert_eq!(row.split_whitespace().collect::<Vec<_>>(), ["create_payment", "1", "1", "1", "0", "1", "0", "4"]);
}

#[test]
fn get_hides_keys_and_payloads_unless_asked() {
    let dir = TempDir::new().expect("tempdir");
    let path = sample_store(&dir);
    let by_key = ["get", arg(&path), "--tenant", "acme", "--operation", "create_payment", "--key", "paid", "--json"];
    let record = idemdb(by_key).code(0).json();
    assert_eq!(record["state"], "completed");
    assert_eq!(record["payload_bytes"], 17);
    assert!(record.get("key").is_none() && record.get("payload").is_none(), "{record}");
    let hash = record["key_hash"].as_str().expect("hash").to_string();
    assert_eq!(hash.len(), 32);

    let mut shown = by_key.to_vec();
    shown.extend(["--show-keys", "--show-payloads"]);
    let record = idemdb(shown).code(0).json();
    assert_eq!(record["key"], "paid");
    assert_eq!(record["payload"], "{\"charge\":\"ch_1\"}");

    let text = idemdb(["get", arg(&path), "--hash", &hash]).code(0).stdout;
    assert!(text.contains(&hash) && text.contains("completed") && !text.contains("ch_1"), "{text}");
    assert!(text.contains("hidden (--show-payloads)"), "{text}");

    let missing =
        idemdb(["get", arg(&path), "--tenant", "acme", "--operation", "create_payment", "--key", "nope"]).code(4);
    assert_eq!(missing.stderr.trim(), format!("error: {}: no record matches", path.display()));
    let invalid = idemdb(["get", arg(&path), "--tenant", "acme", "--operation", "x", "--key", "has space"]).code(2);
    assert!(invalid.stderr.contains("idempotency key has a byte outside visible ASCII"), "{}", invalid.stderr);
}

#[test]
fn list_filters_and_pages() {
    let dir = TempDir::new().expect("tempdir");
    let path = many_records(&dir, 25);
    let page =
        |offset: &str| idemdb(["list", arg(&path), "--limit", "10", "--offset", offset, "--json"]).code(0).json();
    let mut hashes = Vec::new();
    let mut offset = Some(0u64);
    let mut pages = 0;
    while let Some(at) = offset {
        let json = page(&at.to_string());
        pages += 1;
        for record in json["records"].as_array().expect("records") {
            assert!(record.get("key").is_none(), "keys are hashed by default");
            hashes.push(record["key_hash"].as_str().expect("hash").to_string());
        }
        offset = json["next_offset"].as_u64();
    }
    assert_eq!(pages, 3);
    assert_eq!(hashes.len(), 25);
    hashes.sort();
    hashes.dedup();
    assert_eq!(hashes.len(), 25, "pages do not overlap");

    let tenant = idemdb(["list", arg(&path), "--tenant", "t-b", "--limit", "0", "--json"]).code(0).json();
    let records = tenant["records"].as_array().expect("records");
    assert_eq!(records.len(), 8);
    assert!(records.iter().all(|r| r["tenant"] == "t-b"));
    assert_eq!(tenant["next_offset"], Value::Null);

    let text = idemdb(["list", arg(&path), "--limit", "5"]).code(0).stdout;
    assert!(text.starts_with("key hash"), "{text}");
    assert!(!text.contains("key-0"), "raw keys hidden:\n{text}");
    assert!(text.contains("records 1-5; more with --offset 5"), "{text}");
    let text =
        idemdb(["list", arg(&path), "--limit", "5", "--offset", "20", "--show-keys", "--show-payloads"]).code(0).stdout;
    assert!(text.contains("key-") && text.contains("result ") && text.contains("(end)"), "{text}");

    let sample = sample_store(&dir);
    let states = |state: &str| {
        idemdb(["list", arg(&sample), "--state", state, "--json"]).code(0).json()["records"]
            .as_array()
            .expect("records")
            .len()
    };
    assert_eq!((states("completed"), states("uncertain"), states("tombstone")), (2, 1, 0));
    let op = idemdb(["list", arg(&sample), "--operation", "refund", "--json"]).code(0).json();
    assert_eq!(op["records"].as_array().expect("records").len(), 2);
    assert_eq!(idemdb(["list", arg(&sample), "--tenant", "nobody"]).code(0).stdout, "no records\n");
}

#[test]
fn purge_dry_run_then_purge_tombstones_expired_results() {
    let dir = TempDir::new().expect("tempdir");
    let path = dir.path().join("old.idemdb");
    {
        // Written two days ago with a one-day response TTL: the results are due now.
        let two_days_ago = SystemClock.now().as_millis() - 2 * 86_400_000;
        let policy = Policy::default().with_response_ttl(Duration::from_secs(86_400));
        let store =
            Store::builder().clock(ManualClock::new(two_days_ago)).default_policy(policy).open(&path).expect("create");
        let pay = scope("acme", "create_payment");
        for i in 0..5 {
            store.complete(&lease(&store, &pay, &format!("old-{i}"), 1), b"done".to_vec()).expect("complete");
        }
        lease(&store, &pay, "still-running", 2);
    }
    // The store was last used two days ago: until the wall clock is confirmed, that gap does
    // not count for retention, and the report says so.
    let unconfirmed = idemdb(["purge", arg(&path), "--dry-run", "--json"]).code(0).json();
    assert_eq!(unconfirmed["tombstoned"], 0);
    assert!(unconfirmed["unconfirmed_clock_ms"].as_u64() > Some(2 * 86_400_000 - 60_000), "{unconfirmed}");
    let text = idemdb(["purge", arg(&path), "--dry-run"]).code(0).stdout;
    assert!(text.contains("ahead of the store's confirmed time"), "{text}");
    let dry = idemdb(["purge", arg(&path), "--dry-run", "--trust-clock", "--json"]).code(0).json();
    assert_eq!(
        (dry["dry_run"].clone(), dry["tombstoned"].clone(), dry["forgotten"].clone()),
        (Value::Bool(true), 5.into(), 0.into())
    );
    let stats = idemdb(["stats", arg(&path), "--json"]).code(0).json();
    assert_eq!(stats["by_state"]["completed"], 5, "a dry run changes nothing");
    let last_word = |text: &str, label: &str| {
        let line = text.lines().find(|l| l.starts_with(label)).unwrap_or_else(|| panic!("no `{label}` in:\n{text}"));
        line.split_whitespace().last().expect("value").to_string()
    };
    let dry_text = idemdb(["purge", arg(&path), "--dry-run", "--trust-clock"]).code(0).stdout;
    assert_eq!(last_word(&dry_text, "would tombstone"), "5");
    assert!(dry_text.contains("dry run: nothing was changed"), "{dry_text}");

    let done = idemdb(["purge", arg(&path), "--budget", "2", "--trust-clock", "--json"]).code(0).json();
    assert_eq!(done["tombstoned"], 5);
    assert!(done["passes"].as_u64() >= Some(3), "a budget of 2 takes several passes: {done}");
    let stats = idemdb(["stats", arg(&path), "--json"]).code(0).json();
    assert_eq!(
        (stats["by_state"]["tombstone"].clone(), stats["by_state"]["in_progress"].clone()),
        (5.into(), 1.into())
    );
    let again = idemdb(["purge", arg(&path)]).code(0).stdout;
    assert_eq!(last_word(&again, "tombstoned"), "0");
}

#[test]
fn compact_reports_sizes() {
    let dir = TempDir::new().expect("tempdir");
    let path = many_records(&dir, 50);
    let json = idemdb(["compact", arg(&path), "--json"]).code(0).json();
    assert!(json["compacted"].is_boolean());
    assert!(json["file_bytes_after"].as_u64() <= json["file_bytes_before"].as_u64());
    assert!(idemdb(["compact", arg(&path)]).code(0).stdout.contains("size after"));
    assert_eq!(idemdb(["stats", arg(&path), "--json"]).code(0).json()["records"], 50, "compaction keeps every record");
}

#[test]
fn compact_rebuild_rewrites_the_file_smaller_and_keeps_every_record() {
    let dir = TempDir::new().expect("tempdir");
    let path = many_records(&dir, 3_000);
    let before = idemdb(["list", arg(&path), "--json", "--limit", "5000"]).code(0).stdout;
    let json = idemdb(["compact", arg(&path), "--rebuild", "--json"]).code(0).json();
    assert_eq!(json["rebuilt"], true);
    assert_eq!(json["records"], 3_000);
    let (was, is) =
        (json["file_bytes_before"].as_u64().expect("before"), json["file_bytes_after"].as_u64().expect("after"));
    assert!(is < was, "the rebuilt file is smaller: {is} < {was}");
    assert_eq!(std::fs::metadata(&path).expect("size").len(), is);
    assert!(!dir.path().join("many.idemdb.rebuild").exists(), "the copy replaced the file");
    assert_eq!(
        idemdb(["list", arg(&path), "--json", "--limit", "5000"]).code(0).stdout,
        before,
        "same records, same hashes"
    );
    assert_eq!(idemdb(["verify", arg(&path), "--json"]).code(0).json()["ok"], true);
    assert!(idemdb(["compact", arg(&path), "--rebuild"]).code(0).stdout.contains("rebuilt in key order"));
    // A missing file is an open error (exit 3), and nothing is created.
    let missing = dir.path().join("missing.idemdb");
    idemdb(["compact", arg(&missing), "--rebuild"]).code(3);
    assert!(!missing.exists());
}

#[test]
fn verify_passes_a_sound_store() {
    let dir = TempDir::new().expect("tempdir");
    let path = sample_store(&dir);
    let text = idemdb(["verify", arg(&path)]).code(0).stdout;
    assert!(text.contains("records checked        6") && text.trim_end().ends_with("verify: OK"), "{text}");
    let json = idemdb(["verify", arg(&path), "--json"]).code(0).json();
    assert_eq!(
        (json["ok"].clone(), json["storage_ok"].clone(), json["records"].clone()),
        (true.into(), true.into(), 6.into())
    );
    assert_eq!(json["problems"], Value::Array(Vec::new()));
}

/// Flips `len` bytes of `path` at `offset`.
fn flip(path: &Path, offset: usize, len: usize) {
    let mut bytes = std::fs::read(path).expect("read");
    for byte in &mut bytes[offset..offset + len] {
        *byte ^= 0xff;
    }
    std::fs::write(path, bytes).expect("write");
}

#[test]
fn verify_reports_damage_instead_of_crashing() {
    let dir = TempDir::new().expect("tempdir");
    let sound = many_records(&dir, 200);
    let len = std::fs::metadata(&sound).expect("metadata").len() as usize;

    // A page the store uses, damaged: redb's own code trips over it. Which pages are in use
    // depends on how the commits fell (journal checkpoints; the clock and the audit batches
    // persisted once a second), so take the first page after the header whose damage verify sees (a
    // free page's damage harms nothing); damage of every page must give a verdict, not a crash.
    let damaged = dir.path().join("damaged.idemdb");
    let run = (4096..len - 4096)
        .step_by(4096)
        .find_map(|offset| {
            std::fs::copy(&sound, &damaged).expect("copy");
            flip(&damaged, offset, 64);
            let run = idemdb(["verify", arg(&damaged)]);
            assert!(run.code == 0 || run.code == 1, "offset {offset}: exit {}\n{}{}", run.code, run.stdout, run.stderr);
            (run.code == 1).then_some(run)
        })
        .expect("damage to some page is reported");
    assert!(
        run.stdout.contains("problems  1") && run.stdout.trim_end().ends_with("verify: PROBLEMS FOUND"),
        "{}",
        run.stdout
    );
    let json = idemdb(["verify", arg(&damaged), "--json"]).code(1).json();
    assert_eq!(json["ok"], false);
    assert!(json["error"].as_str().is_some_and(|e| !e.is_empty()), "{json}");
    // Commands that open for writing refuse the file with a readable error (their open runs
    // redb's integrity check). Read-only commands read only the pages they need, without the
    // check (it writes): they answer from intact pages or refuse with a readable error.
    let purge = idemdb(["purge", arg(&damaged)]).code(3);
    assert!(
        purge.stderr.starts_with(&format!("error: {}: ", damaged.display())) && purge.stderr.contains("damaged"),
        "{}",
        purge.stderr
    );
    let stats = idemdb(["stats", arg(&damaged)]);
    assert!(stats.code == 0 || (stats.code == 3 && stats.stderr.contains("damaged")), "{}", stats.stderr);

    // Damage anywhere else: a verdict and a report, never a crash.
    for at in [len / 4, len / 2, len - 8192] {
        let copy = dir.path().join(format!("damaged-{at}.idemdb"));
        std::fs::copy(&sound, &copy).expect("copy");
        flip(&copy, at, 256);
        let run = idemdb(["verify", arg(&copy)]);
        assert!(run.code == 0 || run.code == 1, "offset {at}: exit {}\n{}{}", run.code, run.stdout, run.stderr);
        assert!(run.stdout.contains("verify: "), "offset {at}: {}", run.stdout);
        idemdb(["list", arg(&copy), "--limit", "0"]);
    }
}

#[test]
fn verify_refuses_files_that_are_not_stores() {
    let dir = TempDir::new().expect("tempdir");
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "just some text, not a database\n".repeat(200)).expect("write");
    let run = idemdb(["verify", arg(&text)]).code(1);
    assert!(run.stdout.contains("not an idemdb store"), "{}", run.stdout);

    let empty = dir.path().join("empty.idemdb");
    std::fs::write(&empty, b"").expect("write");
    assert!(idemdb(["verify", arg(&empty)]).code(1).stdout.contains("the file is empty"));
    assert_eq!(std::fs::metadata(&empty).expect("metadata").len(), 0, "verify never initialises a file");

    let foreign = dir.path().join("other.redb");
    {
        let db = idemdb::redb::Database::create(&foreign).expect("redb");
        let tx = db.begin_write().expect("write");
        let table: idemdb::redb::TableDefinition<&str, u64> = idemdb::redb::TableDefinition::new("inventory");
        tx.open_table(table).expect("table").insert("apples", 3).expect("insert");
        tx.commit().expect("commit");
    }
    let run = idemdb(["verify", arg(&foreign), "--json"]).code(1).json();
    assert!(run["error"].as_str().is_some_and(|e| e.contains("inventory")), "{run}");

    let missing = dir.path().join("missing.idemdb");
    let run = idemdb(["verify", arg(&missing)]).code(3);
    assert!(run.stderr.starts_with(&format!("error: {}: ", missing.display())), "{}", run.stderr);
    assert!(!missing.exists(), "verify never creates a store");
}

#[test]
fn open_failures_exit_with_3_and_name_the_file() {
    let dir = TempDir::new().expect("tempdir");
    let missing = dir.path().join("missing.idemdb");
    for command in ["stats", "list", "export", "purge", "compact"] {
        let run = idemdb([command, arg(&missing)]).code(3);
        assert!(run.stderr.starts_with(&format!("error: {}: ", missing.display())), "{command}: {}", run.stderr);
        assert_eq!(run.stderr.lines().count(), 1, "one line: {}", run.stderr);
    }
    assert!(!missing.exists(), "read commands never create a store");

    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "hello").expect("write");
    assert!(idemdb(["stats", arg(&text)]).code(3).stderr.contains("not an idemdb store"));
    assert!(idemdb(["stats", arg(dir.path())]).code(3).stderr.contains("is a directory"));

    let path = sample_store(&dir);
    let held = Store::open(&path).expect("open");
    let run = idemdb(["stats", arg(&path)]).code(3);
    assert!(run.stderr.contains("already open"), "{}", run.stderr);
    drop(held);
    idemdb(["stats", arg(&path)]).code(0);
}

#[test]
fn export_then_import_round_trips() {
    let dir = TempDir::new().expect("tempdir");
    let path = sample_store(&dir);

    // The default export is safe to share: hashed keys, no payloads.
    let shared = idemdb(["export", arg(&path)]).code(0).stdout;
    let lines: Vec<Value> = shared.lines().map(|l| serde_json::from_str(l).expect("json line")).collect();
    assert_eq!(lines.len(), 6);
    assert!(lines.iter().all(|l| l.get("key").is_none() && l.get("payload").is_none() && l.get("key_hash").is_some()));
    assert!(!shared.contains("ch_1") && !shared.contains("\"paid\""), "{shared}");
    let hashed = dir.path().join("hashed.jsonl");
    std::fs::write(&hashed, &shared).expect("write");
    let refused = idemdb(["import", arg(&dir.path().join("x.idemdb")), arg(&hashed)]).code(4);
    assert!(refused.stderr.contains("line 1: no `key`"), "{}", refused.stderr);

    // A full export copies everything.
    let backup = dir.path().join("backup.jsonl");
    let summary =
        idemdb(["export", arg(&path), "--show-keys", "--show-payloads", "-o", arg(&backup), "--json"]).code(0).json();
    assert_eq!(summary["records"], 6);
    let copy = dir.path().join("copy.idemdb");
    let imported = idemdb(["import", arg(&copy), arg(&backup), "--json"]).code(0).json();
    assert_eq!((imported["imported"].clone(), imported["skipped_existing"].clone()), (6.into(), 0.into()));
    let (before, after) = (
        idemdb(["stats", arg(&path), "--json"]).code(0).json(),
        idemdb(["stats", arg(&copy), "--json"]).code(0).json(),
    );
    assert_eq!(before["records"], after["records"]);
    assert_eq!(before["by_operation"], after["by_operation"]);
    let get = [
        "get",
        arg(&copy),
        "--tenant",
        "acme",
        "--operation",
        "create_payment",
        "--key",
        "paid",
        "--show-payloads",
        "--json",
    ];
    assert_eq!(idemdb(get).code(0).json()["payload"], "{\"charge\":\"ch_1\"}");
    let strip = |v: Value| {
        v.as_object()
            .expect("object")
            .iter()
            .filter(|(k, _)| *k != "key_hash")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<Vec<_>>()
    };
    let full = |p: &Path| idemdb(["export", arg(p), "--show-keys", "--show-payloads"]).code(0).stdout;
    let original: Vec<_> = full(&path).lines().map(|l| strip(serde_json::from_str(l).expect("json"))).collect();
    let copied: Vec<_> = full(&copy).lines().map(|l| strip(serde_json::from_str(l).expect("json"))).collect();
    assert_eq!(original, copied, "every field but the store-keyed hash survives");
    idemdb(["verify", arg(&copy)]).code(0);

    // Importing again keeps what is there unless told to overwrite.
    let again = idemdb(["import", arg(&copy), arg(&backup)]).code(0).stdout;
    assert!(again.contains("skipped (already there)  6") && again.contains("--overwrite"), "{again}");
    let over = idemdb(["import", arg(&copy), arg(&backup), "--overwrite", "--json"]).code(0).json();
    assert_eq!(over["imported"], 6);

    // Without payloads, finished records come back as tombstones: known, never run again.
    let no_payloads = dir.path().join("no-payloads.jsonl");
    idemdb(["export", arg(&path), "--show-keys", "-o", arg(&no_payloads)]).code(0);
    let tomb = dir.path().join("tomb.idemdb");
    let json = idemdb(["import", arg(&tomb), arg(&no_payloads), "--json"]).code(0).json();
    assert_eq!((json["imported"].clone(), json["tombstoned_without_payload"].clone()), (6.into(), 3.into()));

    // A malformed line: nothing is written, and the error names the file and the line.
    let broken = dir.path().join("broken.jsonl");
    let mut text = std::fs::read_to_string(&backup).expect("read");
    text.push_str("{\"tenant\": 12}\n");
    std::fs::write(&broken, text).expect("write");
    let fresh = dir.path().join("fresh.idemdb");
    let run = idemdb(["import", arg(&fresh), arg(&broken)]).code(4);
    assert!(run.stderr.starts_with(&format!("error: {}: line 7: ", broken.display())), "{}", run.stderr);
    assert!(!fresh.exists(), "nothing was created");
}

#[test]
fn reads_the_golden_format_1_store() {
    let dir = TempDir::new().expect("tempdir");
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/testdata/golden/store-v1.idemdb");
    let copy = dir.path().join("store-v1.idemdb");
    std::fs::copy(&golden, &copy).expect("copy the golden fixture");
    let stats = idemdb(["stats", arg(&copy), "--json"]).code(0).json();
    assert_eq!(stats["records"], 6);
    assert_eq!(stats["by_operation"]["create_payment"]["completed"], 2);
    let get = [
        "get",
        arg(&copy),
        "--tenant",
        "acme",
        "--operation",
        "create_payment",
        "--key",
        "failed",
        "--show-payloads",
        "--json",
    ];
    assert_eq!(idemdb(get).code(0).json()["payload"], "declined");
    idemdb(["verify", arg(&copy)]).code(0);
}

#[test]
fn demo_has_no_duplicate_effects_and_the_new_key_client_does() {
    let dir = TempDir::new().expect("tempdir");
    let data = arg(dir.path());
    let run = idemdb(["demo", "--json", "--intents", "200", "--seed", "7", "--data", data]).code(0);
    let json = run.json();
    assert!(run.stderr.is_empty(), "no progress bar without a terminal: {}", run.stderr);
    for field in ["intents", "attempts", "effects", "duplicate_effects", "replays", "conflicts"] {
        assert!(json[field].is_u64(), "`{field}` missing: {json}");
    }
    assert_eq!(json["intents"], 200);
    assert_eq!(json["duplicate_effects"], 0);
    assert_eq!(json["inconsistent"], 0);
    assert_eq!(json["effects"], json["completed"], "one charge per completed intent");
    assert_eq!(json["ok"], true);
    let attempts = json["attempts"].as_u64().expect("attempts");
    assert!(attempts > 200, "faults caused retries: {json}");
    for field in
        ["replays", "lost_requests", "lost_responses", "timeouts", "crashes", "in_progress_refusals", "reconciliations"]
    {
        assert!(json[field].as_u64() > Some(0), "the channel exercised `{field}`: {json}");
    }
    let naive = &json["new_key_per_retry"];
    assert!(naive["duplicate_effects"].as_u64() > Some(0), "{naive}");
    assert_eq!(naive["intents"], 200);
    assert_eq!(naive["replays"], 0);

    // The store is a real file, and its records agree with the report.
    let store = dir.path().join("demo.idemdb");
    assert_eq!(json["store"], arg(&store));
    let stats = idemdb(["stats", arg(&store), "--json"]).code(0).json();
    assert_eq!(stats["by_operation"]["create_payment"]["completed"], json["completed"]);
    idemdb(["verify", arg(&store)]).code(0);

    // The same seed gives the same counts (on a fresh file).
    let again = idemdb(["demo", "--json", "--intents", "200", "--seed", "7", "--data", data]).code(0).json();
    assert_eq!(again, json);
}

#[test]
fn demo_prints_a_side_by_side_table() {
    let dir = TempDir::new().expect("tempdir");
    let run = idemdb(["demo", "--intents", "60", "--seed", "3", "--data", arg(dir.path())]).code(0);
    let text = run.stdout;
    assert!(text.contains("idemdb (same key)") && text.contains("new key per retry"), "{text}");
    for row in [
        "intents",
        "attempts",
        "lost requests",
        "lost responses",
        "timeouts",
        "replays",
        "conflicts",
        "in-progress refusals",
        "reconciliations",
        "effects",
        "duplicate effects",
    ] {
        assert!(text.lines().any(|l| l.starts_with(row)), "table lacks `{row}`:\n{text}");
    }
    let duplicates = text.lines().find(|l| l.starts_with("duplicate effects")).expect("row");
    assert_eq!(duplicates.split_whitespace().nth(2), Some("0"), "{duplicates}");
    assert!(text.contains(&format!("store: {}", dir.path().join("demo.idemdb").display())), "{text}");
}

// ---------------------------------------------------------------------------------------------
// Operators must never lose a commit or cause a second effect.

/// Makes a file read-only for the test's lifetime, even for a user whom permissions do not
/// stop (root): then the file is also made immutable (`chattr +i`). Undone on drop.
struct ReadOnlyFile {
    path: PathBuf,
    immutable: bool,
}

impl ReadOnlyFile {
    fn new(path: &Path) -> Self {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o444)).expect("chmod");
        let writable = || std::fs::OpenOptions::new().write(true).open(path).is_ok();
        let mut guard = ReadOnlyFile { path: path.to_path_buf(), immutable: false };
        if writable() {
            let status = std::process::Command::new("chattr").arg("+i").arg(path).status();
            guard.immutable = status.is_ok_and(|status| status.success());
        }
        assert!(!writable(), "cannot make {} read-only here (permissions and chattr)", path.display());
        guard
    }
}

impl Drop for ReadOnlyFile {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        if self.immutable {
            let _ = std::process::Command::new("chattr").arg("-i").arg(&self.path).status();
        }
        let _ = std::fs::set_permissions(&self.path, std::fs::Permissions::from_mode(0o644));
    }
}

/// Regression: `stats`, `get`, `list`, `export`, `verify` and `purge --dry-run` opened the store
/// for writing. Every run changed the file's bytes (the integrity check's commit, the clock
/// written on close), and on a read-only file they failed with "Permission denied" (`verify`
/// then reported "PROBLEMS FOUND").
#[test]
fn read_only_commands_change_no_byte_and_work_on_a_read_only_file() {
    let dir = TempDir::new().expect("tempdir");
    let path = sample_store(&dir);
    let p = arg(&path);
    let commands: [&[&str]; 7] = [
        &["stats", p],
        &["get", p, "--tenant", "acme", "--operation", "create_payment", "--key", "paid", "--show-payloads"],
        &["list", p, "--show-payloads"],
        &["export", p, "--show-keys", "--show-payloads"],
        &["verify", p],
        &["purge", p, "--dry-run"],
        &["stats", p, "--json"],
    ];
    let original = std::fs::read(&path).expect("read");
    let mut outputs = Vec::new();
    for command in commands {
        let run = idemdb(command).code(0);
        assert!(std::fs::read(&path).expect("read") == original, "`{}` changed the file's bytes", command.join(" "));
        outputs.push(run.stdout);
    }
    let read_only = ReadOnlyFile::new(&path);
    for (command, before) in commands.iter().zip(&outputs) {
        let run = idemdb(*command).code(0);
        if command[0] != "stats" {
            assert_eq!(&run.stdout, before, "`{}` on the read-only file", command.join(" "));
        }
    }
    assert!(idemdb(["verify", p]).code(0).stdout.trim_end().ends_with("verify: OK"));
    drop(read_only);
    assert!(std::fs::read(&path).expect("read") == original, "the file's bytes changed");
}

/// Regression: an invalid `--key` or `--tenant` exited with 4 while the exit-code table says
/// that invalid arguments exit with 2.
#[test]
fn invalid_key_or_tenant_arguments_exit_with_2() {
    let dir = TempDir::new().expect("tempdir");
    let path = sample_store(&dir);
    let p = arg(&path);
    let key = idemdb(["get", p, "--tenant", "acme", "--operation", "create_payment", "--key", "has space"]).code(2);
    assert!(key.stderr.contains("--key") && key.stderr.contains("visible ASCII"), "{}", key.stderr);
    let tenant = idemdb(["get", p, "--tenant", "", "--operation", "create_payment", "--key", "paid"]).code(2);
    assert!(tenant.stderr.contains("--tenant"), "{}", tenant.stderr);
    let hash = idemdb(["get", p, "--hash", "not-a-hash"]).code(2);
    assert!(hash.stderr.contains("--hash"), "{}", hash.stderr);
    // A well-formed query that matches nothing is still a runtime answer (4).
    idemdb(["get", p, "--tenant", "acme", "--operation", "create_payment", "--key", "nope"]).code(4);
}

/// The exit-code tables of the CLI README and of `--help` list the codes the binary returns.
#[test]
fn exit_codes_match_the_documented_tables() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (readme, heading) in
        [(manifest.join("README.md"), "## Exit codes"), (manifest.join("../../README.md"), "Exit codes of the")]
    {
        let text = std::fs::read_to_string(&readme).expect("README");
        let table: Vec<u8> = text
            .lines()
            .skip_while(|line| !line.starts_with(heading))
            .skip(1)
            .skip_while(|line| !line.starts_with('|'))
            .take_while(|line| line.starts_with('|'))
            .filter_map(|line| line.strip_prefix("| "))
            .filter_map(|line| line.split(' ').next().and_then(|code| code.parse().ok()))
            .collect();
        assert_eq!(table, [0, 1, 2, 3, 4], "the exit-code table of {}", readme.display());
    }
    let help = idemdb(["--help"]).code(0).stdout;
    assert!(help.contains("2  usage error") && help.contains("--key"), "{help}");
    let dir = TempDir::new().expect("tempdir");
    let path = sample_store(&dir);
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "hello").expect("write");
    idemdb(["stats", arg(&path)]).code(0);
    idemdb(["verify", arg(&notes)]).code(1);
    idemdb(["get", arg(&path), "--tenant", "acme", "--operation", "create_payment", "--key", "a b"]).code(2);
    idemdb(["stats", arg(&dir.path().join("missing.idemdb"))]).code(3);
    idemdb(["get", arg(&path), "--tenant", "acme", "--operation", "create_payment", "--key", "nope"]).code(4);
}

/// Regression: a FIFO was reported as "the file is empty", and `import` replaced a FIFO with a
/// new store.
#[test]
fn a_fifo_is_refused_as_not_a_regular_file_and_import_never_replaces_it() {
    use std::os::unix::fs::FileTypeExt;
    let dir = TempDir::new().expect("tempdir");
    let fifo = dir.path().join("pipe.idemdb");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    for command in ["stats", "list", "export", "verify", "purge", "compact"] {
        let run = idemdb([command, arg(&fifo)]).code(3);
        assert!(run.stderr.contains("not a regular file"), "{command}: {}", run.stderr);
    }
    let backup = dir.path().join("backup.jsonl");
    let sample = sample_store(&dir);
    idemdb(["export", arg(&sample), "--show-keys", "--show-payloads", "-o", arg(&backup)]).code(0);
    let run = idemdb(["import", arg(&fifo), arg(&backup)]).code(3);
    assert!(run.stderr.contains("not a regular file"), "{}", run.stderr);
    assert!(std::fs::symlink_metadata(&fifo).expect("still there").file_type().is_fifo(), "the FIFO was replaced");
}

/// Regression: `get --show-payloads` wrote stored payloads to the terminal as they were,
/// terminal escape sequences included (`list` replaced control characters).
#[test]
fn get_and_list_show_payloads_without_terminal_escapes() {
    let dir = TempDir::new().expect("tempdir");
    let path = dir.path().join("escapes.idemdb");
    {
        let store = Store::open(&path).expect("create");
        let pay = scope("acme", "create_payment");
        let hostile = "\u{1b}]0;owned\u{7}\u{1b}[2J\u{1b}[31mred\r\nline2\u{9b}6n\u{202e}".as_bytes().to_vec();
        store.complete(&lease(&store, &pay, "evil", 1), hostile).expect("complete");
    }
    let get = ["get", arg(&path), "--tenant", "acme", "--operation", "create_payment", "--key", "evil"];
    let mut shown = get.to_vec();
    shown.push("--show-payloads");
    let text = idemdb(&shown).code(0).stdout;
    let list = idemdb(["list", arg(&path), "--show-payloads"]).code(0).stdout;
    for (what, output) in [("get", &text), ("list", &list)] {
        assert!(
            !output.chars().any(|c| (c.is_control() && c != '\n') || ('\u{202a}'..='\u{202e}').contains(&c)),
            "{what} wrote control characters: {output:?}"
        );
    }
    assert!(text.contains("red") && text.contains("line2"), "the printable text is still shown: {text}");
    shown.push("--json");
    let json = idemdb(&shown).code(0).json();
    assert!(json["payload"].as_str().expect("payload").starts_with('\u{1b}'), "JSON keeps the exact bytes");
}

/// Regression: `list --json` built the whole document in memory before printing it (437 MB
/// for 100,000 records). It must stream: its memory when the first output arrives does not
/// grow with the number of records.
#[cfg(target_os = "linux")]
#[test]
fn list_json_streams_its_output() {
    use std::io::Read;
    let dir = TempDir::new().expect("tempdir");
    let path = dir.path().join("big.idemdb");
    {
        let store = Store::builder().durability(idemdb::Durability::Eventual).open(&path).expect("create");
        let pay = scope("acme", "create_payment");
        store
            .write(|txn| {
                for i in 0..6_000 {
                    let lease = match txn.reserve(Reserve::new(
                        &pay,
                        &key(&format!("k-{i:05}")),
                        &Fingerprint::from_bytes([1; 32]),
                    ))? {
                        Reservation::Acquired(lease) => lease,
                        other => panic!("{other:?}"),
                    };
                    txn.complete(&lease, vec![b'x'; 16 * 1024])?;
                }
                Ok::<(), idemdb::Error>(())
            })
            .expect("write");
        store.flush().expect("flush");
    }
    let binary = assert_cmd::cargo::cargo_bin!("idemdb");
    let mut child = std::process::Command::new(binary)
        .args(["list", arg(&path), "--json", "--limit", "0", "--show-payloads"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut first = vec![0u8; 64 * 1024];
    stdout.read_exact(&mut first).expect("the first 64 KiB of output");
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).expect("status of the child");
    let peak_kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .expect("VmHWM");
    let mut rest = Vec::new();
    stdout.read_to_end(&mut rest).expect("the rest");
    assert!(child.wait().expect("wait").success());
    first.extend(rest);
    let json: Value = serde_json::from_slice(&first).expect("one JSON document");
    assert_eq!(json["records"].as_array().expect("records").len(), 6_000);
    // 6,000 payloads of 16 KiB are 96 MiB of JSON text: a document built in memory is far
    // above this bound when its first byte is written.
    assert!(peak_kib < 64 * 1024, "peak memory before the first 64 KiB of output: {peak_kib} KiB");
}

/// Regression: `demo` removed its store file even while another `demo` was using it, and the
/// first run then reported a duplicate effect (exit 1) that never happened.
#[test]
fn a_second_demo_never_deletes_the_store_of_a_running_one() {
    let dir = TempDir::new().expect("tempdir");
    let data = arg(dir.path()).to_string();
    let binary = assert_cmd::cargo::cargo_bin!("idemdb");
    let mut first = std::process::Command::new(binary)
        .args(["demo", "--json", "--intents", "5000", "--seed", "5", "--data", &data])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let store = dir.path().join("demo.idemdb");
    let waited = std::time::Instant::now();
    while !store.exists() {
        assert!(waited.elapsed() < Duration::from_secs(60), "the first demo never created its store");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let mut refused = 0;
    for _ in 0..3 {
        let second = idemdb(["demo", "--json", "--intents", "50", "--seed", "6", "--data", &data]);
        if first.try_wait().expect("try_wait").is_some() {
            break;
        }
        assert_eq!(second.code, 3, "a second demo beside a running one\nstderr: {}", second.stderr);
        assert!(second.stderr.contains("in use"), "{}", second.stderr);
        refused += 1;
    }
    let output = first.wait_with_output().expect("first demo");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "the first demo\nstdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(refused > 0, "the first demo finished before a second one could start");
    let json: Value = serde_json::from_str(&stdout).expect("json");
    assert_eq!(json["duplicate_effects"], 0);
}

/// Regression: `import` accepted records the engine never writes — a payload over the result
/// limit, a fence near `u64::MAX`, `expires_at` after `forget_at`, `updated_at` before
/// `created_at`, no attempts, unknown fields, and a second line for the same key — and some
/// of them poisoned the store. Every one must be refused with its line number, and nothing
/// written.
#[test]
fn import_refuses_records_the_engine_would_never_write() {
    let dir = TempDir::new().expect("tempdir");
    let sample = sample_store(&dir);
    let backup = dir.path().join("backup.jsonl");
    idemdb(["export", arg(&sample), "--show-keys", "--show-payloads", "-o", arg(&backup)]).code(0);
    let lines: Vec<Value> = std::fs::read_to_string(&backup)
        .expect("read")
        .lines()
        .map(|line| serde_json::from_str(line).expect("json"))
        .collect();
    let completed = lines.iter().position(|l| l["state"] == "completed").expect("a completed line");
    let released = lines.iter().position(|l| l["state"] == "released").expect("a released line");
    let set = |index: usize, field: &str, value: Value| {
        let mut lines = lines.clone();
        lines[index][field] = value;
        (lines, index + 1)
    };
    let huge = "x".repeat(1024 * 1024 + 1);
    let expires = lines[completed]["expires_at"].as_u64().expect("expires_at");
    let created = lines[completed]["created_at"].as_u64().expect("created_at");
    // (what, (the lines, the line refused), a word of the reason)
    type Case<'a> = (&'a str, (Vec<Value>, usize), &'a str);
    let cases: Vec<Case> = vec![
        (
            "a payload over the result limit",
            {
                let (mut lines, line) = set(completed, "payload", Value::from(huge.as_str()));
                lines[completed]["payload_bytes"] = Value::from(huge.len());
                (lines, line)
            },
            "limit",
        ),
        ("a fence near u64::MAX", set(released, "fence", Value::from(u64::MAX - 1)), "fence"),
        ("expires_at after forget_at", set(completed, "forget_at", Value::from(expires - 1)), "forget_at"),
        ("updated_at before created_at", set(completed, "updated_at", Value::from(created - 1)), "updated_at"),
        ("no attempts", set(completed, "attempts", Value::from(0)), "attempts"),
        ("an unknown field", set(completed, "colour", Value::from("blue")), "colour"),
        (
            "a second line for the same key",
            {
                let mut twice = lines.clone();
                let mut other = lines[completed].clone();
                other["payload"] = Value::from("{\"charge\":\"ch_2\"}");
                other["payload_bytes"] = Value::from(17);
                twice.push(other);
                let at = twice.len();
                (twice, at)
            },
            "more than once",
        ),
    ];
    let existing = dir.path().join("existing.idemdb");
    std::fs::copy(&sample, &existing).expect("copy");
    let existing_bytes = std::fs::read(&existing).expect("read");
    for (what, (lines, line), reason) in cases {
        let input = dir.path().join("bad.jsonl");
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(&input, text).expect("write");
        let fresh = dir.path().join("fresh.idemdb");
        let run = idemdb(["import", arg(&fresh), arg(&input)]).code(4);
        assert!(
            run.stderr.starts_with(&format!("error: {}: line {line}: ", input.display()))
                && run.stderr.contains(reason),
            "{what}: {}",
            run.stderr
        );
        assert!(!fresh.exists(), "{what}: a store was created");
        idemdb(["import", arg(&existing), arg(&input), "--overwrite"]).code(4);
        assert!(std::fs::read(&existing).expect("read") == existing_bytes, "{what}: the existing store changed");
    }
    idemdb(["import", arg(&dir.path().join("good.idemdb")), arg(&backup)]).code(0);
}

/// Regression: `purge` of a compact file doubled it (76 MB to 146 MB for 200,000 records):
/// redb grows a full file by doubling its usable size when a write needs a page and none is
/// free. A purge now compacts at the end when the file grew, so the file grows only by what
/// the purge wrote.
#[test]
fn purge_does_not_leave_a_full_file_doubled() {
    let dir = TempDir::new().expect("tempdir");
    let path = dir.path().join("expired.idemdb");
    let records = 4_000;
    {
        let three_days_ago = SystemClock.now().as_millis() - 3 * 86_400_000;
        let clock = ManualClock::new(three_days_ago);
        let policy = Policy::default().with_response_ttl(Duration::from_secs(86_400));
        let mut store = Store::builder()
            .clock(clock.clone())
            .default_policy(policy)
            .durability(idemdb::Durability::Eventual)
            .open(&path)
            .expect("create");
        let pay = scope("acme", "create_payment");
        for chunk in 0..records / 100 {
            store
                .write(|txn| {
                    for i in chunk * 100..(chunk + 1) * 100 {
                        let name = format!("{:016x}-{i}", (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
                        let Reservation::Acquired(lease) =
                            txn.reserve(Reserve::new(&pay, &key(&name), &Fingerprint::from_bytes([1; 32])))?
                        else {
                            panic!("{name} is new");
                        };
                        txn.complete(&lease, vec![b'x'; 200])?;
                    }
                    Ok::<(), idemdb::Error>(())
                })
                .expect("write");
        }
        // Two days pass with the store open: the results are due.
        clock.set(three_days_ago + 2 * 86_400_000 + 60_000);
        store.flush().expect("flush");
        while store.compact().expect("compact") {}
    }
    let before = std::fs::metadata(&path).expect("size").len();
    let report = idemdb(["purge", arg(&path), "--json"]).code(0).json();
    let after = std::fs::metadata(&path).expect("size").len();
    assert_eq!(report["tombstoned"], records, "{report}");
    assert_eq!(
        (report["file_bytes_before"].as_u64(), report["file_bytes_after"].as_u64()),
        (Some(before), Some(after))
    );
    // The purge adds an audit event per record and moves index entries, so the data grows a
    // little; the file grows by what they need, not by redb's doubling.
    assert!(after <= before + before / 4, "the purge left the file at {after} bytes, it was {before}");
    assert_eq!(idemdb(["stats", arg(&path), "--json"]).code(0).json()["by_state"]["tombstone"], records);
}

/// Operators beside a writer (the reliability report runs this at scale, with `kill -9`): while
/// a writer opens the store, completes one intent and closes it, in a loop, the `idemdb` binary
/// rebuilds, compacts, purges and imports into the same file. Every completion the writer was
/// told about, and every record of an import that exited with 0, is there afterwards.
#[test]
fn operators_beside_a_writer_lose_no_completion_and_no_import() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = TempDir::new().expect("tempdir");
    let path = dir.path().join("busy.idemdb");
    drop(Store::open(&path).expect("create"));
    let pay = scope("acme", "create_payment");
    let writing = AtomicBool::new(true);
    let (acknowledged, imported) = std::thread::scope(|threads| {
        let writer = threads.spawn(|| {
            let mut acknowledged = Vec::new();
            for i in 0..60u8 {
                let store = loop {
                    match Store::open(&path) {
                        Ok(store) => break store,
                        Err(idemdb::OpenError::AlreadyOpen | idemdb::OpenError::Replaced { .. }) => {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        Err(other) => panic!("open: {other}"),
                    }
                };
                let name = format!("order-{i}");
                store.complete(&lease(&store, &pay, &name, i), name.clone().into_bytes()).expect("complete");
                drop(store);
                acknowledged.push((name, i));
                std::thread::sleep(Duration::from_millis(2));
            }
            writing.store(false, Ordering::SeqCst);
            acknowledged
        });
        let mut imported = Vec::new();
        let mut round = 0;
        while writing.load(Ordering::SeqCst) {
            round += 1;
            let run = match round % 4 {
                0 => idemdb(["compact", arg(&path)]),
                1 => idemdb(["compact", arg(&path), "--rebuild"]),
                2 => idemdb(["purge", arg(&path)]),
                _ => {
                    let name = format!("imported-{round}");
                    let input = dir.path().join(format!("{name}.jsonl"));
                    let now = SystemClock.now().as_millis();
                    std::fs::write(
                        &input,
                        format!(
                            "{{\"tenant\":\"ops\",\"operation\":\"imported\",\"key\":\"{name}\",\"state\":\"completed\",\
\"fingerprint\":\"{:064x}\",\"fence\":{now},\"attempts\":1,\"created_at\":{now},\"updated_at\":{now},\
\"expires_at\":{},\"forget_at\":{},\"payload\":\"{name}\"}}\n",
                            round,
                            now + 86_400_000,
                            now + 2 * 86_400_000
                        ),
                    )
                    .expect("input");
                    let run = idemdb(["import", arg(&path), arg(&input)]);
                    if run.code == 0 {
                        imported.push(name);
                    }
                    run
                }
            };
            assert!(run.code == 0 || (run.code == 3 && run.stderr.contains("already open")), "{}", run.stderr);
        }
        (writer.join().expect("writer"), imported)
    });
    assert!(!imported.is_empty(), "some imports ran");
    let store = Store::open(&path).expect("open");
    for (name, i) in &acknowledged {
        match store.reserve(Reserve::new(&pay, &key(name), &Fingerprint::from_bytes([*i; 32]))).expect("retry") {
            Reservation::Replay { body, .. } => assert_eq!(body, name.as_bytes(), "{name}"),
            other => panic!("{name} was acknowledged, the store answers {other:?}"),
        }
    }
    let ops = scope("ops", "imported");
    for name in &imported {
        let record = store.get(&ops, &key(name)).expect("get");
        assert!(
            matches!(record.map(|r| r.state), Some(idemdb::State::Completed { ref result, .. }) if result == name.as_bytes()),
            "{name} was imported (exit 0) and is gone"
        );
    }
}

/// (The import into a running PostgreSQL is tested with the adapter's tests, which run against
/// a server: `crates/postgres/tests/postgres/basics.rs`, `cli_import`.)
#[test]
fn import_into_an_unreachable_postgres_exits_3_and_writes_nothing() {
    let dir = TempDir::new().expect("tempdir");
    let path = sample_store(&dir);
    let backup = dir.path().join("backup.jsonl");
    idemdb(["export", arg(&path), "--show-keys", "--show-payloads", "-o", arg(&backup)]).code(0);
    // Port 1 on loopback: nothing listens there.
    let run = idemdb(["import", "--postgres", "postgresql://app:s3cret@127.0.0.1:1/payments", arg(&backup)]).code(3);
    assert!(run.stderr.contains("unavailable"), "{}", run.stderr);
    assert!(!run.stderr.contains("s3cret"), "the password is not printed: {}", run.stderr);
    // Store-file arguments and --postgres do not mix.
    idemdb(["import", "--postgres", "postgresql://127.0.0.1:1/x", arg(&path), arg(&backup)]).code(2);
    idemdb(["import", arg(&backup)]).code(2);
}

/// A store with one outbox item per outcome: `order-1` confirmed, `order-2` pending,
/// `order-3` uncertain (the provider's answer was lost), and one inbox delivery.
fn workflow_store(dir: &TempDir) -> PathBuf {
    use idemdb::{Delivery, EffectName, EffectReport, NewerVersion};
    let path = dir.path().join("workflow.idemdb");
    let store = Store::open(&path).expect("create");
    let pay = scope("acme", "create_payment");
    let authorize = EffectName::new("authorize").expect("effect");
    for (name, fp) in [("order-1", 1), ("order-3", 3)] {
        store
            .enqueue_effect(&lease(&store, &pay, name, fp), &authorize, 1, b"{\"amount\":1}".to_vec())
            .expect("enqueue");
    }
    let claims = store.claim_effects(16).expect("claim");
    assert_eq!(claims.len(), 2, "both items are due");
    for claim in claims {
        let report = if claim.key.as_str() == "order-1" {
            EffectReport::Confirmed { reference: "auth_1".into(), result: b"{\"ok\":true}".to_vec() }
        } else {
            EffectReport::Unknown { reason: "timeout after sending".into() }
        };
        store.report_effect(&claim, report).expect("report");
    }
    store
        .enqueue_effect(&lease(&store, &pay, "order-2", 2), &authorize, 1, b"{\"amount\":2}".to_vec())
        .expect("enqueue");
    let delivery =
        Delivery::new("provider", "evt_1", "auth_1", 1, "captured", Fingerprint::from_bytes([9; 32]), vec![])
            .expect("delivery");
    store.accept_delivery(&delivery, &NewerVersion).expect("accept");
    path
}

#[test]
fn outbox_inbox_and_reconcile_show_and_resolve_the_workflow_state() {
    let dir = TempDir::new().expect("tempdir");
    let path = workflow_store(&dir);
    let file = arg(&path);

    let all = idemdb(["outbox", file, "--json"]).code(0).json();
    let states: Vec<&str> =
        all["items"].as_array().expect("items").iter().map(|i| i["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["confirmed", "pending", "uncertain"], "key order");
    assert!(all["items"][0].get("key").is_none(), "keys hidden by default");
    assert_eq!(all["items"][0]["reference"], "auth_1");
    let uncertain = idemdb(["outbox", file, "--state", "uncertain", "--show-keys", "--json"]).code(0).json();
    assert_eq!(uncertain["items"].as_array().map(Vec::len), Some(1));
    assert_eq!(uncertain["items"][0]["provider_key"], "order-3:authorize-v1");
    assert_eq!(uncertain["items"][0]["in_doubt"], true);
    let table = idemdb(["outbox", file, "--tenant", "nobody"]).code(0).stdout;
    assert!(table.contains("no outbox items"), "{table}");
    assert_eq!(idemdb(["outbox", file, "--state", "lost"]).code(2).code, 2);

    let inbox = idemdb(["inbox", file, "--json"]).code(0).json();
    assert_eq!(inbox["deliveries"][0]["delivery_id"], "evt_1");
    assert_eq!(inbox["deliveries"][0]["outcome"], "applied");
    assert!(idemdb(["inbox", file]).code(0).stdout.contains("captured"));

    let queue = idemdb(["reconcile", file, "--json"]).code(0).json();
    let entries = queue["entries"].as_array().expect("entries");
    assert!(entries.iter().any(|e| e["kind"] == "effect" && e["state"] == "uncertain"), "{queue}");

    // Resolving needs the whole identity, and a provider answer the store knows.
    idemdb(["reconcile", file, "--key", "order-3", "--effect", "authorize", "--provider", "confirmed"]).code(2);
    let partial = ["reconcile", file, "--tenant", "acme", "--operation", "create_payment", "--key", "order-3"];
    idemdb(partial.iter().chain(&["--effect", "authorize", "--provider", "maybe"])).code(2);
    idemdb(partial.iter().chain(&["--effect", "authorize", "--provider", "confirmed"])).code(2);
    // A pending item is not uncertain: the store refuses, nothing changes.
    let pending = ["reconcile", file, "--tenant", "acme", "--operation", "create_payment", "--key", "order-2"];
    idemdb(pending.iter().chain(&["--effect", "authorize", "--provider", "failed"])).code(4);

    let done = idemdb(partial.iter().chain(&[
        "--effect",
        "authorize",
        "--provider",
        "confirmed",
        "--reference",
        "auth_3",
        "--body",
        "{\"ok\":3}",
        "--raw",
        "--json",
    ]))
    .code(0)
    .json();
    assert_eq!(done["item"]["state"], "confirmed");
    assert_eq!(done["item"]["reference"], "auth_3");
    let queue = idemdb(["reconcile", file, "--json"]).code(0).json();
    assert!(
        !queue["entries"].as_array().expect("entries").iter().any(|e| e["kind"] == "effect"),
        "the effect left the queue: {queue}"
    );
    assert!(idemdb(["reconcile", file]).code(0).stdout.contains("empty"));

    // The intent's record completed with the body given: a retry replays it.
    let store = Store::open(&path).expect("reopen");
    let pay = scope("acme", "create_payment");
    match store.reserve(Reserve::new(&pay, &key("order-3"), &Fingerprint::from_bytes([3; 32]))).expect("reserve") {
        Reservation::Replay { outcome, body } => {
            assert_eq!((outcome, body.as_slice()), (idemdb::OutcomeClass::Completed, b"{\"ok\":3}".as_slice()));
        }
        other => panic!("expected a replay, got {other:?}"),
    }
}

/// `--provider failed` for an effect whose last dispatch may still land (within the provider's
/// settle time, 60 s by default) is refused with exit 4 and the reason, and changes nothing; an
/// operator whose provider settles at once says so with `--settle-secs 0`.
#[test]
fn reconcile_refuses_failed_while_the_call_may_still_land() {
    let dir = TempDir::new().expect("tempdir");
    let path = workflow_store(&dir);
    let file = arg(&path);
    let uncertain = ["reconcile", file, "--tenant", "acme", "--operation", "create_payment", "--key", "order-3"];
    let refused = idemdb(uncertain.iter().chain(&["--effect", "authorize", "--provider", "failed"])).code(4);
    assert!(refused.stderr.contains("may still be applied by the provider until"), "{}", refused.stderr);
    let still = idemdb(["outbox", file, "--state", "uncertain", "--json"]).code(0).json();
    assert_eq!(still["items"].as_array().map(Vec::len), Some(1), "nothing changed: {still}");
    let done = idemdb(uncertain.iter().chain(&[
        "--effect",
        "authorize",
        "--provider",
        "failed",
        "--settle-secs",
        "0",
        "--json",
    ]))
    .code(0)
    .json();
    assert_eq!(done["item"]["state"], "failed", "{done}");
}

#[test]
fn reconcile_resolves_an_uncertain_record_without_an_effect() {
    let dir = TempDir::new().expect("tempdir");
    let path = sample_store(&dir);
    let file = arg(&path);
    let queue = idemdb(["reconcile", file, "--json"]).code(0).json();
    let records: Vec<&Value> =
        queue["entries"].as_array().expect("entries").iter().filter(|e| e["kind"] == "record").collect();
    assert_eq!(records.len(), 1, "{queue}");
    assert_eq!(records[0]["state"], "uncertain");
    // The admin API's spelling as it is: the table's `what` column is not in the JSON.
    assert!(records[0].get("what").is_none(), "{queue}");
    let table = idemdb(["reconcile", file]).code(0).stdout;
    assert!(table.contains("record uncertain"), "{table}");
    assert!(!table.contains("unsure") && !table.contains("acme"), "keys and tenants hidden by default: {table}");
    // Old code printed the key's hash and the tenant whatever --show-keys said.
    let shown = idemdb(["reconcile", file, "--show-keys"]).code(0).stdout;
    assert!(shown.contains("unsure") && shown.contains("acme"), "--show-keys shows them: {shown}");
    let queue_shown = idemdb(["reconcile", file, "--show-keys", "--json"]).code(0).json();
    let entry = queue_shown["entries"].as_array().expect("entries").iter().find(|e| e["kind"] == "record").cloned();
    let entry = entry.expect("the uncertain record");
    assert_eq!((entry["tenant"].as_str(), entry["idempotency_key"].as_str()), (Some("acme"), Some("unsure")));
    // A key hash names an entry through a service's admin API only.
    idemdb(["reconcile", file, "--key-hash", "00000000000000000000000000000000", "--resolve", "released"]).code(2);
    let resolve = ["reconcile", file, "--tenant", "acme", "--operation", "create_payment", "--key"];
    // Only uncertain records are reconciled; the completed one is refused.
    idemdb(resolve.iter().chain(&["paid", "--resolve", "failed"])).code(4);
    idemdb(resolve.iter().chain(&["unsure", "--resolve", "maybe"])).code(2);
    idemdb(resolve.iter().chain(&["unsure", "--resolve", "failed", "--body", "not charged", "--raw"])).code(0);
    let queue = idemdb(["reconcile", file, "--json"]).code(0).json();
    assert_eq!(queue["entries"].as_array().map(Vec::len), Some(0), "{queue}");
    let store = Store::open(&path).expect("reopen");
    let answer = store.reserve(Reserve::new(
        &scope("acme", "create_payment"),
        &key("unsure"),
        &Fingerprint::from_bytes([4; 32]),
    ));
    assert_eq!(
        answer.expect("reserve"),
        Reservation::Replay { outcome: idemdb::OutcomeClass::Failed, body: b"not charged".to_vec() },
        "the failure replays"
    );
}

/// The store file and its journal copied while the store is open: what a crash leaves.
fn crash_copy(path: &Path, to: &Path, with_journal: bool) {
    std::fs::copy(path, to).expect("copy the store");
    if with_journal {
        let journal = |p: &Path| PathBuf::from(format!("{}-journal", p.display()));
        std::fs::copy(journal(path), journal(to)).expect("copy the journal");
    }
}

#[test]
fn after_a_crash_read_only_commands_say_they_write_and_a_lost_journal_is_refused_until_discarded() {
    let dir = TempDir::new().expect("dir");
    let live = dir.path().join("live.idemdb");
    let store = Store::open(&live).expect("open");
    let pay = scope("acme", "create_payment");
    for i in 0..5 {
        store.complete(&lease(&store, &pay, &format!("k-{i}"), 1), b"ok".to_vec()).expect("complete");
    }
    let crashed = dir.path().join("crashed.idemdb");
    crash_copy(&live, &crashed, true);
    let alone = dir.path().join("alone.idemdb");
    crash_copy(&live, &alone, false);
    drop(store);

    let stats = idemdb(["stats", "--json", arg(&crashed)]).code(0);
    assert!(stats.stderr.contains("opening it for writing once"), "{}", stats.stderr);
    assert_eq!(stats.json()["records"], 5, "{}", stats.stdout);

    let refused = idemdb(["stats", arg(&alone)]).code(3);
    assert!(refused.stderr.contains("alone.idemdb-journal"), "names the journal: {}", refused.stderr);
    assert!(refused.stderr.contains("--discard-journal"), "says what to do: {}", refused.stderr);
    idemdb(["recover", arg(&alone)]).code(3);
    let recovered = idemdb(["recover", "--json", "--discard-journal", arg(&alone)]).code(0);
    assert_eq!(recovered.json()["closed_cleanly"], true);
    idemdb(["stats", arg(&alone)]).code(0);
    let again = idemdb(["recover", "--json", arg(&crashed)]).code(0);
    assert_eq!(again.json()["records"], 5);
}

#[cfg(unix)]
#[test]
fn a_fifo_at_the_journal_path_never_hangs_a_command() {
    let dir = TempDir::new().expect("dir");
    let path = sample_store(&dir);
    let journal = PathBuf::from(format!("{}-journal", path.display()));
    let _ = std::fs::remove_file(&journal);
    assert!(std::process::Command::new("mkfifo").arg(&journal).status().expect("mkfifo").success());
    for args in [
        vec!["stats"],
        vec!["list"],
        vec!["verify"],
        vec!["get", "--tenant", "acme", "--operation", "create_payment", "--key", "paid"],
    ] {
        let output = assert_cmd::cargo::cargo_bin_cmd!("idemdb")
            .args(&args)
            .arg(&path)
            .timeout(Duration::from_secs(30))
            .output()
            .expect("run idemdb");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.code().is_some(), "{args:?} did not finish: {stderr}");
        if args[0] != "verify" {
            assert_eq!(output.status.code(), Some(0), "{args:?} on a closed store: {stderr}");
        }
    }
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(&journal).expect("fifo").file_type().is_fifo(), "left as it was");
}

#[test]
fn reconcile_names_the_cores_provider_states_and_resolutions() {
    // The help and the refusals spell the names the command parses, which are the core's.
    let help = idemdb(["reconcile", "--help"]).code(0).stdout;
    for name in idemdb::ProviderStateKind::ALL.iter().map(|kind| kind.as_str()) {
        assert!(help.contains(name), "--help does not name the provider state `{name}`: {help}");
    }
    for name in idemdb::ResolutionKind::ALL.iter().map(|kind| kind.as_str()) {
        assert!(help.contains(name), "--help does not name the resolution `{name}`: {help}");
    }
    let dir = TempDir::new().expect("tempdir");
    let path = sample_store(&dir);
    let refused = idemdb([
        "reconcile",
        arg(&path),
        "--tenant",
        "acme",
        "--operation",
        "create_payment",
        "--key",
        "unsure",
        "--effect",
        "charge",
        "--provider",
        "maybe",
    ])
    .code(2);
    for name in idemdb::ProviderStateKind::ALL.iter().map(|kind| kind.as_str()) {
        assert!(refused.stderr.contains(name), "the refusal does not list `{name}`: {}", refused.stderr);
    }
}
