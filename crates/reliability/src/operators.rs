//! Operators beside a writer: the real `idemdb` binary runs `compact`, `compact --rebuild`,
//! `import` and `purge` against a store file while a writer process opens it, delivers one
//! intent, closes it, and does so again, in a loop; either side is sometimes killed with
//! SIGKILL at a random moment. After each race the file must open and verify, every completion
//! the writer was told about must be there exactly as reported, no intent may have a second
//! effect, and every record of an `import` that exited with 0 must be there.
//!
//! The writer is `reliability-child writer <store> <ledger> <intent>...` (the kill test's
//! child, opening and closing the store around each intent and retrying while an operator holds
//! it). Operators that find the store open (exit 3) are expected; any other failure of an
//! operator that was not killed is a protocol error.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idemdb::{IdempotencyKey, OpenError, Scope, State, Store};

use crate::kill::{check_outcomes, deliver, policy, work_dir};
use crate::rng::{Rng, mix};

/// The writer: `reliability-child writer <store> <ledger> <intent>...`. For each intent it
/// opens the store (waiting while another process holds it), delivers the intent as the kill
/// test's child does, and closes the store.
///
/// # Errors
/// A description of what failed (printed by the binary as `X <error>`).
pub fn writer_main(args: &[String]) -> Result<(), String> {
    let [store_path, ledger_path, intents @ ..] = args else {
        return Err("usage: reliability-child writer <store> <ledger> <intent>...".into());
    };
    let mut out = std::io::stdout().lock();
    let mut ledger = OpenOptions::new().create(true).append(true).open(ledger_path).map_err(|e| e.to_string())?;
    for intent in intents {
        let i: u64 = intent.parse().map_err(|_| format!("bad intent {intent}"))?;
        let store = open_waiting(Path::new(store_path))?;
        deliver(&store, &mut ledger, Path::new(ledger_path), i, &mut out)?;
        drop(store);
        // Closed for a moment between intents: room for an operator.
        std::thread::sleep(Duration::from_micros(u64::from(std::process::id() % 7) * 250 + 250));
    }
    Ok(())
}

/// Opens the store, retrying while an operator holds it (or replaced it meanwhile).
fn open_waiting(path: &Path) -> Result<Store, String> {
    let started = Instant::now();
    loop {
        match Store::builder().default_policy(policy()).open(path) {
            Ok(store) => return Ok(store),
            Err(OpenError::AlreadyOpen | OpenError::Replaced { .. }) if started.elapsed() < Duration::from_secs(60) => {
                std::thread::sleep(Duration::from_micros(500));
            }
            Err(error) => return Err(format!("open: {error}")),
        }
    }
}

/// How many races, and where the binaries are.
#[derive(Debug, Clone)]
pub struct OperatorConfig {
    /// The `reliability-child` executable (the writer).
    pub child: PathBuf,
    /// The `idemdb` executable (the operator).
    pub cli: PathBuf,
    /// Races to run: one writer process each, with operators running beside it.
    pub races: u64,
    /// New intents per writer.
    pub intents_per_race: u64,
    /// A new store file after this many races.
    pub races_per_file: u64,
    /// Schedule seed.
    pub seed: u64,
    /// Where the files go (when `None`, a temporary directory in `/dev/shm` where it exists, or
    /// in the system's temporary directory). A SIGKILL loses nothing the kernel accepted, so the
    /// file system's sync speed changes only how many interleavings a second there are.
    pub dir: Option<PathBuf>,
}

/// The operator commands run beside the writer.
const KINDS: [&str; 4] = ["compact", "rebuild", "import", "purge"];

/// What the operator races found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OperatorReport {
    /// Races run (writer processes).
    pub races: u64,
    /// Operator commands run, by kind (`compact`, `rebuild`, `import`, `purge`).
    pub commands: BTreeMap<&'static str, u64>,
    /// Operator commands that did their work (exit 0).
    pub commands_done: u64,
    /// Operator commands refused because the store was open (exit 3).
    pub commands_refused: u64,
    /// Operator commands killed with SIGKILL while running.
    pub operators_killed: u64,
    /// Writers killed with SIGKILL while running.
    pub writers_killed: u64,
    /// Completions the writers reported.
    pub completions_reported: u64,
    /// Reported completions found intact (checked after every race).
    pub completions_verified: u64,
    /// Records of imports that exited with 0 found intact (checked after every race).
    pub imports_verified: u64,
    /// Reported completions, or acknowledged imported records, not found as reported.
    pub lost: u64,
    /// Effects beyond the first for an intent.
    pub double: u64,
    /// Store files that did not open.
    pub unopenable: u64,
    /// `verify` problems.
    pub integrity_failures: u64,
    /// Writer errors, and operator failures other than "already open".
    pub protocol_errors: u64,
    /// Store files used.
    pub files: u64,
    /// The first few failures.
    pub notes: Vec<String>,
}

impl OperatorReport {
    fn note(&mut self, note: String) {
        if self.notes.len() < 12 {
            self.notes.push(note);
        }
    }

    /// Whether nothing breaks a promise.
    pub fn clean(&self) -> bool {
        self.lost == 0
            && self.double == 0
            && self.unopenable == 0
            && self.integrity_failures == 0
            && self.protocol_errors == 0
    }

    /// Operator commands run, all kinds.
    pub fn commands_run(&self) -> u64 {
        self.commands.values().sum()
    }
}

struct FileState {
    store: PathBuf,
    ledger: PathBuf,
    reported: BTreeMap<u64, String>,
    pending: Vec<u64>,
    next: u64,
    races: u64,
    doubles_counted: u64,
    /// Imported records acknowledged (the import exited with 0): key → payload.
    imported: BTreeMap<String, String>,
    imports: u64,
}

/// What one operator command did.
struct Ran {
    kind: &'static str,
    killed: bool,
    code: Option<i32>,
    stderr: String,
    /// The records an import would add (acknowledged when it exited with 0).
    import: Vec<(String, String)>,
}

/// Runs the races.
///
/// # Errors
/// I/O errors of the harness itself (temporary directory, spawning processes).
pub fn run_operators(config: &OperatorConfig) -> std::io::Result<OperatorReport> {
    let (_temp, root) = work_dir(config.dir.as_deref(), Some(Path::new("/dev/shm")))?;
    let mut rng = Rng::new(mix(&[config.seed, 0x0ae7]));
    let mut report = OperatorReport::default();
    let mut file: Option<FileState> = None;
    while report.races < config.races {
        let state = match &mut file {
            Some(state) if state.races < config.races_per_file => state,
            _ => {
                report.files += 1;
                let dir = root.join(format!("operators-{}", report.files));
                if dir.exists() {
                    fs::remove_dir_all(&dir)?;
                }
                fs::create_dir_all(&dir)?;
                let store = dir.join("store.idemdb");
                // The store exists before the first race: operators never create it.
                drop(Store::builder().default_policy(policy()).open(&store).map_err(std::io::Error::other)?);
                file.insert(FileState {
                    store,
                    ledger: dir.join("ledger.txt"),
                    reported: BTreeMap::new(),
                    pending: Vec::new(),
                    next: 0,
                    races: 0,
                    doubles_counted: 0,
                    imported: BTreeMap::new(),
                    imports: 0,
                })
            }
        };
        race(config, state, &mut rng, &mut report)?;
        report.races += 1;
        state.races += 1;
    }
    Ok(report)
}

fn race(
    config: &OperatorConfig,
    state: &mut FileState,
    rng: &mut Rng,
    report: &mut OperatorReport,
) -> std::io::Result<()> {
    let mut intents = std::mem::take(&mut state.pending);
    for _ in 0..config.intents_per_race {
        intents.push(state.next);
        state.next += 1;
    }
    let mut writer = Command::new(&config.child)
        .arg("writer")
        .arg(&state.store)
        .arg(&state.ledger)
        .args(intents.iter().map(u64::to_string))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let Some(stdout) = writer.stdout.take() else { return Err(std::io::Error::other("no writer stdout")) };
    // The writer's report lines are read as they come, so a killed writer's are kept too.
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let reading = {
        let lines = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                lines.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(line);
            }
        })
    };
    let writing = Arc::new(AtomicBool::new(true));
    let operator_seed = rng.next_u64();
    let import_base = state.imports;
    let ran: Vec<Ran> = std::thread::scope(|scope| {
        let operators = scope.spawn(|| operate(config, &state.store, &writing, operator_seed, import_base));
        // Sometimes the writer is killed at a random moment; otherwise it finishes.
        let kill_after = rng.chance(30).then(|| Duration::from_micros(rng.below(12_000)));
        let started = Instant::now();
        let mut killed = false;
        loop {
            match writer.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) => {}
            }
            if kill_after.is_some_and(|after| started.elapsed() >= after) {
                let _ = writer.kill();
                killed = true;
                break;
            }
            if started.elapsed() > Duration::from_secs(120) {
                let _ = writer.kill();
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        let _ = writer.wait();
        if killed {
            report.writers_killed += 1;
        }
        writing.store(false, Ordering::SeqCst);
        operators.join().unwrap_or_default()
    });
    let _ = reading.join();
    let lines = std::mem::take(&mut *lines.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    let mut settled = std::collections::BTreeSet::new();
    for line in &lines {
        let mut parts = line.splitn(3, ' ');
        match (parts.next(), parts.next(), parts.next()) {
            (Some("C"), Some(intent), Some(body)) => {
                if let Ok(intent) = intent.parse::<u64>() {
                    report.completions_reported += 1;
                    settled.insert(intent);
                    if let Some(before) = state.reported.insert(intent, body.to_string())
                        && before != body
                    {
                        report.lost += 1;
                        report.note(format!("intent {intent} reported {before} then {body}"));
                    }
                }
            }
            (Some("X"), _, _) => {
                report.protocol_errors += 1;
                report.note(format!("writer: {line}"));
            }
            _ => {}
        }
    }
    state.pending = intents.into_iter().filter(|intent| !settled.contains(intent)).collect();
    for ran in ran {
        *report.commands.entry(ran.kind).or_insert(0) += 1;
        state.imports += u64::from(ran.kind == "import");
        if ran.killed {
            report.operators_killed += 1;
            continue;
        }
        match ran.code {
            Some(0) => {
                report.commands_done += 1;
                state.imported.extend(ran.import);
            }
            Some(3) if ran.stderr.contains("already open") => report.commands_refused += 1,
            other => {
                report.protocol_errors += 1;
                report.note(format!("{} exited {other:?}: {}", ran.kind, ran.stderr.trim()));
            }
        }
    }
    check(state, report);
    Ok(())
}

/// Runs operator commands one after another while the writer runs (at least one), killing
/// some of them at a random moment.
fn operate(config: &OperatorConfig, store: &Path, writing: &AtomicBool, seed: u64, import_base: u64) -> Vec<Ran> {
    let mut rng = Rng::new(seed);
    let mut ran = Vec::new();
    loop {
        let kind = KINDS[usize::try_from(rng.below(KINDS.len() as u64)).unwrap_or(0)];
        let mut command = Command::new(&config.cli);
        let mut import = Vec::new();
        match kind {
            "compact" => {
                command.arg("compact").arg(store);
            }
            "rebuild" => {
                command.arg("compact").arg(store).arg("--rebuild");
            }
            "purge" => {
                command.arg("purge").arg(store);
            }
            _ => {
                let number = import_base + ran.iter().filter(|r: &&Ran| r.kind == "import").count() as u64;
                let input = store.with_file_name(format!("import-{number}.jsonl"));
                import = import_lines(store, number);
                let text: String = import.iter().map(|(_, line)| format!("{line}\n")).collect();
                if fs::write(&input, text).is_err() {
                    break;
                }
                command.arg("import").arg(store).arg(&input);
                import = import.into_iter().map(|(key, _)| (key.clone(), payload_of(&key))).collect();
            }
        }
        let Ok(mut child) = command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn() else {
            break;
        };
        let kill_after = rng.chance(15).then(|| Duration::from_micros(rng.below(6_000)));
        let started = Instant::now();
        let mut killed = false;
        let code = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status.code(),
                Ok(None) => {}
                Err(_) => break None,
            }
            if kill_after.is_some_and(|after| started.elapsed() >= after) {
                let _ = child.kill();
                killed = true;
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_micros(200));
        };
        let mut stderr = String::new();
        if let Some(mut pipe) = child.stderr.take() {
            let _ = pipe.read_to_string(&mut stderr);
        }
        ran.push(Ran { kind, killed, code, stderr, import });
        if !writing.load(Ordering::SeqCst) {
            break;
        }
        // Room for the writer between two operators.
        std::thread::sleep(Duration::from_micros(rng.below(3_000)));
    }
    ran
}

/// Three completed records of tenant `ops` to import, as `export --show-keys --show-payloads`
/// writes them: (key, line).
fn import_lines(store: &Path, number: u64) -> Vec<(String, String)> {
    let now = u64::try_from(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0),
    )
    .unwrap_or(0);
    let tag = store.parent().and_then(|dir| dir.file_name()).map(|name| name.to_string_lossy().into_owned());
    (0..3)
        .map(|n| {
            let key = format!("imp-{}-{number}-{n}", tag.as_deref().unwrap_or("x"));
            let payload = payload_of(&key);
            let day = 86_400_000u64;
            let line = format!(
                "{{\"tenant\":\"ops\",\"operation\":\"imported\",\"key\":\"{key}\",\"state\":\"completed\",\
\"fingerprint\":\"{:064x}\",\"fence\":{now},\"attempts\":1,\"created_at\":{now},\"updated_at\":{now},\
\"expires_at\":{},\"forget_at\":{},\"payload_bytes\":{},\"payload\":\"{payload}\"}}",
                mix(&[number, n]),
                now + 30 * day,
                now + 395 * day,
                payload.len()
            );
            (key, line)
        })
        .collect()
}

fn payload_of(key: &str) -> String {
    format!("imported {key}")
}

/// After a race: the file opens and verifies, every reported completion and acknowledged
/// import is stored as reported, and no intent has two effects.
fn check(state: &mut FileState, report: &mut OperatorReport) {
    let checked = check_outcomes(&state.store, &state.ledger, &state.reported, &mut state.doubles_counted);
    report.lost += checked.lost;
    report.double += checked.double;
    report.unopenable += checked.unopenable;
    report.integrity_failures += checked.integrity_failures;
    report.completions_verified += checked.verified;
    for note in checked.notes {
        report.note(note);
    }
    let Some(store) = checked.store else { return };
    let Ok(scope) = Scope::new("ops", "imported") else { return };
    for (key, payload) in &state.imported {
        let Ok(key) = IdempotencyKey::new(key.as_str()) else { continue };
        match store.get(&scope, &key) {
            Ok(Some(record)) if matches!(&record.state, State::Completed { result, .. } if result == payload.as_bytes()) =>
            {
                report.imports_verified += 1;
            }
            other => {
                report.lost += 1;
                report.note(format!("imported {key:?} acknowledged, stored {other:?}"));
            }
        }
    }
}
