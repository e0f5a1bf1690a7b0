//! `idemdb get`: one record, by scope and key or by key hash.

use clap::{ArgGroup, Args};

use idemdb::{IdempotencyKey, ListedRecord, Scope, ScopedKey};

use crate::cmd::FileArg;
use crate::cmd::{FilterArgs, RevealArgs, scan};
use crate::error::{CliError, Exit};
use crate::open::open_read_only;
use crate::output;
use crate::view::RecordView;

/// Arguments of `idemdb get`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("which").required(true).args(["key", "hash"])))]
#[command(
    after_help = "Examples:\n  idemdb get store.idemdb --tenant acme --operation create_payment --key 3f0c...\n  \
idemdb get store.idemdb --hash 9a1b...   (the hash `list` shows)\n\nExits with 2 for an invalid tenant, operation, \
key or hash, and with 4 when no record matches. The store is opened read-only. Shown payloads have control \
characters escaped (`\\u{1b}`), so a stored payload cannot send escape sequences to the terminal."
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
    let which = Which::of(args)?;
    let store = open_read_only(file)?;
    let found: Option<ListedRecord> = match which {
        Which::Key(scope, key) => {
            let record =
                store.get(&scope, &key).map_err(|e| CliError::runtime_ctx(file, "cannot read the record", &e))?;
            record.map(|record| ListedRecord {
                key_hash: store.key_hash(&scope, &key),
                scoped: ScopedKey::new(scope, key),
                record,
            })
        }
        Which::Hash(wanted) => {
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

/// Which record `get` looks for, from checked arguments.
enum Which {
    Key(Scope, IdempotencyKey),
    Hash(String),
}

impl Which {
    /// Checks the arguments before the store is opened.
    ///
    /// # Errors
    /// Exit 2 for an invalid tenant, operation, key or hash.
    fn of(args: &GetArgs) -> Result<Which, CliError> {
        match (&args.tenant, &args.operation, &args.key, &args.hash) {
            (Some(tenant), Some(operation), Some(key), _) => {
                let scope = Scope::new(tenant.as_str(), operation.as_str()).map_err(|error| {
                    // Name the flag whose value is wrong.
                    let flag =
                        if Scope::new(tenant.as_str(), "operation").is_ok() { "--operation" } else { "--tenant" };
                    CliError::usage(flag, &error)
                })?;
                let key = IdempotencyKey::new(key.as_str()).map_err(|error| CliError::usage("--key", &error))?;
                Ok(Which::Key(scope, key))
            }
            (_, _, _, Some(hash)) => {
                let wanted = hash.trim().to_ascii_lowercase();
                if wanted.len() != 32 || !wanted.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(CliError::usage_msg(
                        "--hash",
                        "a key hash is 32 hexadecimal digits (as `list` shows it)",
                    ));
                }
                Ok(Which::Hash(wanted))
            }
            _ => Err(CliError::usage_msg("--key", "give --tenant, --operation and --key, or --hash")),
        }
    }
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
        (Some(text), _) => pairs.push(("payload", output::terminal_safe(text))),
        (None, Some(hex)) => pairs.push(("payload (hex)", hex.clone())),
        (None, None) if view.payload_bytes.is_some() => pairs.push(("payload", "hidden (--show-payloads)".into())),
        (None, None) => {}
    }
    output::fields(&pairs)
}
