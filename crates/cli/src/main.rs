//! The `idemdb` command-line tool: a demonstration of idempotency keys under a lossy channel,
//! and operator commands for store files (stats, get, list, purge, compact, backup, verify,
//! export, import). Argument parsing lives here; each command has its own module.
#![forbid(unsafe_code)]

mod cmd;
mod demo;
mod error;
mod open;
mod output;
mod view;

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::error::{CliError, Exit};

const AFTER_HELP: &str = "\
Exit codes:
  0  success
  1  problems found: `verify` found damage, or `demo` saw a duplicate effect
  2  usage error: unknown command, missing or invalid argument (an invalid --key, --tenant,
     --operation or --hash too)
  3  the store could not be opened (missing file, not a regular file, not a store, newer
     format, already open)
  4  any other runtime error (I/O, unreadable or invalid input, storage failure, `get` found
     no record)

Errors are printed to stderr as `error: <file>: <cause>`. Every command takes `--json`
for output meant for scripts; without it, output is an aligned table for people.
Keys are shown as keyed hashes unless `--show-keys`; payloads never unless `--show-payloads`.
Store files written by the WebAssembly build open here unchanged (same format).";

/// Inspect and maintain idemdb store files, and watch idempotency keys at work.
#[derive(Debug, Parser)]
#[command(name = "idemdb", version, after_help = AFTER_HELP)]
struct Cli {
    #[command(flatten)]
    common: Common,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run payment intents through a lossy, crashing channel, with and without idempotency keys.
    #[command(long_about = demo::LONG_ABOUT)]
    Demo(demo::DemoArgs),
    /// Records by state and operation, leases, expiry horizon and file sizes.
    Stats(cmd::stats::StatsArgs),
    /// Show one record, by scope and key or by key hash.
    Get(cmd::get::GetArgs),
    /// List records, filtered by tenant, operation and state, one page at a time.
    List(cmd::list::ListArgs),
    /// Apply retention now: expired results become tombstones, expired tombstones are removed.
    Purge(cmd::purge::PurgeArgs),
    /// Compact the file, returning free pages to the file system.
    Compact(cmd::compact::CompactArgs),
    /// Write a verified copy of a store that opens alone (a live store: back it up through its service).
    Backup(cmd::backup::BackupArgs),
    /// Check the file: storage integrity, then every record, index entry and audit event.
    Verify(cmd::verify::VerifyArgs),
    /// Write records as JSON Lines (keys hashed and payloads left out unless asked).
    Export(cmd::export::ExportArgs),
    /// Read JSON Lines written by `export` into a store (created if missing).
    Import(cmd::import::ImportArgs),
    /// List the outbox: external effects waiting for, under or past dispatch.
    Outbox(cmd::outbox::OutboxArgs),
    /// List the webhook deliveries received.
    Inbox(cmd::outbox::InboxArgs),
    /// List the reconciliation queue, or resolve an entry once its outcome is known.
    Reconcile(Box<cmd::reconcile::ReconcileArgs>),
    /// Recover a store after a crash (replay its journal) and close it cleanly.
    Recover(cmd::recover::RecoverArgs),
}

/// Options every command has.
#[derive(Debug, Clone, Copy, Args)]
struct Common {
    /// Print one JSON document for scripts instead of tables (no progress bars).
    #[arg(long, global = true, display_order = 100)]
    json: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = error::catch_panics(|| run(cli));
    match outcome {
        Ok(Exit::Ok) => ExitCode::SUCCESS,
        Ok(exit) => ExitCode::from(exit.code()),
        Err(error) => {
            eprintln!("{error}");
            ExitCode::from(error.exit().code())
        }
    }
}

fn run(cli: Cli) -> Result<Exit, CliError> {
    let json = cli.common.json;
    match cli.command {
        Command::Demo(args) => demo::run(&args, json),
        Command::Stats(args) => cmd::stats::run(&args, json),
        Command::Get(args) => cmd::get::run(&args, json),
        Command::List(args) => cmd::list::run(&args, json),
        Command::Purge(args) => cmd::purge::run(&args, json),
        Command::Compact(args) => cmd::compact::run(&args, json),
        Command::Backup(args) => cmd::backup::run(&args, json),
        Command::Verify(args) => cmd::verify::run(&args, json),
        Command::Export(args) => cmd::export::run(&args, json),
        Command::Import(args) => cmd::import::run(&args, json),
        Command::Outbox(args) => cmd::outbox::run(&args, json),
        Command::Inbox(args) => cmd::outbox::run_inbox(&args, json),
        Command::Reconcile(args) => cmd::reconcile::run(&args, json),
        Command::Recover(args) => cmd::recover::run(&args, json),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        super::Cli::command().debug_assert();
    }
}
