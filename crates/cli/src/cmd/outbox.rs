//! `idemdb outbox`: the external effects waiting for, under or past dispatch; `idemdb inbox`:
//! the webhook deliveries received; both read-only.

use clap::Args;
use serde_json::{Value, json};

use idemdb::{EffectFilter, OutboxItem, OutboxState, OutboxStateKind, Store};

use crate::cmd::FileArg;
use crate::error::{CliError, Exit};
use crate::open::open_read_only;
use crate::output::{self, Align, Table};

/// Arguments of `idemdb outbox`.
#[derive(Debug, Args)]
#[command(after_help = "Lists outbox items in key order. Keys are shown as their keyed hash (and the provider key, \
which contains the key, is hidden) unless --show-keys is given. Times are UTC. The store is opened read-only.\n\n\
Examples:\n  idemdb outbox store.idemdb\n  idemdb outbox store.idemdb --state uncertain --json")]
pub(crate) struct OutboxArgs {
    #[command(flatten)]
    file: FileArg,
    /// Only items in this state (pending, dispatching, confirmed, failed, uncertain).
    #[arg(long, value_name = "STATE", value_parser = parse_state)]
    state: Option<OutboxStateKind>,
    /// Only items of this tenant.
    #[arg(long)]
    tenant: Option<String>,
    /// At most this many items (0: all).
    #[arg(long, default_value_t = 0)]
    limit: usize,
    /// Show the idempotency and provider keys.
    #[arg(long)]
    show_keys: bool,
}

fn parse_state(name: &str) -> Result<OutboxStateKind, String> {
    name.parse().map_err(|error: idemdb::UnknownName| error.to_string())
}

/// One item as JSON (and the source of the table's cells).
pub(crate) fn item_json(store: &Store, item: &OutboxItem, show_keys: bool) -> Value {
    let mut out = json!({
        "tenant": item.scope.tenant(),
        "operation": item.scope.operation(),
        "key_hash": store.key_hash(&item.scope, &item.key).to_string(),
        "effect": item.effect.as_str(),
        "version": item.version,
        "state": item.state.kind().as_str(),
        "dispatches": item.dispatches,
        "in_doubt": item.in_doubt,
        "first_sent_at": item.first_sent_at.map(|t| t.as_millis()),
        "due_at": item.due_at().map(|t| t.as_millis()),
        "updated_at": item.updated_at.as_millis(),
        "last_reason": item.last_reason.as_deref().map(output::terminal_safe),
    });
    match &item.state {
        OutboxState::Confirmed { reference } => out["reference"] = json!(output::terminal_safe(reference)),
        OutboxState::Uncertain { cause } => out["cause"] = json!(cause.as_str()),
        _ => {}
    }
    if show_keys {
        out["key"] = json!(item.key.as_str());
        out["provider_key"] = json!(item.provider_key.as_str());
    }
    out
}

pub(crate) fn run(args: &OutboxArgs, json: bool) -> Result<Exit, CliError> {
    let file = &args.file.file;
    let store = open_read_only(file)?;
    let mut filter = EffectFilter::default();
    filter.state = args.state;
    filter.tenant = args.tenant.clone();
    filter.limit = args.limit;
    let items = store.effects(&filter).map_err(|e| CliError::runtime_ctx(file, "cannot read the outbox", &e))?;
    if json {
        let items: Vec<Value> = items.iter().map(|item| item_json(&store, item, args.show_keys)).collect();
        output::print_json(&json!({ "file": file.display().to_string(), "items": items }));
        return Ok(Exit::Ok);
    }
    let mut table = Table::new(&[
        ("tenant", Align::Left),
        ("operation", Align::Left),
        (if args.show_keys { "provider key" } else { "key hash" }, Align::Left),
        ("effect", Align::Left),
        ("state", Align::Left),
        ("dispatches", Align::Right),
        ("in doubt", Align::Left),
        ("due", Align::Left),
    ]);
    for item in &items {
        let who = if args.show_keys {
            item.provider_key.as_str().to_string()
        } else {
            store.key_hash(&item.scope, &item.key).to_string()
        };
        table.row(vec![
            output::terminal_safe(item.scope.tenant()),
            output::terminal_safe(item.scope.operation()),
            who,
            item.effect.as_str().to_string(),
            item.state.kind().as_str().to_string(),
            item.dispatches.to_string(),
            if item.in_doubt { "yes" } else { "no" }.to_string(),
            item.due_at().map_or_else(|| "-".to_string(), |t| output::time(t.as_millis())),
        ]);
    }
    if table.is_empty() {
        output::print("no outbox items");
    } else {
        output::print(&table.render());
    }
    Ok(Exit::Ok)
}

/// Arguments of `idemdb inbox`.
#[derive(Debug, Args)]
#[command(after_help = "Lists the webhook deliveries received, by source and delivery id, with what each did \
(applied, stale, invalid_transition). The store is opened read-only.")]
pub(crate) struct InboxArgs {
    #[command(flatten)]
    file: FileArg,
    /// At most this many deliveries (0: all).
    #[arg(long, default_value_t = 0)]
    limit: usize,
}

pub(crate) fn run_inbox(args: &InboxArgs, json: bool) -> Result<Exit, CliError> {
    let file = &args.file.file;
    let store = open_read_only(file)?;
    let deliveries =
        store.deliveries(args.limit).map_err(|e| CliError::runtime_ctx(file, "cannot read the inbox", &e))?;
    if json {
        let list: Vec<Value> = deliveries
            .iter()
            .map(|(source, id, record)| {
                json!({
                    "source": source,
                    "delivery_id": id,
                    "object_id": record.object_id,
                    "version": record.version,
                    "state": record.state,
                    "outcome": record.outcome.kind().as_str(),
                    "received_at": record.received_at.as_millis(),
                })
            })
            .collect();
        output::print_json(&json!({ "file": file.display().to_string(), "deliveries": list }));
        return Ok(Exit::Ok);
    }
    let mut table = Table::new(&[
        ("source", Align::Left),
        ("delivery", Align::Left),
        ("object", Align::Left),
        ("version", Align::Right),
        ("state", Align::Left),
        ("outcome", Align::Left),
        ("received", Align::Left),
    ]);
    for (source, id, record) in &deliveries {
        table.row(vec![
            output::terminal_safe(source),
            output::terminal_safe(id),
            output::terminal_safe(&record.object_id),
            record.version.to_string(),
            output::terminal_safe(&record.state),
            record.outcome.kind().as_str().to_string(),
            output::time(record.received_at.as_millis()),
        ]);
    }
    if table.is_empty() {
        output::print("no deliveries");
    } else {
        output::print(&table.render());
    }
    Ok(Exit::Ok)
}
