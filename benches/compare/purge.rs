//! Purge: turn expired results into tombstones, on stores of different sizes holding the same
//! number of expired records. The expiry index should make the cost follow the expired
//! records, not the stored ones.

use std::path::Path;
use std::time::{Duration, Instant};

use idemdb::{Durability, ManualClock, ScopedKey, Store};

use crate::backend::CountingBackend;
use crate::data::{self, Res, T0_MS};
use crate::durable::Counted;

/// One store size.
pub(crate) struct PurgeRun {
    pub(crate) stored: u64,
    pub(crate) expired: u64,
    pub(crate) tombstoned: u64,
    pub(crate) calls: u64,
    pub(crate) elapsed: Duration,
    pub(crate) syncs: u64,
    pub(crate) bytes: u64,
    pub(crate) build_secs: f64,
}

impl PurgeRun {
    pub(crate) fn secs_per_record(&self) -> f64 {
        self.elapsed.as_secs_f64() / self.tombstoned.max(1) as f64
    }
}

/// Builds a store of `stored` completed records of which `expired` (spread through the key
/// space) are past their response TTL, then times `purge_expired(budget)` until done.
pub(crate) fn run(dir: &Path, stored: u64, expired: u64, budget: usize) -> Res<PurgeRun> {
    let scope = data::scope()?;
    let path = dir.join(format!("purge-{stored}.redb"));
    let built = Instant::now();
    // Records completed at T0: every `stored / expired`-th one answers for an hour, the rest
    // for the default 30 days.
    let stride = (stored / expired.max(1)).max(1);
    let clock = ManualClock::new(T0_MS);
    {
        let store = Store::builder().clock(clock.clone()).durability(Durability::Eventual).audit(false).open(&path)?;
        for chunk in data::ids_in_key_order(&scope, stored)?.chunks(data::BUILD_BATCH) {
            store.write(|txn| -> Res<()> {
                for &i in chunk {
                    let request = data::request(&scope, i)?;
                    let short = i % stride == 0 && i / stride < expired;
                    let expires = if short { T0_MS + 3_600_000 } else { T0_MS + data::THIRTY_DAYS_MS };
                    let record = data::completed_record(request.fingerprint, T0_MS, expires, data::result_body(i));
                    txn.import(&ScopedKey::new(scope.clone(), request.key), &record, false)?;
                }
                Ok(())
            })?;
        }
        store.flush()?;
    }
    let build_secs = built.elapsed().as_secs_f64();

    // Two hours later, with the default settings (immediate durability, audit on). The two
    // hours pass while the store is closed, so the store would count them for retention only
    // after ten minutes of use confirm them (`docs/design.md`, Time); the clock here is known
    // to be right, which is what `trust_clock_at_open` says.
    clock.set(T0_MS + 2 * 3_600_000);
    let (backend, counters) = CountingBackend::open(&path)?;
    let store =
        Counted { inner: Store::builder().clock(clock).trust_clock_at_open(true).open_backend(backend)?, counters };
    let before = store.counters.snapshot();
    let start = Instant::now();
    let mut tombstoned = 0;
    let mut calls = 0;
    loop {
        let report = store.inner.purge_expired(budget)?;
        calls += 1;
        tombstoned += report.tombstoned;
        if !report.more {
            break;
        }
    }
    let elapsed = start.elapsed();
    let io = store.counters.snapshot().since(before);
    if tombstoned != expired {
        return Err(format!("purge of {stored}: tombstoned {tombstoned}, expected {expired}").into());
    }
    Ok(PurgeRun { stored, expired, tombstoned, calls, elapsed, syncs: io.syncs, bytes: io.bytes, build_secs })
}
