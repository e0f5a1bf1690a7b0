//! Retention that runs: the service purges expired idempotency records, finished outbox items,
//! old webhook deliveries and old audit events on a timer (`--purge-interval-secs`,
//! `--purge-batch`). On PostgreSQL it is the adapter's [`PurgeTask`] (batches that skip rows
//! others hold, so instances purge side by side and never block a request); on redb the same
//! rounds through the store's `purge_expired`, off the runtime's threads.

use std::time::Duration;

use idemdb_interface::IdempotencyStore;
use idemdb_postgres::{PurgeHandle, PurgeTask};
use tokio::task::JoinHandle;

/// The default pause between purge rounds.
pub const DEFAULT_PURGE_INTERVAL: Duration = Duration::from_secs(60);
/// The default number of due records (and of audit events) per purge batch.
pub const DEFAULT_PURGE_BATCH: usize = 1000;

/// A running purge; [`Purging::stop`] ends it.
#[derive(Debug)]
pub enum Purging {
    /// The adapter's task (PostgreSQL).
    Postgres(PurgeHandle),
    /// Rounds through [`IdempotencyStore::purge_expired`] (the embedded store).
    Rounds(JoinHandle<()>),
}

impl Purging {
    /// Stops the purge (a batch in progress commits first on PostgreSQL).
    pub async fn stop(self) {
        match self {
            Purging::Postgres(handle) => {
                handle.stop().await;
            }
            Purging::Rounds(task) => task.abort(),
        }
    }
}

/// Starts the adapter's purge task on `store`.
pub fn purge_postgres(store: idemdb_postgres::PgStore, interval: Duration, batch: usize) -> Purging {
    let mut task = PurgeTask::new(store);
    task.interval = interval;
    task.batch_size = batch.max(1);
    Purging::Postgres(task.spawn())
}

/// Starts rounds of `store.purge_expired(batch)` every `interval` (a round runs batches until
/// none reports more due work); each round that changed something is logged on stderr.
pub fn purge_rounds<S: IdempotencyStore + Clone + Send + Sync + 'static>(
    store: S,
    interval: Duration,
    batch: usize,
) -> Purging {
    let batch = batch.max(1);
    Purging::Rounds(tokio::spawn(async move {
        loop {
            let (mut tombstoned, mut forgotten, mut other, mut batches) = (0u64, 0u64, 0u64, 0u64);
            loop {
                match store.purge_expired(batch).await {
                    Ok(report) => {
                        batches += 1;
                        tombstoned += report.tombstoned;
                        forgotten += report.forgotten;
                        other += report.workflow_forgotten + report.audit_removed;
                        if !report.more {
                            break;
                        }
                    }
                    Err(error) => {
                        eprintln!("payments-example: purge failed: {error}");
                        break;
                    }
                }
            }
            if tombstoned + forgotten + other > 0 {
                eprintln!(
                    "payments-example: purge round: {batches} batches, {tombstoned} tombstoned, {forgotten} forgotten, \
                     {other} outbox, delivery and audit rows removed"
                );
            }
            tokio::time::sleep(interval).await;
        }
    }))
}
