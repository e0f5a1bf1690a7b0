//! The application's own tables, written through the store's journal.
//!
//! [`Txn::table`](crate::Txn::table) hands out an [`AppTable`]: a typed redb table whose
//! writes also go into the transaction's journal record, so a transaction that writes the
//! application's rows next to its records commits with one journal append instead of a
//! durable redb checkpoint.
//!
//! A journal mutation names its table by one byte ([`TableId::Application`] for every application
//! table) and carries the table's **name** in front of the key: `name length: u32 BE · name ·
//! key bytes`. The name, not a persisted name → id registry, because a registry would be one
//! more store table whose entries must be written (and journaled) before the first row, and
//! whose ids could disagree with a journal after a restore; the name costs a few bytes per
//! mutation and makes a record self-describing. Replaying needs the key and value *types*
//! too (redb refuses to open a table with other types than it was made with, and orders keys
//! by the key type's comparison), so the application tells the store its journaled tables
//! when it opens it ([`StoreBuilder::journaled_table`](crate::StoreBuilder::journaled_table));
//! recovery opens each replayed table with the types registered for its name.

use std::any::TypeId;
use std::borrow::Borrow;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::ops::RangeBounds;
use std::sync::Arc;

use redb::{AccessGuard, Key, Range, ReadableTable, Table, TableDefinition, TableHandle, Value, WriteTransaction};

use crate::Error;
use crate::journal::Mutation;
use crate::tables::TableId;

/// Replays one mutation of one registered table.
trait Replay: Send + Sync {
    fn apply(&self, tx: &WriteTransaction, key: &[u8], value: Option<&[u8]>) -> Result<(), Error>;
}

/// A registered table's name and types.
struct Typed<K, V> {
    name: String,
    types: PhantomData<fn() -> (K, V)>,
}

impl<K: Key + 'static, V: Value + 'static> Replay for Typed<K, V> {
    fn apply(&self, tx: &WriteTransaction, key: &[u8], value: Option<&[u8]>) -> Result<(), Error> {
        let mut table = tx.open_table(TableDefinition::<K, V>::new(&self.name))?;
        match value {
            Some(value) => drop(table.insert(K::from_bytes(key), V::from_bytes(value))?),
            None => drop(table.remove(K::from_bytes(key))?),
        }
        Ok(())
    }
}

struct Registered {
    types: TypeId,
    replay: Arc<dyn Replay>,
}

/// The application tables a store journals, by name (fixed when the store is opened).
#[derive(Clone, Default)]
pub(crate) struct AppTables(Arc<HashMap<String, Registered>>);

impl Clone for Registered {
    fn clone(&self) -> Self {
        Registered { types: self.types, replay: Arc::clone(&self.replay) }
    }
}

impl std::fmt::Debug for AppTables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

impl AppTables {
    /// Adds `table` (a later registration of the same name replaces an earlier one). Names
    /// starting with `idemdb_` ([`idemdb_core::RESERVED_TABLE_PREFIX`]) belong to the store
    /// and are not registered.
    pub(crate) fn register<K: Key + 'static, V: Value + 'static>(&mut self, table: TableDefinition<K, V>) {
        let name = table.name().to_owned();
        if idemdb_core::is_reserved_table_name(&name) {
            return;
        }
        let replay = Arc::new(Typed::<K, V> { name: name.clone(), types: PhantomData });
        Arc::make_mut(&mut self.0).insert(name, Registered { types: TypeId::of::<(K, V)>(), replay });
    }

    /// Whether `table` is registered with these key and value types.
    pub(crate) fn knows<K: Key + 'static, V: Value + 'static>(&self, table: &TableDefinition<K, V>) -> bool {
        self.0.get(table.name()).is_some_and(|registered| registered.types == TypeId::of::<(K, V)>())
    }

    /// The name of the first application table the logged `key`s write that is not
    /// registered, if any (checked before an open writes anything, so a refusal changes nothing).
    pub(crate) fn first_unregistered<'k>(&self, keys: impl IntoIterator<Item = &'k [u8]>) -> Option<String> {
        keys.into_iter().find_map(|key| {
            let (name, _) = split_key(key)?;
            let name = std::str::from_utf8(name).ok()?;
            (!self.0.contains_key(name)).then(|| name.to_owned())
        })
    }

    /// Replays one application-table mutation (`key` as logged: name, then key bytes).
    pub(crate) fn apply(&self, tx: &WriteTransaction, key: &[u8], value: Option<&[u8]>) -> Result<(), ReplayError> {
        let (name, key) = split_key(key).ok_or(ReplayError::Malformed)?;
        let name = std::str::from_utf8(name).map_err(|_| ReplayError::Malformed)?;
        let registered = self.0.get(name).ok_or_else(|| ReplayError::Unregistered(name.to_owned()))?;
        registered.replay.apply(tx, key, value).map_err(ReplayError::Storage)
    }
}

/// Why an application-table mutation could not be replayed.
pub(crate) enum ReplayError {
    /// The logged key does not start with a table name.
    Malformed,
    /// The table was not registered at this open.
    Unregistered(String),
    /// The storage failed.
    Storage(Error),
}

/// The logged key of an application table's entry: `name length: u32 BE · name · key`.
fn logged_key(prefix: &[u8], key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + key.len());
    out.extend_from_slice(prefix);
    out.extend_from_slice(key);
    out
}

fn name_prefix(name: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + name.len());
    out.extend_from_slice(&u32::try_from(name.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(name.as_bytes());
    out
}

fn split_key(logged: &[u8]) -> Option<(&[u8], &[u8])> {
    let (len, rest) = logged.split_first_chunk::<4>()?;
    let len = usize::try_from(u32::from_be_bytes(*len)).ok()?;
    (rest.len() >= len).then(|| rest.split_at(len))
}

/// One of the application's tables inside a write transaction
/// ([`Txn::table`](crate::Txn::table)): redb's typed table, whose writes are also logged for
/// the store's journal, so the transaction still commits with one journal append.
pub struct AppTable<'t, K: Key + 'static, V: Value + 'static> {
    table: Table<'t, K, V>,
    /// `name length · name`, in front of every logged key.
    prefix: Vec<u8>,
    /// The transaction's journal record (`None`: the store keeps no journal).
    log: Option<&'t mut Vec<Mutation>>,
}

impl<K: Key + 'static, V: Value + 'static> std::fmt::Debug for AppTable<'_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppTable").finish_non_exhaustive()
    }
}

impl<'t, K: Key + 'static, V: Value + 'static> AppTable<'t, K, V> {
    pub(crate) fn open(
        tx: &'t WriteTransaction,
        apps: &AppTables,
        log: Option<&'t mut Vec<Mutation>>,
        table: TableDefinition<K, V>,
    ) -> Result<Self, Error> {
        if !apps.knows(&table) {
            return Err(Error::UnregisteredTable { name: table.name().to_owned() });
        }
        let prefix = name_prefix(table.name());
        Ok(AppTable { table: tx.open_table(table)?, prefix, log })
    }

    /// Writes `key` → `value` (replacing any value there).
    ///
    /// # Errors
    /// Storage errors.
    pub fn insert<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> Result<(), Error> {
        let (key, value) = (key.borrow(), value.borrow());
        self.table.insert(key, value)?;
        if let Some(log) = &mut self.log {
            let key = logged_key(&self.prefix, K::as_bytes(key).as_ref());
            log.push(Mutation::Put {
                table: TableId::Application.byte(),
                key,
                value: V::as_bytes(value).as_ref().to_vec(),
            });
        }
        Ok(())
    }

    /// Removes `key`; returns whether it was there.
    ///
    /// # Errors
    /// Storage errors.
    pub fn remove<'k>(&mut self, key: impl Borrow<K::SelfType<'k>>) -> Result<bool, Error> {
        let key = key.borrow();
        let removed = self.table.remove(key)?.is_some();
        if removed && let Some(log) = &mut self.log {
            log.push(Mutation::Remove {
                table: TableId::Application.byte(),
                key: logged_key(&self.prefix, K::as_bytes(key).as_ref()),
            });
        }
        Ok(removed)
    }

    /// The value of `key`, as this transaction sees it.
    ///
    /// # Errors
    /// Storage errors.
    pub fn get<'k>(&self, key: impl Borrow<K::SelfType<'k>>) -> Result<Option<AccessGuard<'_, V>>, Error> {
        Ok(self.table.get(key)?)
    }

    /// The entries in `range`, in key order, as this transaction sees them.
    ///
    /// # Errors
    /// Storage errors.
    pub fn range<'a, KR>(&self, range: impl RangeBounds<KR> + 'a) -> Result<Range<'_, K, V>, Error>
    where
        KR: Borrow<K::SelfType<'a>> + 'a,
    {
        Ok(self.table.range(range)?)
    }
}
