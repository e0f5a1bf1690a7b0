//! The keys this process works on right now, so that a request meeting a key in progress can
//! tell a holder that is working (here) from one that is gone (its process died, and the store
//! kept its lease).
//!
//! A key is held by the request that reserved it, and by whatever else finishes its record in
//! this process: a dispatcher sending the effect the request enqueued holds the key through
//! [`HeldKeys`] while it works, since the record's answer comes with that dispatch.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use idemdb_core::KeyHash;

/// The keys held in this process by requests of a layer (and its clones) and by the work a
/// service registered with [`HeldKeys`], counted.
#[derive(Debug, Default)]
pub(crate) struct Holders {
    held: Mutex<HashMap<KeyHash, usize>>,
}

impl Holders {
    /// Records that `key` is held until the guard drops.
    pub(crate) fn hold(self: &Arc<Self>, key: KeyHash) -> KeyHold {
        *self.lock().entry(key).or_insert(0) += 1;
        KeyHold { holders: Arc::clone(self), key }
    }

    /// Whether anything in this process holds `key` now.
    pub(crate) fn holds(&self, key: &KeyHash) -> bool {
        self.lock().contains_key(key)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<KeyHash, usize>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A layer's register of the keys this process works on, for work outside a request: a
/// service's dispatcher holds a key ([`HeldKeys::hold`]) while it sends the effect that
/// request enqueued. A duplicate of a held key is told the operation's short `Retry-After`;
/// a key in progress that nothing here holds belongs to a process that died, and its
/// duplicate is told when the store will let the key's work run again. Get it from
/// [`IdempotencyLayer::held_keys`](crate::IdempotencyLayer::held_keys).
#[derive(Debug, Clone)]
pub struct HeldKeys {
    pub(crate) holders: Arc<Holders>,
}

impl HeldKeys {
    /// Holds `key_hash` (the store's [`key_hash`](idemdb_interface::IdempotencyStore::key_hash)
    /// of the record's scope and key) until the returned guard drops.
    pub fn hold(&self, key_hash: KeyHash) -> KeyHold {
        self.holders.hold(key_hash)
    }
}

/// A key held by one request or one piece of work; released when dropped.
#[derive(Debug)]
#[must_use = "the key is held only while the guard lives"]
pub struct KeyHold {
    holders: Arc<Holders>,
    key: KeyHash,
}

impl Drop for KeyHold {
    fn drop(&mut self) {
        let mut held = self.holders.lock();
        if let Some(count) = held.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_held_while_any_of_its_guards_lives() {
        let holders = Arc::new(Holders::default());
        let key = KeyHash::from_bytes([3; 16]);
        assert!(!holders.holds(&key));
        let first = holders.hold(key);
        let second = HeldKeys { holders: Arc::clone(&holders) }.hold(key);
        drop(first);
        assert!(holders.holds(&key));
        drop(second);
        assert!(!holders.holds(&key));
    }
}
