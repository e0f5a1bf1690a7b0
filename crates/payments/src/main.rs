//! The payments service.
//!
//! ```sh
//! cargo run --release -p payments-example -- --addr 127.0.0.1:8080 --data ./payments-data
//! cargo run --release -p payments-example -- --addr 127.0.0.1:8080 --postgres postgresql://app@127.0.0.1/payments
//! ```
//!
//! Exactly one of `--data DIR` (the embedded redb store) and `--postgres URL`. On PostgreSQL,
//! any number of instances can serve the same database (and `--schema`).
//!
//! `--admin-token TOKEN --backup-dir DIR` enable `POST /v1/admin/backup` (and, on `--data`,
//! SIGUSR1 writes a timestamped backup into DIR). SIGUSR1 never stops the service: without
//! `--backup-dir`, or on PostgreSQL, it is refused with a line on stderr that says why.
//!
//! Prints `listening on http://ADDR` once it accepts connections (with `--addr 127.0.0.1:0`
//! the port the system chose), and stops on Ctrl-C or SIGTERM.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::{ArgGroup, CommandFactory, Parser};
use idemdb::{ExpiredLease, Policy, Store};
use idemdb_postgres::PgStore;
use payments_example::{
    Admin, Backend, PgBackend, Provider, RedbBackend, payment_operation_name, router_with, timestamped_backup_name,
};

/// A payments service with Idempotency-Key semantics (POST /v1/payments, POST
/// /v1/webhooks/provider, GET /v1/reconciliation, GET /v1/ledger, GET /v1/idempotency-policy,
/// GET /metrics).
#[derive(Debug, Parser)]
#[command(version, group(ArgGroup::new("backend").required(true).args(["data", "postgres"])))]
struct Args {
    /// Address to listen on (port 0: any free port, printed at start).
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: String,
    /// Directory of the embedded stores (created if missing): `idemdb.redb` holds the
    /// idempotency records and the payments, `provider.redb` the simulated provider.
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// A PostgreSQL database instead of `--data` (`postgresql://user@host:port/db` or
    /// `host=… user=…`, completed by the standard `PG*` environment variables: PGHOST, PGPORT,
    /// PGUSER, PGPASSWORD, PGDATABASE, PGPASSFILE, PGSSLMODE; an empty URL, `--postgres ''`,
    /// takes them all from the environment): the idemdb tables (migrated at start), the payments in table
    /// `app_payments` and the simulated provider in table `sim_provider_charges`, all in the
    /// schema of `--schema`. Keep the password off the command line: PGPASSWORD, ~/.pgpass or
    /// `--password-file`.
    #[arg(long, value_name = "URL")]
    postgres: Option<String>,
    /// With `--postgres`: read the password from the first line of this file.
    #[arg(long, value_name = "FILE", requires = "postgres")]
    password_file: Option<PathBuf>,
    /// The PostgreSQL schema for all of the service's tables (default `public`; created if
    /// missing): 1..=63 bytes of `[a-z0-9_]`, not starting with a digit.
    #[arg(long, value_name = "NAME")]
    schema: Option<String>,
    /// How long each call to the simulated provider takes, in milliseconds.
    #[arg(long, default_value_t = 0, value_name = "MS")]
    provider_latency_ms: u64,
    /// How long after a call the simulated provider may still apply it, in milliseconds: it
    /// applies a call within this time of its arrival or drops it, uncharged. The payment
    /// policy's provider settle time: before it has passed since a charge's last call, the
    /// provider's "no such charge" is not a fact, so the charge is neither resolved failed nor
    /// asked about by the reconciler. Default: the latency plus 1000.
    #[arg(long, value_name = "MS")]
    provider_settle_ms: Option<u64>,
    /// The lease of a payment in progress, in seconds: after it, a retry finds the outcome
    /// uncertain (409, reconcile first) instead of waiting.
    #[arg(long, default_value_t = 60, value_name = "SECS")]
    lease_ttl_secs: u64,
    /// How long a payment's answer is replayed, in seconds (then only its tombstone is kept:
    /// a retry gets 410 expired).
    #[arg(long, default_value_t = 30 * 24 * 3600, value_name = "SECS")]
    response_ttl_secs: u64,
    /// How long the tombstone is kept after the answer expires, in seconds (then the key is
    /// forgotten).
    #[arg(long, default_value_t = 365 * 24 * 3600, value_name = "SECS")]
    tombstone_ttl_secs: u64,
    /// Enables admin requests (`POST /v1/admin/backup`), authenticated by
    /// `Authorization: Bearer TOKEN` (at least 16 bytes; never a tenant's token).
    #[arg(long, value_name = "TOKEN")]
    admin_token: Option<String>,
    /// Where backups go (with `--data`; created if missing): `POST /v1/admin/backup` names a
    /// file in it, and SIGUSR1 writes `idemdb-<unix ms>.idemdb` there.
    #[arg(long, value_name = "DIR")]
    backup_dir: Option<PathBuf>,
    /// A fault for trying reconciliation: the simulated provider charges payments to this
    /// destination, then loses its answer (the charge waits in GET /v1/reconciliation).
    #[arg(long, value_name = "DESTINATION")]
    provider_lose_responses_to: Option<String>,
    /// Fault injection: the process aborts when a payment to this destination has reserved its
    /// key (its charge enqueued in the same commit) and before the charge is sent; the next
    /// process dispatches it, and the retry replays the payment.
    #[arg(long, value_name = "DESTINATION")]
    crash_after_reserve_to: Option<String>,
    /// Fault injection: after a payment to DESTINATION has reserved its key (its charge
    /// enqueued in the same commit), the handler's next N reads of the charge fail as in a
    /// database outage (`DESTINATION:N`, N at least 1). The key is never released for it.
    #[arg(long, value_name = "DESTINATION:N", value_parser = destination_and_count)]
    fail_reads_after_reserve_to: Option<(String, u32)>,
    /// Seconds between rounds of the reconciler, which asks the provider about uncertain
    /// charges and releases uncertain payments that enqueued no charge.
    #[arg(long, default_value_t = 5)]
    reconcile_interval_secs: u64,
    /// The provider's webhook key, Standard Webhooks: a shared signing secret
    /// (`whsec_<base64>`, `v1` HMAC signatures) or the provider's ed25519 public key
    /// (`whpk_<base64>`, `v1a` signatures); without it the environment's
    /// `PAYMENTS_WEBHOOK_SECRET`. With a key, `POST /v1/webhooks/provider` refuses every
    /// delivery that is not signed with it (401 `invalid-signature`).
    #[arg(long, value_name = "SECRET")]
    webhook_secret: Option<String>,
    /// Seconds between rounds of the purge, which removes expired idempotency records (results
    /// become tombstones at their response TTL, tombstones go at their tombstone TTL), finished
    /// outbox items, old webhook deliveries and old audit events.
    #[arg(long, default_value_t = 60, value_name = "SECS")]
    purge_interval_secs: u64,
    /// Due records (and audit events, and rows of each outbox table) per purge batch: one
    /// short transaction each.
    #[arg(long, default_value_t = 1000, value_name = "N")]
    purge_batch: usize,
    /// How long a request's headers may take to arrive before the connection is closed.
    #[arg(long, default_value_t = 10, value_name = "SECS")]
    header_read_timeout_secs: u64,
    /// How long a request's body may take to arrive before the request is refused.
    #[arg(long, default_value_t = 30, value_name = "SECS")]
    body_read_timeout_secs: u64,
    /// On SIGTERM or Ctrl-C: how long requests in progress may take to finish (the server
    /// stops accepting at once; the dispatcher keeps sending their charges meanwhile).
    #[arg(long, default_value_t = 30, value_name = "SECS")]
    drain_secs: u64,
}

/// Which store backs the service, each with its own [`Backend`]; the router, the handlers and
/// the ledger are the same.
enum Chosen {
    /// The embedded redb store in a directory.
    Redb { dir: PathBuf },
    /// A PostgreSQL database (and the schema of the service's tables).
    Postgres { url: String, schema: Option<String> },
}

impl Args {
    /// The backend the arguments name. Clap's `backend` group already refuses none or both;
    /// this says so again rather than assume it, and refuses `--schema` without `--postgres`.
    fn backend(&self) -> Result<Chosen, clap::Error> {
        match (&self.data, &self.postgres) {
            (None, Some(_)) if self.backup_dir.is_some() => Err(Args::command().error(
                ErrorKind::ArgumentConflict,
                "--backup-dir is for --data: back up PostgreSQL with its own tools",
            )),
            (Some(_), None) if self.schema.is_some() => {
                Err(Args::command().error(ErrorKind::ArgumentConflict, "--schema is for --postgres, not --data"))
            }
            (Some(dir), None) => Ok(Chosen::Redb { dir: dir.clone() }),
            (None, Some(url)) => Ok(Chosen::Postgres { url: url.clone(), schema: self.schema.clone() }),
            _ => {
                Err(Args::command()
                    .error(ErrorKind::ArgumentConflict, "give exactly one of --data DIR and --postgres URL"))
            }
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    // The adapter's warnings (lost commits, clock skew, ignored password files) on stderr;
    // `RUST_LOG` filters them (default `info`).
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    // The layer's and the reconciler's metrics, served at GET /metrics in Prometheus text.
    if let Err(error) = payments_example::metrics::install() {
        eprintln!("payments-example: metrics are off: {error}");
    }
    let backend = args.backend().unwrap_or_else(|error| error.exit());
    match run(args, backend).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("payments-example: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Parses `DESTINATION:N` (N a count of at least 1).
fn destination_and_count(value: &str) -> Result<(String, u32), String> {
    let (destination, count) = value.rsplit_once(':').ok_or("expected DESTINATION:N")?;
    let count: u32 = count.parse().map_err(|_| format!("{count:?} is not a count"))?;
    if destination.is_empty() || count == 0 {
        return Err("expected a destination and a count of at least 1".into());
    }
    Ok((destination.to_string(), count))
}

async fn run(args: Args, backend: Chosen) -> Result<(), Box<dyn std::error::Error>> {
    let latency = Duration::from_millis(args.provider_latency_ms);
    let settle = args.provider_settle_ms.map_or(latency + payments_example::SETTLE_MARGIN, Duration::from_millis);
    // The charge is the payment's only external effect, and it goes through the outbox: an
    // attempt whose lease ran out before it enqueued the charge (the process died in between)
    // provably charged nothing, so its retry runs instead of waiting for an operator.
    let policy = Policy::default()
        .with_lease_ttl(Duration::from_secs(args.lease_ttl_secs.max(1)))
        .with_response_ttl(Duration::from_secs(args.response_ttl_secs.max(1)))
        .with_tombstone_ttl(Duration::from_secs(args.tombstone_ttl_secs.max(1)))
        .with_expired_lease(ExpiredLease::TakeoverIfNoEffect)
        .with_provider_settle_time(settle);
    let faults = |provider: Provider| {
        let provider = provider.settle_within(settle);
        let provider = match &args.provider_lose_responses_to {
            Some(destination) => provider.lose_responses_to(destination.clone()),
            None => provider,
        };
        let provider = match &args.crash_after_reserve_to {
            Some(destination) => provider.crash_after_reserve_to(destination.clone()),
            None => provider,
        };
        match &args.fail_reads_after_reserve_to {
            Some((destination, count)) => provider.fail_reads_after_reserve_to(destination.clone(), *count),
            None => provider,
        }
    };
    if let Some(dir) = &args.backup_dir {
        std::fs::create_dir_all(dir)?;
    }
    let secret = args.webhook_secret.clone().or_else(|| std::env::var("PAYMENTS_WEBHOOK_SECRET").ok());
    let webhooks = match secret.filter(|secret| !secret.is_empty()) {
        Some(secret) => {
            Some(idemdb_http::WebhookVerifier::new(&secret).map_err(|error| format!("--webhook-secret: {error}"))?)
        }
        None => None,
    };
    let timeouts = payments_example::ReadTimeouts {
        headers: Duration::from_secs(args.header_read_timeout_secs.max(1)),
        body: Duration::from_secs(args.body_read_timeout_secs.max(1)),
    };
    let admin = match &args.admin_token {
        Some(token) => Some(Admin::new(token.clone(), args.backup_dir.clone())?),
        None => None,
    };
    match backend {
        Chosen::Redb { dir } => {
            std::fs::create_dir_all(&dir)?;
            let provider = faults(Provider::open(&dir.join("provider.redb"), latency)?);
            let store = Store::builder().policy(payment_operation_name(), policy).open(dir.join("idemdb.redb"))?;
            let backend = RedbBackend::new(store);
            backup_on_signal(match &args.backup_dir {
                Some(dir) => OnSignal::Backup { backend: backend.clone(), dir: dir.clone() },
                None => OnSignal::Refuse(
                    "no backup directory: start the service with --backup-dir DIR to write a backup on SIGUSR1",
                ),
            });
            let purging =
                payments_example::purge_rounds(backend.store().clone(), purge_interval(&args), args.purge_batch);
            let served = serve(backend, provider, &args, admin, webhooks, timeouts).await;
            purging.stop().await;
            served
        }
        Chosen::Postgres { url, schema } => {
            let url = Some(url.as_str()).filter(|url| !url.is_empty());
            let config = idemdb_postgres::connection_config(url, args.password_file.as_deref())
                .map_err(|error| format!("PostgreSQL settings: {error}"))?;
            let target = idemdb_postgres::describe(&config);
            backup_on_signal(OnSignal::Refuse(
                "backups on SIGUSR1 are for the embedded store (--data); back up PostgreSQL with its own tools (pg_dump)",
            ));
            let mut builder = PgStore::builder_with_config(config)
                .policy(payment_operation_name(), policy)
                .application_name("payments-example");
            if let Some(schema) = schema {
                builder = builder.schema(schema);
            }
            let store = builder
                .connect()
                .await
                .map_err(|error| format!("cannot connect to PostgreSQL at {target}: {error}"))?;
            let provider = faults(Provider::postgres(store.clone(), latency).await?);
            let purging = payments_example::purge_postgres(store.clone(), purge_interval(&args), args.purge_batch);
            let served = serve(PgBackend::new(store).await?, provider, &args, admin, webhooks, timeouts).await;
            purging.stop().await;
            served
        }
    }
}

fn purge_interval(args: &Args) -> Duration {
    Duration::from_secs(args.purge_interval_secs.max(1))
}

async fn serve<B: Backend>(
    backend: B,
    provider: Provider,
    args: &Args,
    admin: Option<Admin>,
    webhooks: Option<idemdb_http::WebhookVerifier>,
    timeouts: payments_example::ReadTimeouts,
) -> Result<(), Box<dyn std::error::Error>> {
    if webhooks.is_none() {
        // Said once the service is about to serve: anyone who can reach it could post a
        // provider's event.
        eprintln!(
            "payments-example: WARNING: webhooks are UNVERIFIED: no --webhook-secret (or \
             PAYMENTS_WEBHOOK_SECRET), so POST /v1/webhooks/provider accepts unsigned deliveries; set the \
             provider's signing key in production"
        );
    }
    let (router, dispatcher) = router_with(backend, provider, admin, webhooks)?;
    let listener = tokio::net::TcpListener::bind(&args.addr).await?;
    let reconciler = dispatcher.reconciler().interval(Duration::from_secs(args.reconcile_interval_secs.max(1)));
    let reconciler = tokio::spawn(reconciler.run());
    // Charges the previous process left in the outbox are dispatched from the start; the
    // dispatcher runs on while requests drain (they wait for its answers), then stops claiming
    // and lets its provider calls report.
    let (stop_dispatching, stopped) = tokio::sync::oneshot::channel();
    let dispatcher = tokio::spawn(
        dispatcher.run_until(async move { stopped.await.unwrap_or_else(|_| tokio::time::Instant::now()) }),
    );
    println!("listening on http://{}", listener.local_addr()?);
    // One drain limit for both: requests finishing, then the dispatcher's calls reporting.
    let drain = Duration::from_secs(args.drain_secs);
    let signalled = std::sync::Arc::new(std::sync::OnceLock::new());
    let shutdown_at = {
        let signalled = std::sync::Arc::clone(&signalled);
        async move {
            shutdown().await;
            let _ = signalled.set(tokio::time::Instant::now() + drain);
        }
    };
    let served = payments_example::serve(listener, router, timeouts, shutdown_at, drain).await;
    reconciler.abort();
    let deadline = signalled.get().copied().unwrap_or_else(tokio::time::Instant::now);
    let _ = stop_dispatching.send(deadline);
    let _ = dispatcher.await;
    let drained = served?;
    if !drained.finished {
        eprintln!(
            "payments-example: requests still running after the {} s drain were cut; their keys answer once their charges are settled",
            drain.as_secs()
        );
    }
    Ok(())
}

/// What SIGUSR1 does: write a backup, or say why it does not.
#[cfg_attr(not(unix), allow(dead_code))]
enum OnSignal {
    /// A timestamped backup of `backend`'s store into `dir`.
    Backup { backend: RedbBackend, dir: PathBuf },
    /// Nothing but a line on stderr with this reason: the signal's default action (ending the
    /// process) is never left in place, since a cron line meant for another service may send it.
    Refuse(&'static str),
}

/// Handles SIGUSR1 as `action` says, one signal at a time (each outcome on stderr). The
/// handler is installed before the service listens.
#[cfg(unix)]
fn backup_on_signal(action: OnSignal) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut signals) = signal(SignalKind::user_defined1()) else {
        eprintln!("payments-example: SIGUSR1 cannot be handled here: no backups on signal");
        return;
    };
    tokio::spawn(async move {
        while signals.recv().await.is_some() {
            let (backend, dir) = match &action {
                OnSignal::Backup { backend, dir } => (backend, dir),
                OnSignal::Refuse(reason) => {
                    eprintln!("payments-example: SIGUSR1 refused, no backup written: {reason}");
                    continue;
                }
            };
            let (backend, path) = (backend.clone(), dir.join(timestamped_backup_name()));
            let written = tokio::task::spawn_blocking(move || backend.backup_blocking(&path)).await;
            match written {
                Ok(Ok(report)) => eprintln!(
                    "payments-example: backup {} written and verified: {} records, {} bytes, {} ms",
                    report.path.display(),
                    report.records,
                    report.bytes,
                    report.took.as_millis()
                ),
                Ok(Err(error)) => eprintln!("payments-example: backup failed: {error}"),
                Err(error) => eprintln!("payments-example: backup failed: {error}"),
            }
        }
    });
}

#[cfg(not(unix))]
fn backup_on_signal(_action: OnSignal) {}

async fn shutdown() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}
