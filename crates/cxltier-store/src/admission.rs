//! Admission: a TinyLFU frequency sketch (count-min, 4 rows of 8-bit counters, halved every
//! `10 × width` increments so that old popularity fades) behind a doorkeeper: a one-bit Bloom filter
//! that absorbs each key's first access, so keys seen once (most of a scan) never reach the
//! counters and do not inflate the estimates of the keys they collide with. The doorkeeper is
//! cleared at each halving. An estimate is the counters' minimum plus one when the doorkeeper
//! holds the key.
//!
//! A candidate enters a full tier only if the sketch has seen it more often than the victim it
//! would displace. A scan touches each key once, so its keys never beat the hot set: that is the
//! scan resistance.

/// The frequency sketch.
#[derive(Debug)]
pub struct Sketch {
    rows: [Vec<u8>; 4],
    /// Doorkeeper bits (`width` bits, 2 probes).
    door: Vec<u64>,
    mask: u64,
    increments: u64,
    reset_at: u64,
}

fn hash(key: &[u8]) -> u64 {
    // FNV-1a, then a 64-bit mix: cheap and good enough to spread keys over the counters.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

impl Sketch {
    /// A sketch with `width` counters per row (rounded up to a power of two).
    pub fn new(width: usize) -> Sketch {
        let width = width.next_power_of_two().max(1024);
        Sketch {
            rows: std::array::from_fn(|_| vec![0u8; width]),
            door: vec![0u64; width / 64],
            mask: width as u64 - 1,
            increments: 0,
            reset_at: 10 * width as u64,
        }
    }

    /// Bytes the sketch occupies (counted in the DRAM budget).
    pub fn bytes(&self) -> u64 {
        4 * (self.mask + 1) + (self.mask + 1) / 8
    }

    /// The doorkeeper's two bit positions for `slots`.
    fn door_bits(&self, slots: &[usize; 4]) -> [usize; 2] {
        [slots[0], slots[3]]
    }

    fn in_door(&self, slots: &[usize; 4]) -> bool {
        self.door_bits(slots)
            .iter()
            .all(|&b| self.door[b / 64] & (1 << (b % 64)) != 0)
    }

    fn slots(&self, key: &[u8]) -> [usize; 4] {
        let h = hash(key);
        let h2 = h.rotate_left(32) | 1;
        std::array::from_fn(|i| (h.wrapping_add((i as u64).wrapping_mul(h2)) & self.mask) as usize)
    }

    /// Count one access.
    pub fn touch(&mut self, key: &[u8]) {
        let slots = self.slots(key);
        self.increments += 1;
        if !self.in_door(&slots) {
            for b in self.door_bits(&slots) {
                self.door[b / 64] |= 1 << (b % 64);
            }
        } else {
            for (row, &s) in self.rows.iter_mut().zip(&slots) {
                row[s] = row[s].saturating_add(1);
            }
        }
        if self.increments >= self.reset_at {
            for row in &mut self.rows {
                for c in row.iter_mut() {
                    *c >>= 1;
                }
            }
            self.door.fill(0);
            self.increments /= 2;
        }
    }

    /// Estimated accesses of `key`.
    pub fn estimate(&self, key: &[u8]) -> u8 {
        let slots = self.slots(key);
        self.rows
            .iter()
            .zip(&slots)
            .map(|(row, &s)| row[s])
            .min()
            .unwrap_or(0)
            .saturating_add(self.in_door(&slots) as u8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frequent_keys_beat_a_scan() {
        let mut s = Sketch::new(4096);
        for _ in 0..20 {
            s.touch(b"hot");
        }
        for i in 0..2000u32 {
            s.touch(format!("scan{i}").as_bytes());
        }
        assert!(s.estimate(b"hot") >= 15);
        let beaten = (0..2000u32)
            .filter(|i| s.estimate(format!("scan{i}").as_bytes()) >= s.estimate(b"hot"))
            .count();
        assert_eq!(beaten, 0);
    }

    #[test]
    fn the_doorkeeper_absorbs_first_accesses() {
        let mut s = Sketch::new(1024);
        s.touch(b"once");
        assert_eq!(s.estimate(b"once"), 1);
        assert_eq!(
            s.rows
                .iter()
                .map(|r| r.iter().map(|&c| c as u64).sum::<u64>())
                .sum::<u64>(),
            0
        );
        s.touch(b"once");
        s.touch(b"once");
        assert_eq!(s.estimate(b"once"), 3);
        assert_eq!(s.estimate(b"never"), 0);
    }

    #[test]
    fn counts_fade() {
        let mut s = Sketch::new(1024);
        for _ in 0..100 {
            s.touch(b"old");
        }
        for i in 0..20_000u32 {
            s.touch(&i.to_le_bytes());
        }
        assert!(s.estimate(b"old") < 100);
    }
}
