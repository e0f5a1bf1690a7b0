//! The business write: the application's own rows and the idempotency transitions they go
//! with, committed in one transaction of any backend.
//!
//! A payment row and the completion of its key must be stored together, or a crash between
//! them leaves a key that replays "paid" with no payment (or a payment whose retry runs again).
//! [`BusinessWrite`] says what one such commit does, as data: rows to put or delete in
//! application tables ([`RowTable`]: `(partition, id)` → bytes), then settlements of the
//! store's records ([`Settle`]: complete, fail, report or resolve an outbox effect). Each
//! backend applies it in one transaction of its own storage (redb: one journal append;
//! PostgreSQL: one SQL transaction), so the application writes its commit once for every
//! backend.
//!
//! Why data and not a closure over a transaction: the redb store runs its transaction on a
//! blocking thread and commits it in a group, while PostgreSQL's is a chain of network round
//! trips; a closure would have to be synchronous on one and asynchronous on the other. A
//! value is `Send`, can be checked before anything is written, and reads the same on both.
//!
//! ```
//! use idemdb_core::{BusinessWrite, RowTable};
//!
//! const ORDERS: RowTable = RowTable::new("app_orders");
//!
//! let write = BusinessWrite::new().put(ORDERS, "acme", "order-842", br#"{"amount":1050}"#.to_vec());
//! assert!(write.check().is_ok());
//! assert_eq!(write.rows().len(), 1);
//!
//! // A NUL byte cannot be stored as PostgreSQL text: refused before anything is written.
//! let bad = BusinessWrite::new().put(ORDERS, "acme", "order\0", Vec::new());
//! assert_eq!(bad.check().unwrap_err().code(), idemdb_core::ErrorCode::InvalidArgument);
//! ```

use crate::{
    EffectName, EffectReport, ErrorCode, Failure, IdempotencyKey, Lease, OutboxItem, ProviderState, ResolutionCause,
    Scope,
};

/// The longest table name, in bytes (PostgreSQL's identifier limit).
pub const MAX_ROW_TABLE_NAME_LEN: usize = 63;
/// The longest partition or row id, in bytes.
pub const MAX_ROW_KEY_LEN: usize = 1024;
/// The largest row value, in bytes (16 MiB).
pub const MAX_ROW_VALUE_LEN: usize = 16 << 20;

/// An application table of rows, `(partition, id)` → bytes, kept by the store beside its own
/// tables and written in the same transactions ([`BusinessWrite`]).
///
/// The name is 1 to 63 bytes of `a-z`, `0-9` and `_`, starting with a letter and not with
/// `idemdb_` (those tables are the store's): the same name is a redb table and a PostgreSQL
/// table (in the store's schema) without quoting. Rows of a partition are listed in byte order
/// of their ids on every backend.
///
/// ```
/// use idemdb_core::RowTable;
/// const PAYMENTS: RowTable = RowTable::new("app_payments"); // checked when compiled
/// assert_eq!(PAYMENTS.name(), "app_payments");
/// assert!(RowTable::try_new("idemdb_records").is_err());
/// assert!(RowTable::try_new("Payments").is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RowTable {
    name: &'static str,
}

impl RowTable {
    /// The table `name`.
    ///
    /// # Panics
    /// When `name` breaks the rules above; in a `const` item that is a compile error. Use
    /// [`RowTable::try_new`] for a name that comes from outside the program.
    pub const fn new(name: &'static str) -> RowTable {
        match check_table_name(name) {
            Ok(()) => RowTable { name },
            Err(_) => panic!("a row table name is 1-63 bytes of a-z, 0-9 and _, starts with a letter, not idemdb_"),
        }
    }

    /// The table `name`, or why it cannot be one.
    ///
    /// # Errors
    /// [`RowError::TableName`] when `name` breaks the rules above.
    pub fn try_new(name: &'static str) -> Result<RowTable, RowError> {
        match check_table_name(name) {
            Ok(()) => Ok(RowTable { name }),
            Err(reason) => Err(RowError::TableName { name: name.to_string(), reason }),
        }
    }

    /// The table's name.
    pub const fn name(self) -> &'static str {
        self.name
    }
}

impl std::fmt::Display for RowTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// The start of every table name the store keeps for itself (`idemdb_records`, …): no
/// application table, typed or row, may take a name that starts with it, on any backend.
pub const RESERVED_TABLE_PREFIX: &str = "idemdb_";

/// Whether `name` is one the store keeps for itself (it starts with
/// [`RESERVED_TABLE_PREFIX`]).
pub fn is_reserved_table_name(name: &str) -> bool {
    name.starts_with(RESERVED_TABLE_PREFIX)
}

/// Whether `name` may name a row table; `Err` says why not.
pub const fn check_table_name(name: &str) -> Result<(), &'static str> {
    let bytes = name.as_bytes();
    if bytes.is_empty() {
        return Err("it is empty");
    }
    if bytes.len() > MAX_ROW_TABLE_NAME_LEN {
        return Err("it is longer than 63 bytes");
    }
    if !bytes[0].is_ascii_lowercase() {
        return Err("it does not start with a lowercase letter");
    }
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if !(b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') {
            return Err("it has a byte other than a-z, 0-9 and _");
        }
        i += 1;
    }
    let reserved = RESERVED_TABLE_PREFIX.as_bytes();
    if bytes.len() >= reserved.len() {
        let mut same = true;
        let mut j = 0;
        while j < reserved.len() {
            if bytes[j] != reserved[j] {
                same = false;
            }
            j += 1;
        }
        if same {
            return Err("names starting with idemdb_ belong to the store");
        }
    }
    Ok(())
}

/// One change to an application row. Exhaustive on purpose: a new kind of change must be
/// handled by every backend before it compiles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowWrite {
    /// Writes the row (replacing any row with the same partition and id).
    Put {
        /// The table.
        table: RowTable,
        /// The partition (a tenant, an account: rows are listed by partition).
        partition: String,
        /// The row's id within the partition.
        id: String,
        /// The row.
        value: Vec<u8>,
    },
    /// Deletes the row, if there is one.
    Delete {
        /// The table.
        table: RowTable,
        /// The partition.
        partition: String,
        /// The row's id within the partition.
        id: String,
    },
}

impl RowWrite {
    /// The table, partition and id the change is to.
    pub fn target(&self) -> (RowTable, &str, &str) {
        match self {
            RowWrite::Put { table, partition, id, .. } | RowWrite::Delete { table, partition, id } => {
                (*table, partition, id)
            }
        }
    }
}

/// A transition of the store's own records, made in the same transaction as the rows.
/// Exhaustive on purpose, as [`RowWrite`].
#[derive(Debug, Clone)]
pub enum Settle {
    /// Completes the lease's attempt with `result` (retries replay it).
    Complete {
        /// The lease of the attempt.
        lease: Lease,
        /// The result.
        result: Vec<u8>,
    },
    /// Records that the lease's attempt failed.
    Fail {
        /// The lease of the attempt.
        lease: Lease,
        /// What failed.
        failure: Failure,
    },
    /// Reports what the provider answered for a claimed outbox effect; the intent's record
    /// follows.
    ReportEffect {
        /// The item as claimed.
        claim: OutboxItem,
        /// The provider's answer.
        report: EffectReport,
    },
    /// Records what the provider says about an uncertain effect, and who learnt it.
    ResolveEffect {
        /// The intent's scope.
        scope: Scope,
        /// The intent's key.
        key: IdempotencyKey,
        /// The effect.
        effect: EffectName,
        /// What the provider says.
        state: ProviderState,
        /// Who learnt it, how.
        cause: ResolutionCause,
    },
}

/// One commit of the application's rows and the store's transitions: all of it or none
/// (see the module documentation). Rows are written first, then the settlements in
/// the order given; a settlement the store refuses (a stale lease, an effect already reported)
/// rolls the rows back too.
#[derive(Debug, Clone, Default)]
#[must_use = "a business write does nothing until a store commits it"]
pub struct BusinessWrite {
    rows: Vec<RowWrite>,
    settles: Vec<Settle>,
}

impl BusinessWrite {
    /// A write that changes nothing yet.
    pub fn new() -> Self {
        BusinessWrite::default()
    }

    /// Puts the row `(partition, id)` of `table` (replacing any row there).
    pub fn put(mut self, table: RowTable, partition: impl Into<String>, id: impl Into<String>, value: Vec<u8>) -> Self {
        self.rows.push(RowWrite::Put { table, partition: partition.into(), id: id.into(), value });
        self
    }

    /// Deletes the row `(partition, id)` of `table`, if there is one.
    pub fn delete(mut self, table: RowTable, partition: impl Into<String>, id: impl Into<String>) -> Self {
        self.rows.push(RowWrite::Delete { table, partition: partition.into(), id: id.into() });
        self
    }

    /// Completes the lease's attempt with `result` in the same commit.
    pub fn complete(mut self, lease: &Lease, result: Vec<u8>) -> Self {
        self.settles.push(Settle::Complete { lease: lease.clone(), result });
        self
    }

    /// Records the lease's attempt as failed in the same commit.
    pub fn fail(mut self, lease: &Lease, failure: Failure) -> Self {
        self.settles.push(Settle::Fail { lease: lease.clone(), failure });
        self
    }

    /// Reports the provider's answer for the claimed effect `claim` in the same commit.
    pub fn report_effect(mut self, claim: &OutboxItem, report: EffectReport) -> Self {
        self.settles.push(Settle::ReportEffect { claim: claim.clone(), report });
        self
    }

    /// Records what the provider says about the uncertain effect `item` (as found), and who
    /// learnt it, in the same commit.
    pub fn resolve_effect(mut self, item: &OutboxItem, state: ProviderState, cause: ResolutionCause) -> Self {
        self.settles.push(Settle::ResolveEffect {
            scope: item.scope.clone(),
            key: item.key.clone(),
            effect: item.effect.clone(),
            state,
            cause,
        });
        self
    }

    /// The row changes, in order.
    pub fn rows(&self) -> &[RowWrite] {
        &self.rows
    }

    /// The settlements, in order.
    pub fn settles(&self) -> &[Settle] {
        &self.settles
    }

    /// The row changes and the settlements.
    pub fn into_parts(self) -> (Vec<RowWrite>, Vec<Settle>) {
        (self.rows, self.settles)
    }

    /// Checks every row change against the limits every backend keeps (backends call it before
    /// they write anything).
    ///
    /// # Errors
    /// The first row whose partition or id is too long or holds a NUL byte, or whose value is
    /// too large.
    pub fn check(&self) -> Result<(), RowError> {
        for row in &self.rows {
            let (_, partition, id) = row.target();
            let value = match row {
                RowWrite::Put { value, .. } => Some(value.as_slice()),
                RowWrite::Delete { .. } => None,
            };
            check_row(partition, id, value)?;
        }
        Ok(())
    }
}

/// Checks one row change: its partition and id, and its value when it is a put (`None`: a
/// delete). Backends call it for every row they write.
///
/// # Errors
/// [`RowError::KeyTooLong`], [`RowError::NulByte`] or [`RowError::ValueTooLarge`].
pub fn check_row(partition: &str, id: &str, value: Option<&[u8]>) -> Result<(), RowError> {
    check_row_key("partition", partition)?;
    check_row_key("id", id)?;
    match value {
        Some(value) if value.len() > MAX_ROW_VALUE_LEN => {
            Err(RowError::ValueTooLarge { len: value.len(), max: MAX_ROW_VALUE_LEN })
        }
        _ => Ok(()),
    }
}

/// Checks a partition or row id (`part` names which, for the error).
///
/// # Errors
/// [`RowError::KeyTooLong`] or [`RowError::NulByte`].
pub fn check_row_key(part: &'static str, value: &str) -> Result<(), RowError> {
    if value.len() > MAX_ROW_KEY_LEN {
        return Err(RowError::KeyTooLong { part, len: value.len(), max: MAX_ROW_KEY_LEN });
    }
    if value.contains('\0') {
        return Err(RowError::NulByte { part });
    }
    Ok(())
}

/// One row of an application table, as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The row's id within its partition.
    pub id: String,
    /// The row.
    pub value: Vec<u8>,
}

/// A row table name, row key or row was refused; nothing was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RowError {
    /// The name cannot name a row table.
    #[error("{name:?} cannot name a row table: {reason}")]
    TableName {
        /// The name given.
        name: String,
        /// Why not.
        reason: &'static str,
    },
    /// A partition or id is over [`MAX_ROW_KEY_LEN`].
    #[error("the row's {part} is {len} bytes long; the limit is {max}")]
    KeyTooLong {
        /// `"partition"` or `"id"`.
        part: &'static str,
        /// Its length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A partition or id holds a NUL byte (PostgreSQL text cannot hold one).
    #[error("the row's {part} holds a NUL byte")]
    NulByte {
        /// `"partition"` or `"id"`.
        part: &'static str,
    },
    /// A row is over [`MAX_ROW_VALUE_LEN`].
    #[error("the row is {len} bytes; the limit is {max}")]
    ValueTooLarge {
        /// Its length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
}

impl RowError {
    /// The stable code: [`ErrorCode::TooLarge`] for a row over the limit,
    /// [`ErrorCode::InvalidArgument`] otherwise.
    pub fn code(&self) -> ErrorCode {
        match self {
            RowError::ValueTooLarge { .. } => ErrorCode::TooLarge,
            RowError::TableName { .. } | RowError::KeyTooLong { .. } | RowError::NulByte { .. } => {
                ErrorCode::InvalidArgument
            }
        }
    }
}

crate::coded!(RowError);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_follow_the_rules() {
        for good in ["a", "app_payments", "orders2", &"x".repeat(63)] {
            let name: &'static str = Box::leak(good.to_string().into_boxed_str());
            assert_eq!(RowTable::try_new(name).map(RowTable::name), Ok(name), "{good}");
        }
        for bad in ["", "2orders", "_x", "Orders", "app-payments", "idemdb_x", "a b", &"x".repeat(64)] {
            let name: &'static str = Box::leak(bad.to_string().into_boxed_str());
            let error = RowTable::try_new(name).unwrap_err();
            assert!(matches!(error, RowError::TableName { .. }), "{bad}: {error}");
            assert_eq!(error.code(), ErrorCode::InvalidArgument);
        }
        // `idemdb` alone is not reserved; only the `idemdb_` prefix is.
        assert!(RowTable::try_new("idemdb").is_ok());
    }

    #[test]
    fn check_refuses_what_a_backend_could_not_store() {
        const T: RowTable = RowTable::new("t");
        assert_eq!(BusinessWrite::new().put(T, "", "", Vec::new()).check(), Ok(()));
        let long = "k".repeat(MAX_ROW_KEY_LEN + 1);
        assert_eq!(
            BusinessWrite::new().delete(T, long.clone(), "id").check(),
            Err(RowError::KeyTooLong { part: "partition", len: MAX_ROW_KEY_LEN + 1, max: MAX_ROW_KEY_LEN })
        );
        assert_eq!(BusinessWrite::new().put(T, "p", "a\0b", Vec::new()).check(), Err(RowError::NulByte { part: "id" }));
        let error = BusinessWrite::new().put(T, "p", "i", vec![0; MAX_ROW_VALUE_LEN + 1]).check().unwrap_err();
        assert_eq!(error.code(), ErrorCode::TooLarge);
        // The first bad row is named even after good ones.
        let write = BusinessWrite::new().put(T, "p", "ok", Vec::new()).put(T, "p", long, Vec::new());
        assert!(matches!(write.check(), Err(RowError::KeyTooLong { part: "id", .. })), "{:?}", write.check());
    }

    #[test]
    fn a_write_keeps_its_order() {
        const T: RowTable = RowTable::new("t");
        let write = BusinessWrite::new().put(T, "p", "1", vec![1]).delete(T, "p", "2").put(T, "q", "3", vec![3]);
        let targets: Vec<_> = write.rows().iter().map(RowWrite::target).collect();
        assert_eq!(targets, [(T, "p", "1"), (T, "p", "2"), (T, "q", "3")]);
        assert!(write.settles().is_empty());
    }
}
