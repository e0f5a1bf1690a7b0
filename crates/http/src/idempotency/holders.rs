//! The keys this layer's requests hold right now, so that a request meeting a key in progress
//! can tell a holder that is working (here) from one that is gone (its process died, and the
//! store kept its lease).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use idemdb_core::KeyHash;

/// The keys held by requests of this layer (and its clones), counted.
#[derive(Debug, Default)]
pub(crate) struct Holders {
    held: Mutex<HashMap<KeyHash, usize>>,
}

impl Holders {
    /// Records that a request of this layer holds `key` until the guard drops.
    pub(crate) fn hold(self: &Arc<Self>, key: KeyHash) -> Held {
        *self.lock().entry(key).or_insert(0) += 1;
        Held { holders: Arc::clone(self), key }
    }

    /// Whether a request of this layer holds `key` now.
    pub(crate) fn holds(&self, key: &KeyHash) -> bool {
        self.lock().contains_key(key)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<KeyHash, usize>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A key held by one request; released when dropped (the request's task ended).
#[derive(Debug)]
pub(crate) struct Held {
    holders: Arc<Holders>,
    key: KeyHash,
}

impl Drop for Held {
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
        let second = holders.hold(key);
        drop(first);
        assert!(holders.holds(&key));
        drop(second);
        assert!(!holders.holds(&key));
    }
}
