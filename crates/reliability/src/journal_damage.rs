//! Journal damage across generations: a journaled store is crashed, its journal damaged at
//! random (a flipped byte, a zeroed sector, a truncation, a wiped header), reopened, written
//! again with some of the keys the damage lost (bodies of another size, so a stale record is
//! visible), crashed again without damage and reopened. Checked:
//!
//! * every open of the damaged journal either recovers a **prefix** of what was acknowledged
//!   (each key with its acknowledged body, the completed keys the first `m` in order) or
//!   refuses with a typed `OpenError` — never a panic, never a value that was not acknowledged;
//! * after the second run, **every** acknowledgement of that run is there with its own body,
//!   and no key lost to the damage that the second run did not write comes back (nothing from
//!   an earlier generation is applied).
//!
//! Each scenario runs on in-memory images (a crash is a copy of both images taken while the
//! store is open), with a small journal so checkpoints, and so generations, happen inside it.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex};

use idemdb::redb::StorageBackend;
use idemdb::{
    Fingerprint, IdempotencyKey, ManualClock, OpenError, Reservation, Reserve, Scope, StateKind, Store, StoreBuilder,
};

use crate::rng::Rng;

/// What the section found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DamageReport {
    /// Scenarios run.
    pub scenarios: u64,
    /// Opens of a damaged journal that recovered a prefix.
    pub recovered: u64,
    /// Opens of a damaged journal refused with a typed error (then opened with
    /// `discard_lost_journal`).
    pub refused: u64,
    /// Acknowledged completions checked after the second, undamaged crash.
    pub verified: u64,
    /// A key read back with a value that was never acknowledged for it in its run, or a key
    /// lost to the damage that came back (records of an earlier generation applied).
    pub stale: u64,
    /// Acknowledgements of the second run missing after its undamaged crash.
    pub lost: u64,
    /// Opens that recovered something that is not a prefix of the acknowledged history.
    pub not_prefix: u64,
    /// Opens that failed in a way that is not a journal refusal, or panicked.
    pub unopenable: u64,
    /// The first few failures, for the report.
    pub notes: Vec<String>,
}

impl DamageReport {
    /// Whether every check held.
    pub fn clean(&self) -> bool {
        self.stale == 0 && self.lost == 0 && self.not_prefix == 0 && self.unopenable == 0
    }

    fn note(&mut self, seed: u64, text: String) {
        if self.notes.len() < 8 {
            self.notes.push(format!("seed {seed}: {text}"));
        }
    }

    fn add(&mut self, other: &DamageReport) {
        self.scenarios += other.scenarios;
        self.recovered += other.recovered;
        self.refused += other.refused;
        self.verified += other.verified;
        self.stale += other.stale;
        self.lost += other.lost;
        self.not_prefix += other.not_prefix;
        self.unopenable += other.unopenable;
        for note in &other.notes {
            if self.notes.len() < 8 {
                self.notes.push(note.clone());
            }
        }
    }
}

/// An in-memory image several handles share; a crash is a copy of its bytes.
#[derive(Debug, Clone, Default)]
pub(crate) struct Image(Arc<Mutex<Vec<u8>>>);

impl Image {
    pub(crate) fn from(bytes: Vec<u8>) -> Image {
        Image(Arc::new(Mutex::new(bytes)))
    }
    pub(crate) fn bytes(&self) -> Vec<u8> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

impl StorageBackend for Image {
    fn len(&self) -> Result<u64, std::io::Error> {
        Ok(self.bytes_len())
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        let data = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let start = usize::try_from(offset).map_err(std::io::Error::other)?;
        let end = start.checked_add(out.len()).filter(|end| *end <= data.len());
        let end = end.ok_or_else(|| std::io::Error::from(std::io::ErrorKind::UnexpectedEof))?;
        out.copy_from_slice(&data[start..end]);
        Ok(())
    }
    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        let len = usize::try_from(len).map_err(std::io::Error::other)?;
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).resize(len, 0);
        Ok(())
    }
    fn sync_data(&self) -> Result<(), std::io::Error> {
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        let mut image = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let start = usize::try_from(offset).map_err(std::io::Error::other)?;
        if image.len() < start + data.len() {
            image.resize(start + data.len(), 0);
        }
        image[start..start + data.len()].copy_from_slice(data);
        Ok(())
    }
}

impl Image {
    fn bytes_len(&self) -> u64 {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len() as u64
    }
}

const T0: u64 = 1_700_000_000_000;
const JOURNAL_BYTES: u64 = 96 * 1024;

fn builder(clock: &ManualClock) -> StoreBuilder {
    Store::builder().clock(clock.clone()).secret_seed([9; 32]).journal(true).journal_bytes(JOURNAL_BYTES)
}

fn scope() -> Scope {
    Scope::new("acme", "pay").unwrap_or_else(|_| unreachable!("a valid scope"))
}

fn key(i: u32) -> IdempotencyKey {
    IdempotencyKey::new(format!("k-{i}")).unwrap_or_else(|_| unreachable!("a valid key"))
}

/// What a key holds after an open: its completed body, or whether a reservation is there.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Absent,
    Reserved,
    Completed(Vec<u8>),
    Other,
}

fn seen(store: &Store, i: u32) -> Result<Seen, idemdb::Error> {
    let Some(record) = store.get(&scope(), &key(i))? else { return Ok(Seen::Absent) };
    Ok(match record.state.kind() {
        StateKind::InProgress => Seen::Reserved,
        StateKind::Completed => {
            match store.reserve(Reserve::new(&scope(), &key(i), &Fingerprint::from_bytes([1; 32])))? {
                Reservation::Replay { body, .. } => Seen::Completed(body),
                _ => Seen::Other,
            }
        }
        _ => Seen::Other,
    })
}

/// Completes keys `keys` with `body(i)`; returns them in acknowledgement order.
fn write(store: &Store, keys: &[u32], body: impl Fn(u32) -> Vec<u8>) -> Vec<(u32, Vec<u8>)> {
    let mut acked = Vec::new();
    for &i in keys {
        let Ok(Reservation::Acquired(lease)) =
            store.reserve(Reserve::new(&scope(), &key(i), &Fingerprint::from_bytes([1; 32])))
        else {
            continue;
        };
        if store.complete(&lease, body(i)).is_ok() {
            acked.push((i, body(i)));
        }
    }
    acked
}

/// Damages a journal image.
fn damage(rng: &mut Rng, journal: &mut Vec<u8>) {
    let len = journal.len().max(1);
    match rng.below(5) {
        0 | 1 => {
            // A flipped byte, mostly where the records are.
            let at = if rng.below(4) == 0 {
                rng.below(len as u64) as usize
            } else {
                4096 + rng.below(len.saturating_sub(4096).max(1) as u64) as usize
            };
            if let Some(byte) = journal.get_mut(at) {
                *byte ^= 1 << rng.below(8);
            }
        }
        2 => {
            // A zeroed sector.
            let sector = rng.below((len / 512).max(1) as u64) as usize * 512;
            let end = (sector + 512).min(journal.len());
            journal[sector.min(end)..end].fill(0);
        }
        3 => {
            // Cut short.
            let at = rng.below(len as u64) as usize;
            journal.truncate(at);
        }
        _ => {
            // The header wiped.
            let end = 1024.min(journal.len());
            journal[..end].fill(0);
        }
    }
}

/// Opens the images; a typed journal refusal is counted and the store opened anyway with
/// `discard_lost_journal`. `None`: unopenable (counted).
fn open(
    report: &mut DamageReport,
    seed: u64,
    clock: &ManualClock,
    store: &Image,
    journal: &Image,
    damaged: bool,
) -> Option<Store> {
    let opened =
        catch_unwind(AssertUnwindSafe(|| builder(clock).open_backend_with_journal(store.clone(), journal.clone())));
    match opened {
        Ok(Ok(opened)) => {
            if damaged {
                report.recovered += 1;
            }
            Some(opened)
        }
        Ok(Err(
            refused @ (OpenError::JournalMissing { .. }
            | OpenError::JournalDamaged { .. }
            | OpenError::JournalForeign { .. }),
        )) if damaged => {
            report.refused += 1;
            let _ = refused;
            let again = catch_unwind(AssertUnwindSafe(|| {
                builder(clock).discard_lost_journal(true).open_backend_with_journal(store.clone(), journal.clone())
            }));
            match again {
                Ok(Ok(opened)) => Some(opened),
                other => {
                    report.unopenable += 1;
                    report.note(seed, format!("discard_lost_journal did not open: {:?}", other.map(|r| r.map(drop))));
                    None
                }
            }
        }
        Ok(Err(other)) => {
            report.unopenable += 1;
            report.note(seed, format!("open failed (damaged: {damaged}): {other}"));
            None
        }
        Err(_) => {
            report.unopenable += 1;
            report.note(seed, format!("open panicked (damaged: {damaged})"));
            None
        }
    }
}

/// One scenario.
pub fn scenario(seed: u64) -> DamageReport {
    let mut report = DamageReport { scenarios: 1, ..DamageReport::default() };
    let mut rng = Rng::new(seed);
    let clock = ManualClock::new(T0);
    let (store_image, journal_image) = (Image::default(), Image::default());
    let n1 = 8 + rng.below(40) as u32;
    // Run 1: small and large bodies; some checkpoints happen on the way (the journal is small).
    let big: Vec<bool> = (0..n1).map(|_| rng.below(4) == 0).collect();
    let body1 = |i: u32| if big[i as usize] { vec![b'a'; 9000] } else { vec![b'a'; 100] };
    let (crash_store, mut crash_journal, acked1) = {
        let Some(store) = open(&mut report, seed, &clock, &store_image, &journal_image, false) else { return report };
        let keys: Vec<u32> = (0..n1).collect();
        let acked = write(&store, &keys, body1);
        let crash = (store_image.bytes(), journal_image.bytes(), acked);
        drop(store);
        crash
    };
    damage(&mut rng, &mut crash_journal);
    let (store_image, journal_image) = (Image::from(crash_store), Image::from(crash_journal));

    // Reopen on the damaged journal: a prefix of run 1, or a typed refusal.
    let Some(store) = open(&mut report, seed, &clock, &store_image, &journal_image, true) else { return report };
    let mut present = BTreeMap::new();
    let mut prefix_ended = false;
    for (i, body) in &acked1 {
        match seen(&store, *i) {
            Ok(Seen::Completed(found)) if found == *body => {
                if prefix_ended {
                    report.not_prefix += 1;
                    report.note(seed, format!("k-{i} present after a lost key"));
                }
                present.insert(*i, found);
            }
            Ok(Seen::Absent | Seen::Reserved) => prefix_ended = true,
            Ok(other) => {
                report.stale += 1;
                report.note(seed, format!("k-{i} after the damaged open: {other:?}"));
            }
            Err(error) => {
                report.unopenable += 1;
                report.note(seed, format!("k-{i} unreadable: {error}"));
            }
        }
    }
    // Run 2: some of the keys the damage lost, with bodies of another size, and new keys.
    let lost: Vec<u32> = acked1.iter().map(|(i, _)| *i).filter(|i| !present.contains_key(i)).collect();
    let mut keys2: Vec<u32> = lost.iter().copied().filter(|_| rng.below(2) == 0).collect();
    keys2.extend(n1..n1 + 4 + rng.below(12) as u32);
    let body2 = |i: u32| if i.is_multiple_of(2) { vec![b'b'; 9000] } else { vec![b'b'; 300] };
    let acked2 = write(&store, &keys2, body2);
    let (crash_store, crash_journal) = (store_image.bytes(), journal_image.bytes());
    drop(store);

    // The second crash leaves an undamaged journal: everything acknowledged is there.
    let (store_image, journal_image) = (Image::from(crash_store), Image::from(crash_journal));
    let Some(store) = open(&mut report, seed, &clock, &store_image, &journal_image, false) else { return report };
    let written2: BTreeMap<u32, Vec<u8>> = acked2.into_iter().collect();
    for (i, body) in &written2 {
        match seen(&store, *i) {
            Ok(Seen::Completed(found)) if found == *body => report.verified += 1,
            Ok(Seen::Completed(found)) => {
                report.stale += 1;
                report.note(seed, format!("k-{i}: {} bytes acknowledged, {} bytes read back", body.len(), found.len()));
            }
            Ok(other) => {
                report.lost += 1;
                report.note(seed, format!("k-{i} acknowledged in run 2, then {other:?}"));
            }
            Err(error) => {
                report.unopenable += 1;
                report.note(seed, format!("k-{i} unreadable: {error}"));
            }
        }
    }
    for i in lost.iter().filter(|i| !written2.contains_key(i)) {
        match seen(&store, *i) {
            Ok(Seen::Absent | Seen::Reserved) => {}
            other => {
                report.stale += 1;
                report.note(seed, format!("k-{i}, lost to the damage and not written again, came back: {other:?}"));
            }
        }
    }
    for (i, body) in &present {
        if !matches!(seen(&store, *i), Ok(Seen::Completed(ref found)) if found == body) {
            report.lost += 1;
            report.note(seed, format!("k-{i}, recovered after the damage, is gone"));
        }
    }
    report
}

/// Runs `count` scenarios from `seed` on `threads` threads.
pub fn run(count: u64, seed: u64, threads: usize) -> DamageReport {
    let threads = threads.max(1) as u64;
    let parts: Vec<DamageReport> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    let mut part = DamageReport::default();
                    let mut n = t;
                    while n < count {
                        part.add(&scenario(seed.wrapping_mul(1_000_003).wrapping_add(n)));
                        n += threads;
                    }
                    part
                })
            })
            .collect();
        handles.into_iter().map(|handle| handle.join().unwrap_or_default()).collect()
    });
    let mut total = DamageReport::default();
    for part in &parts {
        total.add(part);
    }
    total
}

#[cfg(test)]
mod tests {
    #[test]
    fn damaged_journals_recover_a_prefix_or_are_refused_and_nothing_stale_comes_back() {
        let report = super::run(200, 11, 2);
        assert_eq!(report.scenarios, 200);
        assert!(report.clean(), "{report:#?}");
        assert!(report.recovered > 0 && report.refused > 0, "both outcomes are reached: {report:?}");
        assert!(report.verified > 0);
    }
}
