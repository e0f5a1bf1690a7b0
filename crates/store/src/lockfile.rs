//! The holder lock every runtime takes on a store file: `<store>.lock` beside the store file's
//! resolved path (symlinks resolved, so every name of the file finds the same lock).
//!
//! The npm package's Node file store has no `flock`, so the lock that every runtime sees is this
//! file: a native open (Rust, the CLI, the Kotlin/Swift/Python bindings) takes it before redb
//! opens the store (and keeps redb's own locks too), and the Node file store takes the same file
//! the same way (`bindings/npm/src/node-lock.ts`). The protocol (`docs/design.md`, "Locking"):
//!
//! * **Content**, written whole before the file appears (written under a temporary name, then
//!   hard-linked to the lock's name, which fails if it exists, like `O_EXCL`):
//!
//!   ```text
//!   <pid>\n
//!   idemdb-holder 1 runtime=<native|node> access=<write|read> started=<start time|-> token=<hex>\n
//!   ```
//!
//!   `started` is the holder's start time where the platform tells it (Linux: field 22 of
//!   `/proc/<pid>/stat`, clock ticks since boot), so a pid reused by another process is seen;
//!   `token` makes each holder's content unique, so a holder removes the file only while it is
//!   still its own. A file whose first line is a pid and nothing else (an older Node package)
//!   is read as a holder of unknown runtime.
//! * **Live or gone.** The holder is gone when its process does not exist, is a zombie, or has
//!   another start time than the one recorded. Otherwise it is live — a reused pid whose start
//!   time is unknown is refused (the safe side). A file without a pid (being written by a
//!   runtime whose file system has no hard links) is live while it is younger than
//!   [`YOUNG`].
//! * **Refusal.** A live holder refuses every other open: writes and reads (`verify`, `stats`,
//!   `inspect`) alike. The only sharing is between read-only native opens (redb's shared lock
//!   already lets them share): a read-only open that finds a live read-only native holder opens
//!   without taking the file.
//! * **Take-over** of a gone holder: under a short-lived guard file (`<store>.lock.takeover`,
//!   created exclusively, holding its taker's content in the lock's format), the lock is read
//!   again and removed only if it still holds the content judged gone; then the lock is created
//!   exclusively like any new one. Two takers of one stale lock never both win: the second
//!   finds the first's new lock. A guard is waited for while its taker lives (a take-over lasts
//!   microseconds); a guard whose taker is gone (killed inside its take-over: the same rule as
//!   a holder's) or that is older than [`YOUNG`] is moved away — and removed only if it still
//!   holds what was judged — so a killed taker never blocks the next open.
//! * **Release**: on drop, the file is removed if it still holds this holder's content.

// The browser build has no files to lock: the parts below go unused there.
#![cfg_attr(all(target_arch = "wasm32", target_os = "unknown"), allow(dead_code))]

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::OpenError;

/// How long a lock file without a readable holder, or a take-over guard, counts as live.
pub(crate) const YOUNG: Duration = Duration::from_secs(5);

/// What an open does with the store file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Writes it (and recovers it): the only holder.
    Write,
    /// Reads it without writing: shares with other native readers; a read-only file system or
    /// directory, where no lock file can be made, only refuses a live holder.
    Read,
}

impl Access {
    fn name(self) -> &'static str {
        match self {
            Access::Write => "write",
            Access::Read => "read",
        }
    }
}

/// The holder lock of a store file, held until dropped (the file is then removed if it is
/// still this holder's). A read that shares with another reader, or could not create the file,
/// holds nothing.
#[derive(Debug)]
#[must_use = "the lock is released when dropped"]
pub(crate) struct HolderLock {
    owned: Option<Owned>,
}

#[derive(Debug)]
struct Owned {
    path: PathBuf,
    content: String,
}

impl HolderLock {
    /// The lock file, when this holder created it.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn path(&self) -> Option<&Path> {
        self.owned.as_ref().map(|owned| owned.path.as_path())
    }
}

impl Drop for HolderLock {
    fn drop(&mut self) {
        if let Some(owned) = self.owned.take() {
            // Removed only while it is still ours: a holder judged gone by mistake (it was
            // stopped longer than a take-over allows) never removes its successor's lock.
            if fs::read(&owned.path).is_ok_and(|bytes| bytes == owned.content.as_bytes()) {
                let _ = fs::remove_file(&owned.path);
            }
        }
    }
}

/// The store file's path resolved as every runtime resolves it: the file's real path when it
/// exists; otherwise its directory's real path joined with its name; otherwise `store` as given.
pub(crate) fn lock_target(store: &Path) -> PathBuf {
    fs::canonicalize(store).unwrap_or_else(|_| {
        let parent = match store.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        match (fs::canonicalize(parent), store.file_name()) {
            (Ok(dir), Some(name)) => dir.join(name),
            _ => store.to_path_buf(),
        }
    })
}

/// The lock file of the store at `store`: `<resolved path>.lock`. The path is resolved as
/// every runtime resolves it: the file's real path when it exists; otherwise its directory's
/// real path joined with its name; otherwise `store` as given.
pub(crate) fn lock_path(store: &Path) -> PathBuf {
    let mut name = lock_target(store).into_os_string();
    name.push(".lock");
    PathBuf::from(name)
}

/// Takes the holder lock of the store file at `store` (which need not exist or be open: a new
/// store's lock is taken before the file is made, and a command that replaces a file takes the
/// lock of the file it replaces). Call it before opening the store, and keep the returned lock
/// until the store is closed.
///
/// # Errors
/// [`OpenError::AlreadyOpen`] when a live native process (this one included) holds the lock,
/// as its own storage locks would say; [`OpenError::HeldElsewhere`] when another runtime's
/// process (the npm package's Node file store) or a holder of unknown runtime holds it, naming
/// the process and the lock file; [`OpenError::Io`] when the lock file cannot be read or made
/// (a read does without it on a read-only file system or directory).
pub(crate) fn acquire(store: &Path, access: Access) -> Result<HolderLock, OpenError> {
    #[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
    {
        // No file system: stores there live on backends, never on a path.
        let _ = (store, access);
        Ok(HolderLock { owned: None })
    }
    #[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
    {
        native::acquire(store, access)
    }
}

/// One holder as read from a lock file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Holder {
    pub(crate) pid: u32,
    pub(crate) runtime: String,
    pub(crate) access: String,
    pub(crate) started: Option<u64>,
}

/// Reads a lock file's content: `None` when the first line is not a pid.
pub(crate) fn parse(content: &str) -> Option<Holder> {
    let mut lines = content.lines();
    let pid: u32 = lines.next()?.trim().parse().ok().filter(|pid| *pid > 0)?;
    let mut holder = Holder { pid, runtime: "unknown".into(), access: "write".into(), started: None };
    if let Some(line) = lines.next().filter(|line| line.starts_with("idemdb-holder ")) {
        for field in line.split_ascii_whitespace() {
            if let Some(value) = field.strip_prefix("runtime=") {
                holder.runtime = value.to_string();
            } else if let Some(value) = field.strip_prefix("access=") {
                holder.access = value.to_string();
            } else if let Some(value) = field.strip_prefix("started=") {
                holder.started = value.parse().ok();
            }
        }
    }
    Some(holder)
}

/// The lock file content of a holder (see the module's documentation).
pub(crate) fn content(pid: u32, runtime: &str, access: Access, started: Option<u64>, token: &str) -> String {
    let started = started.map_or_else(|| "-".to_string(), |ticks| ticks.to_string());
    format!("{pid}\nidemdb-holder 1 runtime={runtime} access={} started={started} token={token}\n", access.name())
}

#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
mod native {
    use std::fs;
    use std::io::Write;
    use std::path::{Path, PathBuf};
    use std::time::SystemTime;

    use super::{Access, Holder, HolderLock, Owned, YOUNG, content, lock_path, parse};
    use crate::OpenError;

    /// Rounds of create, judge, take over before giving up (each take-over clears one stale
    /// holder; a new holder in between ends the loop with a refusal).
    const ROUNDS: u32 = 16;

    pub(super) fn acquire(store: &Path, access: Access) -> Result<HolderLock, OpenError> {
        let lock = lock_path(store);
        let pid = std::process::id();
        let token = token();
        let mine = content(pid, "native", access, start_time(pid), &token);
        let io = |action: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| OpenError::Io { action, path, source }
        };
        for _ in 0..ROUNDS {
            match create_exclusive(&lock, &mine, &token) {
                Ok(()) => return Ok(HolderLock { owned: Some(Owned { path: lock, content: mine }) }),
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(error) if access == Access::Read && cannot_write(&error) => {
                    // A read on a read-only directory or file system: no lock file can be made
                    // there, and no writer can make one either; refuse a live holder only.
                    return match read_holder(&lock).map_err(io("read lock file", &lock))? {
                        Found::Missing => Ok(HolderLock { owned: None }),
                        found => match judge(store, &lock, access, &found) {
                            Verdict::Gone => Ok(HolderLock { owned: None }),
                            Verdict::Share => Ok(HolderLock { owned: None }),
                            Verdict::Refuse(refusal) => Err(refusal),
                        },
                    };
                }
                Err(source) => return Err(OpenError::Io { action: "create lock file", path: lock, source }),
            }
            let found = read_holder(&lock).map_err(io("read lock file", &lock))?;
            match (&found, judge(store, &lock, access, &found)) {
                (Found::Missing, _) => continue,
                (_, Verdict::Share) => return Ok(HolderLock { owned: None }),
                (_, Verdict::Refuse(refusal)) => return Err(refusal),
                (Found::Content(stale), Verdict::Gone) => {
                    take_over(&lock, stale, &mine).map_err(io("take over lock file", &lock))?
                }
            }
        }
        Err(OpenError::AlreadyOpen)
    }

    /// What a lock file held when read.
    enum Found {
        Missing,
        /// Its bytes and how old the file is.
        Content(Stale),
    }

    pub(super) struct Stale {
        bytes: Vec<u8>,
        age: Option<std::time::Duration>,
    }

    enum Verdict {
        Gone,
        Share,
        Refuse(OpenError),
    }

    fn read_holder(lock: &Path) -> std::io::Result<Found> {
        let bytes = match fs::read(lock) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Found::Missing),
            Err(error) => return Err(error),
        };
        let age = fs::metadata(lock)
            .ok()
            .and_then(|meta| meta.modified().ok())
            .and_then(|at| SystemTime::now().duration_since(at).ok());
        Ok(Found::Content(Stale { bytes, age }))
    }

    fn judge(store: &Path, lock: &Path, access: Access, found: &Found) -> Verdict {
        let Found::Content(stale) = found else { return Verdict::Gone };
        let Some(holder) = std::str::from_utf8(&stale.bytes).ok().and_then(parse) else {
            // No pid yet (a runtime without hard links writes after creating) or garbage: live
            // while young, then gone.
            return if stale.age.is_some_and(|age| age >= YOUNG) {
                Verdict::Gone
            } else {
                Verdict::Refuse(held(
                    store,
                    lock,
                    &Holder { pid: 0, runtime: "unknown".into(), access: "write".into(), started: None },
                ))
            };
        };
        if !alive(&holder) {
            return Verdict::Gone;
        }
        if holder.runtime == "native" {
            if access == Access::Read && holder.access == "read" {
                return Verdict::Share;
            }
            // A native holder also holds the storage engine's locks: the same refusal they give.
            return Verdict::Refuse(OpenError::AlreadyOpen);
        }
        Verdict::Refuse(held(store, lock, &holder))
    }

    fn held(store: &Path, lock: &Path, holder: &Holder) -> OpenError {
        OpenError::HeldElsewhere {
            store: store.to_path_buf(),
            lock: lock.to_path_buf(),
            pid: holder.pid,
            runtime: holder.runtime.clone(),
        }
    }

    /// Creates `lock` holding `content`, failing with `AlreadyExists` when it exists: written
    /// under a temporary name, then hard-linked to `lock`, so the lock never appears empty.
    /// Without hard links, created exclusively and written.
    fn create_exclusive(lock: &Path, content: &str, token: &str) -> std::io::Result<()> {
        let temp = sibling(lock, &format!(".tmp-{token}"));
        {
            let mut file = fs::OpenOptions::new().write(true).create_new(true).open(&temp)?;
            file.write_all(content.as_bytes())?;
        }
        let linked = fs::hard_link(&temp, lock);
        let _ = fs::remove_file(&temp);
        match linked {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Err(error),
            Err(_) => {
                let mut file = fs::OpenOptions::new().write(true).create_new(true).open(lock)?;
                file.write_all(content.as_bytes())
            }
        }
    }

    /// Removes the lock whose holder is gone, if it still holds `stale`, under the take-over
    /// guard (`mine`, this opener's content, is written into it). A guard whose taker lives is
    /// waited for (a take-over lasts microseconds); one whose taker is gone, or older than
    /// [`YOUNG`], was left by a process killed inside its take-over and is moved away.
    pub(super) fn take_over(lock: &Path, stale: &Stale, mine: &str) -> std::io::Result<()> {
        let guard = sibling(lock, ".takeover");
        // Bounds the wait even where a guard's age cannot be read (a modification time in the
        // future after the clock was set back): a guard waited on this long is stale.
        let waiting = std::time::Instant::now();
        loop {
            match fs::OpenOptions::new().write(true).create_new(true).open(&guard) {
                Ok(mut file) => {
                    // Written whole or not at all as far as a reader can tell: a guard without
                    // a readable taker counts as live until it is old.
                    let _ = file.write_all(mine.as_bytes());
                    break;
                }
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(error) => return Err(error),
            }
            match read_holder(&guard)? {
                Found::Missing => {}
                Found::Content(left) => {
                    let taker = std::str::from_utf8(&left.bytes).ok().and_then(parse);
                    let old = left.age.is_some_and(|age| age >= YOUNG) || waiting.elapsed() >= YOUNG;
                    if old || taker.is_some_and(|taker| !alive(&taker)) {
                        remove_if_unchanged(&guard, &left.bytes)?;
                    } else {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                }
            }
        }
        let removed = match fs::read(lock) {
            Ok(bytes) if bytes == stale.bytes => fs::remove_file(lock)
                .or_else(|error| if error.kind() == std::io::ErrorKind::NotFound { Ok(()) } else { Err(error) }),
            _ => Ok(()),
        };
        let _ = fs::remove_file(&guard);
        removed
    }

    /// Removes `path` if it still holds `bytes`: it is first renamed to a name of its own (one
    /// atomic step, so two removers never both take it), then compared; a file that changed in
    /// between (a live taker's new guard) is put back under its name.
    fn remove_if_unchanged(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        let aside = sibling(path, &format!(".gone-{}", token()));
        match fs::rename(path, &aside) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(error) => return Err(error),
        }
        if fs::read(&aside).is_ok_and(|moved| moved != bytes) {
            // Another taker's guard: back under its name unless a third took the name meanwhile.
            let _ = fs::hard_link(&aside, path);
        }
        let _ = fs::remove_file(&aside);
        Ok(())
    }

    pub(super) fn sibling(lock: &Path, suffix: &str) -> PathBuf {
        let mut name = lock.as_os_str().to_os_string();
        name.push(suffix);
        PathBuf::from(name)
    }

    fn cannot_write(error: &std::io::Error) -> bool {
        matches!(error.kind(), std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem)
    }

    fn token() -> String {
        let seed = format!("{}:{:?}:{:?}", std::process::id(), std::time::Instant::now(), SystemTime::now());
        blake3::hash(seed.as_bytes()).to_hex()[..16].to_string()
    }

    /// Whether the holder's process still runs (see the module's documentation).
    pub(super) fn alive(holder: &Holder) -> bool {
        #[cfg(target_os = "linux")]
        if let Some(alive) = proc_alive(holder) {
            return alive;
        }
        #[cfg(unix)]
        {
            // `kill -0`: exit 0 when the process exists (or exists and is not ours to signal).
            match std::process::Command::new("kill")
                .args(["-0", &holder.pid.to_string()])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .output()
            {
                Ok(out) if out.status.success() => true,
                Ok(out) => String::from_utf8_lossy(&out.stderr).contains("ermitted"),
                Err(_) => true,
            }
        }
        #[cfg(not(unix))]
        {
            // No way to tell here: refused, the safe side.
            true
        }
    }

    /// Linux: `/proc/<pid>/stat` (`None` when `/proc` is not there).
    #[cfg(target_os = "linux")]
    fn proc_alive(holder: &Holder) -> Option<bool> {
        let path = format!("/proc/{}/stat", holder.pid);
        match fs::read_to_string(&path) {
            Ok(stat) => {
                let Some((state, started)) = parse_stat(&stat) else { return Some(true) };
                if matches!(state, 'Z' | 'X' | 'x') {
                    return Some(false);
                }
                Some(holder.started.is_none_or(|recorded| Some(recorded) == started))
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                Path::new("/proc/self/stat").exists().then_some(false)
            }
            Err(_) => Some(true),
        }
    }

    /// The state letter and the start time (field 22) of a `/proc/<pid>/stat` line.
    #[cfg(target_os = "linux")]
    fn parse_stat(stat: &str) -> Option<(char, Option<u64>)> {
        // The command name (field 2) is in parentheses and may hold spaces and parentheses.
        let rest = &stat[stat.rfind(')')? + 1..];
        let mut fields = rest.split_ascii_whitespace();
        let state = fields.next()?.chars().next()?;
        // Fields 4..=22 follow the state: the start time is the 19th of them.
        let started = fields.nth(18).and_then(|field| field.parse().ok());
        Some((state, started))
    }

    /// The start time of process `pid` as the lock file records it (`None` off Linux).
    pub(super) fn start_time(pid: u32) -> Option<u64> {
        #[cfg(target_os = "linux")]
        {
            fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .as_deref()
                .and_then(parse_stat)
                .and_then(|(_, started)| started)
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = pid;
            None
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use std::process::{Child, Command};

    use super::*;
    use crate::{OpenError, Store};

    /// A live process that is not this one: `sleep`, killed and reaped on drop.
    struct Sleeper(Child);

    impl Sleeper {
        fn start() -> Sleeper {
            Sleeper(Command::new("sleep").arg("60").spawn().expect("sleep"))
        }
        fn pid(&self) -> u32 {
            self.0.id()
        }
    }

    impl Drop for Sleeper {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// The lock file the npm package's Node file store writes for process `pid`.
    fn node_lock(pid: u32) -> String {
        content(pid, "node", Access::Write, native::start_time(pid), "0123456789abcdef")
    }

    fn dead_pid() -> u32 {
        let mut child = Command::new("true").spawn().expect("true");
        let pid = child.id();
        child.wait().expect("wait");
        pid
    }

    #[test]
    fn a_store_open_natively_refuses_a_node_holder_and_releases_on_close() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("s.idemdb");
        let store = Store::open(&path).expect("open");
        let lock = lock_path(&path);
        let held = fs::read_to_string(&lock).expect("a native open holds the lock file");
        let holder = parse(&held).expect("parses");
        assert_eq!(
            (holder.pid, holder.runtime.as_str(), holder.access.as_str()),
            (std::process::id(), "native", "write")
        );
        // What the Node file store does: create the lock exclusively, else judge its holder.
        let node = fs::OpenOptions::new().write(true).create_new(true).open(&lock);
        assert_eq!(node.map(drop).map_err(|e| e.kind()), Err(std::io::ErrorKind::AlreadyExists));
        assert!(native::alive(&holder), "and finds it live");
        drop(store);
        assert!(!lock.exists(), "a clean close removes the lock file");
    }

    #[test]
    fn a_live_node_holder_refuses_every_native_open_and_changes_nothing() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("s.idemdb");
        drop(Store::open(&path).expect("create"));
        let before = fs::read(&path).expect("bytes");
        let node = Sleeper::start();
        let lock = lock_path(&path);
        fs::write(&lock, node_lock(node.pid())).expect("node lock");
        for (what, opened) in
            [("write", Store::open(&path).map(drop)), ("read", Store::builder().open_read_only(&path).map(drop))]
        {
            match opened {
                Err(OpenError::HeldElsewhere { pid, ref runtime, lock: ref named, .. }) => {
                    assert_eq!((pid, runtime.as_str(), named), (node.pid(), "node", &lock), "{what}");
                    let text = opened.unwrap_err().to_string();
                    assert!(text.contains(&node.pid().to_string()) && text.contains("s.idemdb.lock"), "{text}");
                }
                other => panic!("{what}: {other:?}"),
            }
        }
        assert_eq!(fs::read(&path).expect("bytes"), before, "the refused opens changed nothing");
        assert_eq!(fs::read_to_string(&lock).expect("lock"), node_lock(node.pid()), "the holder's lock is kept");
        // An old package's lock (the pid alone) is a holder too.
        fs::write(&lock, node.pid().to_string()).expect("old lock");
        assert!(matches!(Store::open(&path), Err(OpenError::HeldElsewhere { runtime, .. }) if runtime == "unknown"));
    }

    #[test]
    fn a_lock_whose_process_is_gone_is_taken_over() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("s.idemdb");
        let lock = lock_path(&path);
        fs::write(&lock, node_lock(dead_pid())).expect("stale lock");
        let store = Store::open(&path).expect("a dead holder's lock is taken over (the store is created)");
        assert_eq!(parse(&fs::read_to_string(&lock).expect("lock")).expect("parses").pid, std::process::id());
        drop(store);
        assert!(!lock.exists());
        // A live pid with another start time is a reused pid: gone.
        let other = Sleeper::start();
        let reused = content(other.pid(), "node", Access::Write, Some(1), "feedfacefeedface");
        fs::write(&lock, &reused).expect("reused pid");
        drop(Store::open(&path).expect("a reused pid is not the holder"));
        // A zombie (killed, not yet reaped) holds nothing.
        let mut zombie = Command::new("sleep").arg("60").spawn().expect("sleep");
        fs::write(&lock, node_lock(zombie.id())).expect("zombie lock");
        zombie.kill().expect("kill");
        std::thread::sleep(std::time::Duration::from_millis(100));
        drop(Store::open(&path).expect("a zombie is gone"));
        zombie.wait().expect("reap");
    }

    #[test]
    fn a_taker_killed_inside_its_take_over_does_not_block_the_next_open() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("s.idemdb");
        drop(Store::open(&path).expect("create"));
        let lock = lock_path(&path);
        let guard = native::sibling(&lock, ".takeover");
        // A guard in this format and one of an older Node package (a pid alone), each left by a
        // taker that died before removing it, beside the lock of a holder that died too.
        for left in [node_lock(dead_pid()), format!("{}\n", dead_pid())] {
            fs::write(&lock, node_lock(dead_pid())).expect("stale lock");
            fs::write(&guard, &left).expect("guard of a dead taker");
            let store = Store::open(&path).expect("a dead taker's guard is moved away, not waited on");
            assert!(!guard.exists(), "the guard is gone");
            drop(store);
            assert!(!lock.exists(), "released");
        }
        let mut names: Vec<_> = fs::read_dir(dir.path()).expect("dir").map(|e| e.expect("entry").file_name()).collect();
        names.sort();
        assert_eq!(names, ["s.idemdb", "s.idemdb-journal"], "nothing left beside the store and its journal");
    }

    #[test]
    fn a_live_taker_is_waited_for_not_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("s.idemdb");
        drop(Store::open(&path).expect("create"));
        let lock = lock_path(&path);
        let guard = native::sibling(&lock, ".takeover");
        let taker = Sleeper::start();
        fs::write(&lock, node_lock(dead_pid())).expect("stale lock");
        fs::write(&guard, node_lock(taker.pid())).expect("a live taker's guard");
        let finishing = {
            let guard = guard.clone();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(200));
                fs::remove_file(&guard).expect("the taker ends its take-over");
            })
        };
        let store = Store::open(&path).expect("the open waits for the live taker, then takes the stale lock");
        finishing.join().expect("join");
        assert_eq!(parse(&fs::read_to_string(&lock).expect("lock")).expect("parses").pid, std::process::id());
        drop(store);
    }

    #[test]
    fn native_readers_share_and_a_writer_is_refused_while_they_read() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("s.idemdb");
        drop(Store::open(&path).expect("create"));
        let first = Store::builder().open_read_only(&path).expect("read");
        let lock = lock_path(&path);
        assert_eq!(parse(&fs::read_to_string(&lock).expect("lock")).expect("parses").access, "read");
        let second = Store::builder().open_read_only(&path).expect("readers share");
        assert!(matches!(Store::open(&path), Err(OpenError::AlreadyOpen)));
        drop(second);
        drop(first);
        assert!(!lock.exists());
    }

    #[test]
    fn two_takers_of_one_stale_lock_never_both_win() {
        let dir = tempfile::tempdir().expect("dir");
        let store = dir.path().join("s.idemdb");
        let lock = lock_path(&store);
        for round in 0..50 {
            fs::write(&lock, node_lock(dead_pid())).expect("stale");
            let barrier = std::sync::Arc::new(std::sync::Barrier::new(4));
            let takers: Vec<_> = (0..4)
                .map(|_| {
                    let (store, barrier) = (store.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        barrier.wait();
                        acquire(&store, Access::Write)
                    })
                })
                .collect();
            let results: Vec<_> = takers.into_iter().map(|t| t.join().expect("join")).collect();
            let winners = results.iter().filter(|r| r.as_ref().is_ok_and(|lock| lock.path().is_some())).count();
            assert_eq!(winners, 1, "round {round}: {results:?}");
            assert!(results.iter().all(|r| matches!(r, Ok(_) | Err(OpenError::AlreadyOpen))), "{results:?}");
            drop(results);
            assert!(!lock.exists(), "the winner released it");
        }
    }

    #[test]
    fn a_symlinked_name_locks_the_real_file() {
        let dir = tempfile::tempdir().expect("dir");
        let real = dir.path().join("real.idemdb");
        let link = dir.path().join("link.idemdb");
        drop(Store::open(&real).expect("create"));
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        assert_eq!(lock_path(&link), lock_path(&real));
        let _held = Store::open(&link).expect("through the link");
        assert!(fs::canonicalize(dir.path()).expect("dir").join("real.idemdb.lock").exists());
    }

    /// What the npm package's Node file store (a backend, without the journal) meets after a
    /// native holder was killed: a store whose journal may hold acknowledged commits. It is
    /// refused, untouched, until a native open replays the journal.
    #[test]
    fn a_store_left_with_journal_records_is_refused_to_an_open_without_the_journal() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("s.idemdb");
        let store = Store::open(&path).expect("open");
        let scope = idemdb_core::Scope::new("t", "op").expect("scope");
        let key = idemdb_core::IdempotencyKey::new("k1").expect("key");
        store.create_intent(&scope, &key, b"{}", &idemdb_core::Canonicalizer::new()).expect("intent");
        // The file as a kill -9 leaves it: the journal holds the intent, the file says so.
        let killed = dir.path().join("killed.idemdb");
        fs::copy(&path, &killed).expect("copy");
        drop(store);
        let file = fs::OpenOptions::new().read(true).write(true).open(&killed).expect("file");
        let backend = redb::backends::FileBackend::new(file).expect("backend");
        let refused = Store::builder().open_backend(backend);
        assert!(matches!(refused, Err(OpenError::JournalPending { .. })), "{refused:?}");
        let text = refused.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(text.contains("idemdb recover"), "{text}");
        // The refusal lasts until a native open has replayed the journal: a second try is
        // refused the same way.
        let file = fs::OpenOptions::new().read(true).write(true).open(&killed).expect("file");
        let again = Store::builder().open_backend(redb::backends::FileBackend::new(file).expect("backend"));
        assert!(matches!(again, Err(OpenError::JournalPending { .. })), "still refused: {again:?}");
        // A store closed cleanly opens without the journal.
        let file = fs::OpenOptions::new().read(true).write(true).open(&path).expect("file");
        let clean = Store::builder().open_backend(redb::backends::FileBackend::new(file).expect("backend"));
        assert_eq!(clean.expect("clean").all_intents().expect("intents").len(), 1);
    }

    #[test]
    fn content_round_trips_and_old_pid_only_files_parse() {
        let text = content(42, "node", Access::Read, Some(7), "ab");
        assert_eq!(
            parse(&text),
            Some(Holder { pid: 42, runtime: "node".into(), access: "read".into(), started: Some(7) })
        );
        assert_eq!(parse("42").map(|h| h.runtime), Some("unknown".into()));
        assert_eq!(parse(""), None);
        assert_eq!(parse("x\n"), None);
    }
}
