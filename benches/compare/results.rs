//! What a run measured, and the detail tables printed under the targets.

use crate::measure::Summary;
use crate::report::{micros, table};
use crate::{canon, concurrent, durable, lookup, memory, purge, report, space, sqlite};

/// What the sections measured (absent when `--only` left a section out).
#[derive(Default)]
pub(crate) struct Results {
    pub(crate) durable: Option<durable::Durable>,
    pub(crate) concurrent: Option<concurrent::Concurrent>,
    pub(crate) lookup: Option<lookup::Lookup>,
    pub(crate) purges: Vec<purge::PurgeRun>,
    pub(crate) space: Option<space::Space>,
    pub(crate) canon: Vec<canon::CanonRow>,
    pub(crate) memory: Vec<memory::MemoryRun>,
}

/// Prints the tables behind the targets: raw numbers, purge, space, canonicalisation.
pub(crate) fn print_details(results: &Results, purge_budget: usize) {
    print_raw_numbers(results);
    print_purges(results, purge_budget);
    print_space(results);
    print_canon(results);
    print_memory(results);
}

/// The raw numbers behind the targets, and the lookups.
fn print_raw_numbers(results: &Results) {
    println!("## Raw numbers\n");
    let mut rows: Vec<Summary> = Vec::new();
    if let Some(d) = &results.durable {
        rows.extend(
            [
                &d.floor,
                &d.floor_in_place,
                &d.raw_redb,
                &d.reserve,
                &d.reserve_no_audit,
                &d.complete,
                &d.reserve_complete,
                &d.two_commit,
                &d.execute,
                &d.journal_reserve,
                &d.journal_complete,
                &d.journal_two_commit,
                &d.journal_execute,
            ]
            .into_iter()
            .cloned(),
        );
        rows.extend(
            [
                &d.sqlite_full_reserve,
                &d.sqlite_full_complete,
                &d.sqlite_full_one_txn,
                &d.sqlite_normal_reserve,
                &d.sqlite_normal_complete,
            ]
            .into_iter()
            .flatten()
            .cloned(),
        );
    }
    if let Some(c) = &results.concurrent {
        rows.extend(c.idemdb.iter().map(|(_, s)| s.clone().with_note("µs/op = 1 / total rate")));
        rows.extend(c.journaled.iter().map(|(_, s, _)| s.clone().with_note("µs/op = 1 / total rate")));
        rows.extend(c.sqlite_full.iter().map(|(_, s)| s.clone().with_note("µs/op = 1 / total rate")));
    }
    if let Some(l) = &results.lookup {
        let lookup_note = format!("{} records", l.records);
        rows.extend(
            [Some(&l.idemdb), Some(&l.idemdb_no_audit), Some(&l.raw_redb), l.sqlite.as_ref()]
                .into_iter()
                .flatten()
                .map(|s| {
                    let note =
                        if s.note.is_empty() { lookup_note.clone() } else { format!("{lookup_note}; {}", s.note) };
                    s.clone().with_note(note)
                }),
        );
    }
    print!("{}", report::summaries_table(&rows));
    println!();
    println!(
        "flushes/op, writes/op and KiB written/op count calls into redb's storage backend (the floors count their \
         own); device KiB/op is /proc/self/io write_bytes (n/a where the OS does not expose it), which counts \
         dirtied page-cache folios: a 4 KiB overwrite inside a large folio counts the whole folio. CPU µs/op is \
         user + system time of all threads (10 ms ticks) over the operations."
    );
    if let Some(l) = &results.lookup {
        println!(
            "Lookup stores were built in key order ({:.1} s) and read once end to end before timing (warm caches; \
             SQLite given a 1 GiB page cache, redb's default).",
            l.build_secs
        );
    }
    println!();
}

/// The purge runs.
fn print_purges(results: &Results, purge_budget: usize) {
    if !results.purges.is_empty() {
        println!("## Purge\n");
        let purge_rows: Vec<Vec<String>> = results
            .purges
            .iter()
            .map(|p| {
                vec![
                    p.stored.to_string(),
                    p.expired.to_string(),
                    p.calls.to_string(),
                    format!("{:.1}", p.elapsed.as_secs_f64() * 1e3),
                    micros(p.secs_per_record()),
                    p.syncs.to_string(),
                    format!("{:.0}", p.bytes as f64 / p.tombstoned.max(1) as f64),
                    format!("{:.1}", p.build_secs),
                ]
            })
            .collect();
        print!(
            "{}",
            table(
                &[
                    "stored",
                    "expired",
                    &format!("purge calls (budget {})", purge_budget),
                    "ms total",
                    "µs/record",
                    "flushes",
                    "bytes written/record",
                    "build s",
                ],
                &purge_rows
            )
        );
        println!();
    }
}

/// The space each store takes.
fn print_space(results: &Results) {
    if let Some(space) = &results.space {
        println!("## Space after compaction ({0} in-progress + {0} completed records)\n", space.records_per_kind);
        println!(
            "One record: key {} B + in-progress record {} B, or + completed record {} B (with its 200 B result).\n",
            space.key_bytes, space.in_progress_bytes, space.completed_bytes
        );
        let space_rows: Vec<Vec<String>> = [
            Some(&space.idemdb),
            Some(&space.idemdb_audit),
            Some(&space.idemdb_compact_only),
            Some(&space.raw_redb),
            space.sqlite.as_ref(),
        ]
        .into_iter()
        .flatten()
        .map(|row| {
            vec![
                row.name.clone(),
                format!("{:.0}", row.file_per_record),
                format!("{:.0}", row.pages_per_record),
                row.stored_per_record.map_or("n/a".into(), |v| format!("{v:.0}")),
            ]
        })
        .collect();
        print!(
            "{}",
            table(&["store", "file blocks B/record", "allocated pages B/record", "stored B/record"], &space_rows)
        );
        if space.sqlite.is_none() {
            println!("\nSQLite: skipped ({})", sqlite::SKIPPED);
        }
        println!();
    }
}

/// Canonicalisation.
fn print_canon(results: &Results) {
    if !results.canon.is_empty() {
        println!("## Canonicalise + fingerprint\n");
        let canon_rows: Vec<Vec<String>> = results
            .canon
            .iter()
            .map(|c| {
                vec![
                    format!("{} B", c.bytes),
                    format!("{:.1}", c.fingerprint_mbs),
                    format!("{:.1}", c.parse_mbs),
                    format!("{:.2}×", c.fingerprint_mbs / c.parse_mbs),
                ]
            })
            .collect();
        print!(
            "{}",
            table(&["payment JSON", "fingerprint MB/s", "serde_json parse MB/s", "fingerprint / parse"], &canon_rows)
        );
        println!();
    }
}

/// Memory under sustained load.
fn print_memory(results: &Results) {
    if !results.memory.is_empty() {
        println!("## Memory under sustained load (resident set, sampled every 100 ms)\n");
        let rows: Vec<Vec<String>> = results
            .memory
            .iter()
            .map(|m| {
                vec![
                    m.label.to_string(),
                    m.callers.to_string(),
                    format!("{:.1}", m.seconds),
                    report::rate(m.ops as f64 / m.seconds.max(1e-9)),
                    format!("{:.1}", m.start_kib as f64 / 1024.0),
                    format!("{:.1}", m.peak_kib as f64 / 1024.0),
                    format!("{:.1}", m.end_kib as f64 / 1024.0),
                    format!("{:.1}", m.growth_kib() as f64 / 1024.0),
                    m.checkpoints.map_or("-".into(), |c| c.to_string()),
                ]
            })
            .collect();
        print!(
            "{}",
            table(
                &[
                    "store",
                    "callers",
                    "s",
                    "ops/s",
                    "RSS start MiB",
                    "RSS peak MiB",
                    "RSS end MiB",
                    "peak − start MiB",
                    "checkpoints"
                ],
                &rows
            )
        );
        println!();
    }
}
