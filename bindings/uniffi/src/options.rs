//! How a store is opened: policies per operation (lease, replay window, result limit, what an
//! expired lease means) and whether to give up a lost journal. The core's defaults apply to
//! whatever is left out.

use std::collections::HashMap;
use std::time::Duration;

use idemdb::{ErrorCode, ExpiredLease, Named, Policy};

use crate::IdemdbError;

/// The policy of an operation; a field left out (`null` / `None`) keeps the core's default
/// (a 60 s lease, 30 days of replay, a year of tombstone, 1 MiB results, `uncertain`).
#[derive(Debug, Clone, Default, PartialEq, Eq, uniffi::Record)]
pub struct PolicySettings {
    /// How long a lease lasts before it must be [renewed](crate::IdemStore::renew), in
    /// milliseconds (at least 1).
    #[uniffi(default)]
    pub lease_ttl_ms: Option<u64>,
    /// How long a completed or definitively failed result is replayed, in milliseconds.
    #[uniffi(default)]
    pub response_ttl_ms: Option<u64>,
    /// How long the tombstone is kept after the response expires, in milliseconds.
    #[uniffi(default)]
    pub tombstone_ttl_ms: Option<u64>,
    /// The largest result or failure body that may be stored, in bytes.
    #[uniffi(default)]
    pub max_result_bytes: Option<u64>,
    /// What a retry that finds an expired lease means: `uncertain` (the default: the holder may
    /// have had an effect, so the record waits to be reconciled) or `takeover` (only for
    /// operations whose effects are local and transactional).
    #[uniffi(default)]
    pub expired_lease: Option<String>,
}

impl PolicySettings {
    /// The core's policy: the default with these settings applied.
    pub(crate) fn to_core(&self) -> Result<Policy, IdemdbError> {
        let mut policy = Policy::default();
        if let Some(ms) = self.lease_ttl_ms {
            policy = policy.with_lease_ttl(Duration::from_millis(ms));
        }
        if let Some(ms) = self.response_ttl_ms {
            policy = policy.with_response_ttl(Duration::from_millis(ms));
        }
        if let Some(ms) = self.tombstone_ttl_ms {
            policy = policy.with_tombstone_ttl(Duration::from_millis(ms));
        }
        if let Some(bytes) = self.max_result_bytes {
            let bytes = usize::try_from(bytes).map_err(|_| {
                IdemdbError::new(ErrorCode::InvalidPolicy, format!("max_result_bytes {bytes} is too large"))
            })?;
            policy = policy.with_max_result_bytes(bytes);
        }
        if let Some(rule) = &self.expired_lease {
            let rule = ExpiredLease::parse_name(rule)
                .map_err(|error| IdemdbError::new(ErrorCode::UnknownName, format!("expired_lease: {error}")))?;
            policy = policy.with_expired_lease(rule);
        }
        Ok(policy)
    }

    /// Every setting of `policy`, as the store applies it.
    pub(crate) fn from_core(policy: &Policy) -> Self {
        let millis = |duration: Duration| u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        PolicySettings {
            lease_ttl_ms: Some(millis(policy.lease_ttl())),
            response_ttl_ms: Some(millis(policy.response_ttl())),
            tombstone_ttl_ms: Some(millis(policy.tombstone_ttl())),
            max_result_bytes: Some(u64::try_from(policy.max_result_bytes()).unwrap_or(u64::MAX)),
            expired_lease: Some(policy.expired_lease().as_str().to_string()),
        }
    }
}

/// How [`crate::IdemStore::open_with`] opens a store. Every field may be left out.
#[derive(Debug, Clone, Default, PartialEq, Eq, uniffi::Record)]
pub struct StoreOptions {
    /// The policy of operations without their own.
    #[uniffi(default)]
    pub default_policy: Option<PolicySettings>,
    /// The policy of each named operation (`create_payment` → its settings).
    #[uniffi(default)]
    pub policies: HashMap<String, PolicySettings>,
    /// Opens a store whose journal should hold acknowledged commits but is missing, damaged or
    /// another store's, **giving up the commits it held** (the store opens at its last
    /// checkpoint; [`crate::IdemStore::journal_recovery`] says what was given up and where the
    /// old journal was set aside). Off by default: without it such a store is refused with
    /// `IDEMDB_CORRUPT`, and nothing is lost. A decision for a person, after the journal could
    /// not be put back.
    #[uniffi(default)]
    pub discard_lost_journal: bool,
}

impl StoreOptions {
    /// The core's builder with these options.
    pub(crate) fn builder(&self) -> Result<idemdb::StoreBuilder, IdemdbError> {
        let mut builder = idemdb::Store::builder().discard_lost_journal(self.discard_lost_journal);
        if let Some(policy) = &self.default_policy {
            builder = builder.default_policy(policy.to_core()?);
        }
        for (operation, policy) in &self.policies {
            builder = builder.policy(operation.clone(), policy.to_core()?);
        }
        Ok(builder)
    }
}
