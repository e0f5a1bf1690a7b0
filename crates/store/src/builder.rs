//! Opening and creating stores.

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use redb::{ReadableDatabase, StorageBackend};

use idemdb_core::{DEFAULT_AUDIT_RETENTION, InvalidPolicy, Policies, Policy};

use crate::db::Db;
use crate::durability::Durability;
use crate::engine::{Config, Engine};
use crate::journal::commit::JournalFile;
use crate::journal::files::{journal_path, refuse_held_journal, refuse_odd_journal, resolve};
use crate::journal::recovery::{JournalSetup, JournalSource, check_read_only};
use crate::lockfile;
use crate::meta::{Initialiser, read_meta};
use crate::store::Store;
use crate::{Clock, OpenError};

/// Whether file stores journal their commits unless [`StoreBuilder::journal`] says otherwise.
pub const DEFAULT_JOURNAL: bool = true;

/// Configures and opens a [`Store`].
///
/// ```
/// use std::time::Duration;
/// use idemdb::{Durability, ManualClock, Policy, Store};
/// let store = Store::builder()
///     .policy("create_payment", Policy::default().with_lease_ttl(Duration::from_secs(30)))
///     .clock(ManualClock::new(1_700_000_000_000))
///     .durability(Durability::Immediate)
///     .in_memory()?;
/// # Ok::<(), idemdb::OpenError>(())
/// ```
#[must_use]
pub struct StoreBuilder {
    policies: Policies,
    clock: Option<Arc<dyn Clock>>,
    durability: Durability,
    audit: bool,
    audit_retention: Duration,
    secret_seed: Option<[u8; 32]>,
    cache_bytes: Option<usize>,
    check_on_open: bool,
    trust_clock_at_open: bool,
    journal: bool,
    journal_bytes: u64,
    discard_lost_journal: bool,
    apps: crate::app_table::AppTables,
}

impl Default for StoreBuilder {
    fn default() -> Self {
        StoreBuilder {
            policies: Policies::default(),
            clock: None,
            durability: Durability::Immediate,
            audit: true,
            audit_retention: DEFAULT_AUDIT_RETENTION,
            secret_seed: None,
            cache_bytes: None,
            check_on_open: true,
            trust_clock_at_open: false,
            journal: DEFAULT_JOURNAL,
            journal_bytes: crate::journal::DEFAULT_JOURNAL_BYTES,
            discard_lost_journal: false,
            apps: crate::app_table::AppTables::default(),
        }
    }
}

impl std::fmt::Debug for StoreBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreBuilder")
            .field("policies", &self.policies)
            .field("durability", &self.durability)
            .field("audit", &self.audit)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// A builder for policies, clock, durability and backend.
    pub fn builder() -> StoreBuilder {
        StoreBuilder::new()
    }

    /// Opens (or creates) the store file at `path` with default settings.
    ///
    /// # Errors
    /// See [`StoreBuilder::open`].
    pub fn open(path: impl AsRef<Path>) -> Result<Store, OpenError> {
        StoreBuilder::new().open(path)
    }

    /// Opens an empty in-memory store with default settings.
    ///
    /// # Errors
    /// See [`StoreBuilder::in_memory`].
    pub fn in_memory() -> Result<Store, OpenError> {
        StoreBuilder::new().in_memory()
    }
}

impl StoreBuilder {
    /// A builder with the defaults: [`Policy::default`] for every operation, the system clock,
    /// [`Durability::Immediate`], audit trail on with 90 days' retention.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the policy of one operation.
    pub fn policy(mut self, operation: impl Into<String>, policy: Policy) -> Self {
        self.policies.set(operation, policy);
        self
    }

    /// Sets the policy of operations without their own.
    pub fn default_policy(mut self, policy: Policy) -> Self {
        self.policies.set_default(policy);
        self
    }

    /// Sets the clock (required on `wasm32-unknown-unknown`).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Sets the durability of commits.
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// Turns the audit trail table on or off (`tracing` events are emitted either way).
    pub fn audit(mut self, enabled: bool) -> Self {
        self.audit = enabled;
        self
    }

    /// Sets how long audit events are kept before `purge_expired` removes them.
    pub fn audit_retention(mut self, retention: Duration) -> Self {
        self.audit_retention = retention;
        self
    }

    /// Supplies 32 random bytes for the store's secret (the audit hash key) when a new store
    /// is created. Needed on platforms without an operating-system random source
    /// (`wasm32-unknown-unknown`: pass bytes from `crypto.getRandomValues`). Ignored when an
    /// existing store is opened.
    pub fn secret_seed(mut self, seed: [u8; 32]) -> Self {
        self.secret_seed = Some(seed);
        self
    }

    /// Runs redb's full integrity check (every page's checksum) when a file store is opened.
    /// On by default: redb trusts the contents of pages it has not checksummed, and a damaged
    /// page can otherwise surface as a panic inside redb on the first write. A damaged store is
    /// repaired by redb where its checksums allow, or refused with a typed error. Turn it off
    /// only for large stores on storage you trust, to save reading the whole file at open.
    pub fn check_on_open(mut self, enabled: bool) -> Self {
        self.check_on_open = enabled;
        self
    }

    /// Counts the time the wall clock says passed since the store was last used as passed, at
    /// once, for expiry and forgetting. Off by default: the store then waits until the wall
    /// clock has kept that gap for ten minutes of monotonic time (over any number of opens),
    /// so a clock set ahead by mistake never makes a known key unknown (`docs/design.md`,
    /// "Time"). Turn it on only when the wall clock is known to be right — a server kept in
    /// time by NTP, an operator who checked it — for example to purge a store that has been
    /// closed for a while. Gaps that appear after the open are never trusted this way.
    pub fn trust_clock_at_open(mut self, trust: bool) -> Self {
        self.trust_clock_at_open = trust;
        self
    }

    /// Turns the write-ahead journal of file stores on or off ([`DEFAULT_JOURNAL`] by default).
    /// With it, a durable commit is one write and one `fdatasync` of a preallocated journal
    /// file beside the store (`<path>-journal`), and redb writes its pages only at checkpoints;
    /// without it, every durable commit is a redb commit that flushes its pages. Either way a
    /// returned commit survives a crash. A store whose journal holds records is replayed when
    /// it is opened for writing, whatever this setting (`docs/design.md`, "Journal"). Only
    /// [`Durability::Immediate`] stores journal; stores on a backend journal only through
    /// [`StoreBuilder::open_backend_with_journal`].
    pub fn journal(mut self, enabled: bool) -> Self {
        self.journal = enabled;
        self
    }

    /// Sets the journal file's size (preallocated when the journal is created; 8 MiB by
    /// default, at least 8 KiB). A checkpoint happens when half of it is used.
    pub fn journal_bytes(mut self, bytes: u64) -> Self {
        self.journal_bytes = bytes;
        self
    }

    /// Opens a store whose journal should hold acknowledged commits but is missing, damaged or
    /// not the store's own ([`OpenError::JournalMissing`], [`OpenError::JournalDamaged`],
    /// [`OpenError::JournalForeign`]) anyway, **giving up the commits that journal held**: the
    /// store opens at its last checkpoint and starts a new journal. Off by default; an
    /// operator's decision after the journal could not be put back (`idemdb recover
    /// --discard-journal`). The refusal it overrides is logged at `error` level.
    pub fn discard_lost_journal(mut self, discard: bool) -> Self {
        self.discard_lost_journal = discard;
        self
    }

    /// Registers one of the application's tables, with its key and value types, for
    /// [`Txn::table`](crate::Txn::table): its writes are then journaled with the store's own,
    /// and the open replays them after a crash (which needs the types: register every
    /// journaled table at every open). An open that does not register a table whose writes the
    /// journal still holds is refused with [`OpenError::JournalNeedsTable`] (naming it), and
    /// nothing is lost; a clean close leaves nothing to replay, so other tools (the `idemdb`
    /// CLI) then open the store without it. Names starting with `idemdb_` belong to the store
    /// and are ignored.
    pub fn journaled_table<K: redb::Key + 'static, V: redb::Value + 'static>(
        mut self,
        table: redb::TableDefinition<K, V>,
    ) -> Self {
        self.apps.register(table);
        self
    }

    /// Sets redb's page cache size in bytes (redb's default is 1 GiB).
    pub fn cache_bytes(mut self, bytes: usize) -> Self {
        self.cache_bytes = Some(bytes);
        self
    }

    fn redb_builder(&self) -> redb::Builder {
        let mut builder = redb::Builder::new();
        if let Some(bytes) = self.cache_bytes {
            builder.set_cache_size(bytes);
        }
        builder
    }

    /// Opens the store file at `path`, creating it if it does not exist.
    ///
    /// A new file is created under a temporary name beside `path`, initialised, flushed and
    /// then moved into place, so a crash during creation never leaves an unopenable file at
    /// `path` (at worst a `*.tmp-*` file beside it, which may be deleted).
    ///
    /// The store's lock is taken on the file that was opened; if another process replaced the
    /// file at `path` meanwhile (a rebuild renamed its copy over it), the open starts again on
    /// the new file, so a store never writes to a file that is no longer at `path`.
    ///
    /// Every runtime's holder lock (`<path>.lock`, beside the resolved path) is taken first,
    /// before the file is created, read or written (`docs/design.md`, "Locking"): a store a
    /// Node process holds through the npm package is refused, and a Node process is refused
    /// while this store is open. It is released when the last handle is dropped, after the file
    /// is closed.
    ///
    /// # Errors
    /// [`OpenError`]: I/O, a path that is not a regular file, a file that is not an idemdb
    /// store, a store of a newer format, a store already open elsewhere
    /// ([`OpenError::AlreadyOpen`] for a native holder, [`OpenError::HeldElsewhere`] for
    /// another runtime's), an invalid policy.
    pub fn open(self, path: impl AsRef<Path>) -> Result<Store, OpenError> {
        let path = path.as_ref();
        self.config()?;
        let holder = lockfile::acquire(path, lockfile::Access::Write)?;
        let engine = while_busy(|| self.open_held(path))?;
        Ok(Store::from_engine(engine.holding(holder)))
    }

    /// [`StoreBuilder::open`] once this process holds the store's holder lock.
    fn open_held(&self, path: &Path) -> Result<Engine, OpenError> {
        let config = self.config()?;
        let clock = self.resolve_clock()?;
        // A journal path that is a directory, a FIFO or a device is refused before redb opens
        // the store for writing (and may repair it), so the refusal changes nothing.
        if let Ok(resolved) = resolve(path) {
            refuse_odd_journal(&journal_path(&resolved))?;
        }
        // A journal at this name that another store holds (through a link, or a store moved
        // away while open) is refused before the file is created or written.
        refuse_held_journal(&journal_path(&crate::lockfile::lock_target(path)))?;
        let db = open_identified(
            path,
            true,
            |file| {
                if file.metadata().map_err(io_error("inspect", path))?.len() == 0 {
                    return Ok(None);
                }
                self.check_read_only(path)?;
                let mut builder = self.redb_builder();
                builder.set_check_integrity_on_open(self.check_on_open);
                let backend = redb::backends::FileBackend::new(file)?;
                Ok(Some(builder.create_with_backend(backend)?))
            },
            |path| self.create_file(path),
        )?;
        let journal = self.journal_file(path)?;
        let init = self.check(false)?;
        // The open ends with a durable commit (the journal's new id and generation), and
        // redb 4.6 can panic on the first commit to a damaged page instead of reporting it:
        // that only means the file is damaged.
        let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            Engine::from_parts(Db::Writable(db), Some(path.to_path_buf()), config, clock, init, journal)
        }));
        opened.unwrap_or_else(|_| {
            Err(OpenError::NotAStore {
                reason: "the file is damaged: the storage layer failed while opening it".into(),
            })
        })
    }

    /// The journal of the store file at `path` (which exists now): found beside the file's
    /// resolved path, so every name of the file (a symlink, a relative path) finds the same
    /// journal. Recovery (`journal/recovery.rs`) opens it, or the one the store's metadata
    /// recorded, as the store's journal state requires.
    fn journal_file(&self, path: &Path) -> Result<Option<JournalSetup>, OpenError> {
        let store = resolve(path)?;
        let identity = crate::journal::files::identity(&store);
        Ok(Some(JournalSetup {
            source: JournalSource::File { store, identity },
            capacity: self.journal_bytes,
            active: self.journal && self.durability == Durability::Immediate,
            discard_lost: self.discard_lost_journal,
            apps: self.apps.clone(),
        }))
    }

    /// Opens an existing store file read-only: lookups, listings, statistics and purge
    /// previews work, every write fails with [`Error::ReadOnly`](crate::Error::ReadOnly), and
    /// not a byte of the file changes (the clock is not persisted either). The file may be
    /// read-only. Other read-only opens may share the file; an open for writing may not.
    ///
    /// The holder lock (`<path>.lock`) is taken as by [`StoreBuilder::open`], so a store
    /// another runtime's process writes is refused; read-only opens of native processes share
    /// it, and on a read-only directory no lock file is made (a live holder is still refused).
    ///
    /// # Errors
    /// As [`StoreBuilder::open`], and [`OpenError::NeedsRecovery`] for a file that was not
    /// closed cleanly (a crash or `kill -9`): reading it needs redb's recovery, which writes.
    /// A missing or empty file is not created: it is an I/O error (not found) or
    /// [`OpenError::NotAStore`].
    pub fn open_read_only(self, path: impl AsRef<Path>) -> Result<Store, OpenError> {
        let path = path.as_ref();
        let config = self.config()?;
        let clock = self.resolve_clock()?;
        let holder = lockfile::acquire(path, lockfile::Access::Read)?;
        // A read-only handle reads pages without verifying their checksums, and redb can panic
        // on a damaged page: that only means the file is damaged.
        let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let db = open_identified(
                path,
                false,
                |file| {
                    if file.metadata().map_err(io_error("inspect", path))?.len() == 0 {
                        return Err(OpenError::NotAStore { reason: "the file is empty".into() });
                    }
                    let backend = redb::backends::FileBackend::new(file)?;
                    match self.redb_builder().open_read_only_with_backend(backend) {
                        Ok(db) => Ok(Some(db)),
                        Err(redb::DatabaseError::RepairAborted) => Err(OpenError::NeedsRecovery),
                        Err(other) => Err(other.into()),
                    }
                },
                |path| {
                    Err(OpenError::Io {
                        action: "open",
                        path: path.to_path_buf(),
                        source: std::io::ErrorKind::NotFound.into(),
                    })
                },
            )?;
            check_read_only(&db, path)?;
            Engine::from_parts(Db::ReadOnly(db), Some(path.to_path_buf()), config, clock, self.check(false)?, None)
        }));
        opened
            .unwrap_or_else(|_| {
                Err(OpenError::NotAStore {
                    reason: "the file is damaged: the storage layer failed while reading it".into(),
                })
            })
            .map(|engine| Store::from_engine(engine.holding(holder)))
    }

    /// Opens a store that lives in memory only (gone when dropped).
    ///
    /// # Errors
    /// [`OpenError`] for an invalid policy or a platform without randomness or clock.
    pub fn in_memory(self) -> Result<Store, OpenError> {
        self.open_backend(redb::backends::InMemoryBackend::new())
    }

    /// Opens (or initialises, when empty) a store on a custom redb storage backend: an OPFS
    /// handle, a host callback, a fault-injecting backend in tests.
    ///
    /// # Errors
    /// As [`StoreBuilder::open`].
    pub fn open_backend(self, backend: impl StorageBackend) -> Result<Store, OpenError> {
        let config = self.config()?;
        let clock = self.resolve_clock()?;
        discard_unfinished_creation(&backend)?;
        let db = self.create_on_backend(backend)?;
        refuse_pending_journal(&db)?;
        let init = self.check(true)?;
        Engine::from_parts(Db::Writable(db), None, config, clock, init, None).map(Store::from_engine)
    }

    /// [`StoreBuilder::open_backend`] with the write-ahead journal on a second backend (the
    /// journal file of [`StoreBuilder::journal`]): for native custom storage and for
    /// fault-injection tests, which put a failing disk under both. The journal is used when it
    /// is turned on and the durability is [`Durability::Immediate`]; otherwise its records
    /// are replayed and it is emptied.
    ///
    /// # Errors
    /// As [`StoreBuilder::open`], and [`OpenError::Journal`] for a backend that holds another
    /// store's journal.
    pub fn open_backend_with_journal(
        self,
        backend: impl StorageBackend,
        journal: impl StorageBackend,
    ) -> Result<Store, OpenError> {
        let config = self.config()?;
        let clock = self.resolve_clock()?;
        discard_unfinished_creation(&backend)?;
        let db = self.create_on_backend(backend)?;
        let init = self.check(true)?;
        let setup = JournalSetup {
            source: JournalSource::Backend(JournalFile(std::sync::Arc::new(journal))),
            capacity: self.journal_bytes,
            active: self.journal && self.durability == Durability::Immediate,
            discard_lost: self.discard_lost_journal,
            apps: self.apps.clone(),
        };
        Engine::from_parts(Db::Writable(db), None, config, clock, init, Some(setup)).map(Store::from_engine)
    }

    /// redb's `create_with_backend`, with a panic of the storage layer on a damaged image (redb
    /// 4.6 can reach `unreachable!` on a page a lying disk left half written) reported as
    /// [`OpenError::NotAStore`] instead of unwinding into the caller.
    fn create_on_backend(&self, backend: impl StorageBackend) -> Result<redb::Database, OpenError> {
        let builder = self.redb_builder();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || builder.create_with_backend(backend))) {
            Ok(created) => Ok(created?),
            Err(_) => Err(OpenError::NotAStore {
                reason: "the file is damaged: the storage layer failed while reading it".into(),
            }),
        }
    }

    /// Decides every refusal the file and its journal can decide before the file is opened
    /// for writing, so a refused open leaves every byte untouched (`preflight.rs`): a foreign
    /// or newer-format file, and the journal's refusals (missing, damaged, cut, foreign, busy,
    /// an unregistered application table). A file that needs redb's crash recovery is repaired
    /// in memory, on a copy-on-write view, to be read.
    fn check_read_only(&self, path: &Path) -> Result<(), OpenError> {
        // A read-only handle reads pages without verifying their checksums, and redb 4.6 can
        // panic on a damaged page instead of reporting it (already while opening, when the
        // damage is in the table tree). A panic here only means the file is damaged: the
        // read-write open that follows runs the integrity check, which verifies every checksum
        // and repairs or refuses the file with a typed error.
        let opened =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.redb_builder().open_read_only(path)));
        match opened {
            Ok(Ok(database)) => self.check_view(&database, path),
            Ok(Err(redb::DatabaseError::RepairAborted)) => self.check_repaired_in_memory(path),
            Ok(Err(other)) => Err(other.into()),
            Err(_damaged) => Ok(()),
        }
    }

    /// [`StoreBuilder::check_read_only`] on a file that needs redb's repair: the repair runs on
    /// a copy-on-write view whose writes stay in memory.
    fn check_repaired_in_memory(&self, path: &Path) -> Result<(), OpenError> {
        // An unreadable file is reported by the open itself.
        let Ok(view) = crate::preflight::CowFile::open(path) else { return Ok(()) };
        let opened =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.redb_builder().create_with_backend(view)));
        match opened {
            Ok(Ok(database)) => self.check_view(&database, path),
            Ok(Err(other)) => Err(other.into()),
            Err(_damaged) => Ok(()),
        }
    }

    /// The store's own checks on a view of the file that cannot write.
    fn check_view(&self, database: &impl ReadableDatabase, path: &Path) -> Result<(), OpenError> {
        let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let read = database.begin_read()?;
            match read_meta(&read)? {
                None => Err(OpenError::Foreign { tables: "none".into() }),
                Some(_) => crate::journal::recovery::preflight(&read, path, self.discard_lost_journal, &self.apps),
            }
        }));
        checked.unwrap_or(Ok(()))
    }

    fn config(&self) -> Result<Config, OpenError> {
        self.policies
            .validate()
            .map_err(|InvalidPolicy { operation, source }| OpenError::Policy { operation, source })?;
        Ok(Config {
            policies: self.policies.clone(),
            durability: self.durability,
            audit: self.audit,
            audit_retention: self.audit_retention,
            trust_clock_at_open: self.trust_clock_at_open,
            apps: self.apps.clone(),
        })
    }

    fn resolve_clock(&self) -> Result<Arc<dyn Clock>, OpenError> {
        if let Some(clock) = &self.clock {
            return Ok(Arc::clone(clock));
        }
        #[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
        {
            Ok(Arc::new(crate::SystemClock))
        }
        #[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
        {
            Err(OpenError::MissingPlatform("a wall clock"))
        }
    }

    fn check(&self, allow_init: bool) -> Result<Initialiser, OpenError> {
        let created_at = self.resolve_clock()?.now().as_millis();
        Ok(Initialiser { allow_init, seed: self.secret_seed, created_at })
    }

    fn create_file(&self, path: &Path) -> Result<(), OpenError> {
        let io = |action: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| OpenError::Io { action, path, source }
        };
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "store".into());
        let nonce = blake3::hash(format!("{}:{:?}", std::process::id(), std::time::Instant::now()).as_bytes()).to_hex();
        let temp = path.with_file_name(format!(".{name}.tmp-{}", &nonce[..12]));
        {
            let db = Db::Writable(self.redb_builder().create(&temp)?);
            self.check(true)?.run(&db)?;
            drop(db);
        }
        fs::File::open(&temp).and_then(|file| file.sync_all()).map_err(io("sync", &temp))?;
        // Prefer a no-clobber move (hard link, then unlink): if another process created the
        // store meanwhile, its file wins and ours is discarded.
        match fs::hard_link(&temp, path) {
            Ok(()) => {
                let _ = fs::remove_file(&temp);
            }
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => replace_empty(path, &temp)?,
            // No hard links on this file system: a plain rename, which could replace a store
            // another process created in the same instant.
            Err(_) => fs::rename(&temp, path).map_err(io("rename", &temp))?,
        }
        sync_parent(path).map_err(io("sync directory of", path))?;
        Ok(())
    }
}

/// Refuses, before anything is written, a store whose metadata says its journal may hold
/// commits the file does not (a native process was killed while it held the store): an open
/// without the journal (a backend: the WebAssembly bindings, the npm package's Node file
/// store) would not see them, and its writes would be mixed with them at the next native open.
fn refuse_pending_journal(db: &redb::Database) -> Result<(), OpenError> {
    use crate::journal::meta::{History, JournalMeta, MetaFault};
    let read = db.begin_read()?;
    let meta = match read.open_table(crate::tables::META) {
        Ok(meta) => meta,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
        Err(other) => return Err(other.into()),
    };
    let journal = JournalMeta::read(&meta).map_err(|fault| match fault {
        MetaFault::Storage(storage) => OpenError::from(storage),
        MetaFault::Malformed(what) => OpenError::CorruptMeta(format!("{what} is malformed")),
    })?;
    match journal.history() {
        History::None => Ok(()),
        History::Pending => Err(OpenError::JournalPending { path: journal.path.unwrap_or_default() }),
    }
}

/// How long an open that holds the store's holder lock waits for the file's or journal's own
/// lock to come free.
#[cfg(not(target_arch = "wasm32"))]
const BUSY_WAIT: Duration = Duration::from_millis(500);

/// Runs `attempt` again while it finds the store file or its journal locked
/// ([`OpenError::AlreadyOpen`]), for up to [`BUSY_WAIT`]. The caller holds the holder lock, so
/// no other idemdb open holds the file: such a lock is held for a moment by a child process
/// that another thread is starting (`fork` copies every descriptor, with its `flock`, until the
/// child's `exec` closes it) — and the open's own read-only check, which locks and closes the
/// file just before, makes that moment likely wherever a process spawns others. A lock held
/// for longer (a program that opens the file with redb directly) is refused as before.
#[cfg(not(target_arch = "wasm32"))]
fn while_busy<T>(mut attempt: impl FnMut() -> Result<T, OpenError>) -> Result<T, OpenError> {
    let deadline = std::time::Instant::now() + BUSY_WAIT;
    loop {
        match attempt() {
            Err(OpenError::AlreadyOpen) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(2));
            }
            other => return other,
        }
    }
}

#[cfg(target_arch = "wasm32")]
fn while_busy<T>(mut attempt: impl FnMut() -> Result<T, OpenError>) -> Result<T, OpenError> {
    attempt()
}

/// Opens the file at `path` and returns what `open` made of it, once the file it opened is
/// still the file at `path`: `open` opens the store on the file (taking redb's lock), and the
/// file at `path` is then compared with it (device and inode). A file replaced in between (a rebuild renamed its copy
/// over it after this open had opened the old one) is closed and the new one opened instead:
/// every process that replaces a store file holds the old file's lock while it does, so once
/// the lock is held and the file is still at `path`, it stays there. `open` returns `None`
/// for an empty file; `create` then makes the store, and the open starts again.
fn open_identified<T>(
    path: &Path,
    write: bool,
    mut open: impl FnMut(fs::File) -> Result<Option<T>, OpenError>,
    mut create: impl FnMut(&Path) -> Result<(), OpenError>,
) -> Result<T, OpenError> {
    const ATTEMPTS: u32 = 64;
    for _ in 0..ATTEMPTS {
        let meta = match fs::metadata(path) {
            Ok(meta) => meta,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                create(path)?;
                continue;
            }
            Err(source) => return Err(OpenError::Io { action: "inspect", path: path.to_path_buf(), source }),
        };
        // Checked before opening: opening a FIFO would wait for a writer.
        regular_file(path, &meta)?;
        let file = match fs::OpenOptions::new().read(true).write(write).open(path) {
            Ok(file) => file,
            // Replaced by a rename between the two calls: look again.
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => return Err(OpenError::Io { action: "open", path: path.to_path_buf(), source }),
        };
        let opened_meta = file.metadata().map_err(io_error("inspect", path))?;
        regular_file(path, &opened_meta)?;
        let identity = FileIdentity::of(&opened_meta);
        let Some(opened) = open(file)? else {
            create(path)?;
            continue;
        };
        match fs::metadata(path) {
            Ok(now) if FileIdentity::of(&now) == identity => return Ok(opened),
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(OpenError::Io { action: "inspect", path: path.to_path_buf(), source }),
        }
        // The file was replaced after it was opened: close it and open the new one.
        drop(opened);
    }
    Err(OpenError::Replaced { path: path.to_path_buf(), attempts: ATTEMPTS })
}

/// Which file a path names: device and inode where the platform has them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileIdentity(u64, u64);

impl FileIdentity {
    #[cfg(unix)]
    fn of(meta: &fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        FileIdentity(meta.dev(), meta.ino())
    }

    // Elsewhere an open file cannot be renamed over, so the file cannot change under an open.
    #[cfg(not(unix))]
    fn of(_meta: &fs::Metadata) -> Self {
        FileIdentity(0, 0)
    }
}

/// Refuses anything but a regular file, naming what it is.
fn regular_file(path: &Path, meta: &fs::Metadata) -> Result<(), OpenError> {
    OpenError::not_a_regular_file(path, meta).map_or(Ok(()), Err)
}

/// Moves a newly created store `temp` over the empty file at `path`, holding a lock on the
/// empty file while it checks that it is still the file at `path` and renames, so two
/// processes creating the store at once never replace each other's. Anything else at `path`
/// (a store another process created first, a FIFO) is left alone, and `temp` is removed.
fn replace_empty(path: &Path, temp: &Path) -> Result<(), OpenError> {
    let discard = || {
        let _ = fs::remove_file(temp);
        Ok(())
    };
    let Ok(meta) = fs::metadata(path) else { return discard() };
    if !meta.is_file() || meta.len() != 0 {
        return discard();
    }
    let Ok(empty) = fs::File::open(path) else { return discard() };
    empty.lock().map_err(io_error("lock", path))?;
    let still_there = match (empty.metadata(), fs::metadata(path)) {
        (Ok(locked), Ok(now)) => FileIdentity::of(&locked) == FileIdentity::of(&now) && now.len() == 0,
        _ => false,
    };
    if !still_there {
        return discard();
    }
    fs::rename(temp, path).map_err(io_error("rename", temp))?;
    // The lock is held until the rename is done (on wasm32 `File` has no `Drop`: nothing to release).
    #[cfg_attr(target_arch = "wasm32", allow(clippy::drop_non_drop))]
    drop(empty);
    Ok(())
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> OpenError {
    let path = path.to_path_buf();
    move |source| OpenError::Io { action, path, source }
}

/// Length of redb's magic number, which starts every redb database.
const REDB_MAGIC_LEN: usize = 9;

/// Empties a backend whose redb creation never finished, so that creation starts again.
///
/// redb creates a database by sizing the storage, writing its header *without* the magic
/// number, syncing, and only then writing the magic number. A crash or an I/O error before the
/// magic number is durable leaves an image that redb refuses for ever ("magic number mismatch"),
/// although nothing was ever committed to it. (`StoreBuilder::open` avoids this for files by
/// creating under a temporary name; a backend has no rename.) Such an image is recognised
/// strictly: no magic number (its bytes are zero) and nothing but zeros after the first sector,
/// where the header lives. Any other content is left untouched, and redb refuses it as before.
fn discard_unfinished_creation(backend: &impl StorageBackend) -> Result<(), OpenError> {
    let io = |error: std::io::Error| OpenError::from(redb::StorageError::Io(error));
    let len = backend.len().map_err(io)?;
    if len == 0 {
        return Ok(());
    }
    let head_len = len.min(REDB_MAGIC_LEN as u64) as usize;
    let mut head = [0u8; REDB_MAGIC_LEN];
    backend.read(0, &mut head[..head_len]).map_err(io)?;
    if head != [0u8; REDB_MAGIC_LEN] {
        return Ok(());
    }
    let mut chunk = vec![0u8; 64 * 1024];
    let mut offset = 512u64.min(len);
    while offset < len {
        let take = (len - offset).min(chunk.len() as u64) as usize;
        backend.read(offset, &mut chunk[..take]).map_err(io)?;
        if chunk[..take].iter().any(|byte| *byte != 0) {
            return Ok(());
        }
        offset += take as u64;
    }
    backend.set_len(0).map_err(io)?;
    backend.sync_data().map_err(io)?;
    Ok(())
}

#[cfg(unix)]
pub(crate) fn sync_parent(path: &Path) -> std::io::Result<()> {
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    fs::File::open(parent)?.sync_all()
}

#[cfg(not(unix))]
pub(crate) fn sync_parent(_path: &Path) -> std::io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {

    use redb::StorageBackend;

    use crate::{OpenError, Store};

    use crate::test_support::Shared;

    /// Regression (found by the crash sweep of `crates/reliability`): a crash or a failed write
    /// while redb created the database on a backend left the storage sized, with redb's header
    /// written but not its magic number. redb refused that image for ever ("magic number
    /// mismatch"), so a store whose creation was interrupted never opened again.
    #[test]
    fn a_backend_whose_creation_was_interrupted_opens_as_a_new_store() {
        let image = Shared::default();
        image.set_len(1 << 20).unwrap();
        // The header redb writes before its magic number: zeros where the magic goes.
        image.write(9, &[1, 2, 3, 4]).unwrap();
        let store = Store::builder().secret_seed([1; 32]).open_backend(image.clone()).expect("opens as a new store");
        drop(store);
        assert!(Store::builder().open_backend(image).is_ok(), "and opens again");
    }

    /// An open that locked a file which was then replaced at the path (a rebuild renamed its
    /// copy over it) closes it and opens the file now at the path.
    #[cfg(unix)]
    #[test]
    fn an_open_whose_file_was_replaced_meanwhile_opens_the_new_file() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("store.idemdb");
        let copy = dir.path().join("store.idemdb.rebuild");
        std::fs::write(&path, b"old").expect("old");
        std::fs::write(&copy, b"new").expect("new");
        let new_inode = std::fs::metadata(&copy).expect("copy").ino();
        let mut opened = Vec::new();
        let inode = super::open_identified(
            &path,
            false,
            |file| {
                let inode = file.metadata().expect("stat").ino();
                if opened.is_empty() {
                    // Replaced after this open opened the old file, before it was checked.
                    std::fs::rename(&copy, &path).expect("rename");
                }
                opened.push(inode);
                Ok(Some(inode))
            },
            |_| panic!("nothing to create"),
        )
        .expect("open");
        assert_eq!(inode, new_inode, "the open ends on the file now at the path");
        assert_eq!(opened.len(), 2, "the first file was given up: {opened:?}");
        assert_ne!(opened[0], new_inode);
    }

    #[cfg(unix)]
    #[test]
    fn paths_that_are_not_regular_files_are_refused_untouched() {
        let dir = tempfile::tempdir().expect("dir");
        let fifo = dir.path().join("pipe.idemdb");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo").success());
        for result in [
            Store::open(&fifo).map(drop),
            Store::builder().open_read_only(&fifo).map(drop),
            Store::open(dir.path()).map(drop),
        ] {
            assert!(matches!(result, Err(OpenError::NotAFile { .. })), "{result:?}");
        }
        use std::os::unix::fs::FileTypeExt;
        assert!(std::fs::symlink_metadata(&fifo).expect("fifo").file_type().is_fifo());
    }

    #[test]
    fn a_backend_with_other_content_is_refused_and_left_untouched() {
        for (offset, bytes) in [(0u64, &b"not a store"[..]), (4096, &b"data after the header"[..])] {
            let image = Shared::default();
            image.set_len(1 << 16).unwrap();
            image.write(offset, bytes).unwrap();
            let before = {
                let mut all = vec![0u8; 1 << 16];
                image.read(0, &mut all).unwrap();
                all
            };
            let refused = Store::builder().secret_seed([1; 32]).open_backend(image.clone());
            assert!(matches!(refused, Err(OpenError::NotAStore { .. })), "{refused:?}");
            let mut after = vec![0u8; 1 << 16];
            image.read(0, &mut after).unwrap();
            assert_eq!(image.len().unwrap(), 1 << 16);
            assert!(before == after, "the refused image was changed");
        }
    }
}
