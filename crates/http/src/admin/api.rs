//! The admin API's types: the API value, and the application's hook for confirmed
//! resolutions. The routes are in `routes.rs`.

use idemdb_core::OutboxItem;
use idemdb_interface::InspectStore;
use std::future::Future;

/// An application's part in a confirmed resolution: its business rows written with the
/// resolution, in one commit of its backend.
pub trait ConfirmHook<S>: Send + Sync + 'static {
    /// Called when an operator says the provider made the uncertain effect `item` under
    /// `reference`. Return `Ok(true)` after resolving it (the application's rows and
    /// `resolve_effect` in one transaction), `Ok(false)` to let the router resolve it with the
    /// operator's response.
    ///
    /// # Errors
    /// [`HookError`]: the router answers `502` and changes nothing more.
    fn confirmed(
        &self,
        store: &S,
        item: &OutboxItem,
        reference: &str,
    ) -> impl Future<Output = Result<bool, HookError>> + Send;
}

/// No application part: every resolution is the router's.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHook;

impl<S: Sync> ConfirmHook<S> for NoHook {
    fn confirmed(
        &self,
        _store: &S,
        _item: &OutboxItem,
        _reference: &str,
    ) -> impl Future<Output = Result<bool, HookError>> + Send {
        std::future::ready(Ok(false))
    }
}

/// The application's hook failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the application's resolution failed: {0}")]
pub struct HookError(pub String);

/// The admin API over `store` (see the [module docs](super)).
#[derive(Debug, Clone)]
pub struct AdminApi<S, H = NoHook> {
    pub(super) store: S,
    pub(super) hook: H,
}

impl<S: InspectStore + Clone + 'static> AdminApi<S> {
    /// The admin API of `store`, with no application hook.
    pub fn new(store: S) -> Self {
        AdminApi { store, hook: NoHook }
    }
}

impl<S: InspectStore + Clone + 'static, H: ConfirmHook<S>> AdminApi<S, H> {
    /// The same API with `hook` for confirmed resolutions.
    pub fn hook<H2: ConfirmHook<S>>(self, hook: H2) -> AdminApi<S, H2> {
        AdminApi { store: self.store, hook }
    }
}
