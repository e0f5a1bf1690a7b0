//! A journal is never destroyed by an open that does not own it: regression tests for the
//! operator routes that once lost acknowledged commits — a new store at a crashed store's old
//! name, a stale journal beside a renamed or hard-linked store, `--discard-journal` rewriting
//! whatever sat beside the store, damage in the middle of a journal or a journal cut short
//! reported as a clean recovery, a directory whose name is not UTF-8. Each crash here is a real
//! one: a child process acknowledges completions and aborts.

use std::fs;
use std::path::{Path, PathBuf};

use idemdb::{ManualClock, OpenError, Reservation, Reserve, Scope, SetAsideReason, StateKind, Store, StoreBuilder};
use idemdb_tests::{T0, fp, key, scope};

fn builder() -> StoreBuilder {
    Store::builder().clock(ManualClock::new(T0)).journal(true).journal_bytes(1 << 20)
}

fn journal_of(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push("-journal");
    PathBuf::from(name)
}

fn pay() -> Scope {
    scope("acme", "pay")
}

/// The stored body of `name`, if it is completed.
fn body(store: &Store, name: &str) -> Option<Vec<u8>> {
    let record = store.get(&pay(), &key(name)).expect("get")?;
    if record.state.kind() != StateKind::Completed {
        return None;
    }
    match store.reserve(Reserve::new(&pay(), &key(name), &fp(1))).expect("replay") {
        Reservation::Replay { body, .. } => Some(body),
        other => panic!("{name}: {other:?}"),
    }
}

fn complete(store: &Store, name: &str) {
    let Reservation::Acquired(lease) = store.reserve(Reserve::new(&pay(), &key(name), &fp(1))).expect("reserve") else {
        panic!("{name} is new");
    };
    store.complete(&lease, b"ok".to_vec()).expect("complete");
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// Runs [`owner_child_writer`] in a child process: it opens the store at `path`, completes
/// `names`, prints one line per acknowledgement and aborts (a crash: no destructor runs).
/// Returns the names acknowledged.
fn crash_writer(path: &Path, names: &[String]) -> Vec<String> {
    crash_writer_copying(path, names, None)
}

/// [`crash_writer`], copying `from` to `to` after `after` acknowledgements.
fn crash_writer_copying(path: &Path, names: &[String], copy: Option<(usize, &Path, &Path)>) -> Vec<String> {
    let ops: Vec<(usize, FileOp, &Path, &Path)> =
        copy.into_iter().map(|(after, from, to)| (after, FileOp::Copy, from, to)).collect();
    crash_writer_with(path, names, &ops)
}

/// What an operator does to a file while the writer runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileOp {
    /// `cp FROM TO`
    Copy,
    /// `mv FROM TO`
    Move,
}

/// [`crash_writer`], running `ops` (after so many acknowledgements each, in order) while it
/// writes.
fn crash_writer_with(path: &Path, names: &[String], ops: &[(usize, FileOp, &Path, &Path)]) -> Vec<String> {
    let mut command = std::process::Command::new(std::env::current_exe().expect("test binary"));
    command
        .args(["--exact", "journal_owners::owner_child_writer", "--ignored", "--nocapture", "--test-threads", "1"])
        .env("IDEMDB_OWNER_CHILD_STORE", path)
        .env("IDEMDB_OWNER_CHILD_KEYS", names.join(","));
    let ops: Vec<String> = ops
        .iter()
        .map(|(after, op, from, to)| {
            let op = if *op == FileOp::Copy { "cp" } else { "mv" };
            format!("{after}|{op}|{}|{}", from.display(), to.display())
        })
        .collect();
    command.env("IDEMDB_OWNER_CHILD_OPS", ops.join(";"));
    let output = command.output().expect("run the child");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!output.status.success(), "the child crashes: {stdout} {}", String::from_utf8_lossy(&output.stderr));
    let acked: Vec<String> =
        stdout.lines().filter_map(|line| line.split("acked ").nth(1)).map(str::to_string).collect();
    assert_eq!(acked.len(), names.len(), "every completion acknowledged before the crash");
    acked
}

/// The child half of [`crash_writer`]; does nothing when run on its own.
#[test]
#[ignore = "run by crash_writer in a child process"]
fn owner_child_writer() {
    let (Some(path), Ok(keys)) =
        (std::env::var_os("IDEMDB_OWNER_CHILD_STORE"), std::env::var("IDEMDB_OWNER_CHILD_KEYS"))
    else {
        return;
    };
    // IDEMDB_OWNER_CHILD_OPS="N|cp|FROM|TO;N|mv|FROM|TO": an operator's `cp` or `mv` after N
    // acknowledgements, while the store runs.
    let ops = std::env::var("IDEMDB_OWNER_CHILD_OPS").unwrap_or_default();
    let ops: Vec<Vec<String>> =
        ops.split(';').filter(|op| !op.is_empty()).map(|op| op.split('|').map(str::to_string).collect()).collect();
    let store = builder().open(&path).expect("child open");
    for (done, name) in keys.split(',').enumerate() {
        for op in &ops {
            if let [after, op, from, to] = op.as_slice()
                && after.parse::<usize>().ok() == Some(done)
            {
                if op == "cp" {
                    fs::copy(from, to).expect("copy while running");
                } else {
                    fs::rename(from, to).expect("move while running");
                }
            }
        }
        complete(&store, name);
        println!("acked {name}");
    }
    std::process::abort();
}

fn assert_all(store: &Store, acked: &[String], what: &str) {
    let lost: Vec<&String> = acked.iter().filter(|name| body(store, name).is_none()).collect();
    assert!(lost.is_empty(), "{what}: {} of {} acknowledged completions lost: {lost:?}", lost.len(), acked.len());
}

/// The files in `dir`, but for holder lock files (`*.lock`): an open may clear the stale lock of
/// a process that is gone, which is not data (the lock protocol's own tests cover it).
fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .expect("dir")
        .map(|entry| entry.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|name| !name.ends_with(".lock"))
        .collect();
    names.sort();
    names
}

/// A writer acknowledges completions and is killed; the operator moves the crashed store
/// aside and a new store is created at its old name (an import, a service restarted). The new
/// store once re-created the journal it found there — the crashed store's — and every
/// acknowledged completion was gone. Now it sets that journal aside, says so, and the crashed
/// store finds it again.
#[test]
fn a_new_store_at_a_crashed_stores_old_name_sets_its_journal_aside() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("s.idemdb");
    drop(builder().open(&path).expect("create"));
    let acked = crash_writer(&path, &names("paid", 40));
    let moved = dir.path().join("s.idemdb.crashed");
    fs::rename(&path, &moved).expect("mv s.idemdb s.idemdb.crashed");

    let fresh = builder().open(&path).expect("a new store at the old name");
    let report = fresh.journal_recovery().expect("report").clone();
    assert_eq!(report.set_aside.len(), 1, "{report:?}");
    let aside = &report.set_aside[0];
    assert_eq!(aside.reason, SetAsideReason::NotThisStores);
    assert_eq!(aside.from, fs::canonicalize(dir.path()).expect("dir").join("s.idemdb-journal"));
    assert!(aside.to.exists(), "the crashed store's journal is kept");
    assert!(aside.to.to_string_lossy().contains(".set-aside-"), "{}", aside.to.display());
    complete(&fresh, "new-store-key");
    drop(fresh);

    let crashed = builder().open(&moved).expect("the crashed store, under its new name");
    assert_all(&crashed, &acked, "after a new store took the old name");
    assert!(crashed.get(&pay(), &key("new-store-key")).expect("get").is_none(), "no foreign record applied");
    let report = crashed.journal_recovery().expect("report");
    assert_eq!(report.applied as usize, acked.len() * 2, "a reserve and a complete each");
    assert_eq!(report.read_from.as_deref(), Some(aside.to.as_path()));
    assert_eq!(report.removed.as_deref(), Some(aside.to.as_path()), "applied, then removed");
    drop(crashed);
    // The new store at the old name still has its own key.
    let fresh = builder().open(&path).expect("reopen the new store");
    assert!(body(&fresh, "new-store-key").is_some());
}

/// After a rename (or a hard link) onto a name that an earlier store used, the stale journal
/// beside the new name hid the store's own journal (at the path it recorded): the refusal did
/// not name it, and `--discard-journal` then gave every commit up. Now the store's own journal
/// is found wherever the metadata says, and the stale one is set aside, not written over.
#[cfg(unix)]
#[test]
fn a_stale_journal_beside_a_renamed_or_linked_store_does_not_hide_its_own() {
    for link in [false, true] {
        let dir = tempfile::tempdir().expect("dir");
        // An earlier store at "y", closed cleanly: its journal stays beside the name.
        let y = dir.path().join("y.idemdb");
        {
            let earlier = builder().open(&y).expect("earlier y");
            complete(&earlier, "earlier");
        }
        fs::rename(&y, dir.path().join("y-moved-away.idemdb")).expect("move the earlier y away");
        let stale = fs::read(journal_of(&y)).expect("the stale journal");

        let x = dir.path().join("x.idemdb");
        drop(builder().open(&x).expect("create x"));
        let acked = crash_writer(&x, &names("x", 25));
        if link {
            fs::hard_link(&x, &y).expect("ln x y");
        } else {
            fs::rename(&x, &y).expect("mv x y");
        }
        let store = builder().open(&y).expect("x under the name y");
        assert_all(&store, &acked, if link { "through a hard link" } else { "after a rename" });
        assert!(store.get(&pay(), &key("earlier")).expect("get").is_none(), "no foreign record applied");
        let report = store.journal_recovery().expect("report").clone();
        assert_eq!(report.set_aside.len(), 1, "{report:?}");
        assert_eq!(report.set_aside[0].reason, SetAsideReason::NotThisStores);
        assert_eq!(fs::read(&report.set_aside[0].to).expect("set aside"), stale, "the stale journal, byte for byte");
        assert!(report.removed.is_some(), "x's own journal, applied, is removed: {report:?}");
    }
}

/// `--discard-journal` once rewrote whatever journal sat beside the store: another store's,
/// or the store's own with intact records in it. Now a discard sets the file aside, byte for
/// byte, and the records before the damage are applied.
#[test]
fn a_discard_sets_the_journal_aside_and_applies_what_is_intact() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("d.idemdb");
    drop(builder().open(&path).expect("create"));
    let acked = crash_writer(&path, &names("d", 20));
    // One flipped byte in record 11 (of 40): 30 intact records follow it.
    let journal = journal_of(&path);
    let mut bytes = fs::read(&journal).expect("journal");
    bytes[11 * 4096 + 40] ^= 0x55;
    fs::write(&journal, &bytes).expect("damage");

    let refused = builder().open(&path);
    let Err(OpenError::JournalDamaged { reason, .. }) = &refused else { panic!("refused as damaged: {refused:?}") };
    assert!(reason.contains("record 11") && reason.contains("29 intact record(s) follow it"), "{reason}");
    assert!(reason.contains("10 record(s) before it are intact"), "{reason}");
    assert_eq!(fs::read(&journal).expect("journal"), bytes, "a refusal changes nothing");

    let store = builder().discard_lost_journal(true).open(&path).expect("discard");
    let report = store.journal_recovery().expect("report").clone();
    assert!(report.discarded);
    assert_eq!(report.applied, 10);
    assert_eq!(report.given_up, 29);
    assert_eq!(report.set_aside.len(), 1, "{report:?}");
    assert_eq!(report.set_aside[0].reason, SetAsideReason::GivenUp);
    assert_eq!(fs::read(&report.set_aside[0].to).expect("set aside"), bytes, "the journal kept byte for byte");
    // Records 1..10: the first five keys reserved and completed.
    assert_all(&store, &acked[..5], "before the damage");
}

/// A discard with another store's journal beside it sets that journal aside untouched.
#[test]
fn a_discard_never_touches_another_stores_journal() {
    let dir = tempfile::tempdir().expect("dir");
    let (a, b) = (dir.path().join("a.idemdb"), dir.path().join("b.idemdb"));
    drop(builder().open(&a).expect("create a"));
    drop(builder().open(&b).expect("create b"));
    crash_writer(&a, &names("a", 3));
    let acked_b = crash_writer(&b, &names("b", 15));
    // a's journal is lost; b's sits beside a.
    fs::remove_file(journal_of(&a)).expect("a's journal lost");
    fs::rename(journal_of(&b), journal_of(&a)).expect("b's journal beside a");
    let theirs = fs::read(journal_of(&a)).expect("b's journal");
    let refused = builder().open(&a);
    assert!(matches!(refused, Err(OpenError::JournalForeign { .. })), "{refused:?}");
    let store = builder().discard_lost_journal(true).open(&a).expect("a, giving its own journal up");
    let report = store.journal_recovery().expect("report").clone();
    assert!(report.discarded);
    assert_eq!(report.set_aside.len(), 1);
    assert_eq!(report.set_aside[0].reason, SetAsideReason::NotThisStores);
    assert_eq!(fs::read(&report.set_aside[0].to).expect("kept"), theirs, "b's journal, untouched");
    assert!(store.get(&pay(), &key("b-0")).expect("get").is_none(), "none of b's records applied");
    drop(store);
    // Put b's journal back where it belongs: b recovers everything.
    fs::rename(&report.set_aside[0].to, journal_of(&b)).expect("back beside b");
    let store_b = builder().open(&b).expect("b");
    assert_all(&store_b, &acked_b, "b after a's discard");
}

/// A journal cut right after its last record was refused with only "restore or discard", and
/// the discard gave every record up. Now the refusal says what is intact and a discard applies
/// it; a cut that took only zeros loses nothing and is recovered without asking.
#[test]
fn a_journal_cut_short_keeps_what_is_intact() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("t.idemdb");
    drop(builder().open(&path).expect("create"));
    let acked = crash_writer(&path, &names("t", 10));
    let journal = journal_of(&path);
    let whole = fs::read(&journal).expect("journal");
    // 20 one-block records after the header block: the file cut right after the last.
    fs::write(&journal, &whole[..21 * 4096]).expect("cut after the last record");
    let refused = builder().open(&path);
    let Err(OpenError::JournalDamaged { reason, .. }) = &refused else { panic!("{refused:?}") };
    assert!(reason.contains("cut after record 20") && reason.contains("20 intact record(s)"), "{reason}");
    let store = builder().discard_lost_journal(true).open(&path).expect("discard");
    assert_all(&store, &acked, "the intact records of a cut journal");
    let report = store.journal_recovery().expect("report").clone();
    assert_eq!((report.applied, report.discarded), (20, true));
    drop(store);

    // Cut where only zeros were: nothing can be missing.
    let path = dir.path().join("z.idemdb");
    drop(builder().open(&path).expect("create"));
    let acked = crash_writer(&path, &names("z", 10));
    let journal = journal_of(&path);
    let whole = fs::read(&journal).expect("journal");
    fs::write(&journal, &whole[..40 * 4096]).expect("cut in the zeros");
    let store = builder().open(&path).expect("recovered without a discard");
    assert_all(&store, &acked, "a journal cut in its zeros");
    assert!(!store.journal_recovery().expect("report").discarded);
}

/// A store in a directory whose name is not UTF-8, renamed after a crash, was refused though
/// its journal was there: the recorded path was stored lossily.
#[cfg(target_os = "linux")]
#[test]
fn a_renamed_store_in_a_non_utf8_directory_finds_its_journal() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().expect("dir");
    let odd = dir.path().join(std::ffi::OsStr::from_bytes(b"caf\xe9"));
    fs::create_dir(&odd).expect("a directory named in Latin-1");
    let path = odd.join("s.idemdb");
    drop(builder().open(&path).expect("create"));
    let acked = crash_writer(&path, &names("n", 8));
    let renamed = odd.join("renamed.idemdb");
    fs::rename(&path, &renamed).expect("rename");
    let store = builder().open(&renamed).expect("found its journal");
    assert_all(&store, &acked, "in a non-UTF-8 directory");
}

/// A dangling symlink at the journal's path is reported with both paths, never an empty one.
#[cfg(unix)]
#[test]
fn a_dangling_symlink_journal_is_named() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("l.idemdb");
    drop(builder().open(&path).expect("create"));
    crash_writer(&path, &names("l", 2));
    let journal = journal_of(&path);
    fs::remove_file(&journal).expect("remove");
    std::os::unix::fs::symlink(dir.path().join("nowhere"), &journal).expect("dangling symlink");
    let before = files_in(dir.path());
    let refused = builder().open(&path).expect_err("refused");
    let shown = refused.to_string();
    assert!(shown.contains("l.idemdb-journal") && shown.contains("dangling symlink"), "{shown}");
    assert!(!shown.contains("of  "), "no empty path: {shown}");
    assert_eq!(files_in(dir.path()), before, "a refusal changes nothing");

    // Given up explicitly, the store opens: the link is set aside (not followed, not removed)
    // and a new journal is made. Without that, no open of this store ever succeeded.
    let store = builder().discard_lost_journal(true).open(&path).expect("opens with the journal given up");
    let report = store.journal_recovery().expect("report").clone();
    assert!(report.set_aside.iter().any(|aside| aside.reason == SetAsideReason::Shared && aside.from == journal));
    drop(store);
    assert!(fs::symlink_metadata(&journal).is_ok_and(|meta| meta.is_file()), "a real journal now");

    // A new store at a name whose journal is a dangling link: once refused after its file had
    // been created (a refusal that changed the directory); now made, with the link set aside.
    let fresh = dir.path().join("n.idemdb");
    std::os::unix::fs::symlink(dir.path().join("nowhere"), journal_of(&fresh)).expect("dangling symlink");
    let store = builder().open(&fresh).expect("a new store");
    complete(&store, "n-0");
    assert!(store.journal_recovery().expect("report").set_aside.iter().any(|aside| aside.from == journal_of(&fresh)));
}

fn digest(path: &Path) -> Option<blake3::Hash> {
    fs::read(path).ok().map(|bytes| blake3::hash(&bytes))
}

/// Runs only as a child process: writes a plain redb file (not a store) without a durable
/// commit at the end and aborts, so the file needs redb's repair — a backup's `.partial` copy
/// cut short looks like this.
#[test]
#[ignore = "run by a_refused_open_changes_nothing in a child process"]
fn foreign_child_writer() {
    let Some(path) = std::env::var_os("IDEMDB_FOREIGN_CHILD") else { return };
    const ROWS: idemdb::redb::TableDefinition<u64, &[u8]> = idemdb::redb::TableDefinition::new("rows");
    let db = idemdb::redb::Database::create(Path::new(&path)).expect("create");
    for round in 0..4u64 {
        let mut tx = db.begin_write().expect("write");
        if round == 3 {
            tx.set_durability(idemdb::redb::Durability::None).expect("durability");
        }
        {
            let mut table = tx.open_table(ROWS).expect("table");
            for i in 0..500u64 {
                table.insert(round * 1000 + i, [7u8; 1000].as_slice()).expect("insert");
            }
        }
        tx.commit().expect("commit");
    }
    std::process::abort();
}

/// A refused open once changed the file it refused (redb repaired a crashed file, or the
/// store was initialised, before the refusal): `stats` on a foreign `.partial` shrank it from
/// 71 MB to 24 KB. Every refusal the file and its journal can decide is now made first, on a
/// view that cannot write.
#[test]
fn a_refused_open_changes_nothing() {
    let dir = tempfile::tempdir().expect("dir");
    // A crashed store whose journal is gone.
    let path = dir.path().join("r.idemdb");
    drop(builder().open(&path).expect("create"));
    crash_writer(&path, &names("r", 30));
    fs::remove_file(journal_of(&path)).expect("the journal is lost");
    let before = (digest(&path), files_in(dir.path()));
    let refused = builder().open(&path);
    assert!(matches!(refused, Err(OpenError::JournalMissing { .. })), "{refused:?}");
    assert_eq!((digest(&path), files_in(dir.path())), before, "a journal refusal changed the store file");

    // A foreign redb file that needs redb's repair.
    let partial = dir.path().join("backup.idemdb.partial");
    let child = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "journal_owners::foreign_child_writer", "--ignored", "--nocapture", "--test-threads", "1"])
        .env("IDEMDB_FOREIGN_CHILD", &partial)
        .output()
        .expect("run the child");
    assert!(!child.status.success(), "the child aborts");
    assert!(
        matches!(idemdb::redb::ReadOnlyDatabase::open(&partial), Err(idemdb::redb::DatabaseError::RepairAborted)),
        "the file needs redb's repair (the case this test is about)"
    );
    let before = (digest(&partial), files_in(dir.path()));
    let refused = Store::open(&partial);
    assert!(matches!(refused, Err(OpenError::Foreign { .. })), "{refused:?}");
    assert_eq!((digest(&partial), files_in(dir.path())), before, "a foreign-file refusal changed the file");
}

/// A copy of the store's journal made while it ran, left beside the name the store was then
/// moved to, was taken for its journal: the records written after the copy were lost. The
/// journal at the recorded path, the one the store wrote, comes first.
#[test]
fn an_early_copy_of_the_journal_beside_the_new_name_does_not_win() {
    let dir = tempfile::tempdir().expect("dir");
    let a = dir.path().join("a.idemdb");
    let b = dir.path().join("b.idemdb");
    drop(builder().open(&a).expect("create"));
    let acked = crash_writer_copying(&a, &names("a", 7), Some((1, &journal_of(&a), &journal_of(&b))));
    fs::rename(&a, &b).expect("mv a b");
    let store = builder().open(&b).expect("b");
    assert_all(&store, &acked, "with an early copy of the journal beside the new name");
    let report = store.journal_recovery().expect("report");
    assert_eq!(
        report.read_from.as_deref(),
        Some(fs::canonicalize(dir.path()).expect("dir").join("a.idemdb-journal").as_path())
    );
}

/// A copy of a running store opened with the original's journal hard-linked beside it rewrote
/// the shared file in place, and the original lost every record in it. A journal file that is
/// another name's too is never written through this one.
#[cfg(unix)]
#[test]
fn a_journal_shared_with_another_name_is_never_rewritten() {
    let dir = tempfile::tempdir().expect("dir");
    let a = dir.path().join("a.idemdb");
    let d = dir.path().join("d.idemdb");
    drop(builder().open(&a).expect("create"));
    let acked = crash_writer_copying(&a, &names("a", 4), Some((3, &a, &d)));
    for link in [false, true] {
        let _ = fs::remove_file(journal_of(&d));
        if link {
            std::os::unix::fs::symlink(journal_of(&a), journal_of(&d)).expect("ln -s");
        } else {
            fs::hard_link(journal_of(&a), journal_of(&d)).expect("ln");
        }
        let before = fs::read(journal_of(&a)).expect("a's journal");
        if let Ok(copy) = builder().open(&d) {
            let report = copy.journal_recovery().expect("report").clone();
            assert!(report.set_aside.iter().any(|aside| aside.reason == SetAsideReason::Shared), "{report:?}");
        }
        assert_eq!(fs::read(journal_of(&a)).expect("a's journal"), before, "a's journal, untouched (link: {link})");
    }
    let original = builder().open(&a).expect("a");
    assert_all(&original, &acked, "the original after its copy was opened");
}

/// A refused open (another store holds the journal at this name) left a new file behind.
#[cfg(unix)]
#[test]
fn a_journal_held_elsewhere_is_refused_before_a_new_store_is_made() {
    let dir = tempfile::tempdir().expect("dir");
    let a = dir.path().join("a.idemdb");
    let held = builder().open(&a).expect("a, held");
    let d = dir.path().join("d.idemdb");
    std::os::unix::fs::symlink(journal_of(&a), journal_of(&d)).expect("ln -s");
    let refused = builder().open(&d);
    assert!(matches!(refused, Err(OpenError::AlreadyOpen)), "{refused:?}");
    assert!(!d.exists(), "no new store file");
    drop(held);
}

/// The store moved with its journal, and the journal hard-linked back at its old name: the
/// open read the journal at the recorded name and then opened the same file beside the store a
/// second time, met its own lock, and refused the store as "already open" for ever (7
/// acknowledged completions out of reach). The same file under both names is read once, set
/// aside (it has another name), and the store opens with everything.
#[cfg(unix)]
#[test]
fn a_journal_hard_linked_back_at_the_old_name_is_read_once() {
    let dir = tempfile::tempdir().expect("dir");
    let (a, b) = (dir.path().join("a.idemdb"), dir.path().join("b.idemdb"));
    drop(builder().open(&a).expect("create"));
    let ops = [(2, FileOp::Move, a.as_path(), b.as_path())];
    let journal_ops = [(2, FileOp::Move, journal_of(&a), journal_of(&b))];
    let all: Vec<(usize, FileOp, &Path, &Path)> = ops
        .into_iter()
        .chain(journal_ops.iter().map(|(n, op, from, to)| (*n, *op, from.as_path(), to.as_path())))
        .collect();
    let acked = crash_writer_with(&a, &names("a", 7), &all);
    fs::hard_link(journal_of(&b), journal_of(&a)).expect("ln b-journal a-journal");
    let store = builder().open(&b).expect("the moved store opens");
    assert_all(&store, &acked, "with its journal under both names");
    let report = store.journal_recovery().expect("report").clone();
    assert!(report.set_aside.iter().any(|aside| aside.reason == SetAsideReason::Shared), "{report:?}");
    drop(store);
    let store = builder().open(&b).expect("and again");
    assert_all(&store, &acked, "reopened");
}

/// The store moved with its journal while it ran, and a copy of both was put back at the old
/// name; the writer went on and crashed. The moved store read the journal at the recorded
/// (old) name first — the copy, which lacks the later records — and then removed it, so the
/// copy lost its journal too. The journal with more records wins, and a journal beside
/// another store file is left to that store.
#[test]
fn a_copy_put_back_at_the_old_name_neither_wins_nor_loses_its_journal() {
    let dir = tempfile::tempdir().expect("dir");
    let (a, c) = (dir.path().join("a.idemdb"), dir.path().join("c.idemdb"));
    let (a_journal, c_journal) = (journal_of(&a), journal_of(&c));
    drop(builder().open(&a).expect("create"));
    let ops = [
        (3, FileOp::Move, a.as_path(), c.as_path()),
        (3, FileOp::Move, a_journal.as_path(), c_journal.as_path()),
        (3, FileOp::Copy, c.as_path(), a.as_path()),
        (3, FileOp::Copy, c_journal.as_path(), a_journal.as_path()),
    ];
    let acked = crash_writer_with(&a, &names("a", 8), &ops);
    let moved = builder().open(&c).expect("the moved store opens");
    assert_all(&moved, &acked, "the moved store, whose journal went with it");
    drop(moved);
    assert!(a_journal.exists(), "the copy's journal is left to it");
    let copy = builder().open(&a).expect("the copy opens");
    assert_all(&copy, &acked[..3], "the copy, with what was acknowledged before it was made");
}

/// A copy of the journal was left beside the store's next name while the store went on
/// writing; the store was then moved onto that name (its journal stayed at the old one) and a
/// new store took the old name, setting the real journal aside. The open read the stale copy
/// beside it (4 of 6 records) and never looked at the set-aside file. Every place the store's
/// own journal can be is weighed: the one with the most records wins.
#[test]
fn a_stale_copy_beside_the_store_loses_to_its_set_aside_journal() {
    let dir = tempfile::tempdir().expect("dir");
    let (a, c) = (dir.path().join("a.idemdb"), dir.path().join("c.idemdb"));
    let (a_journal, c_journal) = (journal_of(&a), journal_of(&c));
    drop(builder().open(&a).expect("create"));
    let acked = crash_writer_copying(&a, &names("a", 6), Some((4, a_journal.as_path(), c_journal.as_path())));
    fs::rename(&a, &c).expect("mv a c (the store file only)");
    {
        // A new store at the old name: a-journal, not its own, is set aside.
        let new = builder().open(&a).expect("a new store at a");
        let report = new.journal_recovery().expect("report").clone();
        assert_eq!(report.set_aside.len(), 1, "{report:?}");
    }
    let store = builder().open(&c).expect("the moved store opens");
    assert_all(&store, &acked, "with its set-aside journal, not the stale copy beside it");
    let report = store.journal_recovery().expect("report").clone();
    assert!(report.read_from.as_ref().is_some_and(|from| from.to_string_lossy().contains(".set-aside-")), "{report:?}");
    drop(store);
    let store = builder().open(&c).expect("and again");
    assert_all(&store, &acked, "reopened");
}

/// The store moved with its journal while it ran (`mv a d`, `mv a-journal d-journal`), a copy of
/// the journal was left beside another name (`cp d-journal b-journal`), the store went on and
/// crashed, and the store file alone was then moved onto that name (`mv d b`). The open read
/// the copy beside it and lost what the store wrote after the copy was made. The store records
/// which file its journal is; a copy is refused, naming the file to put back.
#[test]
fn a_copy_of_the_journal_is_refused_when_the_original_is_elsewhere() {
    let dir = tempfile::tempdir().expect("dir");
    let (a, b, d) = (dir.path().join("a.idemdb"), dir.path().join("b.idemdb"), dir.path().join("d.idemdb"));
    let (a_journal, b_journal, d_journal) = (journal_of(&a), journal_of(&b), journal_of(&d));
    drop(builder().open(&a).expect("create"));
    let ops = [
        (3, FileOp::Move, a.as_path(), d.as_path()),
        (3, FileOp::Move, a_journal.as_path(), d_journal.as_path()),
        (3, FileOp::Copy, d_journal.as_path(), b_journal.as_path()),
    ];
    let acked = crash_writer_with(&a, &names("a", 7), &ops);
    fs::rename(&d, &b).expect("mv d b (the store file only)");
    let before = (digest(&b), digest(&b_journal), digest(&d_journal));
    let Err(refused) = builder().open(&b) else { panic!("a copy of the journal is refused") };
    assert!(matches!(refused, OpenError::JournalForeign { .. }), "{refused:?}");
    let message = refused.to_string();
    assert!(message.contains("is a copy") && message.contains("inode"), "{message}");
    assert_eq!((digest(&b), digest(&b_journal), digest(&d_journal)), before, "the refusal changed nothing");
    fs::rename(&d_journal, &b_journal).expect("put the journal the store wrote beside it");
    let store = builder().open(&b).expect("with its own journal back");
    assert_all(&store, &acked, "after the journal was put back");
}
