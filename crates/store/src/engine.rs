//! The state of an open store, shared by every `Store` handle: the redb database, the
//! settings, the clock high-water mark, the fence floor and the audit buffer, with the
//! low-level helpers transactions use. It knows nothing of transactions (`txn.rs` builds them
//! on top of it), of group commit (`group.rs`) or of the public handle (`store.rs`).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use redb::{Database, ReadableTable, WriteTransaction};

use idemdb_core::{
    AuditBatch, AuditEvent, AuditKind, Corrupt, DecisionTime, Fingerprint, Policies, Policy, Record, Scope, Timestamp,
    decode_record,
};

use crate::audit::EncodedEvent;
use crate::clock::ClockGuard;
use crate::db::Db;
use crate::durability::Durability;
use crate::journal::commit::OpenJournal;
use crate::journal::recovery::JournalSetup;
use crate::journal::report::JournalRecovery;
use crate::meta::{Initialiser, Meta};
use crate::snapshot::Snapshots;
use crate::tables::AUDIT;
use crate::{Clock, Error, KeyHash, OpenError};

/// Settings fixed when the store is opened.
pub(crate) struct Config {
    pub(crate) policies: Policies,
    pub(crate) durability: Durability,
    pub(crate) audit: bool,
    pub(crate) audit_retention: Duration,
    pub(crate) trust_clock_at_open: bool,
    /// The application tables whose writes are journaled ([`Txn::table`](crate::Txn::table)).
    pub(crate) apps: crate::app_table::AppTables,
}

/// An open store's state.
pub(crate) struct Engine {
    /// Declared before `db`: the cached read snapshot is dropped before the database.
    pub(crate) snapshots: Snapshots,
    pub(crate) db: Db,
    pub(crate) path: Option<PathBuf>,
    pub(crate) config: Config,
    /// Store time and retention time (see `clock.rs`).
    pub(crate) clock: ClockGuard,
    pub(crate) secret: [u8; 32],
    audit_sequence: AtomicU64,
    /// The highest fence of any record purge removed (persisted as meta `fence_floor`).
    fence_floor: AtomicU64,
    /// Audit events not yet written: they go out in batches with a later commit.
    buffered_audit: Mutex<Vec<EncodedEvent>>,
    /// Answers' events dropped because [`AuditBatch::MAX_WAITING`] were already waiting.
    dropped_audit: AtomicU64,
    /// The write-ahead journal, when commits use one (see `journal/commit.rs`); read through
    /// [`Engine::open_journal`].
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    open_journal: Option<OpenJournal>,
    /// What the open did with the journal (`None`: an open without one).
    pub(crate) recovery: Option<JournalRecovery>,
    /// The holder lock of a file store (`<store>.lock`, see `lockfile.rs`). Declared last: it
    /// is released after the database and the journal are closed.
    pub(crate) holder: Option<crate::lockfile::HolderLock>,
}

impl Engine {
    pub(crate) fn from_parts(
        db: Db,
        path: Option<PathBuf>,
        config: Config,
        clock: Arc<dyn Clock>,
        init: Initialiser,
        journal: Option<JournalSetup>,
    ) -> Result<Engine, OpenError> {
        let mut meta = init.run(&db)?;
        let mut wal = None;
        let mut recovery = None;
        if let (Db::Writable(database), Some(setup)) = (&db, journal) {
            // Replayed before anything is read from the tables: the journal may hold newer
            // clock, fence floor and audit entries.
            let (opened, report) = recover_journal(database, setup, clock.now().as_millis())?;
            wal = opened;
            recovery = Some(report);
            meta = init.run(&db)?;
        }
        let Meta { secret, clock: clock_state, fence_floor } = meta;
        let trust_clock_at_open = config.trust_clock_at_open;
        let next_sequence = {
            let read = db.begin_read()?;
            let audit = read.open_table(AUDIT)?;
            let last = audit.last()?.map(|(key, _)| key.value());
            last.map(|key| {
                let mut sequence = [0u8; 8];
                sequence.copy_from_slice(&key[8..]);
                u64::from_be_bytes(sequence).saturating_add(1)
            })
            .unwrap_or(0)
        };
        Ok(Engine {
            snapshots: Snapshots::default(),
            db,
            path,
            config,
            clock: ClockGuard::new(clock, clock_state, trust_clock_at_open),
            secret,
            audit_sequence: AtomicU64::new(next_sequence),
            fence_floor: AtomicU64::new(fence_floor),
            buffered_audit: Mutex::new(Vec::new()),
            dropped_audit: AtomicU64::new(0),
            open_journal: wal,
            recovery,
            holder: None,
        })
    }

    /// The engine of a file store, holding the store's holder lock until it is dropped.
    pub(crate) fn holding(mut self, holder: crate::lockfile::HolderLock) -> Engine {
        self.holder = Some(holder);
        self
    }

    /// The policy that applies to `operation`.
    pub(crate) fn policy(&self, operation: &str) -> &Policy {
        self.config.policies.get(operation)
    }

    /// Store time and retention time read together (see
    /// [`Store::decision_time`](crate::Store::decision_time)), outside a write transaction. A
    /// reading may put a wall-clock jump right (pending gaps cancelled); this read never writes
    /// that down: [`Engine::clock_unsaved`] says it is to be written, and the store writes it
    /// before the answer that saw it, off an async runtime's threads
    /// ([`Store::save_clock_if_put_right`](crate::Store)).
    pub(crate) fn decision_time(&self) -> DecisionTime {
        self.clock.read()
    }

    /// Whether a reading cancelled wall-clock gaps that no commit has written yet (never on a
    /// read-only store, which writes nothing).
    pub(crate) fn clock_unsaved(&self) -> bool {
        !self.is_read_only() && self.clock.cancelled()
    }

    /// The write-ahead journal, when commits use one. Always `None` in the WebAssembly build,
    /// whose backends commit durably (`docs/design.md`, "The journal"): the constant lets the
    /// compiler leave the journal's code out of the `.wasm`.
    #[inline]
    pub(crate) fn open_journal(&self) -> Option<&OpenJournal> {
        #[cfg(target_arch = "wasm32")]
        return None;
        #[cfg(not(target_arch = "wasm32"))]
        self.open_journal.as_ref()
    }

    /// Whether the store was opened read-only.
    pub(crate) fn is_read_only(&self) -> bool {
        self.db.is_read_only()
    }

    pub(crate) fn key_hash_of(&self, scoped: &[u8]) -> KeyHash {
        KeyHash::compute(&self.secret, scoped)
    }

    pub(crate) fn tenant_hash(&self, tenant: &str) -> KeyHash {
        KeyHash::tenant(&self.secret, tenant)
    }

    pub(crate) fn fence_floor(&self) -> u64 {
        self.fence_floor.load(Ordering::SeqCst)
    }

    /// Raises the fence floor before a removal commits (raising it early is harmless);
    /// returns the floor to write as meta `fence_floor`.
    pub(crate) fn raise_fence_floor(&self, fence: u64) -> u64 {
        self.fence_floor.fetch_max(fence, Ordering::SeqCst).max(fence)
    }

    pub(crate) fn next_audit_sequence(&self) -> u64 {
        self.audit_sequence.fetch_add(1, Ordering::SeqCst)
    }

    pub(crate) fn begin_write(&self) -> Result<WriteTransaction, Error> {
        if self.open_journal().is_some_and(OpenJournal::failed) {
            return Err(Error::JournalFailed);
        }
        let mut tx = self.db.writable()?.begin_write()?;
        tx.set_durability(match self.config.durability {
            // The journal makes a commit durable; redb flushes only at checkpoints.
            Durability::Immediate if self.open_journal().is_some() => redb::Durability::None,
            Durability::Immediate => redb::Durability::Immediate,
            Durability::Eventual => redb::Durability::None,
        })?;
        Ok(tx)
    }

    /// Whether closing the store has anything to write: buffered audit events, or a clock
    /// state beyond the persisted one.
    pub(crate) fn has_unwritten_state(&self) -> bool {
        self.clock.read();
        !self.audit_buffer().is_empty() || self.clock.changed()
    }

    /// Reads a record by its encoded `(scope, key)` from the shared read snapshot.
    pub(crate) fn get_encoded(&self, scoped: &[u8]) -> Result<Option<Record>, Error> {
        let snapshot = self.snapshots.records(&self.db)?;
        let Some(value) = snapshot.records.get(scoped)? else { return Ok(None) };
        decode_record(value.value()).map(Some).map_err(|source| Error::Corrupt(Corrupt { what: "record", source }))
    }

    /// Builds an audit event (when the audit table is on) and emits its `tracing` event.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn audit_event(
        &self,
        at: Timestamp,
        kind: AuditKind,
        scope: &Scope,
        encoded: &[u8],
        fence: u64,
        fingerprint: Option<&Fingerprint>,
        correlation: Option<&str>,
    ) -> Option<EncodedEvent> {
        // With the audit trail off and nobody listening, there is nothing to hash.
        if !self.config.audit && !tracing::enabled!(target: "idemdb", tracing::Level::DEBUG) {
            return None;
        }
        let key_hash = self.key_hash_of(encoded);
        tracing::debug!(
            target: "idemdb",
            event = kind.as_str(),
            key_hash = %key_hash,
            tenant_hash = %self.tenant_hash(scope.tenant()),
            operation = scope.operation(),
            fence,
            correlation = correlation.unwrap_or(""),
        );
        self.config.audit.then(|| {
            EncodedEvent::new(
                at,
                kind,
                scope.tenant(),
                scope.operation(),
                key_hash,
                fence,
                fingerprint.map(Fingerprint::prefix),
                correlation,
            )
        })
    }

    fn audit_buffer(&self) -> MutexGuard<'_, Vec<EncodedEvent>> {
        // Only pushes, appends and takes happen under this lock: a panic cannot leave it
        // inconsistent.
        self.buffered_audit.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps an answer's audit event for a later commit; returns what now waits (`None` on a
    /// read-only store, which writes no audit trail; its answers still emit `tracing` events).
    /// The caller tells the store's [`AuditFlusher`](crate::audit_flush::AuditFlusher).
    pub(crate) fn buffer_audit(&self, event: EncodedEvent) -> Option<crate::audit::Waiting> {
        if self.is_read_only() {
            return None;
        }
        let mut buffer = self.audit_buffer();
        if buffer.len() >= AuditBatch::MAX_WAITING {
            drop(buffer);
            self.drop_audit_events(1);
            // Nothing new waits: the writer already retries what does.
            return Some(crate::audit::Waiting { first: false, full: false });
        }
        buffer.push(event);
        let waiting = buffer.len();
        drop(buffer);
        Some(crate::audit::Waiting { first: waiting == 1, full: AuditBatch::wait_ms(waiting, 0) == Some(0) })
    }

    /// Answers' events dropped since the store opened because too many waited
    /// ([`AuditBatch::MAX_WAITING`]).
    pub(crate) fn audit_events_dropped(&self) -> u64 {
        self.dropped_audit.load(Ordering::Relaxed)
    }

    /// How many audit events wait for a commit.
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    pub(crate) fn audit_waiting(&self) -> usize {
        self.audit_buffer().len()
    }

    /// Puts back events a failed commit carried (they are older than any buffered meanwhile,
    /// so they go first); beyond [`AuditBatch::MAX_WAITING`] the newest are dropped and counted.
    pub(crate) fn buffer_audit_events(&self, mut events: Vec<EncodedEvent>) {
        if events.is_empty() {
            return;
        }
        let mut buffer = self.audit_buffer();
        events.append(&mut buffer);
        let dropped = events.len().saturating_sub(AuditBatch::MAX_WAITING);
        events.truncate(AuditBatch::MAX_WAITING);
        *buffer = events;
        drop(buffer);
        if dropped > 0 {
            self.drop_audit_events(u64::try_from(dropped).unwrap_or(u64::MAX));
        }
    }

    /// Counts answers' events that found the buffer full; the first drop is logged.
    fn drop_audit_events(&self, dropped: u64) {
        if self.dropped_audit.fetch_add(dropped, Ordering::Relaxed) == 0 {
            tracing::warn!(
                waiting = AuditBatch::MAX_WAITING,
                "audit events cannot be written (the storage keeps failing): later answers' events are dropped and counted"
            );
        }
    }

    /// The events not yet written, decoded.
    pub(crate) fn buffered_audit_events(&self) -> Result<Vec<AuditEvent>, Error> {
        self.audit_buffer()
            .iter()
            .map(|event| {
                event.decode().map_err(|source| Error::Corrupt(Corrupt { what: "buffered audit event", source }))
            })
            .collect()
    }

    pub(crate) fn take_buffered_audit(&self) -> Vec<EncodedEvent> {
        std::mem::take(&mut *self.audit_buffer())
    }
}

/// Replays and opens the journal of `setup` (see `journal/commit.rs`).
#[cfg(not(target_arch = "wasm32"))]
fn recover_journal(
    db: &Database,
    setup: JournalSetup,
    now: u64,
) -> Result<(Option<OpenJournal>, JournalRecovery), OpenError> {
    crate::journal::recovery::recover(db, setup, now)
}

/// The WebAssembly build keeps no journal: its backends commit durably.
#[cfg(target_arch = "wasm32")]
fn recover_journal(
    _db: &Database,
    setup: JournalSetup,
    _now: u64,
) -> Result<(Option<OpenJournal>, JournalRecovery), OpenError> {
    drop(setup);
    Err(OpenError::Journal {
        path: std::path::PathBuf::new(),
        reason: "the WebAssembly build of idemdb keeps no journal (its backends commit durably)".into(),
    })
}
