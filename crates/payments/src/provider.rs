//! A simulated external payment provider: its own storage (a remote system, so its writes are
//! never in the service's transaction), idempotent by the provider key it is given, and
//! counting every call.
//!
//! On redb the provider is a database file of its own (`provider.redb`). On PostgreSQL it is
//! table `sim_provider_charges` in the service's schema, written in transactions of its own:
//! every instance of the service then talks to the same provider, as instances of a real
//! service do.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use idemdb_postgres::PgStore;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde_json::{Value, json};

use crate::payment::PaymentRequest;

/// `(tenant, provider key)` → the charge as JSON, with its call count.
const CHARGES: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("provider_charges");

/// The provider's table on PostgreSQL, in the store's schema.
pub const PG_PROVIDER_TABLE: &str = "sim_provider_charges";

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
    /// The provider's idempotency key, derived from the service's key (`<key>:charge-v1`, the
    /// outbox item's provider key).
    pub provider_key: String,
    /// What to charge.
    pub payment: PaymentRequest,
}

/// The simulated provider.
#[derive(Clone)]
pub struct Provider {
    storage: Storage,
    latency: Duration,
    /// A call is applied within this long of its arrival or never (see
    /// [`settle_within`](Provider::settle_within)).
    settle: Duration,
    faults: Faults,
}

/// How long after its arrival the provider may still apply a call, by default: its latency
/// plus this.
pub const SETTLE_MARGIN: Duration = Duration::from_secs(1);

/// Faults injected to show recovery (none by default).
#[derive(Debug, Clone, Default)]
struct Faults {
    lose_responses_to: Option<String>,
    crash_after_reserve_to: Option<String>,
    /// A destination, and how many more reads of its charges' outbox items fail.
    failing_reads: Option<(String, Arc<AtomicU32>)>,
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Provider")
            .field("latency", &self.latency)
            .field("settle", &self.settle)
            .field("faults", &self.faults)
            .finish_non_exhaustive()
    }
}

/// Where the provider keeps its charges.
#[derive(Clone)]
enum Storage {
    Redb(Arc<Database>),
    Postgres(Arc<PgCharges>),
}

/// The provider's statements on PostgreSQL.
struct PgCharges {
    store: PgStore,
    charge: String,
    list: String,
}

impl Provider {
    /// A provider on `storage` whose calls take `latency`, with no faults and the default
    /// settle time.
    fn with_storage(storage: Storage, latency: Duration) -> Provider {
        Provider { storage, latency, settle: latency + SETTLE_MARGIN, faults: Faults::default() }
    }

    /// Opens (or creates) the provider's database at `path`; each call takes `latency`.
    ///
    /// # Errors
    /// The database could not be opened.
    pub fn open(path: &Path, latency: Duration) -> Result<Provider, ProviderError> {
        let db = Database::create(path).map_err(ProviderError::of)?;
        Ok(Provider::with_storage(Storage::Redb(Arc::new(db)), latency))
    }

    /// A provider that keeps its charges in memory (lost when it is dropped); each call takes
    /// `latency`. For benchmarks: a remote provider whose disk is not the service's.
    ///
    /// # Errors
    /// The in-memory database could not be made.
    pub fn in_memory(latency: Duration) -> Result<Provider, ProviderError> {
        let db = Database::builder()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .map_err(ProviderError::of)?;
        Ok(Provider::with_storage(Storage::Redb(Arc::new(db)), latency))
    }

    /// The provider in table [`PG_PROVIDER_TABLE`] of `store`'s schema (created if missing),
    /// written in transactions of its own; each call takes `latency`.
    ///
    /// # Errors
    /// The table could not be created.
    pub async fn postgres(store: PgStore, latency: Duration) -> Result<Provider, ProviderError> {
        let table = format!("\"{}\".{PG_PROVIDER_TABLE}", store.schema());
        let create = format!(
            "CREATE TABLE IF NOT EXISTS {table} (
                tenant text COLLATE \"C\" NOT NULL,
                provider_key text COLLATE \"C\" NOT NULL,
                charge jsonb NOT NULL,
                calls bigint NOT NULL,
                PRIMARY KEY (tenant, provider_key)
            )"
        );
        crate::pg_backend::create_table(&store, &table, &create).await.map_err(ProviderError::of)?;
        // A repeated key counts the call and returns the first charge.
        let charge = format!(
            "INSERT INTO {table} AS c (tenant, provider_key, charge, calls) VALUES ($1, $2, $3::text::jsonb, 1)
             ON CONFLICT (tenant, provider_key) DO UPDATE SET calls = c.calls + 1
             RETURNING c.charge::text, c.calls"
        );
        let list = format!("SELECT charge::text, calls FROM {table} WHERE tenant = $1 ORDER BY provider_key");
        let storage = Storage::Postgres(Arc::new(PgCharges { store, charge, list }));
        Ok(Provider::with_storage(storage, latency))
    }

    /// The provider's settle time: a call is applied within `settle` of its arrival or never
    /// (a call still waiting for the provider's storage then is dropped, uncharged, and its
    /// caller gets an error). Its latency plus [`SETTLE_MARGIN`] by default. This is what makes
    /// the provider's "no such charge" a fact once `settle` has passed since a call: the
    /// service's policy says the same
    /// ([`Policy::with_provider_settle_time`](idemdb_core::Policy::with_provider_settle_time)),
    /// and an effect is not resolved failed, nor asked about by the reconciler, before it.
    pub fn settle_within(mut self, settle: Duration) -> Provider {
        self.settle = settle;
        self
    }

    /// A fault to show reconciliation: charges to `destination` are made (and counted), then
    /// their answer is lost on the way back, as when a connection drops after the provider
    /// processed the request. The caller cannot tell whether the charge happened.
    pub fn lose_responses_to(mut self, destination: impl Into<String>) -> Provider {
        self.faults.lose_responses_to = Some(destination.into());
        self
    }

    /// A fault to show automatic recovery: the service process aborts (as `kill -9` would)
    /// when a payment to `destination` has reserved its key — its charge enqueued in the same
    /// commit — and before the dispatcher sent the charge. The next process dispatches it.
    pub fn crash_after_reserve_to(mut self, destination: impl Into<String>) -> Provider {
        self.faults.crash_after_reserve_to = Some(destination.into());
        self
    }

    /// A fault to show that an unreadable store never releases a reserved key: the next
    /// `count` reads of the outbox item of a payment to `destination` (the handler's, right
    /// after the reservation enqueued the charge) fail as a database outage makes them fail.
    pub fn fail_reads_after_reserve_to(mut self, destination: impl Into<String>, count: u32) -> Provider {
        self.faults.failing_reads = Some((destination.into(), Arc::new(AtomicU32::new(count))));
        self
    }

    /// Whether the fault of [`fail_reads_after_reserve_to`](Provider::fail_reads_after_reserve_to)
    /// fails this read of a payment to `destination` (each call uses up one failure).
    pub fn read_fails_after_reserve(&self, destination: &str) -> bool {
        let Some((faulty, left)) = &self.faults.failing_reads else { return false };
        faulty == destination
            && left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| left.checked_sub(1)).is_ok()
    }

    /// Whether the fault of [`crash_after_reserve_to`](Provider::crash_after_reserve_to)
    /// applies to a payment to `destination`.
    pub fn crashes_after_reserve(&self, destination: &str) -> bool {
        self.faults.crash_after_reserve_to.as_deref() == Some(destination)
    }

    /// Charges, idempotently by `(tenant, provider_key)`: a repeated key returns the first
    /// charge (as a real provider does) and counts the call. The charge is durable before
    /// this returns.
    ///
    /// As at a remote provider, a call that has started goes on when its caller stops waiting
    /// (a dispatcher's deadline, a dropped future): the charge is made after the latency all
    /// the same, and only a lookup ([`find`](Provider::find)) tells the caller it happened.
    ///
    /// # Errors
    /// The provider's storage failed, or its answer was lost
    /// ([`lose_responses_to`](Provider::lose_responses_to)); whether the charge happened is
    /// then unknown.
    pub async fn charge(&self, request: ChargeRequest) -> Result<Value, ProviderError> {
        let provider = self.clone();
        tokio::spawn(async move { provider.process(request).await }).await.map_err(ProviderError::of)?
    }

    /// The provider's side of one call: after the latency, the charge is made (or found).
    async fn process(&self, request: ChargeRequest) -> Result<Value, ProviderError> {
        let apply_by = Instant::now() + self.settle;
        tokio::time::sleep(self.latency).await;
        let lost = self.faults.lose_responses_to.as_deref() == Some(request.payment.destination.as_str());
        let charge = match &self.storage {
            Storage::Redb(db) => {
                let db = Arc::clone(db);
                blocking::unblock(move || charge(&db, &request, apply_by)).await?
            }
            Storage::Postgres(pg) => {
                in_time(apply_by)?;
                pg.charge(&request).await?
            }
        };
        if lost {
            return Err(ProviderError("the connection closed before the provider's answer arrived".into()));
        }
        Ok(charge)
    }

    /// The charge of `tenant` made under `provider_key`, if any: the provider's lookup by
    /// idempotency key, which the reconciler queries before it decides an uncertain charge.
    /// A lookup is not a call (it charges nothing and counts nothing).
    ///
    /// # Errors
    /// The provider's storage failed.
    pub async fn find(&self, tenant: &str, provider_key: &str) -> Result<Option<Value>, ProviderError> {
        let charges = self.charges(tenant).await?;
        Ok(charges.into_iter().find(|charge| charge["provider_key"] == provider_key))
    }

    /// Every charge of `tenant`, with its call count.
    ///
    /// # Errors
    /// The provider's storage failed.
    pub async fn charges(&self, tenant: &str) -> Result<Vec<Value>, ProviderError> {
        match &self.storage {
            Storage::Redb(db) => {
                let (db, tenant) = (Arc::clone(db), tenant.to_string());
                blocking::unblock(move || charges(&db, &tenant)).await
            }
            Storage::Postgres(pg) => pg.charges(tenant).await,
        }
    }
}

impl PgCharges {
    async fn charge(&self, request: &ChargeRequest) -> Result<Value, ProviderError> {
        let new = json!({
            "id": charge_id(&request.tenant, &request.provider_key),
            "provider_key": request.provider_key,
            "amount": request.payment.amount,
            "currency": request.payment.currency,
            "destination": request.payment.destination,
        })
        .to_string();
        let txn = self.store.begin().await.map_err(ProviderError::of)?;
        let row = txn.client().query_one(&self.charge, &[&request.tenant, &request.provider_key, &new]).await;
        let row = match row {
            Ok(row) => row,
            Err(error) => {
                let _ = txn.rollback().await;
                return Err(ProviderError::of(error));
            }
        };
        txn.commit().await.map_err(ProviderError::of)?;
        with_calls(&row)
    }

    async fn charges(&self, tenant: &str) -> Result<Vec<Value>, ProviderError> {
        let txn = self.store.begin().await.map_err(ProviderError::of)?;
        let rows = txn.client().query(&self.list, &[&tenant]).await;
        // A read: nothing to commit.
        let _ = txn.rollback().await;
        rows.map_err(ProviderError::of)?.iter().map(with_calls).collect()
    }
}

/// A charge row (`charge::text`, `calls`) as the JSON the redb provider stores.
fn with_calls(row: &idemdb_postgres::tokio_postgres::Row) -> Result<Value, ProviderError> {
    let charge: String = row.try_get(0).map_err(ProviderError::of)?;
    let calls: i64 = row.try_get(1).map_err(ProviderError::of)?;
    let mut charge: Value = serde_json::from_str(&charge).map_err(ProviderError::of)?;
    let object = charge.as_object_mut().ok_or(ProviderError("a stored charge is not a JSON object".into()))?;
    object.insert("calls".into(), calls.into());
    Ok(charge)
}

fn charges(db: &Database, tenant: &str) -> Result<Vec<Value>, ProviderError> {
    let read = db.begin_read().map_err(ProviderError::of)?;
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

/// Refuses a call whose settle time has passed: it is dropped, never applied.
fn in_time(apply_by: Instant) -> Result<(), ProviderError> {
    if Instant::now() > apply_by {
        return Err(ProviderError(
            "the call waited past the provider's settle time; it was dropped and nothing was charged".into(),
        ));
    }
    Ok(())
}

fn charge(db: &Database, request: &ChargeRequest, apply_by: Instant) -> Result<Value, ProviderError> {
    let tx = db.begin_write().map_err(ProviderError::of)?;
    // Checked once this call holds the provider's writer: nothing is applied after it.
    in_time(apply_by)?;
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
                    "amount": request.payment.amount,
                    "currency": request.payment.currency,
                    "destination": request.payment.destination,
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
