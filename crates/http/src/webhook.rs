//! Verifying webhook deliveries signed the Standard Webhooks way, before they reach the inbox.
//!
//! A delivery carries three headers: `webhook-id` (the sender's unique id of the message,
//! the same on every retry), `webhook-timestamp` (Unix seconds of this attempt) and
//! `webhook-signature` (space-separated `<version>,<base64>` signatures over
//! `<id>.<timestamp>.<body>`). Two versions are verified:
//!
//! | version | scheme | the receiver holds |
//! |---|---|---|
//! | `v1` | HMAC-SHA256 with a shared secret | the secret, `whsec_<base64>` |
//! | `v1a` | ed25519 (RFC 8032), verified strictly | the sender's public key, `whpk_<base64>` |
//!
//! A sender rotating keys may send several signatures, and a receiver may hold several keys
//! ([`WebhookVerifier::with_key`]); one valid signature under one held key is enough. Entries
//! of other versions are skipped.
//!
//! [`WebhookVerifier::verify`] checks, in this order: the headers are there and well formed,
//! the timestamp is within the tolerance of `now` (5 minutes by default, either way), and a
//! signature matches (HMAC tags are compared in constant time by the `hmac` crate). It returns
//! the verified `webhook-id`, which is the delivery id to give the inbox: the inbox keeps
//! delivery ids for the policy's response and tombstone TTLs (395 days by default), far
//! longer than any sender's retry schedule (days), so a retry — signed again with a new
//! timestamp, under the same id — is a duplicate, while the tolerance stops a captured
//! delivery from being replayed later under its old signature.
//!
//! The crates are RustCrypto's `hmac` and `sha2` (audited, constant-time tag comparison,
//! `no_std`), `ed25519-dalek` (the maintained ed25519 implementation; `verify_strict` refuses
//! the malleable and small-order signatures plain verification lets through) and `base64`,
//! rather than hand-written code. Senders (and tests) sign with [`WebhookSigner`].
//!
//! ```
//! use std::time::{Duration, SystemTime, UNIX_EPOCH};
//! use http::HeaderMap;
//! use idemdb_http::WebhookVerifier;
//!
//! // The Standard Webhooks specification's published test vector.
//! let verifier = WebhookVerifier::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")?;
//! let mut headers = HeaderMap::new();
//! headers.insert("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek".parse()?);
//! headers.insert("webhook-timestamp", "1614265330".parse()?);
//! headers.insert("webhook-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=".parse()?);
//! let now = UNIX_EPOCH + Duration::from_secs(1_614_265_330);
//! let verified = verifier.verify(&headers, br#"{"test": 2432232314}"#, now)?;
//! assert_eq!(verified.id(), "msg_p5jXN8AQM9LWM0D4loKWxJek");
//! // The same delivery an hour later is refused: outside the tolerance.
//! assert!(verifier.verify(&headers, br#"{"test": 2432232314}"#, now + Duration::from_secs(3600)).is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The asymmetric version, with a key pair made from 32 random bytes:
//!
//! ```
//! use std::time::{Duration, UNIX_EPOCH};
//! use http::HeaderMap;
//! use idemdb_http::{WebhookSigner, WebhookVerifier};
//!
//! let signer = WebhookSigner::ed25519_from_seed([7; 32]);
//! // The sender publishes its public key; the receiver verifies with it alone.
//! let verifier = WebhookVerifier::new(&signer.public_key().expect("an ed25519 signer has one"))?;
//! let body = br#"{"type":"charge.settled"}"#;
//! let mut headers = HeaderMap::new();
//! headers.insert("webhook-id", "evt_1".parse()?);
//! headers.insert("webhook-timestamp", "1700000000".parse()?);
//! headers.insert("webhook-signature", signer.sign("evt_1", 1_700_000_000, body).parse()?);
//! let now = UNIX_EPOCH + Duration::from_secs(1_700_000_010);
//! assert_eq!(verifier.verify(&headers, body, now)?.id(), "evt_1");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use hmac::{Hmac, KeyInit, Mac};
use http::HeaderMap;
use sha2::Sha256;

/// The header with the sender's message id.
pub const WEBHOOK_ID: &str = "webhook-id";
/// The header with the attempt's Unix time in seconds.
pub const WEBHOOK_TIMESTAMP: &str = "webhook-timestamp";
/// The header with the signatures.
pub const WEBHOOK_SIGNATURE: &str = "webhook-signature";
/// The default timestamp tolerance, either way: 5 minutes.
pub const DEFAULT_WEBHOOK_TOLERANCE: Duration = Duration::from_secs(5 * 60);

/// The prefix of a Standard Webhooks shared secret (`v1`).
const SECRET_PREFIX: &str = "whsec_";
/// The prefix of a Standard Webhooks ed25519 public key (`v1a`).
const PUBLIC_KEY_PREFIX: &str = "whpk_";
/// The prefix of a Standard Webhooks ed25519 secret key (`v1a`, the sender's side).
const SIGNING_KEY_PREFIX: &str = "whsk_";

/// Why a delivery was refused, or a secret could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookSignatureError {
    /// The secret is not `whsec_<base64>` (or plain base64) of at least one byte, nor
    /// `whpk_<base64>` of a 32-byte ed25519 public key (or, for a signer, `whsk_<base64>` of a
    /// 32-byte seed or a 64-byte key pair).
    #[error("the webhook key is not whsec_<base64>, whpk_<base64> of 32 bytes or whsk_<base64> of 32 or 64 bytes")]
    InvalidSecret,
    /// A header is missing, sent twice, or not visible ASCII.
    #[error("the {0} header is missing or malformed")]
    MissingHeader(&'static str),
    /// `webhook-timestamp` is not an integer number of seconds.
    #[error("webhook-timestamp is not a Unix time in seconds")]
    InvalidTimestamp,
    /// The timestamp is further from now than the tolerance.
    #[error("webhook-timestamp is {off_by_secs} s away from now; at most {tolerance_secs} s are accepted")]
    OutsideTolerance {
        /// How far from now it is, in seconds.
        off_by_secs: u64,
        /// The tolerance, in seconds.
        tolerance_secs: u64,
    },
    /// No `v1` or `v1a` signature matches the delivery under a held key.
    #[error("no webhook-signature matches the delivery")]
    NoValidSignature,
}

/// A delivery whose signature was verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedWebhook {
    id: String,
    timestamp: u64,
}

impl VerifiedWebhook {
    /// The sender's message id (`webhook-id`): the delivery id to dedupe by.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The attempt's Unix time in seconds (`webhook-timestamp`).
    pub fn timestamp(&self) -> u64 {
        self.timestamp
    }
}

/// One key a verifier holds.
#[derive(Clone)]
enum VerifyKey {
    /// `v1`: the shared HMAC secret.
    Shared(Vec<u8>),
    /// `v1a`: the sender's ed25519 public key.
    Public(VerifyingKey),
}

impl VerifyKey {
    /// `whsec_<base64>` or plain base64 (a shared secret), or `whpk_<base64>` (a public key).
    fn parse(text: &str) -> Result<Self, WebhookSignatureError> {
        let text = text.trim();
        if let Some(encoded) = text.strip_prefix(PUBLIC_KEY_PREFIX) {
            let bytes: [u8; 32] = decode_exact(encoded)?;
            let key = VerifyingKey::from_bytes(&bytes).map_err(|_| WebhookSignatureError::InvalidSecret)?;
            return Ok(VerifyKey::Public(key));
        }
        let encoded = text.strip_prefix(SECRET_PREFIX).unwrap_or(text);
        let key = STANDARD.decode(encoded).map_err(|_| WebhookSignatureError::InvalidSecret)?;
        if key.is_empty() {
            return Err(WebhookSignatureError::InvalidSecret);
        }
        Ok(VerifyKey::Shared(key))
    }

    /// Whether the `webhook-signature` entry `entry` (`<version>,<base64>`) signs `signed`.
    fn verifies(&self, entry: &str, content: &Signed<'_>) -> bool {
        match self {
            VerifyKey::Shared(secret) => entry.strip_prefix("v1,").is_some_and(|encoded| {
                STANDARD.decode(encoded).is_ok_and(|tag| hmac_of(secret, content).verify_slice(&tag).is_ok())
            }),
            VerifyKey::Public(key) => entry.strip_prefix("v1a,").is_some_and(|encoded| {
                decode_exact::<64>(encoded)
                    .is_ok_and(|bytes| key.verify_strict(&content.bytes(), &Signature::from_bytes(&bytes)).is_ok())
            }),
        }
    }
}

/// What a signature covers: `<id>.<timestamp>.<body>`.
struct Signed<'a> {
    id: &'a str,
    timestamp: u64,
    body: &'a [u8],
}

impl Signed<'_> {
    fn bytes(&self) -> Vec<u8> {
        let timestamp = self.timestamp.to_string();
        let mut bytes = Vec::with_capacity(self.id.len() + timestamp.len() + self.body.len() + 2);
        bytes.extend_from_slice(self.id.as_bytes());
        bytes.push(b'.');
        bytes.extend_from_slice(timestamp.as_bytes());
        bytes.push(b'.');
        bytes.extend_from_slice(self.body);
        bytes
    }
}

/// The HMAC-SHA256 of a delivery under `secret`, ready to finalize or verify.
fn hmac_of(secret: &[u8], content: &Signed<'_>) -> Hmac<Sha256> {
    // HMAC takes a key of any length; the fallback (an empty-key MAC that matches nothing a
    // sender with the real key signed) is never taken.
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).unwrap_or_else(|_| Hmac::<Sha256>::new(&Default::default()));
    mac.update(content.id.as_bytes());
    mac.update(b".");
    mac.update(content.timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(content.body);
    mac
}

/// Base64 of exactly `N` bytes.
fn decode_exact<const N: usize>(encoded: &str) -> Result<[u8; N], WebhookSignatureError> {
    let bytes = STANDARD.decode(encoded).map_err(|_| WebhookSignatureError::InvalidSecret)?;
    bytes.try_into().map_err(|_| WebhookSignatureError::InvalidSecret)
}

/// Verifies Standard Webhooks `v1` (HMAC) and `v1a` (ed25519) deliveries.
#[derive(Clone)]
pub struct WebhookVerifier {
    keys: Vec<VerifyKey>,
    tolerance: Duration,
}

impl std::fmt::Debug for WebhookVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never a secret.
        f.debug_struct("WebhookVerifier")
            .field("keys", &self.keys.len())
            .field("tolerance", &self.tolerance)
            .finish_non_exhaustive()
    }
}

impl WebhookVerifier {
    /// A verifier holding one key, with the default tolerance of 5 minutes: a shared secret
    /// `whsec_<base64>` (the prefix is optional) verifies `v1` signatures, a public key
    /// `whpk_<base64>` verifies `v1a` signatures.
    ///
    /// # Errors
    /// [`WebhookSignatureError::InvalidSecret`] for a secret that is not base64, or empty, or a
    /// public key that is not 32 bytes of a valid ed25519 point.
    pub fn new(key: &str) -> Result<Self, WebhookSignatureError> {
        Ok(WebhookVerifier { keys: vec![VerifyKey::parse(key)?], tolerance: DEFAULT_WEBHOOK_TOLERANCE })
    }

    /// The same verifier holding one more key (during a rotation the old and the new secret
    /// are both accepted, until the sender signs only with the new one).
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn with_key(mut self, key: &str) -> Result<Self, WebhookSignatureError> {
        self.keys.push(VerifyKey::parse(key)?);
        Ok(self)
    }

    /// How far a delivery's timestamp may be from now, either way (default 5 minutes).
    #[must_use]
    pub fn tolerance(mut self, tolerance: Duration) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// Verifies a delivery at time `now` (see the module docs).
    ///
    /// # Errors
    /// [`WebhookSignatureError`]: a missing or malformed header, a timestamp outside the
    /// tolerance, or no matching signature.
    pub fn verify(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Result<VerifiedWebhook, WebhookSignatureError> {
        let id = single(headers, WEBHOOK_ID)?;
        let timestamp: u64 =
            single(headers, WEBHOOK_TIMESTAMP)?.parse().map_err(|_| WebhookSignatureError::InvalidTimestamp)?;
        let signatures = single(headers, WEBHOOK_SIGNATURE)?;
        let now = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        let off_by_secs = now.abs_diff(timestamp);
        if off_by_secs > self.tolerance.as_secs() {
            return Err(WebhookSignatureError::OutsideTolerance {
                off_by_secs,
                tolerance_secs: self.tolerance.as_secs(),
            });
        }
        let content = Signed { id, timestamp, body };
        let valid = signatures.split(' ').any(|entry| self.keys.iter().any(|key| key.verifies(entry, &content)));
        if !valid {
            return Err(WebhookSignatureError::NoValidSignature);
        }
        Ok(VerifiedWebhook { id: id.to_string(), timestamp })
    }
}

/// Signs deliveries the way a Standard Webhooks sender does: `v1` with a shared secret, `v1a`
/// with an ed25519 signing key. For senders, and for tests of a receiver.
#[derive(Clone)]
pub struct WebhookSigner {
    key: SignKey,
}

#[derive(Clone)]
enum SignKey {
    Shared(Vec<u8>),
    Private(Box<SigningKey>),
}

impl std::fmt::Debug for WebhookSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let version = match self.key {
            SignKey::Shared(_) => "v1",
            SignKey::Private(_) => "v1a",
        };
        f.debug_struct("WebhookSigner").field("version", &version).finish_non_exhaustive()
    }
}

impl WebhookSigner {
    /// A signer for a shared secret `whsec_<base64>` (`v1`) or an ed25519 secret key
    /// `whsk_<base64>` of a 32-byte seed or a 64-byte key pair (`v1a`).
    ///
    /// # Errors
    /// [`WebhookSignatureError::InvalidSecret`] for a key that is neither, or a key pair whose
    /// public half does not match its seed.
    pub fn new(key: &str) -> Result<Self, WebhookSignatureError> {
        let key = key.trim();
        let Some(encoded) = key.strip_prefix(SIGNING_KEY_PREFIX) else {
            return match VerifyKey::parse(key)? {
                VerifyKey::Shared(secret) => Ok(WebhookSigner { key: SignKey::Shared(secret) }),
                VerifyKey::Public(_) => Err(WebhookSignatureError::InvalidSecret),
            };
        };
        let bytes = STANDARD.decode(encoded).map_err(|_| WebhookSignatureError::InvalidSecret)?;
        let signing = match bytes.len() {
            32 => SigningKey::from_bytes(&decode_exact::<32>(encoded)?),
            64 => {
                let pair: [u8; 64] = decode_exact(encoded)?;
                SigningKey::from_keypair_bytes(&pair).map_err(|_| WebhookSignatureError::InvalidSecret)?
            }
            _ => return Err(WebhookSignatureError::InvalidSecret),
        };
        Ok(WebhookSigner { key: SignKey::Private(Box::new(signing)) })
    }

    /// An ed25519 signer from a 32-byte seed (which must come from a CSPRNG in production).
    pub fn ed25519_from_seed(seed: [u8; 32]) -> Self {
        WebhookSigner { key: SignKey::Private(Box::new(SigningKey::from_bytes(&seed))) }
    }

    /// The public key receivers verify with, `whpk_<base64>`; `None` for a shared secret.
    pub fn public_key(&self) -> Option<String> {
        match &self.key {
            SignKey::Shared(_) => None,
            SignKey::Private(key) => {
                Some(format!("{PUBLIC_KEY_PREFIX}{}", STANDARD.encode(key.verifying_key().as_bytes())))
            }
        }
    }

    /// The signature entry of a delivery, as a sender puts it in `webhook-signature`:
    /// `v1,<base64>` or `v1a,<base64>`.
    pub fn sign(&self, id: &str, timestamp: u64, body: &[u8]) -> String {
        let content = Signed { id, timestamp, body };
        match &self.key {
            SignKey::Shared(secret) => {
                format!("v1,{}", STANDARD.encode(hmac_of(secret, &content).finalize().into_bytes()))
            }
            SignKey::Private(key) => format!("v1a,{}", STANDARD.encode(key.sign(&content.bytes()).to_bytes())),
        }
    }
}

/// The one value of header `name`, as text.
fn single<'h>(headers: &'h HeaderMap, name: &'static str) -> Result<&'h str, WebhookSignatureError> {
    let mut values = headers.get_all(name).iter();
    match (values.next(), values.next()) {
        (Some(value), None) => {
            value.to_str().ok().filter(|text| !text.is_empty()).ok_or(WebhookSignatureError::MissingHeader(name))
        }
        _ => Err(WebhookSignatureError::MissingHeader(name)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TS: u64 = 1_614_265_330;
    const BODY: &[u8] = br#"{"test": 2432232314}"#;
    const VECTOR: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn headers(id: &str, ts: &str, signature: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(WEBHOOK_ID, id.parse().unwrap());
        headers.insert(WEBHOOK_TIMESTAMP, ts.parse().unwrap());
        headers.insert(WEBHOOK_SIGNATURE, signature.parse().unwrap());
        headers
    }

    #[test]
    fn the_specifications_test_vector_signs_and_verifies() {
        let verifier = WebhookVerifier::new(SECRET).unwrap();
        assert_eq!(WebhookSigner::new(SECRET).unwrap().sign(ID, TS, BODY), VECTOR);
        let unprefixed = WebhookSigner::new(SECRET.trim_start_matches(SECRET_PREFIX)).unwrap();
        assert_eq!(unprefixed.sign(ID, TS, BODY), VECTOR);
        assert_eq!(unprefixed.public_key(), None, "a shared secret has no public key");
        let verified = verifier.verify(&headers(ID, "1614265330", VECTOR), BODY, at(TS)).unwrap();
        assert_eq!((verified.id(), verified.timestamp()), (ID, TS));
        // One valid signature among others (a rotation) is enough; v1a entries are skipped.
        let several = format!("v1a,AAAA v1,bm9wZQ== {VECTOR}");
        assert!(verifier.verify(&headers(ID, "1614265330", &several), BODY, at(TS + 299)).is_ok());
    }

    #[test]
    fn tampering_an_old_timestamp_or_a_missing_header_is_refused() {
        let verifier = WebhookVerifier::new(SECRET).unwrap();
        let refuse = |h: &HeaderMap, body: &[u8], now| verifier.verify(h, body, now).unwrap_err();
        let good = headers(ID, "1614265330", VECTOR);
        assert_eq!(refuse(&good, br#"{"test": 2432232315}"#, at(TS)), WebhookSignatureError::NoValidSignature);
        assert_eq!(
            refuse(&headers("msg_other", "1614265330", VECTOR), BODY, at(TS)),
            WebhookSignatureError::NoValidSignature
        );
        // The timestamp is signed: moving it forward breaks the signature.
        assert_eq!(refuse(&headers(ID, "1614265331", VECTOR), BODY, at(TS)), WebhookSignatureError::NoValidSignature);
        assert_eq!(
            refuse(&good, BODY, at(TS + 301)),
            WebhookSignatureError::OutsideTolerance { off_by_secs: 301, tolerance_secs: 300 }
        );
        assert!(matches!(refuse(&good, BODY, at(TS - 301)), WebhookSignatureError::OutsideTolerance { .. }));
        assert!(verifier.clone().tolerance(Duration::from_secs(3600)).verify(&good, BODY, at(TS + 301)).is_ok());
        assert_eq!(refuse(&headers(ID, "soon", VECTOR), BODY, at(TS)), WebhookSignatureError::InvalidTimestamp);
        assert_eq!(
            refuse(&headers(ID, "1614265330", "v1a,AAAA"), BODY, at(TS)),
            WebhookSignatureError::NoValidSignature
        );
        assert_eq!(refuse(&headers(ID, "1614265330", "v1,***"), BODY, at(TS)), WebhookSignatureError::NoValidSignature);
        for name in [WEBHOOK_ID, WEBHOOK_TIMESTAMP, WEBHOOK_SIGNATURE] {
            let mut missing = good.clone();
            missing.remove(name);
            assert_eq!(refuse(&missing, BODY, at(TS)), WebhookSignatureError::MissingHeader(name));
            let mut twice = good.clone();
            twice.append(name, "x".parse().unwrap());
            assert_eq!(refuse(&twice, BODY, at(TS)), WebhookSignatureError::MissingHeader(name));
        }
        // Another secret's signature does not verify.
        let other = WebhookVerifier::new("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD").unwrap();
        assert_eq!(other.verify(&good, BODY, at(TS)).unwrap_err(), WebhookSignatureError::NoValidSignature);
    }

    #[test]
    fn secrets_must_be_base64() {
        for bad in ["whsec_", "whsec_***", "", "not base64!", "whpk_", "whpk_AAAA", "whpk_***"] {
            assert_eq!(WebhookVerifier::new(bad).unwrap_err(), WebhookSignatureError::InvalidSecret, "{bad}");
        }
        for bad in ["whsk_", "whsk_AAAA", "whpk_ICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICA="] {
            assert_eq!(WebhookSigner::new(bad).unwrap_err(), WebhookSignatureError::InvalidSecret, "{bad}");
        }
        let printed = format!("{:?} {:?}", WebhookVerifier::new(SECRET).unwrap(), WebhookSigner::new(SECRET).unwrap());
        assert!(!printed.contains("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), "the secret is never printed: {printed}");
    }

    /// A `whsk_` key as a sender stores it: the 64-byte key pair (seed, then public key).
    fn whsk(seed: [u8; 32]) -> String {
        let key = SigningKey::from_bytes(&seed);
        format!("{SIGNING_KEY_PREFIX}{}", STANDARD.encode(key.to_keypair_bytes()))
    }

    #[test]
    fn v1a_signatures_verify_with_the_public_key_alone() {
        let signer = WebhookSigner::new(&whsk([3; 32])).unwrap();
        let from_seed = WebhookSigner::new(&format!("{SIGNING_KEY_PREFIX}{}", STANDARD.encode([3u8; 32]))).unwrap();
        let public = signer.public_key().unwrap();
        assert!(public.starts_with(PUBLIC_KEY_PREFIX));
        assert_eq!(from_seed.public_key().unwrap(), public, "a seed and its key pair are one key");
        let signature = signer.sign(ID, TS, BODY);
        assert!(signature.starts_with("v1a,"), "{signature}");
        // ed25519 is deterministic: the same delivery, the same signature.
        assert_eq!(from_seed.sign(ID, TS, BODY), signature);

        let verifier = WebhookVerifier::new(&public).unwrap();
        let verified = verifier.verify(&headers(ID, "1614265330", &signature), BODY, at(TS)).unwrap();
        assert_eq!(verified.id(), ID);
        let refuse = |h: &HeaderMap, body: &[u8]| verifier.verify(h, body, at(TS)).unwrap_err();
        let good = headers(ID, "1614265330", &signature);
        assert_eq!(refuse(&good, br#"{"test": 2432232315}"#), WebhookSignatureError::NoValidSignature);
        assert_eq!(refuse(&headers(ID, "1614265331", &signature), BODY), WebhookSignatureError::NoValidSignature);
        // A v1a verifier does not accept a v1 entry, even a valid one, nor the same bytes
        // labelled v1.
        assert_eq!(refuse(&headers(ID, "1614265330", VECTOR), BODY), WebhookSignatureError::NoValidSignature);
        let relabelled = signature.replacen("v1a,", "v1,", 1);
        assert_eq!(refuse(&headers(ID, "1614265330", &relabelled), BODY), WebhookSignatureError::NoValidSignature);
        // Another key pair's signature does not verify; a flipped bit does not either.
        let other = WebhookSigner::ed25519_from_seed([4; 32]).sign(ID, TS, BODY);
        assert_eq!(refuse(&headers(ID, "1614265330", &other), BODY), WebhookSignatureError::NoValidSignature);
        let mut bytes = STANDARD.decode(&signature[4..]).unwrap();
        bytes[10] ^= 1;
        let flipped = format!("v1a,{}", STANDARD.encode(&bytes));
        assert_eq!(refuse(&headers(ID, "1614265330", &flipped), BODY), WebhookSignatureError::NoValidSignature);
        // The tolerance applies as for v1.
        assert!(matches!(
            verifier.verify(&good, BODY, at(TS + 301)),
            Err(WebhookSignatureError::OutsideTolerance { .. })
        ));
    }

    #[test]
    fn a_verifier_may_hold_several_keys_during_a_rotation() {
        let ed = WebhookSigner::ed25519_from_seed([9; 32]);
        let verifier = WebhookVerifier::new(SECRET).unwrap().with_key(&ed.public_key().unwrap()).unwrap();
        let v1a = ed.sign(ID, TS, BODY);
        assert!(verifier.verify(&headers(ID, "1614265330", VECTOR), BODY, at(TS)).is_ok());
        assert!(verifier.verify(&headers(ID, "1614265330", &v1a), BODY, at(TS)).is_ok());
        let both = format!("{v1a} {VECTOR}");
        assert!(verifier.verify(&headers(ID, "1614265330", &both), BODY, at(TS)).is_ok());
        let unknown = WebhookSigner::ed25519_from_seed([8; 32]).sign(ID, TS, BODY);
        assert_eq!(
            verifier.verify(&headers(ID, "1614265330", &unknown), BODY, at(TS)).unwrap_err(),
            WebhookSignatureError::NoValidSignature
        );
        assert_eq!(
            WebhookVerifier::new(SECRET).unwrap().with_key("whpk_AAAA").unwrap_err(),
            WebhookSignatureError::InvalidSecret
        );
    }
}
