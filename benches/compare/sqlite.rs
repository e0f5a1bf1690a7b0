//! SQLite baselines: the table a user would write for idempotency keys, one transaction per
//! request, WAL with `synchronous=FULL` (durable) or `NORMAL` (not durable on power loss).
//!
//! Built only with the `sqlite` feature; without it every constructor returns `None` and the
//! SQLite rows print "skipped".

#[cfg(feature = "sqlite")]
pub(crate) use real::*;
#[cfg(not(feature = "sqlite"))]
pub(crate) use stub::*;

/// Why SQLite rows are missing from a build without the feature.
pub(crate) const SKIPPED: &str = "build with --features sqlite";

/// `PRAGMA synchronous` in WAL mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sync {
    /// fsync of the WAL at every commit: durable.
    Full,
    /// WAL fsync only at checkpoints: a power loss may lose recent commits.
    Normal,
}

/// Bytes a SQLite database takes after `VACUUM` and a truncating checkpoint.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
pub(crate) struct Space {
    /// st_blocks × 512 of the database and WAL files.
    pub(crate) file_blocks: u64,
    /// `page_count × page_size`.
    pub(crate) pages: u64,
}

#[cfg(feature = "sqlite")]
mod real {
    use std::path::Path;
    use std::sync::Barrier;
    use std::time::{Duration, Instant};

    use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

    use super::{Space, Sync};
    use crate::data::{OPERATION, Request, Res, TENANT};
    use crate::env::allocated_bytes;
    use crate::measure::ThreadRun;

    const SCHEMA: &str = "
        CREATE TABLE IF NOT EXISTS idem(
            tenant TEXT, operation TEXT, key TEXT,
            fingerprint BLOB, state INTEGER, result BLOB,
            fence INTEGER, attempts INTEGER,
            created_at INTEGER, updated_at INTEGER, expires_at INTEGER,
            PRIMARY KEY(tenant, operation, key));
        CREATE INDEX IF NOT EXISTS idem_expires ON idem(expires_at);
        CREATE TABLE IF NOT EXISTS app_payments(key TEXT PRIMARY KEY, body BLOB);";

    const SELECT: &str =
        "SELECT fingerprint, state, result, fence FROM idem WHERE tenant = ?1 AND operation = ?2 AND key = ?3";
    const INSERT: &str = "INSERT INTO idem(tenant, operation, key, fingerprint, state, result, fence, attempts, \
         created_at, updated_at, expires_at) VALUES (?1, ?2, ?3, ?4, 0, NULL, ?5, 1, ?5, ?5, NULL)";
    const INSERT_COMPLETED: &str = "INSERT INTO idem(tenant, operation, key, fingerprint, state, result, fence, \
         attempts, created_at, updated_at, expires_at) VALUES (?1, ?2, ?3, ?4, 1, ?5, ?6, 1, ?6, ?6, ?7)";
    const COMPLETE: &str = "UPDATE idem SET state = 1, result = ?4, updated_at = ?5, expires_at = ?6 \
         WHERE tenant = ?1 AND operation = ?2 AND key = ?3 AND state = 0";
    const APP_INSERT: &str = "INSERT INTO app_payments(key, body) VALUES (?1, ?2)";

    /// The SQLite library version.
    pub(crate) fn version() -> Option<String> {
        Some(rusqlite::version().to_string())
    }

    fn open(path: &Path, sync: Sync) -> Res<Connection> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(Duration::from_secs(60))?;
        let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |row| row.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(format!("SQLite refused WAL mode ({mode})").into());
        }
        conn.pragma_update(None, "synchronous", if sync == Sync::Full { "FULL" } else { "NORMAL" })?;
        conn.execute_batch(SCHEMA)?;
        Ok(conn)
    }

    /// Reserve: read the row, insert an in-progress one if absent — one transaction.
    fn reserve_in(conn: &mut Connection, request: &Request, now_ms: i64) -> Res<()> {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        {
            let existing: Option<i64> = tx
                .prepare_cached(SELECT)?
                .query_row(params![TENANT, OPERATION, request.key.as_str()], |row| row.get(1))
                .optional()?;
            if existing.is_some() {
                return Err("SQLite: key already reserved".into());
            }
            tx.prepare_cached(INSERT)?.execute(params![
                TENANT,
                OPERATION,
                request.key.as_str(),
                request.fingerprint.as_bytes().as_slice(),
                now_ms
            ])?;
        }
        tx.commit()?;
        Ok(())
    }

    /// One connection doing single-caller durable work.
    pub(crate) struct Durable {
        conn: Connection,
    }

    impl Durable {
        pub(crate) fn open(path: &Path, sync: Sync) -> Res<Option<Durable>> {
            Ok(Some(Durable { conn: open(path, sync)? }))
        }

        pub(crate) fn reserve(&mut self, request: &Request, now_ms: i64) -> Res<()> {
            reserve_in(&mut self.conn, request, now_ms)
        }

        /// Complete: store the result if the row is still in progress — one transaction.
        pub(crate) fn complete(&mut self, request: &Request, body: &[u8], now_ms: i64) -> Res<()> {
            let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let changed = tx.prepare_cached(COMPLETE)?.execute(params![
                TENANT,
                OPERATION,
                request.key.as_str(),
                body,
                now_ms,
                now_ms + crate::data::THIRTY_DAYS_MS as i64
            ])?;
            tx.commit()?;
            if changed == 1 { Ok(()) } else { Err("SQLite: complete found no in-progress row".into()) }
        }

        /// Reserve, the application's own insert and complete in one transaction.
        pub(crate) fn reserve_run_complete(&mut self, request: &Request, body: &[u8], now_ms: i64) -> Res<()> {
            let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            {
                let existing: Option<i64> = tx
                    .prepare_cached(SELECT)?
                    .query_row(params![TENANT, OPERATION, request.key.as_str()], |row| row.get(1))
                    .optional()?;
                if existing.is_some() {
                    return Err("SQLite: key already reserved".into());
                }
                tx.prepare_cached(INSERT)?.execute(params![
                    TENANT,
                    OPERATION,
                    request.key.as_str(),
                    request.fingerprint.as_bytes().as_slice(),
                    now_ms
                ])?;
                tx.prepare_cached(APP_INSERT)?.execute(params![request.key.as_str(), &body[..64]])?;
                tx.prepare_cached(COMPLETE)?.execute(params![
                    TENANT,
                    OPERATION,
                    request.key.as_str(),
                    body,
                    now_ms,
                    now_ms + crate::data::THIRTY_DAYS_MS as i64
                ])?;
            }
            tx.commit()?;
            Ok(())
        }
    }

    /// `threads` callers, each with its own connection, reserving distinct keys until
    /// `duration` has passed.
    pub(crate) fn concurrent(
        path: &Path,
        sync: Sync,
        threads: usize,
        duration: Duration,
        base: u64,
    ) -> Res<Option<Vec<ThreadRun>>> {
        // Create the schema once before the callers race to open.
        drop(open(path, sync)?);
        let scope = crate::data::scope()?;
        let barrier = Barrier::new(threads);
        let runs = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let barrier = &barrier;
                    let scope = &scope;
                    s.spawn(move || -> Res<ThreadRun> {
                        let mut conn = open(path, sync)?;
                        barrier.wait();
                        let start = Instant::now();
                        let deadline = start + duration;
                        let mut run = ThreadRun::default();
                        let mut j = 0u64;
                        while Instant::now() < deadline {
                            let request = crate::data::request(scope, base + ((t as u64) << 32) + j)?;
                            j += 1;
                            let t0 = Instant::now();
                            reserve_in(&mut conn, &request, crate::env::now_ms())?;
                            run.latencies.push(t0.elapsed().as_nanos() as u64);
                        }
                        run.ops = j;
                        run.finished = start.elapsed();
                        Ok(run)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().map_err(|_| "SQLite caller panicked")?).collect::<Res<Vec<_>>>()
        })?;
        Ok(Some(runs))
    }

    /// A table of completed rows for primary-key lookups.
    pub(crate) struct Lookup {
        conn: Connection,
    }

    impl Lookup {
        /// Inserts a completed row for each id, in the given order, with a 1 GiB page cache
        /// (redb's default) so both engines answer from memory.
        pub(crate) fn build(path: &Path, ids: &[u64], now_ms: i64) -> Res<Option<Lookup>> {
            let mut conn = open(path, Sync::Full)?;
            conn.pragma_update(None, "cache_size", -1_048_576)?;
            fill(&mut conn, ids, true, now_ms)?;
            conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")?;
            Ok(Some(Lookup { conn }))
        }

        /// One pass over the table and its primary-key index, to fill the page cache.
        pub(crate) fn warm(&mut self) -> Res<()> {
            let _: (i64, i64) = self.conn.query_row(
                "SELECT count(*), coalesce(sum(length(result)), 0) FROM idem NOT INDEXED",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )?;
            let _: i64 = self.conn.query_row(
                "SELECT count(key) FROM idem INDEXED BY sqlite_autoindex_idem_1 WHERE tenant = ?1",
                [TENANT],
                |row| row.get(0),
            )?;
            Ok(())
        }

        /// `SELECT` by primary key: the stored result, if the row is completed.
        pub(crate) fn get(&mut self, request: &Request) -> Res<Option<Vec<u8>>> {
            let row: Option<(Vec<u8>, i64, Option<Vec<u8>>)> = self
                .conn
                .prepare_cached(SELECT)?
                .query_row(params![TENANT, OPERATION, request.key.as_str()], |row| {
                    Ok((row.get(0)?, row.get(1)?, row.get(2)?))
                })
                .optional()?;
            Ok(row.and_then(|(fingerprint, state, result)| {
                (state == 1 && fingerprint == request.fingerprint.as_bytes()).then_some(result).flatten()
            }))
        }
    }

    /// Inserts rows for `ids` in transactions of 10,000: completed (with the 200-byte result)
    /// or in progress.
    fn fill(conn: &mut Connection, ids: &[u64], completed: bool, now_ms: i64) -> Res<()> {
        let scope = crate::data::scope()?;
        for chunk in ids.chunks(10_000) {
            let tx = conn.transaction()?;
            {
                let mut insert = tx.prepare_cached(if completed { INSERT_COMPLETED } else { INSERT })?;
                for &i in chunk {
                    let request = crate::data::request(&scope, i)?;
                    let fingerprint = request.fingerprint.as_bytes().as_slice();
                    if completed {
                        let body = crate::data::result_body(i);
                        let expires = now_ms + crate::data::THIRTY_DAYS_MS as i64;
                        insert.execute(params![
                            TENANT,
                            OPERATION,
                            request.key.as_str(),
                            fingerprint,
                            body,
                            now_ms,
                            expires
                        ])?;
                    } else {
                        insert.execute(params![TENANT, OPERATION, request.key.as_str(), fingerprint, now_ms])?;
                    }
                }
            }
            tx.commit()?;
        }
        Ok(())
    }

    /// `in_progress` in-progress rows and `completed` completed rows, then `VACUUM`.
    pub(crate) fn space(path: &Path, in_progress: u64, completed: u64, now_ms: i64) -> Res<Option<Space>> {
        let mut conn = open(path, Sync::Full)?;
        let in_progress_ids: Vec<u64> = (0..in_progress).collect();
        let completed_ids: Vec<u64> = (in_progress..in_progress + completed).collect();
        fill(&mut conn, &in_progress_ids, false, now_ms)?;
        fill(&mut conn, &completed_ids, true, now_ms)?;
        conn.execute_batch("VACUUM; PRAGMA wal_checkpoint(TRUNCATE);")?;
        let page_count: i64 = conn.query_row("PRAGMA page_count", [], |row| row.get(0))?;
        let page_size: i64 = conn.query_row("PRAGMA page_size", [], |row| row.get(0))?;
        drop(conn);
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        let file_blocks = allocated_bytes(path) + allocated_bytes(Path::new(&wal));
        Ok(Some(Space { file_blocks, pages: u64::try_from(page_count * page_size)? }))
    }
}

#[cfg(not(feature = "sqlite"))]
#[allow(clippy::unnecessary_wraps)]
mod stub {
    //! Without the `sqlite` feature: the same API, every constructor answering `None`.

    use std::path::Path;
    use std::time::Duration;

    use super::{Space, Sync};
    use crate::data::{Request, Res};
    use crate::measure::ThreadRun;

    pub(crate) fn version() -> Option<String> {
        None
    }

    pub(crate) enum Durable {}

    impl Durable {
        pub(crate) fn open(_path: &Path, _sync: Sync) -> Res<Option<Durable>> {
            Ok(None)
        }

        pub(crate) fn reserve(&mut self, _request: &Request, _now_ms: i64) -> Res<()> {
            match *self {}
        }

        pub(crate) fn complete(&mut self, _request: &Request, _body: &[u8], _now_ms: i64) -> Res<()> {
            match *self {}
        }

        pub(crate) fn reserve_run_complete(&mut self, _request: &Request, _body: &[u8], _now_ms: i64) -> Res<()> {
            match *self {}
        }
    }

    pub(crate) fn concurrent(
        _path: &Path,
        _sync: Sync,
        _threads: usize,
        _duration: Duration,
        _base: u64,
    ) -> Res<Option<Vec<ThreadRun>>> {
        Ok(None)
    }

    pub(crate) enum Lookup {}

    impl Lookup {
        pub(crate) fn build(_path: &Path, _ids: &[u64], _now_ms: i64) -> Res<Option<Lookup>> {
            Ok(None)
        }

        pub(crate) fn warm(&mut self) -> Res<()> {
            match *self {}
        }

        pub(crate) fn get(&mut self, _request: &Request) -> Res<Option<Vec<u8>>> {
            match *self {}
        }
    }

    pub(crate) fn space(_path: &Path, _in_progress: u64, _completed: u64, _now_ms: i64) -> Res<Option<Space>> {
        Ok(None)
    }
}
