//! The operator commands, one module each, and the arguments they share.

pub(crate) mod backup;
pub(crate) mod compact;
pub(crate) mod export;
pub(crate) mod get;
pub(crate) mod import;
pub(crate) mod import_input;
pub(crate) mod import_postgres;
pub(crate) mod list;
pub(crate) mod outbox;
pub(crate) mod purge;
pub(crate) mod reconcile;
pub(crate) mod recover;
pub(crate) mod stats;
pub(crate) mod verify;

use std::path::{Path, PathBuf};

use clap::Args;

use idemdb::{ListFilter, ListedRecord, StateKind, Store};

use crate::error::CliError;
use crate::view::Reveal;

/// The store file argument of the operator commands.
#[derive(Debug, Clone, Args)]
pub(crate) struct FileArg {
    /// The store file.
    #[arg(value_name = "FILE")]
    pub(crate) file: PathBuf,
}

/// `--show-keys` / `--show-payloads`.
#[derive(Debug, Clone, Copy, Args)]
pub(crate) struct RevealArgs {
    /// Show idempotency keys in clear (by default only their keyed hash).
    #[arg(long)]
    pub(crate) show_keys: bool,
    /// Show stored result and failure bodies (by default only their size).
    #[arg(long)]
    pub(crate) show_payloads: bool,
}

impl RevealArgs {
    pub(crate) fn reveal(self) -> Reveal {
        Reveal { keys: self.show_keys, payloads: self.show_payloads }
    }
}

/// `--tenant` / `--operation` / `--state`.
#[derive(Debug, Clone, Args)]
pub(crate) struct FilterArgs {
    /// Only records of this tenant.
    #[arg(long, value_name = "TENANT")]
    pub(crate) tenant: Option<String>,
    /// Only records of this operation.
    #[arg(long, value_name = "OPERATION")]
    pub(crate) operation: Option<String>,
    /// Only records in this state.
    #[arg(long, value_name = "STATE", value_parser = parse_state)]
    pub(crate) state: Option<StateKind>,
}

/// Parses a state name for clap.
fn parse_state(name: &str) -> Result<StateKind, String> {
    name.parse().map_err(|error: idemdb::UnknownName| error.to_string())
}

/// Records per page when walking a whole store.
const SCAN_PAGE: usize = 500;

/// Calls `visit` for every record matching `filter`, in key order, until it returns `false`.
///
/// # Errors
/// Exit 4 with the store's error.
pub(crate) fn scan(
    store: &Store,
    file: &Path,
    filter: &FilterArgs,
    mut visit: impl FnMut(ListedRecord) -> Result<bool, CliError>,
) -> Result<(), CliError> {
    let mut page = ListFilter::default();
    page.tenant = filter.tenant.clone();
    page.operation = filter.operation.clone();
    page.state = filter.state;
    page.limit = SCAN_PAGE;
    loop {
        let listing = store.list(&page).map_err(|error| CliError::runtime_ctx(file, "cannot list records", &error))?;
        for record in listing.records {
            if !visit(record)? {
                return Ok(());
            }
        }
        match listing.next_cursor {
            Some(cursor) => page.after = Some(cursor),
            None => return Ok(()),
        }
    }
}
