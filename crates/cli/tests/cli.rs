//! End-to-end tests of the `idemdb` binary on real store files: every command's output and
//! exit code, the JSON shapes, damaged and foreign files, and the demo's promises.

use std::path::{Path, PathBuf};
use std::time::Duration;

use idemdb::{
    Clock, Failure, Fingerprint, IdempotencyKey, ManualClock, Policy, Reservation, Scope, Store, SystemClock,
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
    match store.reserve(scope, &key(name), &Fingerprint::from_bytes([fp; 32])).expect("reserve") {
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
    for word in
        ["demo", "stats", "get", "list", "purge", "compact", "verify", "export", "import", "Exit codes", "--json"]
    {
        assert!(help.contains(word), "--help lacks `{word}`:\n{help}");
    }
    for code in
        ["0  success", "1  problems found", "2  usage error", "3  the store could not be opened", "4  any other"]
    {
        assert!(help.contains(code), "--help lacks exit code `{code}`");
    }
    for command in ["demo", "stats", "get", "list", "purge", "compact", "verify", "export", "import"] {
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
    let invalid = idemdb(["get", arg(&path), "--tenant", "acme", "--operation", "x", "--key", "has space"]).code(4);
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
    let dry = idemdb(["purge", arg(&path), "--dry-run", "--json"]).code(0).json();
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
    let dry_text = idemdb(["purge", arg(&path), "--dry-run"]).code(0).stdout;
    assert_eq!(last_word(&dry_text, "would tombstone"), "5");
    assert!(dry_text.contains("dry run: nothing was changed"), "{dry_text}");

    let done = idemdb(["purge", arg(&path), "--budget", "2", "--json"]).code(0).json();
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

    // The first page after the header: redb's own code trips over it.
    let damaged = dir.path().join("damaged.idemdb");
    std::fs::copy(&sound, &damaged).expect("copy");
    flip(&damaged, 4096, 64);
    let run = idemdb(["verify", arg(&damaged)]).code(1);
    assert!(
        run.stdout.contains("problems  1") && run.stdout.trim_end().ends_with("verify: PROBLEMS FOUND"),
        "{}",
        run.stdout
    );
    let json = idemdb(["verify", arg(&damaged), "--json"]).code(1).json();
    assert_eq!(json["ok"], false);
    assert!(json["error"].as_str().is_some_and(|e| !e.is_empty()), "{json}");
    // Other commands refuse the file with a readable error.
    let stats = idemdb(["stats", arg(&damaged)]).code(3);
    assert!(
        stats.stderr.starts_with(&format!("error: {}: ", damaged.display())) && stats.stderr.contains("damaged"),
        "{}",
        stats.stderr
    );

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
