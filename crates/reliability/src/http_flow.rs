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
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::http_wire::{Ledger, Mode, Service, client, exchange, payment_request};
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

/// The service's arguments: a 1 s lease, a reconciler every second, a fast provider.
const SERVICE_ARGS: [&str; 6] =
    ["--lease-ttl-secs", "1", "--reconcile-interval-secs", "1", "--provider-latency-ms", "2"];
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
    let start = || Service::start(&config.service, &store_args, &SERVICE_ARGS);
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
        match exchange(addr, &payment_request(key)) {
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
    let ledger = Ledger::read(addr)?;
    for (key, count) in ledger
        .payments
        .iter()
        .map(|(key, rows)| (key, rows.len()))
        .chain(ledger.charges.iter().map(|(key, charges)| (key, charges.len())))
    {
        if count > 1 {
            report.double += 1;
            report.note(format!("{key}: {count} effects"));
        }
    }
    // Every key ended in 201, so every key that was not left unresolved has its payment.
    let paid = ledger.payments.len() as u64;
    if paid + report.unresolved + report.unexpected < keys {
        report.lost += keys - paid - report.unresolved - report.unexpected;
        report.note(format!("{} keys answered 201 without a payment in the ledger", keys - paid));
    }
    Ok(())
}
