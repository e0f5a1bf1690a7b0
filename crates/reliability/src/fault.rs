//! A fault-injecting redb [`StorageBackend`] that keeps the live image (what the process sees)
//! apart from the durable image (what survives a power cut).
//!
//! Every `write`, `set_len` and `sync_data` is one numbered *operation* (1-based). A
//! [`FaultPlan`] makes operation N fail once, start failing for good (a full or dead disk), or
//! *crash*. A crash kills the simulated machine: that call and every later call (reads too)
//! fail, and the owner builds the image a power cut would leave with [`Disk::crash`]: the
//! durable image, plus a random subset of the writes and length changes made since the last
//! completed sync, some of them torn at 512-byte sector boundaries. The image then becomes both
//! the live and the durable image of the restarted machine.
//!
//! The model is the usual one for a disk with a volatile write cache and no ordering beyond
//! `fsync`: a completed `sync_data` makes everything before it durable; anything after it may
//! or may not reach the platter, in any combination, and a multi-sector write may be cut
//! between sectors. (redb's own `tests/crash_consistency.rs` uses the same split of live and
//! durable bytes.)

use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use redb::StorageBackend;

use crate::rng::Rng;

/// Sector size at which unsynced writes may be torn.
pub const SECTOR: u64 = 512;

/// What happens at the chosen operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// The operation fails once (an `EIO`); later operations succeed.
    FailOnce,
    /// The operation and every later write, length change and sync fail (`ENOSPC`, a dead
    /// device); reads still work.
    FailForever,
    /// The machine dies at this operation: it and every later call fail, until [`Disk::crash`]
    /// builds the post-crash image.
    Crash,
}

/// A fault at the `at`-th operation (1-based) since the plan was armed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FaultPlan {
    /// Operation index, counting from 1 after [`Disk::arm`].
    pub at: u64,
    /// What happens there.
    pub kind: FaultKind,
}

#[derive(Debug, Clone)]
enum Pending {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

/// One file of the disk.
#[derive(Debug, Default)]
struct Image {
    live: Vec<u8>,
    durable: Vec<u8>,
    /// Writes and length changes since the last completed sync of this file, in order.
    pending: Vec<Pending>,
}

/// The files of a disk: the store file and its journal.
const STORE: usize = 0;
const JOURNAL: usize = 1;

#[derive(Debug, Default)]
struct State {
    files: [Image; 2],
    /// Operations since the plan was armed (over both files).
    ops: u64,
    plans: Vec<FaultPlan>,
    failing: bool,
    crashed: bool,
    /// A broken disk for the harness's own tests: `sync_data` says yes and does nothing.
    lying_sync: bool,
    faults_fired: u64,
}

/// The simulated disk: shared by every [`FaultBackend`] handle made from it, and kept by the
/// harness across store instances (the store is dropped and reopened on the same disk). It
/// holds two files, the store file ([`Disk::backend`]) and its journal
/// ([`Disk::journal_backend`]): one operation counter and one power switch for both, and each
/// file's `sync_data` makes only that file's writes durable.
#[derive(Debug, Clone, Default)]
pub struct Disk(Arc<Mutex<State>>);

fn injected(what: &str) -> io::Error {
    io::Error::other(format!("injected fault: {what}"))
}

impl Disk {
    /// An empty disk with no fault planned.
    pub fn new() -> Self {
        Self::default()
    }

    /// A disk whose live and durable images are `image` (for example a saved crash image).
    pub fn from_image(image: Vec<u8>) -> Self {
        let disk = Disk::new();
        {
            let mut state = disk.lock();
            state.files[STORE].live = image.clone();
            state.files[STORE].durable = image;
        }
        disk
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A backend handle on the store file, for `StoreBuilder::open_backend`.
    pub fn backend(&self) -> FaultBackend {
        FaultBackend { disk: self.clone(), file: STORE }
    }

    /// A backend handle on the journal file, for `StoreBuilder::open_backend_with_journal`.
    /// Its unsynced writes may also be torn inside a sector at a power cut.
    pub fn journal_backend(&self) -> FaultBackend {
        FaultBackend { disk: self.clone(), file: JOURNAL }
    }

    /// Resets the operation counter and plans these faults (indices count from 1 from now).
    pub fn arm(&self, plans: &[FaultPlan]) {
        let mut state = self.lock();
        state.ops = 0;
        state.plans = plans.to_vec();
        state.failing = false;
    }

    /// Removes every planned fault and stops a fail-forever (the disk was replaced or freed).
    pub fn disarm(&self) {
        let mut state = self.lock();
        state.plans.clear();
        state.failing = false;
    }

    /// Makes `sync_data` a no-op that reports success (a lying disk; harness tests only).
    pub fn set_lying_sync(&self, lying: bool) {
        self.lock().lying_sync = lying;
    }

    /// Operations counted since the last [`Disk::arm`].
    pub fn ops(&self) -> u64 {
        self.lock().ops
    }

    /// Whether the machine has crashed (and not yet been restarted with [`Disk::crash`]).
    pub fn crashed(&self) -> bool {
        self.lock().crashed
    }

    /// The machine dies now (a power cut between two operations): every later call fails until
    /// [`Disk::crash`]. Call it before dropping the store, so the store's own shutdown writes
    /// cannot run on a machine that is already off.
    pub fn halt(&self) {
        self.lock().crashed = true;
    }

    /// Faults fired since the disk was made.
    pub fn faults_fired(&self) -> u64 {
        self.lock().faults_fired
    }

    /// Bytes of the store file's live image.
    pub fn live_len(&self) -> usize {
        self.lock().files[STORE].live.len()
    }

    /// A copy of the store file's durable image.
    pub fn durable_image(&self) -> Vec<u8> {
        self.lock().files[STORE].durable.clone()
    }

    /// A copy of the journal file's durable image.
    pub fn journal_durable_image(&self) -> Vec<u8> {
        self.lock().files[JOURNAL].durable.clone()
    }

    /// Power cut: the disk keeps its durable image plus a random (by `seed`) subset of the
    /// unsynced writes and length changes, some torn at sector boundaries, and becomes the disk
    /// of the restarted machine (live = durable = that image, no fault planned). Seeds `≡ 0`
    /// and `≡ 1 (mod 20)` keep none and all of the unsynced operations, so both extremes occur
    /// in every run of 20 seeds. Returns how many unsynced operations there were.
    ///
    /// The store must be dropped before this is called.
    pub fn crash(&self, seed: u64) -> usize {
        let mut state = self.lock();
        let mut rng = Rng::new(seed);
        let all = match seed % 20 {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        };
        let mut unsynced = 0;
        for (index, file) in state.files.iter_mut().enumerate() {
            unsynced += crash_file(file, &mut rng, all, index == JOURNAL);
        }
        state.crashed = false;
        state.failing = false;
        state.plans.clear();
        state.ops = 0;
        unsynced
    }

    /// Checks the fault plan for the next operation. `Err` means the operation must fail;
    /// `Ok(true)` means it is the crash operation (record it as pending, then fail).
    fn next_op(state: &mut State, what: &str) -> Result<bool, io::Error> {
        if state.crashed {
            return Err(injected("machine is down"));
        }
        state.ops += 1;
        if state.failing {
            return Err(injected(&format!("{what} on a failed device")));
        }
        let op = state.ops;
        let Some(plan) = state.plans.iter().find(|plan| plan.at == op).copied() else { return Ok(false) };
        state.faults_fired += 1;
        match plan.kind {
            FaultKind::FailOnce => Err(injected(&format!("{what} failed once"))),
            FaultKind::FailForever => {
                state.failing = true;
                Err(injected(&format!("{what} on a failed device")))
            }
            FaultKind::Crash => Ok(true),
        }
    }
}

/// Builds one file's post-crash image: its durable image plus a random subset of its unsynced
/// operations, some torn at sector boundaries and (with `partial_sectors`) some sectors cut
/// inside. Returns how many unsynced operations there were.
fn crash_file(file: &mut Image, rng: &mut Rng, all: Option<bool>, partial_sectors: bool) -> usize {
    let mut image = file.durable.clone();
    let pending = std::mem::take(&mut file.pending);
    for operation in &pending {
        match operation {
            Pending::SetLen(len) => {
                if all.unwrap_or_else(|| rng.chance(50)) {
                    image.resize(usize::try_from(*len).unwrap_or(usize::MAX), 0);
                }
            }
            Pending::Write { offset, data } => {
                let roll = rng.below(100);
                match all {
                    Some(false) => {}
                    Some(true) => apply_write(&mut image, *offset, data),
                    None if roll < 40 => apply_write(&mut image, *offset, data),
                    None if roll < 65 => {}
                    None => {
                        // Torn: each sector the write touches survives on its own; on a
                        // journal, a sector may also be cut short (a partial sector).
                        let end = offset + data.len() as u64;
                        let mut start = *offset;
                        while start < end {
                            let sector_end = ((start / SECTOR) + 1) * SECTOR;
                            let stop = sector_end.min(end);
                            let from = usize::try_from(start - offset).unwrap_or(0);
                            let to = usize::try_from(stop - offset).unwrap_or(0);
                            if rng.chance(50) {
                                apply_write(&mut image, start, &data[from..to]);
                            } else if partial_sectors && rng.chance(30) {
                                let cut = usize::try_from(rng.below((to - from) as u64)).unwrap_or(0);
                                apply_write(&mut image, start, &data[from..from + cut]);
                            }
                            start = stop;
                        }
                    }
                }
            }
        }
    }
    file.live = image.clone();
    file.durable = image;
    pending.len()
}

fn apply_write(image: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let offset = usize::try_from(offset).unwrap_or(usize::MAX);
    let end = offset.saturating_add(data.len());
    if end > image.len() {
        image.resize(end, 0);
    }
    image[offset..end].copy_from_slice(data);
}

/// The [`StorageBackend`] over a [`Disk`].
#[derive(Debug, Clone)]
pub struct FaultBackend {
    disk: Disk,
    file: usize,
}

impl StorageBackend for FaultBackend {
    fn len(&self) -> Result<u64, io::Error> {
        let state = self.disk.lock();
        if state.crashed {
            return Err(injected("machine is down"));
        }
        Ok(state.files[self.file].live.len() as u64)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        let state = self.disk.lock();
        if state.crashed {
            return Err(injected("machine is down"));
        }
        let start = usize::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        let live = &state.files[self.file].live;
        let end = start.checked_add(out.len()).filter(|end| *end <= live.len());
        let Some(end) = end else { return Err(io::Error::from(io::ErrorKind::UnexpectedEof)) };
        out.copy_from_slice(&live[start..end]);
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        let mut state = self.disk.lock();
        if Disk::next_op(&mut state, "set_len")? {
            state.files[self.file].pending.push(Pending::SetLen(len));
            state.crashed = true;
            return Err(injected("crash during set_len"));
        }
        let file = &mut state.files[self.file];
        file.live.resize(usize::try_from(len).map_err(io::Error::other)?, 0);
        file.pending.push(Pending::SetLen(len));
        Ok(())
    }

    fn sync_data(&self) -> Result<(), io::Error> {
        let mut state = self.disk.lock();
        if Disk::next_op(&mut state, "sync_data")? {
            state.crashed = true;
            return Err(injected("crash during sync_data"));
        }
        if !state.lying_sync {
            let file = &mut state.files[self.file];
            let pending = std::mem::take(&mut file.pending);
            let mut durable = std::mem::take(&mut file.durable);
            for operation in pending {
                match operation {
                    Pending::SetLen(len) => durable.resize(usize::try_from(len).unwrap_or(usize::MAX), 0),
                    Pending::Write { offset, data } => apply_write(&mut durable, offset, &data),
                }
            }
            file.durable = durable;
        }
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        let mut state = self.disk.lock();
        if Disk::next_op(&mut state, "write")? {
            state.files[self.file].pending.push(Pending::Write { offset, data: data.to_vec() });
            state.crashed = true;
            return Err(injected("crash during write"));
        }
        let file = &mut state.files[self.file];
        apply_write(&mut file.live, offset, data);
        file.pending.push(Pending::Write { offset, data: data.to_vec() });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synced_bytes_survive_and_unsynced_ones_are_chosen_by_seed() {
        let make = || {
            let disk = Disk::new();
            let backend = disk.backend();
            backend.write(0, &[1; 1024]).unwrap();
            backend.sync_data().unwrap();
            backend.write(0, &[2; 1024]).unwrap();
            disk
        };
        let none = make();
        none.crash(20);
        assert_eq!(none.durable_image(), vec![1; 1024], "seed 0 mod 20 keeps no unsynced write");
        let all = make();
        all.crash(21);
        assert_eq!(all.durable_image(), vec![2; 1024], "seed 1 mod 20 keeps every unsynced write");
    }

    #[test]
    fn each_file_syncs_alone_and_both_share_the_operation_count() {
        let disk = Disk::new();
        let (store, journal) = (disk.backend(), disk.journal_backend());
        store.write(0, &[1; 512]).unwrap();
        journal.write(0, &[2; 512]).unwrap();
        journal.sync_data().unwrap();
        assert_eq!(disk.ops(), 3, "one counter for both files");
        disk.crash(20);
        assert_eq!(disk.journal_durable_image(), vec![2; 512], "the journal's sync made its write durable");
        assert!(disk.durable_image().is_empty(), "and not the store file's");
        // Partial sectors happen on the journal only.
        let mut cut_inside = 0;
        for seed in 2..400 {
            let disk = Disk::new();
            disk.journal_backend().write(0, &[7; 4096]).unwrap();
            disk.backend().write(0, &[7; 4096]).unwrap();
            disk.crash(seed);
            let inside = |image: &[u8]| image.chunks(512).any(|s| s.contains(&7) && s.contains(&0));
            assert!(!inside(&disk.durable_image()), "seed {seed}: the store file keeps whole sectors");
            cut_inside += u32::from(inside(&disk.journal_durable_image()));
        }
        assert!(cut_inside > 0, "some journal sector was cut short");
    }

    #[test]
    fn torn_writes_keep_whole_sectors_only() {
        for seed in 2..400 {
            let disk = Disk::new();
            let backend = disk.backend();
            backend.write(0, &[1; 2048]).unwrap();
            backend.sync_data().unwrap();
            backend.write(100, &[2; 1500]).unwrap();
            disk.crash(seed);
            let image = disk.durable_image();
            assert_eq!(image.len(), 2048);
            // Within each sector the write is all there or not at all.
            for sector in image.chunks(512) {
                let written: Vec<bool> = sector.iter().map(|b| *b == 2).collect();
                let range: Vec<usize> = (0..sector.len()).filter(|i| written[*i]).collect();
                if let (Some(first), Some(last)) = (range.first(), range.last()) {
                    assert_eq!(range.len(), last - first + 1, "seed {seed}: a sector is partly written");
                }
            }
        }
    }

    #[test]
    fn faults_fire_at_their_operation() {
        let disk = Disk::new();
        let backend = disk.backend();
        disk.arm(&[FaultPlan { at: 2, kind: FaultKind::FailOnce }, FaultPlan { at: 4, kind: FaultKind::Crash }]);
        assert!(backend.write(0, &[1]).is_ok());
        assert!(backend.write(0, &[1]).is_err());
        assert!(backend.sync_data().is_ok());
        assert!(backend.sync_data().is_err());
        assert!(disk.crashed());
        let mut out = [0u8; 1];
        assert!(backend.read(0, &mut out).is_err(), "a crashed machine reads nothing");
        disk.crash(1);
        assert!(!disk.crashed());
        assert!(backend.read(0, &mut out).is_ok());
        disk.arm(&[FaultPlan { at: 1, kind: FaultKind::FailForever }]);
        assert!(backend.write(0, &[1]).is_err());
        assert!(backend.sync_data().is_err());
        assert!(backend.read(0, &mut out).is_ok(), "a full disk still reads");
        assert_eq!(disk.faults_fired(), 3);
    }
}
