//! Where the workspace is, and the binaries the sections run, built by cargo.

use std::path::{Path, PathBuf};
use std::process::Command;

pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub(crate) fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// Builds the `idemdb` binary in release mode (the operators test runs it) and returns its path.
/// `IDEMDB_RELIABILITY_CLI=<path>` runs another build of it instead (an earlier commit's, to show
/// that the sections which run the CLI catch what that build got wrong); nothing is built then.
pub(crate) fn build_cli() -> Result<PathBuf, String> {
    if let Some(cli) = std::env::var_os("IDEMDB_RELIABILITY_CLI") {
        let cli = PathBuf::from(cli);
        eprintln!("  the CLI is {} (IDEMDB_RELIABILITY_CLI)", cli.display());
        return if cli.is_file() {
            Ok(cli)
        } else {
            Err(format!("IDEMDB_RELIABILITY_CLI: no file at {}", cli.display()))
        };
    }
    let status = cargo()
        .args(["build", "--release", "--quiet", "-p", "idemdb-cli", "--bin", "idemdb"])
        .current_dir(workspace_root())
        .status()
        .map_err(|e| format!("cargo build: {e}"))?;
    if !status.success() {
        return Err("building idemdb failed".into());
    }
    Ok(target_dir().join("release").join(format!("idemdb{}", std::env::consts::EXE_SUFFIX)))
}

pub(crate) fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| workspace_root().join("target"), PathBuf::from)
}

/// Builds the payments service (the debug build the tests use, already there after them) and
/// returns its path.
pub(crate) fn build_payments() -> Result<PathBuf, String> {
    let status = cargo()
        .args(["build", "--quiet", "-p", "payments-example", "--bin", "payments-example"])
        .current_dir(workspace_root())
        .status()
        .map_err(|e| format!("cargo build: {e}"))?;
    if !status.success() {
        return Err("building payments-example failed".into());
    }
    Ok(target_dir().join("debug").join(format!("payments-example{}", std::env::consts::EXE_SUFFIX)))
}

/// Builds the kill test's child in release mode and returns its path.
pub(crate) fn build_child() -> Result<PathBuf, String> {
    let status = cargo()
        .args(["build", "--release", "--quiet", "-p", "idemdb-reliability", "--bin", "reliability-child"])
        .current_dir(workspace_root())
        .status()
        .map_err(|e| format!("cargo build: {e}"))?;
    if !status.success() {
        return Err("building reliability-child failed".into());
    }
    Ok(target_dir().join("release").join(format!("reliability-child{}", std::env::consts::EXE_SUFFIX)))
}
