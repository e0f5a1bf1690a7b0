//! The clients: one that keeps its key for every retry of an intent (idemdb's contract), and
//! one that wrongly makes a new key per retry. Both send through the same channel to the same
//! kind of server; every count comes from the store's real answers and the provider's ledger.

use std::time::Duration;

use idemdb::{
    Canonicalizer, Failure, IdempotencyKey, Lease, ManualClock, Reservation, Resolution, Scope, State, Store,
};

use crate::demo::channel::{Fault, Intent, MAX_ATTEMPTS};
use crate::demo::provider::{Charge, Provider};
use crate::demo::server::Server;
use crate::error::CliError;

/// One network hop.
const HOP: Duration = Duration::from_millis(20);
/// How long the provider takes.
const PROVIDER_LATENCY: Duration = Duration::from_millis(250);
/// How long a client waits for an answer before it retries.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);
/// Time between two intents.
const THINK_TIME: Duration = Duration::from_millis(50);

/// How a client keys its retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keying {
    /// One key per intent, made once, reused by every retry.
    SameKey,
    /// A new key for every send: no idempotency.
    NewKeyPerRetry,
}

/// What happened during a run, counted as it happened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) intents: u64,
    pub(crate) attempts: u64,
    pub(crate) lost_requests: u64,
    pub(crate) lost_responses: u64,
    pub(crate) timeouts: u64,
    pub(crate) crashes: u64,
    pub(crate) double_submits: u64,
    pub(crate) replays: u64,
    pub(crate) conflicts: u64,
    pub(crate) in_progress_refusals: u64,
    pub(crate) reconciliations: u64,
    pub(crate) gave_up: u64,
    /// Intents that ended with a charge (`SameKey`: records completed in the store).
    pub(crate) completed: u64,
    /// Intents that ended declined.
    pub(crate) declined: u64,
    /// Intents the store and the provider disagree on (must be 0).
    pub(crate) inconsistent: u64,
    pub(crate) effects: u64,
    pub(crate) duplicate_effects: u64,
}

/// What the client got back from one send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reply {
    /// A final answer (a charge, a replayed charge, a decline).
    Final,
    /// Refused: another attempt of this key is running; retry after this long.
    Busy(Duration),
    /// Refused: the key is bound to a different request.
    Conflict,
    /// Nothing came back (lost, timed out, server crashed).
    Nothing,
}

/// One send: which intent, under which scope and key, with which body.
struct Request<'r> {
    intent: &'r Intent,
    scope: &'r Scope,
    key: IdempotencyKey,
    body: String,
}

/// One client run over all intents.
pub(crate) struct Run<'a> {
    keying: Keying,
    operation: &'static str,
    server: &'a mut Server,
    clock: &'a ManualClock,
    canon: &'a Canonicalizer,
    provider: Provider,
    tally: Tally,
    /// Each intent's scope and key, to check the store against the ledger at the end.
    keys: Vec<(u64, Scope, IdempotencyKey)>,
}

impl<'a> Run<'a> {
    pub(crate) fn new(
        keying: Keying,
        operation: &'static str,
        server: &'a mut Server,
        clock: &'a ManualClock,
        canon: &'a Canonicalizer,
    ) -> Self {
        Run {
            keying,
            operation,
            server,
            clock,
            canon,
            provider: Provider::default(),
            tally: Tally::default(),
            keys: Vec::new(),
        }
    }

    /// Runs one intent to its end: an answer, or giving up after [`MAX_ATTEMPTS`].
    pub(crate) fn intent(&mut self, intent: &Intent) -> Result<(), CliError> {
        self.clock.advance(THINK_TIME);
        self.tally.intents += 1;
        let scope = Scope::new(intent.tenant.as_str(), self.operation).map_err(|error| self.error(&error))?;
        // The intent's key: made once, when the intent is created, before the first send.
        let key = self.new_key()?;
        let mut answered = false;
        let mut double_submit = intent.double_submit;
        let mut attempt = 0;
        while attempt < MAX_ATTEMPTS && !answered {
            let fault = intent.faults[attempt];
            attempt += 1;
            let send_key = match self.keying {
                Keying::SameKey => key.clone(),
                Keying::NewKeyPerRetry => self.new_key()?,
            };
            let request = Request { intent, scope: &scope, key: send_key, body: intent.body(attempt, false) };
            match self.send(&request, fault, &mut double_submit)? {
                Reply::Final | Reply::Conflict => answered = true,
                Reply::Busy(wait) => self.clock.advance(wait + HOP),
                Reply::Nothing => self.clock.advance(CLIENT_TIMEOUT),
            }
        }
        if !answered {
            self.tally.gave_up += 1;
        }
        // A buggy client reuses the key for an edited payment: a different request under the
        // same key must be refused, never replayed or run. (Without keys there is nothing to
        // reuse, so the other client has no such bug.)
        if answered && intent.reuses_key && self.keying == Keying::SameKey {
            let request = Request { intent, scope: &scope, key: key.clone(), body: intent.body(attempt + 1, true) };
            self.send(&request, Fault::None, &mut false)?;
        }
        self.keys.push((intent.id, scope, key));
        Ok(())
    }

    /// One request through the channel to the server and, maybe, back.
    fn send(&mut self, request: &Request<'_>, fault: Fault, double_submit: &mut bool) -> Result<Reply, CliError> {
        let Request { intent, scope, key, body } = request;
        self.tally.attempts += 1;
        self.clock.advance(HOP);
        if fault == Fault::LoseRequest {
            self.tally.lost_requests += 1;
            return Ok(Reply::Nothing);
        }
        // The server fingerprints the canonical body it received.
        let fingerprint = self.canon.fingerprint(body.as_bytes()).map_err(|error| self.error(&error))?;
        if fault == Fault::CrashBeforeCommit {
            self.tally.crashes += 1;
            self.server.crash_before_commit(scope, key, &fingerprint)?;
            return Ok(Reply::Nothing);
        }
        let mut reconciled = false;
        let reply = loop {
            match self.server.reserve(scope, key, &fingerprint)? {
                Reservation::Acquired(lease) => {
                    return self.execute(request, &lease, fault, double_submit);
                }
                Reservation::Replay { .. } => {
                    self.tally.replays += 1;
                    break Reply::Final;
                }
                Reservation::InProgress { retry_after } => {
                    self.tally.in_progress_refusals += 1;
                    break Reply::Busy(retry_after);
                }
                Reservation::Mismatch { .. } => {
                    self.tally.conflicts += 1;
                    break Reply::Conflict;
                }
                Reservation::NeedsReconciliation { .. } if !reconciled => {
                    // An earlier attempt died with the lease: ask the provider what happened
                    // before any new effect, record that, then answer this request.
                    self.tally.reconciliations += 1;
                    let resolution = match self.provider.lookup(intent.id) {
                        Some(Charge::Charged(id)) => Resolution::Completed(charge_body(intent, &id)),
                        Some(Charge::Declined) => Resolution::Failed(decline_body(intent)),
                        None => Resolution::Released,
                    };
                    self.server.reconcile(scope, key, resolution)?;
                    reconciled = true;
                }
                _ => break Reply::Final,
            }
        };
        self.answer(reply, fault)
    }

    /// The attempt holds the lease: call the provider and store the outcome, unless the
    /// channel or a crash interferes.
    fn execute(
        &mut self,
        request: &Request<'_>,
        lease: &Lease,
        fault: Fault,
        double_submit: &mut bool,
    ) -> Result<Reply, CliError> {
        let intent = request.intent;
        if fault == Fault::CrashAfterReserve {
            self.tally.crashes += 1;
            self.server.crash()?;
            return Ok(Reply::Nothing);
        }
        self.clock.advance(PROVIDER_LATENCY);
        let charge = self.provider.charge(intent.id, intent.card_ok);
        if std::mem::take(double_submit) {
            // A double click: the second send arrives while this attempt runs. Its answer
            // goes nowhere (the page already waits for the first).
            self.tally.double_submits += 1;
            let again = Request { key: self.retry_key(&request.key)?, body: request.body.clone(), ..*request };
            self.send(&again, Fault::None, &mut false)?;
        }
        let mut reply = None;
        if fault == Fault::Timeout {
            // The provider is slow; the client stops waiting and retries now, while this
            // attempt still holds the lease. The client hears the retry's answer.
            self.tally.timeouts += 1;
            self.clock.advance(CLIENT_TIMEOUT);
            let retry = Request { key: self.retry_key(&request.key)?, body: request.body.clone(), ..*request };
            reply = Some(self.send(&retry, Fault::None, &mut false)?);
        }
        if fault == Fault::CrashAfterEffect {
            self.tally.crashes += 1;
            self.server.crash()?;
            return Ok(Reply::Nothing);
        }
        match charge {
            Charge::Charged(id) => self.server.complete(lease, charge_body(intent, &id))?,
            Charge::Declined => self.server.fail(lease, Failure::Definitive(decline_body(intent)))?,
        }
        match reply {
            Some(reply) => Ok(reply),
            None => self.answer(Reply::Final, fault),
        }
    }

    /// The answer on its way back.
    fn answer(&mut self, reply: Reply, fault: Fault) -> Result<Reply, CliError> {
        Ok(match fault {
            Fault::LoseResponse => {
                self.tally.lost_responses += 1;
                Reply::Nothing
            }
            Fault::Timeout => {
                self.tally.timeouts += 1;
                Reply::Nothing
            }
            Fault::CrashAfterReserve | Fault::CrashAfterEffect => {
                self.tally.crashes += 1;
                self.server.crash()?;
                Reply::Nothing
            }
            Fault::None | Fault::LoseRequest | Fault::CrashBeforeCommit => reply,
        })
    }

    /// Counts effects and checks the store against the provider's ledger.
    pub(crate) fn finish(mut self, intents: &[Intent]) -> Result<Tally, CliError> {
        self.tally.effects = self.provider.effects();
        self.tally.duplicate_effects = self.provider.duplicate_effects();
        match self.keying {
            Keying::NewKeyPerRetry => {
                self.tally.completed = self.provider.charged_intents();
                self.tally.declined = intents.iter().filter(|intent| !intent.card_ok).count() as u64;
            }
            Keying::SameKey => {
                let store = self.server.store()?;
                for (id, scope, key) in &self.keys {
                    let record = store.get(scope, key).map_err(|error| self.error(&error))?;
                    let charges = self.provider.charges_of(*id);
                    let consistent = match record.map(|record| record.state) {
                        Some(State::Completed { result, .. }) => {
                            self.tally.completed += 1;
                            // Exactly one charge, and the stored result names it.
                            matches!(charges.as_slice(), [only] if String::from_utf8_lossy(&result).contains(only.as_str()))
                        }
                        Some(State::Failed { .. }) => {
                            self.tally.declined += 1;
                            charges.is_empty()
                        }
                        // Unfinished (the client gave up): fine only if nothing was charged.
                        _ => charges.is_empty(),
                    };
                    self.tally.inconsistent += u64::from(!consistent);
                }
            }
        }
        Ok(self.tally)
    }

    fn retry_key(&self, key: &IdempotencyKey) -> Result<IdempotencyKey, CliError> {
        match self.keying {
            Keying::SameKey => Ok(key.clone()),
            Keying::NewKeyPerRetry => self.new_key(),
        }
    }

    fn new_key(&self) -> Result<IdempotencyKey, CliError> {
        Store::new_key().map_err(|error| self.error(&error))
    }

    fn error(&self, error: &dyn std::error::Error) -> CliError {
        CliError::runtime_ctx(self.server.path(), "demo", error)
    }
}

fn charge_body(intent: &Intent, charge: &str) -> Vec<u8> {
    let cents = intent.amount_cents;
    format!(
        r#"{{"charge":"{charge}","order":"order-{}","amount":"{}.{:02}","currency":"BRL","status":"succeeded"}}"#,
        intent.id,
        cents / 100,
        cents % 100
    )
    .into_bytes()
}

fn decline_body(intent: &Intent) -> Vec<u8> {
    format!(r#"{{"error":"card_declined","order":"order-{}"}}"#, intent.id).into_bytes()
}
