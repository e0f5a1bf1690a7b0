//! Where the tenant of a request comes from.
//!
//! The tenant is half of every record's scope, so it must come from something the client
//! cannot forge: the authenticated principal an authentication middleware put in the request
//! extensions, a verified token, a mutual-TLS identity. The layer never reads a tenant from a
//! header by itself; the application says where it is.

use http::request::Parts;

/// Gives the tenant of a request, or `None` when the request has no principal (the layer then
/// answers 401 with the problem type `unauthenticated`, and stores nothing).
///
/// Implemented for closures `Fn(&Parts) -> Option<String>`:
///
/// ```
/// use http::request::Parts;
/// /// What an authentication middleware inserted.
/// #[derive(Clone)]
/// struct Principal { account: String }
///
/// let tenant = |parts: &Parts| parts.extensions.get::<Principal>().map(|p| p.account.clone());
/// # fn check(_: impl idemdb_http::TenantSource) {}
/// # check(tenant);
/// ```
pub trait TenantSource: Send + Sync + 'static {
    /// The tenant of the request whose head is `parts`.
    fn tenant(&self, parts: &Parts) -> Option<String>;
}

impl<F> TenantSource for F
where
    F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
{
    fn tenant(&self, parts: &Parts) -> Option<String> {
        self(parts)
    }
}

/// One tenant for every request: for a service with a single account, or one whose
/// authentication happens elsewhere and does not distinguish tenants.
///
/// ```
/// let layer_tenant = idemdb_http::SingleTenant::new("acme");
/// # fn check(_: impl idemdb_http::TenantSource) {}
/// # check(layer_tenant);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SingleTenant(String);

impl SingleTenant {
    /// Every request belongs to `tenant`.
    pub fn new(tenant: impl Into<String>) -> Self {
        SingleTenant(tenant.into())
    }
}

impl TenantSource for SingleTenant {
    fn tenant(&self, _: &Parts) -> Option<String> {
        Some(self.0.clone())
    }
}
