//! The HTTP edges: the payments example (as in [`http_flow`](crate::http_flow), a process of
//! its own on a fresh redb directory) at four edges a client, an operator or an orchestrator
//! meets, each checked against the service's own ledger (`GET /v1/ledger`):
//!
//! 1. **slow provider**: a 1 s lease and a provider that takes 3 s. The dispatcher's call has a
//!    deadline of three quarters of the lease, so each charge is reported unknown and looked up
//!    at the provider before anything is sent again. Every key is retried as a client would
//!    until its `201`; then each key has one charge and one payment, and at most
//!    [`SLOW_CALL_BOUND`] provider calls, with the reconciler at its default interval (5 s,
//!    longer than the provider's latency) and with a reconciler every second (faster than the
//!    provider): the reconciler asks about an uncertain charge only once the provider's settle
//!    time (its latency plus 1 s) has passed, when "no such charge" can no longer mean "not
//!    yet".
//! 2. **doubles**: several copies of each request (same key, same body) sent at the same moment,
//!    most of their answers lost to hang-ups, then several retriers per key at once until each
//!    gets a final answer: no key with two charges or two payments, none without a final
//!    answer, and every `201` of a key (the burst's and the retries') byte for byte the same.
//! 3. **operators racing the dispatcher**: while payments are dispatched to a provider slower
//!    than the call's deadline, an operator calls the admin API's resolutions (`POST
//!    /v1/admin/resolve`: complete, release, confirm with the provider's reference or a wrong
//!    one, failed, not found, send again) on random keys at random moments. Every action is
//!    refused with a problem (`409 IDEMDB_WRONG_STATE`, `422 IDEMDB_INVALID_ARGUMENT`, ...,
//!    counted by reason) or accepted; once every key has its final answer and the calls in
//!    flight have landed, the answer a retry gets must agree with the ledger: a `201` is the
//!    key's one payment row, naming the key's one charge (and the reference an accepted
//!    confirmation gave); any other final answer (an operator's failure) has no payment and no
//!    charge. A few keys also get a deliberate `failed` after their call's deadline and before
//!    the provider makes the charge, while the provider's lookup still says "no such charge":
//!    it must be refused (the call may still land), and a key that answers a failure while the
//!    provider charged ([`OperatorsReport::charged_but_failed`]) fails the section, as does any
//!    other disagreement.
//! 4. **SIGTERM under load**: clients start at random moments of a round and SIGTERM lands in
//!    the middle of it. The service drains (`--drain-secs`): requests in progress finish, new
//!    connections are refused. Each client is counted as answered before the signal, answered
//!    during the drain, cut, or turned away; the process must exit with status 0; then it is
//!    started again on the same files and every key is retried to its `201`, which replays the
//!    `201` a client got during the drain. One round in three has a provider slower than a
//!    1 s drain, so requests are cut at the drain's limit.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use crate::http_wire::{Answer, Ledger, Mode, Service, client, exchange, get_request, payment_request, post_request};
use crate::rng::Rng;

/// Provider calls a key may take in the slow-provider run: the first, and one more sent after
/// the provider said it had no such charge while the first was still on its way.
pub const SLOW_CALL_BOUND: u64 = 2;
/// The provider's latency in the slow-provider runs (the lease is 1 s).
const SLOW_PROVIDER_MS: u64 = 3_000;
/// The admin token of the operators' part.
const ADMIN_TOKEN: &str = "reliability-operator-0123456789";
/// The latency of the operators' part: above the call's deadline (750 ms under a 1 s lease),
/// so every charge passes through "uncertain", where the resolutions apply.
const OPERATOR_PROVIDER_MS: u64 = 1_000;

/// What the section is given.
#[derive(Debug, Clone)]
pub struct HttpEdgesConfig {
    /// The `payments-example` executable.
    pub service: PathBuf,
    /// The random seed.
    pub seed: u64,
    /// Keys of the slow-provider run with the reconciler's default interval (bounded calls).
    pub slow_keys: u64,
    /// Keys of the slow-provider run with a reconciler every second (calls reported).
    pub fast_reconciler_keys: u64,
    /// Rounds of the doubles part.
    pub double_rounds: u64,
    /// Keys per round of the doubles part.
    pub double_keys: u64,
    /// Copies of each request sent at once, and retriers per key after.
    pub duplicates: u64,
    /// Keys of the operators' part.
    pub operator_keys: u64,
    /// Of those, keys that get a deliberate `failed` while their provider call is on its way.
    pub operator_probes: u64,
    /// Rounds of the SIGTERM part.
    pub sigterm_rounds: u64,
    /// Keys per round of the SIGTERM part.
    pub sigterm_keys: u64,
}

impl HttpEdgesConfig {
    /// The sizes at `scale` (1: the CI-sized run, well under a minute).
    pub fn scaled(service: PathBuf, seed: u64, scale: u64) -> HttpEdgesConfig {
        let scale = scale.max(1);
        HttpEdgesConfig {
            service,
            seed,
            slow_keys: 10 * scale,
            fast_reconciler_keys: 5 * scale,
            double_rounds: 3 * scale,
            double_keys: 10,
            duplicates: 4,
            operator_keys: 20 * scale,
            operator_probes: 2 * scale,
            sigterm_rounds: 3 * scale,
            sigterm_keys: 12,
        }
    }

    /// Every key the section sends.
    pub fn keys(&self) -> u64 {
        self.slow_keys
            + self.fast_reconciler_keys
            + self.double_rounds * self.double_keys
            + self.operator_keys
            + self.sigterm_rounds * self.sigterm_keys
    }
}

/// One slow-provider run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlowProviderReport {
    /// The reconciler's interval, in seconds.
    pub reconcile_secs: u64,
    /// The bound on calls per key checked (`None`: reported only).
    pub bound: Option<u64>,
    /// Keys paid.
    pub keys: u64,
    /// Payment requests sent (first sends and retries).
    pub requests: u64,
    /// First answers `502 provider-uncertain` (the call outlived its deadline).
    pub first_uncertain: u64,
    /// Provider calls, all keys.
    pub calls: u64,
    /// The most calls of one key.
    pub max_calls: u64,
    /// Keys with more calls than the bound.
    pub over_bound: u64,
    /// Provider charges, all keys.
    pub charges: u64,
    /// Payment rows, all keys.
    pub payments: u64,
    /// The longest time from a key's first send to its `201`, in milliseconds.
    pub slowest_ms: u64,
    /// How long the run took.
    pub took: Duration,
}

/// The doubles part.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DoublesReport {
    /// Keys.
    pub keys: u64,
    /// Payment requests sent (the bursts' copies and the retries).
    pub requests: u64,
    /// Copies whose client hung up (their answer lost).
    pub hung_up: u64,
    /// Copies answered `201` in the burst.
    pub acknowledged: u64,
    /// Copies answered `409` in the burst (another copy held the key).
    pub in_progress: u64,
    /// Provider calls.
    pub calls: u64,
    /// Final `201`s compared, burst and retries.
    pub compared: u64,
    /// Provider charges.
    pub charges: u64,
    /// Payment rows.
    pub payments: u64,
    /// How long the part took.
    pub took: Duration,
}

/// The operators' part.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OperatorsReport {
    /// Keys.
    pub keys: u64,
    /// Payment requests sent.
    pub requests: u64,
    /// Resolutions the operator asked for.
    pub actions: u64,
    /// Accepted resolutions, by kind.
    pub accepted: BTreeMap<String, u64>,
    /// Refused resolutions, by status and problem code.
    pub refused: BTreeMap<String, u64>,
    /// Keys whose final answer is an operator's failure (not a `201`).
    pub failed_by_operator: u64,
    /// Deliberate `failed` resolutions sent while the key's provider call was still on its
    /// way (after the call's deadline, before the provider made the charge).
    pub probes: u64,
    /// Keys an operator's accepted `failed` left answering a failure while the provider made
    /// the charge (the provider's lookup said "no such charge" while the call was on its way).
    /// Must be zero: `failed` is refused until the provider's settle time has passed.
    pub charged_but_failed: u64,
    /// Provider calls.
    pub calls: u64,
    /// Provider charges.
    pub charges: u64,
    /// Payment rows.
    pub payments: u64,
    /// How long the part took.
    pub took: Duration,
}

/// One round of the SIGTERM part.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SigtermRound {
    /// Whether the provider was slower than the drain (requests cut at its limit).
    pub cut_at_limit: bool,
    /// Clients answered before the signal.
    pub answered_before: u64,
    /// Clients answered during the drain.
    pub answered_in_drain: u64,
    /// Clients whose connection was closed without a whole answer.
    pub cut: u64,
    /// Clients whose connection was refused.
    pub turned_away: u64,
    /// From the signal to the exit, in milliseconds.
    pub exit_ms: u64,
}

/// The SIGTERM part.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SigtermReport {
    /// Each round.
    pub rounds: Vec<SigtermRound>,
    /// Keys.
    pub keys: u64,
    /// Payment requests sent.
    pub requests: u64,
    /// SIGTERMs sent (mid-round, and to each restarted service).
    pub signals: u64,
    /// Exits after SIGTERM that were not status 0 (or took over 30 s).
    pub unclean: u64,
    /// Answers during the drain other than `201`.
    pub drain_not_201: u64,
    /// Provider calls.
    pub calls: u64,
    /// Provider charges.
    pub charges: u64,
    /// Payment rows.
    pub payments: u64,
    /// How long the part took.
    pub took: Duration,
}

impl SigtermReport {
    fn total(&self, field: impl Fn(&SigtermRound) -> u64) -> u64 {
        self.rounds.iter().map(field).sum()
    }
}

/// What the section saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HttpEdgesReport {
    /// The slow provider, reconciler at its default interval (calls bounded).
    pub slow: SlowProviderReport,
    /// The slow provider, reconciler every second (calls reported).
    pub fast_reconciler: SlowProviderReport,
    /// Doubles.
    pub doubles: DoublesReport,
    /// Operators racing the dispatcher.
    pub operators: OperatorsReport,
    /// SIGTERM under load.
    pub sigterm: SigtermReport,
    /// Keys driven, all parts.
    pub keys: u64,
    /// Keys with no final answer within the bound.
    pub unresolved: u64,
    /// Keys with more than one payment or more than one charge.
    pub double: u64,
    /// Final answers of a key that differ, or a `201` that is not the key's payment row.
    pub disagreements: u64,
    /// Final answers other than `201` with a charge or payment, or accepted resolutions the
    /// ledger contradicts.
    pub inconsistent: u64,
    /// Answers neither final nor retryable.
    pub unexpected: u64,
    /// What went wrong, for the report (at most a few).
    pub notes: Vec<String>,
}

impl HttpEdgesReport {
    /// No promise broken.
    pub fn clean(&self) -> bool {
        self.unresolved == 0
            && self.double == 0
            && self.disagreements == 0
            && self.inconsistent == 0
            && self.unexpected == 0
            && self.slow.over_bound == 0
            && self.sigterm.unclean == 0
    }

    /// Provider calls, all parts.
    pub fn calls(&self) -> u64 {
        self.slow.calls + self.fast_reconciler.calls + self.doubles.calls + self.operators.calls + self.sigterm.calls
    }

    /// Provider charges, all parts.
    pub fn charges(&self) -> u64 {
        self.slow.charges
            + self.fast_reconciler.charges
            + self.doubles.charges
            + self.operators.charges
            + self.sigterm.charges
    }

    /// Payment rows, all parts.
    pub fn payments(&self) -> u64 {
        self.slow.payments
            + self.fast_reconciler.payments
            + self.doubles.payments
            + self.operators.payments
            + self.sigterm.payments
    }

    /// Payment requests, all parts.
    pub fn requests(&self) -> u64 {
        self.slow.requests
            + self.fast_reconciler.requests
            + self.doubles.requests
            + self.operators.requests
            + self.sigterm.requests
    }

    /// The report's lines, one per part (without the overall line).
    pub fn lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for slow in [&self.slow, &self.fast_reconciler] {
            let bound = match slow.bound {
                Some(bound) => format!("bound {bound}, {} over", slow.over_bound),
                None => "not bounded".to_string(),
            };
            lines.push(format!(
                "slow provider (lease 1 s, provider {} s, reconciler {} s): {} keys, {} requests, {} first answers 502, {} provider calls (at most {} a key; {bound}), {} charges, {} payments, slowest 201 after {} ms, in {:.1?}",
                SLOW_PROVIDER_MS / 1000,
                slow.reconcile_secs,
                slow.keys,
                slow.requests,
                slow.first_uncertain,
                slow.calls,
                slow.max_calls,
                slow.charges,
                slow.payments,
                slow.slowest_ms,
                slow.took
            ));
        }
        let d = &self.doubles;
        lines.push(format!(
            "doubles: {} keys, {} requests ({} copies hung up, {} answered 201 and {} answered 409 in the bursts), {} final 201s compared, {} provider calls, {} charges, {} payments, in {:.1?}",
            d.keys,
            d.requests,
            d.hung_up,
            d.acknowledged,
            d.in_progress,
            d.compared,
            d.calls,
            d.charges,
            d.payments,
            d.took
        ));
        let o = &self.operators;
        let accepted: u64 = o.accepted.values().sum();
        let refused: u64 = o.refused.values().sum();
        let by = |map: &BTreeMap<String, u64>| {
            let parts: Vec<String> = map.iter().map(|(reason, n)| format!("{reason} {n}")).collect();
            if parts.is_empty() { "none".to_string() } else { parts.join(", ") }
        };
        lines.push(format!(
            "operators racing the dispatcher: {} keys, {} requests, {} resolutions ({} of them `failed` probes while a call was on its way): {accepted} accepted ({}), {refused} refused ({}); {} keys failed by an operator, of them {} charged all the same (must be 0), {} provider calls, {} charges, {} payments, in {:.1?}",
            o.keys,
            o.requests,
            o.actions,
            o.probes,
            by(&o.accepted),
            by(&o.refused),
            o.failed_by_operator,
            o.charged_but_failed,
            o.calls,
            o.charges,
            o.payments,
            o.took
        ));
        let s = &self.sigterm;
        let per_round: Vec<String> = s
            .rounds
            .iter()
            .map(|r| {
                format!(
                    "{}/{}/{}/{}{}",
                    r.answered_before,
                    r.answered_in_drain,
                    r.cut,
                    r.turned_away,
                    if r.cut_at_limit { "*" } else { "" }
                )
            })
            .collect();
        let slowest_exit = s.rounds.iter().map(|r| r.exit_ms).max().unwrap_or(0);
        lines.push(format!(
            "SIGTERM under load: {} rounds ({} with requests cut at a 1 s drain limit, *), {} keys, {} requests: {} answered before the signal, {} answered during the drain ({} not 201), {} cut, {} turned away (per round before/drain/cut/away: {}); {} SIGTERMs, unclean exits {}, slowest exit {} ms; {} provider calls, {} charges, {} payments, in {:.1?}",
            s.rounds.len(),
            s.rounds.iter().filter(|r| r.cut_at_limit).count(),
            s.keys,
            s.requests,
            s.total(|r| r.answered_before),
            s.total(|r| r.answered_in_drain),
            s.drain_not_201,
            s.total(|r| r.cut),
            s.total(|r| r.turned_away),
            per_round.join(" "),
            s.signals,
            s.unclean,
            slowest_exit,
            s.calls,
            s.charges,
            s.payments,
            s.took
        ));
        lines
    }

    fn note(&mut self, note: String) {
        if self.notes.len() < 12 {
            self.notes.push(note);
        }
    }
}

/// The bound on a key's final answer (the slow provider's reconciler alone takes up to ~9 s).
const FINAL_WITHIN: Duration = Duration::from_secs(60);

/// Runs the section (see the module docs).
///
/// # Errors
/// When the service cannot be started or its ledger cannot be read: the run proves nothing.
pub fn run(config: &HttpEdgesConfig) -> Result<HttpEdgesReport, String> {
    let mut report = HttpEdgesReport::default();
    // The two slow-provider runs mostly wait for the provider: side by side.
    let (slow, fast) = std::thread::scope(|scope| {
        let slow = scope.spawn(|| slow_provider(config, "slow", config.slow_keys, 5, Some(SLOW_CALL_BOUND)));
        let fast = scope.spawn(|| slow_provider(config, "fast", config.fast_reconciler_keys, 1, Some(SLOW_CALL_BOUND)));
        (slow.join(), fast.join())
    });
    for (part, into) in [(slow, 0), (fast, 1)] {
        let (slow, checks) = part.map_err(|_| "a slow-provider run panicked".to_string())??;
        report.absorb(checks);
        if into == 0 {
            report.slow = slow;
        } else {
            report.fast_reconciler = slow;
        }
    }
    let (doubles, checks) = doubles(config)?;
    report.doubles = doubles;
    report.absorb(checks);
    let (operators, checks) = operators(config)?;
    report.operators = operators;
    report.absorb(checks);
    let (sigterm, checks) = sigterm(config)?;
    report.sigterm = sigterm;
    report.absorb(checks);
    Ok(report)
}

/// The promise counts of one part.
#[derive(Debug, Default)]
struct Checks {
    keys: u64,
    unresolved: u64,
    double: u64,
    disagreements: u64,
    inconsistent: u64,
    unexpected: u64,
    notes: Vec<String>,
}

impl Checks {
    fn note(&mut self, note: String) {
        if self.notes.len() < 12 {
            self.notes.push(note);
        }
    }

    /// Checks `key`'s final answer `last` against the ledger and the other final answers
    /// `earlier` (`201`s the key got before): one payment and one charge at most; a `201` is
    /// the key's one payment row and names its one charge, and every `201` is the same bytes;
    /// any other final answer has no payment and no charge.
    /// Every key's final answer checked against the ledger; without an operator, it is a 201.
    fn finals_without_operator(&mut self, ledger: &Ledger, finals: &[(String, Answer, Vec<Vec<u8>>)]) {
        for (key, answer, earlier) in finals {
            self.final_answer(ledger, key, answer, earlier);
            if answer.status != 201 {
                self.unexpected += 1;
                self.note(format!("{key}: a final {} without an operator", answer.status));
            }
        }
    }

    fn final_answer(&mut self, ledger: &Ledger, key: &str, last: &Answer, earlier: &[Vec<u8>]) {
        let (payments, charges) = (ledger.payments_of(key), ledger.charges_of(key));
        if payments.len() > 1 || charges.len() > 1 {
            self.double += 1;
            self.note(format!("{key}: {} payments, {} charges", payments.len(), charges.len()));
        }
        if last.status != 201 {
            if !payments.is_empty() || !charges.is_empty() {
                self.inconsistent += 1;
                self.note(format!(
                    "{key}: final answer {} with {} payments and {} charges in the ledger",
                    last.status,
                    payments.len(),
                    charges.len()
                ));
            }
            return;
        }
        if earlier.iter().any(|body| *body != last.body) {
            self.disagreements += 1;
            self.note(format!("{key}: two 201s that differ"));
        }
        let row = payments.first();
        let charge = row.and_then(|row| row["provider_charge"].as_str());
        let agrees = payments.len() == 1
            && row == Some(&last.json())
            && charges.len() == 1
            && charge.is_some()
            && charges[0]["id"].as_str() == charge;
        if !agrees {
            self.disagreements += 1;
            self.note(format!(
                "{key}: the 201 ({}) is not the ledger's ({} payments, {} charges)",
                String::from_utf8_lossy(&last.body),
                payments.len(),
                charges.len()
            ));
        }
    }
}

impl HttpEdgesReport {
    fn absorb(&mut self, checks: Checks) {
        self.keys += checks.keys;
        self.unresolved += checks.unresolved;
        self.double += checks.double;
        self.disagreements += checks.disagreements;
        self.inconsistent += checks.inconsistent;
        self.unexpected += checks.unexpected;
        for note in checks.notes {
            self.note(note);
        }
    }
}

/// How a key's retries ended.
#[derive(Debug)]
enum Outcome {
    /// A final answer: a `201`, or a stored answer replayed.
    Final(Answer),
    /// An answer that is neither final nor retryable.
    Unexpected(Answer),
    /// No final answer within the bound.
    Unresolved,
}

/// A key's way to its final answer.
#[derive(Debug)]
struct Retried {
    outcome: Outcome,
    /// Requests sent.
    sends: u64,
    /// The status of the first answer, if one came whole.
    first: Option<u16>,
    /// From the first send to the final answer.
    took: Duration,
}

/// Sends `key`'s payment, again every `pause` on `409`, `502`, `503` or a refused connection
/// (as a client retries), until its answer is final or `within` has passed.
/// Every key retried at once, one thread each, until its final answer.
fn all_until_final(addr: SocketAddr, keys: &[String], pause: Duration, who: &str) -> Result<Vec<Retried>, String> {
    std::thread::scope(|scope| {
        let threads: Vec<_> =
            keys.iter().map(|key| scope.spawn(move || until_final(addr, key, pause, FINAL_WITHIN))).collect();
        threads.into_iter().map(|thread| thread.join()).collect::<Result<_, _>>()
    })
    .map_err(|_| format!("{who} panicked"))
}

fn until_final(addr: SocketAddr, key: &str, pause: Duration, within: Duration) -> Retried {
    let started = Instant::now();
    let (mut sends, mut first) = (0, None);
    loop {
        sends += 1;
        let answer = exchange(addr, &payment_request(key));
        if let Ok(answer) = &answer {
            first.get_or_insert(answer.status);
        }
        let outcome = match answer {
            Ok(answer) if answer.status == 201 || answer.replayed => Some(Outcome::Final(answer)),
            Ok(answer) if matches!(answer.status, 409 | 502 | 503) => None,
            Ok(answer) => Some(Outcome::Unexpected(answer)),
            Err(_) => None,
        };
        let outcome = match outcome {
            Some(outcome) => outcome,
            None if started.elapsed() > within => Outcome::Unresolved,
            None => {
                std::thread::sleep(pause);
                continue;
            }
        };
        return Retried { outcome, sends, first, took: started.elapsed() };
    }
}

impl Checks {
    /// Counts a retried key that did not end final; its final answer otherwise.
    fn outcome(&mut self, key: &str, retried: Retried) -> Option<Answer> {
        match retried.outcome {
            Outcome::Final(answer) => Some(answer),
            Outcome::Unexpected(answer) => {
                self.unexpected += 1;
                self.note(format!("{key}: {} {}", answer.status, String::from_utf8_lossy(&answer.body)));
                None
            }
            Outcome::Unresolved => {
                self.unresolved += 1;
                self.note(format!("{key}: no final answer within {FINAL_WITHIN:?}"));
                None
            }
        }
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A fresh directory for a service, and its store arguments.
fn fresh_store() -> Result<(tempfile::TempDir, Vec<OsString>), String> {
    let dir = tempfile::tempdir().map_err(|e| format!("temporary directory: {e}"))?;
    let args = vec![OsString::from("--data"), dir.path().as_os_str().to_owned()];
    Ok((dir, args))
}

/// One slow-provider run: `keys` keys, at once, each retried until its `201`.
fn slow_provider(
    config: &HttpEdgesConfig,
    prefix: &str,
    keys: u64,
    reconcile_secs: u64,
    bound: Option<u64>,
) -> Result<(SlowProviderReport, Checks), String> {
    let started = Instant::now();
    let (_dir, store) = fresh_store()?;
    let (latency, reconcile) = (SLOW_PROVIDER_MS.to_string(), reconcile_secs.to_string());
    let args = ["--lease-ttl-secs", "1", "--provider-latency-ms", &latency, "--reconcile-interval-secs", &reconcile];
    let mut service = Service::start(&config.service, &store, &args)?;
    let addr = service.addr;
    let keys: Vec<String> = (0..keys).map(|i| format!("{prefix}-k{i}")).collect();
    let retried = all_until_final(addr, &keys, Duration::from_millis(250), "a slow-provider client")?;
    // Calls still on their way when the last key was paid land within the latency.
    std::thread::sleep(Duration::from_millis(SLOW_PROVIDER_MS + 500));
    let ledger = Ledger::read(addr)?;
    service.kill();
    let mut slow = SlowProviderReport { reconcile_secs, bound, keys: keys.len() as u64, ..Default::default() };
    let mut checks = Checks { keys: keys.len() as u64, ..Default::default() };
    for (key, retried) in keys.iter().zip(retried) {
        slow.requests += retried.sends;
        slow.first_uncertain += u64::from(retried.first == Some(502));
        slow.slowest_ms = slow.slowest_ms.max(millis(retried.took));
        if let Some(last) = checks.outcome(key, retried) {
            checks.final_answer(&ledger, key, &last, &[]);
            if last.status != 201 {
                checks.unexpected += 1;
                checks.note(format!("{key}: a final {} without an operator", last.status));
            }
        }
        let calls = ledger.calls_of(key);
        slow.calls += calls;
        slow.max_calls = slow.max_calls.max(calls);
        slow.charges += ledger.charges_of(key).len() as u64;
        slow.payments += ledger.payments_of(key).len() as u64;
        if let Some(bound) = bound
            && calls > bound
        {
            slow.over_bound += 1;
            checks.note(format!("{key}: {calls} provider calls (bound {bound})"));
        }
    }
    slow.took = started.elapsed();
    Ok((slow, checks))
}

/// The doubles part.
fn doubles(config: &HttpEdgesConfig) -> Result<(DoublesReport, Checks), String> {
    let started = Instant::now();
    let (_dir, store) = fresh_store()?;
    let args = ["--lease-ttl-secs", "1", "--reconcile-interval-secs", "1", "--provider-latency-ms", "50"];
    let mut service = Service::start(&config.service, &store, &args)?;
    let addr = service.addr;
    let mut rng = Rng::new(config.seed ^ 0x4455_5053);
    let mut report = DoublesReport::default();
    let mut checks = Checks::default();
    let mut finals: Vec<(String, Answer, Vec<Vec<u8>>)> = Vec::new();
    let copies = config.duplicates.max(2);
    for round in 0..config.double_rounds {
        let keys: Vec<String> = (0..config.double_keys).map(|i| format!("d{round}-k{i}")).collect();
        let sends: Vec<(String, Mode, u64)> = keys
            .iter()
            .flat_map(|key| (0..copies).map(|_| key.clone()).collect::<Vec<_>>())
            .map(|key| {
                // One copy in four waits for its answer; the rest hang up somewhere.
                let mode = if rng.chance(25) { Mode::Wait } else { Mode::pick(&mut rng) };
                (key, mode, rng.next_u64())
            })
            .collect();
        let barrier = Barrier::new(sends.len());
        let answers: Vec<(String, Mode, Option<Answer>)> = std::thread::scope(|scope| {
            let threads: Vec<_> = sends
                .iter()
                .map(|(key, mode, salt)| {
                    let barrier = &barrier;
                    scope.spawn(move || {
                        barrier.wait();
                        (key.clone(), *mode, client(addr, key, *mode, *salt))
                    })
                })
                .collect();
            threads.into_iter().map(|thread| thread.join()).collect::<Result<_, _>>()
        })
        .map_err(|_| "a doubles client panicked".to_string())?;
        let mut acknowledged: BTreeMap<&str, Vec<Vec<u8>>> = BTreeMap::new();
        for (key, mode, answer) in &answers {
            report.requests += 1;
            report.hung_up += u64::from(*mode != Mode::Wait);
            match answer {
                Some(answer) if answer.status == 201 => {
                    report.acknowledged += 1;
                    acknowledged.entry(key).or_default().push(answer.body.clone());
                }
                Some(answer) if answer.status == 409 => report.in_progress += 1,
                _ => {}
            }
        }
        // Several retriers per key at once, each until its final answer.
        let retried: Vec<(String, Retried)> = std::thread::scope(|scope| {
            let threads: Vec<_> = keys
                .iter()
                .flat_map(|key| (0..copies).map(move |_| key))
                .map(|key| {
                    scope.spawn(move || (key.clone(), until_final(addr, key, Duration::from_millis(100), FINAL_WITHIN)))
                })
                .collect();
            threads.into_iter().map(|thread| thread.join()).collect::<Result<_, _>>()
        })
        .map_err(|_| "a doubles retrier panicked".to_string())?;
        let mut last: BTreeMap<String, Vec<Answer>> = BTreeMap::new();
        for (key, retried) in retried {
            report.requests += retried.sends;
            if let Some(answer) = checks.outcome(&key, retried) {
                last.entry(key).or_default().push(answer);
            }
        }
        for (key, mut answers) in last {
            let answer = answers.remove(0);
            let mut earlier = acknowledged.remove(key.as_str()).unwrap_or_default();
            earlier.extend(answers.into_iter().map(|answer| answer.body));
            report.compared += 1 + earlier.len() as u64;
            finals.push((key, answer, earlier));
        }
        report.keys += keys.len() as u64;
    }
    let ledger = Ledger::read(addr)?;
    service.kill();
    checks.keys = report.keys;
    checks.finals_without_operator(&ledger, &finals);
    (report.calls, report.charges, report.payments) = totals(&ledger);
    report.took = started.elapsed();
    Ok((report, checks))
}

/// What an operator asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    /// `resolution: completed` with a made-up `201`.
    Complete,
    /// `resolution: released`.
    Release,
    /// `effect: charge, provider: confirmed` with the reference the provider's lookup gives.
    Confirm,
    /// `provider: confirmed` with a reference the provider never gave.
    ConfirmWrong,
    /// `provider: failed`.
    Failed,
    /// `provider: not_found`.
    NotFound,
    /// `retry: true`.
    Retry,
}

impl Action {
    const ALL: [Action; 7] = [
        Action::Complete,
        Action::Release,
        Action::Confirm,
        Action::ConfirmWrong,
        Action::Failed,
        Action::NotFound,
        Action::Retry,
    ];

    fn name(self) -> &'static str {
        match self {
            Action::Complete => "complete",
            Action::Release => "release",
            Action::Confirm => "confirm",
            Action::ConfirmWrong => "confirm (wrong reference)",
            Action::Failed => "failed",
            Action::NotFound => "not_found",
            Action::Retry => "send again",
        }
    }
}

/// What an operator did, as the service answered.
#[derive(Debug)]
struct Acted {
    key: String,
    action: Action,
    /// The reference given with a confirmation.
    reference: Option<String>,
    /// `None`: accepted; else the refusal's status and problem code.
    refused: Option<String>,
}

/// One operator action on `key`.
fn act(addr: SocketAddr, key: &str, action: Action) -> Acted {
    let named = serde_json::json!({ "tenant": crate::http_wire::TENANT, "operation": "create_payment", "key": key });
    let mut body = named.as_object().cloned().unwrap_or_default();
    let mut reference = None;
    let extra = match action {
        Action::Complete => serde_json::json!({"resolution": "completed", "status": 201, "body": {"made": "up"}}),
        Action::Release => serde_json::json!({"resolution": "released"}),
        Action::Confirm | Action::ConfirmWrong => {
            let given = if action == Action::Confirm { lookup(addr, key) } else { None };
            let given = given.unwrap_or_else(|| "ch_0000000000000000".to_string());
            reference = Some(given.clone());
            serde_json::json!({"effect": "charge", "provider": "confirmed", "reference": given})
        }
        Action::Failed => serde_json::json!({"effect": "charge", "provider": "failed"}),
        Action::NotFound => serde_json::json!({"effect": "charge", "provider": "not_found"}),
        Action::Retry => serde_json::json!({"effect": "charge", "retry": true}),
    };
    body.extend(extra.as_object().cloned().unwrap_or_default());
    let body = serde_json::Value::Object(body).to_string();
    let refused = match exchange(addr, &post_request("/v1/admin/resolve", ADMIN_TOKEN, &body)) {
        Ok(answer) if answer.status == 200 => None,
        Ok(answer) => {
            let code = answer.json()["code"].as_str().map_or_else(|| "no code".to_string(), str::to_string);
            Some(format!("{} {code}", answer.status))
        }
        Err(error) => Some(format!("no answer ({})", error.kind())),
    };
    Acted { key: key.to_string(), action, reference, refused }
}

/// The reference the provider's lookup gives for `key`'s charge, through the admin API.
fn lookup(addr: SocketAddr, key: &str) -> Option<String> {
    let path = format!(
        "/v1/admin/lookup?tenant={}&operation=create_payment&key={key}&effect=charge",
        crate::http_wire::TENANT
    );
    let answer = exchange(addr, &get_request(&path, ADMIN_TOKEN)).ok()?;
    (answer.status == 200).then(|| answer.json()["reference"].as_str().map(str::to_string)).flatten()
}

/// The operators' part.
fn operators(config: &HttpEdgesConfig) -> Result<(OperatorsReport, Checks), String> {
    let started = Instant::now();
    let (_dir, store) = fresh_store()?;
    let latency = OPERATOR_PROVIDER_MS.to_string();
    let args = [
        "--admin-token",
        ADMIN_TOKEN,
        "--lease-ttl-secs",
        "1",
        "--reconcile-interval-secs",
        "2",
        "--provider-latency-ms",
        &latency,
    ];
    let mut service = Service::start(&config.service, &store, &args)?;
    let addr = service.addr;
    let mut rng = Rng::new(config.seed ^ 0x4f50_4552);
    let keys: Vec<String> = (0..config.operator_keys).map(|i| format!("op-k{i}")).collect();
    // The keys start over two seconds (a new one every 100 ms at the CI size).
    let spread = Duration::from_millis(2_000);
    let offsets: Vec<Duration> = keys.iter().map(|_| Duration::from_millis(rng.below(millis(spread).max(1)))).collect();
    let done = AtomicBool::new(false);
    // Each key: 0 not sent yet, 1 on its way to its final answer, 2 final.
    let states: Vec<AtomicU8> = keys.iter().map(|_| AtomicU8::new(0)).collect();
    let acted: Mutex<Vec<Acted>> = Mutex::new(Vec::new());
    let mut operator_rng = Rng::new(rng.next_u64());
    let probes = usize::try_from(config.operator_probes).unwrap_or(0).min(keys.len());
    let retried: Vec<Retried> = std::thread::scope(|scope| {
        let operator = scope.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                // Three actions in four on a key on its way, when there is one.
                let on_way: Vec<usize> = (0..keys.len()).filter(|i| states[*i].load(Ordering::Relaxed) == 1).collect();
                let index = if !on_way.is_empty() && operator_rng.chance(75) {
                    on_way[usize::try_from(operator_rng.below(on_way.len() as u64)).unwrap_or(0)]
                } else {
                    usize::try_from(operator_rng.below(keys.len() as u64)).unwrap_or(0)
                };
                let action = Action::ALL[usize::try_from(operator_rng.below(Action::ALL.len() as u64)).unwrap_or(0)];
                let outcome = act(addr, &keys[index], action);
                if let Ok(mut acted) = acted.lock() {
                    acted.push(outcome);
                }
                std::thread::sleep(Duration::from_millis(operator_rng.below(60)));
            }
        });
        // The probes: `failed` after the call's deadline (750 ms) and before the provider
        // makes the charge (1 s), when the provider's lookup still says "no such charge".
        for (key, offset) in keys.iter().zip(&offsets).take(probes) {
            let acted = &acted;
            scope.spawn(move || {
                std::thread::sleep(*offset + Duration::from_millis(OPERATOR_PROVIDER_MS * 17 / 20));
                let outcome = act(addr, key, Action::Failed);
                if let Ok(mut acted) = acted.lock() {
                    acted.push(outcome);
                }
            });
        }
        let clients: Vec<_> = keys
            .iter()
            .zip(&offsets)
            .zip(&states)
            .map(|((key, offset), state)| {
                scope.spawn(move || {
                    std::thread::sleep(*offset);
                    state.store(1, Ordering::Relaxed);
                    let retried = until_final(addr, key, Duration::from_millis(150), FINAL_WITHIN);
                    state.store(2, Ordering::Relaxed);
                    retried
                })
            })
            .collect();
        let retried = clients.into_iter().map(|client| client.join()).collect::<Result<Vec<_>, _>>();
        done.store(true, Ordering::Relaxed);
        let operator = operator.join();
        retried.and_then(|retried| operator.map(|()| retried))
    })
    .map_err(|_| "an operators' thread panicked".to_string())?;
    // Calls on their way land; then each key is asked once more, as a late retry would.
    std::thread::sleep(Duration::from_millis(OPERATOR_PROVIDER_MS + 500));
    let ledger = Ledger::read(addr)?;
    let mut report = OperatorsReport { keys: keys.len() as u64, probes: probes as u64, ..Default::default() };
    let mut checks = Checks { keys: keys.len() as u64, ..Default::default() };
    let acted = acted.into_inner().map_err(|_| "the operator's record is poisoned".to_string())?;
    for (key, retried) in keys.iter().zip(retried) {
        report.requests += retried.sends;
        let Some(last) = checks.outcome(key, retried) else { continue };
        let again = until_final(addr, key, Duration::from_millis(150), FINAL_WITHIN);
        report.requests += again.sends;
        let Some(again) = checks.outcome(key, again) else { continue };
        if again.status != last.status || again.body != last.body {
            checks.disagreements += 1;
            checks.note(format!("{key}: a later retry got {} after {}", again.status, last.status));
        }
        let failed_accepted = acted.iter().any(|a| a.key == *key && a.action == Action::Failed && a.refused.is_none());
        let (payments, charges) = (ledger.payments_of(key), ledger.charges_of(key));
        if again.status != 201 && failed_accepted && payments.is_empty() && charges.len() == 1 {
            report.charged_but_failed += 1;
            checks.note(format!(
                "{key}: an operator's `failed` was accepted while the call was on its way; the key answers {} and the provider charged",
                again.status
            ));
        }
        checks.final_answer(&ledger, key, &again, std::slice::from_ref(&last.body));
        report.failed_by_operator += u64::from(again.status != 201);
        report.calls += ledger.calls_of(key);
        report.charges += charges.len() as u64;
        report.payments += payments.len() as u64;
    }
    for acted in &acted {
        report.actions += 1;
        match &acted.refused {
            Some(reason) => *report.refused.entry(reason.clone()).or_default() += 1,
            None => {
                *report.accepted.entry(acted.action.name().to_string()).or_default() += 1;
                // An accepted confirmation names the charge the key's payment row names.
                if acted.action == Action::Confirm || acted.action == Action::ConfirmWrong {
                    let row = ledger.payments_of(&acted.key).first().map(|row| row["provider_charge"].clone());
                    if row.as_ref().and_then(|r| r.as_str()) != acted.reference.as_deref() {
                        checks.inconsistent += 1;
                        checks.note(format!(
                            "{}: a confirmation with {:?} was accepted; the payment names {row:?}",
                            acted.key, acted.reference
                        ));
                    }
                }
            }
        }
    }
    service.kill();
    report.took = started.elapsed();
    Ok((report, checks))
}

/// How one client of a SIGTERM round fared.
#[derive(Debug)]
enum Fared {
    /// A whole answer, and when it came.
    Answered(Answer, Instant),
    /// The connection was closed without a whole answer.
    Cut,
    /// The connection was refused.
    TurnedAway,
}

/// Sends `key`'s payment and waits for its whole answer.
fn fare(addr: SocketAddr, key: &str) -> Fared {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)) else {
        return Fared::TurnedAway;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let mut bytes = Vec::new();
    let read = stream.write_all(&payment_request(key)).and_then(|()| stream.read_to_end(&mut bytes));
    match read.and_then(|_| crate::http_wire::parse_answer(&bytes)) {
        Ok(answer) => Fared::Answered(answer, Instant::now()),
        Err(_) => Fared::Cut,
    }
}

/// SIGTERM, and the wait for the exit (at most 30 s): an exit other than status 0 is unclean.
/// The time from the signal to the exit, in milliseconds.
fn stop(service: &mut Service, report: &mut SigtermReport, checks: &mut Checks) -> Result<u64, String> {
    let signalled = Instant::now();
    service.signal_term()?;
    report.signals += 1;
    let exit = service.wait_exit(Duration::from_secs(30));
    if !exit.is_some_and(|status| status.success()) {
        report.unclean += 1;
        checks.note(format!("after SIGTERM: {exit:?}"));
    }
    Ok(millis(signalled.elapsed()))
}

/// The SIGTERM part.
fn sigterm(config: &HttpEdgesConfig) -> Result<(SigtermReport, Checks), String> {
    let started = Instant::now();
    let (_dir, store) = fresh_store()?;
    let steady = ["--lease-ttl-secs", "2", "--reconcile-interval-secs", "1", "--provider-latency-ms", "400"];
    let slow = ["--lease-ttl-secs", "2", "--reconcile-interval-secs", "1", "--provider-latency-ms", "2500"];
    let mut rng = Rng::new(config.seed ^ 0x5445_524d);
    let mut report = SigtermReport::default();
    let mut checks = Checks::default();
    let mut finals: Vec<(String, Answer, Vec<Vec<u8>>)> = Vec::new();
    let mut last_service = None;
    for round in 0..config.sigterm_rounds {
        let cut_at_limit = round % 3 == 2;
        let mut args: Vec<&str> = if cut_at_limit { slow.to_vec() } else { steady.to_vec() };
        args.extend(["--drain-secs", if cut_at_limit { "1" } else { "10" }]);
        let mut service = Service::start(&config.service, &store, &args)?;
        let addr = service.addr;
        let keys: Vec<String> = (0..config.sigterm_keys).map(|i| format!("t{round}-k{i}")).collect();
        let offsets: Vec<Duration> = keys.iter().map(|_| Duration::from_millis(rng.below(800))).collect();
        let signal_at = Duration::from_millis(150 + rng.below(300));
        let (fared, signalled, exit_ms) = std::thread::scope(|scope| {
            let clients: Vec<_> = keys
                .iter()
                .zip(&offsets)
                .map(|(key, offset)| {
                    scope.spawn(move || {
                        std::thread::sleep(*offset);
                        fare(addr, key)
                    })
                })
                .collect();
            std::thread::sleep(signal_at);
            let signalled = Instant::now();
            let exit_ms = stop(&mut service, &mut report, &mut checks);
            let fared = clients.into_iter().map(|client| client.join()).collect::<Result<Vec<_>, _>>();
            (fared, signalled, exit_ms)
        });
        let fared = fared.map_err(|_| "a SIGTERM client panicked".to_string())?;
        let mut counts = SigtermRound { cut_at_limit, exit_ms: exit_ms?, ..Default::default() };
        let mut acknowledged: BTreeMap<&str, Vec<Vec<u8>>> = BTreeMap::new();
        for (key, fared) in keys.iter().zip(fared) {
            report.requests += 1;
            match fared {
                Fared::Answered(answer, at) => {
                    if at < signalled {
                        counts.answered_before += 1;
                    } else {
                        counts.answered_in_drain += 1;
                        report.drain_not_201 += u64::from(answer.status != 201);
                    }
                    if answer.status == 201 {
                        acknowledged.entry(key).or_default().push(answer.body);
                    }
                }
                Fared::Cut => counts.cut += 1,
                Fared::TurnedAway => counts.turned_away += 1,
            }
        }
        report.rounds.push(counts);
        // Started again on the same files: every key retried to its final answer.
        let mut restarted = Service::start(&config.service, &store, &steady)?;
        let addr = restarted.addr;
        let retried = all_until_final(addr, &keys, Duration::from_millis(100), "a SIGTERM retrier")?;
        for (key, retried) in keys.iter().zip(retried) {
            report.requests += retried.sends;
            if let Some(answer) = checks.outcome(key, retried) {
                let earlier = acknowledged.remove(key.as_str()).unwrap_or_default();
                if !earlier.is_empty() && !answer.replayed {
                    checks.disagreements += 1;
                    checks.note(format!("{key}: answered 201 during the drain, yet the retry ran again"));
                }
                finals.push((key.clone(), answer, earlier));
            }
        }
        report.keys += keys.len() as u64;
        if round + 1 == config.sigterm_rounds {
            last_service = Some(restarted);
        } else {
            stop(&mut restarted, &mut report, &mut checks)?;
        }
    }
    if let Some(mut service) = last_service {
        let ledger = Ledger::read(service.addr)?;
        stop(&mut service, &mut report, &mut checks)?;
        checks.finals_without_operator(&ledger, &finals);
        (report.calls, report.charges, report.payments) = totals(&ledger);
    }
    checks.keys = report.keys;
    report.took = started.elapsed();
    Ok((report, checks))
}

/// Provider calls, charges and payments in the ledger, all keys together.
fn totals(ledger: &Ledger) -> (u64, u64, u64) {
    let calls = ledger.charges.keys().map(|key| ledger.calls_of(key)).sum();
    let charges = ledger.charges.values().map(|c| c.len() as u64).sum();
    let payments = ledger.payments.values().map(|p| p.len() as u64).sum();
    (calls, charges, payments)
}
