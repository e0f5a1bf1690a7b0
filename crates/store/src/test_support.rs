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

/// A disk that loses what was not synced: [`Disk::crashed`] is the image as of the last
/// `sync_data`, as a power cut would leave it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Disk {
    now: Shared,
    synced: Arc<std::sync::Mutex<Vec<u8>>>,
}

impl Disk {
    /// How many times `sync_data` was called on this disk.
    pub(crate) fn syncs(&self) -> u64 {
        self.now.syncs()
    }

    /// A new disk holding what this one held at its last sync.
    pub(crate) fn crashed(&self) -> Disk {
        let image = self.synced.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let disk = Disk { now: Shared::default(), synced: Arc::new(std::sync::Mutex::new(image.clone())) };
        disk.now.set_len(image.len() as u64).expect("in memory");
        disk.now.write(0, &image).expect("in memory");
        disk
    }
}

impl StorageBackend for Disk {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.now.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.now.read(offset, out)
    }
    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.now.set_len(len)
    }
    fn sync_data(&self) -> Result<(), std::io::Error> {
        self.now.sync_data()?;
        let mut image = vec![0u8; usize::try_from(self.now.len()?).unwrap_or(0)];
        self.now.read(0, &mut image)?;
        *self.synced.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = image;
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        self.now.write(offset, data)
    }
}
