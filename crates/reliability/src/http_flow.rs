//! The HTTP flow: the payments example (`payments-example`, the idempotency layer over a redb
//! store, a simulated provider, an outbox dispatcher and a reconciler) served as a process of
//! its own, with clients that hang up at random points and the service killed with SIGKILL
//! while requests are in flight.
//!
//! Each round starts (or keeps) the service and sends one payment per key of the round, each
//! client doing one of: wait for the whole answer; send a random prefix of the request and
//! hang up; send it all and hang up 0–5 ms later; read a few bytes of the answer and hang up.
//! Most rounds kill the service at a random moment 0–40 ms into the round and start it again
//! on the same files. Then every key of the round is retried, as a client would, until its
//! answer is final — within the lease (1 s here) plus the reconciler's interval (1 s) and a
//! margin — and checked:
//!
//! * **final**: every key ends in `201` (a fresh run or the replay) without an operator;
//! * **no double effect**: the ledger has at most one payment and the provider at most one
//!   charge per key (the service's `GET /v1/ledger`, the ground truth);
//! * **no lost acknowledged answer**: a `201` a client received before a kill or a hang-up is
//!   what every later retry replays, byte for byte.
//!
//! A run is one key's way through this. The client speaks HTTP/1.1 over `std::net`, so it can
//! stop at any byte.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::rng::Rng;

/// What the section is given.
#[derive(Debug, Clone)]
pub struct HttpFlowConfig {
    /// The `payments-example` executable.
    pub service: PathBuf,
    /// Rounds to run (each with `keys_per_round` runs).
    pub rounds: u64,
    /// Keys (clients) per round.
    pub keys_per_round: u64,
    /// The random seed.
    pub seed: u64,
    /// The service's store arguments (`--postgres URL --schema S`); empty: a fresh redb
    /// directory (`--data DIR`).
    pub store_args: Vec<OsString>,
}

/// What the section saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HttpFlowReport {
    /// Keys driven through the flow.
    pub runs: u64,
    /// Times the service was killed with SIGKILL.
    pub kills: u64,
    /// The longest time from the end of a round to a key's final answer, in milliseconds.
    pub slowest_final_ms: u64,
    /// Clients that waited for the whole answer.
    pub waited: u64,
    /// Clients that hung up before their request was whole.
    pub cut_requests: u64,
    /// Clients that hung up after sending, before the answer.
    pub hung_up: u64,
    /// Clients that hung up while reading the answer.
    pub cut_answers: u64,
    /// `201`s clients received before any retry (acknowledged answers).
    pub acknowledged: u64,
    /// Keys whose retry ran the payment (nothing was stored before).
    pub fresh_on_retry: u64,
    /// Keys whose retry replayed a stored answer.
    pub replayed_on_retry: u64,
    /// Retries answered `409` (in progress or needs reconciliation) before the final answer.
    pub waits: u64,
    /// Keys with no final answer within the bound.
    pub unresolved: u64,
    /// Keys with more than one payment or more than one provider charge.
    pub double: u64,
    /// Acknowledged answers a later retry did not replay byte for byte.
    pub lost: u64,
    /// Answers that are neither final nor retryable (a 4xx or 5xx the flow cannot explain).
    pub unexpected: u64,
    /// What went wrong, for the report (at most a few).
    pub notes: Vec<String>,
}

impl HttpFlowReport {
    /// No promise broken.
    pub fn clean(&self) -> bool {
        self.unresolved == 0 && self.double == 0 && self.lost == 0 && self.unexpected == 0
    }

    fn note(&mut self, note: String) {
        if self.notes.len() < 8 {
            self.notes.push(note);
        }
    }
}

const TENANT: &str = "reliability";
/// The bound on a key's final answer after its round: the lease, one reconciler interval and
/// a generous margin for a loaded machine.
const FINAL_WITHIN: Duration = Duration::from_secs(20);

/// Runs the section (see the module docs).
///
/// # Errors
/// When the service cannot be started or its ledger cannot be read: the run proves nothing.
pub fn run(config: &HttpFlowConfig) -> Result<HttpFlowReport, String> {
    let dir = tempfile::tempdir().map_err(|e| format!("temporary directory: {e}"))?;
    let store_args = if config.store_args.is_empty() {
        vec![OsString::from("--data"), dir.path().as_os_str().to_owned()]
    } else {
        config.store_args.clone()
    };
    let start = || Service::start(&config.service, &store_args);
    let mut rng = Rng::new(config.seed ^ 0x4854_5450);
    let mut report = HttpFlowReport::default();
    let mut service = start()?;
    let mut acknowledged: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for round in 0..config.rounds {
        let keys: Vec<String> = (0..config.keys_per_round).map(|i| format!("r{round}-k{i}")).collect();
        // Four rounds in five kill the service; the fifth has hang-ups alone.
        let kill_at = (round % 5 != 4).then(|| Duration::from_micros(rng.below(40_000)));
        let modes: Vec<(Mode, u64)> = keys.iter().map(|_| (Mode::pick(&mut rng), rng.next_u64())).collect();
        let addr = service.addr;
        let clients: Vec<_> = keys
            .iter()
            .zip(modes)
            .map(|(key, (mode, salt))| {
                let key = key.clone();
                std::thread::spawn(move || (mode, client(addr, &key, mode, salt)))
            })
            .collect();
        if let Some(at) = kill_at {
            std::thread::sleep(at);
            service.kill();
            report.kills += 1;
        }
        for (key, client) in keys.iter().zip(clients) {
            let (mode, answer) = client.join().map_err(|_| "a client thread panicked".to_string())?;
            match mode {
                Mode::Wait => report.waited += 1,
                Mode::CutRequest => report.cut_requests += 1,
                Mode::HangUp => report.hung_up += 1,
                Mode::CutAnswer => report.cut_answers += 1,
            }
            if let Some(answer) = answer
                && answer.status == 201
            {
                report.acknowledged += 1;
                acknowledged.insert(key.clone(), answer.body);
            }
        }
        if kill_at.is_some() {
            service = start()?;
        }
        let settling = Instant::now();
        for key in &keys {
            report.runs += 1;
            settle(service.addr, key, acknowledged.get(key), &mut report);
            let waited = u64::try_from(settling.elapsed().as_millis()).unwrap_or(u64::MAX);
            report.slowest_final_ms = report.slowest_final_ms.max(waited);
        }
    }
    count_effects(service.addr, config.rounds * config.keys_per_round, &mut report)?;
    service.kill();
    Ok(report)
}

/// Retries `key` until its answer is final, and checks it.
fn settle(addr: SocketAddr, key: &str, acknowledged: Option<&Vec<u8>>, report: &mut HttpFlowReport) {
    let started = Instant::now();
    loop {
        match exchange(addr, &request(key)) {
            Ok(answer) if answer.status == 201 => {
                if answer.replayed {
                    report.replayed_on_retry += 1;
                } else {
                    report.fresh_on_retry += 1;
                }
                if let Some(first) = acknowledged
                    && *first != answer.body
                {
                    report.lost += 1;
                    report.note(format!("{key}: acknowledged answer not replayed byte for byte"));
                }
                if acknowledged.is_some() && !answer.replayed {
                    report.lost += 1;
                    report.note(format!("{key}: acknowledged, yet the retry ran again"));
                }
                return;
            }
            Ok(answer) if answer.status == 409 || answer.status == 503 => report.waits += 1,
            Ok(answer) => {
                report.unexpected += 1;
                report.note(format!("{key}: {} {}", answer.status, String::from_utf8_lossy(&answer.body)));
                return;
            }
            // The service is starting or busy: a client retries.
            Err(_) => report.waits += 1,
        }
        if started.elapsed() > FINAL_WITHIN {
            report.unresolved += 1;
            report.note(format!("{key}: no final answer within {FINAL_WITHIN:?}"));
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Reads the ledger and counts keys with more than one payment or charge, and keys without
/// a payment although they ended in `201`.
fn count_effects(addr: SocketAddr, keys: u64, report: &mut HttpFlowReport) -> Result<(), String> {
    let raw = format!(
        "GET /v1/ledger HTTP/1.1\r\nhost: reliability\r\nauthorization: Bearer {TENANT}\r\nconnection: close\r\n\r\n"
    );
    let answer = exchange(addr, raw.as_bytes()).map_err(|e| format!("reading the ledger: {e}"))?;
    if answer.status != 200 {
        return Err(format!("reading the ledger: status {}", answer.status));
    }
    let ledger: serde_json::Value =
        serde_json::from_slice(&answer.body).map_err(|e| format!("the ledger is not JSON: {e}"))?;
    let mut payments: BTreeMap<String, u64> = BTreeMap::new();
    for payment in ledger["payments"].as_array().into_iter().flatten() {
        let key = payment["idempotency_key"].as_str().unwrap_or_default().to_string();
        *payments.entry(key).or_default() += 1;
    }
    let mut charges: BTreeMap<String, u64> = BTreeMap::new();
    for charge in ledger["provider_charges"].as_array().into_iter().flatten() {
        let provider_key = charge["provider_key"].as_str().unwrap_or_default();
        let key = provider_key.strip_suffix(":charge-v1").unwrap_or(provider_key).to_string();
        *charges.entry(key).or_default() += 1;
    }
    for (key, count) in payments.iter().chain(charges.iter()) {
        if *count > 1 {
            report.double += 1;
            report.note(format!("{key}: {count} effects"));
        }
    }
    // Every key ended in 201, so every key that was not left unresolved has its payment.
    let paid = payments.len() as u64;
    if paid + report.unresolved + report.unexpected < keys {
        report.lost += keys - paid - report.unresolved - report.unexpected;
        report.note(format!("{} keys answered 201 without a payment in the ledger", keys - paid));
    }
    Ok(())
}

/// What a client does with its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Wait,
    CutRequest,
    HangUp,
    CutAnswer,
}

impl Mode {
    fn pick(rng: &mut Rng) -> Mode {
        match rng.below(4) {
            0 => Mode::Wait,
            1 => Mode::CutRequest,
            2 => Mode::HangUp,
            _ => Mode::CutAnswer,
        }
    }
}

/// One client's first request; the answer when it waited for one and got it whole.
fn client(addr: SocketAddr, key: &str, mode: Mode, salt: u64) -> Option<Answer> {
    let raw = request(key);
    match mode {
        Mode::Wait => exchange(addr, &raw).ok(),
        Mode::CutRequest => {
            let mut stream = TcpStream::connect(addr).ok()?;
            let cut = usize::try_from(salt % raw.len() as u64).unwrap_or(0);
            let _ = stream.write_all(&raw[..cut]);
            let _ = stream.shutdown(Shutdown::Both);
            None
        }
        Mode::HangUp => {
            let mut stream = TcpStream::connect(addr).ok()?;
            let _ = stream.write_all(&raw);
            std::thread::sleep(Duration::from_micros(salt % 5_000));
            let _ = stream.shutdown(Shutdown::Both);
            None
        }
        Mode::CutAnswer => {
            let mut stream = TcpStream::connect(addr).ok()?;
            let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
            let _ = stream.write_all(&raw);
            let mut some = vec![0; 1 + usize::try_from(salt % 64).unwrap_or(0)];
            let _ = stream.read(&mut some);
            let _ = stream.shutdown(Shutdown::Both);
            None
        }
    }
}

/// The payment request for `key`, whole.
fn request(key: &str) -> Vec<u8> {
    let body = r#"{"amount":"10.50","currency":"BRL","destination":"acct_x"}"#;
    format!(
        "POST /v1/payments HTTP/1.1\r\nhost: reliability\r\nauthorization: Bearer {TENANT}\r\nidempotency-key: \"{key}\"\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// An answer read whole.
#[derive(Debug)]
struct Answer {
    status: u16,
    replayed: bool,
    body: Vec<u8>,
}

/// Sends `raw` and reads the whole answer (the request asks the server to close).
fn exchange(addr: SocketAddr, raw: &[u8]) -> std::io::Result<Answer> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    stream.write_all(raw)?;
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes)?;
    let split =
        bytes.windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(|| std::io::Error::other("no end of headers"))?;
    let head = String::from_utf8_lossy(&bytes[..split]).to_ascii_lowercase();
    let status =
        head.split(' ').nth(1).and_then(|s| s.parse().ok()).ok_or_else(|| std::io::Error::other("no status"))?;
    let replayed = head.lines().any(|line| line.trim() == "idempotent-replayed: true");
    let body = bytes[split + 4..].to_vec();
    if head.lines().any(|line| line.starts_with("transfer-encoding:") && line.contains("chunked")) {
        return Ok(Answer { status, replayed, body: dechunk(&body) });
    }
    Ok(Answer { status, replayed, body })
}

/// The payload of a chunked body.
fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(line_end) = body.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&body[..line_end]).trim(), 16).unwrap_or(0);
        let start = line_end + 2;
        if size == 0 || body.len() < start + size {
            break;
        }
        out.extend_from_slice(&body[start..start + size]);
        body = &body[(start + size + 2).min(body.len())..];
    }
    out
}

/// The service process.
struct Service {
    child: Child,
    addr: SocketAddr,
}

impl Service {
    /// Starts the service on the store `store_args` name and waits for its address.
    fn start(executable: &std::path::Path, store_args: &[OsString]) -> Result<Service, String> {
        let mut child = Command::new(executable)
            .args(store_args)
            .args([
                "--addr",
                "127.0.0.1:0",
                "--lease-ttl-secs",
                "1",
                "--reconcile-interval-secs",
                "1",
                "--provider-latency-ms",
                "2",
            ])
            .env("RUST_LOG", "error")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting {}: {e}", executable.display()))?;
        let stdout = child.stdout.take().ok_or("the service has no stdout")?;
        let mut line = String::new();
        let mut reader = BufReader::new(stdout);
        reader.read_line(&mut line).map_err(|e| format!("reading the service's address: {e}"))?;
        // Whatever else it prints is drained, so its stdout never breaks.
        std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
        let addr = line
            .trim()
            .strip_prefix("listening on http://")
            .and_then(|addr| addr.parse().ok())
            .ok_or_else(|| format!("the service did not say where it listens: {line:?}"))?;
        Ok(Service { child, addr })
    }

    /// SIGKILL, and reap.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.kill();
    }
}
