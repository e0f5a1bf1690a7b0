//! A cached read snapshot of the records table, shared by lookups until the next commit.
//!
//! Opening a read transaction and its table costs more than the B-tree lookup itself
//! (redb registers the transaction and checks the table's definition). Lookups (`get`, and
//! every `reserve`, whose replay and refusal answers come from a snapshot) therefore share one
//! open table, tagged with the store's write generation. Every commit attempt bumps the
//! generation after it returns and drops the cached snapshot, so:
//!
//! * a lookup that starts after a write call returned sees that write (the snapshot it uses
//!   was tagged with the bumped generation, which is read before the snapshot is opened);
//! * a lookup concurrent with a commit may see the state before it — as it could have by
//!   running a moment earlier;
//! * an old snapshot is not kept alive past the next commit, so redb can reuse the pages
//!   later commits free (a live read transaction pins the pages it can see).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use redb::ReadOnlyTable;

use crate::Error;
use crate::db::Db;
use crate::tables::RECORDS;

/// An open records table and the write generation it was opened at.
pub(crate) struct Snapshot {
    generation: u64,
    pub(crate) records: ReadOnlyTable<&'static [u8], &'static [u8]>,
}

/// The store's snapshot cache.
#[derive(Default)]
pub(crate) struct Snapshots {
    generation: AtomicU64,
    current: Mutex<Option<Arc<Snapshot>>>,
}

impl Snapshots {
    /// A snapshot that includes every commit that returned before this call.
    pub(crate) fn records(&self, db: &Db) -> Result<Arc<Snapshot>, Error> {
        let generation = self.generation.load(Ordering::SeqCst);
        if let Some(snapshot) = self.lock().as_ref().filter(|snapshot| snapshot.generation == generation) {
            return Ok(Arc::clone(snapshot));
        }
        let read = db.begin_read()?;
        let snapshot = Arc::new(Snapshot { generation, records: read.open_table(RECORDS)? });
        let mut current = self.lock();
        // Cache it only while no commit has returned since the generation was read.
        if self.generation.load(Ordering::SeqCst) == generation {
            *current = Some(Arc::clone(&snapshot));
        }
        Ok(snapshot)
    }

    /// Called after every commit attempt (whether it reported success or not).
    pub(crate) fn invalidate(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        *self.lock() = None;
    }

    fn lock(&self) -> MutexGuard<'_, Option<Arc<Snapshot>>> {
        // Only an `Option` swap happens under this lock: a panic cannot leave it inconsistent.
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
