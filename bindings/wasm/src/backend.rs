//! Storage backends shared by every store the bindings open, and the in-memory backend whose
//! bytes can be exported as a snapshot.

use std::sync::{Arc, PoisonError, RwLock};

use redb::StorageBackend;

/// A backend shared between redb and the bindings: redb owns one handle, the bindings keep
/// another to read the raw bytes for a snapshot.
#[derive(Debug, Clone)]
pub(crate) struct Shared(pub(crate) Arc<dyn StorageBackend>);

impl Shared {
    pub(crate) fn new(backend: impl StorageBackend) -> Self {
        Shared(Arc::new(backend))
    }

    /// Every byte of the storage, as it is now.
    pub(crate) fn read_all(&self) -> std::io::Result<Vec<u8>> {
        let len = usize::try_from(self.0.len()?).map_err(|_| std::io::Error::other("store larger than memory"))?;
        let mut out = vec![0; len];
        self.0.read(0, &mut out)?;
        Ok(out)
    }
}

impl StorageBackend for Shared {
    fn len(&self) -> std::io::Result<u64> {
        self.0.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        self.0.read(offset, out)
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.0.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.0.write(offset, data)
    }
    fn close(&self) -> std::io::Result<()> {
        self.0.close()
    }
}

/// A store in memory, optionally started from snapshot bytes.
#[derive(Debug, Default)]
pub(crate) struct Memory {
    bytes: RwLock<Vec<u8>>,
}

impl Memory {
    pub(crate) fn from_bytes(bytes: Vec<u8>) -> Self {
        Memory { bytes: RwLock::new(bytes) }
    }
}

fn range(offset: u64, len: usize, size: usize) -> std::io::Result<std::ops::Range<usize>> {
    let start = usize::try_from(offset).map_err(|_| std::io::Error::other("offset beyond memory"))?;
    let end = start.checked_add(len).ok_or_else(|| std::io::Error::other("range overflows"))?;
    if end > size {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("read {start}..{end} past end {size}"),
        ));
    }
    Ok(start..end)
}

impl StorageBackend for Memory {
    fn len(&self) -> std::io::Result<u64> {
        Ok(self.bytes.read().unwrap_or_else(PoisonError::into_inner).len() as u64)
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        let bytes = self.bytes.read().unwrap_or_else(PoisonError::into_inner);
        out.copy_from_slice(&bytes[range(offset, out.len(), bytes.len())?]);
        Ok(())
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        let len = usize::try_from(len).map_err(|_| std::io::Error::other("length beyond memory"))?;
        self.bytes.write().unwrap_or_else(PoisonError::into_inner).resize(len, 0);
        Ok(())
    }
    fn sync_data(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        let mut bytes = self.bytes.write().unwrap_or_else(PoisonError::into_inner);
        let size = bytes.len();
        bytes[range(offset, data.len(), size)?].copy_from_slice(data);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_backend_reads_writes_and_refuses_out_of_range() {
        let memory = Shared::new(Memory::default());
        memory.set_len(8).unwrap();
        memory.write(2, b"abc").unwrap();
        let mut out = [0u8; 4];
        memory.read(1, &mut out).unwrap();
        assert_eq!(&out, b"\0abc");
        assert!(memory.read(6, &mut out).is_err());
        assert!(memory.write(7, b"xy").is_err());
        assert_eq!(memory.read_all().unwrap(), b"\0\0abc\0\0\0");
    }
}
