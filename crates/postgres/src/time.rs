//! Where decisions take `now` from.

/// The clock every decision reads, once per transaction, after the record's row lock is held.
///
/// Instances of a service run on machines whose clocks drift and jump; if each decided with
/// its own clock, an instance an hour ahead would take every lease issued by the others as
/// expired. By default every instance therefore reads the **database's** clock
/// (`clock_timestamp()`), so all of them agree on every lease and TTL. The host clock
/// ([`PgStoreBuilder::clock`](crate::PgStoreBuilder::clock)) then only serves to report how far
/// this host is from the database ([`PgStore::clock_skew`](crate::PgStore::clock_skew)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum TimeSource {
    /// `clock_timestamp()` of the database server: one clock for every instance. The default.
    #[default]
    Database,
    /// The host clock given to the builder. For tests and simulations (a
    /// [`ManualClock`](idemdb_interface::ManualClock) drives leases and TTLs through every
    /// boundary); never for several instances whose clocks may differ.
    HostClock,
}
