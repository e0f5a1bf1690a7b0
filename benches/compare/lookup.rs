//! Replay lookups: a retry of a finished request on a store of many completed records.
//!
//! idemdb answers `reserve(same key, same fingerprint)` with `Replay`; raw redb does
//! `begin_read` + `get`; SQLite a prepared primary-key `SELECT`. Same records, same random keys.

use std::path::Path;
use std::time::Duration;

use idemdb::redb::{ReadableDatabase, ReadableTable};
use idemdb::{Durability, Reservation, Reserve, ScopedKey, Store};
use idemdb_core::encode_record;

use crate::data::{self, Request, Res, Rng};
use crate::durable::{RAW, open_raw, open_store};
use crate::measure::{Series, Summary, timed_capped};
use crate::sqlite;

pub(crate) struct Lookup {
    pub(crate) records: u64,
    /// Default settings (audit on).
    pub(crate) idemdb: Summary,
    pub(crate) idemdb_no_audit: Summary,
    pub(crate) raw_redb: Summary,
    pub(crate) sqlite: Option<Summary>,
    pub(crate) build_secs: f64,
}

pub(crate) struct Sizes {
    pub(crate) records: u64,
    pub(crate) samples: usize,
    pub(crate) warmup: usize,
    pub(crate) cap: Duration,
}

pub(crate) fn run(dir: &Path, sizes: &Sizes) -> Res<Lookup> {
    let scope = data::scope()?;
    let now = crate::env::now_ms_u64();
    let expires = now + data::THIRTY_DAYS_MS;
    let built = std::time::Instant::now();

    // The same records for every system, inserted in key order.
    let ids = data::ids_in_key_order(&scope, sizes.records)?;
    // idemdb: completed records written in non-durable transactions, then flushed.
    let store_path = dir.join("lookup.redb");
    {
        let store = Store::builder().durability(Durability::Eventual).audit(false).open(&store_path)?;
        for chunk in ids.chunks(data::BUILD_BATCH) {
            store.write(|txn| -> Res<()> {
                for &i in chunk {
                    let request = data::request(&scope, i)?;
                    let record = data::completed_record(request.fingerprint, now, expires, data::result_body(i));
                    txn.import(&ScopedKey::new(scope.clone(), request.key), &record, false)?;
                }
                Ok(())
            })?;
        }
        store.flush()?;
    }
    // Raw redb: the same keys and record bytes in one table.
    let raw_path = dir.join("lookup-raw.redb");
    {
        let raw = open_raw(&raw_path)?;
        for chunk in ids.chunks(100_000) {
            let tx = raw.inner.begin_write()?;
            {
                let mut table = tx.open_table(RAW)?;
                for &i in chunk {
                    let request = data::request(&scope, i)?;
                    let record = data::completed_record(request.fingerprint, now, expires, data::result_body(i));
                    table.insert(request.encoded.as_slice(), encode_record(&record).as_slice())?;
                }
            }
            tx.commit()?;
        }
    }
    let mut sqlite_db = sqlite::Lookup::build(&dir.join("lookup.sqlite"), &ids, now as i64)?;
    let build_secs = built.elapsed().as_secs_f64();

    // The same random keys for every system.
    let mut rng = Rng::new(42);
    let total = sizes.warmup + sizes.samples;
    let keys: Vec<Request> = (0..total).map(|_| data::request(&scope, rng.below(sizes.records))).collect::<Res<_>>()?;
    let (warmup, samples) = keys.split_at(sizes.warmup);

    // Interleaved rounds, each on a freshly opened store, so that neither setting runs on
    // colder caches than the other.
    let mut idemdb_default = Series::new("idemdb replay (default: audit on)");
    let mut idemdb_no_audit = Series::new("idemdb replay, audit off");
    for _ in 0..LOOKUP_ROUNDS {
        replay(&store_path, true, warmup, samples, sizes.cap, &mut idemdb_default)?;
        replay(&store_path, false, warmup, samples, sizes.cap, &mut idemdb_no_audit)?;
    }
    let (idemdb_default, idemdb_no_audit) = (capped(&idemdb_default, samples), capped(&idemdb_no_audit, samples));

    let raw = open_raw(&raw_path)?;
    // Warm the page cache the way a long-running server's is: one pass over the table.
    for entry in raw.inner.begin_read()?.open_table(RAW)?.iter()? {
        std::hint::black_box(entry?.1.value().len());
    }
    let raw_get = |r: &Request| -> Res<()> {
        let read = raw.inner.begin_read()?;
        let table = read.open_table(RAW)?;
        let value = table.get(r.encoded.as_slice())?.ok_or("raw redb: key missing")?.value().to_vec();
        std::hint::black_box(value);
        Ok(())
    };
    timed_capped(warmup.len(), sizes.cap, None, |i| raw_get(&warmup[i]))?;
    let mut raw_series = Series::new("raw redb: begin_read + get");
    raw_series.push(timed_capped(samples.len(), sizes.cap, Some(&raw.counters), |i| raw_get(&samples[i]))?);
    drop(raw);

    let sqlite = match sqlite_db.as_mut() {
        Some(db) => {
            db.warm()?;
            let mut get = |r: &Request| -> Res<()> {
                let body = db.get(r)?.ok_or("SQLite: completed row missing")?;
                std::hint::black_box(body);
                Ok(())
            };
            timed_capped(warmup.len(), sizes.cap, None, |i| get(&warmup[i]))?;
            let mut series = Series::new("SQLite primary-key SELECT (prepared)");
            series.push(timed_capped(samples.len(), sizes.cap, None, |i| get(&samples[i]))?);
            Some(series.summary())
        }
        None => None,
    };

    Ok(Lookup {
        records: sizes.records,
        idemdb: idemdb_default,
        idemdb_no_audit,
        raw_redb: raw_series.summary(),
        sqlite,
        build_secs,
    })
}

/// Rounds of replays per setting (each reopens the store).
const LOOKUP_ROUNDS: usize = 3;

/// A series' summary, noting when rounds stopped at the time cap.
fn capped(series: &Series, samples: &[Request]) -> Summary {
    let summary = series.summary();
    if summary.ops < (samples.len() * LOOKUP_ROUNDS) as u64 {
        summary.with_note("stopped at the time cap".to_string())
    } else {
        summary
    }
}

/// Opens the lookup store (default durability) and times one round of replays into `series`.
fn replay(
    path: &Path,
    audit: bool,
    warmup: &[Request],
    samples: &[Request],
    cap: Duration,
    series: &mut Series,
) -> Res<()> {
    let scope = data::scope()?;
    let store = open_store(path, audit)?;
    // Warm the page cache: `stats` reads every record and index entry.
    store.inner.stats()?;
    let mut wrong = 0u64;
    let mut check = |r: &Request| -> Res<()> {
        match store.inner.reserve(Reserve::new(&scope, &r.key, &r.fingerprint))? {
            Reservation::Replay { body, .. } => {
                std::hint::black_box(body);
            }
            _ => wrong += 1,
        }
        Ok(())
    };
    timed_capped(warmup.len(), cap, None, |i| check(&warmup[i]))?;
    series.push(timed_capped(samples.len(), cap, Some(&store.counters), |i| check(&samples[i]))?);
    if wrong > 0 {
        return Err(format!("replay (audit {audit}): {wrong} lookups did not replay").into());
    }
    Ok(())
}
