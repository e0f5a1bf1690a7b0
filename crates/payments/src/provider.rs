//! A simulated external payment provider: its own database file (a remote system, so its
//! writes are never in the service's transaction), idempotent by the provider key it is
//! given, and counting every call.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde_json::{Value, json};

/// `(tenant, provider key)` → the charge as JSON, with its call count.
const CHARGES: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("provider_charges");

/// The provider failed (its storage, in this simulation).
#[derive(Debug, thiserror::Error)]
#[error("provider failed: {0}")]
pub struct ProviderError(String);

impl ProviderError {
    fn of(error: impl std::fmt::Display) -> Self {
        ProviderError(error.to_string())
    }
}

/// One charge request.
#[derive(Debug, Clone)]
pub struct ChargeRequest {
    /// The merchant account (the service's tenant): provider keys are per account.
    pub tenant: String,
    /// The provider's idempotency key, derived from the service's key (`<key>:charge-v1`).
    pub provider_key: String,
    /// Decimal amount.
    pub amount: String,
    /// ISO 4217 currency.
    pub currency: String,
    /// Destination account.
    pub destination: String,
}

/// The simulated provider.
#[derive(Clone)]
pub struct Provider {
    db: Arc<Database>,
    latency: Duration,
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Provider").field("latency", &self.latency).finish_non_exhaustive()
    }
}

impl Provider {
    /// Opens (or creates) the provider's database at `path`; each call takes `latency`.
    ///
    /// # Errors
    /// The database could not be opened.
    pub fn open(path: &Path, latency: Duration) -> Result<Provider, ProviderError> {
        let db = Database::create(path).map_err(ProviderError::of)?;
        Ok(Provider { db: Arc::new(db), latency })
    }

    /// Charges, idempotently by `(tenant, provider_key)`: a repeated key returns the first
    /// charge (as a real provider does) and counts the call. The charge is durable before
    /// this returns.
    ///
    /// # Errors
    /// The provider's storage failed; whether the charge happened is then unknown.
    pub async fn charge(&self, request: ChargeRequest) -> Result<Value, ProviderError> {
        tokio::time::sleep(self.latency).await;
        let db = Arc::clone(&self.db);
        blocking::unblock(move || charge(&db, &request)).await
    }

    /// Every charge of `tenant`, with its call count.
    ///
    /// # Errors
    /// The provider's storage failed.
    pub fn charges(&self, tenant: &str) -> Result<Vec<Value>, ProviderError> {
        let read = self.db.begin_read().map_err(ProviderError::of)?;
        let table = match read.open_table(CHARGES) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(error) => return Err(ProviderError::of(error)),
        };
        let mut charges = Vec::new();
        for entry in table.range((tenant, "")..).map_err(ProviderError::of)? {
            let (key, value) = entry.map_err(ProviderError::of)?;
            if key.value().0 != tenant {
                break;
            }
            charges.push(serde_json::from_slice(value.value()).map_err(ProviderError::of)?);
        }
        Ok(charges)
    }
}

fn charge(db: &Database, request: &ChargeRequest) -> Result<Value, ProviderError> {
    let tx = db.begin_write().map_err(ProviderError::of)?;
    let charge = {
        let mut table = tx.open_table(CHARGES).map_err(ProviderError::of)?;
        let key = (request.tenant.as_str(), request.provider_key.as_str());
        let existing: Option<Value> = match table.get(key).map_err(ProviderError::of)? {
            Some(value) => Some(serde_json::from_slice(value.value()).map_err(ProviderError::of)?),
            None => None,
        };
        let charge = match existing {
            Some(mut charge) => {
                let calls = charge["calls"].as_u64().unwrap_or(0) + 1;
                charge["calls"] = calls.into();
                charge
            }
            None => {
                let id = charge_id(&request.tenant, &request.provider_key);
                json!({
                    "id": id,
                    "provider_key": request.provider_key,
                    "amount": request.amount,
                    "currency": request.currency,
                    "destination": request.destination,
                    "calls": 1,
                })
            }
        };
        let bytes = serde_json::to_vec(&charge).map_err(ProviderError::of)?;
        table.insert(key, bytes.as_slice()).map_err(ProviderError::of)?;
        charge
    };
    tx.commit().map_err(ProviderError::of)?;
    Ok(charge)
}

/// A charge id: stable for the account and provider key (FNV-1a, no dependency needed).
fn charge_id(tenant: &str, provider_key: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in tenant.bytes().chain([0]).chain(provider_key.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("ch_{hash:016x}")
}
