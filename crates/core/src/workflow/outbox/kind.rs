//! The names of an outbox item's states (a leaf: the transition errors name them too).

/// The name of an `OutboxState`, without its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OutboxStateKind {
    /// `OutboxState::Pending`.
    Pending,
    /// `OutboxState::Dispatching`.
    Dispatching,
    /// `OutboxState::Confirmed`.
    Confirmed,
    /// `OutboxState::Failed`.
    Failed,
    /// `OutboxState::Uncertain`.
    Uncertain,
}

crate::names!(OutboxStateKind, "outbox state", {
    Pending => "pending",
    Dispatching => "dispatching",
    Confirmed => "confirmed",
    Failed => "failed",
    Uncertain => "uncertain",
});
