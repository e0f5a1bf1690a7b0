//! Client intents in the redb store: the intent rules are the core's
//! ([`idemdb_core::Intent`]); this module reads and writes them in the `idemdb_intents` table,
//! each change in one write transaction.
//!
//! ```
//! use idemdb::{AttemptOutcome, Canonicalizer, IntentResponse, Scope, Store};
//!
//! let store = Store::in_memory()?;
//! let scope = Scope::new("me", "create_payment")?;
//! let canon = Canonicalizer::new().exclude("/trace_id")?;
//! let key = Store::new_key()?;
//! let intent = store.create_intent(&scope, &key, br#"{"amount":"10.50","trace_id":"t1"}"#, &canon)?;
//! assert_eq!(intent.request, br#"{"amount":"10.50"}"#);
//!
//! // The process restarts: what is left to send?
//! let pending = store.pending_intents()?;
//! assert_eq!(pending[0].key, key);
//!
//! store.record_attempt(&scope, &key, AttemptOutcome::NetworkError)?;
//! store.record_response(&scope, &key, IntentResponse { status: 201, headers: vec![], body: b"ok".to_vec() })?;
//! assert!(store.pending_intents()?.is_empty());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::ops::Bound;
use std::time::Duration;

use redb::ReadableTable;

use idemdb_core::{
    AttemptOutcome, AttentionCause, CanonicalError, Canonicalizer, Corrupt, DecodeError, ErrorCode, Fingerprint,
    IdempotencyKey, Intent, IntentRefusal, IntentResponse, IntentStateKind, KeyError, Scope, ScopedKey, Timestamp,
};

use crate::journal::apply::TableId;
use crate::tables::{INTENTS, open_optional};
use crate::{Error, Store};

/// One page of [`Store::intents_page`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct IntentPage {
    /// The intents of the page, in key order.
    pub intents: Vec<Intent>,
    /// The cursor of the next page (the encoded scoped key of the page's last intent), or
    /// `None` when no intent follows.
    pub next: Option<Vec<u8>>,
}

/// What one [`Store::purge_intents`] pass removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct IntentPurge {
    /// Finished intents removed.
    pub removed: u64,
    /// Whether more finished intents are due beyond the budget.
    pub more: bool,
}

/// An intent operation failed; nothing stored was changed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IntentError {
    /// The store failed (storage, corrupt record, invalid key or scope).
    #[error(transparent)]
    Store(#[from] Error),
    /// The request is not canonicalisable JSON (or the canonicaliser is misconfigured).
    #[error("request cannot be canonicalised: {0}")]
    Request(#[from] CanonicalError),
    /// The intent rules refused the change (no such intent, a reused key, a finished intent,
    /// an argument over its limit).
    #[error(transparent)]
    Refused(#[from] IntentRefusal),
}

impl IntentError {
    /// The stable code of this error (see [`ErrorCode`]).
    pub fn code(&self) -> ErrorCode {
        match self {
            IntentError::Store(store) => store.code(),
            IntentError::Request(request) => request.code(),
            IntentError::Refused(refusal) => refusal.code(),
        }
    }
}

idemdb_core::coded!(IntentError);

impl From<KeyError> for IntentError {
    fn from(error: KeyError) -> Self {
        IntentError::Store(error.into())
    }
}

macro_rules! intent_from_storage {
    ($($t:ty),*) => {$(
        impl From<$t> for IntentError {
            fn from(error: $t) -> Self {
                IntentError::Store(Error::from(error))
            }
        }
    )*};
}
intent_from_storage!(redb::StorageError, redb::TableError, redb::TransactionError, redb::CommitError);

fn decode(key: &[u8], value: &[u8]) -> Result<Intent, IntentError> {
    Intent::decode(key, value)
        .map_err(|source: DecodeError| IntentError::Store(Error::Corrupt(Corrupt { what: "intent", source })))
}

impl Store {
    /// Creates an intent under `(scope, key)` and stores it durably (with
    /// [`Durability::Immediate`](crate::Durability::Immediate)) before returning: call it
    /// **before the first send**. `request` is JSON; the intent keeps its canonical form (per
    /// `canonicalizer`) and fingerprint.
    ///
    /// Creating the same intent again (same key, same canonical request) returns the stored
    /// one unchanged, so a crash between create and send is harmless.
    ///
    /// # Errors
    /// [`IntentError::Request`] for a body that is not canonicalisable JSON;
    /// [`IntentRefusal::KeyMismatch`] when the key names a different request; storage errors.
    pub fn create_intent(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        request: &[u8],
        canonicalizer: &Canonicalizer,
    ) -> Result<Intent, IntentError> {
        self.create_one(scope, key, request, canonicalizer, false)
    }

    /// Creates several intents **in one write transaction** (one durable commit, one flush):
    /// all of them are stored, or none. Each behaves as [`Store::create_intent`]; the intents
    /// are returned in the order given.
    ///
    /// # Errors
    /// As [`Store::create_intent`], for the first intent that fails; nothing is stored then.
    pub fn create_intents(
        &self,
        intents: &[(&Scope, &IdempotencyKey, &[u8])],
        canonicalizer: &Canonicalizer,
    ) -> Result<Vec<Intent>, IntentError> {
        self.create_intents_with(intents, canonicalizer, false)
    }

    /// [`Store::create_intent`] for a client about to send the request: when the intent is
    /// pending (new, or stored already and still pending), it also records that an attempt
    /// is being sent (`AttemptOutcome::Sent`, as [`Store::record_attempt`] would) — **in the
    /// same commit**, so creating and sending the first time cost one flush, not two. A client
    /// calls it only when it will send at once (not while offline); the marker means "may
    /// have been sent", as a crash mid-send leaves it.
    ///
    /// # Errors
    /// As [`Store::create_intent`].
    pub fn create_intent_sending(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        request: &[u8],
        canonicalizer: &Canonicalizer,
    ) -> Result<Intent, IntentError> {
        self.create_one(scope, key, request, canonicalizer, true)
    }

    /// One intent through [`Store::create_intents_with`].
    fn create_one(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        request: &[u8],
        canonicalizer: &Canonicalizer,
        sending: bool,
    ) -> Result<Intent, IntentError> {
        let mut created = self.create_intents_with(&[(scope, key, request)], canonicalizer, sending)?;
        created.pop().ok_or(IntentError::Refused(IntentRefusal::NotFound))
    }

    fn create_intents_with(
        &self,
        intents: &[(&Scope, &IdempotencyKey, &[u8])],
        canonicalizer: &Canonicalizer,
        sending: bool,
    ) -> Result<Vec<Intent>, IntentError> {
        let mut prepared = Vec::with_capacity(intents.len());
        for (scope, key, request) in intents {
            let canonical = canonicalizer.canonicalize(request)?;
            let fingerprint = Fingerprint::of_canonical_json(&canonical);
            prepared.push(((*scope).clone(), (*key).clone(), canonical, fingerprint));
        }
        let created = self.write(|txn| {
            let now = txn.now();
            let mut created = Vec::with_capacity(prepared.len());
            for (scope, key, canonical, fingerprint) in prepared {
                let encoded = ScopedKey::encode_parts(&scope, &key);
                let existing = load_intent(txn, &encoded)?;
                let (mut intent, mut write) =
                    Intent::create(existing, Intent::new(scope, key, canonical, fingerprint, now))?;
                if sending
                    && intent.state.kind() == IntentStateKind::Pending
                    && let Some(sent) = intent.record_attempt(AttemptOutcome::Sent, now)?
                {
                    intent = sent;
                    write = true;
                }
                if write {
                    txn.put_logged(TableId::Intents, &encoded, &intent.encode())?;
                }
                created.push(intent);
            }
            Ok::<_, IntentError>(created)
        })?;
        for intent in &created {
            let key_hash = self.key_hash(&intent.scope, &intent.key);
            tracing::debug!(target: "idemdb", event = "intent_created", key_hash = %key_hash, tenant_hash = %self.tenant_hash(intent.scope.tenant()), operation = intent.scope.operation());
        }
        Ok(created)
    }

    /// Reads one intent.
    ///
    /// # Errors
    /// Storage errors; a corrupt stored intent.
    pub fn intent(&self, scope: &Scope, key: &IdempotencyKey) -> Result<Option<Intent>, IntentError> {
        let encoded = ScopedKey::encode_parts(scope, key);
        let read = self.engine.db.begin_read().map_err(Error::from)?;
        let Some(table) = open_optional(&read, INTENTS)? else { return Ok(None) };
        let Some(value) = table.get(encoded.as_slice()).map_err(Error::from)? else { return Ok(None) };
        decode(&encoded, value.value()).map(Some)
    }

    /// Every intent still pending (in any scope), oldest first: what a client resumes at
    /// start-up.
    ///
    /// # Errors
    /// Storage errors; a corrupt stored intent.
    pub fn pending_intents(&self) -> Result<Vec<Intent>, IntentError> {
        let mut pending: Vec<Intent> = self.all_intents()?.into_iter().filter(Intent::is_pending).collect();
        pending.sort_by(|a, b| a.created_at.cmp(&b.created_at).then_with(|| a.key.cmp(&b.key)));
        Ok(pending)
    }

    /// Every intent, in key order.
    ///
    /// # Errors
    /// Storage errors; a corrupt stored intent.
    pub fn all_intents(&self) -> Result<Vec<Intent>, IntentError> {
        let read = self.engine.db.begin_read().map_err(Error::from)?;
        let Some(table) = open_optional(&read, INTENTS)? else { return Ok(Vec::new()) };
        let mut out = Vec::new();
        for entry in table.iter().map_err(Error::from)? {
            let (key, value) = entry.map_err(Error::from)?;
            out.push(decode(key.value(), value.value())?);
        }
        Ok(out)
    }

    /// One page of intents in key order (scope, then key), starting after the cursor `after`
    /// (the `next` of the page before; `None` for the first page), of at most `limit` intents
    /// (at least one), only those in `state` when it is given. The read is one bounded range
    /// of the table: `limit` matching intents and the next match, however many the store holds.
    /// A page is a consistent read; intents created between pages appear in a later page when
    /// their key sorts after the cursor.
    ///
    /// # Errors
    /// Storage errors; a corrupt stored intent.
    pub fn intents_page(
        &self,
        after: Option<&[u8]>,
        limit: usize,
        state: Option<IntentStateKind>,
    ) -> Result<IntentPage, IntentError> {
        let limit = limit.max(1);
        let read = self.engine.db.begin_read().map_err(Error::from)?;
        let Some(table) = open_optional(&read, INTENTS)? else { return Ok(IntentPage::default()) };
        let range = match after {
            Some(cursor) => table.range::<&[u8]>((Bound::Excluded(cursor), Bound::Unbounded)),
            None => table.range::<&[u8]>(..),
        }
        .map_err(Error::from)?;
        let mut page = IntentPage::default();
        for entry in range {
            let (key, value) = entry.map_err(Error::from)?;
            let intent = decode(key.value(), value.value())?;
            if state.is_some_and(|wanted| intent.state.kind() != wanted) {
                continue;
            }
            if page.intents.len() == limit {
                // One more match exists: the page ends at its last intent.
                page.next = Some(ScopedKey::encode_parts(&page.intents[limit - 1].scope, &page.intents[limit - 1].key));
                break;
            }
            page.intents.push(intent);
        }
        Ok(page)
    }

    /// Records an attempt of a pending intent (see [`Intent::record_attempt`]). Returns the
    /// updated intent.
    ///
    /// # Errors
    /// [`IntentRefusal::NotFound`]; [`IntentRefusal::Finished`] when the intent is completed or
    /// abandoned; storage errors.
    pub fn record_attempt(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        outcome: AttemptOutcome,
    ) -> Result<Intent, IntentError> {
        self.update_intent(scope, key, "record an attempt", |intent, now| intent.record_attempt(outcome, now))
    }

    /// Records the final response and finishes the intent (see [`Intent::record_response`]).
    /// Recording the same response again is a no-op.
    ///
    /// # Errors
    /// [`IntentRefusal::NotFound`]; [`IntentRefusal::Finished`] when the intent was abandoned
    /// or holds a different response; [`IntentRefusal::ResponseTooLarge`] for a body over the
    /// operation's `max_result_bytes`, [`IntentRefusal::TooManyHeaders`]; storage errors.
    pub fn record_response(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        response: IntentResponse,
    ) -> Result<Intent, IntentError> {
        let limit = self.policy(scope.operation()).max_result_bytes();
        self.update_intent(scope, key, "record a response", |intent, now| intent.record_response(response, limit, now))
    }

    /// Abandons a pending intent (or one that needs attention) with a reason (kept for the
    /// retention period). Abandoning an
    /// abandoned intent again is a no-op.
    ///
    /// # Errors
    /// [`IntentRefusal::NotFound`]; [`IntentRefusal::Finished`] when it is completed;
    /// [`IntentRefusal::ReasonEmpty`] or [`IntentRefusal::ReasonTooLong`]; storage errors.
    pub fn abandon_intent(&self, scope: &Scope, key: &IdempotencyKey, reason: &str) -> Result<Intent, IntentError> {
        self.update_intent(scope, key, "abandon", |intent, now| intent.abandon(reason, now))
    }

    /// Puts a pending intent in needs-attention with `cause` and the last answer (see
    /// [`Intent::needs_attention`]): it is not resumed until [reopened](Store::reopen_intent) or
    /// [abandoned](Store::abandon_intent).
    ///
    /// # Errors
    /// [`IntentRefusal::NotFound`]; [`IntentRefusal::Finished`] when it is completed,
    /// abandoned or needs attention for another cause; the response limits; storage errors.
    pub fn mark_needs_attention(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        cause: AttentionCause,
        response: Option<IntentResponse>,
    ) -> Result<Intent, IntentError> {
        let limit = self.policy(scope.operation()).max_result_bytes();
        self.update_intent(scope, key, "mark as needing attention", |intent, now| {
            intent.needs_attention(cause, response, limit, now)
        })
    }

    /// Makes an intent that needs attention pending again, with a new attempt budget (see
    /// [`Intent::reopen`]): after a reconciliation, when sending it again with the same key
    /// is right. Reopening a pending intent is a no-op.
    ///
    /// # Errors
    /// [`IntentRefusal::NotFound`]; [`IntentRefusal::Finished`] when it is completed or
    /// abandoned; storage errors.
    pub fn reopen_intent(&self, scope: &Scope, key: &IdempotencyKey) -> Result<Intent, IntentError> {
        self.update_intent(scope, key, "reopen", |intent, now| intent.reopen(now))
    }

    /// Every intent that needs attention, oldest first.
    ///
    /// # Errors
    /// Storage errors; a corrupt stored intent.
    pub fn intents_needing_attention(&self) -> Result<Vec<Intent>, IntentError> {
        let mut found: Vec<Intent> = self
            .all_intents()?
            .into_iter()
            .filter(|intent| intent.state.kind() == IntentStateKind::NeedsAttention)
            .collect();
        found.sort_by(|a, b| a.created_at.cmp(&b.created_at).then_with(|| a.key.cmp(&b.key)));
        Ok(found)
    }

    /// Client-side retention: removes up to `budget` finished (completed or abandoned)
    /// intents that last changed at least `keep_for` ago. Pending intents are never removed.
    ///
    /// # Errors
    /// Storage errors; a corrupt stored intent (nothing is removed).
    pub fn purge_intents(&self, keep_for: Duration, budget: usize) -> Result<IntentPurge, IntentError> {
        self.write(|txn| {
            let now = txn.retention_time();
            let mut due = Vec::new();
            let mut more = false;
            {
                let table = txn.tx_closing_kept_tables().open_table(INTENTS).map_err(Error::from)?;
                for entry in table.iter().map_err(Error::from)? {
                    let (key, value) = entry.map_err(Error::from)?;
                    if decode(key.value(), value.value())?.is_due_for_removal(keep_for, now) {
                        if due.len() == budget {
                            more = true;
                            break;
                        }
                        due.push(key.value().to_vec());
                    }
                }
            }
            for key in &due {
                txn.remove_logged(TableId::Intents, key)?;
            }
            Ok::<_, IntentError>(IntentPurge { removed: due.len() as u64, more })
        })
    }

    /// Reads one intent, applies `change` (one of the core's intent rules) and writes what it
    /// returns, in one write transaction (`None`: nothing to write).
    fn update_intent(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        action: &'static str,
        change: impl FnOnce(&Intent, Timestamp) -> Result<Option<Intent>, IntentRefusal>,
    ) -> Result<Intent, IntentError> {
        let encoded = ScopedKey::encode_parts(scope, key);
        let key_hash = self.engine.key_hash_of(&encoded);
        let intent = self.write(|txn| {
            let now = txn.now();
            let Some(intent) = load_intent(txn, &encoded)? else { return Err(IntentRefusal::NotFound.into()) };
            match change(&intent, now)? {
                Some(next) => {
                    txn.put_logged(TableId::Intents, &encoded, &next.encode())?;
                    Ok::<_, IntentError>(next)
                }
                None => Ok(intent),
            }
        })?;
        tracing::debug!(target: "idemdb", event = "intent_updated", action, key_hash = %key_hash, state = intent.state.name());
        Ok(intent)
    }
}

/// Reads one intent inside a write transaction (seeing the transaction's own writes).
fn load_intent(txn: &crate::Txn<'_>, encoded: &[u8]) -> Result<Option<Intent>, IntentError> {
    let table = txn.tx_closing_kept_tables().open_table(INTENTS).map_err(Error::from)?;
    let Some(value) = table.get(encoded).map_err(Error::from)? else { return Ok(None) };
    decode(encoded, value.value()).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Clock, ManualClock};
    use idemdb_core::{
        Attempt, INTENT_FORMAT, IntentState, IntentStateKind, MAX_ABANDON_REASON_LEN, MAX_RESPONSE_HEADERS,
    };

    fn setup() -> (Store, ManualClock, Scope, Canonicalizer) {
        let clock = ManualClock::new(1_700_000_000_000);
        let store = Store::builder().clock(clock.clone()).in_memory().unwrap();
        let scope = Scope::new("me", "pay").unwrap();
        let canon = Canonicalizer::new().exclude("/trace_id").unwrap();
        (store, clock, scope, canon)
    }

    fn response(status: u16, body: &[u8]) -> IntentResponse {
        IntentResponse {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.to_vec(),
        }
    }

    #[test]
    fn create_sending_stores_the_intent_and_its_first_send_in_one_commit() {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(1_700_000_000_000);
        let store = Store::builder().clock(clock.clone()).open(dir.path().join("s.idemdb")).unwrap();
        let (scope, canon) = (Scope::new("me", "pay").unwrap(), Canonicalizer::new());
        let key = IdempotencyKey::new("k-1").unwrap();
        let appends = |store: &Store| store.journal_stats().expect("a file store journals").appends;
        let before = appends(&store);
        let sent = store.create_intent_sending(&scope, &key, br#"{"a":1}"#, &canon).unwrap();
        assert_eq!(appends(&store) - before, 1, "one commit for the intent and its first send");
        assert_eq!((sent.attempts, sent.last_attempt.map(|a| a.outcome)), (1, Some(AttemptOutcome::Sent)));
        assert_eq!(store.intent(&scope, &key).unwrap(), Some(sent.clone()), "as stored");
        // Its outcome closes that attempt (no second count), as after `record_attempt(Sent)`.
        let answered = store.record_attempt(&scope, &key, AttemptOutcome::Status(503)).unwrap();
        assert_eq!(answered.attempts, 1);
        // Stored already and pending: the next send is marked with it, still one commit.
        let before = appends(&store);
        let again = store.create_intent_sending(&scope, &key, br#"{"a":1}"#, &canon).unwrap();
        assert_eq!((again.attempts, appends(&store) - before), (2, 1));
        // Finished: nothing is marked or written; another request under the key is refused.
        store.record_response(&scope, &key, response(201, b"{}")).unwrap();
        let before = appends(&store);
        let done = store.create_intent_sending(&scope, &key, br#"{"a":1}"#, &canon).unwrap();
        assert_eq!((done.attempts, done.state.kind(), appends(&store) - before), (2, IntentStateKind::Completed, 0));
        let refused = store.create_intent_sending(&scope, &key, br#"{"a":2}"#, &canon).unwrap_err();
        assert!(matches!(refused, IntentError::Refused(IntentRefusal::KeyMismatch)), "{refused:?}");
    }

    #[test]
    fn create_stores_canonical_request_and_fingerprint_and_is_idempotent() {
        let (store, clock, scope, canon) = setup();
        let key = IdempotencyKey::new("k-1").unwrap();
        let first = store.create_intent(&scope, &key, br#"{"b":1,"a":"x","trace_id":"t1"}"#, &canon).unwrap();
        assert_eq!(first.request, br#"{"a":"x","b":1}"#);
        assert_eq!(first.fingerprint, Fingerprint::of_canonical_json(br#"{"a":"x","b":1}"#));
        assert_eq!(first.state, IntentState::Pending);
        assert_eq!(first.created_at.as_millis(), 1_700_000_000_000);
        clock.advance(Duration::from_secs(5));
        // Same request (other transport field): the stored intent comes back unchanged.
        let again = store.create_intent(&scope, &key, br#"{"a":"x","b":1,"trace_id":"t2"}"#, &canon).unwrap();
        assert_eq!(again, first);
        // A different request under the same key is refused and changes nothing.
        let err = store.create_intent(&scope, &key, br#"{"a":"y","b":1}"#, &canon).unwrap_err();
        assert!(matches!(err, IntentError::Refused(IntentRefusal::KeyMismatch)), "{err:?}");
        assert_eq!(store.intent(&scope, &key).unwrap(), Some(first));
    }

    #[test]
    fn a_batch_is_stored_whole_or_not_at_all() {
        let (store, _, scope, canon) = setup();
        let keys: Vec<IdempotencyKey> = (0..3).map(|i| IdempotencyKey::new(format!("b-{i}")).unwrap()).collect();
        let requests: [&[u8]; 3] = [b"{\"n\":0}", b"{\"n\":1}", b"{\"n\":2}"];
        let batch: Vec<(&Scope, &IdempotencyKey, &[u8])> =
            keys.iter().zip(requests).map(|(k, r)| (&scope, k, r)).collect();
        let created = store.create_intents(&batch, &canon).unwrap();
        assert_eq!(created.iter().map(|i| i.key.as_str()).collect::<Vec<_>>(), ["b-0", "b-1", "b-2"]);
        assert_eq!(store.pending_intents().unwrap().len(), 3);
        // A batch with one bad member stores nothing, not even its good members.
        let fresh = IdempotencyKey::new("b-new").unwrap();
        let bad: Vec<(&Scope, &IdempotencyKey, &[u8])> =
            vec![(&scope, &fresh, b"{}"), (&scope, &keys[0], b"{\"n\":9}")];
        assert!(matches!(store.create_intents(&bad, &canon), Err(IntentError::Refused(IntentRefusal::KeyMismatch))));
        assert_eq!(store.intent(&scope, &fresh).unwrap(), None);
        let invalid: Vec<(&Scope, &IdempotencyKey, &[u8])> =
            vec![(&scope, &fresh, b"{}"), (&scope, &keys[1], b"{oops")];
        assert!(matches!(store.create_intents(&invalid, &canon), Err(IntentError::Request(_))));
        assert_eq!(store.all_intents().unwrap().len(), 3);
    }

    #[test]
    fn pages_walk_every_intent_once_in_key_order_with_a_state_filter() {
        let (store, _, scope, canon) = setup();
        let other = Scope::new("zz", "pay").unwrap();
        for i in 0..7 {
            let key = IdempotencyKey::new(format!("p-{i}")).unwrap();
            store.create_intent(if i % 2 == 0 { &scope } else { &other }, &key, b"{}", &canon).unwrap();
        }
        // Two of them finish: the pending filter skips them.
        store.record_response(&scope, &IdempotencyKey::new("p-2").unwrap(), response(201, b"ok")).unwrap();
        store.abandon_intent(&other, &IdempotencyKey::new("p-5").unwrap(), "gone").unwrap();

        let walk = |state: Option<IntentStateKind>, limit: usize| {
            let mut seen = Vec::new();
            let mut pages = 0;
            let mut after: Option<Vec<u8>> = None;
            loop {
                let page = store.intents_page(after.as_deref(), limit, state).unwrap();
                assert!(page.intents.len() <= limit.max(1));
                pages += 1;
                seen.extend(page.intents.iter().map(|i| format!("{}/{}", i.scope.tenant(), i.key.as_str())));
                match page.next {
                    Some(next) => after = Some(next),
                    None => break,
                }
            }
            (seen, pages)
        };
        let all: Vec<String> =
            store.all_intents().unwrap().iter().map(|i| format!("{}/{}", i.scope.tenant(), i.key.as_str())).collect();
        assert_eq!(all.len(), 7);
        assert_eq!(walk(None, 3), (all.clone(), 3));
        assert_eq!(walk(None, 7), (all.clone(), 1));
        assert_eq!(walk(None, 100), (all.clone(), 1));
        // A limit of 0 reads one intent per page.
        assert_eq!(walk(None, 0), (all.clone(), 7));
        let (pending, pages) = walk(Some(IntentStateKind::Pending), 2);
        assert_eq!(pending, ["me/p-0", "me/p-4", "me/p-6", "zz/p-1", "zz/p-3"]);
        assert_eq!(pages, 3);
        assert_eq!(walk(Some(IntentStateKind::NeedsAttention), 5), (Vec::<String>::new(), 1));
        // A cursor past every key: an empty last page.
        let end = store.intents_page(Some(&[0xff; 4]), 5, None).unwrap();
        assert_eq!(end, IntentPage::default());
    }

    #[test]
    fn invalid_json_is_a_typed_error_and_stores_nothing() {
        let (store, _, scope, canon) = setup();
        let key = IdempotencyKey::new("k-1").unwrap();
        let err = store.create_intent(&scope, &key, b"{not json", &canon).unwrap_err();
        assert!(matches!(err, IntentError::Request(CanonicalError::InvalidJson { .. })), "{err:?}");
        assert_eq!(store.intent(&scope, &key).unwrap(), None);
        assert!(store.all_intents().unwrap().is_empty());
    }

    #[test]
    fn attempts_are_counted_and_pending_lists_oldest_first() {
        let (store, clock, scope, canon) = setup();
        let other = Scope::new("me", "refund").unwrap();
        let k1 = IdempotencyKey::new("k-b").unwrap();
        let k2 = IdempotencyKey::new("k-a").unwrap();
        store.create_intent(&scope, &k1, b"{}", &canon).unwrap();
        clock.advance(Duration::from_millis(10));
        store.create_intent(&other, &k2, b"[1]", &canon).unwrap();
        let pending = store.pending_intents().unwrap();
        assert_eq!(pending.iter().map(|i| i.key.as_str()).collect::<Vec<_>>(), ["k-b", "k-a"]);

        store.record_attempt(&scope, &k1, AttemptOutcome::Sent).unwrap();
        store.record_attempt(&scope, &k1, AttemptOutcome::Status(503)).unwrap();
        store.record_attempt(&scope, &k1, AttemptOutcome::Sent).unwrap();
        clock.advance(Duration::from_millis(10));
        let after = store.record_attempt(&scope, &k1, AttemptOutcome::Timeout).unwrap();
        assert_eq!(after.attempts, 2);
        assert_eq!(after.last_attempt, Some(Attempt { at: clock.now(), outcome: AttemptOutcome::Timeout }));
        // Outcomes recorded without a preceding `Sent` count as attempts of their own.
        let after = store.record_attempt(&scope, &k1, AttemptOutcome::NetworkError).unwrap();
        assert_eq!(after.attempts, 3);
        assert!(matches!(
            store.record_attempt(&scope, &IdempotencyKey::new("nope").unwrap(), AttemptOutcome::Sent),
            Err(IntentError::Refused(IntentRefusal::NotFound))
        ));
    }

    #[test]
    fn response_finishes_the_intent_once() {
        let (store, _, scope, canon) = setup();
        let key = IdempotencyKey::new("k-1").unwrap();
        store.create_intent(&scope, &key, b"{}", &canon).unwrap();
        let done = store.record_response(&scope, &key, response(201, b"{\"id\":1}")).unwrap();
        assert_eq!(done.state, IntentState::Completed { response: response(201, b"{\"id\":1}") });
        assert!(store.pending_intents().unwrap().is_empty());
        // The same response again is a no-op; a different one is refused.
        assert_eq!(store.record_response(&scope, &key, response(201, b"{\"id\":1}")).unwrap(), done);
        assert!(matches!(
            store.record_response(&scope, &key, response(500, b"")),
            Err(IntentError::Refused(IntentRefusal::Finished { state: IntentStateKind::Completed, .. }))
        ));
        assert!(matches!(
            store.record_attempt(&scope, &key, AttemptOutcome::Sent),
            Err(IntentError::Refused(IntentRefusal::Finished { state: IntentStateKind::Completed, .. }))
        ));
        assert!(matches!(
            store.abandon_intent(&scope, &key, "bored"),
            Err(IntentError::Refused(IntentRefusal::Finished { .. }))
        ));
        assert_eq!(store.intent(&scope, &key).unwrap(), Some(done));
    }

    #[test]
    fn abandon_records_the_reason_and_validates_it() {
        let (store, _, scope, canon) = setup();
        let key = IdempotencyKey::new("k-1").unwrap();
        store.create_intent(&scope, &key, b"{}", &canon).unwrap();
        assert!(matches!(
            store.abandon_intent(&scope, &key, ""),
            Err(IntentError::Refused(IntentRefusal::ReasonEmpty))
        ));
        let long = "x".repeat(MAX_ABANDON_REASON_LEN + 1);
        assert!(matches!(
            store.abandon_intent(&scope, &key, &long),
            Err(IntentError::Refused(IntentRefusal::ReasonTooLong { .. }))
        ));
        let abandoned = store.abandon_intent(&scope, &key, "user cancelled").unwrap();
        assert_eq!(abandoned.state, IntentState::Abandoned { reason: "user cancelled".into() });
        assert_eq!(store.abandon_intent(&scope, &key, "again").unwrap(), abandoned);
        assert!(matches!(
            store.record_response(&scope, &key, response(200, b"")),
            Err(IntentError::Refused(IntentRefusal::Finished { .. }))
        ));
        assert!(store.pending_intents().unwrap().is_empty());
    }

    #[test]
    fn oversized_responses_are_refused() {
        let (store, _, scope, canon) = setup();
        let key = IdempotencyKey::new("k-1").unwrap();
        store.create_intent(&scope, &key, b"{}", &canon).unwrap();
        let limit = store.policy("pay").max_result_bytes();
        let big = IntentResponse { status: 200, headers: vec![], body: vec![0; limit + 1] };
        assert!(matches!(
            store.record_response(&scope, &key, big),
            Err(IntentError::Refused(IntentRefusal::ResponseTooLarge { .. }))
        ));
        let many = IntentResponse {
            status: 200,
            headers: vec![("a".into(), "b".into()); MAX_RESPONSE_HEADERS + 1],
            body: vec![],
        };
        assert!(matches!(
            store.record_response(&scope, &key, many),
            Err(IntentError::Refused(IntentRefusal::TooManyHeaders { .. }))
        ));
        assert_eq!(store.pending_intents().unwrap().len(), 1);
    }

    #[test]
    fn needing_attention_is_not_resumed_nor_purged_and_is_finished_by_reopen_or_abandon() {
        let (store, clock, scope, canon) = setup();
        let (a, b) = (IdempotencyKey::new("a").unwrap(), IdempotencyKey::new("b").unwrap());
        store.create_intent(&scope, &a, b"{}", &canon).unwrap();
        store.create_intent(&scope, &b, b"{}", &canon).unwrap();
        store.record_attempt(&scope, &a, AttemptOutcome::Sent).unwrap();
        let cause = AttentionCause::NeedsReconciliation;
        let parked = store.mark_needs_attention(&scope, &a, cause, Some(response(409, b"problem"))).unwrap();
        assert_eq!(parked.state, IntentState::NeedsAttention { cause, response: Some(response(409, b"problem")) });
        store.mark_needs_attention(&scope, &b, AttentionCause::RetriesExhausted, None).unwrap();
        assert!(store.pending_intents().unwrap().is_empty(), "needs-attention intents are not resumed");
        let waiting: Vec<_> = store.intents_needing_attention().unwrap().into_iter().map(|i| i.key).collect();
        assert_eq!(waiting, [a.clone(), b.clone()]);
        clock.advance(Duration::from_secs(365 * 24 * 3600));
        assert_eq!(store.purge_intents(Duration::ZERO, 10).unwrap().removed, 0, "kept until a person acts");
        let reopened = store.reopen_intent(&scope, &a).unwrap();
        assert_eq!(
            (reopened.state.kind(), reopened.attempts, reopened.budget_used()),
            (IntentStateKind::Pending, 1, 0)
        );
        assert_eq!(store.pending_intents().unwrap().len(), 1);
        store.abandon_intent(&scope, &b, "refunded by hand").unwrap();
        assert!(store.intents_needing_attention().unwrap().is_empty());
        let finished = store.reopen_intent(&scope, &b).unwrap_err();
        assert_eq!(finished.code(), ErrorCode::IntentFinished);
    }

    #[test]
    fn retention_removes_only_finished_intents_after_keep_for() {
        let (store, clock, scope, canon) = setup();
        let keys: Vec<IdempotencyKey> = (0..4).map(|i| IdempotencyKey::new(format!("k-{i}")).unwrap()).collect();
        for key in &keys {
            store.create_intent(&scope, key, b"{}", &canon).unwrap();
        }
        store.record_response(&scope, &keys[0], response(200, b"")).unwrap();
        store.abandon_intent(&scope, &keys[1], "gave up").unwrap();
        store.record_response(&scope, &keys[2], response(200, b"")).unwrap();
        let keep = Duration::from_secs(3600);
        clock.advance(keep - Duration::from_millis(1));
        assert_eq!(store.purge_intents(keep, 10).unwrap(), IntentPurge { removed: 0, more: false });
        clock.advance(Duration::from_millis(1));
        assert_eq!(store.purge_intents(keep, 1).unwrap(), IntentPurge { removed: 1, more: true });
        assert_eq!(store.purge_intents(keep, 10).unwrap(), IntentPurge { removed: 2, more: false });
        clock.advance(Duration::from_secs(365 * 24 * 3600));
        assert_eq!(store.purge_intents(keep, 10).unwrap().removed, 0);
        let left = store.all_intents().unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].key, keys[3]);
        assert_eq!(left[0].state, IntentState::Pending);
    }

    #[test]
    fn intents_survive_reopening_a_file_store() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("client.idemdb");
        let scope = Scope::new("me", "pay").unwrap();
        let key = Store::new_key().unwrap();
        {
            let store = Store::open(&path).unwrap();
            store.create_intent(&scope, &key, br#"{"amount":"1"}"#, &Canonicalizer::new()).unwrap();
            store.record_attempt(&scope, &key, AttemptOutcome::Sent).unwrap();
        }
        let store = Store::open(&path).unwrap();
        let pending = store.pending_intents().unwrap();
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].key, key);
        assert_eq!(pending[0].attempts, 1);
        assert_eq!(pending[0].request, br#"{"amount":"1"}"#);
    }

    /// A store written before format 2: its pending intent reads, resumes and is rewritten.
    #[test]
    fn a_format_1_intent_in_an_old_store_reads_and_resumes() {
        let (store, _, scope, _) = setup();
        let key = IdempotencyKey::new("old").unwrap();
        let encoded = ScopedKey::new(scope.clone(), key.clone()).encode();
        let mut v1 = vec![1u8, 2, b'{', b'}'];
        v1.extend([0xab; 32]);
        v1.extend([0, 3, 0, 10, 10]); // Pending, 3 attempts, no last attempt, created 10, updated 10
        let tx = store.engine.db.writable().unwrap().begin_write().unwrap();
        tx.open_table(INTENTS).unwrap().insert(encoded.as_slice(), v1.as_slice()).unwrap();
        tx.commit().unwrap();
        let old = store.intent(&scope, &key).unwrap().unwrap();
        assert_eq!((old.state.kind(), old.attempts, old.budget_start), (IntentStateKind::Pending, 3, 0));
        assert_eq!(store.pending_intents().unwrap(), [old]);
        let sent = store.record_attempt(&scope, &key, AttemptOutcome::Sent).unwrap();
        assert_eq!(sent.attempts, 4);
        assert_eq!(store.intent(&scope, &key).unwrap(), Some(sent));
    }

    #[test]
    fn corrupt_and_newer_values_are_typed_errors() {
        let (store, _, scope, canon) = setup();
        let key = IdempotencyKey::new("k-1").unwrap();
        store.create_intent(&scope, &key, b"{}", &canon).unwrap();
        let encoded = ScopedKey::new(scope.clone(), key.clone()).encode();
        for value in [vec![INTENT_FORMAT + 1, 0], vec![INTENT_FORMAT, 0xff, 0xff], vec![]] {
            let tx = store.engine.db.writable().unwrap().begin_write().unwrap();
            tx.open_table(INTENTS).unwrap().insert(encoded.as_slice(), value.as_slice()).unwrap();
            tx.commit().unwrap();
            let err = store.intent(&scope, &key).unwrap_err();
            assert!(matches!(err, IntentError::Store(Error::Corrupt(Corrupt { what: "intent", .. }))), "{err:?}");
            assert!(matches!(store.pending_intents(), Err(IntentError::Store(Error::Corrupt(_)))));
        }
    }
}
