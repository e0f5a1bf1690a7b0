//! Project tasks that cargo alone does not run.
//!
//! ```text
//! cargo xtask reliability [--quick|--full] [--seed N] [--fuzz-seconds N] [--no-fuzz] [--only SECTIONS]
//! ```
//!
//! Runs the crash sweep, the `kill -9` test, the races, the clock faults, the operators beside
//! a writer, live backups beside killed writers, a bad-input pass, the harness self-check (broken adapters must be caught) and the
//! cargo-fuzz targets, then prints one table with the targets of the chosen size and PASS/MISS,
//! and exits non-zero on any lost completion, double effect, unopenable store, integrity
//! failure, protocol error, fuzz crash, or missed target. `--quick` (the default) is the
//! CI-sized run; `--full` the documented one. `--only clock,operators` runs only the sections
//! named (of `sweep`, `concurrent`, `kill`, `races`, `clock`, `operators`, `backup`, `outbox`, `journal-damage`,
//! `journal-aliases`, `journal-replace`, `operator-sequences`, `batch-atomicity`, `audit-durability`, `bad-inputs`,
//! `self-check`, `fuzz`) at the chosen size, and the table has only their rows.
#![forbid(unsafe_code)]

mod bad_inputs;
mod binaries;
mod contract;
mod fuzz;
mod reliability;
mod self_check;
mod sequences;
mod size;
mod table;

use std::process::ExitCode;

use crate::reliability::reliability;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("reliability") => match reliability(&args[1..]) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::FAILURE,
            Err(error) => {
                eprintln!("xtask reliability: {error}");
                ExitCode::from(2)
            }
        },
        _ => {
            eprintln!(
                "usage: cargo xtask reliability [--quick|--full] [--seed N] [--fuzz-seconds N] [--no-fuzz] [--only SECTIONS]"
            );
            ExitCode::from(2)
        }
    }
}
