//! `idemdb get`: one record, by scope and key or by key hash.

use clap::{ArgGroup, Args};

use idemdb::{IdempotencyKey, ListedRecord, Scope, ScopedKey};

use crate::FileArg;
use crate::cmd::{FilterArgs, RevealArgs, scan};
use crate::error::{CliError, Exit};
use crate::open::open_existing;
use crate::output;
use crate::view::RecordView;

/// Arguments of `idemdb get`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("which").required(true).args(["key", "hash"])))]
#[command(
    after_help = "Examples:\n  idemdb get store.idemdb --tenant acme --operation create_payment --key 3f0c...\n  \
idemdb get store.idemdb --hash 9a1b...   (the hash `list` shows)\n\nExits with 4 when no record matches."
)]
pub(crate) struct GetArgs {
    #[command(flatten)]
    file: FileArg,
    /// Tenant of the record (with --operation and --key).
    #[arg(long, requires_all = ["operation", "key"])]
    tenant: Option<String>,
    /// Operation of the record (with --tenant and --key).
    #[arg(long, requires_all = ["tenant", "key"])]
    operation: Option<String>,
    /// The idempotency key (with --tenant and --operation).
    #[arg(long, requires_all = ["tenant", "operation"])]
    key: Option<String>,
    /// The keyed hash of the record's key, as `list` and the audit trail show it.
    #[arg(long, value_name = "HASH", conflicts_with_all = ["tenant", "operation", "key"])]
    hash: Option<String>,
    #[command(flatten)]
    reveal: RevealArgs,
}

pub(crate) fn run(args: &GetArgs, json: bool) -> Result<Exit, CliError> {
    let file = &args.file.file;
    let store = open_existing(file)?;
    let found: Option<ListedRecord> = match (&args.tenant, &args.operation, &args.key, &args.hash) {
        (Some(tenant), Some(operation), Some(key), _) => {
            let invalid = |error: &dyn std::error::Error| CliError::runtime_ctx(file, "invalid argument", error);
            let scope = Scope::new(tenant.as_str(), operation.as_str()).map_err(|e| invalid(&e))?;
            let key = IdempotencyKey::new(key.as_str()).map_err(|e| invalid(&e))?;
            let record =
                store.get(&scope, &key).map_err(|e| CliError::runtime_ctx(file, "cannot read the record", &e))?;
            record.map(|record| ListedRecord {
                key_hash: store.key_hash(&scope, &key),
                scoped: ScopedKey::new(scope, key),
                record,
            })
        }
        (_, _, _, Some(hash)) => {
            let wanted = hash.trim().to_ascii_lowercase();
            let mut found = None;
            scan(&store, file, &FilterArgs { tenant: None, operation: None, state: None }, |listed| {
                if listed.key_hash.to_string() == wanted {
                    found = Some(listed);
                    return Ok(false);
                }
                Ok(true)
            })?;
            found
        }
        _ => return Err(CliError::runtime_msg(Some(file), "give --tenant, --operation and --key, or --hash")),
    };
    let Some(listed) = found else {
        return Err(CliError::runtime_msg(Some(file), "no record matches"));
    };
    let view = RecordView::new(&listed.scoped, &listed.key_hash, &listed.record, args.reveal.reveal());
    if json {
        output::print_json(&serde_json::to_value(&view).unwrap_or_default());
    } else {
        output::print(&describe(&view));
    }
    Ok(Exit::Ok)
}

/// The fields of one record for people.
pub(crate) fn describe(view: &RecordView) -> String {
    let mut pairs = vec![("tenant", view.tenant.clone()), ("operation", view.operation.clone())];
    if let Some(key) = &view.key {
        pairs.push(("key", key.clone()));
    }
    if let Some(hash) = &view.key_hash {
        pairs.push(("key hash", hash.clone()));
    }
    pairs.push(("state", view.state.clone()));
    if let Some(outcome) = &view.outcome {
        pairs.push(("outcome", outcome.clone()));
    }
    if let Some(cause) = &view.cause {
        pairs.push(("cause", cause.replace('_', " ")));
    }
    pairs.push(("fingerprint", view.fingerprint.clone()));
    pairs.push(("fence", view.fence.to_string()));
    pairs.push(("attempts", view.attempts.to_string()));
    pairs.push(("created", output::time(view.created_at)));
    pairs.push(("updated", output::time(view.updated_at)));
    let times = [
        ("lease expires", view.lease_expires_at),
        ("replayed until", view.expires_at),
        ("forgotten at", view.forget_at),
    ];
    for (label, at) in times {
        if let Some(at) = at {
            pairs.push((label, output::time(at)));
        }
    }
    if let Some(size) = view.payload_bytes {
        pairs.push(("payload size", output::bytes(size)));
    }
    match (&view.payload, &view.payload_hex) {
        (Some(text), _) => pairs.push(("payload", text.clone())),
        (None, Some(hex)) => pairs.push(("payload (hex)", hex.clone())),
        (None, None) if view.payload_bytes.is_some() => pairs.push(("payload", "hidden (--show-payloads)".into())),
        (None, None) => {}
    }
    output::fields(&pairs)
}
