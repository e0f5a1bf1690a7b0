//! The requests every workload works on, identical across idemdb, raw redb and SQLite.
//!
//! One request is `(tenant, operation, key)` with a 32-byte fingerprint; a reserve stores an
//! in-progress record (about 100 bytes with its key), a complete adds a 200-byte result body
//! (about 300 bytes). Raw redb stores exactly the bytes idemdb stores (`ScopedKey::encode` and
//! `encode_record`), SQLite the same fields as columns.

use std::time::Duration;

use idemdb::{Fingerprint, IdempotencyKey, Record, Scope, ScopedKey, State, Timestamp};

/// Tenant of every request.
pub(crate) const TENANT: &str = "acme";
/// Operation of every request.
pub(crate) const OPERATION: &str = "create_payment";
/// Size of a completed request's result body.
pub(crate) const RESULT_BYTES: usize = 200;
/// A fixed store time for records built directly (2023-11-14T22:13:20Z).
pub(crate) const T0_MS: u64 = 1_700_000_000_000;

/// Request ids `0..n` in the order of their stored keys. Stores that only set the stage
/// (lookups, purge) are built in key order, which takes seconds instead of minutes for a
/// million records; every system gets the same order.
pub(crate) fn ids_in_key_order(scope: &Scope, n: u64) -> Res<Vec<u64>> {
    let mut keyed: Vec<(Vec<u8>, u64)> = (0..n).map(|i| Ok((request(scope, i)?.encoded, i))).collect::<Res<_>>()?;
    keyed.sort_unstable();
    Ok(keyed.into_iter().map(|(_, i)| i).collect())
}

/// Records per write transaction when a store is built directly. Kept small: idemdb's `Txn`
/// remembers each written key in a list it searches linearly, so one huge transaction costs
/// time quadratic in its size.
pub(crate) const BUILD_BATCH: usize = 1_000;

/// A boxed error: the harness stops on the first failure and prints it.
pub(crate) type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// SplitMix64: a fast deterministic generator, so every system sees the same keys.
pub(crate) fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A deterministic stream of pseudo-random numbers.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(1);
        mix(self.0)
    }

    /// Uniform in `0..n` (n > 0; the modulo bias is irrelevant here).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// The key text of request `i`: 36 visible ASCII characters (the length of a UUID), random
/// in order like client-made keys, unique per `i`.
pub(crate) fn key_text(i: u64) -> String {
    format!("{:016x}-{:019}", mix(i ^ 0x5eed), i)
}

/// Request `i`, ready for every system.
pub(crate) struct Request {
    pub(crate) key: IdempotencyKey,
    pub(crate) fingerprint: Fingerprint,
    /// `ScopedKey::encode`: the redb key.
    pub(crate) encoded: Vec<u8>,
}

pub(crate) fn scope() -> Res<Scope> {
    Ok(Scope::new(TENANT, OPERATION)?)
}

pub(crate) fn fingerprint(i: u64) -> Fingerprint {
    let mut bytes = [0u8; 32];
    for (n, chunk) in bytes.chunks_exact_mut(8).enumerate() {
        chunk.copy_from_slice(&mix(i.wrapping_mul(4).wrapping_add(n as u64)).to_le_bytes());
    }
    Fingerprint::from_bytes(bytes)
}

pub(crate) fn request(scope: &Scope, i: u64) -> Res<Request> {
    let key_text = key_text(i);
    let key = IdempotencyKey::new(key_text)?;
    let encoded = ScopedKey::new(scope.clone(), key.clone()).encode();
    Ok(Request { key, fingerprint: fingerprint(i), encoded })
}

/// Requests `start..start + n`, built before any timing starts.
pub(crate) fn requests(scope: &Scope, start: u64, n: usize) -> Res<Vec<Request>> {
    (start..start + n as u64).map(|i| request(scope, i)).collect()
}

/// The 200-byte result body of request `i` (JSON, like a payment provider's answer).
pub(crate) fn result_body(i: u64) -> Vec<u8> {
    let mut body =
        format!(r#"{{"id":"ch_{:016x}","status":"succeeded","amount":1050,"currency":"BRL","padding":""#, mix(i))
            .into_bytes();
    body.resize(RESULT_BYTES - 2, b'x');
    body.extend_from_slice(b"\"}");
    body
}

/// The in-progress record a reserve at `now` writes (default policy: 60 s lease).
pub(crate) fn in_progress_record(fingerprint: Fingerprint, now_ms: u64) -> Record {
    let now = Timestamp::from_millis(now_ms);
    Record {
        fingerprint,
        state: State::InProgress { lease_expires_at: now.saturating_add(Duration::from_secs(60)) },
        fence: now_ms,
        attempts: 1,
        created_at: now,
        updated_at: now,
    }
}

/// The completed record a complete writes: replayed until `expires_at_ms`, then a tombstone
/// for a year.
pub(crate) fn completed_record(fingerprint: Fingerprint, now_ms: u64, expires_at_ms: u64, result: Vec<u8>) -> Record {
    let now = Timestamp::from_millis(now_ms);
    let expires_at = Timestamp::from_millis(expires_at_ms);
    Record {
        fingerprint,
        state: State::Completed {
            result,
            expires_at,
            forget_at: expires_at.saturating_add(Duration::from_secs(365 * 24 * 3600)),
        },
        fence: now_ms,
        attempts: 1,
        created_at: now,
        updated_at: now,
    }
}

/// 30 days in milliseconds (the default response TTL).
pub(crate) const THIRTY_DAYS_MS: u64 = 30 * 24 * 3600 * 1000;
