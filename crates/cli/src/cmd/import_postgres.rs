//! `idemdb import --postgres URL INPUT`: the lines of an `idemdb export` into PostgreSQL, read
//! and checked by the same code as an import into a store file, written in one transaction.

use std::path::Path;

use serde_json::json;

use idemdb::{Record, ScopedKey};
use idemdb_postgres::{ErrorCode, PgStore};

use crate::cmd::import_input::read_input;
use crate::error::{CliError, Exit};
use crate::output;

/// Where the records go: the `--postgres` URL (empty: the environment alone) and the password
/// file.
pub(crate) struct Target<'a> {
    pub(crate) url: &'a str,
    pub(crate) password_file: Option<&'a Path>,
}

pub(crate) fn run(
    to: &Target<'_>,
    schema: Option<&str>,
    input: &Path,
    overwrite: bool,
    json: bool,
) -> Result<Exit, CliError> {
    let url = Some(to.url).filter(|url| !url.is_empty());
    // Messages name the database as `user@host:port/database`: never a password, whichever
    // form the settings came in.
    let config = idemdb_postgres::connection_config(url, to.password_file)
        .map_err(|error| CliError::open_target("PostgreSQL", &error))?;
    let target = idemdb_postgres::describe(&config);
    let lines = read_input(input)?;
    let tombstoned = lines.iter().filter(|(_, _, as_tombstone)| *as_tombstone).count() as u64;
    let records: Vec<(ScopedKey, Record)> = lines.into_iter().map(|(scoped, record, _)| (scoped, record)).collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| CliError::runtime_msg(None, format!("cannot start the async runtime: {error}")))?;
    let report = runtime.block_on(async {
        let mut builder = PgStore::builder_with_config(config);
        if let Some(schema) = schema {
            builder = builder.schema(schema);
        }
        let store = builder.connect().await.map_err(|error| CliError::open_target(&target, &error))?;
        store.import(&records, overwrite).await.map_err(|error| {
            let context = if error.code() == ErrorCode::CommitUnknown {
                "the import's commit outcome is unknown; run it again (records already there are skipped)"
            } else {
                "import failed, nothing was written"
            };
            CliError::runtime_target(&target, context, &error)
        })
    })?;
    if json {
        output::print_json(&json!({
            "database": target,
            "schema": schema.unwrap_or("public"),
            "lines": records.len(),
            "imported": report.imported,
            "skipped_existing": report.skipped,
            "tombstoned_without_payload": tombstoned,
        }));
    } else {
        let mut text = output::fields(&[
            ("database", target),
            ("schema", schema.unwrap_or("public").to_string()),
            ("records read", output::count(records.len() as u64)),
            ("imported", output::count(report.imported)),
            ("skipped (already there)", output::count(report.skipped)),
            ("read as tombstones", output::count(tombstoned)),
        ]);
        if report.skipped > 0 && !overwrite {
            text.push_str("use --overwrite to replace records that already exist\n");
        }
        output::print(&text);
    }
    Ok(Exit::Ok)
}
