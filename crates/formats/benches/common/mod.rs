//! What the benchmarks share: a fixed stream of test values (xorshift64), the same on every run.

pub struct Values(u64);

impl Values {
    pub fn new() -> Values {
        Values(0x9e37_79b9_7f4a_7c15)
    }

    /// The next value, about uniform in [-1, 1).
    pub fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / 8.4e6 - 1.0
    }
}
