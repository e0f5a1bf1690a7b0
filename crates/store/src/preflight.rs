//! Deciding an open before it writes: a refused open changes nothing.
//!
//! An open for writing changes the store file before it can know everything it may refuse:
//! redb repairs a file that was not closed cleanly as it opens it, and the journal's checks
//! come after that. So every refusal that the file and its journal can decide is decided
//! first, on a view that cannot write: a read-only redb handle when the file opens that way,
//! and otherwise (the file needs redb's repair) a copy-on-write view ([`CowFile`]) on which
//! redb repairs the file in memory. Only a store that would open is then opened for real.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::Path;
use std::sync::Mutex;

use redb::StorageBackend;

/// The page size of the in-memory copy.
const PAGE: u64 = 4096;

/// A file seen through a copy-on-write layer: reads come from the file unless the page was
/// written, writes stay in memory, `sync_data` does nothing. The file is opened read-only and
/// never locked, so the view never changes a byte on disk.
#[derive(Debug)]
pub(crate) struct CowFile {
    file: Mutex<fs::File>,
    state: Mutex<CowState>,
}

#[derive(Debug)]
struct CowState {
    len: u64,
    /// The file's length on disk: bytes past it read as zeros.
    disk_len: u64,
    pages: HashMap<u64, Box<[u8]>>,
}

impl CowFile {
    /// A copy-on-write view of the file at `path`.
    ///
    /// # Errors
    /// I/O errors opening it.
    pub(crate) fn open(path: &Path) -> io::Result<CowFile> {
        let file = fs::File::open(path)?;
        let len = file.metadata()?.len();
        Ok(CowFile {
            file: Mutex::new(file),
            state: Mutex::new(CowState { len, disk_len: len, pages: HashMap::new() }),
        })
    }

    fn read_disk(&self, offset: u64, out: &mut [u8], disk_len: u64) -> io::Result<()> {
        out.fill(0);
        if offset >= disk_len {
            return Ok(());
        }
        let take = usize::try_from((disk_len - offset).min(out.len() as u64)).unwrap_or(out.len());
        let file = self.file.lock().map_err(|_| io::Error::other("poisoned"))?;
        read_exact_at(&file, &mut out[..take], offset)
    }
}

#[cfg(unix)]
fn read_exact_at(file: &fs::File, out: &mut [u8], offset: u64) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.read_exact_at(out, offset)
}

#[cfg(not(unix))]
fn read_exact_at(file: &fs::File, out: &mut [u8], offset: u64) -> io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = file;
    file.seek(SeekFrom::Start(offset))?;
    file.read_exact(out)
}

impl StorageBackend for CowFile {
    fn len(&self) -> Result<u64, io::Error> {
        Ok(self.state.lock().map_err(|_| io::Error::other("poisoned"))?.len)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        let state = self.state.lock().map_err(|_| io::Error::other("poisoned"))?;
        let mut done = 0usize;
        while done < out.len() {
            let at = offset + done as u64;
            let page = at / PAGE;
            let within = usize::try_from(at % PAGE).unwrap_or(0);
            let take = (PAGE as usize - within).min(out.len() - done);
            match state.pages.get(&page) {
                Some(bytes) => out[done..done + take].copy_from_slice(&bytes[within..within + take]),
                None => self.read_disk(at, &mut out[done..done + take], state.disk_len)?,
            }
            done += take;
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        let mut state = self.state.lock().map_err(|_| io::Error::other("poisoned"))?;
        if len < state.len {
            // Bytes cut off read as zeros if the file grows again.
            let (cut_page, keep) = (len / PAGE, usize::try_from(len % PAGE).unwrap_or(0));
            if keep > 0 {
                if !state.pages.contains_key(&cut_page) {
                    let mut bytes = vec![0u8; PAGE as usize];
                    self.read_disk(cut_page * PAGE, &mut bytes, state.disk_len)?;
                    state.pages.insert(cut_page, bytes.into_boxed_slice());
                }
                if let Some(bytes) = state.pages.get_mut(&cut_page) {
                    bytes[keep..].fill(0);
                }
            }
            state.pages.retain(|page, _| *page * PAGE < len);
            state.disk_len = state.disk_len.min(len);
        }
        state.len = len;
        Ok(())
    }

    fn sync_data(&self) -> Result<(), io::Error> {
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        let mut state = self.state.lock().map_err(|_| io::Error::other("poisoned"))?;
        let mut done = 0usize;
        while done < data.len() {
            let at = offset + done as u64;
            let page = at / PAGE;
            let within = usize::try_from(at % PAGE).unwrap_or(0);
            let take = (PAGE as usize - within).min(data.len() - done);
            if !state.pages.contains_key(&page) {
                let mut bytes = vec![0u8; PAGE as usize];
                if take < PAGE as usize {
                    self.read_disk(page * PAGE, &mut bytes, state.disk_len)?;
                }
                state.pages.insert(page, bytes.into_boxed_slice());
            }
            if let Some(bytes) = state.pages.get_mut(&page) {
                bytes[within..within + take].copy_from_slice(&data[done..done + take]);
            }
            done += take;
        }
        state.len = state.len.max(offset + data.len() as u64);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_stay_in_memory_and_reads_see_them() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("f");
        let original: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        fs::write(&path, &original).expect("write");
        let cow = CowFile::open(&path).expect("open");
        cow.write(4000, &[7; 200]).expect("write across a page edge");
        cow.set_len(12_000).expect("grow");
        let mut out = vec![0u8; 12_000];
        cow.read(0, &mut out).expect("read");
        let mut expected = original.clone();
        expected[4000..4200].fill(7);
        expected.resize(12_000, 0);
        assert_eq!(out, expected);
        cow.set_len(100).expect("shrink");
        cow.set_len(5000).expect("grow again");
        let mut out = vec![0u8; 5000];
        cow.read(0, &mut out).expect("read");
        assert_eq!(&out[..100], &original[..100]);
        assert!(out[100..].iter().all(|byte| *byte == 0), "cut bytes read as zeros");
        assert_eq!(fs::read(&path).expect("file"), original, "not a byte on disk changed");
    }
}
