//! Retention that runs: [`PurgeTask`] calls [`PgStore::purge_expired`] on a timer, in bounded
//! batches, each batch its own short transaction.
//!
//! Every batch locks the rows it changes with `FOR UPDATE SKIP LOCKED` (records, outbox items,
//! deliveries, jobs and audit events alike): a row a reserve or another instance's purge holds
//! is skipped, never waited for, so a purge blocks no request and any number of instances may
//! run the task against one database at once, each row removed by one of them. A skipped row
//! is taken by a later round. The rules are those of [`PgStore::purge_expired`] (the core's
//! [`Record::retention`](idemdb_core::Record::retention)): a result becomes a tombstone at its
//! response TTL, a tombstone or released record is forgotten at its tombstone TTL, never
//! earlier; audit events go once they are older than the store's audit retention.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use idemdb_core::PurgeReport;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use crate::error::Error;
use crate::store::PgStore;

/// The default pause between two rounds of [`PurgeTask`].
pub const DEFAULT_PURGE_INTERVAL: Duration = Duration::from_secs(60);
/// The default number of due records (and of audit events, and of rows of each workflow table)
/// one batch of [`PurgeTask`] handles.
pub const DEFAULT_PURGE_BATCH: usize = 1000;

/// A periodic purge of one store: every [`interval`](PurgeTask::interval), batches of
/// [`batch_size`](PurgeTask::batch_size) until nothing due is left (or
/// [`max_batches`](PurgeTask::max_batches) per round).
///
/// ```no_run
/// # async fn run(store: idemdb_postgres::PgStore) {
/// use std::time::Duration;
/// let mut task = idemdb_postgres::PurgeTask::new(store);
/// task.interval = Duration::from_secs(60);
/// task.batch_size = 1000;
/// let handle = task.spawn();
/// // … serve …
/// let last = handle.stop().await;
/// # let _ = last;
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct PurgeTask {
    store: PgStore,
    /// The pause between the end of one round and the start of the next.
    pub interval: Duration,
    /// Due records per batch (one transaction); also the bound on audit events and on rows of
    /// each workflow table per batch. At least 1.
    pub batch_size: usize,
    /// Most batches in one round (a bound on one round's work when far more is due; the rest
    /// waits for the next round).
    pub max_batches: u64,
}

/// What one round of [`PurgeTask`] did: the sums of its batches' reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PurgeRound {
    /// Batches (transactions) the round ran.
    pub batches: u64,
    /// The sums of the batches' reports (`more`: the round stopped at
    /// [`PurgeTask::max_batches`] with due work left, or at an error).
    pub report: PurgeReport,
    /// How long the round took.
    pub took: Duration,
}

impl PurgeRound {
    fn add(&mut self, batch: &PurgeReport) {
        let total = &mut self.report;
        total.tombstoned += batch.tombstoned;
        total.forgotten += batch.forgotten;
        total.stale_index_entries += batch.stale_index_entries;
        total.workflow_forgotten += batch.workflow_forgotten;
        total.audit_removed += batch.audit_removed;
        total.corrupt += batch.corrupt;
        total.more = batch.more;
        self.batches += 1;
    }
}

impl PurgeTask {
    /// A task on `store` with [`DEFAULT_PURGE_INTERVAL`], [`DEFAULT_PURGE_BATCH`] and no
    /// practical bound on batches per round.
    pub fn new(store: PgStore) -> PurgeTask {
        PurgeTask { store, interval: DEFAULT_PURGE_INTERVAL, batch_size: DEFAULT_PURGE_BATCH, max_batches: u64::MAX }
    }

    /// One round now: batches until none reports more due work (or `max_batches`).
    ///
    /// # Errors
    /// The first batch that failed ([`Error::Unavailable`], [`Error::CommitUnknown`], database
    /// errors); the batches before it are committed.
    pub async fn round(&self) -> Result<PurgeRound, Error> {
        self.round_until(&AtomicBool::new(false)).await.map_err(|(_, e)| e)
    }

    async fn round_until(&self, stopping: &AtomicBool) -> Result<PurgeRound, (PurgeRound, Error)> {
        let started = Instant::now();
        let mut round = PurgeRound::default();
        let batch_size = self.batch_size.max(1);
        while round.batches < self.max_batches.max(1) {
            if stopping.load(Ordering::SeqCst) {
                round.report.more = true;
                break;
            }
            match self.store.purge_expired(batch_size).await {
                Ok(batch) => {
                    round.add(&batch);
                    if !batch.more {
                        break;
                    }
                }
                Err(error) => {
                    round.report.more = true;
                    round.took = started.elapsed();
                    return Err((round, error));
                }
            }
        }
        round.took = started.elapsed();
        Ok(round)
    }

    /// Runs the task on the current Tokio runtime: a round at once, then one every
    /// `interval`, until [`PurgeHandle::stop`]. Each round is logged (`tracing`, target
    /// `idemdb`: `info` when it changed something, `debug` otherwise, `warn` on an error, after
    /// which the next round comes as usual).
    pub fn spawn(self) -> PurgeHandle {
        let stop = Arc::new(Notify::new());
        let stopping = Arc::new(AtomicBool::new(false));
        let (rounds_tx, rounds) = watch::channel((0u64, PurgeRound::default()));
        let (task_stop, task_stopping) = (Arc::clone(&stop), Arc::clone(&stopping));
        let join = tokio::spawn(async move {
            let mut n = 0u64;
            loop {
                let round = match self.round_until(&task_stopping).await {
                    Ok(round) => {
                        log_round(&self.store, &round);
                        round
                    }
                    Err((round, error)) => {
                        tracing::warn!(
                            target: "idemdb", schema = self.store.schema(), batches = round.batches,
                            error = %error, "purge round failed; the next round comes as usual"
                        );
                        round
                    }
                };
                n += 1;
                rounds_tx.send_replace((n, round));
                if task_stopping.load(Ordering::SeqCst) {
                    break;
                }
                if tokio::time::timeout(self.interval, task_stop.notified()).await.is_ok() {
                    break;
                }
            }
        });
        PurgeHandle { stop, stopping, join, rounds }
    }
}

fn log_round(store: &PgStore, round: &PurgeRound) {
    let r = &round.report;
    let changed = r.tombstoned + r.forgotten + r.workflow_forgotten + r.audit_removed > 0;
    macro_rules! event {
        ($level:ident) => {
            tracing::$level!(
                target: "idemdb", schema = store.schema(), batches = round.batches, tombstoned = r.tombstoned,
                forgotten = r.forgotten, workflow_forgotten = r.workflow_forgotten, audit_removed = r.audit_removed,
                corrupt = r.corrupt, more = r.more, took_ms = u64::try_from(round.took.as_millis()).unwrap_or(u64::MAX),
                "purge round"
            )
        };
    }
    if changed || r.corrupt > 0 {
        event!(info);
    } else {
        event!(debug);
    }
}

/// A running [`PurgeTask`].
#[derive(Debug)]
pub struct PurgeHandle {
    stop: Arc<Notify>,
    stopping: Arc<AtomicBool>,
    join: JoinHandle<()>,
    rounds: watch::Receiver<(u64, PurgeRound)>,
}

impl PurgeHandle {
    /// The rounds so far: `(how many, the last one)`, updated after each round (a receiver to
    /// wait on with `changed`).
    pub fn rounds(&self) -> watch::Receiver<(u64, PurgeRound)> {
        self.rounds.clone()
    }

    /// Stops the task: a round in progress ends after its current batch (which commits), the
    /// pause between rounds at once. Returns the rounds run and the last one.
    pub async fn stop(self) -> (u64, PurgeRound) {
        self.stopping.store(true, Ordering::SeqCst);
        self.stop.notify_one();
        let _ = self.join.await;
        self.rounds.borrow().clone()
    }
}
