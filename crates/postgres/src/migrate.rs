//! The schema at connect: the version check, the migrations applied under an advisory lock,
//! and the audit secret read back (the SQL text is `schema.rs`).

use deadpool_postgres::tokio_postgres::types::Type;
use deadpool_postgres::tokio_postgres::{Client, GenericClient};

use crate::error::{ConnectError, DbError, SchemaMismatch};
use crate::schema::{MIGRATIONS, SCHEMA_VERSION};

/// Key of the advisory lock that serialises migrations of one database (with the schema's hash
/// as the second half), so instances starting together migrate once.
const MIGRATION_LOCK: i32 = 0x1de3_db01;

/// The schema version recorded in the database (0 when idemdb was never migrated there).
async fn current_version(client: &impl GenericClient, schema: &str) -> Result<u32, ConnectError> {
    let driver = |e| ConnectError::Database(DbError::from(e));
    // Looked up first, so that a new schema does not log an error on the server.
    let exists: bool = client
        .query_typed("SELECT to_regclass(format('%I.idemdb_schema', $1::text)) IS NOT NULL", &[(&schema, Type::TEXT)])
        .await
        .map_err(ConnectError::from_driver)?
        .first()
        .ok_or_else(|| ConnectError::CorruptMeta("the schema lookup returned no row".into()))?
        .try_get(0)
        .map_err(driver)?;
    if !exists {
        return Ok(0);
    }
    let query = format!("SELECT coalesce(max(version), 0) FROM \"{schema}\".idemdb_schema");
    let rows = client.query_typed(query.as_str(), &[]).await.map_err(ConnectError::from_driver)?;
    let row = rows.first().ok_or_else(|| ConnectError::CorruptMeta("idemdb_schema returned no row".into()))?;
    let version: i32 = row.try_get(0).map_err(driver)?;
    Ok(u32::try_from(version).unwrap_or(0))
}

/// Checks the schema version at connect; migrates first when `migrate` is set and the schema
/// is older than this build.
///
/// # Errors
/// [`ConnectError::SchemaMismatch`] for a newer schema (never touched), or an older one when
/// `migrate` is off; database errors.
pub(crate) async fn check(client: &mut Client, schema: &str, migrate: bool) -> Result<u32, ConnectError> {
    let found = current_version(client, schema).await?;
    if found == SCHEMA_VERSION {
        return Ok(found);
    }
    if found > SCHEMA_VERSION || !migrate {
        return Err(ConnectError::SchemaMismatch(SchemaMismatch::new(schema, found)));
    }
    run_migrations(client, schema).await
}

/// Applies every migration the schema lacks, in one transaction under an advisory lock.
///
/// # Errors
/// [`ConnectError::SchemaMismatch`] when the schema is newer than this build; database errors
/// (the transaction is rolled back: nothing is half-applied).
pub(crate) async fn run_migrations(client: &mut Client, schema: &str) -> Result<u32, ConnectError> {
    let tx = client.transaction().await.map_err(ConnectError::from_driver)?;
    tx.execute("SELECT pg_advisory_xact_lock($1, hashtext($2))", &[&MIGRATION_LOCK, &schema])
        .await
        .map_err(ConnectError::from_driver)?;
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS \"{schema}\";
         CREATE TABLE IF NOT EXISTS \"{schema}\".idemdb_schema (
             version integer PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
         );"
    ))
    .await
    .map_err(ConnectError::from_driver)?;
    let found = current_version(&tx, schema).await?;
    if found > SCHEMA_VERSION {
        return Err(ConnectError::SchemaMismatch(SchemaMismatch::new(schema, found)));
    }
    for (version, sql) in MIGRATIONS.iter().filter(|(version, _)| *version > found) {
        tx.batch_execute(&crate::schema::migration_sql(sql, schema)).await.map_err(ConnectError::from_driver)?;
        let version = i32::try_from(*version).unwrap_or(i32::MAX);
        tx.execute(&format!("INSERT INTO \"{schema}\".idemdb_schema (version) VALUES ($1)"), &[&version])
            .await
            .map_err(ConnectError::from_driver)?;
        tracing::info!(target: "idemdb", schema, version, "applied migration");
    }
    tx.commit().await.map_err(ConnectError::from_driver)?;
    Ok(SCHEMA_VERSION)
}

/// Reads the audit secret.
pub(crate) async fn read_secret(client: &Client, schema: &str) -> Result<[u8; 32], ConnectError> {
    let row = client
        .query_typed(&format!("SELECT secret FROM \"{schema}\".idemdb_meta"), &[])
        .await
        .map_err(ConnectError::from_driver)?;
    let row = row.first().ok_or_else(|| ConnectError::CorruptMeta("the idemdb_meta row is missing".into()))?;
    let secret: Vec<u8> = row.try_get(0).map_err(|e| ConnectError::Database(DbError::from(e)))?;
    <[u8; 32]>::try_from(secret.as_slice())
        .map_err(|_| ConnectError::CorruptMeta(format!("audit secret is {} bytes, not 32", secret.len())))
}
