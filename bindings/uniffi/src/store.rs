//! The store object: open, close, client intents, and reserve / complete / fail for apps that
//! are their own server.
//!
//! Every call has a blocking form (call it from a background thread: it may wait for an
//! fsync) and an `_async` form (`suspend` in Kotlin, `async` in Swift and Python) that runs the
//! same call on a thread pool and never blocks the caller's thread.

use std::sync::{Arc, RwLock};

use crate::options::StoreOptions;
use crate::types::{AttemptOutcome, Failure, Intent, IntentResponse, Lease, RecordInfo, Reservation, Scope, key};
use crate::{Canonicalizer, IdemdbError};
use idemdb::Reserve;

type Result<T> = std::result::Result<T, IdemdbError>;

/// An idemdb store: one file (or memory, for tests), held by one handle in one process.
///
/// Thread-safe: share one instance between threads and coroutines. A second open of the same
/// file (in this process or another) fails with `IDEMDB_STORE_BUSY`.
#[derive(Debug, uniffi::Object)]
pub struct IdemStore {
    store: RwLock<Option<Arc<idemdb::Store>>>,
}

impl IdemStore {
    fn wrap(store: idemdb::Store) -> Arc<Self> {
        Arc::new(IdemStore { store: RwLock::new(Some(Arc::new(store))) })
    }

    /// The open store, or `IDEMDB_CLOSED`.
    pub(crate) fn store(&self) -> Result<Arc<idemdb::Store>> {
        let guard = self.store.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        guard.clone().ok_or_else(|| IdemdbError::new(idemdb::ErrorCode::Closed, "the store was closed"))
    }

    /// Runs `call` on the blocking pool with the open store.
    pub(crate) async fn off_thread<T: Send + 'static>(
        &self,
        call: impl FnOnce(&idemdb::Store) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let store = self.store()?;
        blocking::unblock(move || call(&store)).await
    }
}

fn open(path: &str, options: &StoreOptions) -> Result<idemdb::Store> {
    check_path(path)?;
    Ok(options.builder()?.open(path)?)
}

/// Refuses a path no file can have before anything is created: an empty path would make the
/// store create its temporary file in the current directory and then fail as if the disk had
/// (transient), on every call.
fn check_path(path: &str) -> Result<()> {
    let refuse =
        |why: &str| Err(IdemdbError::new(idemdb::ErrorCode::InvalidArgument, format!("store path {path:?}: {why}")));
    if path.is_empty() {
        return refuse("empty; give the file's path (under Context.getFilesDir(), Application Support)");
    }
    if path.contains('\0') {
        return refuse("it holds a NUL character");
    }
    Ok(())
}

fn create_intent(
    store: &idemdb::Store,
    scope: &Scope,
    key_text: &str,
    request: &[u8],
    canonicalizer: &Canonicalizer,
) -> Result<Intent> {
    let intent = store.create_intent(&scope.to_core()?, &key(key_text)?, request, canonicalizer.core())?;
    Ok(Intent::from_core(&intent))
}

fn intent(store: &idemdb::Store, scope: &Scope, key_text: &str) -> Result<Option<Intent>> {
    Ok(store.intent(&scope.to_core()?, &key(key_text)?)?.as_ref().map(Intent::from_core))
}

fn pending(store: &idemdb::Store) -> Result<Vec<Intent>> {
    Ok(store.pending_intents()?.iter().map(Intent::from_core).collect())
}

fn record_attempt(store: &idemdb::Store, scope: &Scope, key_text: &str, outcome: AttemptOutcome) -> Result<Intent> {
    let intent = store.record_attempt(&scope.to_core()?, &key(key_text)?, outcome.to_core()?)?;
    Ok(Intent::from_core(&intent))
}

fn record_response(store: &idemdb::Store, scope: &Scope, key_text: &str, response: &IntentResponse) -> Result<Intent> {
    let intent = store.record_response(&scope.to_core()?, &key(key_text)?, response.to_core()?)?;
    Ok(Intent::from_core(&intent))
}

fn abandon(store: &idemdb::Store, scope: &Scope, key_text: &str, reason: &str) -> Result<Intent> {
    let intent = store.abandon_intent(&scope.to_core()?, &key(key_text)?, reason)?;
    Ok(Intent::from_core(&intent))
}

fn mark_needs_attention(
    store: &idemdb::Store,
    scope: &Scope,
    key_text: &str,
    cause: &str,
    response: Option<&IntentResponse>,
) -> Result<Intent> {
    let cause = <idemdb::AttentionCause as idemdb::Named>::parse_name(cause)
        .map_err(|error| IdemdbError::new(idemdb::ErrorCode::UnknownName, format!("attention cause: {error}")))?;
    let response = response.map(IntentResponse::to_core).transpose()?;
    let intent = store.mark_needs_attention(&scope.to_core()?, &key(key_text)?, cause, response)?;
    Ok(Intent::from_core(&intent))
}

fn reopen(store: &idemdb::Store, scope: &Scope, key_text: &str) -> Result<Intent> {
    let intent = store.reopen_intent(&scope.to_core()?, &key(key_text)?)?;
    Ok(Intent::from_core(&intent))
}

fn needing_attention(store: &idemdb::Store) -> Result<Vec<Intent>> {
    Ok(store.intents_needing_attention()?.iter().map(Intent::from_core).collect())
}

fn fingerprint(hex: &str) -> Result<idemdb::Fingerprint> {
    idemdb::Fingerprint::from_hex(hex).ok_or_else(|| {
        IdemdbError::new(
            idemdb::ErrorCode::InvalidArgument,
            "a fingerprint is 64 hex digits (Canonicalizer.fingerprint)",
        )
    })
}

fn reserve(store: &idemdb::Store, scope: &Scope, key_text: &str, fingerprint_hex: &str) -> Result<Reservation> {
    Reservation::from_core(store.reserve(Reserve::new(
        &scope.to_core()?,
        &key(key_text)?,
        &fingerprint(fingerprint_hex)?,
    ))?)
}

fn complete(store: &idemdb::Store, lease: &Lease, result: Vec<u8>) -> Result<()> {
    Ok(store.complete(&lease.to_core()?, result)?)
}

fn fail(store: &idemdb::Store, lease: &Lease, failure: &Failure) -> Result<()> {
    Ok(store.fail(&lease.to_core()?, failure.to_core())?)
}

fn get(store: &idemdb::Store, scope: &Scope, key_text: &str) -> Result<Option<RecordInfo>> {
    Ok(store.get(&scope.to_core()?, &key(key_text)?)?.as_ref().map(RecordInfo::from_core))
}

/// Opens (or creates) the store file at `path` without blocking the caller's thread: the
/// `suspend` / `async` form of [`IdemStore::open`].
///
/// # Errors
/// As [`IdemStore::open`].
#[uniffi::export]
pub async fn open_store_async(path: String) -> Result<Arc<IdemStore>> {
    open_store_with_async(path, StoreOptions::default()).await
}

/// [`IdemStore::open_with`] without blocking the caller's thread.
///
/// # Errors
/// As [`IdemStore::open_with`].
#[uniffi::export]
pub async fn open_store_with_async(path: String, options: StoreOptions) -> Result<Arc<IdemStore>> {
    let store = blocking::unblock(move || open(&path, &options)).await?;
    Ok(IdemStore::wrap(store))
}

#[uniffi::export]
impl IdemStore {
    /// Opens (or creates) the store file at `path`: on Android under
    /// `Context.getFilesDir()`, on iOS and macOS under `Application Support`.
    ///
    /// # Errors
    /// `IDEMDB_INVALID_ARGUMENT` for an empty path; `IDEMDB_STORE_BUSY` when the file is open
    /// elsewhere; `IDEMDB_NOT_A_STORE`, `IDEMDB_FOREIGN`, `IDEMDB_NEWER_FORMAT` for a file that
    /// is not a store this version reads; `IDEMDB_CORRUPT` for a store whose journal of
    /// acknowledged commits is lost (see `StoreOptions.discard_lost_journal`);
    /// `IDEMDB_STORAGE` for I/O errors.
    #[uniffi::constructor]
    pub fn open(path: String) -> Result<Arc<Self>> {
        Self::open_with(path, StoreOptions::default())
    }

    /// [`IdemStore::open`] with policies (per operation, or a default) and the choice to give
    /// up a lost journal.
    ///
    /// # Errors
    /// As [`IdemStore::open`]; `IDEMDB_INVALID_POLICY` (a zero lease, a result limit of zero
    /// or over the core's limit); `IDEMDB_UNKNOWN_NAME` for an `expired_lease` rule the core
    /// does not know.
    #[uniffi::constructor]
    pub fn open_with(path: String, options: StoreOptions) -> Result<Arc<Self>> {
        Ok(Self::wrap(open(&path, &options)?))
    }

    /// A store in memory, for tests: nothing survives the process.
    ///
    /// # Errors
    /// `IDEMDB_STORAGE` (no memory).
    #[uniffi::constructor]
    pub fn in_memory() -> Result<Arc<Self>> {
        Ok(Self::wrap(idemdb::Store::in_memory()?))
    }

    /// Closes the store: later calls fail with `IDEMDB_CLOSED` (`is_closed` still answers).
    /// The file is released when the calls already running have returned; closing twice is a
    /// no-op. Named `close_store` in the bindings (`closeStore()` in Kotlin and Swift), beside
    /// Kotlin's `AutoCloseable.close()`, which this crate's `uniffi-bindgen` makes call it too
    /// (UniFFI's would free the handle, and every later call, `isClosed()` included, would throw
    /// an untyped `IllegalStateException`).
    #[uniffi::method(name = "close_store")]
    pub fn close(&self) {
        let mut guard = self.store.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        guard.take();
    }

    /// Whether [`IdemStore::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.store.read().unwrap_or_else(|poisoned| poisoned.into_inner()).is_none()
    }

    /// The file's path (`None` for a store in memory).
    ///
    /// # Errors
    /// `IDEMDB_CLOSED`.
    pub fn path(&self) -> Result<Option<String>> {
        Ok(self.store()?.path().map(|path| path.display().to_string()))
    }

    /// Creates an intent under `(scope, key)` and stores it durably before returning: call it
    /// **before the first send**. `request` is JSON; the intent keeps its canonical form (per
    /// `canonicalizer`) and fingerprint. Creating the same intent again returns it unchanged.
    ///
    /// # Errors
    /// `IDEMDB_INVALID_REQUEST` for a body that is not canonicalisable JSON; `IDEMDB_KEY_MISMATCH`
    /// when the key names a different request; `IDEMDB_INVALID_KEY`; storage errors.
    pub fn create_intent(
        &self,
        scope: Scope,
        key: String,
        request: Vec<u8>,
        canonicalizer: Arc<Canonicalizer>,
    ) -> Result<Intent> {
        create_intent(&*self.store()?, &scope, &key, &request, &canonicalizer)
    }

    /// One intent, if it exists.
    ///
    /// # Errors
    /// `IDEMDB_INVALID_KEY`; `IDEMDB_CORRUPT`; storage errors.
    pub fn intent(&self, scope: Scope, key: String) -> Result<Option<Intent>> {
        intent(&*self.store()?, &scope, &key)
    }

    /// Every pending intent (in any scope), oldest first: what the app resumes at start-up.
    ///
    /// # Errors
    /// `IDEMDB_CORRUPT`; storage errors.
    pub fn pending_intents(&self) -> Result<Vec<Intent>> {
        pending(&*self.store()?)
    }

    /// Records an attempt of a pending intent; returns the updated intent.
    ///
    /// # Errors
    /// `IDEMDB_NOT_FOUND`; `IDEMDB_INTENT_FINISHED` when it is completed or abandoned.
    pub fn record_attempt(&self, scope: Scope, key: String, outcome: AttemptOutcome) -> Result<Intent> {
        record_attempt(&*self.store()?, &scope, &key, outcome)
    }

    /// Records the final response and finishes the intent (the same response again is a
    /// no-op).
    ///
    /// # Errors
    /// `IDEMDB_NOT_FOUND`; `IDEMDB_INTENT_FINISHED` (abandoned, or another response);
    /// `IDEMDB_TOO_LARGE`; `IDEMDB_INVALID_ARGUMENT` for too many headers.
    pub fn record_response(&self, scope: Scope, key: String, response: IntentResponse) -> Result<Intent> {
        record_response(&*self.store()?, &scope, &key, &response)
    }

    /// Abandons a pending intent with a reason (abandoning again is a no-op).
    ///
    /// # Errors
    /// `IDEMDB_NOT_FOUND`; `IDEMDB_INTENT_FINISHED` when it is completed;
    /// `IDEMDB_INVALID_ARGUMENT` for an empty or too long reason.
    pub fn abandon_intent(&self, scope: Scope, key: String, reason: String) -> Result<Intent> {
        abandon(&*self.store()?, &scope, &key, &reason)
    }

    /// Puts a pending intent in `needs_attention` with `cause` (`needs_reconciliation`,
    /// `expired`, `provider_key_expired`, `unreadable`, `retries_exhausted`) and the last
    /// answer: it is not resumed until [`IdemStore::reopen_intent`] or
    /// [`IdemStore::abandon_intent`].
    ///
    /// # Errors
    /// `IDEMDB_UNKNOWN_NAME` for another cause; `IDEMDB_NOT_FOUND`; `IDEMDB_INTENT_FINISHED`
    /// when it is completed, abandoned or needs attention for another cause; `IDEMDB_TOO_LARGE`.
    pub fn mark_needs_attention(
        &self,
        scope: Scope,
        key: String,
        cause: String,
        response: Option<IntentResponse>,
    ) -> Result<Intent> {
        mark_needs_attention(&*self.store()?, &scope, &key, &cause, response.as_ref())
    }

    /// Makes an intent that needs attention pending again, with a new attempt budget (after a
    /// reconciliation, when sending it again with the same key is right). Reopening a pending
    /// intent is a no-op.
    ///
    /// # Errors
    /// `IDEMDB_NOT_FOUND`; `IDEMDB_INTENT_FINISHED` when it is completed or abandoned.
    pub fn reopen_intent(&self, scope: Scope, key: String) -> Result<Intent> {
        reopen(&*self.store()?, &scope, &key)
    }

    /// Every intent that needs attention, oldest first, each with its cause and last answer.
    ///
    /// # Errors
    /// `IDEMDB_CORRUPT`; storage errors.
    pub fn intents_needing_attention(&self) -> Result<Vec<Intent>> {
        needing_attention(&*self.store()?)
    }

    /// Reserves `(scope, key)` for a request with `fingerprint` (64 hex digits, from
    /// [`Canonicalizer::fingerprint`]), or says why not: a replay, in progress, a mismatch, ...
    ///
    /// # Errors
    /// `IDEMDB_INVALID_KEY`, `IDEMDB_INVALID_ARGUMENT` (a fingerprint that is not 64 hex
    /// digits); storage errors.
    pub fn reserve(&self, scope: Scope, key: String, fingerprint: String) -> Result<Reservation> {
        reserve(&*self.store()?, &scope, &key, &fingerprint)
    }

    /// Stores the lease's result; retries replay it byte for byte.
    ///
    /// # Errors
    /// `IDEMDB_STALE_LEASE`; `IDEMDB_WRONG_STATE`; `IDEMDB_TOO_LARGE`; `IDEMDB_NOT_FOUND`.
    pub fn complete(&self, lease: Lease, result: Vec<u8>) -> Result<()> {
        complete(&*self.store()?, &lease, result)
    }

    /// Records that the lease's attempt failed.
    ///
    /// # Errors
    /// As [`IdemStore::complete`].
    pub fn fail(&self, lease: Lease, failure: Failure) -> Result<()> {
        fail(&*self.store()?, &lease, &failure)
    }

    /// The stored record of `(scope, key)`, if any.
    ///
    /// # Errors
    /// `IDEMDB_INVALID_KEY`; `IDEMDB_CORRUPT`; storage errors.
    pub fn get(&self, scope: Scope, key: String) -> Result<Option<RecordInfo>> {
        get(&*self.store()?, &scope, &key)
    }

    /// [`IdemStore::create_intent`] off the caller's thread.
    ///
    /// # Errors
    /// As [`IdemStore::create_intent`].
    pub async fn create_intent_async(
        &self,
        scope: Scope,
        key: String,
        request: Vec<u8>,
        canonicalizer: Arc<Canonicalizer>,
    ) -> Result<Intent> {
        self.off_thread(move |store| create_intent(store, &scope, &key, &request, &canonicalizer)).await
    }

    /// [`IdemStore::intent`] off the caller's thread.
    ///
    /// # Errors
    /// As [`IdemStore::intent`].
    pub async fn intent_async(&self, scope: Scope, key: String) -> Result<Option<Intent>> {
        self.off_thread(move |store| intent(store, &scope, &key)).await
    }

    /// [`IdemStore::pending_intents`] off the caller's thread.
    ///
    /// # Errors
    /// As [`IdemStore::pending_intents`].
    pub async fn pending_intents_async(&self) -> Result<Vec<Intent>> {
        self.off_thread(pending).await
    }

    /// [`IdemStore::record_attempt`] off the caller's thread.
    ///
    /// # Errors
    /// As [`IdemStore::record_attempt`].
    pub async fn record_attempt_async(&self, scope: Scope, key: String, outcome: AttemptOutcome) -> Result<Intent> {
        self.off_thread(move |store| record_attempt(store, &scope, &key, outcome)).await
    }

    /// [`IdemStore::record_response`] off the caller's thread.
    ///
    /// # Errors
    /// As [`IdemStore::record_response`].
    pub async fn record_response_async(&self, scope: Scope, key: String, response: IntentResponse) -> Result<Intent> {
        self.off_thread(move |store| record_response(store, &scope, &key, &response)).await
    }

    /// [`IdemStore::abandon_intent`] off the caller's thread.
    ///
    /// # Errors
    /// As [`IdemStore::abandon_intent`].
    pub async fn abandon_intent_async(&self, scope: Scope, key: String, reason: String) -> Result<Intent> {
        self.off_thread(move |store| abandon(store, &scope, &key, &reason)).await
    }

    /// [`IdemStore::mark_needs_attention`] off the caller's thread.
    ///
    /// # Errors
    /// As [`IdemStore::mark_needs_attention`].
    pub async fn mark_needs_attention_async(
        &self,
        scope: Scope,
        key: String,
        cause: String,
        response: Option<IntentResponse>,
    ) -> Result<Intent> {
        self.off_thread(move |store| mark_needs_attention(store, &scope, &key, &cause, response.as_ref())).await
    }

    /// [`IdemStore::reopen_intent`] off the caller's thread.
    ///
    /// # Errors
    /// As [`IdemStore::reopen_intent`].
    pub async fn reopen_intent_async(&self, scope: Scope, key: String) -> Result<Intent> {
        self.off_thread(move |store| reopen(store, &scope, &key)).await
    }

    /// [`IdemStore::intents_needing_attention`] off the caller's thread.
    ///
    /// # Errors
    /// As [`IdemStore::intents_needing_attention`].
    pub async fn intents_needing_attention_async(&self) -> Result<Vec<Intent>> {
        self.off_thread(needing_attention).await
    }

    /// [`IdemStore::reserve`] off the caller's thread.
    ///
    /// # Errors
    /// As [`IdemStore::reserve`].
    pub async fn reserve_async(&self, scope: Scope, key: String, fingerprint: String) -> Result<Reservation> {
        self.off_thread(move |store| reserve(store, &scope, &key, &fingerprint)).await
    }

    /// [`IdemStore::complete`] off the caller's thread.
    ///
    /// # Errors
    /// As [`IdemStore::complete`].
    pub async fn complete_async(&self, lease: Lease, result: Vec<u8>) -> Result<()> {
        self.off_thread(move |store| complete(store, &lease, result)).await
    }

    /// [`IdemStore::fail`] off the caller's thread.
    ///
    /// # Errors
    /// As [`IdemStore::fail`].
    pub async fn fail_async(&self, lease: Lease, failure: Failure) -> Result<()> {
        self.off_thread(move |store| fail(store, &lease, &failure)).await
    }

    /// [`IdemStore::get`] off the caller's thread.
    ///
    /// # Errors
    /// As [`IdemStore::get`].
    pub async fn get_async(&self, scope: Scope, key: String) -> Result<Option<RecordInfo>> {
        self.off_thread(move |store| get(store, &scope, &key)).await
    }
}
