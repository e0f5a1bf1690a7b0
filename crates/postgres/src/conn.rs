//! A pooled connection that goes back to the pool only when every round trip on it finished.
//!
//! A round trip that did not finish (its call's deadline passed, or the future was dropped
//! while it waited) leaves the connection with a statement still queued or running on the
//! server: the next caller would wait behind it. Such a connection is closed instead of reused.

use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};

use deadpool_postgres::Object;

/// A pooled connection, discarded when dropped with a round trip in flight.
pub(crate) struct Conn {
    /// Present until dropped.
    object: Option<Object>,
    in_flight: AtomicBool,
}

impl Conn {
    pub(crate) fn new(object: Object) -> Conn {
        Conn { object: Some(object), in_flight: AtomicBool::new(false) }
    }

    /// Marks a round trip as started (`true`) or finished (`false`).
    pub(crate) fn set_in_flight(&self, on: bool) {
        self.in_flight.store(on, Ordering::SeqCst);
    }

    /// Closes the connection rather than handing it back to the pool.
    pub(crate) fn discard(self) {
        self.set_in_flight(true);
    }
}

impl Deref for Conn {
    type Target = Object;

    fn deref(&self) -> &Object {
        match &self.object {
            Some(object) => object,
            // Taken only in `drop`.
            None => unreachable!("a Conn holds its connection until dropped"),
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if self.in_flight.load(Ordering::SeqCst)
            && let Some(object) = self.object.take()
        {
            drop(Object::take(object));
        }
    }
}
