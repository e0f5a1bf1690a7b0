//! `idemdb stats`: records by state and operation, leases, expiry horizon, sizes.

use clap::Args;
use serde_json::{Map, Value, json};

use idemdb::{StateKind, Timestamp};

use crate::cmd::FileArg;
use crate::error::{CliError, Exit};
use crate::open::open_read_only;
use crate::output::{self, Align, Table};

/// Arguments of `idemdb stats`.
#[derive(Debug, Args)]
#[command(after_help = "Times are UTC. The expiry horizon is the last instant at which any record is still known \
(its tombstone is forgotten then); in-progress and uncertain records never expire on their own.\n\n\
The store is opened read-only: not a byte of the file changes, and a read-only file works. The sizes are those \
of the store's tables (free pages of the file are in the file size only).")]
pub(crate) struct StatsArgs {
    #[command(flatten)]
    file: FileArg,
}

pub(crate) fn run(args: &StatsArgs, json: bool) -> Result<Exit, CliError> {
    let file = &args.file.file;
    let store = open_read_only(file)?;
    let stats = store.stats().map_err(|error| CliError::runtime_ctx(file, "cannot read statistics", &error))?;
    let now = store.now();
    let ms = |t: Option<Timestamp>| t.map(Timestamp::as_millis);
    if json {
        let by_operation: Map<String, Value> = stats
            .by_operation
            .iter()
            .map(|(operation, states)| {
                let states: Map<String, Value> =
                    states.iter().map(|(state, n)| (state.as_str().to_string(), json!(n))).collect();
                (operation.clone(), Value::Object(states))
            })
            .collect();
        let by_state: Map<String, Value> =
            StateKind::ALL.iter().map(|state| (state.as_str().to_string(), json!(stats.count(*state)))).collect();
        output::print_json(&json!({
            "file": file.display().to_string(),
            "now": now.as_millis(),
            "records": stats.records,
            "by_state": by_state,
            "by_operation": by_operation,
            "oldest_in_progress": ms(stats.oldest_in_progress),
            "next_due": ms(stats.next_due),
            "horizon": ms(stats.horizon),
            "index_entries": stats.index_entries,
            "audit_events": stats.audit_events,
            "file_bytes": stats.file_bytes,
            "allocated_bytes": stats.allocated_bytes,
            "stored_bytes": stats.stored_bytes,
            "fragmented_bytes": stats.fragmented_bytes,
        }));
        return Ok(Exit::Ok);
    }
    let when = |t: Option<Timestamp>, none: &str| match t {
        None => none.to_string(),
        Some(t) if t >= now => {
            format!("{} (in {})", output::time(t.as_millis()), output::duration(t.saturating_since(now)))
        }
        Some(t) => format!("{} ({} ago)", output::time(t.as_millis()), output::duration(now.saturating_since(t))),
    };
    let mut text = output::fields(&[
        ("store", file.display().to_string()),
        ("records", output::count(stats.records)),
        ("oldest in-progress lease", when(stats.oldest_in_progress, "none")),
        ("next retention step", when(stats.next_due, "none")),
        ("expiry horizon", when(stats.horizon, "none")),
        ("expiry index entries", output::count(stats.index_entries)),
        ("audit events", output::count(stats.audit_events)),
        ("file size", stats.file_bytes.map(output::bytes).unwrap_or_else(|| "unknown".into())),
        ("allocated", output::bytes(stats.allocated_bytes)),
        ("stored data", output::bytes(stats.stored_bytes)),
        ("fragmented", output::bytes(stats.fragmented_bytes)),
    ]);
    let mut columns = vec![("operation", Align::Left)];
    columns.extend(StateKind::ALL.iter().map(|state| (state.as_str(), Align::Right)));
    columns.push(("total", Align::Right));
    let mut table = Table::new(&columns);
    for (operation, states) in &stats.by_operation {
        let mut row = vec![operation.clone()];
        row.extend(StateKind::ALL.iter().map(|state| output::count(states.get(state).copied().unwrap_or(0))));
        row.push(output::count(states.values().sum()));
        table.row(row);
    }
    if !table.is_empty() {
        let mut row = vec!["(all)".to_string()];
        row.extend(StateKind::ALL.iter().map(|state| output::count(stats.count(*state))));
        row.push(output::count(stats.records));
        table.row(row);
        text.push('\n');
        text.push_str(&table.render());
    }
    output::print(&text);
    Ok(Exit::Ok)
}
