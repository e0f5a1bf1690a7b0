//! The way out for keys nobody will finish: renewing a lease that is still needed, listing the
//! records whose outcome is unknown (an attempt that reported `Uncertain`, a holder that died
//! with its lease), resolving them with the facts the app has, and reading what the open did
//! with the store's journal. Every call that writes has an `_async` form.

use idemdb::{ErrorCode, ExpiredLease, ListFilter, Named, ResolutionCause, StateKind};

use crate::options::PolicySettings;
use crate::types::{Lease, RecordInfo, Scope, key};
use crate::{IdemStore, IdemdbError};

type Result<T> = std::result::Result<T, IdemdbError>;

/// How a record whose outcome is unknown is resolved.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Enum)]
pub enum Resolution {
    /// The effect happened: store this result; retries replay it.
    Completed {
        /// The result body.
        body: Vec<u8>,
    },
    /// The effect did not happen and will not: store this failure; retries replay it.
    Failed {
        /// The failure body.
        body: Vec<u8>,
    },
    /// The effect did not happen: release the key, so the same request may run again.
    Released,
}

impl Resolution {
    fn to_core(&self) -> idemdb::Resolution {
        match self {
            Resolution::Completed { body } => idemdb::Resolution::Completed(body.clone()),
            Resolution::Failed { body } => idemdb::Resolution::Failed(body.clone()),
            Resolution::Released => idemdb::Resolution::Released,
        }
    }
}

/// A stored record with its scope and key, as [`IdemStore::records_needing_reconciliation`]
/// lists them.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct ScopedRecord {
    /// The scope.
    pub scope: Scope,
    /// The idempotency key.
    pub key: String,
    /// The record.
    pub record: RecordInfo,
}

/// One journal file an open moved aside instead of writing over it.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct JournalSetAside {
    /// Where the journal was.
    pub from: String,
    /// Where it is now (the file is kept: what it holds can still be read back).
    pub to: String,
    /// Why, for people.
    pub reason: String,
}

/// What the open of a store file did with its journal.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct JournalRecovery {
    /// Commits replayed into the store file (a crash had left them only in the journal).
    pub applied: u64,
    /// The journal they were read from.
    pub read_from: Option<String>,
    /// Whether the open gave up commits (only with `StoreOptions.discard_lost_journal`).
    pub discarded: bool,
    /// Intact commits given up after a damaged one (they are still in the set-aside file).
    pub given_up: u64,
    /// Where the journal stopped being readable, when it stopped before its end.
    pub stopped_by: Option<String>,
    /// Journal files moved aside.
    pub set_aside: Vec<JournalSetAside>,
    /// The store's earlier journal, removed once its commits were applied.
    pub removed: Option<String>,
}

impl JournalRecovery {
    fn from_core(report: &idemdb::JournalRecovery) -> Self {
        let path = |path: &std::path::Path| path.display().to_string();
        JournalRecovery {
            applied: report.applied,
            read_from: report.read_from.as_deref().map(path),
            discarded: report.discarded,
            given_up: report.given_up,
            stopped_by: report.stopped_by.clone(),
            set_aside: report
                .set_aside
                .iter()
                .map(|aside| JournalSetAside {
                    from: path(&aside.from),
                    to: path(&aside.to),
                    reason: aside.reason.to_string(),
                })
                .collect(),
            removed: report.removed.as_deref().map(path),
        }
    }
}

fn renew(store: &idemdb::Store, lease: &Lease) -> Result<Lease> {
    Ok(Lease::from_core(&store.renew(&lease.to_core()?)?))
}

fn reconcile(store: &idemdb::Store, scope: &Scope, key_text: &str, resolution: &Resolution, cause: &str) -> Result<()> {
    let cause = ResolutionCause::parse_name(cause)
        .map_err(|error| IdemdbError::new(ErrorCode::UnknownName, format!("resolution cause: {error}")))?;
    Ok(store.reconcile(&scope.to_core()?, &key(key_text)?, resolution.to_core(), cause)?)
}

/// Records in `state`, every page.
fn records_in(store: &idemdb::Store, state: StateKind) -> Result<Vec<idemdb::ListedRecord>> {
    let mut filter = ListFilter::default();
    filter.state = Some(state);
    let mut records = Vec::new();
    loop {
        let page = store.list(&filter)?;
        records.extend(page.records);
        match page.next_cursor {
            Some(cursor) => filter.after = Some(cursor),
            None => return Ok(records),
        }
    }
}

/// Uncertain records, and records in progress whose lease has ended under a policy that makes
/// them uncertain: the next reservation of such a key answers `NeedsReconciliation`.
fn needing_reconciliation(store: &idemdb::Store) -> Result<Vec<ScopedRecord>> {
    let now = store.now();
    let mut records = records_in(store, StateKind::Uncertain)?;
    records.extend(records_in(store, StateKind::InProgress)?.into_iter().filter(|listed| {
        let expired =
            matches!(listed.record.state, idemdb::State::InProgress { lease_expires_at } if lease_expires_at <= now);
        expired && store.policy(listed.scoped.scope.operation()).expired_lease() == ExpiredLease::Uncertain
    }));
    records.sort_by_key(|listed| listed.record.updated_at);
    Ok(records
        .iter()
        .map(|listed| ScopedRecord {
            scope: Scope::from_core(&listed.scoped.scope),
            key: listed.scoped.key.as_str().to_string(),
            record: RecordInfo::from_core(&listed.record),
        })
        .collect())
}

#[uniffi::export]
impl IdemStore {
    /// Extends a lease that is still held (for work that outlasts the lease); returns the
    /// renewed lease, with a later `expires_at_ms`. Complete or fail with the renewed lease.
    ///
    /// # Errors
    /// `IDEMDB_STALE_LEASE` when a newer attempt took over; `IDEMDB_WRONG_STATE` when the
    /// record is no longer in progress; `IDEMDB_NOT_FOUND`.
    pub fn renew(&self, lease: Lease) -> Result<Lease> {
        renew(&*self.store()?, &lease)
    }

    /// Resolves a record whose outcome is unknown: one that is `uncertain`, or `in_progress`
    /// with an expired lease (its holder died). `cause` says who decided, recorded in the audit
    /// trail: `application` (the app's own facts; the default), `operator` (a person),
    /// `provider_confirmed`, `provider_failed` or `provider_not_found` (the provider was asked).
    ///
    /// # Errors
    /// `IDEMDB_LEASE_LIVE` while the lease has not ended (the holder may still finish);
    /// `IDEMDB_WRONG_STATE` for a record that is finished; `IDEMDB_NOT_FOUND`;
    /// `IDEMDB_UNKNOWN_NAME` for another cause; `IDEMDB_TOO_LARGE`.
    #[uniffi::method(default(cause = "application"))]
    pub fn reconcile(&self, scope: Scope, key: String, resolution: Resolution, cause: String) -> Result<()> {
        reconcile(&*self.store()?, &scope, &key, &resolution, &cause)
    }

    /// Every record to [reconcile](IdemStore::reconcile), least recently changed first:
    /// `uncertain` records, and `in_progress` records whose lease has ended (under the default
    /// `expired_lease` policy, `uncertain`), each with its scope and key. What an app lists at
    /// start-up to find the keys a killed process left behind.
    ///
    /// # Errors
    /// `IDEMDB_CORRUPT`; storage errors.
    pub fn records_needing_reconciliation(&self) -> Result<Vec<ScopedRecord>> {
        needing_reconciliation(&*self.store()?)
    }

    /// The policy the store applies to `operation`, every field set.
    ///
    /// # Errors
    /// `IDEMDB_CLOSED`.
    pub fn policy(&self, operation: String) -> Result<PolicySettings> {
        Ok(PolicySettings::from_core(self.store()?.policy(&operation)))
    }

    /// What the open did with the store's journal: commits replayed after a crash, commits
    /// given up (only with `discard_lost_journal`), journal files set aside. `None` for a store
    /// in memory.
    ///
    /// # Errors
    /// `IDEMDB_CLOSED`.
    pub fn journal_recovery(&self) -> Result<Option<JournalRecovery>> {
        Ok(self.store()?.journal_recovery().map(JournalRecovery::from_core))
    }

    /// [`IdemStore::renew`] off the caller's thread.
    ///
    /// # Errors
    /// As [`IdemStore::renew`].
    pub async fn renew_async(&self, lease: Lease) -> Result<Lease> {
        self.off_thread(move |store| renew(store, &lease)).await
    }

    /// [`IdemStore::reconcile`] off the caller's thread.
    ///
    /// # Errors
    /// As [`IdemStore::reconcile`].
    #[uniffi::method(default(cause = "application"))]
    pub async fn reconcile_async(
        &self,
        scope: Scope,
        key: String,
        resolution: Resolution,
        cause: String,
    ) -> Result<()> {
        self.off_thread(move |store| reconcile(store, &scope, &key, &resolution, &cause)).await
    }

    /// [`IdemStore::records_needing_reconciliation`] off the caller's thread.
    ///
    /// # Errors
    /// As [`IdemStore::records_needing_reconciliation`].
    pub async fn records_needing_reconciliation_async(&self) -> Result<Vec<ScopedRecord>> {
        self.off_thread(needing_reconciliation).await
    }
}
