//! Workflow primitives, as pure rules: the **outbox** for external effects, the webhook
//! **inbox** with its domain guard, **jobs** whose steps persist their results, and
//! **retention by budget**. Like [`decide`](crate::decide), every rule is a function from what
//! is stored to what to write; storage adapters run them inside one transaction.

mod budget;
mod inbox;
mod job;
mod outbox;

use core::fmt;

use serde::{Deserialize, Serialize};

use crate::key::validate;
use crate::{IdempotencyKey, IdentityPart, KeyError, MAX_KEY_LEN, Record, ScopedKey, Timestamp};

pub use budget::{DuplicateCost, RetentionBudget};
pub use inbox::{
    Admission, DELIVERY_FORMAT, Delivery, DeliveryOutcome, DeliveryOutcomeKind, DeliveryRecord, DomainGuard,
    InboxAnswer, InboxDecision, InboxRefusal, NewerVersion, NewerVersionWithin, OBJECT_FORMAT, ObjectRecord,
    ValidTransition, accept, delivery_policy_name,
};
pub use job::{
    Compensation, JOB_FORMAT, JobAnswer, JobDecision, JobLease, JobRecord, JobRefusal, JobState, JobStateKind,
    StepRecord, claim_job,
};
pub use outbox::{
    Claim, EffectDoubt, EffectReport, MAX_REASON_LEN, MAX_REFERENCE_LEN, NewEffect, OUTBOX_FORMAT, OutboxItem,
    OutboxRefusal, OutboxState, OutboxStateKind, ProviderState, ProviderStateKind, backoff, check_effects_settled,
};

/// One entry of the reconciliation queue.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Attention {
    /// A record whose outcome is uncertain: `reconcile` it once you know.
    Record {
        /// Its scope and key.
        scoped: ScopedKey,
        /// The record.
        record: Record,
        /// When it became uncertain.
        since: Timestamp,
    },
    /// An outbox effect whose outcome is unknown: `retry_effect` it inside the
    /// provider's window, or query the provider and `resolve_effect`.
    Effect {
        /// The item.
        item: OutboxItem,
        /// When it became uncertain.
        since: Timestamp,
    },
}

impl Attention {
    /// When the entry became uncertain.
    pub fn since(&self) -> Timestamp {
        match self {
            Attention::Record { since, .. } | Attention::Effect { since, .. } => *since,
        }
    }

    /// Whether the entry is a record or an effect.
    pub fn kind(&self) -> AttentionKind {
        match self {
            Attention::Record { .. } => AttentionKind::Record,
            Attention::Effect { .. } => AttentionKind::Effect,
        }
    }

    /// The scope and key the entry waits under (an effect's is its operation's).
    pub fn scoped_key(&self) -> (&crate::Scope, &IdempotencyKey) {
        match self {
            Attention::Record { scoped, .. } => (&scoped.scope, &scoped.key),
            Attention::Effect { item, .. } => (&item.scope, &item.key),
        }
    }
}

/// What an [`Attention`] entry is: its `kind` where the queue crosses a boundary as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AttentionKind {
    /// [`Attention::Record`].
    Record,
    /// [`Attention::Effect`].
    Effect,
}

crate::names!(AttentionKind, "reconciliation entry kind", { Record => "record", Effect => "effect" });

/// Longest effect or step name, in bytes.
pub const MAX_EFFECT_NAME_LEN: usize = 64;

/// The name of an external effect of an operation (`authorize`, `capture`, `send_receipt`) or
/// of a job step: 1..=64 bytes of ASCII letters, digits, `_`, `-` and `.`, so that provider
/// keys built from it stay readable and unambiguous.
///
/// ```
/// use idemdb_core::{EffectName, IdempotencyKey};
/// let name = EffectName::new("authorize")?;
/// let local = IdempotencyKey::new("order-842")?;
/// assert_eq!(name.provider_key(&local, 1)?.as_str(), "order-842:authorize-v1");
/// assert!(EffectName::new("a:b").is_err());
/// # Ok::<(), idemdb_core::KeyError>(())
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct EffectName(String);

impl EffectName {
    /// Validates and wraps a name.
    ///
    /// # Errors
    /// [`KeyError`] (part [`IdentityPart::Effect`]) when it is empty, too long or has another
    /// byte.
    pub fn new(name: impl Into<String>) -> Result<Self, KeyError> {
        let name = name.into();
        validate(IdentityPart::Effect, &name, MAX_EFFECT_NAME_LEN, false)?;
        if let Some((offset, &byte)) =
            name.as_bytes().iter().enumerate().find(|(_, b)| !(b.is_ascii_alphanumeric() || b"_-.".contains(b)))
        {
            return Err(KeyError::InvalidByte { part: IdentityPart::Effect, byte, offset });
        }
        Ok(EffectName(name))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The provider idempotency key of this effect of the intent named by `local`. It is the
    /// same on every dispatch, so a provider that keeps keys answers a repeat with the first
    /// effect's result, and it is never over [`MAX_KEY_LEN`], so every valid local key can be
    /// dispatched:
    ///
    /// * the **short form** `<local>:<name>-v<version>` when it fits in 255 bytes;
    /// * else the **hashed form** `b3~<hash>~<name>-v<version>`, where `<hash>` is the 64
    ///   lower-case hex digits of the BLAKE3 hash of the short form it stands for (which may be
    ///   up to 255 + 71 bytes long). It has no `:`, and every short form has one, so the two
    ///   never collide; two hashed forms are equal only for equal short forms (unless BLAKE3
    ///   collides). At most 3 + 64 + 1 + 64 + 2 + 5 = 139 bytes.
    ///
    /// ```
    /// use idemdb_core::{EffectName, IdempotencyKey};
    /// let charge = EffectName::new("charge")?;
    /// let short = IdempotencyKey::new("k".repeat(245))?;
    /// assert_eq!(charge.provider_key(&short, 1)?.as_str(), format!("{}:charge-v1", "k".repeat(245)));
    /// let long = IdempotencyKey::new("k".repeat(246))?;
    /// let hashed = charge.provider_key(&long, 1)?;
    /// assert!(hashed.as_str().starts_with("b3~") && hashed.as_str().ends_with("~charge-v1"));
    /// assert_eq!(hashed.as_str().len(), 3 + 64 + 10);
    /// # Ok::<(), idemdb_core::KeyError>(())
    /// ```
    ///
    /// # Errors
    /// None in practice: both forms are visible ASCII within the limit (the type stays a
    /// `Result` for the key rules it applies).
    pub fn provider_key(&self, local: &IdempotencyKey, version: u16) -> Result<IdempotencyKey, KeyError> {
        let short = format!("{}:{}-v{version}", local.as_str(), self.0);
        if short.len() <= MAX_KEY_LEN {
            return IdempotencyKey::new(short);
        }
        let hash = blake3::hash(short.as_bytes()).to_hex();
        IdempotencyKey::new(format!("{HASHED_KEY_PREFIX}{hash}~{}-v{version}", self.0))
    }
}

/// The start of a hashed provider key (see [`EffectName::provider_key`]).
pub const HASHED_KEY_PREFIX: &str = "b3~";

impl TryFrom<String> for EffectName {
    type Error = KeyError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        EffectName::new(value)
    }
}

impl From<EffectName> for String {
    fn from(value: EffectName) -> Self {
        value.0
    }
}

impl fmt::Debug for EffectName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EffectName({:?})", self.0)
    }
}

impl fmt::Display for EffectName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `len:u8 · a · len:u8 · b` for two parts of at most 255 bytes each: an injective table key.
pub(crate) fn encode_pair(a: &str, b: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + a.len() + b.len());
    for part in [a, b] {
        // Validation caps both parts at 255 bytes.
        out.push(u8::try_from(part.len()).unwrap_or(u8::MAX));
        out.extend_from_slice(part.as_bytes());
    }
    out
}

/// Decodes [`encode_pair`].
pub(crate) fn decode_pair(bytes: &[u8]) -> Option<(&str, &str)> {
    let (&a_len, rest) = bytes.split_first()?;
    let (a, rest) = rest.split_at_checked(usize::from(a_len))?;
    let (&b_len, b) = rest.split_first()?;
    if b.len() != usize::from(b_len) {
        return None;
    }
    Some((core::str::from_utf8(a).ok()?, core::str::from_utf8(b).ok()?))
}
