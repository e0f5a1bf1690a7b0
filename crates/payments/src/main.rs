//! The payments service.
//!
//! ```sh
//! cargo run --release -p payments-example -- --addr 127.0.0.1:8080 --data ./payments-data
//! ```
//!
//! Prints `listening on http://ADDR` once it accepts connections (with `--addr 127.0.0.1:0`
//! the port the system chose), and stops on Ctrl-C or SIGTERM.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use idemdb::{Policy, Store};
use payments_example::{Ledger, Provider, RedbLedger, payment_operation_name, router};

/// A payments service with Idempotency-Key semantics (POST /v1/payments, GET /v1/ledger,
/// GET /v1/idempotency-policy).
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Address to listen on (port 0: any free port, printed at start).
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: String,
    /// Directory of the embedded stores (created if missing): `idemdb.redb` holds the
    /// idempotency records and the payments, `provider.redb` the simulated provider.
    #[arg(long, value_name = "DIR")]
    data: PathBuf,
    /// How long each call to the simulated provider takes, in milliseconds.
    #[arg(long, default_value_t = 0, value_name = "MS")]
    provider_latency_ms: u64,
    /// The lease of a payment in progress, in seconds: after it, a retry finds the outcome
    /// uncertain (409, reconcile first) instead of waiting.
    #[arg(long, default_value_t = 60, value_name = "SECS")]
    lease_ttl_secs: u64,
}

/// Which store backs the service. The PostgreSQL adapter adds a variant (`--postgres URL`)
/// with its own [`Ledger`]; the router and handlers stay as they are.
enum Backend {
    /// The embedded redb store in a directory.
    Redb { dir: PathBuf },
}

impl Args {
    fn backend(&self) -> Backend {
        Backend::Redb { dir: self.data.clone() }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("payments-example: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all(&args.data)?;
    let provider = Provider::open(&args.data.join("provider.redb"), Duration::from_millis(args.provider_latency_ms))?;
    let lease_ttl = Duration::from_secs(args.lease_ttl_secs.max(1));
    match args.backend() {
        Backend::Redb { dir } => {
            let policy = Policy::default().with_lease_ttl(lease_ttl);
            let store = Store::builder().policy(payment_operation_name(), policy).open(dir.join("idemdb.redb"))?;
            serve(RedbLedger::new(store), provider, &args.addr).await
        }
    }
}

async fn serve<L: Ledger>(ledger: L, provider: Provider, addr: &str) -> Result<(), Box<dyn std::error::Error>> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, router(ledger, provider)).with_graceful_shutdown(shutdown()).await?;
    Ok(())
}

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
