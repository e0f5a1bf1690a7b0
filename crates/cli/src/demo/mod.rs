//! `idemdb demo`: payment intents from simulated clients through a channel that loses
//! requests and responses, times out and crashes the server; once with idempotency keys
//! reused on every retry, once with a new key per retry; effects counted at the provider.

mod channel;
mod client;
mod provider;
mod report;
mod server;

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Args, ValueEnum};

use idemdb::{Canonicalizer, Clock, Durability, ManualClock, Normaliser, OpenError, Store, SystemClock};

use crate::error::{CliError, Exit};
use crate::open::default_data_dir;
use crate::output;
use channel::Intent;
use client::{Keying, Run};
use server::Server;

pub(crate) const LONG_ABOUT: &str = "\
Run payment intents from simulated clients through a channel that loses requests, loses \
responses after the charge, times out, and crashes the server (its store handle is dropped \
mid-request and reopened from the file). Clients retry until they get an answer.

The same intents, with the same faults attempt by attempt, run twice against one store file:
  * idemdb client: makes one key per intent and reuses it on every retry; the server reserves \
the key atomically, replays stored results, refuses in-progress duplicates and conflicting \
bodies, and reconciles attempts that died holding the lease by asking the provider.
  * new key per retry: the classic mistake; every retry looks like a new payment.

Effects are counted at the payment provider, not from responses. The run exits with 1 if the \
idemdb client caused any duplicate effect.";

/// Arguments of `idemdb demo`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  idemdb demo\n  idemdb demo --intents 10000 --seed 7\n  \
idemdb demo --json --seed 7 | jq .duplicate_effects\n  idemdb demo --data /tmp/idem && idemdb stats /tmp/idem/demo.idemdb")]
pub(crate) struct DemoArgs {
    /// Payment intents to run (the same intents for both clients).
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    intents: u64,
    /// Seed of the simulated channel; the same seed gives the same counts (default: random).
    #[arg(long)]
    seed: Option<u64>,
    /// Directory for the store file `demo.idemdb`, started afresh on every run
    /// [default: $XDG_DATA_HOME/idemdb, or ~/.local/share/idemdb].
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// Commit durability: `eventual` syncs once at the end (fast); `immediate` syncs every
    /// commit, as a production store does (one fsync per commit: slower on most disks).
    #[arg(long, value_enum, default_value_t = DurabilityArg::Eventual)]
    durability: DurabilityArg,
}

/// `--durability`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum DurabilityArg {
    Immediate,
    Eventual,
}

/// Simulated shops the intents belong to (one tenant each).
const TENANTS: u64 = 20;
/// The operation of the idemdb client, and of the client that makes a new key per retry.
const OPERATION: &str = "create_payment";
const OPERATION_NEW_KEY: &str = "create_payment_newkey";

pub(crate) fn run(args: &DemoArgs, json: bool) -> Result<Exit, CliError> {
    let dir = args.data.clone().unwrap_or_else(default_data_dir);
    let path = dir.join("demo.idemdb");
    std::fs::create_dir_all(&dir)
        .map_err(|error| CliError::runtime_ctx(&dir, "cannot create the directory", &error))?;
    // Held for the whole run: the server closes and reopens the store on every simulated
    // crash, so the store's own lock is not held throughout.
    let _run = lock_run(&path)?;
    remove_previous(&path)?;
    let seed = args.seed.unwrap_or_else(random_seed);
    let durability = match args.durability {
        DurabilityArg::Immediate => Durability::Immediate,
        DurabilityArg::Eventual => Durability::Eventual,
    };
    let canon = canonicalizer().map_err(|error| CliError::runtime_ctx(&path, "demo", &error))?;
    // Simulated time, starting now: leases expire in simulated seconds, so the run is fast and
    // the same seed gives the same counts.
    let clock = ManualClock::new(SystemClock.now().as_millis());
    let started = Instant::now();
    let mut server = Server::start(&path, &clock, durability)?;
    let intents: Vec<Intent> = (0..args.intents).map(|id| Intent::draw(seed, id, TENANTS)).collect();
    let bar = output::progress(args.intents * 2, json, "idemdb client");
    let mut tallies = Vec::new();
    for (keying, operation, label) in
        [(Keying::SameKey, OPERATION, "idemdb client"), (Keying::NewKeyPerRetry, OPERATION_NEW_KEY, "new key/retry")]
    {
        bar.set_message(label);
        let mut run = Run::new(keying, operation, &mut server, &clock, &canon);
        for intent in &intents {
            run.intent(intent)?;
            bar.inc(1);
        }
        tallies.push(run.finish(&intents)?);
    }
    server.flush()?;
    bar.finish_and_clear();
    let restarts = server.restarts;
    drop(server);
    let elapsed = started.elapsed();
    let [idem, naive] = <[client::Tally; 2]>::try_from(tallies)
        .map_err(|_| CliError::runtime_msg(Some(&path), "demo: expected two runs"))?;
    let summary = report::Summary {
        path: &path,
        seed,
        intents: args.intents,
        durability: durability_name(args.durability),
        idem: &idem,
        naive: &naive,
        restarts,
        elapsed,
    };
    if json {
        output::print_json(&summary.json());
    } else {
        output::print(&summary.table());
    }
    Ok(if summary.sound() { Exit::Ok } else { Exit::Problems })
}

/// Takes the demo's run lock, `demo.idemdb.run-lock` beside the store: one demo per directory
/// (not `demo.idemdb.lock`, which is the store's own holder lock).
///
/// # Errors
/// Exit 3 while another demo holds it; exit 4 when the lock file cannot be made.
fn lock_run(path: &Path) -> Result<std::fs::File, CliError> {
    let lock_path = path.with_extension("idemdb.run-lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|error| CliError::runtime_ctx(&lock_path, "cannot create the demo's lock file", &error))?;
    match lock.try_lock() {
        Ok(()) => Ok(lock),
        Err(std::fs::TryLockError::WouldBlock) => Err(CliError::open_msg(
            path,
            format!("in use by another `idemdb demo` (it holds {}); wait for it or use --data", lock_path.display()),
        )),
        Err(std::fs::TryLockError::Error(error)) => {
            Err(CliError::runtime_ctx(&lock_path, "cannot lock the demo's lock file", &error))
        }
    }
}

/// Removes the previous run's store, holding the store's lock while it does: a store that
/// another process has open (an `idemdb` command, a program) is refused, never deleted.
///
/// # Errors
/// Exit 3 when the store is open elsewhere or the path is not a regular file; exit 4 when it
/// cannot be removed.
fn remove_previous(path: &Path) -> Result<(), CliError> {
    match std::fs::symlink_metadata(path) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(CliError::runtime_ctx(path, "cannot inspect the previous demo store", &error)),
        Ok(meta) if !meta.is_file() => return Err(crate::open::not_a_file(path, &meta)),
        Ok(_) => {}
    }
    let held = match Store::builder().open(path) {
        Ok(store) => Some(store),
        Err(OpenError::AlreadyOpen) => {
            return Err(CliError::open_msg(path, "the previous demo store is in use by another process"));
        }
        // Not a store this build opens (damaged, another format): it is the demo's own file.
        Err(_) => None,
    };
    let removed = std::fs::remove_file(path);
    drop(held);
    match removed {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(CliError::runtime_ctx(path, "cannot remove the previous demo store", &error)),
    }
}

fn durability_name(durability: DurabilityArg) -> &'static str {
    match durability {
        DurabilityArg::Immediate => "immediate",
        DurabilityArg::Eventual => "eventual",
    }
}

/// The server's canonical form of a payment body: the trace id is transport, not intent;
/// amounts and currencies are compared by value, not spelling.
fn canonicalizer() -> Result<Canonicalizer, idemdb::CanonicalError> {
    Canonicalizer::new()
        .exclude("/trace_id")?
        .normalise("/amount", Normaliser::DecimalAmount)?
        .normalise("/currency", Normaliser::Uppercase)
}

/// A seed from the operating system's randomness (std keys each `RandomState` from it).
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new().build_hasher().finish()
}
