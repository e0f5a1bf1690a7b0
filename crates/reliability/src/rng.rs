//! A small deterministic random source (SplitMix64): every crash point, damage pattern and race
//! schedule is reproducible from its seed, with no dependency whose API moves.

/// SplitMix64 (Steele, Lea, Flood 2014): fast, full-period, good enough for test schedules.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A value in `0..n` (`0` when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// Mixes several numbers into one seed (so `(workload, point, seed)` give independent streams).
pub fn mix(parts: &[u64]) -> u64 {
    let mut rng = Rng::new(0x1de3_db00_5eed_0000);
    let mut out = 0u64;
    for &part in parts {
        out = out.rotate_left(17) ^ part;
        rng = Rng::new(rng.next_u64() ^ out);
        out = rng.next_u64();
    }
    out
}
