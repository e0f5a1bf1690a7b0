//! `idemdb reconcile`: the reconciliation queue (uncertain records and effects whose outcome
//! is unknown), and resolving one entry once its outcome is known.

use clap::{ArgGroup, Args};
use serde_json::{Value, json};

use idemdb::{Attention, EffectName, IdempotencyKey, ProviderState, Resolution, ResolutionKind, Scope, Store};

use crate::FileArg;
use crate::cmd::outbox::item_json;
use crate::error::{CliError, Exit};
use crate::open::{open_existing, open_read_only};
use crate::output::{self, Align, Table};

/// Arguments of `idemdb reconcile`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("action").args(["resolve", "provider", "retry"])))]
#[command(after_help = "Without an action, lists the queue oldest first (read-only). With one, resolves the entry \
of --tenant, --operation and --key:\n  --resolve completed|failed|released [--body TEXT]   an uncertain record\n  \
--effect NAME --provider confirmed --reference REF [--body TEXT]   what the provider says of an effect\n  \
--effect NAME --provider failed [--body TEXT] | --provider not_found\n  --effect NAME --retry   send it again with the \
same provider key (inside the provider's key-retention window only)\n\nQuery the provider first: past its window, an \
effect of unknown outcome is never sent again. Exits with 2 for invalid arguments and 4 when the store refuses \
the resolution (not uncertain, past the window, no such entry).")]
pub(crate) struct ReconcileArgs {
    #[command(flatten)]
    file: FileArg,
    /// Tenant of the entry to resolve.
    #[arg(long, requires_all = ["operation", "key"])]
    tenant: Option<String>,
    /// Operation of the entry to resolve.
    #[arg(long, requires_all = ["tenant", "key"])]
    operation: Option<String>,
    /// Idempotency key of the entry to resolve.
    #[arg(long, requires_all = ["tenant", "operation"])]
    key: Option<String>,
    /// Resolve an uncertain record: completed, failed or released.
    #[arg(long, value_name = "RESOLUTION", requires = "key", conflicts_with = "effect", value_parser = parse_resolution)]
    resolve: Option<ResolutionKind>,
    /// The effect (outbox item) to resolve or retry.
    #[arg(long, value_name = "NAME", requires = "key")]
    effect: Option<String>,
    /// What the provider says of the effect: confirmed, failed or not_found.
    #[arg(long, value_name = "STATE", requires = "effect")]
    provider: Option<String>,
    /// The provider's reference of a confirmed effect.
    #[arg(long, value_name = "REF")]
    reference: Option<String>,
    /// The result or failure body the intent replays: the body of the HTTP response the
    /// idempotency layer replays (see --status, --content-type), or the bytes as given with --raw.
    #[arg(long, value_name = "TEXT")]
    body: Option<String>,
    /// The status of the replayed HTTP response (default 200 for a result, 500 for a failure).
    #[arg(long, value_name = "CODE", conflicts_with = "raw", value_parser = parse_status)]
    status: Option<u16>,
    /// The Content-Type of the replayed HTTP response (default application/json).
    #[arg(long, value_name = "TYPE", conflicts_with = "raw")]
    content_type: Option<String>,
    /// Store --body as given, not as an HTTP response: for records that the HTTP layer did not
    /// write (its retries would get 500 corrupt for such a result).
    #[arg(long)]
    raw: bool,
    /// Send the effect again with the same provider key.
    #[arg(long, requires = "effect")]
    retry: bool,
}

fn parse_status(text: &str) -> Result<u16, String> {
    match text.parse::<u16>() {
        Ok(code) if (200..=599).contains(&code) => Ok(code),
        _ => Err(format!("`{text}` is not an HTTP status from 200 to 599")),
    }
}

/// The bytes a resolution stores: the HTTP response the layer replays (its own stored-response
/// encoding), or `--body` as given with `--raw`.
fn result_bytes(args: &ReconcileArgs, success: bool) -> Result<Vec<u8>, CliError> {
    let body = args.body.clone().unwrap_or_default().into_bytes();
    if args.raw {
        return Ok(body);
    }
    let status = args.status.unwrap_or(if success { 200 } else { 500 });
    let content_type = args.content_type.as_deref().unwrap_or("application/json");
    idemdb_http::StoredResponse::build(status, content_type, None, body)
        .map(|response| response.encode())
        .map_err(|e| CliError::usage("--content-type", &e))
}

fn parse_resolution(name: &str) -> Result<ResolutionKind, String> {
    name.parse().map_err(|error: idemdb::UnknownName| error.to_string())
}

pub(crate) fn run(args: &ReconcileArgs, json: bool) -> Result<Exit, CliError> {
    let file = &args.file.file;
    if args.resolve.is_none() && args.provider.is_none() && !args.retry {
        if args.key.is_some() {
            return Err(CliError::usage_msg("--key", "needs an action: --resolve, --provider or --retry"));
        }
        return list(file, json);
    }
    let (Some(tenant), Some(operation), Some(key)) = (&args.tenant, &args.operation, &args.key) else {
        return Err(CliError::usage_msg("--key", "an action needs --tenant, --operation and --key"));
    };
    let scope =
        Scope::new(tenant.as_str(), operation.as_str()).map_err(|e| CliError::usage("--tenant/--operation", &e))?;
    let key = IdempotencyKey::new(key.as_str()).map_err(|e| CliError::usage("--key", &e))?;
    let store = open_existing(file)?;
    let refused = |e: idemdb::Error| CliError::runtime_ctx(file, "the store refused the resolution", &e);
    let done = if let Some(kind) = args.resolve {
        let body = if kind == ResolutionKind::Released {
            Vec::new()
        } else {
            result_bytes(args, kind == ResolutionKind::Completed)?
        };
        store.reconcile(&scope, &key, Resolution::of_kind(kind, body)).map_err(refused)?;
        json!({ "resolved": "record", "resolution": kind.as_str() })
    } else {
        let effect = args.effect.as_deref().unwrap_or_default();
        let effect = EffectName::new(effect).map_err(|e| CliError::usage("--effect", &e))?;
        let item = if args.retry {
            store.retry_effect(&scope, &key, &effect).map_err(refused)?
        } else {
            let state = match args.provider.as_deref() {
                Some("confirmed") => {
                    let reference = args.reference.clone().ok_or_else(|| {
                        CliError::usage_msg("--reference", "confirmed needs the provider's reference")
                    })?;
                    ProviderState::Confirmed { reference, result: result_bytes(args, true)? }
                }
                Some("failed") => ProviderState::Failed { body: result_bytes(args, false)? },
                Some("not_found") => ProviderState::NotFound,
                other => {
                    let got = other.unwrap_or_default();
                    return Err(CliError::usage_msg("--provider", &format!("`{got}`: confirmed, failed or not_found")));
                }
            };
            store.resolve_effect(&scope, &key, &effect, state).map_err(refused)?
        };
        json!({ "resolved": "effect", "item": item_json(&store, &item, false) })
    };
    if json {
        output::print_json(&done);
    } else {
        output::print(&format!("resolved: {done}"));
    }
    Ok(Exit::Ok)
}

fn list(file: &std::path::Path, json: bool) -> Result<Exit, CliError> {
    let store = open_read_only(file)?;
    let queue = store.reconciliation_queue(0).map_err(|e| CliError::runtime_ctx(file, "cannot read the queue", &e))?;
    if json {
        let entries: Vec<Value> = queue.iter().map(|entry| entry_json(&store, entry)).collect();
        output::print_json(&json!({ "file": file.display().to_string(), "entries": entries }));
        return Ok(Exit::Ok);
    }
    let mut table = Table::new(&[
        ("since", Align::Left),
        ("kind", Align::Left),
        ("tenant", Align::Left),
        ("operation", Align::Left),
        ("key hash", Align::Left),
        ("what", Align::Left),
    ]);
    for entry in &queue {
        let value = entry_json(&store, entry);
        let text = |name: &str| value[name].as_str().map(output::terminal_safe).unwrap_or_default();
        table.row(vec![
            output::time(entry.since().as_millis()),
            text("kind"),
            text("tenant"),
            text("operation"),
            text("key_hash"),
            text("what"),
        ]);
    }
    if table.is_empty() {
        output::print("the reconciliation queue is empty");
    } else {
        output::print(&table.render());
    }
    Ok(Exit::Ok)
}

/// The admin API's spelling of an entry (keys hidden), and `what` for the table.
fn entry_json(store: &Store, entry: &Attention) -> Value {
    let hash = match entry {
        Attention::Record { scoped, .. } => store.key_hash(&scoped.scope, &scoped.key),
        Attention::Effect { item, .. } => store.key_hash(&item.scope, &item.key),
        _ => idemdb::KeyHash::from_bytes([0; 16]),
    };
    let mut out = idemdb_http::admin::attention_json(entry, hash, false);
    out["what"] = json!(match entry {
        Attention::Record { record, .. } => format!("record {}", record.state.kind()),
        Attention::Effect { item, .. } => format!("effect {} ({})", item.effect, item.state.kind()),
        _ => "unknown".to_string(),
    });
    out
}
