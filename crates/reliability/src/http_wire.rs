//! What the HTTP sections share: the payments service as a child process, HTTP/1.1 over
//! `std::net` (so a client can stop at any byte), the payment request, clients that hang up,
//! and the service's ledger (`GET /v1/ledger`, the ground truth of effects).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::rng::Rng;

/// The tenant (bearer token) of every payment the sections send.
pub(crate) const TENANT: &str = "reliability";

/// What a client does with its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Waits for the whole answer.
    Wait,
    /// Sends a random prefix of the request and hangs up.
    CutRequest,
    /// Sends it all and hangs up 0–5 ms later.
    HangUp,
    /// Reads a few bytes of the answer and hangs up.
    CutAnswer,
}

impl Mode {
    pub(crate) fn pick(rng: &mut Rng) -> Mode {
        match rng.below(4) {
            0 => Mode::Wait,
            1 => Mode::CutRequest,
            2 => Mode::HangUp,
            _ => Mode::CutAnswer,
        }
    }
}

/// One client's first request; the answer when it waited for one and got it whole.
pub(crate) fn client(addr: SocketAddr, key: &str, mode: Mode, salt: u64) -> Option<Answer> {
    let raw = payment_request(key);
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

/// The body of every payment: the same for every send of a key.
pub(crate) const PAYMENT_BODY: &str = r#"{"amount":"10.50","currency":"BRL","destination":"acct_x"}"#;

/// The payment request for `key`, whole.
pub(crate) fn payment_request(key: &str) -> Vec<u8> {
    format!(
        "POST /v1/payments HTTP/1.1\r\nhost: reliability\r\nauthorization: Bearer {TENANT}\r\nidempotency-key: \"{key}\"\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{PAYMENT_BODY}",
        PAYMENT_BODY.len()
    )
    .into_bytes()
}

/// A `GET` of `path` with `bearer`, whole.
pub(crate) fn get_request(path: &str, bearer: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nhost: reliability\r\nauthorization: Bearer {bearer}\r\nconnection: close\r\n\r\n")
        .into_bytes()
}

/// A `POST` of the JSON `body` to `path` with `bearer`, whole.
pub(crate) fn post_request(path: &str, bearer: &str, body: &str) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nhost: reliability\r\nauthorization: Bearer {bearer}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// An answer read whole.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    /// `Idempotent-Replayed: true`: a stored answer.
    pub(crate) replayed: bool,
    pub(crate) body: Vec<u8>,
}

impl Answer {
    /// The body as JSON (`Null` when it is not JSON).
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// Sends `raw` and reads the whole answer (the request asks the server to close).
pub(crate) fn exchange(addr: SocketAddr, raw: &[u8]) -> std::io::Result<Answer> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    stream.write_all(raw)?;
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes)?;
    parse_answer(&bytes)
}

/// An answer from the bytes of a whole HTTP/1.1 response.
pub(crate) fn parse_answer(bytes: &[u8]) -> std::io::Result<Answer> {
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

/// The effects of the tenant's payments, per idempotency key, as `GET /v1/ledger` lists them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Ledger {
    /// The payment rows of each key.
    pub(crate) payments: BTreeMap<String, Vec<serde_json::Value>>,
    /// The provider's charges of each key (each with its `id` and its `calls`).
    pub(crate) charges: BTreeMap<String, Vec<serde_json::Value>>,
}

impl Ledger {
    /// Reads the ledger of [`TENANT`].
    pub(crate) fn read(addr: SocketAddr) -> Result<Ledger, String> {
        let answer =
            exchange(addr, &get_request("/v1/ledger", TENANT)).map_err(|e| format!("reading the ledger: {e}"))?;
        if answer.status != 200 {
            return Err(format!("reading the ledger: status {}", answer.status));
        }
        let ledger: serde_json::Value =
            serde_json::from_slice(&answer.body).map_err(|e| format!("the ledger is not JSON: {e}"))?;
        let mut read = Ledger::default();
        for payment in ledger["payments"].as_array().into_iter().flatten() {
            let key = payment["idempotency_key"].as_str().unwrap_or_default().to_string();
            read.payments.entry(key).or_default().push(payment.clone());
        }
        for charge in ledger["provider_charges"].as_array().into_iter().flatten() {
            let provider_key = charge["provider_key"].as_str().unwrap_or_default();
            let key = provider_key.strip_suffix(":charge-v1").unwrap_or(provider_key).to_string();
            read.charges.entry(key).or_default().push(charge.clone());
        }
        Ok(read)
    }

    /// The payment rows of `key`.
    pub(crate) fn payments_of(&self, key: &str) -> &[serde_json::Value] {
        self.payments.get(key).map_or(&[], Vec::as_slice)
    }

    /// The provider's charges of `key`.
    pub(crate) fn charges_of(&self, key: &str) -> &[serde_json::Value] {
        self.charges.get(key).map_or(&[], Vec::as_slice)
    }

    /// The provider calls made for `key` (every call counts, repeats of a charge included).
    pub(crate) fn calls_of(&self, key: &str) -> u64 {
        self.charges_of(key).iter().map(|charge| charge["calls"].as_u64().unwrap_or(1)).sum()
    }
}

/// The service process.
pub(crate) struct Service {
    child: Child,
    pub(crate) addr: SocketAddr,
}

impl Service {
    /// Starts the service on the store `store_args` name, with `args`, and waits for its
    /// address.
    pub(crate) fn start(executable: &Path, store_args: &[OsString], args: &[&str]) -> Result<Service, String> {
        let mut child = Command::new(executable)
            .args(store_args)
            .args(["--addr", "127.0.0.1:0"])
            .args(args)
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
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM (the normal shutdown; the `kill` command, as an operator's script
    /// would).
    pub(crate) fn signal_term(&self) -> Result<(), String> {
        let pid = self.child.id().to_string();
        let status =
            Command::new("kill").args(["-TERM", &pid]).status().map_err(|e| format!("running kill -TERM: {e}"))?;
        if status.success() { Ok(()) } else { Err(format!("kill -TERM {pid}: {status}")) }
    }

    /// Waits up to `within` for the process to end: its exit status, or `None` (then it is
    /// killed with SIGKILL).
    pub(crate) fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kill();
        None
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.kill();
    }
}
