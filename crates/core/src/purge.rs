//! What a retention pass reports, for every storage adapter.

/// What one purge pass did (or, for a dry run, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PurgeReport {
    /// Results or failures replaced by their tombstone.
    pub tombstoned: u64,
    /// Tombstones and released records removed.
    pub forgotten: u64,
    /// Index entries that pointed nowhere (removed).
    pub stale_index_entries: u64,
    /// Finished outbox items, old webhook deliveries and finished jobs removed.
    pub workflow_forgotten: u64,
    /// Audit events past their retention removed.
    pub audit_removed: u64,
    /// Due records whose stored value does not decode: left in place, skipped, and reported
    /// (`idemdb verify` names them).
    pub corrupt: u64,
    /// Whether due work remains beyond the budget.
    pub more: bool,
}
