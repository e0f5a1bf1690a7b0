//! `idemdb compact`: return free pages to the file system.

use clap::Args;
use serde_json::json;

use crate::FileArg;
use crate::error::{CliError, Exit};
use crate::open::open_existing;
use crate::output;

/// Arguments of `idemdb compact`.
#[derive(Debug, Args)]
#[command(after_help = "Nothing else may have the store open while it is compacted. Most useful after a large purge.")]
pub(crate) struct CompactArgs {
    #[command(flatten)]
    file: FileArg,
}

pub(crate) fn run(args: &CompactArgs, json: bool) -> Result<Exit, CliError> {
    let file = &args.file.file;
    let size = || std::fs::metadata(file).map(|meta| meta.len()).map_err(|error| CliError::runtime(file, &error));
    let mut store = open_existing(file)?;
    let before = size()?;
    let compacted = store.compact().map_err(|error| CliError::runtime_ctx(file, "compaction failed", &error))?;
    drop(store);
    let after = size()?;
    if json {
        output::print_json(&json!({
            "file": file.display().to_string(),
            "compacted": compacted,
            "file_bytes_before": before,
            "file_bytes_after": after,
        }));
    } else {
        output::print(&output::fields(&[
            ("store", file.display().to_string()),
            ("compacted", if compacted { "yes".into() } else { "no (nothing to reclaim)".into() }),
            ("size before", output::bytes(before)),
            ("size after", output::bytes(after)),
        ]));
    }
    Ok(Exit::Ok)
}
