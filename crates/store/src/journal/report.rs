//! What an open did with the store's journal: read by [`Store::journal_recovery`]
//! (`crate::Store::journal_recovery`) and printed by `idemdb recover`.

use std::path::PathBuf;

use super::aside::SetAside;

/// What the open of a store file did with its journal: the records it applied, the records it
/// gave up (only ever with [`StoreBuilder::discard_lost_journal`](crate::StoreBuilder::discard_lost_journal)),
/// and every journal file it moved aside instead of writing over it.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let store = idemdb::Store::open(dir.path().join("s.idemdb"))?;
/// let report = store.journal_recovery().expect("a file store reports its journal");
/// assert_eq!(report.applied, 0);
/// assert!(report.set_aside.is_empty() && !report.discarded);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct JournalRecovery {
    /// Records replayed into the store file (commits a crash had left only in the journal).
    pub applied: u64,
    /// The journal file they were read from (`None`: none needed, or a journal backend).
    pub read_from: Option<PathBuf>,
    /// Whether the open gave up commits: the store's journal could not be read (missing,
    /// damaged, another store's) and the open went on without it, by the operator's choice.
    pub discarded: bool,
    /// Intact records the open gave up because a record before them is damaged or the file
    /// was cut (with `discarded`); they are still in the set-aside file.
    pub given_up: u64,
    /// Where the journal's records stopped being readable, when they stopped before its end
    /// for a reason other than the end of the records (a torn last write is the usual one).
    pub stopped_by: Option<String>,
    /// Journal files moved aside, never rewritten (see [`SetAside`]).
    pub set_aside: Vec<SetAside>,
    /// The store's earlier journal (found where the store was last opened, or set aside),
    /// removed once its records were applied.
    pub removed: Option<PathBuf>,
}
