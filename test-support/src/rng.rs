//! A seeded xorshift generator: the same "random" values on every run, so a
//! failing case can be run again.

/// Xorshift64 over its state (seed it with a nonzero value: a zero state
/// stays zero).
pub struct Rng(pub u64);

impl Rng {
    /// The next value.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A value in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
