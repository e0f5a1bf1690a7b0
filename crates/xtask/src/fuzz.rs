//! The cargo-fuzz targets, built and run for a few seconds each.

use std::path::PathBuf;
use std::time::Instant;

use crate::binaries::{cargo, workspace_root};

pub(crate) const FUZZ_TARGETS: [&str; 6] =
    ["record_decode", "canonical", "keys", "ops", "journal_records", "journal_header"];

pub(crate) fn fuzz_dir() -> PathBuf {
    workspace_root().join("fuzz")
}

/// Installs cargo-fuzz when missing, builds the targets (stable toolchain, no sanitizer) and runs
/// each for `seconds`. Returns (target, executions, crashed).
pub(crate) fn run_fuzz(seconds: u64) -> Result<Vec<(&'static str, u64, bool)>, String> {
    let installed = cargo().args(["fuzz", "--version"]).output().is_ok_and(|o| o.status.success());
    if !installed {
        let t = Instant::now();
        println!("  installing cargo-fuzz (cargo install cargo-fuzz --locked) ...");
        let status =
            cargo().args(["install", "cargo-fuzz", "--locked"]).status().map_err(|e| format!("cargo install: {e}"))?;
        if !status.success() {
            return Err("cargo install cargo-fuzz failed".into());
        }
        println!("  installed cargo-fuzz in {:.0?}", t.elapsed());
    }
    let t = Instant::now();
    let status = cargo()
        .args(["fuzz", "build", "--sanitizer", "none", "-O"])
        .current_dir(fuzz_dir())
        .status()
        .map_err(|e| format!("cargo fuzz build: {e}"))?;
    if !status.success() {
        return Err("cargo fuzz build failed".into());
    }
    println!("  fuzz targets built in {:.0?}", t.elapsed());
    let mut results = Vec::new();
    for target in FUZZ_TARGETS {
        let corpus = fuzz_dir().join("corpus").join(target);
        std::fs::create_dir_all(&corpus).map_err(|e| e.to_string())?;
        let output = cargo()
            .args(["fuzz", "run", target, "--sanitizer", "none", "-O"])
            .arg(&corpus)
            .arg(fuzz_dir().join("seeds").join(target))
            .arg("--")
            .arg(format!("-max_total_time={seconds}"))
            .current_dir(fuzz_dir())
            .output()
            .map_err(|e| format!("cargo fuzz run {target}: {e}"))?;
        let log = String::from_utf8_lossy(&output.stderr);
        let execs = log
            .lines()
            .filter_map(|l| {
                l.strip_prefix("Done ").and_then(|rest| rest.split_whitespace().next()).and_then(|n| n.parse().ok())
            })
            .next_back()
            .unwrap_or(0);
        let crashed = !output.status.success();
        if crashed {
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            for line in tail.into_iter().rev() {
                println!("    | {line}");
            }
        }
        results.push((target, execs, crashed));
    }
    Ok(results)
}
