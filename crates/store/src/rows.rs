//! Row tables: the application's rows, `(partition, id)` → bytes, in tables of the store's own
//! database ([`RowTable`]), written through the journal like the store's own tables.
//!
//! Every row table has the same redb types, `(&str, &str)` → `&[u8]`, so recovery replays a
//! row without being told about the table: a journal mutation of id [`TableId::Rows`] carries the
//! table's name in front of the key (`name length: u32 BE · name · partition length: u32 BE ·
//! partition · id`), and the replay opens the table by that name. That is what typed
//! application tables ([`Txn::table`]) cannot do: their types must be registered at every open,
//! so an operator's tool cannot replay them. For the same reason a backup and a rebuild copy
//! every row table without being told its name ([`row_tables`]).
//!
//! This module is the row tables' layout and replay; the calls that write and read them
//! (`Txn::put_row`, `Store::commit_business`, `Store::rows`) are in `business.rs`.

use redb::{ReadTransaction, ReadableTable, TableDefinition, TableError, TableHandle, WriteTransaction};

use idemdb_core::{Row, RowTable, check_table_name};

use crate::Error;

/// The redb table of the row table `name`.
pub(crate) fn definition(name: &str) -> TableDefinition<'_, (&'static str, &'static str), &'static [u8]> {
    TableDefinition::new(name)
}

/// The logged key of a row: `name length · name · partition length · partition · id`.
pub(crate) fn logged_key(table: RowTable, partition: &str, id: &str) -> Vec<u8> {
    let name = table.name();
    let mut out = Vec::with_capacity(8 + name.len() + partition.len() + id.len());
    for part in [name, partition] {
        // Both are at most a few KiB (checked), so the length fits a u32.
        out.extend_from_slice(&u32::try_from(part.len()).unwrap_or(u32::MAX).to_be_bytes());
        out.extend_from_slice(part.as_bytes());
    }
    out.extend_from_slice(id.as_bytes());
    out
}

/// Splits a logged key into the table's name, the partition and the id.
fn split_logged(key: &[u8]) -> Option<(&str, &str, &str)> {
    fn take(rest: &[u8]) -> Option<(&str, &[u8])> {
        let (len, rest) = rest.split_first_chunk::<4>()?;
        let len = usize::try_from(u32::from_be_bytes(*len)).ok()?;
        if rest.len() < len {
            return None;
        }
        let (part, rest) = rest.split_at(len);
        Some((std::str::from_utf8(part).ok()?, rest))
    }
    let (name, rest) = take(key)?;
    let (partition, rest) = take(rest)?;
    let id = std::str::from_utf8(rest).ok()?;
    check_table_name(name).ok()?;
    Some((name, partition, id))
}

/// Writes (`Some`) or removes (`None`) one logged row in `tx`: the write path and the replay.
/// `Ok(None)`: the key is not a row's (a malformed mutation).
pub(crate) fn apply(tx: &WriteTransaction, key: &[u8], value: Option<&[u8]>) -> Result<Option<()>, Error> {
    let Some((name, partition, id)) = split_logged(key) else { return Ok(None) };
    let mut table = tx.open_table(definition(name))?;
    match value {
        Some(value) => drop(table.insert((partition, id), value)?),
        None => drop(table.remove((partition, id))?),
    }
    Ok(Some(()))
}

/// The names of the row tables in `read`: the tables that are not the store's own (`known`)
/// and open with the row types. A backup and a rebuild copy them without being told of them.
pub(crate) fn row_tables(read: &ReadTransaction, known: &[String]) -> Result<Vec<String>, Error> {
    let mut found = Vec::new();
    for table in read.list_tables()? {
        let name = table.name();
        if known.iter().any(|k| k == name) || check_table_name(name).is_err() {
            continue;
        }
        match read.open_table(definition(name)) {
            Ok(_) => found.push(name.to_string()),
            Err(TableError::TableTypeMismatch { .. }) => {}
            Err(other) => return Err(other.into()),
        }
    }
    Ok(found)
}

/// Reads rows of `partition` after `after`, at most `limit` (0: all), from an open table.
pub(crate) fn list(
    table: &impl ReadableTable<(&'static str, &'static str), &'static [u8]>,
    partition: &str,
    after: Option<&str>,
    limit: usize,
) -> Result<Vec<Row>, Error> {
    let start = (partition, after.unwrap_or(""));
    let mut rows = Vec::new();
    for entry in table.range(start..)? {
        let (key, value) = entry?;
        let (p, id) = key.value();
        if p != partition {
            break;
        }
        if after == Some(id) {
            continue;
        }
        rows.push(Row { id: id.to_string(), value: value.value().to_vec() });
        if rows.len() == limit {
            break;
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logged_keys_round_trip() {
        const T: RowTable = RowTable::new("app_t");
        for (partition, id) in [("", ""), ("acme", "order-842"), ("ü", "a:b\u{1}")] {
            let key = logged_key(T, partition, id);
            assert_eq!(split_logged(&key), Some(("app_t", partition, id)));
        }
        // A name the rules refuse, a cut length or bad UTF-8 is malformed, not a table.
        assert_eq!(split_logged(&logged_key(RowTable::new("ok"), "p", "i")[..6]), None);
        let mut bad_name = vec![0, 0, 0, 2];
        bad_name.extend_from_slice(b"Xy\0\0\0\0");
        assert_eq!(split_logged(&bad_name), None);
        let mut bad_utf8 = logged_key(T, "p", "");
        bad_utf8.push(0xFF);
        assert_eq!(split_logged(&bad_utf8), None);
    }
}
