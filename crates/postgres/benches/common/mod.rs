//! What the PostgreSQL benches share.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Runs `callers` threads calling `op` until the duration is over; operations a second.
pub fn threads(callers: usize, duration: Duration, op: impl Fn(usize, u64) + Send + Sync + 'static) -> f64 {
    let op = Arc::new(op);
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + duration;
    let handles: Vec<_> = (0..callers)
        .map(|caller| {
            let (op, done) = (Arc::clone(&op), Arc::clone(&done));
            std::thread::spawn(move || {
                let mut n = 0u64;
                while Instant::now() < deadline {
                    op(caller, n);
                    n += 1;
                }
                done.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    for handle in handles {
        handle.join().expect("caller thread");
    }
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}
