//! A token bucket for the migration rate limit.

use std::time::{Duration, Instant};

/// Bytes that may move now; refills at `rate` bytes per second up to `capacity`.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: f64,
    capacity: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket. `capacity` bounds a burst: over any span `t`, at most
    /// `capacity + rate * t` bytes are taken.
    pub fn new(rate_bytes_per_s: f64, capacity: f64, now: Instant) -> Self {
        TokenBucket {
            rate: rate_bytes_per_s,
            capacity,
            tokens: capacity,
            last: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + dt * self.rate).min(self.capacity);
        self.last = now;
    }

    /// Whole bytes available at `now`.
    pub fn available(&mut self, now: Instant) -> u64 {
        self.refill(now);
        self.tokens.max(0.0) as u64
    }

    /// Take `bytes` (at most what [`TokenBucket::available`] said).
    pub fn take(&mut self, bytes: u64, now: Instant) {
        self.refill(now);
        self.tokens -= bytes as f64;
    }

    /// The most bytes that can be taken at once.
    pub fn capacity(&self) -> f64 {
        self.capacity
    }

    /// The bound on bytes taken over `span`: what the rate limit promises.
    pub fn bound(&self, span: Duration) -> f64 {
        self.capacity + self.rate * span.as_secs_f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_gives_more_than_rate_times_time_plus_capacity() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1000.0, 500.0, t0);
        let mut taken = 0;
        for ms in (0..=3000).step_by(7) {
            let now = t0 + Duration::from_millis(ms);
            let n = b.available(now).min(123);
            b.take(n, now);
            taken += n;
        }
        let bound = b.bound(Duration::from_secs(3));
        assert!(taken as f64 <= bound, "{taken} > {bound}");
        assert!(taken as f64 >= 3000.0, "the rate is usable: {taken}");
    }
}
