//! `idemdb export`: records as JSON Lines, one record per line.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use clap::Args;
use serde_json::json;

use crate::cmd::FileArg;
use crate::cmd::{FilterArgs, RevealArgs, scan};
use crate::error::{CliError, Exit};
use crate::open::open_read_only;
use crate::output;
use crate::view::RecordView;

/// Arguments of `idemdb export`.
#[derive(Debug, Args)]
#[command(after_help = "Each line is one JSON object: tenant, operation, key_hash, state, fingerprint, fence, \
attempts, times in milliseconds since the Unix epoch, payload_bytes, and key / payload when shown.\n\n\
By default keys are replaced by their keyed hash and payloads are left out, so the file can be shared \
for diagnosis. Such a file cannot be imported: `import` needs keys. For a full copy:\n  \
idemdb export store.idemdb --show-keys --show-payloads --output backup.jsonl")]
pub(crate) struct ExportArgs {
    #[command(flatten)]
    file: FileArg,
    /// Write to this file instead of standard output.
    #[arg(long, short, value_name = "PATH")]
    output: Option<PathBuf>,
    #[command(flatten)]
    filter: FilterArgs,
    #[command(flatten)]
    reveal: RevealArgs,
}

pub(crate) fn run(args: &ExportArgs, json: bool) -> Result<Exit, CliError> {
    let file = &args.file.file;
    let store = open_read_only(file)?;
    let reveal = args.reveal.reveal();
    let (mut sink, target): (Box<dyn Write>, Option<&PathBuf>) = match &args.output {
        Some(path) => {
            let out =
                File::create(path).map_err(|error| CliError::runtime_ctx(path, "cannot create the output", &error))?;
            (Box::new(BufWriter::new(out)), Some(path))
        }
        None => (Box::new(BufWriter::new(std::io::stdout().lock())), None),
    };
    let total = store.stats().map(|stats| stats.records).unwrap_or(0);
    let bar = output::progress(total, json, "exporting");
    let write_error = |error: std::io::Error| match target {
        Some(path) => CliError::runtime_ctx(path, "cannot write the output", &error),
        None => CliError::runtime_msg(None, format!("cannot write to standard output: {error}")),
    };
    let mut exported = 0u64;
    let mut closed = false;
    scan(&store, file, &args.filter, |listed| {
        let view = RecordView::new(&listed.scoped, &listed.key_hash, &listed.record, reveal);
        let line = serde_json::to_string(&view).map_err(|error| CliError::runtime(file, &error))?;
        match writeln!(sink, "{line}") {
            Ok(()) => {}
            // The reader went away (`idemdb export ... | head`): stop quietly.
            Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => {
                closed = true;
                return Ok(false);
            }
            Err(error) => return Err(write_error(error)),
        }
        exported += 1;
        bar.inc(1);
        Ok(true)
    })?;
    match sink.flush() {
        Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => return Err(write_error(error)),
        _ if closed => return Ok(Exit::Ok),
        _ => {}
    }
    bar.finish_and_clear();
    if let Some(path) = target {
        if json {
            output::print_json(&json!({
                "file": file.display().to_string(),
                "output": path.display().to_string(),
                "records": exported,
                "keys": reveal.keys,
                "payloads": reveal.payloads,
            }));
        } else {
            let hidden = match (reveal.keys, reveal.payloads) {
                (true, true) => "",
                (false, true) => " (keys hashed)",
                (true, false) => " (payloads left out)",
                (false, false) => " (keys hashed, payloads left out)",
            };
            output::print(&format!("exported {} records to {}{hidden}\n", output::count(exported), path.display()));
        }
    }
    Ok(Exit::Ok)
}
