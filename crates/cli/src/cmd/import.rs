//! `idemdb import`: JSON Lines written by `export` into a store (created if missing), or into
//! PostgreSQL (`--postgres URL`). Both read and check every line with the same code first.

use std::path::PathBuf;

use clap::Args;
use serde_json::json;

use crate::cmd::import_input::read_input;
use crate::error::{CliError, Exit};
use crate::open::{not_a_file, open_raw};
use crate::output;

/// Arguments of `idemdb import`.
#[derive(Debug, Args)]
#[command(after_help = "All lines are read and checked first, then written in one transaction: on any error \
nothing is imported, and the error names the line. Every record must be one the engine could have written \
(the same rules as the API: a payload within the 1 MiB result limit, at least one attempt, a fence below 2^63, \
created_at <= updated_at <= every expiry, expires_at <= forget_at), with no field its state does not have, \
no unknown field, and each key once. Lines need the key (export with --show-keys). A completed or failed record whose \
payload was left out of the export is imported as a tombstone: its key stays known and is never run \
again, but retries get `expired` instead of the stored result.\n\n\
With --postgres the records go into a PostgreSQL database (its schema is created or migrated on \
first use), in one transaction.\n\nExamples:\n  \
idemdb export old.idemdb --show-keys --show-payloads -o backup.jsonl\n  idemdb import new.idemdb backup.jsonl\n  \
idemdb import --postgres postgresql://app@db.internal/payments backup.jsonl\n  \
PGHOST=db.internal PGUSER=app PGDATABASE=payments idemdb import --postgres '' --password-file /run/secrets/pg backup.jsonl")]
pub(crate) struct ImportArgs {
    /// The store file to import into (created if it does not exist); with `--postgres`, the
    /// JSON Lines file to read.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// The JSON Lines file to read (`-` for standard input). Not with `--postgres`.
    #[arg(value_name = "INPUT", required_unless_present = "postgres", conflicts_with = "postgres")]
    input: Option<PathBuf>,
    /// Replace records that already exist (by default they are kept and the line is skipped).
    #[arg(long)]
    overwrite: bool,
    /// Import into a PostgreSQL database instead of a store file: at this URL
    /// (`postgresql://user@host:port/db` or `host=… user=…`), completed by the standard `PG*`
    /// environment variables (PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, PGPASSFILE,
    /// PGSSLMODE); an empty URL (`--postgres ''`) takes them all from the environment. Keep
    /// the password off the command line: PGPASSWORD, ~/.pgpass or --password-file.
    #[arg(long, value_name = "URL")]
    postgres: Option<String>,
    /// With `--postgres`: read the password from the first line of this file.
    #[arg(long, value_name = "FILE", requires = "postgres")]
    password_file: Option<PathBuf>,
    /// With `--postgres`: the schema of idemdb's tables (default `public`).
    #[arg(long, value_name = "NAME", requires = "postgres")]
    schema: Option<String>,
}

pub(crate) fn run(args: &ImportArgs, json: bool) -> Result<Exit, CliError> {
    let (file, input) = match (&args.postgres, &args.input) {
        (Some(url), _) => {
            let target = crate::cmd::import_postgres::Target { url, password_file: args.password_file.as_deref() };
            return crate::cmd::import_postgres::run(&target, args.schema.as_deref(), &args.file, args.overwrite, json);
        }
        (None, Some(input)) => (&args.file, input),
        // clap requires INPUT without --postgres.
        (None, None) => return Err(CliError::runtime_msg(None, "INPUT is required")),
    };
    match std::fs::metadata(file) {
        Ok(meta) if meta.is_dir() => return Err(CliError::open_msg(file, "is a directory, not a store file")),
        // Never replaced by a new store: a FIFO, a socket or a device stays what it is.
        Ok(meta) if !meta.is_file() => return Err(not_a_file(file, &meta)),
        _ => {}
    }
    let records = read_input(input)?;
    let store = open_raw(file).map_err(|error| CliError::open(file, &error))?;
    let bar = output::progress(records.len() as u64, json, "importing");
    let (mut imported, mut skipped, mut tombstoned) = (0u64, 0u64, 0u64);
    store
        .write(|txn| {
            for (scoped, record, as_tombstone) in &records {
                if txn.import(scoped, record, args.overwrite)? {
                    imported += 1;
                    tombstoned += u64::from(*as_tombstone);
                } else {
                    skipped += 1;
                }
                bar.inc(1);
            }
            Ok::<(), idemdb::Error>(())
        })
        .map_err(|error| CliError::runtime_ctx(file, "import failed, nothing was written", &error))?;
    bar.finish_and_clear();
    if json {
        output::print_json(&json!({
            "file": file.display().to_string(),
            "lines": records.len(),
            "imported": imported,
            "skipped_existing": skipped,
            "tombstoned_without_payload": tombstoned,
        }));
    } else {
        let mut text = output::fields(&[
            ("store", file.display().to_string()),
            ("records read", output::count(records.len() as u64)),
            ("imported", output::count(imported)),
            ("skipped (already there)", output::count(skipped)),
            ("imported as tombstones", output::count(tombstoned)),
        ]);
        if skipped > 0 && !args.overwrite {
            text.push_str("use --overwrite to replace records that already exist\n");
        }
        output::print(&text);
    }
    Ok(Exit::Ok)
}
