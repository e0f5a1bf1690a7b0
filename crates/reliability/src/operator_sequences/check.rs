//! The checks of a sequence: what a refusal may not change (the directory's bytes), whether a
//! refusal is typed, and the final reading of every store against the model.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::hash::Hasher;
use std::path::Path;

use idemdb::{IdempotencyKey, OpenError, State};

use super::model::Model;
use super::writer::{builder, scope};

/// The directory as a refusal must leave it: each entry's kind, size and content hash (symlinks:
/// their target). Lock files hold no data and are left out.
pub(crate) fn snapshot(dir: &Path) -> BTreeMap<String, String> {
    let mut entries = BTreeMap::new();
    let Ok(listing) = fs::read_dir(dir) else { return entries };
    for entry in listing.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".lock") {
            continue;
        }
        let path = entry.path();
        let description = match fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_symlink() => {
                format!("link {}", fs::read_link(&path).map(|t| t.display().to_string()).unwrap_or_default())
            }
            Ok(meta) if meta.is_file() => {
                let mut hasher = std::collections::hash_map::DefaultHasher::new();
                hasher.write(&fs::read(&path).unwrap_or_default());
                format!("file {} {:016x}", meta.len(), hasher.finish())
            }
            Ok(meta) => format!("other {:?}", meta.file_type()),
            Err(error) => format!("unreadable {error}"),
        };
        entries.insert(name, description);
    }
    entries
}

/// What changed between two snapshots, in words (empty: nothing).
pub(crate) fn changes(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> Vec<String> {
    let mut out = Vec::new();
    for (name, was) in before {
        match after.get(name) {
            None => out.push(format!("{name} removed")),
            Some(now) if now != was => out.push(format!("{name} changed ({was} -> {now})")),
            Some(_) => {}
        }
    }
    for name in after.keys().filter(|name| !before.contains_key(*name)) {
        out.push(format!("{name} appeared"));
    }
    out
}

/// Whether a refused command said why in the documented way: a refusal's exit code (2 usage,
/// 3 cannot open, 4 runtime) and a one-line `error: …` (or `idemdb: …`) report, not an
/// internal error.
pub(crate) fn typed_refusal(code: Option<i32>, stderr: &str) -> bool {
    let last = stderr.lines().rev().find(|line| !line.trim().is_empty());
    matches!(code, Some(2..=4))
        && last.is_some_and(|line| {
            (line.starts_with("error: ") || line.starts_with("idemdb: "))
                && !line.contains("internal error")
                && !line.contains("panicked")
        })
}

/// The keys of this sequence's form (`Lnn-nnnnn`) found anywhere in the bytes of the journal
/// files kept in `dir`: those an open set aside (`.set-aside-`), those the operator moved
/// away (`.moved-journal`), and journals beside any name (`-journal`: a store reached through
/// one hard link may have given up the journal that sits beside another of its names).
pub(crate) fn keys_in_kept_journals(dir: &Path) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    let Ok(listing) = fs::read_dir(dir) else { return keys };
    for entry in listing.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !(name.contains(".set-aside-") || name.contains(".moved-journal") || name.ends_with("-journal")) {
            continue;
        }
        keys.extend(keys_in(&entry.path()));
    }
    keys
}

/// The keys of this sequence's form (`Lnn-nnnnn`) found anywhere in the bytes of a file.
fn keys_in(path: &Path) -> BTreeSet<String> {
    let bytes = fs::read(path).unwrap_or_default();
    let shape = |window: &[u8]| {
        window[0] == b'L'
            && window[1..3].iter().all(u8::is_ascii_digit)
            && window[3] == b'-'
            && window[4..9].iter().all(u8::is_ascii_digit)
    };
    bytes.windows(9).filter(|window| shape(window)).map(|window| String::from_utf8_lossy(window).into_owned()).collect()
}

/// What the final check of a sequence found.
#[derive(Debug, Clone, Default)]
pub(crate) struct Found {
    pub(crate) verified: u64,
    pub(crate) lost: u64,
    pub(crate) given_up: u64,
    pub(crate) replaced: u64,
    pub(crate) foreign: u64,
    pub(crate) refused_at_check: u64,
    pub(crate) notes: Vec<String>,
}

/// Opens every store the model knows (through the first of its names; the writer is gone) and
/// reads every key of the sequence: each key a store must hold is there, completed with its own
/// body; no key it may not hold is there at all. A store whose open is refused for its journal
/// is treated as an operator would: its journal is put back beside it when the operator had
/// moved it elsewhere (`log` says so), and failing that the store is recovered with its journal
/// given up (`discard_lost_journal`); what that gives up counts as given up by an explicit
/// discard only if a kept journal file (set aside, or moved away by the operator) still holds
/// it, else as lost.
pub(crate) fn final_check(dir: &Path, model: &mut Model, journal_bytes: u64, log: &mut Vec<String>) -> Found {
    let mut found = Found::default();
    let universe = model.universe();
    let mut kept: Option<BTreeSet<String>> = None;
    for id in 0..model.lineages.len() {
        let Some(lineage) = model.lineages.get(id).cloned() else { continue };
        let must = lineage.must();
        let names = model.names_of(id);
        let Some(name) = names.first() else {
            if lineage.replaced {
                found.replaced += must.len() as u64;
            } else if !must.is_empty() {
                found.lost += must.len() as u64;
                found.notes.push(format!(
                    "{} ({} acknowledged) is at no name any more: its file was replaced while it was held",
                    lineage.prefix,
                    must.len()
                ));
            }
            continue;
        };
        let path = dir.join(name);
        let mut discarded_here = false;
        let mut opened = builder(journal_bytes).open(&path);
        if opened.as_ref().is_err_and(journal_refusal) && put_back(dir, model, id, name, log) {
            opened = builder(journal_bytes).open(&path);
        }
        let store = match opened {
            Ok(store) => Some(store),
            Err(error) => {
                found.refused_at_check += 1;
                found.notes.push(format!("{name} ({}) refused at the check: {error}", lineage.prefix));
                if journal_refusal(&error) {
                    discarded_here = true;
                    log.push(format!("check: {name} ({}) opened with its journal discarded", lineage.prefix));
                    match builder(journal_bytes).discard_lost_journal(true).open(&path) {
                        Ok(store) => Some(store),
                        Err(error) => {
                            found.notes.push(format!("{name}: refused even with the journal discarded: {error}"));
                            None
                        }
                    }
                } else {
                    None
                }
            }
        };
        let Some(store) = store else {
            found.lost += must.len() as u64;
            continue;
        };
        let allowed = lineage.allowed();
        let Some(scope) = scope() else { continue };
        let mut missing = Vec::new();
        for key_name in &universe {
            let Ok(key) = IdempotencyKey::new(key_name.as_str()) else { continue };
            let record = store.get(&scope, &key);
            let present = matches!(record, Ok(Some(_)));
            let complete = matches!(
                &record,
                Ok(Some(record)) if matches!(&record.state, State::Completed { result, .. } if result == key_name.as_bytes())
            );
            if present && !allowed.contains(key_name) {
                found.foreign += 1;
                found.notes.push(format!("{name} ({}) holds {key_name}, another store's", lineage.prefix));
            }
            if must.contains(key_name) {
                if complete {
                    found.verified += 1;
                } else {
                    missing.push(key_name.clone());
                }
            }
        }
        drop(store);
        if missing.is_empty() {
            continue;
        }
        let explicit = lineage.discarded || discarded_here;
        let kept = kept.get_or_insert_with(|| keys_in_kept_journals(dir));
        // The journal file the operator moved the store's journal to still holds what it held.
        let own = lineage.journal.as_deref().map(|file| keys_in(&dir.join(file))).unwrap_or_default();
        let (given_up, lost): (Vec<String>, Vec<String>) =
            missing.into_iter().partition(|key| explicit && (kept.contains(key) || own.contains(key)));
        found.given_up += given_up.len() as u64;
        found.lost += lost.len() as u64;
        if !lost.is_empty() {
            found.notes.push(format!(
                "{name} ({}) lost {} of {} acknowledged (first {}){}",
                lineage.prefix,
                lost.len(),
                must.len(),
                lost[0],
                if explicit { " after a discard, and no kept journal holds them" } else { "" }
            ));
        }
    }
    found
}

/// A refusal because of the journal (missing, another store's, damaged).
fn journal_refusal(error: &OpenError) -> bool {
    matches!(
        error,
        OpenError::JournalMissing { .. } | OpenError::JournalForeign { .. } | OpenError::JournalDamaged { .. }
    )
}

/// What an operator does when told a store's journal is missing: puts the file they moved back
/// beside the store (moving whatever is there aside first). `false` when the model knows of no
/// such file.
fn put_back(dir: &Path, model: &mut Model, id: usize, name: &str, log: &mut Vec<String>) -> bool {
    let Some(beside) = model.file_name_of(name).map(|file| format!("{file}-journal")) else { return false };
    let Some(at) = model.lineages.get(id).and_then(|lineage| lineage.journal.clone()) else { return false };
    if at == beside || !exists(&dir.join(&at)) {
        return false;
    }
    if exists(&dir.join(&beside)) {
        let aside = format!("{beside}.moved-journal-check-{id}");
        if fs::rename(dir.join(&beside), dir.join(&aside)).is_err() {
            return false;
        }
        model.journal_renamed(&beside, &aside);
        log.push(format!("check: mv {beside} {aside}"));
    }
    if fs::rename(dir.join(&at), dir.join(&beside)).is_err() {
        return false;
    }
    model.journal_renamed(&at, &beside);
    log.push(format!("check: {name} refused, its journal put back: mv {at} {beside}"));
    true
}

/// Opens nothing: whether `store` exists as any kind of directory entry.
pub(crate) fn exists(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_typed_only_with_its_code_and_an_error_line() {
        assert!(typed_refusal(Some(3), "error: a.idemdb: already open\n"));
        assert!(typed_refusal(Some(2), "idemdb: warning\nerror: invalid value for DEST: exists\n"));
        assert!(!typed_refusal(Some(1), "error: x\n"));
        assert!(!typed_refusal(None, ""));
        assert!(!typed_refusal(Some(4), "thread 'main' panicked at src/x.rs\n"));
        assert!(!typed_refusal(Some(4), "error: a.idemdb: internal error: boom\n"));
    }

    #[test]
    fn snapshots_see_every_change_but_lock_files() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        fs::write(dir.path().join("a"), b"one").unwrap_or_else(|e| panic!("{e}"));
        let before = snapshot(dir.path());
        fs::write(dir.path().join("a.lock"), b"").unwrap_or_else(|e| panic!("{e}"));
        assert!(changes(&before, &snapshot(dir.path())).is_empty());
        fs::write(dir.path().join("a"), b"two").unwrap_or_else(|e| panic!("{e}"));
        fs::write(dir.path().join("b"), b"").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(changes(&before, &snapshot(dir.path())).len(), 2);
    }

    /// The check bites: a key the model says was acknowledged and is not in the store is lost;
    /// a key the store holds that its lineage never had is foreign; a discarded key still in a
    /// set-aside journal is given up, not lost.
    #[test]
    fn the_final_check_counts_lost_foreign_and_given_up_keys() {
        use super::super::model::Node;
        use idemdb::{Reservation, Reserve, Store};
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("a.idemdb");
        let scope = scope().expect("scope");
        {
            let store: Store = builder(16 * 1024).open(&path).expect("open");
            for name in ["L00-00000", "L01-00000"] {
                let key = IdempotencyKey::new(name).expect("key");
                let Ok(Reservation::Acquired(lease)) =
                    store.reserve(Reserve::new(&scope, &key, &super::super::writer::fingerprint()))
                else {
                    panic!("{name} was not new");
                };
                store.complete(&lease, name.as_bytes().to_vec()).expect("complete");
            }
        }
        let mut model = Model::default();
        let a = model.new_lineage();
        let b = model.new_lineage();
        model.names.insert("a.idemdb".into(), Node::File(a));
        let keys = |names: &[&str]| names.iter().map(|name| (*name).to_string()).collect::<Vec<_>>();
        model.request(a, &keys(&["L00-00000", "L00-00001", "L00-00002"]));
        model.request(b, &keys(&["L01-00000"]));
        if let Some(lineage) = model.lineages.get_mut(a) {
            lineage.acked.extend(keys(&["L00-00000", "L00-00001", "L00-00002"]));
        }
        let mut log = Vec::new();
        let found = final_check(dir.path(), &mut model, 16 * 1024, &mut log);
        assert_eq!((found.verified, found.lost, found.foreign, found.given_up), (1, 2, 1, 0), "{found:?}");
        // After an explicit discard, a missing key still in a set-aside journal is given up.
        fs::write(dir.path().join("a.idemdb-journal.set-aside-x-1"), b"..L00-00001..").expect("write");
        if let Some(lineage) = model.lineages.get_mut(a) {
            lineage.discarded = true;
        }
        let found = final_check(dir.path(), &mut model, 16 * 1024, &mut log);
        assert_eq!((found.verified, found.lost, found.foreign, found.given_up), (1, 1, 1, 1), "{found:?}");
    }

    #[test]
    fn kept_journals_are_scanned_for_keys() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        fs::write(dir.path().join("a.idemdb-journal.set-aside-00-1"), b"\0\x09L01-00042\x01L1-2")
            .unwrap_or_else(|e| panic!("{e}"));
        fs::write(dir.path().join("b.idemdb-journal"), b"L02-00001").unwrap_or_else(|e| panic!("{e}"));
        // Neither a store file nor anything else is a kept journal.
        fs::write(dir.path().join("c.idemdb"), b"L03-00007").unwrap_or_else(|e| panic!("{e}"));
        fs::write(dir.path().join("empty.jsonl"), b"L04-00008").unwrap_or_else(|e| panic!("{e}"));
        let keys = keys_in_kept_journals(dir.path());
        assert_eq!(keys.into_iter().collect::<Vec<_>>(), vec!["L01-00042".to_string(), "L02-00001".to_string()]);
    }
}
