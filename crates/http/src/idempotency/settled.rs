//! How a lease was settled: what the handle records and its error reports.

/// How the handler settled its lease itself, so the layer must not settle it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settled {
    /// The handler completed the record inside its own transaction.
    ByHandler,
    /// The handler marked the outcome uncertain.
    Uncertain,
    /// The handler released the key (no effect happened).
    Released,
    /// The layer settled it after the handler returned.
    ByLayer,
}

impl Settled {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Settled::ByHandler => "completed by the handler",
            Settled::Uncertain => "marked uncertain",
            Settled::Released => "released",
            Settled::ByLayer => "settled by the layer",
        }
    }
}
