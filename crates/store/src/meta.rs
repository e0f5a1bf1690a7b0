//! The metadata table: what an open learns from it (the store's secret, clock state and fence
//! floor) or writes into it when a store is created.

use redb::{Database, TableHandle};

use crate::OpenError;
use crate::clock::ClockState;
use crate::db::Db;
use crate::tables::{
    AUDIT, EXPIRY, MAGIC, META, META_CLOCK, META_CLOCK_PENDING, META_FENCE_FLOOR, META_FORMAT, META_MAGIC, META_SECRET,
    RECORDS, STORE_FORMAT,
};

/// What an open learns from (or writes into) the metadata table.
pub(crate) struct Initialiser {
    pub(crate) allow_init: bool,
    pub(crate) seed: Option<[u8; 32]>,
    /// The wall clock when the store is created: its first retention time, persisted at once,
    /// so that a reopen never finds a store without one (and takes the wall clock then).
    pub(crate) created_at: u64,
}

/// Metadata of an open store.
pub(crate) struct Meta {
    pub(crate) secret: [u8; 32],
    pub(crate) clock: ClockState,
    pub(crate) fence_floor: u64,
}

impl Initialiser {
    pub(crate) fn run(&self, db: &Db) -> Result<Meta, OpenError> {
        match read_meta(&db.begin_read()?)? {
            Some(meta) => Ok(meta),
            None if self.allow_init => match db {
                Db::Writable(db) => self.initialise(db),
                Db::ReadOnly(_) => Err(OpenError::Foreign { tables: "none".into() }),
            },
            None => Err(OpenError::Foreign { tables: "none".into() }),
        }
    }

    fn initialise(&self, db: &Database) -> Result<Meta, OpenError> {
        let secret = match self.seed {
            Some(seed) => blake3::derive_key("idemdb 2026-11-30 store secret from seed", &seed),
            None => os_secret()?,
        };
        let mut tx = db.begin_write()?;
        tx.set_durability(redb::Durability::Immediate)?;
        {
            let mut meta = tx.open_table(META)?;
            meta.insert(META_MAGIC, MAGIC)?;
            meta.insert(META_FORMAT, STORE_FORMAT.to_be_bytes().as_slice())?;
            meta.insert(META_SECRET, secret.as_slice())?;
            meta.insert(META_CLOCK, self.created_at.to_be_bytes().as_slice())?;
            tx.open_table(RECORDS)?;
            tx.open_table(EXPIRY)?;
            tx.open_table(AUDIT)?;
        }
        tx.commit()?;
        Ok(Meta { secret, clock: ClockState { trusted: self.created_at, pending: Vec::new() }, fence_floor: 0 })
    }
}

/// Reads and checks the metadata. `Ok(None)`: the database has no tables at all (new).
pub(crate) fn read_meta(read: &redb::ReadTransaction) -> Result<Option<Meta>, OpenError> {
    let meta = match read.open_table(META) {
        Ok(meta) => meta,
        Err(redb::TableError::TableDoesNotExist(_)) => {
            let tables: Vec<String> = read.list_tables()?.map(|t| t.name().to_string()).collect();
            if tables.is_empty() {
                return Ok(None);
            }
            return Err(OpenError::Foreign { tables: tables.join(", ") });
        }
        Err(redb::TableError::Storage(storage)) => return Err(storage.into()),
        // A metadata table of another shape (damaged type bytes, or another program's table).
        Err(other) => return Err(OpenError::CorruptMeta(other.to_string())),
    };
    let get =
        |name: &str| -> Result<Option<Vec<u8>>, OpenError> { Ok(meta.get(name)?.map(|guard| guard.value().to_vec())) };
    let be_u64 =
        |bytes: Option<Vec<u8>>| bytes.and_then(|b| <[u8; 8]>::try_from(b.as_slice()).ok()).map(u64::from_be_bytes);
    if get(META_MAGIC)?.as_deref() != Some(MAGIC) {
        return Err(OpenError::Foreign { tables: "idemdb_meta without the idemdb magic".into() });
    }
    let format = get(META_FORMAT)?
        .and_then(|bytes| <[u8; 4]>::try_from(bytes.as_slice()).ok())
        .map(u32::from_be_bytes)
        .ok_or_else(|| OpenError::CorruptMeta("format entry missing or malformed".into()))?;
    if format > STORE_FORMAT {
        return Err(OpenError::NewerFormat { found: format, supported: STORE_FORMAT });
    }
    if format < STORE_FORMAT {
        return Err(OpenError::OlderFormat { found: format, supported: STORE_FORMAT });
    }
    let secret = get(META_SECRET)?
        .and_then(|bytes| <[u8; 32]>::try_from(bytes.as_slice()).ok())
        .ok_or_else(|| OpenError::CorruptMeta("audit secret missing or malformed".into()))?;
    Ok(Some(Meta {
        secret,
        clock: ClockState {
            trusted: be_u64(get(META_CLOCK)?).unwrap_or(0),
            pending: get(META_CLOCK_PENDING)?.map(|bytes| ClockState::decode_pending(&bytes)).unwrap_or_default(),
        },
        fence_floor: be_u64(get(META_FENCE_FLOOR)?).unwrap_or(0),
    }))
}

#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
fn os_secret() -> Result<[u8; 32], OpenError> {
    let mut material = [0u8; 32];
    material[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    material[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    Ok(blake3::derive_key("idemdb 2026-11-30 store secret", &material))
}

#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
fn os_secret() -> Result<[u8; 32], OpenError> {
    Err(OpenError::MissingPlatform("a random source"))
}
