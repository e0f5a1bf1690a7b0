//! The admin API's types: the API value, and the application's hook: its part in a confirmed
//! resolution, its lookup at the provider and its summary of an effect. The routes are in
//! `routes.rs`.

use idemdb_core::OutboxItem;
use idemdb_interface::InspectStore;
use serde_json::Value;
use std::future::Future;

/// What the provider says of an effect, asked by its provider key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderFact {
    /// The provider made the effect; `reference` is its id there (a charge id).
    Made {
        /// The provider's reference of the effect.
        reference: String,
    },
    /// The provider has no trace of the effect's provider key.
    NotMade,
}

/// An application's part in operator resolutions: its business rows written with a confirmed
/// resolution (in one commit of its backend), and, where the provider can be asked, the
/// provider's facts, which every operator's fact is checked against before anything changes.
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

    /// Asks the provider about `item` by its provider key (the reconciler's lookup): `Ok(None)`
    /// when the application has no lookup for this effect (the default), and the operator's
    /// word is then taken as given. With a fact, the router refuses what contradicts it: a
    /// confirmation with another reference or of an effect the provider never made, "failed"
    /// or "not found" for an effect it made.
    ///
    /// # Errors
    /// [`HookError`]: the provider could not be asked; the router answers `502` and changes
    /// nothing.
    fn lookup(
        &self,
        _store: &S,
        _item: &OutboxItem,
    ) -> impl Future<Output = Result<Option<ProviderFact>, HookError>> + Send {
        std::future::ready(Ok(None))
    }

    /// What `item` does, in the business's words, for the operator's page: a JSON object of
    /// short fields (the payments example: `amount`, `currency`, `destination`). `None` (the
    /// default): the page shows the effect's technical fields only.
    fn describe(&self, _item: &OutboxItem) -> Option<Value> {
        None
    }
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
