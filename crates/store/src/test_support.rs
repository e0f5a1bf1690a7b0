//! Helpers shared by the crate's unit tests.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use redb::StorageBackend;
use redb::backends::InMemoryBackend;

/// A handle on an in-memory image that a test keeps after giving a clone to a store or a
/// journal: both clones see the same bytes.
#[derive(Debug, Clone, Default)]
pub(crate) struct Shared(Arc<InMemoryBackend>, Arc<AtomicU64>);

impl Shared {
    /// How many times `sync_data` was called on any clone.
    pub(crate) fn syncs(&self) -> u64 {
        self.1.load(Ordering::SeqCst)
    }
}

impl StorageBackend for Shared {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.0.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.0.read(offset, out)
    }
    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> Result<(), std::io::Error> {
        self.1.fetch_add(1, Ordering::SeqCst);
        self.0.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        self.0.write(offset, data)
    }
}
