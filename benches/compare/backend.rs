//! A redb storage backend that counts what reaches the file: flushes, writes and bytes.
//!
//! It wraps redb's own `FileBackend` and forwards every call, so idemdb and raw redb opened
//! through it behave exactly as they do on a plain file; the counters cost one relaxed atomic
//! add per call.

use std::fs::{File, OpenOptions};
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use redb::backends::FileBackend;
use redb::{BackendError, StorageBackend};

use crate::data::Res;

/// The error of redb's backend I/O methods (without its `experimental-api-5` feature).
type BackendIoError = std::io::Error;

/// Counts of calls that reached the file.
#[derive(Debug, Default)]
pub(crate) struct IoCounters {
    syncs: AtomicU64,
    writes: AtomicU64,
    bytes: AtomicU64,
    grows: AtomicU64,
}

/// A snapshot of [`IoCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Io {
    /// `sync_data` calls (one fdatasync each).
    pub(crate) syncs: u64,
    /// `write` calls.
    pub(crate) writes: u64,
    /// Bytes written.
    pub(crate) bytes: u64,
    /// `set_len` calls that grew the file. redb follows each with one extra flush, so that
    /// the larger file is durable before a header names it.
    pub(crate) grows: u64,
}

impl Io {
    pub(crate) fn since(self, earlier: Io) -> Io {
        Io {
            syncs: self.syncs - earlier.syncs,
            writes: self.writes - earlier.writes,
            bytes: self.bytes - earlier.bytes,
            grows: self.grows - earlier.grows,
        }
    }
}

impl IoCounters {
    pub(crate) fn snapshot(&self) -> Io {
        Io {
            syncs: self.syncs.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            grows: self.grows.load(Ordering::Relaxed),
        }
    }
}

/// redb's file backend with counters.
#[derive(Debug)]
pub(crate) struct CountingBackend {
    inner: FileBackend,
    counters: Arc<IoCounters>,
    /// A second set the same calls are counted into (a journal's own counts).
    also: Option<Arc<IoCounters>>,
}

impl CountingBackend {
    /// Opens (creating if needed) `path`; the returned counters stay readable after the
    /// backend is moved into a database.
    pub(crate) fn open(path: &Path) -> Res<(CountingBackend, Arc<IoCounters>)> {
        let file: File = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
        let counters = Arc::new(IoCounters::default());
        Ok((CountingBackend { inner: FileBackend::new(file)?, counters: Arc::clone(&counters), also: None }, counters))
    }

    /// Opens `path` counting into `counters` (shared with another file) and into `also`.
    pub(crate) fn open_shared(path: &Path, counters: Arc<IoCounters>, also: Arc<IoCounters>) -> Res<CountingBackend> {
        let file: File = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)?;
        Ok(CountingBackend { inner: FileBackend::new(file)?, counters, also: Some(also) })
    }

    fn count(&self, what: impl Fn(&IoCounters)) {
        what(&self.counters);
        if let Some(also) = &self.also {
            what(also);
        }
    }
}

impl StorageBackend for CountingBackend {
    fn len(&self) -> Result<u64, BackendIoError> {
        self.inner.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), BackendIoError> {
        self.inner.read(offset, out)
    }

    fn set_len(&self, len: u64) -> Result<(), BackendIoError> {
        if len > self.inner.len()? {
            self.count(|c| {
                c.grows.fetch_add(1, Ordering::Relaxed);
            });
        }
        self.inner.set_len(len)
    }

    fn sync_data(&self) -> Result<(), BackendIoError> {
        self.count(|c| {
            c.syncs.fetch_add(1, Ordering::Relaxed);
        });
        self.inner.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), BackendIoError> {
        self.count(|c| {
            c.writes.fetch_add(1, Ordering::Relaxed);
            c.bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
        });
        self.inner.write(offset, data)
    }

    fn close(&self) -> Result<(), BackendIoError> {
        self.inner.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_range(start, end)
    }

    fn try_lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.query_lock_range(start, end)
    }
}
