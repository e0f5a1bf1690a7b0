//! `idemdb list`: records in key order (tenant, operation, key), filtered, one page at a time.

use std::io::{BufWriter, Write};

use clap::Args;
use serde_json::json;

use crate::cmd::FileArg;
use crate::cmd::{FilterArgs, RevealArgs, scan};
use crate::error::{CliError, Exit};
use crate::open::open_read_only;
use crate::output::{self, Align, Table};
use crate::view::RecordView;

/// Arguments of `idemdb list`.
#[derive(Debug, Args)]
#[command(after_help = "Pages are numbered by offset: the footer (or `next_offset` in JSON) gives the \
--offset of the next page. Records are in key order, so a page shifts if records are added or removed \
between calls.\n\nExample:\n  idemdb list store.idemdb --tenant acme --state in_progress --limit 20 --offset 20")]
pub(crate) struct ListArgs {
    #[command(flatten)]
    file: FileArg,
    #[command(flatten)]
    filter: FilterArgs,
    /// Records per page (0: all).
    #[arg(long, default_value_t = 50)]
    limit: usize,
    /// Skip this many matching records first.
    #[arg(long, default_value_t = 0)]
    offset: usize,
    #[command(flatten)]
    reveal: RevealArgs,
}

pub(crate) fn run(args: &ListArgs, json: bool) -> Result<Exit, CliError> {
    let file = &args.file.file;
    let store = open_read_only(file)?;
    let reveal = args.reveal.reveal();
    let limit = if args.limit == 0 { usize::MAX } else { args.limit };
    if json {
        return stream_json(args, &store, limit);
    }
    let mut seen = 0usize;
    let mut views = Vec::new();
    let mut more = false;
    scan(&store, file, &args.filter, |listed| {
        seen += 1;
        if seen <= args.offset {
            return Ok(true);
        }
        if views.len() == limit {
            more = true;
            return Ok(false);
        }
        views.push(RecordView::new(&listed.scoped, &listed.key_hash, &listed.record, reveal));
        Ok(true)
    })?;
    let next_offset = more.then(|| args.offset + views.len());
    if views.is_empty() {
        output::print(if args.offset > 0 { "no records at this offset\n" } else { "no records\n" });
        return Ok(Exit::Ok);
    }
    let first = if reveal.keys { "key" } else { "key hash" };
    let mut columns = vec![
        (first, Align::Left),
        ("tenant", Align::Left),
        ("operation", Align::Left),
        ("state", Align::Left),
        ("attempts", Align::Right),
        ("updated", Align::Left),
        ("payload", Align::Right),
    ];
    if reveal.payloads {
        columns.push(("content", Align::Left));
    }
    let mut table = Table::new(&columns);
    for view in &views {
        let mut row = vec![
            view.key.clone().or_else(|| view.key_hash.clone()).unwrap_or_default(),
            view.tenant.clone(),
            view.operation.clone(),
            view.state.clone(),
            view.attempts.to_string(),
            output::time(view.updated_at),
            view.payload_bytes.map(|n| format!("{} B", output::count(n))).unwrap_or_else(|| "-".into()),
        ];
        if reveal.payloads {
            let content = view.payload.clone().or_else(|| view.payload_hex.as_ref().map(|hex| format!("hex:{hex}")));
            row.push(content.map(|text| shorten(&text, 60)).unwrap_or_default());
        }
        table.row(row);
    }
    let mut text = table.render();
    let shown = match views.len() {
        1 => format!("record {}", args.offset + 1),
        n => format!("records {}-{}", args.offset + 1, args.offset + n),
    };
    match next_offset {
        Some(next) => text.push_str(&format!("\n{shown}; more with --offset {next}\n")),
        None => text.push_str(&format!("\n{shown} (end)\n")),
    }
    output::print(&text);
    Ok(Exit::Ok)
}

/// `list --json`: one JSON document, written record by record as the scan goes (memory does
/// not grow with the number of records): `records` first, then `offset`, `limit` and
/// `next_offset`, once it is known.
fn stream_json(args: &ListArgs, store: &idemdb::Store, limit: usize) -> Result<Exit, CliError> {
    let file = &args.file.file;
    let reveal = args.reveal.reveal();
    let mut out = BufWriter::new(std::io::stdout().lock());
    let mut closed = false;
    // A reader that went away (`idemdb list --json | head`) ends the listing quietly.
    let mut write = |text: &[u8]| -> Result<bool, CliError> {
        if closed {
            return Ok(false);
        }
        match out.write_all(text) {
            Ok(()) => Ok(true),
            Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => {
                closed = true;
                Ok(false)
            }
            Err(error) => Err(CliError::runtime_msg(None, format!("cannot write to standard output: {error}"))),
        }
    };
    write(b"{\n  \"records\": [")?;
    let (mut seen, mut shown, mut more) = (0usize, 0usize, false);
    scan(store, file, &args.filter, |listed| {
        seen += 1;
        if seen <= args.offset {
            return Ok(true);
        }
        if shown == limit {
            more = true;
            return Ok(false);
        }
        let view = RecordView::new(&listed.scoped, &listed.key_hash, &listed.record, reveal);
        let line = serde_json::to_string(&view).map_err(|error| CliError::runtime(file, &error))?;
        let separator: &[u8] = if shown == 0 { b"\n    " } else { b",\n    " };
        shown += 1;
        Ok(write(separator)? && write(line.as_bytes())?)
    })?;
    let next_offset = more.then(|| args.offset + shown);
    let tail = json!({ "offset": args.offset, "limit": args.limit, "next_offset": next_offset });
    let tail = tail
        .as_object()
        .map(|fields| fields.iter().map(|(name, value)| format!(",\n  \"{name}\": {value}")).collect::<String>());
    let end = if shown == 0 { "]" } else { "\n  ]" };
    write(format!("{end}{}\n}}\n", tail.unwrap_or_default()).as_bytes())?;
    match out.flush() {
        Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(CliError::runtime_msg(None, format!("cannot write to standard output: {error}")))
        }
        _ => Ok(Exit::Ok),
    }
}

/// One line of at most `max` characters, ending in `…` when cut, safe for a terminal.
fn shorten(text: &str, max: usize) -> String {
    let line = output::terminal_safe(text);
    if line.chars().count() <= max {
        return line;
    }
    let mut cut: String = line.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}
