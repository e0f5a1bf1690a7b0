//! `idemdb reconcile`: the reconciliation queue (uncertain records and effects whose outcome
//! is unknown), and resolving one entry once its outcome is known — in a store file, in a
//! PostgreSQL database (`--postgres`), or through a running service's admin API (`--url`).

use std::path::{Path, PathBuf};

use clap::{ArgGroup, Args};
use serde_json::{Value, json};

use idemdb::{
    Attention, AttentionKind, EffectName, IdempotencyKey, KeyHash, Named, ProviderState, ProviderStateKind, Resolution,
    ResolutionCause, ResolutionKind, Scope, Store,
};

use crate::cmd::outbox::item_json;
use crate::error::{CliError, Exit};
use crate::open::{open_existing_with, open_read_only};
use crate::output::{self, Align, Table};

/// The environment variable the admin token is read from when `--token-file` is not given.
pub(crate) const TOKEN_ENV: &str = "IDEMDB_ADMIN_TOKEN";

/// Arguments of `idemdb reconcile`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("action").args(["resolve", "provider", "retry"])))]
#[command(after_help = "Without an action, lists the queue oldest first (read-only). With one, resolves the entry \
of --tenant, --operation and --key:\n  --resolve completed|failed|released [--body TEXT]   an uncertain record\n  \
--effect NAME --provider confirmed --reference REF [--body TEXT]   what the provider says of an effect\n  \
--effect NAME --provider failed [--body TEXT] | --provider not_found\n  --effect NAME --retry   send it again with the \
same provider key (inside the provider's key-retention window only)\n\nA result or failure is stored as the HTTP \
response the idempotency layer replays (--status, default 200 for a result and 500 for a failure; --content-type, \
default application/json); --raw stores --body as given, for records the HTTP layer did not write.\n\nWhere: FILE (a \
store file; stop the service first to resolve), --postgres URL (while services run), or --url \
http://HOST:PORT/v1/admin (a running service's admin API, which also runs the service's own resolution, such as \
writing the payments example's payment row; the token from --token-file or IDEMDB_ADMIN_TOKEN, never from the \
command line).\n\nQuery the provider first: past its window, an effect of unknown outcome is never sent again. Exits \
with 2 for invalid arguments, 3 when the store, database or service cannot be reached, and 4 when the resolution is \
refused (not uncertain, past the window, `failed` within the provider's settle time --settle-secs, no such entry).")]
pub(crate) struct ReconcileArgs {
    /// The store file.
    #[arg(value_name = "FILE", required_unless_present_any = ["url", "postgres"], conflicts_with_all = ["url", "postgres"])]
    file: Option<PathBuf>,
    /// A running service's admin API instead of a file (`http://127.0.0.1:8080/v1/admin`).
    #[arg(long, value_name = "URL", conflicts_with = "postgres")]
    url: Option<String>,
    /// With `--url`: the file whose first line is the admin token (else IDEMDB_ADMIN_TOKEN).
    #[arg(long, value_name = "FILE", requires = "url")]
    token_file: Option<PathBuf>,
    /// A PostgreSQL database instead of a file (`postgresql://user@host:port/db`, completed by
    /// the PG* environment variables; `''` takes them all from the environment). Keep the
    /// password off the command line: PGPASSWORD, ~/.pgpass or --password-file.
    #[arg(long, value_name = "URL")]
    postgres: Option<String>,
    /// With `--postgres`: read the password from the first line of this file.
    #[arg(long, value_name = "FILE", requires = "postgres")]
    password_file: Option<PathBuf>,
    /// With `--postgres`: the schema of idemdb's tables (default `public`).
    #[arg(long, value_name = "NAME", requires = "postgres")]
    schema: Option<String>,
    /// Show idempotency keys (and provider keys) in clear in the listing, and the tenant of a
    /// file's or a database's entries (a service's admin API gives only the tenant's hash).
    #[arg(long)]
    show_keys: bool,
    /// With `--url`: the entry to resolve, by the `key_hash` the listing shows (the admin API
    /// never spells the tenant), instead of --tenant, --operation and --key.
    #[arg(long, value_name = "HASH", requires = "url", conflicts_with_all = ["tenant", "operation", "key"])]
    key_hash: Option<String>,
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
    #[arg(long, value_name = "RESOLUTION", conflicts_with = "effect", value_parser = parse_name::<ResolutionKind>)]
    resolve: Option<ResolutionKind>,
    /// The effect (outbox item) to resolve or retry.
    #[arg(long, value_name = "NAME")]
    effect: Option<String>,
    /// What the provider says of the effect: confirmed, failed or not_found.
    #[arg(long, value_name = "STATE", requires = "effect", value_parser = parse_name::<ProviderStateKind>)]
    provider: Option<ProviderStateKind>,
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
    /// write (its retries would get 500 corrupt for such a result). Not with --url.
    #[arg(long, conflicts_with = "url")]
    raw: bool,
    /// A note for the service's log (with --url).
    #[arg(long, value_name = "TEXT", requires = "url")]
    note: Option<String>,
    /// Send the effect again with the same provider key.
    #[arg(long, requires = "effect")]
    retry: bool,
    /// The provider's settle time in seconds (with a file or --postgres; a service applies its
    /// own policy): how long after an effect's last dispatch the provider may still apply it.
    /// `--provider failed` is refused before it has passed (exit 4). Default 60.
    #[arg(long, value_name = "SECS", conflicts_with = "url")]
    settle_secs: Option<u64>,
}

impl ReconcileArgs {
    /// The policy a resolution runs under: the defaults, with `--settle-secs`.
    fn policy(&self) -> idemdb::Policy {
        let policy = idemdb::Policy::default();
        match self.settle_secs {
            Some(secs) => policy.with_provider_settle_time(std::time::Duration::from_secs(secs)),
            None => policy,
        }
    }
}

fn parse_status(text: &str) -> Result<u16, String> {
    match text.parse::<u16>() {
        Ok(code) if (200..=599).contains(&code) => Ok(code),
        _ => Err(format!("`{text}` is not an HTTP status from 200 to 599")),
    }
}

/// A name of one of the core's vocabularies, as clap takes it.
fn parse_name<T: Named + Send + Sync>(name: &str) -> Result<T, String> {
    T::parse_name(name).map_err(|error| error.to_string())
}

/// The entry an action is for: by its identity, or (through a service's admin API) by the
/// key hash its listing shows.
enum Target {
    Named(Scope, IdempotencyKey),
    Hash(String),
}

/// What to do with the entry.
enum Action {
    Record(ResolutionKind),
    Provider(EffectName, Provider),
    Retry(EffectName),
}

/// What the provider says: its state, with the reference of a confirmed effect.
enum Provider {
    Confirmed(String),
    Failed,
    NotFound,
}

impl Provider {
    fn kind(&self) -> ProviderStateKind {
        match self {
            Provider::Confirmed(_) => ProviderStateKind::Confirmed,
            Provider::Failed => ProviderStateKind::Failed,
            Provider::NotFound => ProviderStateKind::NotFound,
        }
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

/// The entry an action names: `--tenant --operation --key`, or `--key-hash` (with `--url`).
fn target(args: &ReconcileArgs) -> Result<Target, CliError> {
    if let Some(hash) = &args.key_hash {
        let hash = hash.trim().to_ascii_lowercase();
        if hash.len() != 32 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(CliError::usage_msg(
                "--key-hash",
                "a key hash is 32 hexadecimal digits (as the listing shows it)",
            ));
        }
        return Ok(Target::Hash(hash));
    }
    let (Some(tenant), Some(operation), Some(key)) = (&args.tenant, &args.operation, &args.key) else {
        return Err(CliError::usage_msg("--key", "an action needs --tenant, --operation and --key (or --key-hash)"));
    };
    let scope =
        Scope::new(tenant.as_str(), operation.as_str()).map_err(|e| CliError::usage("--tenant/--operation", &e))?;
    let key = IdempotencyKey::new(key.as_str()).map_err(|e| CliError::usage("--key", &e))?;
    Ok(Target::Named(scope, key))
}

fn action(args: &ReconcileArgs) -> Result<Option<(Target, Action)>, CliError> {
    if args.resolve.is_none() && args.provider.is_none() && !args.retry {
        if args.key.is_some() || args.key_hash.is_some() || args.effect.is_some() {
            return Err(CliError::usage_msg("--key", "needs an action: --resolve, --provider or --retry"));
        }
        return Ok(None);
    }
    let target = target(args)?;
    if let Some(kind) = args.resolve {
        return Ok(Some((target, Action::Record(kind))));
    }
    let effect = args.effect.as_deref().unwrap_or_default();
    let effect = EffectName::new(effect).map_err(|e| CliError::usage("--effect", &e))?;
    if args.retry {
        return Ok(Some((target, Action::Retry(effect))));
    }
    let provider = match args.provider {
        Some(ProviderStateKind::Confirmed) => {
            let reference = args.reference.clone().ok_or_else(|| {
                CliError::usage_msg(
                    "--reference",
                    &format!("{} needs the provider's reference", ProviderStateKind::Confirmed),
                )
            })?;
            Provider::Confirmed(reference)
        }
        Some(ProviderStateKind::Failed) => Provider::Failed,
        Some(ProviderStateKind::NotFound) => Provider::NotFound,
        other => {
            let got = other.map(ProviderStateKind::as_str).unwrap_or_default();
            let all: Vec<&str> = ProviderStateKind::ALL.iter().map(|kind| kind.as_str()).collect();
            return Err(CliError::usage_msg("--provider", &format!("`{got}`: one of {}", all.join(", "))));
        }
    };
    Ok(Some((target, Action::Provider(effect, provider))))
}

/// The identity of a local action (a file or a database): a key hash names an entry only
/// through a service's admin API.
fn named(action: Option<(Target, Action)>) -> Result<Option<(Scope, IdempotencyKey, Action)>, CliError> {
    match action {
        None => Ok(None),
        Some((Target::Named(scope, key), action)) => Ok(Some((scope, key, action))),
        Some((Target::Hash(_), _)) => {
            Err(CliError::usage_msg("--key-hash", "is for --url; give --tenant, --operation and --key"))
        }
    }
}

/// The store-side form of an action: what `reconcile` or `resolve_effect` is called with.
fn resolution(args: &ReconcileArgs, kind: ResolutionKind) -> Result<Resolution, CliError> {
    Ok(match kind {
        ResolutionKind::Released => Resolution::Released,
        ResolutionKind::Completed => Resolution::Completed(result_bytes(args, true)?),
        _ => Resolution::Failed(result_bytes(args, false)?),
    })
}

fn provider_state(args: &ReconcileArgs, provider: &Provider) -> Result<ProviderState, CliError> {
    Ok(match provider {
        Provider::Confirmed(reference) => {
            ProviderState::Confirmed { reference: reference.clone(), result: result_bytes(args, true)? }
        }
        Provider::Failed => ProviderState::Failed { body: result_bytes(args, false)? },
        Provider::NotFound => ProviderState::NotFound,
    })
}

pub(crate) fn run(args: &ReconcileArgs, json: bool) -> Result<Exit, CliError> {
    let action = action(args)?;
    if let Some(url) = &args.url {
        return remote::run(args, url, action, json);
    }
    let action = named(action)?;
    if let Some(url) = &args.postgres {
        return postgres(args, url, action, json);
    }
    let Some(file) = args.file.as_deref() else {
        return Err(CliError::usage_msg("FILE", "give a store file, --postgres or --url"));
    };
    let Some((scope, key, action)) = action else {
        let store = open_read_only(file)?;
        let queue =
            store.reconciliation_queue(0).map_err(|e| CliError::runtime_ctx(file, "cannot read the queue", &e))?;
        let entries: Vec<Value> = queue.iter().map(|entry| entry_json(&store, entry, args.show_keys)).collect();
        return list(&file.display().to_string(), "file", entries, json);
    };
    let store = open_existing_with(file, Store::builder().default_policy(args.policy()))?;
    let refused = |e: idemdb::Error| CliError::runtime_ctx(file, "the store refused the resolution", &e);
    let done = match action {
        Action::Record(kind) => {
            store.reconcile(&scope, &key, resolution(args, kind)?, ResolutionCause::Operator).map_err(refused)?;
            resolved_record(kind)
        }
        Action::Retry(effect) => {
            let item = store.retry_effect(&scope, &key, &effect, ResolutionCause::Operator).map_err(refused)?;
            resolved_effect(item_json(&store, &item, false))
        }
        Action::Provider(effect, provider) => {
            let state = provider_state(args, &provider)?;
            let item =
                store.resolve_effect(&scope, &key, &effect, state, ResolutionCause::Operator).map_err(refused)?;
            resolved_effect(item_json(&store, &item, false))
        }
    };
    print_done(&done, json);
    Ok(Exit::Ok)
}

/// What a record's resolution printed: `{"resolved": "record", "resolution": ...}`.
fn resolved_record(kind: ResolutionKind) -> Value {
    json!({ "resolved": AttentionKind::Record.as_str(), "resolution": kind.as_str() })
}

/// What an effect's resolution or retry printed: `{"resolved": "effect", "item": ...}`.
fn resolved_effect(item: Value) -> Value {
    json!({ "resolved": AttentionKind::Effect.as_str(), "item": item })
}

fn print_done(done: &Value, json: bool) {
    if json {
        output::print_json(done);
    } else {
        output::print(&format!("resolved: {done}"));
    }
}

/// `reconcile --postgres`: the same queue and resolutions through the adapter, one
/// transaction each, while services keep serving the database.
fn postgres(
    args: &ReconcileArgs,
    url: &str,
    action: Option<(Scope, IdempotencyKey, Action)>,
    json: bool,
) -> Result<Exit, CliError> {
    let url = Some(url).filter(|url| !url.is_empty());
    let config = idemdb_postgres::connection_config(url, args.password_file.as_deref())
        .map_err(|error| CliError::open_target("PostgreSQL", &error))?;
    let target = idemdb_postgres::describe(&config);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| CliError::runtime_msg(None, format!("cannot start the async runtime: {error}")))?;
    runtime.block_on(async {
        let mut builder = idemdb_postgres::PgStore::builder_with_config(config)
            .application_name("idemdb-cli")
            .default_policy(args.policy());
        if let Some(schema) = &args.schema {
            builder = builder.schema(schema.clone());
        }
        let store = builder.connect().await.map_err(|error| CliError::open_target(&target, &error))?;
        let refused =
            |e: idemdb_postgres::Error| CliError::runtime_target(&target, "the database refused the resolution", &e);
        let Some((scope, key, action)) = action else {
            let queue = store
                .reconciliation_queue(0)
                .await
                .map_err(|e| CliError::runtime_target(&target, "cannot read the queue", &e))?;
            let hashes =
                |scope: &Scope, key: &IdempotencyKey| (store.key_hash(scope, key), store.tenant_hash(scope.tenant()));
            let entries = queue.iter().map(|entry| entry_json_of(entry, hashes, args.show_keys)).collect();
            return list(&target, "database", entries, json);
        };
        let item = |item: &idemdb::OutboxItem| {
            let (key_hash, tenant_hash) =
                (store.key_hash(&item.scope, &item.key), store.tenant_hash(item.scope.tenant()));
            idemdb_http::admin::effect_json(item, key_hash, tenant_hash, args.show_keys)
        };
        let done = match action {
            Action::Record(kind) => {
                store
                    .reconcile(&scope, &key, resolution(args, kind)?, ResolutionCause::Operator)
                    .await
                    .map_err(refused)?;
                resolved_record(kind)
            }
            Action::Retry(effect) => {
                let done =
                    store.retry_effect(&scope, &key, &effect, ResolutionCause::Operator).await.map_err(refused)?;
                resolved_effect(item(&done))
            }
            Action::Provider(effect, provider) => {
                let state = provider_state(args, &provider)?;
                let done = store
                    .resolve_effect(&scope, &key, &effect, state, ResolutionCause::Operator)
                    .await
                    .map_err(refused)?;
                resolved_effect(item(&done))
            }
        };
        print_done(&done, json);
        Ok(Exit::Ok)
    })
}

/// Prints the queue: one JSON document naming where it came from, or a table.
fn list(source: &str, source_kind: &str, entries: Vec<Value>, json: bool) -> Result<Exit, CliError> {
    if json {
        output::print_json(&json!({ source_kind: source, "entries": entries }));
        return Ok(Exit::Ok);
    }
    // In clear where the entries carry it (--show-keys), else the store's keyed hash.
    let clear = |name: &str| entries.iter().any(|entry| entry.get(name).is_some());
    let (tenant, tenant_header) = if clear("tenant") { ("tenant", "tenant") } else { ("tenant_hash", "tenant hash") };
    let (key, key_header) =
        if clear("idempotency_key") { ("idempotency_key", "key") } else { ("key_hash", "key hash") };
    let mut table = Table::new(&[
        ("since", Align::Left),
        ("kind", Align::Left),
        (tenant_header, Align::Left),
        ("operation", Align::Left),
        (key_header, Align::Left),
        ("what", Align::Left),
    ]);
    for value in &entries {
        let text = |name: &str| value[name].as_str().map(output::terminal_safe).unwrap_or_default();
        table.row(vec![
            output::time(value["since_ms"].as_u64().unwrap_or_default()),
            text("kind"),
            text(tenant),
            text("operation"),
            text(key),
            output::terminal_safe(&what(value)),
        ]);
    }
    if table.is_empty() {
        output::print("the reconciliation queue is empty");
    } else {
        output::print(&table.render());
    }
    Ok(Exit::Ok)
}

fn entry_json(store: &idemdb::Store, entry: &Attention, show_keys: bool) -> Value {
    entry_json_of(entry, |scope, key| (store.key_hash(scope, key), store.tenant_hash(scope.tenant())), show_keys)
}

/// The admin API's spelling of an entry ([`idemdb_http::admin::attention_json`]); with
/// `show_keys` also the tenant in clear, which an operator resolving from a file or a database
/// names (`--tenant`). `hashes` gives the key's and the tenant's keyed hashes.
fn entry_json_of(
    entry: &Attention,
    hashes: impl Fn(&Scope, &IdempotencyKey) -> (KeyHash, KeyHash),
    show_keys: bool,
) -> Value {
    let (scope, key) = entry.scoped_key();
    let (key_hash, tenant_hash) = hashes(scope, key);
    let mut out = idemdb_http::admin::attention_json(entry, key_hash, tenant_hash, show_keys);
    if show_keys {
        out["tenant"] = json!(scope.tenant());
    }
    out
}

/// The table's `what` of an entry: "record uncertain", "effect charge (uncertain)".
fn what(entry: &Value) -> String {
    let text = |name: &str| entry[name].as_str().unwrap_or_default();
    match text("kind").parse::<AttentionKind>() {
        Ok(AttentionKind::Record) => format!("{} {}", AttentionKind::Record, text("state")),
        Ok(AttentionKind::Effect) => format!("{} {} ({})", AttentionKind::Effect, text("effect"), text("state")),
        _ => format!("unknown kind `{}`", text("kind")),
    }
}

/// `reconcile --url`: the admin API of a running service.
mod remote {
    use super::*;

    /// The token: the first line of `--token-file`, else the environment.
    fn token(args: &ReconcileArgs) -> Result<String, CliError> {
        let token = match &args.token_file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| CliError::usage("--token-file", &e))?;
                text.lines().next().unwrap_or_default().trim().to_string()
            }
            None => std::env::var(TOKEN_ENV).unwrap_or_default().trim().to_string(),
        };
        if token.is_empty() {
            return Err(CliError::usage_msg(
                "--token-file",
                &format!("--url needs the admin token: --token-file FILE or {TOKEN_ENV}"),
            ));
        }
        Ok(token)
    }

    /// The base URL: `http://` only (no TLS in this build; reach a remote service through a
    /// tunnel), without a trailing slash, with no credentials in it.
    fn base(url: &str) -> Result<String, CliError> {
        let parsed = reqwest::Url::parse(url).map_err(|e| CliError::usage("--url", &e))?;
        if parsed.scheme() != "http" {
            return Err(CliError::usage_msg("--url", "http://HOST:PORT/PATH only (use a tunnel for a remote service)"));
        }
        if !parsed.username().is_empty() || parsed.password().is_some() || parsed.query().is_some() {
            return Err(CliError::usage_msg(
                "--url",
                "no credentials or query in the URL: the token goes in --token-file",
            ));
        }
        Ok(url.trim_end_matches('/').to_string())
    }

    pub(super) fn run(
        args: &ReconcileArgs,
        url: &str,
        action: Option<(Target, Action)>,
        json: bool,
    ) -> Result<Exit, CliError> {
        let base = base(url)?;
        let token = token(args)?;
        let request = action.as_ref().map(|(target, action)| body(args, target, action));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|error| CliError::runtime_msg(None, format!("cannot start the async runtime: {error}")))?;
        let client = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(30))
            .build()
            .map_err(|e| CliError::runtime_target(&base, "cannot make an HTTP client", &e))?;
        runtime.block_on(async {
            let sent = match &request {
                None => client.get(format!("{base}/reconciliation?limit=1000")),
                Some(body) => client
                    .post(format!("{base}/resolve"))
                    .header("content-type", "application/json")
                    .body(body.to_string()),
            };
            let response =
                sent.bearer_auth(&token).send().await.map_err(|e| CliError::open_target(&base, &e.without_url()))?;
            let status = response.status();
            let bytes = response.bytes().await.map_err(|e| CliError::open_target(&base, &e.without_url()))?;
            let answer: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            if !status.is_success() {
                let detail = answer["detail"].as_str().or(answer["title"].as_str()).unwrap_or("no detail");
                let code = answer["code"].as_str().unwrap_or("");
                let context =
                    if request.is_some() { "the service refused the resolution" } else { "the service refused" };
                return Err(CliError::runtime_msg(
                    Some(Path::new(&base)),
                    format!("{context}: {} {code} {}", status.as_u16(), output::terminal_safe(detail)),
                ));
            }
            if request.is_some() {
                print_done(&answer, json);
                return Ok(Exit::Ok);
            }
            let Some(entries) = answer["entries"].as_array() else {
                return Err(CliError::runtime_msg(
                    Some(Path::new(&base)),
                    "the answer has no `entries`: not an idemdb admin API?",
                ));
            };
            let entries = entries
                .iter()
                .cloned()
                .map(|mut entry| {
                    if !args.show_keys
                        && let Some(object) = entry.as_object_mut()
                    {
                        object.remove("idempotency_key");
                        object.remove("provider_key");
                    }
                    entry
                })
                .collect();
            list(&base, "url", entries, json)
        })
    }

    /// The JSON body of `POST /resolve`: the service encodes the response it stores.
    fn body(args: &ReconcileArgs, target: &Target, action: &Action) -> Value {
        let mut body = match target {
            Target::Named(scope, key) => {
                json!({ "tenant": scope.tenant(), "operation": scope.operation(), "key": key.as_str() })
            }
            Target::Hash(hash) => json!({ "key_hash": hash }),
        };
        match action {
            Action::Record(kind) => body["resolution"] = json!(kind.as_str()),
            Action::Retry(effect) => {
                body["effect"] = json!(effect.as_str());
                body["retry"] = json!(true);
            }
            Action::Provider(effect, provider) => {
                body["effect"] = json!(effect.as_str());
                body["provider"] = json!(provider.kind().as_str());
                if let Provider::Confirmed(reference) = provider {
                    body["reference"] = json!(reference);
                }
            }
        }
        for (name, value) in [
            ("body", args.body.as_ref().map(|b| json!(b))),
            ("status", args.status.map(|s| json!(s))),
            ("content_type", args.content_type.as_ref().map(|c| json!(c))),
            ("note", args.note.as_ref().map(|n| json!(n))),
        ] {
            if let Some(value) = value {
                body[name] = value;
            }
        }
        body
    }
}
