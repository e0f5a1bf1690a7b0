//! One reservation request: what every backend's `reserve` takes.

use crate::key::{IdempotencyKey, KeyError, Scope, validate_correlation};
use crate::{Fingerprint, NewEffect};

/// A request to reserve `(scope, key)` for a request with `fingerprint`: the one argument of
/// every backend's `reserve` (`Store`, `Txn`, `AsyncStore` and the store interface on redb;
/// `PgStore` and `PgTxn` on PostgreSQL).
///
/// Two optional parts: a **correlation id**, recorded in the audit trail and log events, and
/// checked when it is given here (so no backend can forget to check it), and **effects** to
/// enqueue in the outbox in the same transaction when the key is acquired (an acquired
/// reservation has its effects in the outbox; any other answer enqueues nothing).
///
/// ```
/// use idemdb_core::{Fingerprint, IdempotencyKey, Reserve, Scope};
///
/// let (scope, key) = (Scope::new("acme", "create_payment")?, IdempotencyKey::new("order-842")?);
/// let fingerprint = Fingerprint::from_bytes([1; 32]);
/// let request = Reserve::new(&scope, &key, &fingerprint).traced("req-7f3a")?;
/// assert_eq!(request.correlation(), Some("req-7f3a"));
/// assert!(Reserve::new(&scope, &key, &fingerprint).traced("").is_err(), "checked when given");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a request does nothing until a store's `reserve` takes it"]
pub struct Reserve<'a> {
    scope: &'a Scope,
    key: &'a IdempotencyKey,
    fingerprint: &'a Fingerprint,
    correlation: Option<&'a str>,
    effects: Vec<NewEffect>,
}

impl<'a> Reserve<'a> {
    /// Reserves `(scope, key)` for a request with `fingerprint`; no correlation id, no effects.
    pub fn new(scope: &'a Scope, key: &'a IdempotencyKey, fingerprint: &'a Fingerprint) -> Self {
        Reserve { scope, key, fingerprint, correlation: None, effects: Vec::new() }
    }

    /// Records `correlation` (a request id, a trace id) in the audit trail and log events.
    /// Takes an id or an `Option` of one (`None` records none), for code that may or may not
    /// have one.
    ///
    /// # Errors
    /// [`KeyError`] when the id is not a valid correlation id (1..=128 bytes of visible ASCII;
    /// see [`validate_correlation`]).
    pub fn traced(mut self, correlation: impl Into<Option<&'a str>>) -> Result<Self, KeyError> {
        let correlation = correlation.into();
        if let Some(id) = correlation {
            validate_correlation(id)?;
        }
        self.correlation = correlation;
        Ok(self)
    }

    /// Enqueues `effects` in the outbox in the reservation's transaction, when it acquires
    /// the key (a backend without the outbox refuses a request with effects).
    pub fn enqueuing(mut self, effects: Vec<NewEffect>) -> Self {
        self.effects = effects;
        self
    }

    /// The scope.
    pub fn scope(&self) -> &'a Scope {
        self.scope
    }

    /// The key.
    pub fn key(&self) -> &'a IdempotencyKey {
        self.key
    }

    /// The request's fingerprint.
    pub fn fingerprint(&self) -> &'a Fingerprint {
        self.fingerprint
    }

    /// The correlation id, checked when it was given.
    pub fn correlation(&self) -> Option<&'a str> {
        self.correlation
    }

    /// The effects to enqueue when the key is acquired.
    pub fn effects(&self) -> &[NewEffect] {
        &self.effects
    }

    /// The effects, taken out of the request.
    pub fn into_effects(self) -> Vec<NewEffect> {
        self.effects
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EffectName;

    #[test]
    fn a_correlation_id_is_checked_when_given_and_none_records_none() {
        let (scope, key, fp) =
            (Scope::new("t", "op").unwrap(), IdempotencyKey::new("k").unwrap(), Fingerprint::from_bytes([1; 32]));
        let plain = Reserve::new(&scope, &key, &fp);
        assert_eq!((plain.correlation(), plain.effects().len()), (None, 0));
        assert_eq!(Reserve::new(&scope, &key, &fp).traced(None).unwrap().correlation(), None);
        assert_eq!(Reserve::new(&scope, &key, &fp).traced(Some("req-1")).unwrap().correlation(), Some("req-1"));
        for bad in ["", "with space", "é", &"x".repeat(129)] {
            assert!(Reserve::new(&scope, &key, &fp).traced(bad).is_err(), "{bad:?}");
        }
        let effect = NewEffect { effect: EffectName::new("charge").unwrap(), version: 1, payload: b"{}".to_vec() };
        let request = Reserve::new(&scope, &key, &fp).enqueuing(vec![effect.clone()]);
        assert_eq!((request.scope(), request.key(), request.fingerprint()), (&scope, &key, &fp));
        assert_eq!(request.into_effects(), vec![effect]);
    }
}
