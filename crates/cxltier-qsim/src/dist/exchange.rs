//! The data movement of an exchange between ranks, without MPI: which local amplitudes go to a
//! partner, and copying them out of and back into a chunk. Shared by the run (feature `mpi`)
//! and by the benchmark that prices it for the cluster model ([`crate::bench::machine_rates`]).

/// The `t`-th local index whose bits at the pair positions read `v`: `bits` are the (local
/// position, rank bit) of an exchange's pairs in ascending local position, and bit `j` of `v`
/// goes to position `bits[j].0`; `t`'s bits fill the other positions in order.
pub(crate) fn deposit(bits: &[(usize, usize)], v: usize, t: usize) -> usize {
    bits.iter().enumerate().fold(t, |x, (j, &(l, _))| {
        ((x >> l) << (l + 1)) | (((v >> j) & 1) << l) | (x & ((1 << l) - 1))
    })
}

/// Copy the partner set's amplitudes `base..base + out.len()` (see [`deposit`]) out of `amps`,
/// a chunk whose first amplitude has local index `offset`.
pub(crate) fn gather<A: Copy>(
    bits: &[(usize, usize)],
    v: usize,
    amps: &[A],
    offset: usize,
    base: usize,
    out: &mut [A],
) {
    for (j, s) in out.iter_mut().enumerate() {
        *s = amps[deposit(bits, v, base + j) - offset];
    }
}

/// Copy `got` into the partner set's amplitudes `base..base + got.len()` of `amps`, a chunk whose
/// first amplitude has local index `offset`.
pub(crate) fn scatter<A: Copy>(
    bits: &[(usize, usize)],
    v: usize,
    amps: &mut [A],
    offset: usize,
    base: usize,
    got: &[A],
) {
    for (j, r) in got.iter().enumerate() {
        amps[deposit(bits, v, base + j) - offset] = *r;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deposit_enumerates_the_indices_whose_pair_bits_read_v() {
        // Pairs at local positions 1 and 3 (rank bits 0 and 1), 5 local bits.
        let bits = [(1, 0), (3, 1)];
        for v in 0..4 {
            let set: Vec<usize> = (0..8).map(|t| deposit(&bits, v, t)).collect();
            let expected: Vec<usize> = (0..32)
                .filter(|i| ((i >> 1) & 1) == (v & 1) && ((i >> 3) & 1) == (v >> 1))
                .collect();
            assert_eq!(set, expected, "v = {v}");
        }
    }

    #[test]
    fn scatter_puts_back_what_gather_took() {
        let bits = [(2, 0)];
        let amps: Vec<u32> = (0..64).collect();
        let mut out = vec![0; 8];
        gather(&bits, 1, &amps[32..], 32, 16, &mut out);
        assert!(out.iter().all(|&a| (a >> 2) & 1 == 1 && a >= 32));
        let mut back = vec![0u32; 32];
        scatter(&bits, 1, &mut back, 32, 16, &out);
        for (i, &a) in back.iter().enumerate() {
            assert!(a == 0 || a as usize == i + 32);
        }
        assert_eq!(back.iter().filter(|&&a| a != 0).count(), 8);
    }
}
