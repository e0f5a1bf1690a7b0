//! Per-operation policy: how long leases, responses and tombstones live.

use core::time::Duration;

/// Default lease TTL: long enough for a payment provider call with retries inside it.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(60);
/// Default response TTL: 30 days.
pub const DEFAULT_RESPONSE_TTL: Duration = Duration::from_secs(30 * 24 * 3600);
/// Default tombstone TTL, counted from the response's expiry: 365 days.
pub const DEFAULT_TOMBSTONE_TTL: Duration = Duration::from_secs(365 * 24 * 3600);
/// Default limit on a stored result or failure body: 1 MiB.
pub const DEFAULT_MAX_RESULT_BYTES: usize = 1024 * 1024;
/// Default provider key-retention window: 24 hours (what common payment providers keep an
/// idempotency key for; set the real figure of each provider's contract per operation).
pub const DEFAULT_PROVIDER_KEY_RETENTION: Duration = Duration::from_secs(24 * 3600);
/// Default settle time of a provider call: 60 seconds. A call may still be applied by the
/// provider after its caller stopped waiting (a timeout, a dropped connection); this is how long
/// after a dispatch the provider may still apply it. 60 s is the request timeout most HTTP
/// front ends (load balancers, reverse proxies) enforce; set each provider's real figure per
/// operation with [`Policy::with_provider_settle_time`].
pub const DEFAULT_PROVIDER_SETTLE_TIME: Duration = Duration::from_secs(60);
/// Default first backoff of a retryable dispatch: 1 second, doubled per dispatch.
pub const DEFAULT_DISPATCH_BACKOFF: Duration = Duration::from_secs(1);
/// Default longest backoff of a retryable dispatch: 1 hour.
pub const DEFAULT_MAX_DISPATCH_BACKOFF: Duration = Duration::from_secs(3600);
/// The largest result limit a policy may set: 63 MiB. A stored record (body and bookkeeping)
/// must stay under the record decoder's 64 MiB limit, or it could be written but never read
/// again (and every listing of the store would fail on it).
pub const MAX_RESULT_BYTES_LIMIT: usize = 63 * 1024 * 1024;

/// What a retry that finds an in-progress record with an expired lease means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ExpiredLease {
    /// The attempt's outcome is unknown: the record becomes *uncertain* and every retry is
    /// refused until [`reconcile`](crate::reconcile) resolves it. The default, and the only safe
    /// choice when the operation has an external effect (a charge, an e-mail).
    #[default]
    Uncertain,
    /// The retry takes the record over with a new, higher fence; the old lease holder can no
    /// longer complete. Opt in only when the operation's effects are local and transactional
    /// (for example written in the same redb transaction as the completion), so an attempt that
    /// died left no effect behind.
    Takeover,
    /// The operation's external effects are all declared through the outbox, so the store can
    /// tell whether the attempt that died had any: with **no effect enqueued** for the key the
    /// attempt is provably effect-free and the retry takes the record over (as
    /// [`Takeover`](ExpiredLease::Takeover)); with one enqueued (pending, dispatched or settled)
    /// the record becomes uncertain (as [`Uncertain`](ExpiredLease::Uncertain)) and the outbox
    /// and its reconciler decide. Choose it when every effect of the operation goes through the
    /// outbox and nothing else leaves the process before the effect is enqueued.
    TakeoverIfNoEffect,
}

/// A policy was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// The lease TTL must be at least one millisecond.
    #[error("lease TTL must be at least 1 ms")]
    ZeroLeaseTtl,
    /// The result limit must be at least one byte.
    #[error("result limit must be at least 1 byte")]
    ZeroResultLimit,
    /// The result limit is above [`MAX_RESULT_BYTES_LIMIT`].
    #[error("result limit {limit} is above the largest a record can hold ({max} bytes)")]
    ResultLimitTooLarge {
        /// The limit asked for.
        limit: usize,
        /// [`MAX_RESULT_BYTES_LIMIT`].
        max: usize,
    },
    /// A retention budget whose delays and tombstone are all zero: a completed key would be
    /// forgotten at once, and its very next retry would run the operation again.
    #[error("the retention budget is zero: a completed key would be forgotten at once and run again on its next retry")]
    ForgetsAtOnce,
}

impl PolicyError {
    /// The stable code: [`ErrorCode::InvalidPolicy`](crate::ErrorCode::InvalidPolicy).
    pub fn code(&self) -> crate::ErrorCode {
        match self {
            PolicyError::ZeroLeaseTtl
            | PolicyError::ZeroResultLimit
            | PolicyError::ResultLimitTooLarge { .. }
            | PolicyError::ForgetsAtOnce => crate::ErrorCode::InvalidPolicy,
        }
    }
}

crate::coded!(PolicyError);

crate::names!(ExpiredLease, "expired-lease rule", {
    Uncertain => "uncertain",
    Takeover => "takeover",
    TakeoverIfNoEffect => "takeover-if-no-effect",
});

/// Retention and lease rules for one operation.
///
/// Records keep their expiry times from the moment they were written, so changing a policy
/// affects new writes only.
///
/// # Defaults, and why
/// Retention must cover the sum of every way a retry can arrive late:
/// *client retry window* (minutes to a day of backoff) + *queue redelivery* (message brokers
/// commonly keep messages up to 14 days) + *offline devices* (a phone off the network for a
/// week or two replays its outbox when it comes back) + *support replay* (an operator
/// re-submitting a request days later). That is about a month, so responses are replayed for
/// [30 days](DEFAULT_RESPONSE_TTL). After that only a tombstone remains (fingerprint and outcome
/// class, no body), kept for [another year](DEFAULT_TOMBSTONE_TTL): a very late retry is refused
/// as expired rather than executed twice, at a cost of about a hundred bytes a record.
/// Leases default to [60 seconds](DEFAULT_LEASE_TTL) and an expired lease makes the record
/// [uncertain](ExpiredLease::Uncertain).
///
/// ```
/// use std::time::Duration;
/// use idemdb_core::{ExpiredLease, Policy};
/// let policy = Policy::default()
///     .with_lease_ttl(Duration::from_secs(10))
///     .with_response_ttl(Duration::from_secs(24 * 3600))
///     .with_expired_lease(ExpiredLease::Takeover);
/// assert!(policy.validate().is_ok());
/// assert!(Policy::default().with_lease_ttl(Duration::ZERO).validate().is_err());
/// assert!(Policy::default().with_max_result_bytes(64 * 1024 * 1024).validate().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    lease_ttl: Duration,
    response_ttl: Duration,
    tombstone_ttl: Duration,
    expired_lease: ExpiredLease,
    max_result_bytes: usize,
    provider_key_retention: Duration,
    provider_settle_time: Duration,
    dispatch_backoff: Duration,
    max_dispatch_backoff: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            lease_ttl: DEFAULT_LEASE_TTL,
            response_ttl: DEFAULT_RESPONSE_TTL,
            tombstone_ttl: DEFAULT_TOMBSTONE_TTL,
            expired_lease: ExpiredLease::Uncertain,
            max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
            provider_key_retention: DEFAULT_PROVIDER_KEY_RETENTION,
            provider_settle_time: DEFAULT_PROVIDER_SETTLE_TIME,
            dispatch_backoff: DEFAULT_DISPATCH_BACKOFF,
            max_dispatch_backoff: DEFAULT_MAX_DISPATCH_BACKOFF,
        }
    }
}

impl Policy {
    /// Sets how long a lease lasts before it must be renewed.
    #[must_use]
    pub fn with_lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// Sets how long a completed or definitively failed result is replayed.
    #[must_use]
    pub fn with_response_ttl(mut self, ttl: Duration) -> Self {
        self.response_ttl = ttl;
        self
    }

    /// Sets how long the tombstone is kept after the response expires.
    #[must_use]
    pub fn with_tombstone_ttl(mut self, ttl: Duration) -> Self {
        self.tombstone_ttl = ttl;
        self
    }

    /// Sets what an expired lease means.
    #[must_use]
    pub fn with_expired_lease(mut self, rule: ExpiredLease) -> Self {
        self.expired_lease = rule;
        self
    }

    /// Sets the largest result or failure body that may be stored.
    #[must_use]
    pub fn with_max_result_bytes(mut self, limit: usize) -> Self {
        self.max_result_bytes = limit;
        self
    }

    /// Sets how long the external provider of this operation's effects keeps an idempotency
    /// key (its contract says). Past it, an outbox effect whose outcome is unknown is never
    /// sent again with the same key: the application queries the provider first.
    #[must_use]
    pub fn with_provider_key_retention(mut self, window: Duration) -> Self {
        self.provider_key_retention = window;
        self
    }

    /// Sets how long after a dispatch the provider of this operation's effects may still apply
    /// it (its contract says; [`DEFAULT_PROVIDER_SETTLE_TIME`] otherwise). Until that long has
    /// passed since an effect's last dispatch, a provider lookup that finds nothing cannot tell
    /// "not made" from "not yet": the effect cannot be resolved
    /// [`Failed`](crate::ProviderState::Failed) (it is refused with
    /// [`OutboxRefusal::MayStillLand`](crate::OutboxRefusal::MayStillLand)), and a reconciler
    /// waits before it asks. Zero suits a provider that applies a call before it answers and
    /// never after (an in-process one).
    ///
    /// ```
    /// use std::time::Duration;
    /// use idemdb_core::Policy;
    /// let policy = Policy::default().with_provider_settle_time(Duration::from_secs(5));
    /// assert_eq!(policy.provider_settle_time(), Duration::from_secs(5));
    /// assert_eq!(Policy::default().provider_settle_time(), idemdb_core::DEFAULT_PROVIDER_SETTLE_TIME);
    /// ```
    #[must_use]
    pub fn with_provider_settle_time(mut self, settle: Duration) -> Self {
        self.provider_settle_time = settle;
        self
    }

    /// Sets the backoff of retryable outbox dispatches: `first`, doubled per dispatch, at most
    /// `max`.
    #[must_use]
    pub fn with_dispatch_backoff(mut self, first: Duration, max: Duration) -> Self {
        self.dispatch_backoff = first;
        self.max_dispatch_backoff = max;
        self
    }

    /// Checks the policy.
    ///
    /// # Errors
    /// [`PolicyError`] for a zero lease TTL, or a result limit of zero or above
    /// [`MAX_RESULT_BYTES_LIMIT`].
    pub fn validate(&self) -> Result<(), PolicyError> {
        if self.lease_ttl < Duration::from_millis(1) {
            return Err(PolicyError::ZeroLeaseTtl);
        }
        if self.max_result_bytes == 0 {
            return Err(PolicyError::ZeroResultLimit);
        }
        if self.max_result_bytes > MAX_RESULT_BYTES_LIMIT {
            return Err(PolicyError::ResultLimitTooLarge { limit: self.max_result_bytes, max: MAX_RESULT_BYTES_LIMIT });
        }
        Ok(())
    }

    /// The lease TTL.
    pub fn lease_ttl(&self) -> Duration {
        self.lease_ttl
    }

    /// The response TTL.
    pub fn response_ttl(&self) -> Duration {
        self.response_ttl
    }

    /// The tombstone TTL (after the response TTL).
    pub fn tombstone_ttl(&self) -> Duration {
        self.tombstone_ttl
    }

    /// The provider's key-retention window.
    pub fn provider_key_retention(&self) -> Duration {
        self.provider_key_retention
    }

    /// How long after a dispatch the provider may still apply it
    /// ([`with_provider_settle_time`](Self::with_provider_settle_time)).
    pub fn provider_settle_time(&self) -> Duration {
        self.provider_settle_time
    }

    /// The first and the longest backoff of retryable outbox dispatches.
    pub fn dispatch_backoff(&self) -> (Duration, Duration) {
        (self.dispatch_backoff, self.max_dispatch_backoff)
    }

    /// What an expired lease means.
    pub fn expired_lease(&self) -> ExpiredLease {
        self.expired_lease
    }

    /// The largest storable result body.
    pub fn max_result_bytes(&self) -> usize {
        self.max_result_bytes
    }
}

/// The policies of a store: one per named operation, and a default for the rest. Both storage
/// adapters keep their policies in one of these, so the lookup and the check at open are the
/// same everywhere.
///
/// ```
/// use std::time::Duration;
/// use idemdb_core::{Policies, Policy};
/// let mut policies = Policies::default();
/// policies.set("create_payment", Policy::default().with_lease_ttl(Duration::from_secs(30)));
/// assert_eq!(policies.get("create_payment").lease_ttl(), Duration::from_secs(30));
/// assert_eq!(policies.get("refund"), policies.default_policy());
/// assert!(policies.validate().is_ok());
///
/// policies.set("broken", Policy::default().with_lease_ttl(Duration::ZERO));
/// let error = policies.validate().unwrap_err();
/// assert_eq!(error.operation.as_deref(), Some("broken"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policies {
    default: Policy,
    // Ordered, so that `validate` reports the same operation first on every run.
    by_operation: std::collections::BTreeMap<String, Policy>,
}

/// A policy of a [`Policies`] failed [`Policy::validate`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid policy for {}: {source}", .operation.as_deref().unwrap_or("operations without their own (the default)"))]
pub struct InvalidPolicy {
    /// The operation whose policy it is (`None`: the default policy).
    pub operation: Option<String>,
    /// What is wrong with it.
    #[source]
    pub source: PolicyError,
}

impl Policies {
    /// Sets the policy of `operation`.
    pub fn set(&mut self, operation: impl Into<String>, policy: Policy) {
        self.by_operation.insert(operation.into(), policy);
    }

    /// Sets the policy of operations without their own.
    pub fn set_default(&mut self, policy: Policy) {
        self.default = policy;
    }

    /// The policy that applies to `operation`.
    pub fn get(&self, operation: &str) -> &Policy {
        self.by_operation.get(operation).unwrap_or(&self.default)
    }

    /// The policy of operations without their own.
    pub fn default_policy(&self) -> &Policy {
        &self.default
    }

    /// The operations with a policy of their own, in name order.
    pub fn operations(&self) -> impl Iterator<Item = (&str, &Policy)> {
        self.by_operation.iter().map(|(operation, policy)| (operation.as_str(), policy))
    }

    /// Checks every policy (the default first, then the operations in name order).
    ///
    /// # Errors
    /// [`InvalidPolicy`] naming the first policy [`Policy::validate`] refuses.
    pub fn validate(&self) -> Result<(), InvalidPolicy> {
        self.default.validate().map_err(|source| InvalidPolicy { operation: None, source })?;
        for (operation, policy) in &self.by_operation {
            policy.validate().map_err(|source| InvalidPolicy { operation: Some(operation.clone()), source })?;
        }
        Ok(())
    }
}

impl InvalidPolicy {
    /// The stable code: [`ErrorCode::InvalidPolicy`](crate::ErrorCode::InvalidPolicy).
    pub fn code(&self) -> crate::ErrorCode {
        crate::ErrorCode::InvalidPolicy
    }
}
crate::coded!(InvalidPolicy);
