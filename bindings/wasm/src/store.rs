//! `WasmStore`: the engine's store, opened on a JS-visible backend.

use std::time::Duration;

use idemdb::{
    AttentionCause, Clock, Durability, ErrorCode, Failure, FailureKind, Fingerprint, IdempotencyKey, IntentResponse,
    IntentStateKind, Lease, Resolution, ResolutionCause, ResolutionKind, Scope, Store, StoreBuilder, Timestamp,
};
use js_sys::Array;
use wasm_bindgen::prelude::*;
use web_sys::FileSystemSyncAccessHandle;

use crate::backend::{Memory, Shared};
use crate::convert::{self, Obj, coded, from_intent, from_store, get, invalid, js_error};
use crate::js_backend::{HostStorage, JsBackend};
use crate::random;
use idemdb::Reserve;

/// Default redb page cache in the browser: small, the stores are small.
const DEFAULT_CACHE_BYTES: usize = 16 * 1024 * 1024;

/// The host's wall clock, `Date.now()`.
#[derive(Debug, Clone, Copy)]
struct JsClock;

impl Clock for JsClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_millis(js_sys::Date::now().max(0.0) as u64)
    }
}

/// A lease held by the caller (opaque to JS: only the store that issued it can use it).
#[wasm_bindgen]
#[derive(Debug, Clone)]
pub struct WasmLease(Lease);

#[wasm_bindgen]
impl WasmLease {
    /// The tenant.
    #[wasm_bindgen(getter)]
    pub fn tenant(&self) -> String {
        self.0.scope().tenant().to_string()
    }
    /// The operation.
    #[wasm_bindgen(getter)]
    pub fn operation(&self) -> String {
        self.0.scope().operation().to_string()
    }
    /// The idempotency key.
    #[wasm_bindgen(getter)]
    pub fn key(&self) -> String {
        self.0.key().as_str().to_string()
    }
    /// The fence number.
    #[wasm_bindgen(getter)]
    pub fn fence(&self) -> u64 {
        self.0.fence()
    }
    /// When the lease expires (ms since the epoch).
    #[wasm_bindgen(getter, js_name = expiresAt)]
    pub fn expires_at(&self) -> f64 {
        self.0.expires_at().as_millis() as f64
    }
    /// Which attempt this is (1 for the first).
    #[wasm_bindgen(getter)]
    pub fn attempt(&self) -> u32 {
        self.0.attempt()
    }
}

/// An open store.
#[wasm_bindgen]
#[derive(Debug)]
pub struct WasmStore {
    store: Option<Store>,
    backend: Shared,
}

fn scope(tenant: &str, operation: &str) -> Result<Scope, JsValue> {
    Scope::new(tenant, operation).map_err(coded)
}

fn key(key: &str) -> Result<IdempotencyKey, JsValue> {
    IdempotencyKey::new(key).map_err(coded)
}

fn builder(options: &JsValue) -> Result<StoreBuilder, JsValue> {
    let mut builder = Store::builder().clock(JsClock).secret_seed(random::seed()?).cache_bytes(DEFAULT_CACHE_BYTES);
    if let Some(durability) = get(options, "durability") {
        builder = builder.durability(convert::name::<Durability>(&durability, "durability")?);
    }
    if let Some(bytes) = get(options, "cacheBytes").and_then(|v| v.as_f64()) {
        builder = builder.cache_bytes(bytes as usize);
    }
    if let Some(audit) = get(options, "audit") {
        builder = builder.audit(audit.is_truthy());
    }
    if let Some(policy) = get(options, "defaultPolicy") {
        builder = builder.default_policy(convert::policy(&policy)?);
    }
    if let Some(policies) = get(options, "policies") {
        let policies: js_sys::Object = policies.dyn_into().map_err(|_| invalid("policies must be an object"))?;
        for entry in js_sys::Object::entries(&policies).iter() {
            let entry = Array::from(&entry);
            let operation = entry.get(0).as_string().unwrap_or_default();
            builder = builder.policy(operation, convert::policy(&entry.get(1))?);
        }
    }
    Ok(builder)
}

impl WasmStore {
    fn open(backend: Shared, options: &JsValue) -> Result<WasmStore, JsValue> {
        let store = builder(options)?.open_backend(backend.clone()).map_err(coded)?;
        Ok(WasmStore { store: Some(store), backend })
    }

    fn store(&self) -> Result<&Store, JsValue> {
        self.store.as_ref().ok_or_else(|| js_error(ErrorCode::Closed, "the store is closed"))
    }
}

#[wasm_bindgen]
impl WasmStore {
    /// Opens a store in memory, empty or from snapshot bytes.
    #[wasm_bindgen(js_name = openMemory)]
    pub fn open_memory(
        snapshot: Option<Vec<u8>>,
        #[wasm_bindgen(unchecked_param_type = "StoreOptions | null")] options: JsValue,
    ) -> Result<WasmStore, JsValue> {
        WasmStore::open(Shared::new(Memory::from_bytes(snapshot.unwrap_or_default())), &options)
    }

    /// Opens a store in an OPFS file through its sync access handle (dedicated workers only).
    /// Every commit ends with one `handle.flush()`.
    #[wasm_bindgen(js_name = openOpfs)]
    pub fn open_opfs(
        #[wasm_bindgen(unchecked_param_type = "SyncAccessHandle")] handle: FileSystemSyncAccessHandle,
        #[wasm_bindgen(unchecked_param_type = "StoreOptions | null")] options: JsValue,
    ) -> Result<WasmStore, JsValue> {
        WasmStore::open(Shared::new(JsBackend::Opfs(handle)), &options)
    }

    /// Opens a store on host callbacks (`read`, `write`, `size`, `truncate`, `flush`).
    #[wasm_bindgen(js_name = openHost)]
    pub fn open_host(
        host: HostStorage,
        #[wasm_bindgen(unchecked_param_type = "StoreOptions | null")] options: JsValue,
    ) -> Result<WasmStore, JsValue> {
        WasmStore::open(Shared::new(JsBackend::Host(host)), &options)
    }

    /// Closes the store; later calls throw `IDEMDB_CLOSED`. Closing twice is a no-op.
    pub fn close(&mut self) {
        self.store = None;
    }

    /// Whether the store is open.
    #[wasm_bindgen(getter, js_name = isOpen)]
    pub fn is_open(&self) -> bool {
        self.store.is_some()
    }

    /// Flushes, then returns every byte of the store: a file that the Rust crate, the CLI or
    /// `openMemory(snapshot)` opens.
    #[wasm_bindgen(js_name = exportSnapshot)]
    pub fn export_snapshot(&self) -> Result<Vec<u8>, JsValue> {
        self.store()?.flush().map_err(from_store)?;
        self.backend.read_all().map_err(|error| js_error(ErrorCode::Storage, error))
    }

    /// Makes every earlier commit durable (needed with `durability: 'eventual'`).
    pub fn flush(&self) -> Result<(), JsValue> {
        self.store()?.flush().map_err(from_store)
    }

    /// Reserves `(tenant, operation, key)` for a request with the given fingerprint (hex).
    #[wasm_bindgen(unchecked_return_type = "RawReservation")]
    pub fn reserve(&self, tenant: &str, operation: &str, key_str: &str, fingerprint: &str) -> Result<JsValue, JsValue> {
        let fingerprint = parse_fingerprint(fingerprint)?;
        let reservation = self
            .store()?
            .reserve(Reserve::new(&scope(tenant, operation)?, &key(key_str)?, &fingerprint))
            .map_err(from_store)?;
        Ok(convert::reservation(reservation, |lease| WasmLease(lease).into()))
    }

    /// Stores the result of the lease's attempt.
    pub fn complete(&self, lease: &WasmLease, body: &[u8]) -> Result<(), JsValue> {
        self.store()?.complete(&lease.0, body.to_vec()).map_err(from_store)
    }

    /// Records a failed attempt: `definitive` (with a body, replayed), `retryable` (released)
    /// or `uncertain` (reconcile before any new effect).
    pub fn fail(
        &self,
        lease: &WasmLease,
        #[wasm_bindgen(unchecked_param_type = "'definitive' | 'retryable' | 'uncertain'")] kind: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(), JsValue> {
        let failure =
            Failure::of_kind(convert::parse_name::<FailureKind>(kind, "failure kind")?, body.unwrap_or_default());
        self.store()?.fail(&lease.0, failure).map_err(from_store)
    }

    /// Extends the lease.
    pub fn renew(&self, lease: &WasmLease) -> Result<WasmLease, JsValue> {
        self.store()?.renew(&lease.0).map(WasmLease).map_err(from_store)
    }

    /// Resolves an uncertain record: `completed` / `failed` (with a body) or `released`.
    pub fn reconcile(
        &self,
        tenant: &str,
        operation: &str,
        key_str: &str,
        #[wasm_bindgen(unchecked_param_type = "'completed' | 'failed' | 'released'")] resolution: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(), JsValue> {
        let kind = convert::parse_name::<ResolutionKind>(resolution, "resolution")?;
        let resolution = Resolution::of_kind(kind, body.unwrap_or_default());
        self.store()?
            .reconcile(&scope(tenant, operation)?, &key(key_str)?, resolution, ResolutionCause::Application)
            .map_err(from_store)
    }

    /// The record of a key, or `null`.
    #[wasm_bindgen(unchecked_return_type = "StoredRecord | null")]
    pub fn get(&self, tenant: &str, operation: &str, key_str: &str) -> Result<JsValue, JsValue> {
        let record = self.store()?.get(&scope(tenant, operation)?, &key(key_str)?).map_err(from_store)?;
        Ok(record.as_ref().map(convert::record).unwrap_or(JsValue::NULL))
    }

    /// Applies retention to at most `budget` due records.
    #[wasm_bindgen(js_name = purgeExpired, unchecked_return_type = "ExpiryPurge")]
    pub fn purge_expired(&self, budget: u32) -> Result<JsValue, JsValue> {
        let report = self.store()?.purge_expired(budget as usize).map_err(from_store)?;
        Ok(Obj::new()
            .set("tombstoned", report.tombstoned as f64)
            .set("forgotten", report.forgotten as f64)
            .set("more", report.more)
            .build())
    }

    /// Creates an intent and stores it durably before returning. `key` is made from
    /// `crypto.getRandomValues` (UUID v4) when not given. With `sending`, a pending intent
    /// also records that its first attempt is being sent, in the same commit (one flush for
    /// both: `Store::create_intent_sending`).
    #[wasm_bindgen(js_name = createIntent, unchecked_return_type = "Intent")]
    pub fn create_intent(
        &self,
        tenant: &str,
        operation: &str,
        key_str: Option<String>,
        request: &[u8],
        #[wasm_bindgen(unchecked_param_type = "CanonicalOptions | null")] canonical: JsValue,
        sending: Option<bool>,
    ) -> Result<JsValue, JsValue> {
        let key = match key_str {
            Some(k) => key(&k)?,
            None => random::key()?,
        };
        let canon = convert::canonicalizer(&canonical)?;
        let (store, scope) = (self.store()?, scope(tenant, operation)?);
        let intent = if sending.unwrap_or(false) {
            store.create_intent_sending(&scope, &key, request, &canon)
        } else {
            store.create_intent(&scope, &key, request, &canon)
        }
        .map_err(from_intent)?;
        Ok(convert::intent(&intent))
    }

    /// Creates several intents in one write transaction (one durable commit), all or none.
    /// `keys` (optional) gives each intent's key; missing ones are made from
    /// `crypto.getRandomValues`.
    #[wasm_bindgen(js_name = createIntents, unchecked_return_type = "Intent[]")]
    pub fn create_intents(
        &self,
        tenant: &str,
        operation: &str,
        requests: Vec<js_sys::Uint8Array>,
        keys: Option<Vec<String>>,
        #[wasm_bindgen(unchecked_param_type = "CanonicalOptions | null")] canonical: JsValue,
    ) -> Result<Array, JsValue> {
        let scope = scope(tenant, operation)?;
        let mut made = Vec::with_capacity(requests.len());
        for index in 0..requests.len() {
            made.push(match keys.as_ref().and_then(|k| k.get(index)) {
                Some(k) => key(k)?,
                None => random::key()?,
            });
        }
        let bodies: Vec<Vec<u8>> = requests.iter().map(js_sys::Uint8Array::to_vec).collect();
        let batch: Vec<(&Scope, &IdempotencyKey, &[u8])> =
            made.iter().zip(&bodies).map(|(k, body)| (&scope, k, body.as_slice())).collect();
        let canon = convert::canonicalizer(&canonical)?;
        let intents = self.store()?.create_intents(&batch, &canon).map_err(from_intent)?;
        Ok(intents.iter().map(convert::intent).collect())
    }

    /// One intent, or `null`.
    #[wasm_bindgen(js_name = getIntent, unchecked_return_type = "Intent | null")]
    pub fn get_intent(&self, tenant: &str, operation: &str, key_str: &str) -> Result<JsValue, JsValue> {
        let intent = self.store()?.intent(&scope(tenant, operation)?, &key(key_str)?).map_err(from_intent)?;
        Ok(intent.as_ref().map(convert::intent).unwrap_or(JsValue::NULL))
    }

    /// Records an attempt: `sent`, `network_error`, `timeout` or `status` (with `status`).
    #[wasm_bindgen(js_name = recordAttempt, unchecked_return_type = "Intent")]
    pub fn record_attempt(
        &self,
        tenant: &str,
        operation: &str,
        key_str: &str,
        #[wasm_bindgen(unchecked_param_type = "AttemptOutcome['outcome']")] outcome: &str,
        status: Option<u16>,
    ) -> Result<JsValue, JsValue> {
        let outcome = convert::attempt_outcome(outcome, status)?;
        let intent =
            self.store()?.record_attempt(&scope(tenant, operation)?, &key(key_str)?, outcome).map_err(from_intent)?;
        Ok(convert::intent(&intent))
    }

    /// Records the final response and finishes the intent.
    #[wasm_bindgen(js_name = recordResponse, unchecked_return_type = "Intent")]
    pub fn record_response(
        &self,
        tenant: &str,
        operation: &str,
        key_str: &str,
        status: u16,
        #[wasm_bindgen(unchecked_param_type = "[string, string][]")] headers: JsValue,
        body: &[u8],
    ) -> Result<JsValue, JsValue> {
        let response = IntentResponse { status, headers: convert::headers(&headers)?, body: body.to_vec() };
        let intent =
            self.store()?.record_response(&scope(tenant, operation)?, &key(key_str)?, response).map_err(from_intent)?;
        Ok(convert::intent(&intent))
    }

    /// Puts a pending intent in needs-attention with `cause` and the last answer (`status`
    /// null for none): it is not resumed until reopened or abandoned.
    #[wasm_bindgen(js_name = markNeedsAttention, unchecked_return_type = "Intent")]
    #[allow(clippy::too_many_arguments)]
    pub fn mark_needs_attention(
        &self,
        tenant: &str,
        operation: &str,
        key_str: &str,
        #[wasm_bindgen(unchecked_param_type = "AttentionCause")] cause: &str,
        status: Option<u16>,
        #[wasm_bindgen(unchecked_param_type = "[string, string][]")] headers: JsValue,
        body: Option<Vec<u8>>,
    ) -> Result<JsValue, JsValue> {
        let cause = convert::parse_name::<AttentionCause>(cause, "attention cause")?;
        let response = match status {
            Some(status) => {
                Some(IntentResponse { status, headers: convert::headers(&headers)?, body: body.unwrap_or_default() })
            }
            None => None,
        };
        let intent = self
            .store()?
            .mark_needs_attention(&scope(tenant, operation)?, &key(key_str)?, cause, response)
            .map_err(from_intent)?;
        Ok(convert::intent(&intent))
    }

    /// Makes an intent that needs attention pending again, with a new attempt budget.
    #[wasm_bindgen(js_name = reopenIntent, unchecked_return_type = "Intent")]
    pub fn reopen_intent(&self, tenant: &str, operation: &str, key_str: &str) -> Result<JsValue, JsValue> {
        let intent = self.store()?.reopen_intent(&scope(tenant, operation)?, &key(key_str)?).map_err(from_intent)?;
        Ok(convert::intent(&intent))
    }

    /// Abandons a pending intent (or one that needs attention) with a reason.
    #[wasm_bindgen(js_name = abandonIntent, unchecked_return_type = "Intent")]
    pub fn abandon_intent(
        &self,
        tenant: &str,
        operation: &str,
        key_str: &str,
        reason: &str,
    ) -> Result<JsValue, JsValue> {
        let intent =
            self.store()?.abandon_intent(&scope(tenant, operation)?, &key(key_str)?, reason).map_err(from_intent)?;
        Ok(convert::intent(&intent))
    }

    /// Every pending intent, oldest first.
    #[wasm_bindgen(js_name = pendingIntents, unchecked_return_type = "Intent[]")]
    pub fn pending_intents(&self) -> Result<Array, JsValue> {
        let intents = self.store()?.pending_intents().map_err(from_intent)?;
        Ok(intents.iter().map(convert::intent).collect())
    }

    /// Every intent.
    #[wasm_bindgen(js_name = listIntents, unchecked_return_type = "Intent[]")]
    pub fn list_intents(&self) -> Result<Array, JsValue> {
        let intents = self.store()?.all_intents().map_err(from_intent)?;
        Ok(intents.iter().map(convert::intent).collect())
    }

    /// One page of intents in key order after the cursor `after` (a page's `next`), at most
    /// `limit` of them (1 to 10 000), only those in `state` when it is given: one bounded range read.
    #[wasm_bindgen(js_name = intentPage, unchecked_return_type = "IntentPage")]
    pub fn intent_page(&self, after: Option<String>, limit: u32, state: Option<String>) -> Result<JsValue, JsValue> {
        if !(1..=MAX_PAGE).contains(&limit) {
            return Err(invalid(format!("limit must be from 1 to {MAX_PAGE}")));
        }
        let state = state.map(|name| convert::parse_name::<IntentStateKind>(&name, "intent state")).transpose()?;
        let cursor = after.map(|text| cursor_bytes(&text)).transpose()?;
        let page = self.store()?.intents_page(cursor.as_deref(), limit as usize, state).map_err(from_intent)?;
        let intents: Array = page.intents.iter().map(convert::intent).collect();
        let next = page.next.map_or(JsValue::NULL, |bytes| JsValue::from_str(&cursor_text(&bytes)));
        Ok(Obj::new().set("intents", intents).set("next", next).build())
    }

    /// Removes up to `budget` finished intents older than `keep_for_ms`.
    #[wasm_bindgen(js_name = purgeIntents, unchecked_return_type = "IntentPurge")]
    pub fn purge_intents(&self, keep_for_ms: f64, budget: u32) -> Result<JsValue, JsValue> {
        let keep_for = Duration::from_millis(keep_for_ms.max(0.0) as u64);
        let purge = self.store()?.purge_intents(keep_for, budget as usize).map_err(from_intent)?;
        Ok(Obj::new().set("removed", purge.removed as f64).set("more", purge.more).build())
    }
}

/// The largest page `intentPage` reads.
const MAX_PAGE: u32 = 10_000;

/// A page cursor as text: the encoded scoped key in lowercase hexadecimal.
fn cursor_text(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    text
}

/// The bytes of a cursor written by [`cursor_text`].
fn cursor_bytes(text: &str) -> Result<Vec<u8>, JsValue> {
    let refuse = || invalid("cursor must be the `next` of an earlier page");
    if text.is_empty() || !text.len().is_multiple_of(2) || text.len() > 4096 {
        return Err(refuse());
    }
    let digit = |c: u8| char::from(c).to_digit(16).ok_or_else(refuse);
    text.as_bytes().chunks(2).map(|pair| Ok(((digit(pair[0])? << 4) | digit(pair[1])?) as u8)).collect()
}

fn parse_fingerprint(hex: &str) -> Result<Fingerprint, JsValue> {
    Fingerprint::from_hex(hex).ok_or_else(|| invalid("fingerprint must be 64 hexadecimal digits"))
}

/// The fingerprint (hex) of a JSON request under the canonicalisation options.
#[wasm_bindgen]
pub fn fingerprint(
    body: &[u8],
    #[wasm_bindgen(unchecked_param_type = "CanonicalOptions | null")] canonical: JsValue,
) -> Result<String, JsValue> {
    let canon = convert::canonicalizer(&canonical)?;
    canon.fingerprint(body).map(|fp| fp.to_hex()).map_err(coded)
}

/// The canonical form (RFC 8785) of a JSON request under the canonicalisation options.
#[wasm_bindgen]
pub fn canonicalize(
    body: &[u8],
    #[wasm_bindgen(unchecked_param_type = "CanonicalOptions | null")] canonical: JsValue,
) -> Result<Vec<u8>, JsValue> {
    convert::canonicalizer(&canonical)?.canonicalize(body).map_err(coded)
}

/// A new idempotency key: a UUID v4 from `crypto.getRandomValues`.
#[wasm_bindgen(js_name = newKey)]
pub fn new_key() -> Result<String, JsValue> {
    Ok(random::key()?.as_str().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_parse_from_hex_only_when_well_formed() {
        let fp = Fingerprint::from_bytes([0xab; 32]);
        assert_eq!(parse_fingerprint(&fp.to_hex()).ok(), Some(fp));
    }
}
