//! How durable a commit is: the one setting the open store's state and its builder share.

/// How durable a commit is when the call returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Durability {
    /// Every commit is flushed to stable storage (one `fsync`) before the call returns: once
    /// `complete` returns, the result survives a crash or power loss. The default.
    #[default]
    Immediate,
    /// Commits are not flushed: a crash may lose the most recent commits (never corrupt the
    /// store, and never mix half of one commit). [`Store::flush`](crate::Store::flush) makes
    /// everything before it durable. For caches and tests, or when the caller flushes on its
    /// own schedule.
    Eventual,
}

idemdb_core::names!(Durability, "durability", { Immediate => "immediate", Eventual => "eventual" });
