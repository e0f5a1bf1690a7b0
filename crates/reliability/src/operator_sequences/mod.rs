//! Operator sequences: from a seed, a journaling writer process acknowledges completions on a
//! store file while a random sequence of operator steps happens beside it — `kill -9` of the
//! writer and its restart on some name, `mv`, `ln`, `ln -s` and `cp` of a store and of its
//! journal (`<store>-journal`), a new store at a name a store had (`idemdb import NAME
//! empty.jsonl`, or the writer creating one), `idemdb recover [--discard-journal]`, `idemdb
//! backup SRC DEST [--overwrite]` onto free and held names, and `idemdb compact --rebuild`.
//!
//! A model ([`model`]) follows which store each name leads to; each store writes keys of its
//! own prefix, so a key of another store is recognised anywhere. Checked:
//! * after the sequence, every store opens (or is recovered as an operator would after a
//!   refusal) and holds every completion acknowledged to it: **0 acknowledged writes lost**,
//!   unless the operator discarded that store's journal (`recover --discard-journal`) and the
//!   journal file set aside still holds them (counted apart);
//! * **0 foreign records**: no store holds a key it never had (another store's, or its
//!   original's written after it was copied);
//! * every refused command (and every refused open of the writer) is **typed** — the CLI's
//!   documented exit code and one `error: …` line — and **changes nothing**: the directory's
//!   files, sizes and bytes are the same after it.
//!
//! Every failing sequence is reported with its number, seed and steps, so it can be replayed.

mod check;
mod model;
mod report;
mod steps;
pub(crate) mod writer;

use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

pub use report::{SequenceConfig, SequenceReport};
pub use writer::child_main;

use crate::rng::mix;

/// Runs the sequences `first..first + sequences` of `seed`, `threads` at a time.
///
/// # Errors
/// I/O errors of the harness itself (the temporary directory).
pub fn run(config: &SequenceConfig) -> std::io::Result<SequenceReport> {
    let (_temp, root) = crate::kill::work_dir(config.dir.as_deref(), Some(Path::new("/dev/shm")))?;
    std::fs::write(root.join("empty.jsonl"), b"")?;
    let next = AtomicU64::new(config.first);
    let end = config.first + config.sequences;
    let total = Mutex::new(SequenceReport::default());
    std::thread::scope(|scope| {
        for _ in 0..config.threads.max(1) {
            scope.spawn(|| {
                loop {
                    let index = next.fetch_add(1, Ordering::SeqCst);
                    if index >= end {
                        break;
                    }
                    let seed = mix(&[config.seed, 0x05e9_0e4c, index]);
                    let report = steps::sequence(config, &root, index, seed);
                    total.lock().unwrap_or_else(std::sync::PoisonError::into_inner).merge(report);
                }
            });
        }
    });
    let mut report = total.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    report.failing.sort_by_key(|text| {
        text.strip_prefix("sequence ").and_then(|rest| rest.split(' ').next()).and_then(|n| n.parse::<u64>().ok())
    });
    Ok(report)
}
