//! HyperLogLog: PFADD, PFCOUNT, PFMERGE, PFDEBUG and PFSELFTEST, with Redis 7.0's
//! representation byte for byte (its `hyperloglog.c`), so that GET, SET, DUMP and RESTORE of an
//! HLL move it between cxltier and redis-server unchanged.
//!
//! The value is a string: a 16-byte header (`HYLL`, the encoding byte, three unused bytes, the
//! cached cardinality as 8 little-endian bytes whose top bit says it is stale) and 16384 6-bit
//! registers, either dense (12288 bytes, register `i` at bit `6i`, least significant bit first)
//! or sparse (run-length opcodes: `00xxxxxx` ZERO of up to 64 registers, `01xxxxxx yyyyyyyy`
//! XZERO of up to 16384, `1vvvvvxx` VAL of a value up to 32 for up to 4 registers). A sparse
//! HLL turns dense when a register needs more than 32 or when it would pass
//! `hll-sparse-max-bytes`. Elements are hashed with MurmurHash64A (seed `0xadc83b19`): the low
//! 14 bits pick the register, the run of zeros above them (plus one) is its candidate value.
//! The count is Ertl's improved estimator, as Redis computes it.
//!
//! Every value read is checked as Redis checks it (`WRONGTYPE Key is not a valid HyperLogLog
//! string value.` for a bad header or length, `INVALIDOBJ Corrupted HLL object detected` for
//! opcodes that do not cover the registers exactly); reading opcodes is linear in the value's
//! bytes and never goes past them.

use cxltier_store::{Kind, StoreError};
use rand::Rng;

use crate::context::{fail, Ctx, Effect, WRONGTYPE};
use crate::notify::class as nc;
use crate::resp::reply;

/// Bits of the hash that pick the register.
const P: u32 = 14;
/// Bits left for the run of zeros.
const Q: usize = 64 - P as usize;
pub(crate) const REGISTERS: usize = 1 << P;
const P_MASK: u64 = REGISTERS as u64 - 1;
const BITS: usize = 6;
const REGISTER_MAX: u8 = (1 << BITS) - 1;
pub(crate) const HDR_SIZE: usize = 16;
pub(crate) const DENSE_SIZE: usize = HDR_SIZE + (REGISTERS * BITS).div_ceil(8);
const DENSE: u8 = 0;
const SPARSE: u8 = 1;
/// The encoding byte's largest valid value (RAW is internal to PFCOUNT of several keys).
const MAX_ENCODING: u8 = 1;
const SEED: u64 = 0xadc8_3b19;
/// 0.5 / ln(2).
const ALPHA_INF: f64 = 0.721_347_520_444_481_7;

const SPARSE_VAL_MAX_VALUE: u8 = 32;
const SPARSE_VAL_MAX_LEN: usize = 4;
const SPARSE_ZERO_MAX_LEN: usize = 64;
const SPARSE_XZERO_MAX_LEN: usize = 16384;
/// The longest sparse HLL that can be valid: its header and two bytes a register.
const SPARSE_MAX_LEN: usize = HDR_SIZE + 2 * REGISTERS;

pub(crate) const INVALID_OBJ: &str = "INVALIDOBJ Corrupted HLL object detected";
pub(crate) const NOT_HLL: &str = "WRONGTYPE Key is not a valid HyperLogLog string value.";

/// MurmurHash2, 64-bit version (MurmurHash64A), as Redis computes it on a little-endian machine.
pub(crate) fn murmur64a(key: &[u8], seed: u64) -> u64 {
    const M: u64 = 0xc6a4_a793_5bd1_e995;
    const R: u32 = 47;
    let mut h = seed ^ (key.len() as u64).wrapping_mul(M);
    let mut chunks = key.chunks_exact(8);
    for c in &mut chunks {
        let mut k = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h ^= k;
        h = h.wrapping_mul(M);
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        for (i, &b) in tail.iter().enumerate() {
            h ^= u64::from(b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> R;
    h = h.wrapping_mul(M);
    h ^= h >> R;
    h
}

/// The register an element goes to and the value it offers it (the run of zeros after the
/// register's bits, plus one: 1 to Q + 1).
pub(crate) fn pat_len(ele: &[u8]) -> (usize, u8) {
    let hash = murmur64a(ele, SEED);
    let index = (hash & P_MASK) as usize;
    let rest = (hash >> P) | (1u64 << Q);
    (index, rest.trailing_zeros() as u8 + 1)
}

/// Register `i` of dense registers (the bytes after the header).
pub(crate) fn dense_get(regs: &[u8], i: usize) -> u8 {
    let byte = i * BITS / 8;
    let fb = (i * BITS) & 7;
    let b0 = u16::from(regs.get(byte).copied().unwrap_or(0));
    let b1 = u16::from(regs.get(byte + 1).copied().unwrap_or(0));
    (((b0 >> fb) | (b1 << (8 - fb))) & u16::from(REGISTER_MAX)) as u8
}

/// Set register `i` of dense registers to `val` (at most 63).
pub(crate) fn dense_put(regs: &mut [u8], i: usize, val: u8) {
    let byte = i * BITS / 8;
    let fb = (i * BITS) & 7;
    let v = u16::from(val & REGISTER_MAX);
    if let Some(b) = regs.get_mut(byte) {
        *b &= !((u16::from(REGISTER_MAX) << fb) as u8);
        *b |= (v << fb) as u8;
    }
    if let Some(b) = regs.get_mut(byte + 1) {
        *b &= !((u16::from(REGISTER_MAX) >> (8 - fb)) as u8);
        *b |= (v >> (8 - fb)) as u8;
    }
}

/// The four registers of three bytes of dense registers (register 4k starts byte 3k): the
/// histogram and merges read them so, as Redis does, rather than one shifted read each.
fn four_registers(c: &[u8]) -> [u8; 4] {
    let (b0, b1, b2) = (c[0], c[1], c[2]);
    [
        b0 & 63,
        (b0 >> 6) | ((b1 & 15) << 2),
        (b1 >> 4) | ((b2 & 3) << 4),
        b2 >> 2,
    ]
}

/// Raise register `i` to `count` if that is more: whether it changed.
fn dense_set(regs: &mut [u8], i: usize, count: u8) -> bool {
    if count > dense_get(regs, i) {
        dense_put(regs, i, count);
        true
    } else {
        false
    }
}

/// One sparse opcode at `p` of `v`: (registers it covers, its value, its bytes). An XZERO whose
/// second byte lies past the end reads it as 0, as Redis reads the string's terminator.
fn opcode(v: &[u8], p: usize) -> (usize, u8, usize) {
    let b = v[p];
    if b & 0xc0 == 0 {
        ((b & 0x3f) as usize + 1, 0, 1)
    } else if b & 0xc0 == 0x40 {
        let lo = v.get(p + 1).copied().unwrap_or(0);
        (((((b & 0x3f) as usize) << 8) | lo as usize) + 1, 0, 2)
    } else {
        ((b & 0x3) as usize + 1, ((b >> 2) & 0x1f) + 1, 1)
    }
}

fn is_xzero(b: u8) -> bool {
    b & 0xc0 == 0x40
}

fn is_zero(b: u8) -> bool {
    b & 0xc0 == 0
}

fn is_val(b: u8) -> bool {
    b & 0x80 != 0
}

fn val_op(val: u8, len: usize) -> u8 {
    (((val - 1) << 2) | (len as u8 - 1)) | 0x80
}

fn push_zeros(seq: &mut Vec<u8>, len: usize) {
    if len > SPARSE_ZERO_MAX_LEN {
        let l = len - 1;
        seq.push((l >> 8) as u8 | 0x40);
        seq.push((l & 0xff) as u8);
    } else {
        seq.push(len as u8 - 1);
    }
}

/// Walk the sparse opcodes of `v` (after the header), calling `run(first register, registers,
/// value)` for each; `false` when they do not cover exactly the 16384 registers (Redis's
/// checks, which stop at the first run past the end).
fn walk_sparse(v: &[u8], mut run: impl FnMut(usize, usize, u8)) -> bool {
    let mut p = HDR_SIZE;
    let mut idx = 0usize;
    while p < v.len() {
        let (runlen, val, oplen) = opcode(v, p);
        if runlen + idx > REGISTERS {
            return false;
        }
        run(idx, runlen, val);
        idx += runlen;
        p += oplen;
    }
    idx == REGISTERS
}

/// A new HLL: sparse, every register zero (one XZERO of 16384), its cached count 0.
pub(crate) fn new_hll() -> Vec<u8> {
    let mut v = vec![0u8; HDR_SIZE];
    v[..4].copy_from_slice(b"HYLL");
    v[4] = SPARSE;
    let mut left = REGISTERS;
    while left > 0 {
        let x = left.min(SPARSE_XZERO_MAX_LEN);
        push_zeros(&mut v, x);
        left -= x;
    }
    v
}

/// Whether `v` has an HLL's header and, dense, its length (Redis's `isHLLObjectOrReply`).
pub(crate) fn is_hll(v: &[u8]) -> bool {
    v.len() >= HDR_SIZE
        && &v[..4] == b"HYLL"
        && v[4] <= MAX_ENCODING
        && (v[4] != DENSE || v.len() == DENSE_SIZE)
}

/// The sparse `v` made dense (its header kept but for the encoding); `None` when its opcodes
/// are corrupt. A dense `v` is returned as it is.
pub(crate) fn to_dense(v: &[u8]) -> Option<Vec<u8>> {
    if v[4] == DENSE {
        return Some(v.to_vec());
    }
    let mut dense = vec![0u8; DENSE_SIZE];
    dense[..HDR_SIZE].copy_from_slice(&v[..HDR_SIZE]);
    dense[4] = DENSE;
    let (_, regs) = dense.split_at_mut(HDR_SIZE);
    let ok = walk_sparse(v, |first, len, val| {
        if val > 0 {
            for i in first..first + len {
                dense_put(regs, i, val);
            }
        }
    });
    ok.then_some(dense)
}

fn invalidate_cache(v: &mut [u8]) {
    v[15] |= 0x80;
}

/// Raise register `index` of the sparse `v` to `count` (Redis's `hllSparseSet`, step for step,
/// so the bytes are the same): whether it changed; `Err` when `v` is corrupt. Turns `v` dense
/// when `count` is over what a VAL holds or the new opcodes would make it longer than
/// `max_bytes`.
fn sparse_set(v: &mut Vec<u8>, index: usize, count: u8, max_bytes: usize) -> Result<bool, ()> {
    if count > SPARSE_VAL_MAX_VALUE {
        return promote(v, index, count);
    }
    // Step 1: the opcode covering `index`.
    let mut p = HDR_SIZE;
    let mut first = 0usize;
    let mut prev: Option<usize> = None;
    let mut span = 0usize;
    let mut oplen = 1;
    // The hot loop of PFADD on a sparse HLL: the opcode decoded in place, on a slice (indexing a
    // slice is built in, a `Vec`'s is a call, which an unoptimised build makes for every byte).
    let bytes: &[u8] = v;
    let end = bytes.len();
    while p < end {
        let b = bytes[p];
        if b & 0x80 != 0 {
            span = (b & 0x3) as usize + 1;
            oplen = 1;
        } else if b & 0x40 == 0 {
            span = (b & 0x3f) as usize + 1;
            oplen = 1;
        } else {
            let lo = if p + 1 < end { bytes[p + 1] } else { 0 };
            span = ((((b & 0x3f) as usize) << 8) | lo as usize) + 1;
            oplen = 2;
        }
        if index < first + span {
            break;
        }
        prev = Some(p);
        p += oplen;
        first += span;
    }
    if span == 0 || p >= v.len() {
        return Err(());
    }
    let op = v[p];
    let (runlen, curval, _) = opcode(v, p);
    // Steps 2 and 3: the cases, then the split of the opcode into up to three.
    let updated_in_place = if is_val(op) {
        if curval >= count {
            return Ok(false);
        }
        runlen == 1
    } else {
        is_zero(op) && runlen == 1
    };
    if updated_in_place {
        v[p] = val_op(count, 1);
    } else {
        let last = first + span - 1;
        let mut seq = Vec::with_capacity(5);
        if is_zero(op) || is_xzero(op) {
            if index != first {
                push_zeros(&mut seq, index - first);
            }
            seq.push(val_op(count, 1));
            if index != last {
                push_zeros(&mut seq, last - index);
            }
        } else {
            if index != first {
                seq.push(val_op(curval, index - first));
            }
            seq.push(val_op(count, 1));
            if index != last {
                seq.push(val_op(curval, last - index));
            }
        }
        let old_len = if is_xzero(op) { 2 } else { 1 };
        if seq.len() > old_len && v.len() + seq.len() - old_len > max_bytes {
            return promote(v, index, count);
        }
        let end = (p + old_len).min(v.len());
        debug_assert_eq!(oplen, old_len);
        v.splice(p..end, seq);
    }
    // Step 4: merge adjacent VALs of the same value, looking at up to 5 opcodes from `prev`.
    let mut p = prev.unwrap_or(HDR_SIZE);
    let mut scan = 5;
    while p < v.len() && scan > 0 {
        scan -= 1;
        let b = v[p];
        if is_xzero(b) {
            p += 2;
            continue;
        } else if is_zero(b) {
            p += 1;
            continue;
        }
        if p + 1 < v.len() && is_val(v[p + 1]) {
            let (l1, v1, _) = opcode(v, p);
            let (l2, v2, _) = opcode(v, p + 1);
            if v1 == v2 && l1 + l2 <= SPARSE_VAL_MAX_LEN {
                v[p + 1] = val_op(v1, l1 + l2);
                v.remove(p);
                continue;
            }
        }
        p += 1;
    }
    invalidate_cache(v);
    Ok(true)
}

/// Turn the sparse `v` dense, then raise register `index` to `count`.
fn promote(v: &mut Vec<u8>, index: usize, count: u8) -> Result<bool, ()> {
    *v = to_dense(v).ok_or(())?;
    dense_set(&mut v[HDR_SIZE..], index, count);
    Ok(true)
}

/// Add an element to the HLL `v`: whether a register changed; `Err` when `v` is corrupt.
pub(crate) fn add(v: &mut Vec<u8>, ele: &[u8], max_bytes: usize) -> Result<bool, ()> {
    // Every opcode covers a register at least, so a sparse HLL longer than two bytes a register
    // is corrupt: refused before each element would walk it (Redis walks it, and may not notice).
    if v[4] == SPARSE && v.len() > SPARSE_MAX_LEN {
        return Err(());
    }
    let (index, count) = pat_len(ele);
    match v[4] {
        DENSE => Ok(dense_set(&mut v[HDR_SIZE..], index, count)),
        SPARSE => sparse_set(v, index, count, max_bytes),
        _ => Err(()),
    }
}

/// Raise each of `max` to the register of the HLL `v` (Redis's `hllMerge`); `Err` when `v`'s
/// sparse opcodes are corrupt.
pub(crate) fn merge(max: &mut [u8], v: &[u8]) -> Result<(), ()> {
    if v[4] == DENSE {
        let regs = &v[HDR_SIZE..];
        for (c, m) in regs.chunks_exact(3).zip(max.chunks_exact_mut(4)) {
            for (m, r) in m.iter_mut().zip(four_registers(c)) {
                *m = (*m).max(r);
            }
        }
        return Ok(());
    }
    let ok = walk_sparse(v, |first, len, val| {
        for m in &mut max[first..first + len] {
            *m = (*m).max(val);
        }
    });
    ok.then_some(()).ok_or(())
}

fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let mut y = 1.0;
    let mut z = x;
    loop {
        x *= x;
        let z_prime = z;
        z += x * y;
        y += y;
        if z_prime == z {
            return z;
        }
    }
}

fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let mut y = 1.0;
    let mut z = 1.0 - x;
    loop {
        x = x.sqrt();
        let z_prime = z;
        y *= 0.5;
        z -= (1.0 - x) * (1.0 - x) * y;
        if z_prime == z {
            return z / 3.0;
        }
    }
}

/// The cardinality estimated from a histogram of register values (Ertl's estimator, as Redis
/// computes it).
fn estimate(histo: &[u32; 64]) -> u64 {
    let m = REGISTERS as f64;
    let mut z = m * tau((m - f64::from(histo[Q + 1])) / m);
    for j in (1..=Q).rev() {
        z += f64::from(histo[j]);
        z *= 0.5;
    }
    z += m * sigma(f64::from(histo[0]) / m);
    (ALPHA_INF * m * m / z).round() as u64
}

/// The cardinality of the HLL `v`; `None` when its sparse opcodes are corrupt.
pub(crate) fn count(v: &[u8]) -> Option<u64> {
    let mut histo = [0u32; 64];
    if v[4] == DENSE {
        for c in v[HDR_SIZE..].chunks_exact(3) {
            for r in four_registers(c) {
                histo[r as usize] += 1;
            }
        }
    } else if !walk_sparse(v, |_, len, val| histo[val as usize] += len as u32) {
        return None;
    }
    Some(estimate(&histo))
}

/// The cardinality of registers held one per byte (PFCOUNT of several keys).
fn count_raw(regs: &[u8]) -> u64 {
    let mut histo = [0u32; 64];
    for &r in regs {
        histo[(r & 63) as usize] += 1;
    }
    estimate(&histo)
}

/// `hll-sparse-max-bytes`.
fn sparse_max_bytes(ctx: &Ctx<'_>) -> usize {
    ctx.info.knobs.int("hll-sparse-max-bytes").max(0) as usize
}

/// An HLL key's value and expiry: `Ok(None)` when absent, `Err` the reply already given (another
/// type, or no valid HLL).
type Looked = Result<Option<(Vec<u8>, Option<u64>)>, ()>;

/// Look `key` up as an HLL; `read`: counted as a hit or miss (Redis's lookupKeyRead).
fn lookup(ctx: &mut Ctx<'_>, key: &[u8], read: bool) -> Result<Looked, StoreError> {
    let o = ctx.store.get(key)?;
    if read {
        ctx.info.lookup(key, o.is_some());
    }
    let Some(o) = o else { return Ok(Ok(None)) };
    if o.kind != Kind::String {
        reply::error(ctx.out, WRONGTYPE);
        return Ok(Err(()));
    }
    if !is_hll(o.value) {
        reply::error(ctx.out, NOT_HLL);
        return Ok(Err(()));
    }
    Ok(Ok(Some((o.value.to_vec(), o.expires_at_ms))))
}

/// PFADD key [element ...]
pub(crate) fn pfadd(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let (mut v, expires, created) = match lookup(ctx, args[1], false)? {
        Err(()) => return Ok(Effect::Read),
        Ok(None) => (new_hll(), None, true),
        Ok(Some((v, e))) => (v, e, false),
    };
    let max = sparse_max_bytes(ctx);
    let mut updated = created;
    for ele in &args[2..] {
        match add(&mut v, ele, max) {
            Ok(changed) => updated |= changed,
            Err(()) => return fail(ctx, INVALID_OBJ),
        }
    }
    if !updated {
        reply::int(ctx.out, 0);
        return Ok(Effect::Read);
    }
    invalidate_cache(&mut v);
    ctx.store.put(args[1], Kind::String, &v, expires)?;
    ctx.notify(nc::STRING, "pfadd", args[1]);
    reply::int(ctx.out, 1);
    Ok(Effect::Wrote)
}

/// PFCOUNT key [key ...]: one key's count (cached in its header, which is written when it was
/// stale, and the command replicated), or the count of the union of several.
pub(crate) fn pfcount(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    if args.len() > 2 {
        let mut max = vec![0u8; REGISTERS];
        for key in &args[1..] {
            match lookup(ctx, key, true)? {
                Err(()) => return Ok(Effect::Read),
                Ok(None) => {}
                Ok(Some((v, _))) => {
                    if merge(&mut max, &v).is_err() {
                        return fail(ctx, INVALID_OBJ);
                    }
                }
            }
        }
        reply::int(ctx.out, count_raw(&max) as i64);
        return Ok(Effect::Read);
    }
    let (mut v, expires) = match lookup(ctx, args[1], true)? {
        Err(()) => return Ok(Effect::Read),
        Ok(None) => {
            reply::int(ctx.out, 0);
            return Ok(Effect::Read);
        }
        Ok(Some(found)) => found,
    };
    if v[15] & 0x80 == 0 {
        let card = u64::from_le_bytes(v[8..16].try_into().unwrap_or_default());
        reply::int(ctx.out, card as i64);
        return Ok(Effect::Read);
    }
    let Some(card) = count(&v) else {
        return fail(ctx, INVALID_OBJ);
    };
    v[8..16].copy_from_slice(&card.to_le_bytes());
    ctx.store.put(args[1], Kind::String, &v, expires)?;
    // Redis replicates a PFCOUNT that wrote its cache (the value changed).
    ctx.session.force_propagate = ctx.session.replicating;
    reply::int(ctx.out, card as i64);
    Ok(Effect::Wrote)
}

/// PFMERGE destkey [sourcekey ...]: the union of the sources (and of the destination itself)
/// into the destination, dense when any of them is.
pub(crate) fn pfmerge(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let mut max = vec![0u8; REGISTERS];
    let mut use_dense = false;
    let mut dest = None;
    for (j, key) in args[1..].iter().enumerate() {
        match lookup(ctx, key, true)? {
            Err(()) => return Ok(Effect::Read),
            Ok(None) => {}
            Ok(Some((v, e))) => {
                use_dense |= v[4] == DENSE;
                if merge(&mut max, &v).is_err() {
                    return fail(ctx, INVALID_OBJ);
                }
                if j == 0 {
                    dest = Some((v, e));
                }
            }
        }
    }
    let (mut v, expires) = dest.unwrap_or_else(|| (new_hll(), None));
    if use_dense {
        match to_dense(&v) {
            Some(d) => v = d,
            None => return fail(ctx, INVALID_OBJ),
        }
    }
    let max_bytes = sparse_max_bytes(ctx);
    for (j, &m) in max.iter().enumerate() {
        if m == 0 {
            continue;
        }
        if v[4] == DENSE {
            dense_set(&mut v[HDR_SIZE..], j, m);
        } else {
            // Redis ignores what this answers: the sources were checked.
            let _ = sparse_set(&mut v, j, m, max_bytes);
        }
    }
    invalidate_cache(&mut v);
    ctx.store.put(args[1], Kind::String, &v, expires)?;
    ctx.notify(nc::STRING, "pfadd", args[1]);
    reply::ok(ctx.out);
    Ok(Effect::Wrote)
}

/// PFDEBUG GETREG|DECODE|ENCODING|TODENSE key
pub(crate) fn pfdebug(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let sub = args[1];
    let (v, expires) = match lookup(ctx, args[2], false)? {
        Err(()) => return Ok(Effect::Read),
        Ok(None) => return fail(ctx, "ERR The specified key does not exist"),
        Ok(Some(found)) => found,
    };
    let upper = sub.to_ascii_uppercase();
    match upper.as_slice() {
        b"GETREG" | b"TODENSE" => {
            let converted = v[4] == SPARSE;
            let dense = if converted {
                match to_dense(&v) {
                    Some(d) => {
                        ctx.store.put(args[2], Kind::String, &d, expires)?;
                        d
                    }
                    None => return fail(ctx, INVALID_OBJ),
                }
            } else {
                v
            };
            if upper == b"TODENSE" {
                reply::int(ctx.out, converted as i64);
            } else {
                reply::array(ctx.out, REGISTERS);
                for i in 0..REGISTERS {
                    reply::int(ctx.out, i64::from(dense_get(&dense[HDR_SIZE..], i)));
                }
            }
            Ok(if converted {
                Effect::Wrote
            } else {
                Effect::Read
            })
        }
        b"DECODE" => {
            if v[4] != SPARSE {
                return fail(ctx, "ERR HLL encoding is not sparse");
            }
            let mut text = String::new();
            let mut p = HDR_SIZE;
            while p < v.len() {
                let (runlen, val, oplen) = opcode(&v, p);
                let b = v[p];
                if is_zero(b) {
                    text.push_str(&format!("z:{runlen} "));
                } else if is_xzero(b) {
                    text.push_str(&format!("Z:{runlen} "));
                } else {
                    text.push_str(&format!("v:{val},{runlen} "));
                }
                p += oplen;
            }
            reply::bulk(ctx.out, text.trim_matches(' ').as_bytes());
            Ok(Effect::Read)
        }
        b"ENCODING" => {
            reply::simple(ctx.out, if v[4] == DENSE { "dense" } else { "sparse" });
            Ok(Effect::Read)
        }
        _ => fail(
            ctx,
            &format!(
                "ERR Unknown PFDEBUG subcommand '{}'",
                String::from_utf8_lossy(sub)
            ),
        ),
    }
}

/// Redis's PFSELFTEST: the dense registers keep what is set in them, and dense and sparse HLLs
/// fed the same elements agree and stay within the expected error up to 10 million elements.
pub(crate) fn pfselftest(ctx: &mut Ctx<'_>, _args: &[&[u8]]) -> Result<Effect, StoreError> {
    let max_bytes = sparse_max_bytes(ctx);
    match self_test(max_bytes, 10_000_000) {
        Ok(()) => reply::ok(ctx.out),
        Err(e) => reply::error(ctx.out, &e),
    }
    Ok(Effect::Read)
}

/// The self test over `elements` elements: `Err` is the TESTFAILED reply.
fn self_test(max_bytes: usize, elements: u64) -> Result<(), String> {
    let mut rng = rand::rng();
    let mut dense = vec![0u8; DENSE_SIZE];
    dense[..4].copy_from_slice(b"HYLL");
    let mut want = vec![0u8; REGISTERS];
    for _ in 0..1000 {
        for (i, w) in want.iter_mut().enumerate() {
            *w = rng.random::<u8>() & REGISTER_MAX;
            dense_put(&mut dense[HDR_SIZE..], i, *w);
        }
        for (i, &w) in want.iter().enumerate() {
            let got = dense_get(&dense[HDR_SIZE..], i);
            if got != w {
                return Err(format!(
                    "TESTFAILED Register {i} should be {w} but is {got}"
                ));
            }
        }
    }
    dense[HDR_SIZE..].fill(0);
    let mut sparse = new_hll();
    let relerr = 1.04 / (REGISTERS as f64).sqrt();
    let mut checkpoint: u64 = 1;
    let seed: u64 = rng.random();
    for j in 1..=elements {
        let ele = (j ^ seed).to_le_bytes();
        let (index, c) = pat_len(&ele);
        dense_set(&mut dense[HDR_SIZE..], index, c);
        if add(&mut sparse, &ele, max_bytes).is_err() {
            return Err("TESTFAILED sparse HLL corrupted".into());
        }
        if j != checkpoint {
            continue;
        }
        if j < (max_bytes / 2) as u64 && sparse[4] != SPARSE {
            return Err("TESTFAILED sparse encoding not used".into());
        }
        let card = count(&dense).unwrap_or(0);
        if Some(card) != count(&sparse) {
            return Err("TESTFAILED dense/sparse disagree".into());
        }
        let abserr = checkpoint.abs_diff(card);
        let maxerr = if j == 10 {
            1
        } else {
            (relerr * 6.0 * checkpoint as f64).ceil() as u64
        };
        if abserr > maxerr {
            return Err(format!(
                "TESTFAILED Too big error. card:{checkpoint} abserr:{abserr}"
            ));
        }
        checkpoint *= 10;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdb::Db;

    /// `PFADD key` of `elements` as one command.
    fn pfadd(db: &mut Db, key: &str, elements: impl Iterator<Item = String>) -> String {
        let elements: Vec<String> = elements.collect();
        let mut args: Vec<&[u8]> = vec![b"PFADD", key.as_bytes()];
        args.extend(elements.iter().map(|e| e.as_bytes()));
        String::from_utf8(db.run(&args)).unwrap()
    }

    /// The value under `key` (GET's bulk without its framing).
    fn value(db: &mut Db, key: &str) -> Vec<u8> {
        let r = db.run(&[b"GET", key.as_bytes()]);
        let body = r.iter().position(|&b| b == b'\n').unwrap() + 1;
        r[body..r.len() - 2].to_vec()
    }

    fn sha1(db: &mut Db, key: &str) -> String {
        sha1_smol::Sha1::from(value(db, key)).digest().to_string()
    }

    /// The values redis-server 7.0.15 holds after the same commands, byte for byte (their SHA-1
    /// from `redis.sha1hex(redis.call('get', key))`), and the counts it answers.
    #[test]
    fn values_are_redis_server_s_bytes() {
        let mut db = Db::new();
        let nums = |a: u32, b: u32| (a..=b).map(|n| n.to_string());
        assert_eq!(db.cmd("PFADD h a b c"), ":1\r\n");
        assert_eq!(
            value(&mut db, "h"),
            b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\x80`\xf3\x80P\xb1\x84K\xfb\x80BZ"
        );
        assert_eq!(db.cmd("PFCOUNT h"), ":3\r\n");
        assert_eq!(
            value(&mut db, "h"),
            b"HYLL\x01\0\0\0\x03\0\0\0\0\0\0\0`\xf3\x80P\xb1\x84K\xfb\x80BZ"
        );
        assert_eq!(db.cmd("PFADD e "), ":1\r\n");
        assert_eq!(
            value(&mut db, "e"),
            b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\x80W1\x84h\xcc"
        );
        pfadd(&mut db, "h2", nums(0, 199));
        assert_eq!(db.cmd("STRLEN h2"), ":507\r\n");
        assert_eq!(
            sha1(&mut db, "h2"),
            "c002c474afba2eeec360b80c52d1593fd80f31c0"
        );
        assert_eq!(db.cmd("PFCOUNT h2"), ":201\r\n");
        assert_eq!(
            sha1(&mut db, "h2"),
            "744267d5f216b4566adc708d7d24c63cfa6e2fd3"
        );
        assert!(db.cmd("PFDEBUG DECODE h2").starts_with("$"), "sparse");
        pfadd(&mut db, "h3", nums(0, 4999));
        assert_eq!(db.cmd("PFDEBUG ENCODING h3"), "+dense\r\n");
        assert_eq!(
            sha1(&mut db, "h3"),
            "3fa160b43f67d7e004731fa9d341262846fbaf66"
        );
        assert_eq!(db.cmd("PFCOUNT h3"), ":4985\r\n");
        assert_eq!(
            sha1(&mut db, "h3"),
            "f9b87ee26d83c37a30be2996606b03633370805f"
        );
        let mut h4: Vec<String> = nums(100, 399).collect();
        h4.extend(["x", "y", "z"].map(String::from));
        pfadd(&mut db, "h4", h4.into_iter());
        assert!(db
            .cmd("PFDEBUG DECODE h4")
            .contains("z:12 v:3,1 Z:103 v:3,1 Z:71 v:5,1 z:29 v:1,1 z:7 v:2,1 z:15 v:4,1"));
        assert_eq!(db.cmd("PFMERGE m h2 h4"), "+OK\r\n");
        assert_eq!(db.cmd("STRLEN m"), ":883\r\n");
        assert_eq!(
            sha1(&mut db, "m"),
            "ac85c5e72272879cca09419aa6c6f70db1869906"
        );
        assert_eq!(db.cmd("PFCOUNT m"), ":405\r\n");
        assert_eq!(db.cmd("PFCOUNT h2 h3 h4"), ":4989\r\n");
        assert_eq!(db.cmd("PFMERGE d h4 h3"), "+OK\r\n");
        assert_eq!(
            sha1(&mut db, "d"),
            "dc050a64ebae625a9a5b3c93a306039334131776"
        );
        assert_eq!(db.cmd("PFCOUNT d"), ":4989\r\n");
        assert_eq!(db.cmd("TYPE d"), "+string\r\n");
        assert_eq!(db.cmd("OBJECT ENCODING h"), "$3\r\nraw\r\n");
        assert_eq!(
            db.cmd("PFDEBUG NOPE h"),
            "-ERR Unknown PFDEBUG subcommand 'NOPE'\r\n"
        );
        assert_eq!(
            db.cmd("PFDEBUG GETREG missing"),
            "-ERR The specified key does not exist\r\n"
        );
        assert_eq!(
            db.cmd("PFDEBUG DECODE h3"),
            "-ERR HLL encoding is not sparse\r\n"
        );
        assert_eq!(db.cmd("PFDEBUG TODENSE h"), ":1\r\n");
        assert_eq!(db.cmd("PFDEBUG TODENSE h"), ":0\r\n");
        assert_eq!(db.cmd("STRLEN h"), format!(":{DENSE_SIZE}\r\n"));
    }

    #[test]
    fn dense_registers_keep_their_values() {
        let mut regs = vec![0u8; DENSE_SIZE - HDR_SIZE];
        for i in 0..REGISTERS {
            dense_put(&mut regs, i, (i % 64) as u8);
        }
        for i in 0..REGISTERS {
            assert_eq!(dense_get(&regs, i), (i % 64) as u8, "{i}");
        }
    }

    #[test]
    fn registers_read_four_at_a_time_as_one_at_a_time() {
        let mut regs = vec![0u8; DENSE_SIZE - HDR_SIZE];
        for i in 0..REGISTERS {
            dense_put(&mut regs, i, ((i * 37) % 64) as u8);
        }
        for (k, c) in regs.chunks_exact(3).enumerate() {
            let four = four_registers(c);
            for (j, r) in four.into_iter().enumerate() {
                assert_eq!(r, dense_get(&regs, 4 * k + j));
            }
        }
    }

    #[test]
    fn self_test_passes() {
        assert_eq!(self_test(3000, 100_000), Ok(()));
    }

    #[test]
    fn sparse_and_dense_agree() {
        let mut sparse = new_hll();
        let mut dense = to_dense(&sparse).unwrap();
        for n in 0..2000u32 {
            let e = n.to_string();
            add(&mut sparse, e.as_bytes(), 3000).unwrap();
            add(&mut dense, e.as_bytes(), 3000).unwrap();
            if n % 97 == 0 {
                assert_eq!(count(&sparse), count(&dense), "{n}");
                assert_eq!(
                    to_dense(&sparse).unwrap()[HDR_SIZE..],
                    dense[HDR_SIZE..],
                    "{n}"
                );
            }
        }
        assert_eq!(sparse[4], DENSE, "promoted past 3000 bytes");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
        /// Any bytes after a sparse or dense header: counting, merging, making dense and adding
        /// answer or refuse, never panic, and an add that succeeds leaves a valid HLL.
        #[test]
        fn any_body_is_answered_or_refused(
            dense in proptest::bool::ANY,
            body in proptest::collection::vec(proptest::num::u8::ANY, 0..600),
            elements in proptest::collection::vec(proptest::num::u32::ANY, 0..20),
        ) {
            let mut v = b"HYLL".to_vec();
            v.extend_from_slice(&[if dense { DENSE } else { SPARSE }, 0, 0, 0]);
            v.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0x80]);
            v.extend_from_slice(&body);
            if dense {
                v.resize(DENSE_SIZE, 0);
            }
            let mut max = vec![0u8; REGISTERS];
            let merged = merge(&mut max, &v).is_ok();
            proptest::prop_assert_eq!(count(&v).is_some(), merged);
            proptest::prop_assert_eq!(to_dense(&v).is_some(), merged);
            for e in elements {
                if add(&mut v, &e.to_le_bytes(), 3000).is_err() {
                    break;
                }
                proptest::prop_assert!(is_hll(&v));
            }
        }
    }

    #[test]
    fn corrupt_values_are_refused() {
        let mut db = Db::new();
        db.cmd("PFADD h a b c");
        db.cmd("APPEND h hello");
        assert_eq!(db.cmd("PFCOUNT h"), format!("-{INVALID_OBJ}\r\n"));
        db.cmd("SET h x");
        assert_eq!(db.cmd("PFADD h a"), format!("-{NOT_HLL}\r\n"));
        db.cmd("RPUSH l a");
        assert_eq!(db.cmd("PFCOUNT l"), format!("-{WRONGTYPE}\r\n"));
        // XZERO opcodes whose runs add up past every register, then a VAL: no overflow.
        let mut v = b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\0".to_vec();
        for _ in 0..2000 {
            v.extend_from_slice(&[0x7f, 0xff]);
        }
        v.push(0xff);
        db.run(&[b"SET", b"c", &v]);
        assert_eq!(db.cmd("PFCOUNT c c"), format!("-{INVALID_OBJ}\r\n"));
        assert_eq!(db.cmd("PFDEBUG GETREG c"), format!("-{INVALID_OBJ}\r\n"));
        assert_eq!(db.cmd("PFADD c x y z"), format!("-{INVALID_OBJ}\r\n"));
        // Longer than any valid sparse HLL: refused before an element walks it.
        let mut long = b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\x80".to_vec();
        long.resize(HDR_SIZE + 2 * REGISTERS + 1, 0x80);
        db.run(&[b"SET", b"long", &long]);
        assert_eq!(db.cmd("PFADD long a"), format!("-{INVALID_OBJ}\r\n"));
        // A truncated XZERO at the end, and an empty body.
        db.run(&[b"SET", b"t", b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\x80\x7f"]);
        assert_eq!(db.cmd("PFCOUNT t"), format!("-{INVALID_OBJ}\r\n"));
        db.run(&[b"SET", b"e", b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\x80"]);
        assert_eq!(db.cmd("PFADD e a"), format!("-{INVALID_OBJ}\r\n"));
        assert_eq!(db.cmd("PFCOUNT e"), format!("-{INVALID_OBJ}\r\n"));
    }
}
