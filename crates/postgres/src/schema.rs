//! The database schema: its version, the SQL text of its migrations and of every statement the
//! adapter runs (built once per store, for its schema). Applying the migrations and checking
//! the version at connect is `migrate.rs`.
//!
//! Tables (in the configured schema, `public` by default):
//!
//! | table | what |
//! |---|---|
//! | `idemdb_schema` | one row per applied migration (`version`, `applied_at`) |
//! | `idemdb_meta` | one row: the audit secret (32 bytes, made by migration 1) and the fence floor |
//! | `idemdb_records` | `(tenant, operation, key)` primary key, `state`, `due_at` (indexed), `record` (the core's encoded record) |
//! | `idemdb_audit` | the audit trail: time, kind, scope, keyed hash of the key, fence, fingerprint prefix, correlation |
//! | `idemdb_outbox` | (migration 2) `(tenant, operation, key, effect)`, `state`, `due_at`, `forget_at`, `reconcile_since` (each indexed), `item` (the core's encoded outbox item) |
//! | `idemdb_deliveries` | (2) `(source, delivery_id)`, `outcome`, `received_at`, `forget_at` (indexed), `delivery` |
//! | `idemdb_objects` | (2) `(source, object_id)`, `version`, `state`, `object` |
//! | `idemdb_jobs` | (2) `(tenant, operation, job)`, `state`, `forget_at` (indexed), `record` |

use idemdb_core::StateKind;

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: u32 = 2;

/// Migrations in order: `(version, SQL)`. A migration is never edited once released; a change
/// is a new migration.
pub(crate) const MIGRATIONS: &[(u32, &str)] =
    &[(1, include_str!("migrations/0001_records.sql")), (2, include_str!("migrations/0002_workflows.sql"))];

/// A record state as an SQL string literal, from the core's name (names are plain
/// `[a-z_]` words, so quoting is all the escaping they need).
pub(crate) fn state_literal(state: StateKind) -> String {
    format!("'{}'", state.as_str())
}

/// A migration's text for a schema: `{schema}` becomes the quoted schema name and
/// `{state:NAME}` a record state's literal, spelled by the core (a migration never spells a
/// state itself).
pub(crate) fn migration_sql(sql: &str, schema: &str) -> String {
    let mut sql = sql.replace("{schema}", &format!("\"{schema}\""));
    for state in StateKind::ALL {
        sql = sql.replace(&format!("{{state:{}}}", state.as_str()), &state_literal(*state));
    }
    sql
}

/// The database time in milliseconds since the Unix epoch, read when the expression runs.
const NOW_MS: &str = "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/// The transaction id (if one was assigned), the backend's pid and the server's start time in
/// µs: what identifies a transaction when its commit's answer is lost.
/// `txid_current_if_assigned()`: reading it never assigns an id, so read-only work (a replay, an
/// idle dispatcher's claim, a purge with nothing due) consumes no transaction id and writes no WAL.
pub(crate) const IDENTITY: &str = "txid_current_if_assigned(), pg_backend_pid(), \
     (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint";

/// Whether PostgreSQL reserves the schema name (`pg_*` names cannot even be created, and the
/// catalogs are not idemdb's to write).
pub(crate) fn reserved_schema_name(name: &str) -> bool {
    name.starts_with("pg_") || name == "information_schema"
}

/// Checks a schema name: 1..=63 bytes of `[a-z0-9_]`, not starting with a digit (so it never
/// needs escaping beyond quotes, and cannot smuggle SQL).
pub(crate) fn valid_schema_name(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !name.as_bytes()[0].is_ascii_digit()
}

/// The SQL text of every statement, with the schema filled in.
#[derive(Debug)]
pub(crate) struct Sql {
    pub(crate) schema: String,
    /// `$1..$3` → record, locked until commit.
    pub(crate) lock: String,
    /// A new key's reservation in one autocommit statement: `$1..$6` = key and row values,
    /// `$7` = fence, `$8` = the decision time, `$9` = how far the database's clock may be from
    /// it, `$10..$13` = audit kind, key hash, fingerprint prefix, correlation, `$14` = whether
    /// to write the audit row → inserted (0 or 1), now, fence floor, the existing record (as
    /// of the statement's start, no lock). It inserts only when no row exists, the fence is
    /// above the floor and the time is within the bound; the audit row goes with the insert.
    pub(crate) reserve_new: String,
    /// → now, fence floor, transaction id, backend pid, server start (µs).
    pub(crate) context: String,
    /// `$1..$6` = tenant, operation, key, state, due_at, record; does nothing on conflict.
    pub(crate) insert: String,
    /// Arrays of `$1..$6`; inserts the rows whose key has none → the keys inserted.
    pub(crate) import_insert: String,
    /// Arrays of `$1..$6`; inserts or replaces every row → the keys written.
    pub(crate) import_upsert: String,
    /// Same parameters; updates the existing row.
    pub(crate) update: String,
    /// `$1..$3`.
    pub(crate) delete: String,
    /// `$1..$3` → record.
    pub(crate) get: String,
    /// `$1` = fence.
    pub(crate) raise_floor: String,
    /// Arrays of the audit columns → the transaction's identity (as [`IDENTITY`]) and the
    /// rows inserted.
    pub(crate) audit_insert: String,
    /// `$1` = limit → audit columns, oldest first.
    pub(crate) audit_read: String,
    /// `$1` = key hash, `$2` = tenant, `$3` = window → the audit columns of the key's events
    /// among the newest `window` events, oldest first.
    pub(crate) audit_key_history: String,
    /// `$1` = cutoff, `$2` = limit → the number of events removed.
    pub(crate) audit_purge_counted: String,
    /// `$1` = cutoff → whether any audit entry is older.
    pub(crate) audit_due: String,
    /// `$1` = now, `$2` = limit → tenant, operation, key, record of due records, locked.
    pub(crate) purge_due: String,
    /// → now.
    pub(crate) now: String,
    /// → transaction id, backend pid, server start (µs).
    pub(crate) identity: String,
    /// The workflow tables' statements.
    pub(crate) wf: WorkflowSql,
}

/// The statements of the workflow tables (migration 2).
#[derive(Debug)]
pub(crate) struct WorkflowSql {
    /// `$1..$4` = tenant, operation, key, effect → item, locked until commit.
    pub(crate) outbox_lock: String,
    /// `$1..$4` → item.
    pub(crate) outbox_get: String,
    /// `$1` = state or NULL, `$2` = limit or NULL → tenant, operation, key, effect, item, in
    /// key order (an operator's listing).
    pub(crate) outbox_list: String,
    /// `$1..$3` (tenant, operation, key) → whether any effect was ever enqueued for the key.
    pub(crate) outbox_any: String,
    /// `$1..$3`: the effect names and states of one key's items.
    pub(crate) outbox_of_key: String,
    /// `$1..$4`, state, due_at, forget_at, reconcile_since, item; nothing on conflict.
    pub(crate) outbox_insert: String,
    /// Same parameters; updates the existing row.
    pub(crate) outbox_update: String,
    /// `$1` = now, `$2` = limit → tenant, operation, key, effect, item of due items, locked
    /// (skipping rows another dispatcher holds).
    pub(crate) outbox_due: String,
    /// → tenant, operation, key, effect, item, reconcile_since of uncertain items.
    pub(crate) outbox_uncertain: String,
    /// → tenant, operation, key, record of uncertain records.
    pub(crate) records_uncertain: String,
    /// `$1` = now, `$2` = limit → the number of finished items removed.
    pub(crate) outbox_purge: String,
    /// `$1` = the outbox channel: wakes listening dispatchers when the transaction commits.
    pub(crate) outbox_notify: String,
    /// `$1` = text, `$2` = seed: a transaction-scoped advisory lock on the text's hash.
    pub(crate) advisory_lock: String,
    /// `$1..$2` = source, delivery id → delivery.
    pub(crate) delivery_get: String,
    /// `$1..$2`, outcome, received_at, forget_at, delivery.
    pub(crate) delivery_insert: String,
    /// `$1` = limit (null: all) → source, delivery id, delivery; by source, then delivery id.
    pub(crate) delivery_list: String,
    /// `$1` = now, `$2` = limit → the number of old deliveries removed.
    pub(crate) delivery_purge: String,
    /// `$1..$2` = source, object id → object.
    pub(crate) object_get: String,
    /// `$1..$2`, version, state, object; replaces an existing row.
    pub(crate) object_upsert: String,
    /// `$1..$3` = tenant, operation, job → record.
    pub(crate) job_get: String,
    /// `$1..$3`, state, forget_at, record; replaces an existing row.
    pub(crate) job_upsert: String,
    /// `$1` = now, `$2` = limit → the number of finished jobs removed.
    pub(crate) job_purge: String,
}

impl WorkflowSql {
    fn new(s: &str) -> WorkflowSql {
        let outbox = format!("{s}.idemdb_outbox");
        let deliveries = format!("{s}.idemdb_deliveries");
        let objects = format!("{s}.idemdb_objects");
        let jobs = format!("{s}.idemdb_jobs");
        let records = format!("{s}.idemdb_records");
        let uncertain = state_literal(StateKind::Uncertain);
        let item_pk = "tenant = $1 AND operation = $2 AND key = $3 AND effect = $4";
        let item_columns = "tenant, operation, key, effect, state, due_at, forget_at, reconcile_since, item";
        let purge = |table: &str| {
            format!(
                "WITH removed AS (DELETE FROM {table} WHERE ctid IN \
                 (SELECT ctid FROM {table} WHERE forget_at <= $1 ORDER BY forget_at LIMIT $2 \
                 FOR UPDATE SKIP LOCKED) RETURNING 1) SELECT count(*) FROM removed"
            )
        };
        WorkflowSql {
            outbox_lock: format!("SELECT item FROM {outbox} WHERE {item_pk} FOR UPDATE"),
            outbox_get: format!("SELECT item FROM {outbox} WHERE {item_pk}"),
            outbox_list: format!(
                "SELECT tenant, operation, key, effect, item FROM {outbox} \
                 WHERE ($1::text IS NULL OR state = $1::text) \
                 ORDER BY tenant, operation, key, effect LIMIT $2::bigint"
            ),
            outbox_of_key: format!(
                "SELECT effect, state FROM {outbox} WHERE tenant = $1 AND operation = $2 AND key = $3 ORDER BY effect"
            ),
            outbox_any: format!(
                "SELECT EXISTS (SELECT 1 FROM {outbox} WHERE tenant = $1 AND operation = $2 AND key = $3)"
            ),
            outbox_insert: format!(
                "INSERT INTO {outbox} ({item_columns}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
                 ON CONFLICT DO NOTHING"
            ),
            outbox_update: format!(
                "UPDATE {outbox} SET state = $5, due_at = $6, forget_at = $7, reconcile_since = $8, item = $9 \
                 WHERE {item_pk}"
            ),
            outbox_due: format!(
                "SELECT tenant, operation, key, effect, item FROM {outbox} WHERE due_at <= $1 \
                 ORDER BY due_at LIMIT $2 FOR UPDATE SKIP LOCKED"
            ),
            outbox_uncertain: format!(
                "SELECT tenant, operation, key, effect, item, reconcile_since FROM {outbox} \
                 WHERE reconcile_since IS NOT NULL ORDER BY reconcile_since, tenant, operation, key, effect"
            ),
            records_uncertain: format!(
                "SELECT tenant, operation, key, record FROM {records} WHERE state = {uncertain}"
            ),
            outbox_purge: purge(&outbox),
            advisory_lock: "SELECT pg_advisory_xact_lock(hashtextextended($1, $2))".to_string(),
            outbox_notify: "SELECT pg_notify($1::text, '')".to_string(),
            delivery_get: format!("SELECT delivery FROM {deliveries} WHERE source = $1 AND delivery_id = $2"),
            delivery_insert: format!(
                "INSERT INTO {deliveries} (source, delivery_id, outcome, received_at, forget_at, delivery) \
                 VALUES ($1, $2, $3, $4, $5, $6)"
            ),
            delivery_list: format!(
                "SELECT source, delivery_id, delivery FROM {deliveries} ORDER BY source, delivery_id LIMIT $1::bigint"
            ),
            delivery_purge: purge(&deliveries),
            object_get: format!("SELECT object FROM {objects} WHERE source = $1 AND object_id = $2"),
            object_upsert: format!(
                "INSERT INTO {objects} (source, object_id, version, state, object) VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (source, object_id) DO UPDATE \
                 SET version = excluded.version, state = excluded.state, object = excluded.object"
            ),
            job_get: format!("SELECT record FROM {jobs} WHERE tenant = $1 AND operation = $2 AND job = $3"),
            job_upsert: format!(
                "INSERT INTO {jobs} (tenant, operation, job, state, forget_at, record) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (tenant, operation, job) DO UPDATE \
                 SET state = excluded.state, forget_at = excluded.forget_at, record = excluded.record"
            ),
            job_purge: purge(&jobs),
        }
    }
}

impl Sql {
    pub(crate) fn new(schema: &str) -> Sql {
        let s = format!("\"{schema}\"");
        let records = format!("{s}.idemdb_records");
        let meta = format!("{s}.idemdb_meta");
        let audit = format!("{s}.idemdb_audit");
        let pk = "tenant = $1 AND operation = $2 AND key = $3";
        let columns = "tenant, operation, key, state, due_at, record";
        let audit_columns = "at, kind, tenant, operation, key_hash, fence, fingerprint_prefix, correlation";
        Sql {
            schema: schema.to_string(),
            lock: format!("SELECT record FROM {records} WHERE {pk} FOR UPDATE"),
            context: format!("SELECT {NOW_MS}, fence_floor, {IDENTITY} FROM {meta}"),
            reserve_new: format!(
                "WITH ctx AS (SELECT {NOW_MS} AS now, fence_floor AS floor FROM {meta}), \
                 ins AS (INSERT INTO {records} ({columns}) \
                 SELECT $1::text, $2::text, $3::text, $4::text, $5::bigint, $6::bytea FROM ctx \
                 WHERE ctx.floor < $7::bigint AND abs(ctx.now - $8::bigint) <= $9::bigint \
                 ON CONFLICT DO NOTHING RETURNING 1), \
                 logged AS (INSERT INTO {audit} ({audit_columns}) \
                 SELECT $8::bigint, $10::text, $1::text, $2::text, $11::bytea, $7::bigint, $12::bytea, $13::text \
                 FROM ins WHERE $14::boolean) \
                 SELECT (SELECT count(*) FROM ins), ctx.now, ctx.floor, r.record FROM ctx \
                 LEFT JOIN {records} r ON r.tenant = $1::text AND r.operation = $2::text AND r.key = $3::text"
            ),
            insert: format!("INSERT INTO {records} ({columns}) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING"),
            import_insert: format!(
                "INSERT INTO {records} ({columns}) SELECT * FROM unnest($1::text[], $2::text[], $3::text[], \
                 $4::text[], $5::bigint[], $6::bytea[]) ON CONFLICT DO NOTHING RETURNING tenant, operation, key"
            ),
            import_upsert: format!(
                "INSERT INTO {records} ({columns}) SELECT * FROM unnest($1::text[], $2::text[], $3::text[], \
                 $4::text[], $5::bigint[], $6::bytea[]) ON CONFLICT (tenant, operation, key) DO UPDATE \
                 SET state = excluded.state, due_at = excluded.due_at, record = excluded.record \
                 RETURNING tenant, operation, key"
            ),
            update: format!("UPDATE {records} SET state = $4, due_at = $5, record = $6 WHERE {pk}"),
            delete: format!("DELETE FROM {records} WHERE {pk}"),
            get: format!("SELECT record FROM {records} WHERE {pk}"),
            raise_floor: format!("UPDATE {meta} SET fence_floor = greatest(fence_floor, $1)"),
            audit_insert: format!(
                "WITH ins AS (INSERT INTO {audit} ({audit_columns}) SELECT * FROM unnest($1::bigint[], $2::text[], \
                 $3::text[], $4::text[], $5::bytea[], $6::bigint[], $7::bytea[], $8::text[]) RETURNING 1) \
                 SELECT {IDENTITY}, (SELECT count(*) FROM ins)"
            ),
            audit_read: format!("SELECT {audit_columns} FROM {audit} ORDER BY id LIMIT $1"),
            audit_key_history: format!(
                "SELECT {audit_columns} FROM (SELECT id, {audit_columns} FROM {audit} ORDER BY id DESC LIMIT $3) newest \
                 WHERE key_hash = $1 AND tenant = $2 ORDER BY id"
            ),
            audit_purge_counted: format!(
                "WITH removed AS (DELETE FROM {audit} WHERE id IN \
                 (SELECT id FROM {audit} WHERE at < $1 ORDER BY at LIMIT $2 FOR UPDATE SKIP LOCKED) RETURNING 1) \
                 SELECT count(*) FROM removed"
            ),
            audit_due: format!("SELECT EXISTS (SELECT 1 FROM {audit} WHERE at < $1)"),
            purge_due: format!(
                "SELECT tenant, operation, key, record FROM {records} WHERE due_at <= $1 \
                 ORDER BY due_at LIMIT $2 FOR UPDATE SKIP LOCKED"
            ),
            now: format!("SELECT {NOW_MS}"),
            identity: format!("SELECT {IDENTITY}"),
            wf: WorkflowSql::new(&s),
        }
    }

    /// Every statement the adapter runs on a connected store (transaction pooling learns
    /// their parameter types at connect).
    pub(crate) fn texts(&self) -> Vec<&str> {
        let wf = &self.wf;
        vec![
            &self.lock,
            &self.reserve_new,
            &self.context,
            &self.insert,
            &self.import_insert,
            &self.import_upsert,
            &self.update,
            &self.delete,
            &self.get,
            &self.raise_floor,
            &self.audit_insert,
            &self.audit_read,
            &self.audit_key_history,
            &self.audit_purge_counted,
            &self.audit_due,
            &self.purge_due,
            &self.now,
            &self.identity,
            &wf.outbox_lock,
            &wf.outbox_get,
            &wf.outbox_any,
            &wf.outbox_of_key,
            &wf.outbox_insert,
            &wf.outbox_update,
            &wf.outbox_due,
            &wf.outbox_uncertain,
            &wf.outbox_list,
            &wf.records_uncertain,
            &wf.outbox_purge,
            &wf.advisory_lock,
            &wf.outbox_notify,
            &wf.delivery_get,
            &wf.delivery_insert,
            &wf.delivery_list,
            &wf.delivery_purge,
            &wf.object_get,
            &wf.object_upsert,
            &wf.job_get,
            &wf.job_upsert,
            &wf.job_purge,
            TXID_STATUS,
            TERMINATE,
            BACKEND,
            BACKEND_STATE,
            TERMINATE_BACKEND,
        ]
    }
}

/// The connection's server process: its pid, when it started (µs) and the server's start time
/// (µs); together they name the process even after its pid is reused.
pub(crate) const BACKEND: &str = "SELECT pg_backend_pid(), \
     (SELECT (extract(epoch FROM backend_start) * 1000000)::bigint FROM pg_stat_activity WHERE pid = pg_backend_pid()), \
     (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint";
/// The server's start time (µs) and whether the process `$1` that started at `$2` (µs) runs.
pub(crate) const BACKEND_STATE: &str = "SELECT (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint, \
     EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND (extract(epoch FROM backend_start) * 1000000)::bigint = $2)";
/// Terminates the process `$1` that started at `$2` (µs), if it still runs.
pub(crate) const TERMINATE_BACKEND: &str = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
     WHERE pid = $1 AND (extract(epoch FROM backend_start) * 1000000)::bigint = $2";

/// Statements that do not depend on the schema.
pub(crate) const TXID_STATUS: &str =
    "SELECT txid_status($1), (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint";
/// Terminates the backend `$1` if it still runs transaction `$2` (a 64-bit transaction id; the
/// activity view shows its low 32 bits).
pub(crate) const TERMINATE: &str = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
     WHERE pid = $1 AND backend_xid::text = ($2::bigint % 4294967296)::text";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_are_plain_identifiers() {
        assert!(valid_schema_name("public"));
        assert!(valid_schema_name("idemdb_test_7"));
        assert!(!valid_schema_name(""));
        assert!(!valid_schema_name("7up"));
        assert!(!valid_schema_name("Upper"));
        assert!(!valid_schema_name("a\"; DROP TABLE x; --"));
        assert!(!valid_schema_name(&"a".repeat(64)));
        for reserved in ["information_schema", "pg_catalog", "pg_toast", "pg_temp_3", "pg_anything"] {
            assert!(reserved_schema_name(reserved), "{reserved}");
        }
        assert!(!reserved_schema_name("public") && !reserved_schema_name("idemdb") && !reserved_schema_name("pgx"));
    }

    #[test]
    fn migrations_are_numbered_in_order_up_to_the_build_version() {
        for (index, (version, sql)) in MIGRATIONS.iter().enumerate() {
            assert_eq!(*version as usize, index + 1);
            assert!(sql.contains("{schema}"));
        }
        assert_eq!(MIGRATIONS.last().map(|(v, _)| *v), Some(SCHEMA_VERSION));
    }

    /// Every quoted word in the adapter's SQL, after the names are filled in.
    fn quoted_words(sql: &str) -> Vec<&str> {
        sql.split('\'').skip(1).step_by(2).filter(|word| !word.is_empty()).collect()
    }

    #[test]
    fn state_names_in_sql_are_the_cores() {
        // No state is spelled in a migration: each comes from a `{state:NAME}` placeholder that
        // names a state of the core, and nothing is left unfilled.
        for (version, sql) in MIGRATIONS {
            for state in StateKind::ALL {
                assert!(!sql.contains(&format!("'{state}'")), "migration {version} spells `{state}` itself");
            }
            let filled = migration_sql(sql, "public");
            assert!(!filled.contains('{'), "migration {version} has a placeholder no name fills: {filled}");
        }
        let filled = migration_sql(MIGRATIONS[1].1, "public");
        assert!(filled.contains(&format!("WHERE state = '{}'", StateKind::Uncertain.as_str())), "{filled}");
        // The statements' quoted words are the core's state names, and the reconciliation
        // queue's query has the partial index's predicate word for word (so the index serves it).
        let sql = Sql::new("public");
        for text in sql.texts() {
            for word in quoted_words(text) {
                assert!(word.parse::<StateKind>().is_ok(), "`{word}` in `{text}` is not a state of the core");
            }
        }
        let predicate = format!("state = {}", state_literal(StateKind::Uncertain));
        assert!(sql.wf.records_uncertain.contains(&predicate) && filled.contains(&predicate));
    }
}
