//! Non-temporal ("streaming") stores, chosen at run time for the CPU.
//!
//! A regular store to a line that is not in the cache first reads the line from memory
//! (read-for-ownership, RFO) so that the core owns it, then writes it back when it is evicted: two
//! line transfers per line written. A non-temporal store writes whole lines through write-combining
//! buffers straight to memory, with no read first: one transfer per line. Memory benchmarks need
//! both to report what a workload with each kind of store gets.
//!
//! Rust has no safe non-temporal store, so this module wraps the `core::arch` intrinsics: the widest
//! of AVX-512 (`vmovntdq zmm`, 64 B), AVX2 (`vmovntdq ymm`, 32 B) and SSE2 (`movntdq xmm`, 16 B) that
//! the CPU supports, detected once at run time. Unaligned heads and tails are written with regular
//! stores, so any slice is accepted. Non-temporal stores are weakly ordered: [`store_fence`] (an
//! `sfence`) makes them globally visible before later stores; [`nt_fill`] ends with one, so callers
//! that time it measure stores that have left the core.
//!
//! On other architectures the functions fall back to regular stores and [`nt_isa`] says so.

use std::sync::atomic::{AtomicU8, Ordering};

/// The instruction set used for non-temporal stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// 64-byte `vmovntdq` (AVX-512F).
    Avx512,
    /// 32-byte `vmovntdq` (AVX).
    Avx2,
    /// 16-byte `movntdq` (SSE2, every x86-64 CPU).
    Sse2,
    /// No non-temporal stores on this architecture: regular stores are used.
    None,
}

impl Isa {
    /// Short lowercase name: `avx512`, `avx2`, `sse2` or `none`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Isa::Avx512 => "avx512",
            Isa::Avx2 => "avx2",
            Isa::Sse2 => "sse2",
            Isa::None => "none",
        }
    }

    /// Whether stores really bypass the cache.
    pub fn is_non_temporal(&self) -> bool {
        *self != Isa::None
    }

    /// Bytes written by one store instruction.
    pub fn width_bytes(&self) -> usize {
        match self {
            Isa::Avx512 => 64,
            Isa::Avx2 => 32,
            Isa::Sse2 => 16,
            Isa::None => 8,
        }
    }

    fn code(self) -> u8 {
        match self {
            Isa::Avx512 => 1,
            Isa::Avx2 => 2,
            Isa::Sse2 => 3,
            Isa::None => 4,
        }
    }

    fn from_code(code: u8) -> Option<Isa> {
        Some(match code {
            1 => Isa::Avx512,
            2 => Isa::Avx2,
            3 => Isa::Sse2,
            4 => Isa::None,
            _ => return None,
        })
    }
}

static DETECTED: AtomicU8 = AtomicU8::new(0);
static FORCED: AtomicU8 = AtomicU8::new(0);

/// The widest non-temporal store the CPU supports (detected once), unless [`force_isa`] chose
/// another.
pub fn nt_isa() -> Isa {
    if let Some(isa) = Isa::from_code(FORCED.load(Ordering::Relaxed)) {
        return isa;
    }
    if let Some(isa) = Isa::from_code(DETECTED.load(Ordering::Relaxed)) {
        return isa;
    }
    let isa = detect();
    DETECTED.store(isa.code(), Ordering::Relaxed);
    isa
}

/// Use `isa` instead of the detected one (for comparing store widths, and for tests). Returns
/// `false`, changing nothing, when the CPU does not support it.
pub fn force_isa(isa: Isa) -> bool {
    if !supported(isa) {
        return false;
    }
    FORCED.store(isa.code(), Ordering::Relaxed);
    true
}

/// Whether the CPU can run `isa`.
pub fn supported(isa: Isa) -> bool {
    match isa {
        Isa::None => true,
        #[cfg(target_arch = "x86_64")]
        Isa::Sse2 => true,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => std::arch::is_x86_feature_detected!("avx"),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => std::arch::is_x86_feature_detected!("avx512f"),
        #[cfg(not(target_arch = "x86_64"))]
        _ => false,
    }
}

fn detect() -> Isa {
    [Isa::Avx512, Isa::Avx2, Isa::Sse2]
        .into_iter()
        .find(|&isa| supported(isa))
        .unwrap_or(Isa::None)
}

/// Fill `dst` with non-temporal stores: `dst[i] = seed.wrapping_add(i)`, then [`store_fence`].
///
/// The values change with `i` so that no layer can turn the loop into something else (a `memset`,
/// or a store of a value already there). Elements before the first 64-byte boundary and after the
/// last one are written with regular stores; everything between bypasses the cache.
pub fn nt_fill(dst: &mut [u64], seed: u64) {
    nt_write(dst, seed);
    store_fence();
}

/// [`nt_fill`] without the closing fence.
fn nt_write(dst: &mut [u64], seed: u64) {
    let isa = nt_isa();
    let (head, body, tail) = split_aligned(dst);
    fill_regular(head, seed);
    let body_seed = seed.wrapping_add(head.len() as u64);
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => x86::fill_avx512(body, body_seed),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => x86::fill_avx(body, body_seed),
        #[cfg(target_arch = "x86_64")]
        Isa::Sse2 => x86::fill_sse2(body, body_seed),
        _ => fill_regular(body, body_seed),
    }
    fill_regular(tail, body_seed.wrapping_add(body.len() as u64));
}

/// A way of writing one 64-byte line, for memory kernels that interleave loads and stores line by
/// line. Kernels are written generically over it, so the choice of instruction is made once per
/// call of the kernel, not once per line.
///
/// The non-temporal kinds can only be obtained from [`line_stores`], that is after the CPU was found
/// to support them, which is what makes their use safe.
pub trait LineStore: Copy + Send + Sync {
    /// Write `v` to `dst`. Non-temporal kinds fall back to a regular store for a `dst` that is not
    /// 64-byte aligned (never the case for lines of a page-aligned buffer).
    fn store(self, dst: &mut [u64; 8], v: &[u64; 8]);
    /// Whether the stores bypass the cache (and need [`store_fence`] at the end).
    fn non_temporal(self) -> bool;
}

/// Regular (cached) stores.
#[derive(Debug, Clone, Copy, Default)]
pub struct RegularStores;

impl LineStore for RegularStores {
    #[inline(always)]
    fn store(self, dst: &mut [u64; 8], v: &[u64; 8]) {
        *dst = *v;
    }
    fn non_temporal(self) -> bool {
        false
    }
}

/// One 64-byte `vmovntdq zmm` per line (AVX-512F).
#[derive(Debug, Clone, Copy)]
pub struct NtAvx512(());

/// Two 32-byte `vmovntdq ymm` per line (AVX).
#[derive(Debug, Clone, Copy)]
pub struct NtAvx(());

/// Four 16-byte `movntdq` per line (SSE2).
#[derive(Debug, Clone, Copy)]
pub struct NtSse2(());

/// The line stores available for non-temporal writes on this CPU (the widest, as [`nt_isa`]).
#[derive(Debug, Clone, Copy)]
pub enum LineStores {
    /// AVX-512F: 64-byte stores.
    Avx512(NtAvx512),
    /// AVX: 32-byte stores.
    Avx(NtAvx),
    /// SSE2: 16-byte stores.
    Sse2(NtSse2),
    /// No non-temporal stores on this architecture.
    Regular(RegularStores),
}

/// The non-temporal line store to use on this CPU.
pub fn line_stores() -> LineStores {
    match nt_isa() {
        Isa::Avx512 => LineStores::Avx512(NtAvx512(())),
        Isa::Avx2 => LineStores::Avx(NtAvx(())),
        Isa::Sse2 => LineStores::Sse2(NtSse2(())),
        Isa::None => LineStores::Regular(RegularStores),
    }
}

fn aligned_line(dst: &[u64; 8]) -> bool {
    dst.as_ptr() as usize % 64 == 0
}

/// The three non-temporal line stores, one `asm!` each: `$asm` copies the 64 bytes at `{v}`
/// (unaligned loads) to the line at `{d}` through register 0 (xmm0, ymm0 or zmm0) alone, by
/// non-temporal stores. A `dst` that is not a whole aligned line, and every `dst` off x86-64,
/// takes a regular store.
macro_rules! non_temporal_line_store {
    ($($store:ty: $($asm:literal),+;)+) => {
        $(
            impl LineStore for $store {
                #[inline(always)]
                fn store(self, dst: &mut [u64; 8], v: &[u64; 8]) {
                    if !aligned_line(dst) {
                        *dst = *v;
                        return;
                    }
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: a value of this type exists only when runtime detection found its
                    // instructions (line_stores/nt_isa; SSE2 is baseline on x86-64). The loads
                    // read the 64 bytes of `v`, a readable array, unaligned. The stores write
                    // `dst`, an exclusively borrowed 64-byte array, 64-byte aligned (checked
                    // above), so each 16-, 32- or 64-byte part is aligned to its size as
                    // (v)movntdq requires. Only register 0 is written, declared as xmm0: a clobber
                    // of xmm0 marks the whole register, every width, as clobbered. No stack use;
                    // flags are untouched.
                    unsafe {
                        std::arch::asm!(
                            $($asm,)+
                            v = in(reg) v.as_ptr(),
                            d = in(reg) dst.as_mut_ptr(),
                            out("xmm0") _,
                            options(nostack, preserves_flags),
                        );
                    }
                    #[cfg(not(target_arch = "x86_64"))]
                    {
                        *dst = *v;
                    }
                }
                fn non_temporal(self) -> bool {
                    true
                }
            }
        )+
    };
}

non_temporal_line_store! {
    // One 64-byte store (AVX-512F).
    NtAvx512:
        "vmovdqu64 zmm0, zmmword ptr [{v}]",
        "vmovntdq zmmword ptr [{d}], zmm0";
    // The two 32-byte halves (AVX).
    NtAvx:
        "vmovdqu ymm0, ymmword ptr [{v}]",
        "vmovntdq ymmword ptr [{d}], ymm0",
        "vmovdqu ymm0, ymmword ptr [{v} + 32]",
        "vmovntdq ymmword ptr [{d} + 32], ymm0";
    // The four 16-byte quarters (SSE2).
    NtSse2:
        "movdqu xmm0, xmmword ptr [{v}]",
        "movntdq xmmword ptr [{d}], xmm0",
        "movdqu xmm0, xmmword ptr [{v} + 16]",
        "movntdq xmmword ptr [{d} + 16], xmm0",
        "movdqu xmm0, xmmword ptr [{v} + 32]",
        "movntdq xmmword ptr [{d} + 32], xmm0",
        "movdqu xmm0, xmmword ptr [{v} + 48]",
        "movntdq xmmword ptr [{d} + 48], xmm0";
}

/// Make earlier non-temporal stores globally visible before any later store (`sfence`). A no-op
/// where there are no non-temporal stores.
pub fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `sfence` is part of SSE, which every x86-64 CPU has; it only orders stores.
        unsafe { std::arch::x86_64::_mm_sfence() }
    }
}

/// Hint the CPU to bring the cache line holding `data[index]` into all cache levels
/// (`prefetcht0`), so that a later load finds it there. Only a hint: it never faults and never
/// changes memory; an index past the end is ignored. Memory kernels issue it a fixed distance ahead
/// of their loads to keep more misses in flight than the hardware prefetchers alone do.
#[inline(always)]
pub fn prefetch(data: &[u64], index: usize) {
    if index < data.len() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `prefetcht0` is SSE (baseline on x86-64); it only hints the cache hierarchy and can
        // neither fault nor change memory. The address is inside `data` (index < len).
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                data.as_ptr().add(index).cast(),
            );
        }
    }
}

/// The 8-byte words of `bytes`: the largest 8-byte-aligned middle part, viewed as `u64`s (all of
/// it for a page-aligned [`crate::Mapping`] whose length is a multiple of 8). Memory kernels work on
/// words; mappings hand out bytes.
pub fn words(bytes: &[u8]) -> &[u64] {
    // SAFETY: `align_to` returns a middle part that is correctly aligned for u64 and lies within
    // `bytes`; every bit pattern is a valid u64, and the shared borrow is carried over unchanged.
    let (_, middle, _) = unsafe { bytes.align_to::<u64>() };
    middle
}

/// Like [`words`], writable.
pub fn words_mut(bytes: &mut [u8]) -> &mut [u64] {
    // SAFETY: as in `words`; the exclusive borrow of `bytes` becomes the exclusive borrow of the
    // middle part, so no alias exists, and any u64 written is a valid set of 8 bytes.
    let (_, middle, _) = unsafe { bytes.align_to_mut::<u64>() };
    middle
}

fn fill_regular(dst: &mut [u64], seed: u64) {
    for (i, d) in dst.iter_mut().enumerate() {
        *d = seed.wrapping_add(i as u64);
    }
}

/// Split `dst` into a head before the first 64-byte boundary, a body of whole 64-byte blocks
/// starting on that boundary, and the tail after them.
fn split_aligned(dst: &mut [u64]) -> (&mut [u64], &mut [u64], &mut [u64]) {
    let addr = dst.as_ptr() as usize;
    // u64 elements are 8-byte aligned, so the distance to a 64-byte boundary is whole elements.
    let head_len = ((64 - addr % 64) % 64 / 8).min(dst.len());
    let (head, rest) = dst.split_at_mut(head_len);
    let body_len = rest.len() / 8 * 8;
    let (body, tail) = rest.split_at_mut(body_len);
    (head, body, tail)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// Lanes of 8 consecutive u64 values starting at `seed`, as the initial store values.
    fn lanes(seed: u64) -> [i64; 8] {
        let mut v = [0i64; 8];
        for (i, x) in v.iter_mut().enumerate() {
            *x = seed.wrapping_add(i as u64) as i64;
        }
        v
    }

    /// AVX-512 streaming stores, written in assembly: the AVX-512 intrinsics and the `avx512f`
    /// target feature need a newer compiler than this workspace's minimum, while the assembler
    /// accepts the instructions regardless. Not inlined, so the register clobbers below are the
    /// whole story for the surrounding code (all vector registers are caller-saved on x86-64).
    #[inline(never)]
    pub(super) fn fill_avx512(body: &mut [u64], seed: u64) {
        debug_assert!(body.is_empty() || (body.as_ptr() as usize % 64 == 0 && body.len() % 8 == 0));
        if body.len() < 8 {
            return;
        }
        let l = lanes(seed);
        let range = body.as_mut_ptr_range();
        // SAFETY: the caller (nt_isa/force_isa) selects this function only after runtime detection
        // found AVX-512F, so every instruction below is supported. `vmovdqu64` reads the local
        // 64-byte array `l`. The loop stores 64 bytes at `p` for p = start, start + 64, ... while
        // p < end; `body` is a whole number of 64-byte blocks (split_aligned), so every store lies
        // inside the exclusively borrowed slice, and `start` is 64-byte aligned, as `vmovntdq zmm`
        // requires. The block writes zmm0 and zmm1 (declared as their xmm0/xmm1 parts, the only
        // parts this non-AVX-512 function can use) and ends with `vzeroupper` so that later SSE code
        // pays no transition penalty. It touches no stack and flags are clobbered (the default).
        unsafe {
            std::arch::asm!(
                "vmovdqu64 zmm0, zmmword ptr [{l}]",
                "vpbroadcastq zmm1, {step}",
                "2:",
                "vmovntdq zmmword ptr [{p}], zmm0",
                "vpaddq zmm0, zmm0, zmm1",
                "add {p}, 64",
                "cmp {p}, {end}",
                "jb 2b",
                "vzeroupper",
                l = in(reg) l.as_ptr(),
                step = in(reg) 8u64,
                p = inout(reg) range.start => _,
                end = in(reg) range.end,
                out("xmm0") _,
                out("xmm1") _,
                options(nostack),
            );
        }
    }

    pub(super) fn fill_avx(body: &mut [u64], seed: u64) {
        debug_assert!(body.is_empty() || (body.as_ptr() as usize % 64 == 0 && body.len() % 8 == 0));
        // SAFETY: selected only after runtime detection found AVX.
        unsafe { fill_avx_impl(body, seed) }
    }

    #[target_feature(enable = "avx")]
    unsafe fn fill_avx_impl(body: &mut [u64], seed: u64) {
        let l = lanes(seed);
        // SAFETY: AVX is available (see `fill_avx`). Each store writes 32
        // bytes at element `i` or `i + 4` with `i + 8 <= body.len()`, inside the exclusively
        // borrowed slice, 32-byte aligned because `body` is 64-byte aligned and `i` is a multiple
        // of 4 elements, as `_mm256_stream_si256` requires. The loads read the local 8-element
        // array `l` (elements 0..4 and 4..8).
        unsafe {
            let mut a = _mm256_loadu_si256(l.as_ptr().cast());
            let mut b = _mm256_loadu_si256(l.as_ptr().add(4).cast());
            let step = _mm256_set1_epi64x(8);
            let p = body.as_mut_ptr();
            let n = body.len();
            let mut i = 0;
            while i + 8 <= n {
                _mm256_stream_si256(p.add(i).cast(), a);
                _mm256_stream_si256(p.add(i + 4).cast(), b);
                // AVX (not AVX2) has no 256-bit integer add; add the halves with SSE2.
                a = add256(a, step);
                b = add256(b, step);
                i += 8;
            }
        }
    }

    // Newer compilers treat these intrinsics as safe inside an AVX function and call the block below
    // unnecessary; the minimum supported one still needs it.
    #[allow(unused_unsafe)]
    #[target_feature(enable = "avx")]
    unsafe fn add256(x: __m256i, y: __m256i) -> __m256i {
        // SAFETY: AVX is enabled for this function and its callers; the intrinsics only move and add
        // register values.
        unsafe {
            let lo = _mm_add_epi64(_mm256_castsi256_si128(x), _mm256_castsi256_si128(y));
            let hi = _mm_add_epi64(
                _mm256_extractf128_si256::<1>(x),
                _mm256_extractf128_si256::<1>(y),
            );
            _mm256_set_m128i(hi, lo)
        }
    }

    pub(super) fn fill_sse2(body: &mut [u64], seed: u64) {
        debug_assert!(body.is_empty() || (body.as_ptr() as usize % 64 == 0 && body.len() % 8 == 0));
        let l = lanes(seed);
        // SAFETY: SSE2 is part of the x86-64 baseline. Each store writes 16 bytes at element
        // `i + 2k` (k < 4) with `i + 8 <= body.len()`, inside the exclusively borrowed slice, and
        // 16-byte aligned (64-byte aligned body, even element offsets), as `_mm_stream_si128`
        // requires. The loads read the local 8-element array `l`.
        unsafe {
            let mut v = [
                _mm_loadu_si128(l.as_ptr().cast()),
                _mm_loadu_si128(l.as_ptr().add(2).cast()),
                _mm_loadu_si128(l.as_ptr().add(4).cast()),
                _mm_loadu_si128(l.as_ptr().add(6).cast()),
            ];
            let step = _mm_set1_epi64x(8);
            let p = body.as_mut_ptr();
            let n = body.len();
            let mut i = 0;
            while i + 8 <= n {
                for (k, x) in v.iter_mut().enumerate() {
                    _mm_stream_si128(p.add(i + 2 * k).cast(), *x);
                    *x = _mm_add_epi64(*x, step);
                }
                i += 8;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(isa: Isa) {
        if !supported(isa) {
            return;
        }
        // Every offset into a buffer (so every head/body/tail split) and lengths around a block.
        let mut buf = vec![0u64; 300];
        for start in 0..9 {
            for len in [0, 1, 7, 8, 9, 31, 32, 33, 100, 257] {
                for x in buf.iter_mut() {
                    *x = u64::MAX;
                }
                let dst = &mut buf[start..start + len];
                let (head, body, tail) = split_aligned(dst);
                let seed = 1000 + start as u64;
                fill_regular(head, seed);
                let s = seed + head.len() as u64;
                match isa {
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx512 => x86::fill_avx512(body, s),
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx2 => x86::fill_avx(body, s),
                    #[cfg(target_arch = "x86_64")]
                    Isa::Sse2 => x86::fill_sse2(body, s),
                    _ => fill_regular(body, s),
                }
                fill_regular(tail, s + body.len() as u64);
                store_fence();
                for (i, x) in buf[start..start + len].iter().enumerate() {
                    assert_eq!(*x, seed + i as u64, "{isa:?} start {start} len {len} i {i}");
                }
                assert!(buf[..start].iter().all(|&x| x == u64::MAX));
                assert!(buf[start + len..].iter().all(|&x| x == u64::MAX));
            }
        }
    }

    #[test]
    fn every_isa_writes_exactly_the_slice() {
        for isa in [Isa::Avx512, Isa::Avx2, Isa::Sse2, Isa::None] {
            check(isa);
        }
    }

    #[test]
    fn public_fill_uses_the_detected_isa() {
        let mut v = vec![0u64; 1000];
        nt_fill(&mut v[3..], 7);
        assert_eq!(v[0], 0);
        for (i, x) in v[3..].iter().enumerate() {
            assert_eq!(*x, 7 + i as u64);
        }
        assert!(supported(nt_isa()));
    }

    #[test]
    fn words_view_the_aligned_middle() {
        let mut v = [0u64; 4];
        v[1] = 0x0102_0304_0506_0708;
        let mut bytes: Vec<u8> = v.iter().flat_map(|w| w.to_ne_bytes()).collect();
        let w = words_mut(&mut bytes);
        assert!(w.len() >= 3);
        w[0] = 5;
        assert!(words(&bytes).contains(&5));
    }

    fn store_lines<S: LineStore>(s: S) {
        let mut buf = vec![0u64; 40];
        let off = (64 - buf.as_ptr() as usize % 64) % 64 / 8;
        for start in [off, off + 1] {
            let v = [1, 2, 3, 4, 5, 6, 7, start as u64];
            let dst: &mut [u64; 8] = (&mut buf[start..start + 8]).try_into().unwrap();
            s.store(dst, &v);
            store_fence();
            assert_eq!(&buf[start..start + 8], &v, "{start}");
        }
    }

    #[test]
    fn line_stores_write_the_line() {
        store_lines(RegularStores);
        assert!(!RegularStores.non_temporal());
        if supported(Isa::Avx512) {
            store_lines(NtAvx512(()));
        }
        if supported(Isa::Avx2) {
            store_lines(NtAvx(()));
        }
        store_lines(NtSse2(()));
        match line_stores() {
            LineStores::Avx512(s) => assert!(s.non_temporal()),
            LineStores::Avx(s) => assert!(s.non_temporal()),
            LineStores::Sse2(s) => assert!(s.non_temporal()),
            LineStores::Regular(s) => assert!(!s.non_temporal()),
        }
    }

    #[test]
    fn prefetch_is_harmless() {
        let v = [1u64, 2, 3];
        prefetch(&v, 0);
        prefetch(&v, 2);
        prefetch(&v, 1000);
        assert_eq!(v, [1, 2, 3]);
    }

    #[test]
    fn split_is_aligned() {
        let mut v = vec![0u64; 100];
        for s in 0..8 {
            let (h, b, _) = split_aligned(&mut v[s..]);
            assert!(h.len() < 8);
            assert_eq!(b.as_ptr() as usize % 64, 0);
            assert_eq!(b.len() % 8, 0);
        }
    }
}
