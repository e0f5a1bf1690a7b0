//! Verifying webhook deliveries signed the Standard Webhooks way, before they reach the inbox.
//!
//! A delivery carries three headers: `webhook-id` (the sender's unique id of the message,
//! the same on every retry), `webhook-timestamp` (Unix seconds of this attempt) and
//! `webhook-signature` (space-separated `v1,<base64>` signatures: HMAC-SHA256 over
//! `<id>.<timestamp>.<body>` with the secret, which is given as `whsec_<base64>`). A sender
//! rotating secrets may send several signatures; one valid signature is enough.
//!
//! [`WebhookVerifier::verify`] checks, in this order: the headers are there and well formed,
//! the timestamp is within the tolerance of `now` (5 minutes by default, either way), and a
//! `v1` signature matches (compared in constant time by the `hmac` crate). It returns the
//! verified `webhook-id`, which is the delivery id to give the inbox: the inbox keeps
//! delivery ids for the policy's response and tombstone TTLs (395 days by default), far
//! longer than any sender's retry schedule (days), so a retry — signed again with a new
//! timestamp, under the same id — is a duplicate, while the tolerance stops a captured
//! delivery from being replayed later under its old signature.
//!
//! The crates are RustCrypto's `hmac` and `sha2` (audited, constant-time tag comparison,
//! `no_std`) and `base64`, rather than hand-written code. The `v1a` (ed25519) scheme is not
//! supported yet: such signatures are skipped, so a delivery signed only with `v1a` is refused.
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

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
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

/// The prefix of a Standard Webhooks secret.
const SECRET_PREFIX: &str = "whsec_";

/// Why a delivery was refused, or a secret could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookSignatureError {
    /// The secret is not `whsec_<base64>` (or plain base64) of at least one byte.
    #[error("the webhook secret is not base64 (whsec_<base64>)")]
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
    /// No `v1` signature matches the body with the secret.
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

/// Verifies (and, for senders and tests, signs) Standard Webhooks `v1` deliveries.
#[derive(Clone)]
pub struct WebhookVerifier {
    key: Vec<u8>,
    tolerance: Duration,
}

impl std::fmt::Debug for WebhookVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("WebhookVerifier").field("tolerance", &self.tolerance).finish_non_exhaustive()
    }
}

impl WebhookVerifier {
    /// A verifier for the secret `whsec_<base64>` (the prefix is optional), with the default
    /// tolerance of 5 minutes.
    ///
    /// # Errors
    /// [`WebhookSignatureError::InvalidSecret`] for a secret that is not base64, or empty.
    pub fn new(secret: &str) -> Result<Self, WebhookSignatureError> {
        let encoded = secret.trim().strip_prefix(SECRET_PREFIX).unwrap_or(secret.trim());
        let key = STANDARD.decode(encoded).map_err(|_| WebhookSignatureError::InvalidSecret)?;
        if key.is_empty() {
            return Err(WebhookSignatureError::InvalidSecret);
        }
        Ok(WebhookVerifier { key, tolerance: DEFAULT_WEBHOOK_TOLERANCE })
    }

    /// How far a delivery's timestamp may be from now, either way (default 5 minutes).
    #[must_use]
    pub fn tolerance(mut self, tolerance: Duration) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// The `v1,<base64>` signature of a delivery, as a sender puts it in `webhook-signature`.
    pub fn sign(&self, id: &str, timestamp: u64, body: &[u8]) -> String {
        format!("v1,{}", STANDARD.encode(self.mac(id, timestamp, body).finalize().into_bytes()))
    }

    /// Verifies a delivery at time `now` (see the [module docs](self)).
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
        let valid = signatures.split(' ').filter_map(|entry| entry.strip_prefix("v1,")).any(|encoded| {
            STANDARD.decode(encoded).is_ok_and(|tag| self.mac(id, timestamp, body).verify_slice(&tag).is_ok())
        });
        if !valid {
            return Err(WebhookSignatureError::NoValidSignature);
        }
        Ok(VerifiedWebhook { id: id.to_string(), timestamp })
    }

    fn mac(&self, id: &str, timestamp: u64, body: &[u8]) -> Hmac<Sha256> {
        // HMAC takes a key of any length; the fallback (an empty-key MAC that matches nothing
        // a sender with the real key signed) is never taken.
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.key).unwrap_or_else(|_| Hmac::<Sha256>::new(&Default::default()));
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        mac
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
        assert_eq!(verifier.sign(ID, TS, BODY), VECTOR);
        let unprefixed = WebhookVerifier::new(SECRET.trim_start_matches(SECRET_PREFIX)).unwrap();
        assert_eq!(unprefixed.sign(ID, TS, BODY), VECTOR);
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
        for bad in ["whsec_", "whsec_***", "", "not base64!"] {
            assert_eq!(WebhookVerifier::new(bad).unwrap_err(), WebhookSignatureError::InvalidSecret, "{bad}");
        }
        assert!(!format!("{:?}", WebhookVerifier::new(SECRET).unwrap()).contains("key"), "the key is never printed");
    }
}
