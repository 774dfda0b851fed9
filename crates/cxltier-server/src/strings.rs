//! The string commands: GET, SET and its kin, MGET, MSET, INCR and DECR, APPEND, GETRANGE,
//! SETRANGE, GETDEL, GETEX, GETSET, SETNX, MSETNX, STRLEN, INCRBYFLOAT, LCS and the bit
//! operations, answered (errors included, word for word) as Redis 7.0 answers them.

use cxltier_store::{Kind, StoreError};

use crate::context::{
    arity, expire_at_ms, fail, invalid_expire, now_ms, parse_i64, Ctx, Effect, NOT_INT, SYNTAX,
    WRONGTYPE,
};
use crate::notify::class as nc;
use crate::numbers::{format_f64, parse_f64};
use crate::resp::reply;

use crate::limits::MAX_STRING;
const TOO_BIG: &str = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";
const BAD_BIT_OFFSET: &str = "ERR bit offset is not an integer or out of range";

/// A string key's value and expiry; `Err(())` when the key holds another type.
type Read = Result<Option<(Vec<u8>, Option<u64>)>, ()>;

/// A `read` command's lookup counts as a hit or miss; a write's is neither (Redis's
/// lookupKeyWrite).
fn read(ctx: &mut Ctx<'_>, key: &[u8], read: bool) -> Result<Read, StoreError> {
    let o = ctx.store.get(key)?;
    if read {
        ctx.info.lookup(key, o.is_some());
    }
    Ok(match o {
        None => Ok(None),
        Some(o) if o.kind != Kind::String => Err(()),
        Some(o) => Ok(Some((o.value.to_vec(), o.expires_at_ms))),
    })
}

/// Whether a string of `len` bytes may be stored: Redis's limit, then the server's own
/// `--max-object`, named so that the fix is plain.
fn too_long(ctx: &mut Ctx<'_>, len: u64) -> Option<Result<Effect, StoreError>> {
    if len > MAX_STRING {
        return Some(fail(ctx, TOO_BIG));
    }
    let max = ctx.store.max_object() as u64;
    if len > max {
        return Some(fail(
            ctx,
            &format!(
                "ERR string of {len} bytes exceeds the server's largest value ({max} bytes): restart cxltier serve with a larger --max-object"
            ),
        ));
    }
    None
}

/// Redis's clamp of a `[start, end]` range (both inclusive, negatives from the end) over `len`
/// units; `None` for an empty range.
pub(crate) fn clamp_range(mut start: i64, mut end: i64, len: i64) -> Option<(usize, usize)> {
    if start < 0 && end < 0 && start > end {
        return None;
    }
    if start < 0 {
        start += len;
    }
    if end < 0 {
        end += len;
    }
    start = start.max(0);
    end = end.max(0);
    if end >= len {
        end = len - 1;
    }
    if start > end || len == 0 {
        return None;
    }
    Some((start as usize, end as usize))
}

/// The length of the string under `key` without reading it (0 when absent), counted as a
/// lookup by a `read` command (a write's is neither a hit nor a miss, as in Redis); `Err(())`
/// when the key holds another type.
fn string_len(ctx: &mut Ctx<'_>, key: &[u8], read: bool) -> Result<Result<u64, ()>, StoreError> {
    match ctx.store.strlen(key) {
        Ok(len) => {
            if read {
                ctx.info.lookup(key, len.is_some());
            }
            Ok(Ok(len.unwrap_or(0)))
        }
        Err(StoreError::WrongType { .. }) => {
            if read {
                ctx.info.lookup(key, true);
            }
            Ok(Err(()))
        }
        Err(e) => Err(e),
    }
}

// APPEND, GETRANGE, SETRANGE, STRLEN, GETBIT and SETBIT go through the store's range calls: on
// a string kept in pieces they read or write the pieces concerned, never the whole value.

pub(crate) fn append(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let Ok(len) = string_len(ctx, args[1], false)? else {
        return fail(ctx, WRONGTYPE);
    };
    if let Some(e) = too_long(ctx, len + args[2].len() as u64) {
        return e;
    }
    let len = ctx.store.append(args[1], args[2])?;
    ctx.notify(nc::STRING, "append", args[1]);
    reply::int(ctx.out, len as i64);
    Ok(Effect::Wrote)
}

pub(crate) fn getrange(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let (Some(start), Some(end)) = (parse_i64(args[2]), parse_i64(args[3])) else {
        return fail(ctx, NOT_INT);
    };
    let Ok(len) = string_len(ctx, args[1], true)? else {
        return fail(ctx, WRONGTYPE);
    };
    match clamp_range(start, end, len as i64) {
        Some((s, e)) => {
            let bytes = ctx
                .store
                .get_range(args[1], s as u64, (e - s + 1) as u64)?
                .unwrap_or_default();
            reply::bulk(ctx.out, &bytes);
        }
        None => reply::bulk(ctx.out, b""),
    }
    Ok(Effect::Read)
}

pub(crate) fn setrange(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let Some(offset) = parse_i64(args[2]) else {
        return fail(ctx, NOT_INT);
    };
    if offset < 0 {
        return fail(ctx, "ERR offset is out of range");
    }
    let patch = args[3];
    let Ok(len) = string_len(ctx, args[1], false)? else {
        return fail(ctx, WRONGTYPE);
    };
    // Redis: an empty patch changes nothing (and creates no key).
    if patch.is_empty() {
        reply::int(ctx.out, len as i64);
        return Ok(Effect::Read);
    }
    if let Some(e) = too_long(ctx, offset as u64 + patch.len() as u64) {
        return e;
    }
    let len = ctx.store.set_range(args[1], offset as u64, patch)?;
    ctx.notify(nc::STRING, "setrange", args[1]);
    reply::int(ctx.out, len as i64);
    Ok(Effect::Wrote)
}

pub(crate) fn getdel(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    match read(ctx, args[1], true)? {
        Err(()) => fail(ctx, WRONGTYPE),
        Ok(None) => {
            reply::null(ctx.out, ctx.session.proto);
            Ok(Effect::Read)
        }
        Ok(Some((v, _))) => {
            ctx.store.delete(args[1])?;
            // Replicated as the delete it is (Redis: DEL, or UNLINK with lazyfree-lazy-user-del).
            let verb: &[u8] = if ctx.info.knobs.get("lazyfree-lazy-user-del") == Some("yes") {
                b"unlink"
            } else {
                b"del"
            };
            ctx.session
                .propagate_as(|| vec![vec![verb.to_vec(), args[1].to_vec()]]);
            reply::bulk(ctx.out, &v);
            Ok(Effect::Wrote)
        }
    }
}

/// GETEX key [EX s | PX ms | EXAT s | PXAT ms | PERSIST]
pub(crate) fn getex(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    // None: leave the TTL; Some(None): PERSIST; Some(Some(at)): a new expiry.
    let mut change: Option<Option<i64>> = None;
    let mut i = 2;
    while i < args.len() {
        let opt = args[i].to_ascii_uppercase();
        match opt.as_slice() {
            b"PERSIST" if change.is_none() => change = Some(None),
            b"EX" | b"PX" | b"EXAT" | b"PXAT" if change.is_none() && i + 1 < args.len() => {
                let Some(t) = parse_i64(args[i + 1]) else {
                    return fail(ctx, NOT_INT);
                };
                let o = opt.as_slice();
                let at = (t > 0)
                    .then(|| expire_at_ms(t, o == b"EX" || o == b"EXAT", o == b"EX" || o == b"PX"))
                    .flatten();
                let Some(at) = at else {
                    invalid_expire(ctx.out, "getex");
                    return Ok(Effect::Read);
                };
                change = Some(Some(at));
                i += 1;
            }
            _ => return fail(ctx, SYNTAX),
        }
        i += 1;
    }
    let (value, expires) = match read(ctx, args[1], true)? {
        Err(()) => return fail(ctx, WRONGTYPE),
        Ok(None) => {
            reply::null(ctx.out, ctx.session.proto);
            return Ok(Effect::Read);
        }
        Ok(Some(v)) => v,
    };
    let effect = match change {
        None => Effect::Read,
        // A time already past deletes the key, as EXPIRE does; the value is still the answer.
        Some(Some(at)) if at <= now_ms() as i64 => {
            ctx.store.delete(args[1])?;
            ctx.session
                .propagate_as(|| vec![crate::context::expired_delete_op(ctx.info, args[1])]);
            Effect::Wrote
        }
        // Replicated as `PEXPIREAT key ms` (Redis 7.0's getexCommand).
        Some(Some(at)) => {
            ctx.store.set_expiry(args[1], Some(at as u64))?;
            ctx.session.propagate_as(|| {
                vec![vec![
                    b"pexpireat".to_vec(),
                    args[1].to_vec(),
                    at.to_string().into_bytes(),
                ]]
            });
            // Redis: `expire` for a new TTL.
            ctx.notify(nc::GENERIC, "expire", args[1]);
            Effect::Wrote
        }
        // PERSIST: a change (replicated as `PERSIST key`) only when the key had a TTL.
        Some(None) => {
            if expires.is_some() {
                ctx.store.set_expiry(args[1], None)?;
                ctx.session
                    .propagate_as(|| vec![vec![b"persist".to_vec(), args[1].to_vec()]]);
                // Redis: `persist` only when a TTL was removed.
                ctx.notify(nc::GENERIC, "persist", args[1]);
            }
            Effect::Wrote
        }
    };
    reply::bulk(ctx.out, &value);
    Ok(effect)
}

pub(crate) fn getset(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let old = match read(ctx, args[1], true)? {
        Err(()) => return fail(ctx, WRONGTYPE),
        Ok(old) => old,
    };
    // Like SET: the new value has no TTL (and it is replicated as SET).
    ctx.store.put(args[1], Kind::String, args[2], None)?;
    ctx.session
        .propagate_as(|| vec![vec![b"set".to_vec(), args[1].to_vec(), args[2].to_vec()]]);
    ctx.notify(nc::STRING, "set", args[1]);
    match old {
        Some((v, _)) => reply::bulk(ctx.out, &v),
        None => reply::null(ctx.out, ctx.session.proto),
    }
    Ok(Effect::Wrote)
}

pub(crate) fn setnx(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    if ctx.store.contains(args[1]) {
        reply::int(ctx.out, 0);
        return Ok(Effect::Read);
    }
    ctx.store.put(args[1], Kind::String, args[2], None)?;
    ctx.notify(nc::STRING, "set", args[1]);
    reply::int(ctx.out, 1);
    Ok(Effect::Wrote)
}

pub(crate) fn msetnx(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    if args.len() % 2 == 0 {
        return fail(ctx, "ERR wrong number of arguments for 'msetnx' command");
    }
    if args[1..].chunks(2).any(|kv| ctx.store.contains(kv[0])) {
        reply::int(ctx.out, 0);
        return Ok(Effect::Read);
    }
    for kv in args[1..].chunks(2) {
        ctx.store.put(kv[0], Kind::String, kv[1], None)?;
        ctx.notify(nc::STRING, "set", kv[0]);
    }
    reply::int(ctx.out, 1);
    Ok(Effect::Wrote)
}

pub(crate) fn strlen(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let Ok(len) = string_len(ctx, args[1], true)? else {
        return fail(ctx, WRONGTYPE);
    };
    reply::int(ctx.out, len as i64);
    Ok(Effect::Read)
}

pub(crate) fn incrbyfloat(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let (current, expires) = match read(ctx, args[1], false)? {
        Err(()) => return fail(ctx, WRONGTYPE),
        Ok(None) => (0.0, None),
        Ok(Some((v, e))) => match parse_f64(&v) {
            Some(f) => (f, e),
            None => return fail(ctx, "ERR value is not a valid float"),
        },
    };
    let Some(by) = parse_f64(args[2]) else {
        return fail(ctx, "ERR value is not a valid float");
    };
    let next = current + by;
    if !next.is_finite() {
        return fail(ctx, "ERR increment would produce NaN or Infinity");
    }
    let text = format_f64(next);
    ctx.store
        .put(args[1], Kind::String, text.as_bytes(), expires)?;
    // Replicated as the value it made, so that a replica does not compute it again with its
    // own rounding (Redis: `SET key value KEEPTTL`).
    ctx.session.propagate_as(|| {
        vec![vec![
            b"set".to_vec(),
            args[1].to_vec(),
            text.as_bytes().to_vec(),
            b"KEEPTTL".to_vec(),
        ]]
    });
    ctx.notify(nc::STRING, "incrbyfloat", args[1]);
    reply::bulk(ctx.out, text.as_bytes());
    Ok(Effect::Wrote)
}

/// A bit offset: 0 to 2^32 - 1 (512 MB of bits), as Redis allows.
fn bit_offset(b: &[u8]) -> Option<u64> {
    parse_i64(b)
        .filter(|&o| (0..(MAX_STRING * 8) as i64).contains(&o))
        .map(|o| o as u64)
}

pub(crate) fn setbit(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let Some(offset) = bit_offset(args[2]) else {
        return fail(ctx, BAD_BIT_OFFSET);
    };
    let on = match args[3] {
        b"0" => false,
        b"1" => true,
        _ => return fail(ctx, "ERR bit is not an integer or out of range"),
    };
    if string_len(ctx, args[1], false)?.is_err() {
        return fail(ctx, WRONGTYPE);
    }
    let byte = offset / 8;
    if let Some(e) = too_long(ctx, byte + 1) {
        return e;
    }
    let held = ctx.store.get_range(args[1], byte, 1)?;
    let old = held.as_ref().and_then(|b| b.first().copied()).unwrap_or(0);
    let mask = 0x80u8 >> (offset % 8);
    let new = if on { old | mask } else { old & !mask };
    // Redis 7.0 changes nothing (and counts no change) when the bit holds the value already
    // and the string need not grow.
    if new == old && held.is_some_and(|b| !b.is_empty()) {
        reply::int(ctx.out, (old & mask != 0) as i64);
        return Ok(Effect::Read);
    }
    ctx.store.set_range(args[1], byte, &[new])?;
    ctx.notify(nc::STRING, "setbit", args[1]);
    reply::int(ctx.out, (old & mask != 0) as i64);
    Ok(Effect::Wrote)
}

pub(crate) fn getbit(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let Some(offset) = bit_offset(args[2]) else {
        return fail(ctx, BAD_BIT_OFFSET);
    };
    if string_len(ctx, args[1], true)?.is_err() {
        return fail(ctx, WRONGTYPE);
    }
    let byte = ctx
        .store
        .get_range(args[1], offset / 8, 1)?
        .and_then(|b| b.first().copied())
        .unwrap_or(0);
    reply::int(ctx.out, (byte & (0x80 >> (offset % 8)) != 0) as i64);
    Ok(Effect::Read)
}

/// The bit at `i` (0 the most significant bit of the first byte).
fn bit_at(value: &[u8], i: usize) -> bool {
    value[i / 8] & (0x80 >> (i % 8)) != 0
}

/// `[start end [BYTE|BIT]]` of BITCOUNT and BITPOS: whether BIT was given.
fn unit_is_bit(arg: Option<&&[u8]>) -> Option<bool> {
    match arg {
        None => Some(false),
        Some(u) if u.eq_ignore_ascii_case(b"BYTE") => Some(false),
        Some(u) if u.eq_ignore_ascii_case(b"BIT") => Some(true),
        Some(_) => None,
    }
}

/// BITCOUNT key [start end [BYTE|BIT]]
pub(crate) fn bitcount(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let range = match args.len() {
        2 => None,
        4 | 5 => {
            let (Some(s), Some(e)) = (parse_i64(args[2]), parse_i64(args[3])) else {
                return fail(ctx, NOT_INT);
            };
            let Some(bit) = unit_is_bit(args.get(4)) else {
                return fail(ctx, SYNTAX);
            };
            Some((s, e, bit))
        }
        _ => return fail(ctx, SYNTAX),
    };
    let value = match read(ctx, args[1], true)? {
        Err(()) => return fail(ctx, WRONGTYPE),
        Ok(v) => v.map(|(v, _)| v).unwrap_or_default(),
    };
    let count = match range {
        None => value.iter().map(|b| b.count_ones() as i64).sum(),
        Some((s, e, false)) => match clamp_range(s, e, value.len() as i64) {
            Some((s, e)) => value[s..=e].iter().map(|b| b.count_ones() as i64).sum(),
            None => 0,
        },
        Some((s, e, true)) => match clamp_range(s, e, value.len() as i64 * 8) {
            Some((s, e)) => (s..=e).filter(|&i| bit_at(&value, i)).count() as i64,
            None => 0,
        },
    };
    reply::int(ctx.out, count);
    Ok(Effect::Read)
}

/// BITPOS key bit [start [end [BYTE|BIT]]]
pub(crate) fn bitpos(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let want = match args[2] {
        b"0" => false,
        b"1" => true,
        _ => return fail(ctx, "ERR The bit argument must be 1 or 0."),
    };
    if args.len() > 6 {
        return fail(ctx, SYNTAX);
    }
    let start = match args.get(3) {
        None => 0,
        Some(a) => match parse_i64(a) {
            Some(s) => s,
            None => return fail(ctx, NOT_INT),
        },
    };
    let end = match args.get(4) {
        None => None,
        Some(a) => match parse_i64(a) {
            Some(e) => Some(e),
            None => return fail(ctx, NOT_INT),
        },
    };
    let Some(bit_unit) = unit_is_bit(args.get(5)) else {
        return fail(ctx, SYNTAX);
    };
    let value = match read(ctx, args[1], true)? {
        Err(()) => return fail(ctx, WRONGTYPE),
        Ok(None) => {
            // A missing key is an empty string: no set bit, and the first clear bit at 0.
            reply::int(ctx.out, if want { -1 } else { 0 });
            return Ok(Effect::Read);
        }
        Ok(Some((v, _))) => v,
    };
    let unit = if bit_unit { 8 } else { 1 };
    let len = value.len() as i64 * unit;
    let Some((s, e)) = clamp_range(start, end.unwrap_or(-1), len) else {
        reply::int(ctx.out, -1);
        return Ok(Effect::Read);
    };
    let (first_bit, last_bit) = if bit_unit { (s, e) } else { (s * 8, e * 8 + 7) };
    let found = (first_bit..=last_bit).find(|&i| bit_at(&value, i) == want);
    let pos = match found {
        Some(i) => i as i64,
        // Looking for a clear bit without an end: the string is as if padded with zeros, so
        // the first clear bit is just past the range (Redis's rule).
        None if !want && end.is_none() => last_bit as i64 + 1,
        None => -1,
    };
    reply::int(ctx.out, pos);
    Ok(Effect::Read)
}

/// `LCS key1 key2 [LEN] [IDX] [MINMATCHLEN len] [WITHMATCHLEN]`: the longest common
/// subsequence of two strings, Redis 7.0's dynamic programming table and its walk back (so ties
/// resolve as Redis's do). The table is `(len1 + 1) × (len2 + 1)` counts of 4 bytes, refused,
/// as in Redis, when it would pass `proto-max-bulk-len`.
pub(crate) fn lcs(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    const NOT_STRINGS: &str = "ERR The specified keys must contain string values";
    let (a, b) = match (read(ctx, args[1], true)?, read(ctx, args[2], true)?) {
        (Ok(a), Ok(b)) => (
            a.map(|v| v.0).unwrap_or_default(),
            b.map(|v| v.0).unwrap_or_default(),
        ),
        _ => return fail(ctx, NOT_STRINGS),
    };
    let (mut getlen, mut getidx, mut withmatchlen) = (false, false, false);
    let mut minmatchlen: u64 = 0;
    let mut j = 3;
    while j < args.len() {
        let more = j + 1 < args.len();
        match args[j].to_ascii_uppercase().as_slice() {
            b"IDX" => getidx = true,
            b"LEN" => getlen = true,
            b"WITHMATCHLEN" => withmatchlen = true,
            b"MINMATCHLEN" if more => {
                let Some(n) = parse_i64(args[j + 1]) else {
                    return fail(ctx, NOT_INT);
                };
                minmatchlen = n.max(0) as u64;
                j += 1;
            }
            _ => return fail(ctx, SYNTAX),
        }
        j += 1;
    }
    if getlen && getidx {
        return fail(
            ctx,
            "ERR If you want both the length and indexes, please just use IDX.",
        );
    }
    if a.len() as u64 >= u32::MAX as u64 - 1 || b.len() as u64 >= u32::MAX as u64 - 1 {
        return fail(ctx, "ERR String too long for LCS");
    }
    let (alen, blen) = (a.len(), b.len());
    let cells = (alen as u64 + 1) * (blen as u64 + 1);
    if cells * 4 > ctx.info.proto_max_bulk_len as u64 {
        return fail(
            ctx,
            "ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len",
        );
    }
    let w = blen + 1;
    let mut t = vec![0u32; cells as usize];
    for i in 1..=alen {
        for j in 1..=blen {
            t[i * w + j] = if a[i - 1] == b[j - 1] {
                t[(i - 1) * w + j - 1] + 1
            } else {
                t[(i - 1) * w + j].max(t[i * w + j - 1])
            };
        }
    }
    let total = t[alen * w + blen];
    if getlen {
        reply::int(ctx.out, total as i64);
        return Ok(Effect::Read);
    }
    // Walk back from the end: the subsequence, and its runs as ranges of both strings
    // (`alen` as the start: no run open).
    let mut result = vec![0u8; total as usize];
    let mut ranges: Vec<(usize, usize, usize, usize)> = Vec::new();
    let (mut a_start, mut a_end, mut b_start, mut b_end) = (alen, 0, 0, 0);
    let (mut i, mut j, mut idx) = (alen, blen, total as usize);
    while i > 0 && j > 0 {
        let mut emit = false;
        if a[i - 1] == b[j - 1] {
            result[idx - 1] = a[i - 1];
            if a_start == alen {
                (a_start, a_end, b_start, b_end) = (i - 1, i - 1, j - 1, j - 1);
            } else if a_start == i && b_start == j {
                a_start -= 1;
                b_start -= 1;
            } else {
                emit = true;
            }
            if a_start == 0 || b_start == 0 {
                emit = true;
            }
            idx -= 1;
            i -= 1;
            j -= 1;
        } else {
            if t[(i - 1) * w + j] > t[i * w + j - 1] {
                i -= 1;
            } else {
                j -= 1;
            }
            if a_start != alen {
                emit = true;
            }
        }
        if emit {
            let match_len = a_end.wrapping_sub(a_start).wrapping_add(1);
            if minmatchlen == 0 || match_len as u64 >= minmatchlen {
                ranges.push((a_start, a_end, b_start, b_end));
            }
            a_start = alen;
        }
    }
    if !getidx {
        reply::bulk(ctx.out, &result);
        return Ok(Effect::Read);
    }
    reply::map(ctx.out, ctx.session.proto, 2);
    reply::bulk(ctx.out, b"matches");
    reply::array(ctx.out, ranges.len());
    for (a0, a1, b0, b1) in ranges {
        reply::array(ctx.out, 2 + withmatchlen as usize);
        reply::array(ctx.out, 2);
        reply::int(ctx.out, a0 as i64);
        reply::int(ctx.out, a1 as i64);
        reply::array(ctx.out, 2);
        reply::int(ctx.out, b0 as i64);
        reply::int(ctx.out, b1 as i64);
        if withmatchlen {
            reply::int(ctx.out, (a1 - a0 + 1) as i64);
        }
    }
    reply::bulk(ctx.out, b"len");
    reply::int(ctx.out, total as i64);
    Ok(Effect::Read)
}

pub(crate) fn get(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let o = ctx.store.get(args[1])?;
    ctx.info.lookup(args[1], o.is_some());
    match o {
        None => reply::null(ctx.out, ctx.session.proto),
        Some(o) if o.kind != Kind::String => reply::error(ctx.out, WRONGTYPE),
        Some(o) => reply::bulk(ctx.out, o.value),
    }
    Ok(Effect::Read)
}

pub(crate) fn set(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let mut expiry_given = false;
    let effect = set_command(ctx, args, &mut expiry_given)?;
    // Redis 7.0 replicates a SET with EX/PX/EXAT/PXAT as `SET key value PXAT ms`.
    if expiry_given && effect == Effect::Wrote {
        // From the index: a value written straight to NVMe is not in memory to peek at.
        if let Some(Some(at)) = ctx.store.expiry_of(args[1]) {
            ctx.session
                .propagate_as(|| vec![set_pxat_op(args[1], args[2], at)]);
        }
    }
    Ok(effect)
}

/// `SET key value PXAT ms`: how Redis 7.0 replicates a write of a value with an expiry.
pub(crate) fn set_pxat_op(key: &[u8], value: &[u8], at_ms: u64) -> crate::write_stream::Op {
    vec![
        b"set".to_vec(),
        key.to_vec(),
        value.to_vec(),
        b"PXAT".to_vec(),
        at_ms.to_string().into_bytes(),
    ]
}

fn set_expiring(ctx: &mut Ctx<'_>, args: &[&[u8]], seconds: bool) -> Result<Effect, StoreError> {
    let Some(t) = parse_i64(args[2]) else {
        return fail(ctx, NOT_INT);
    };
    let at = (t > 0).then(|| expire_at_ms(t, seconds, true)).flatten();
    let Some(at) = at else {
        invalid_expire(ctx.out, if seconds { "setex" } else { "psetex" });
        return Ok(Effect::Read);
    };
    ctx.store
        .put(args[1], Kind::String, args[3], Some(at as u64))?;
    ctx.session
        .propagate_as(|| vec![set_pxat_op(args[1], args[3], at as u64)]);
    ctx.notify(nc::STRING, "set", args[1]);
    ctx.notify(nc::GENERIC, "expire", args[1]);
    reply::ok(ctx.out);
    Ok(Effect::Wrote)
}

pub(crate) fn setex(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    set_expiring(ctx, args, true)
}

pub(crate) fn psetex(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    set_expiring(ctx, args, false)
}

pub(crate) fn mget(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    reply::array(ctx.out, args.len() - 1);
    for k in &args[1..] {
        let o = ctx.store.get(k)?;
        ctx.info.lookup(k, o.is_some());
        match o {
            Some(o) if o.kind == Kind::String => reply::bulk(ctx.out, o.value),
            _ => reply::null(ctx.out, ctx.session.proto),
        }
    }
    Ok(Effect::Read)
}

pub(crate) fn mset(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    if args.len() % 2 == 0 {
        arity(ctx.out, args[0]);
        return Ok(Effect::Read);
    }
    for kv in args[1..].chunks(2) {
        ctx.store.put(kv[0], Kind::String, kv[1], None)?;
        ctx.notify(nc::STRING, "set", kv[0]);
    }
    reply::ok(ctx.out);
    Ok(Effect::Wrote)
}

pub(crate) fn incr(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    incr_by(ctx, args[1], 1)
}

pub(crate) fn decr(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    incr_by(ctx, args[1], -1)
}

pub(crate) fn incrby(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    match parse_i64(args[2]) {
        Some(by) => incr_by(ctx, args[1], by),
        None => fail(ctx, NOT_INT),
    }
}

pub(crate) fn decrby(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    match parse_i64(args[2]) {
        Some(by) => match by.checked_neg() {
            Some(by) => incr_by(ctx, args[1], by),
            None => fail(ctx, "ERR decrement would overflow"),
        },
        None => fail(ctx, NOT_INT),
    }
}

fn incr_by(ctx: &mut Ctx<'_>, key: &[u8], by: i64) -> Result<Effect, StoreError> {
    let (current, expires) = match ctx.store.get(key)? {
        None => (0, None),
        Some(o) if o.kind != Kind::String => return fail(ctx, WRONGTYPE),
        Some(o) => match parse_i64(o.value) {
            Some(v) => (v, o.expires_at_ms),
            None => return fail(ctx, NOT_INT),
        },
    };
    let Some(next) = current.checked_add(by) else {
        return fail(ctx, "ERR increment or decrement would overflow");
    };
    let mut digits = itoa::Buffer::new();
    ctx.store
        .put(key, Kind::String, digits.format(next).as_bytes(), expires)?;
    ctx.notify(nc::STRING, "incrby", key);
    reply::int(ctx.out, next);
    Ok(Effect::Wrote)
}

/// SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]
fn set_command(
    ctx: &mut Ctx<'_>,
    args: &[&[u8]],
    expiry_given: &mut bool,
) -> Result<Effect, StoreError> {
    let (store, out, proto) = (&mut *ctx.store, &mut *ctx.out, ctx.session.proto);
    let (mut nx, mut xx, mut get, mut keepttl) = (false, false, false, false);
    let mut expires: Option<u64> = None;
    let mut i = 3;
    while i < args.len() {
        let opt = args[i].to_ascii_uppercase();
        match opt.as_slice() {
            b"NX" if !xx => nx = true,
            b"XX" if !nx => xx = true,
            b"GET" => get = true,
            b"KEEPTTL" if expires.is_none() => keepttl = true,
            b"EX" | b"PX" | b"EXAT" | b"PXAT"
                if expires.is_none() && !keepttl && i + 1 < args.len() =>
            {
                let Some(t) = parse_i64(args[i + 1]) else {
                    reply::error(out, NOT_INT);
                    return Ok(Effect::Read);
                };
                let at = (t > 0)
                    .then(|| {
                        let o = opt.as_slice();
                        expire_at_ms(t, o == b"EX" || o == b"EXAT", o == b"EX" || o == b"PX")
                    })
                    .flatten();
                let Some(at) = at else {
                    invalid_expire(out, "SET");
                    return Ok(Effect::Read);
                };
                expires = Some(at as u64);
                i += 1;
            }
            _ => {
                reply::error(out, SYNTAX);
                return Ok(Effect::Read);
            }
        }
        i += 1;
    }
    // A plain SET needs only whether the key exists (for its notifications), not its value:
    // reading and copying the old value cost every SET an allocation.
    let old = if get || nx || xx || keepttl {
        store
            .get(args[1])?
            .map(|o| (o.kind, o.value.to_vec(), o.expires_at_ms))
    } else {
        None
    };
    // Whether it existed matters beyond NX/XX only for a TTL already past (its notifications).
    let exists = old.is_some() || (expires.is_some() && store.contains(args[1]));
    if get && old.as_ref().is_some_and(|o| o.0 != Kind::String) {
        reply::error(out, WRONGTYPE);
        return Ok(Effect::Read);
    }
    if (nx && exists) || (xx && !exists) {
        match (get, old) {
            (true, Some(o)) => reply::bulk(out, &o.1),
            _ => reply::null(out, proto),
        }
        return Ok(Effect::Read);
    }
    *expiry_given = expires.is_some();
    if keepttl {
        expires = old.as_ref().and_then(|o| o.2);
    }
    store.put(args[1], Kind::String, args[2], expires)?;
    // Redis's setGenericCommand: set, then expire when the command gave a TTL. Whether the
    // time was already past is what the store did with the write (a delete), not a second
    // reading of the clock, which may have ticked since.
    let past = expires.is_some() && !store.holds(args[1]);
    let notify = &mut ctx.info.notify;
    if past && !exists {
        // The store takes a time already past (EXAT/PXAT) as a delete, so the key is not seen
        // created: Redis adds it, and it expires at the next lookup.
        notify.emit(nc::NEW, "new", args[1]);
    }
    notify.emit(nc::STRING, "set", args[1]);
    if expires.is_some() && !keepttl {
        notify.emit(nc::GENERIC, "expire", args[1]);
    }
    if past {
        // Redis's key would be found expired by the next command or its active expiry;
        // here it is gone already, so both are said now (not `del`).
        notify.emit(nc::EXPIRED, "expired", args[1]);
        ctx.info.expired_keys += 1;
    }
    match (get, old) {
        (true, Some(o)) => reply::bulk(out, &o.1),
        (true, None) => reply::null(out, proto),
        _ => reply::ok(out),
    }
    Ok(Effect::Wrote)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdb::{Db, WT};

    #[test]
    fn lcs_answers_as_redis_server() {
        // Replies recorded from redis-server 7.0.15.
        let mut db = Db::new();
        // The server's default limit (the test store's info starts at zero, which refuses any
        // table).
        db.info.proto_max_bulk_len = 512 << 20;
        db.cmd("MSET key1 ohmytext key2 mynewtext");
        db.cmd("RPUSH l a");
        db.replies(&[
            ("LCS key1 key2", "$6\r\nmytext\r\n"),
            ("LCS key1 key2 LEN", ":6\r\n"),
            (
                "LCS key1 key2 IDX MINMATCHLEN 4 WITHMATCHLEN",
                "*4\r\n$7\r\nmatches\r\n*1\r\n*3\r\n*2\r\n:4\r\n:7\r\n*2\r\n:5\r\n:8\r\n:4\r\n$3\r\nlen\r\n:6\r\n",
            ),
            (
                "LCS key1 key2 IDX",
                "*4\r\n$7\r\nmatches\r\n*2\r\n*2\r\n*2\r\n:4\r\n:7\r\n*2\r\n:5\r\n:8\r\n*2\r\n*2\r\n:2\r\n:3\r\n*2\r\n:0\r\n:1\r\n$3\r\nlen\r\n:6\r\n",
            ),
            ("LCS key1 nokey", "$0\r\n\r\n"),
            ("LCS key1 l", "-ERR The specified keys must contain string values\r\n"),
            (
                "LCS key1 key2 IDX LEN",
                "-ERR If you want both the length and indexes, please just use IDX.\r\n",
            ),
            (
                "LCS key1 key2 LEN IDX",
                "-ERR If you want both the length and indexes, please just use IDX.\r\n",
            ),
            ("LCS key1 key2 BOGUS", "-ERR syntax error\r\n"),
        ]);
        db.info.proto_max_bulk_len = 64;
        assert_eq!(
            db.cmd("LCS key1 key2"),
            "-ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len\r\n"
        );
    }

    #[test]
    fn ranges_clamp_like_redis() {
        // (start, end, len) → the inclusive range, from Redis 7.0's getrange/bitcount.
        type Case = (i64, i64, i64, Option<(usize, usize)>);
        let table: &[Case] = &[
            (0, -1, 5, Some((0, 4))),
            (0, 100, 5, Some((0, 4))),
            (-3, -1, 5, Some((2, 4))),
            (-100, -1, 5, Some((0, 4))),
            (-1, -3, 5, None),
            (3, 1, 5, None),
            (0, 0, 0, None),
            (5, 10, 5, None),
            (-1, -1, 5, Some((4, 4))),
            (0, -100, 5, Some((0, 0))),
        ];
        for &(s, e, len, want) in table {
            assert_eq!(clamp_range(s, e, len), want, "{s} {e} {len}");
        }
    }

    #[test]
    fn floats_print_without_noise() {
        assert_eq!(format_f64(10.5 + 0.1), "10.6");
        assert_eq!(format_f64(3.0), "3");
        assert_eq!(format_f64(-0.0), "0");
        assert_eq!(format_f64(5.0e3), "5000");
        assert!(parse_f64(b" 1").is_none());
        assert!(parse_f64(b"nan").is_none());
        assert_eq!(parse_f64(b"1e3"), Some(1000.0));
    }

    #[test]
    fn string_commands_answer_as_redis_does() {
        let mut db = Db::large();
        db.replies(&[
            ("APPEND s foo", ":3\r\n"),
            ("APPEND s bar", ":6\r\n"),
            ("STRLEN s", ":6\r\n"),
            ("STRLEN missing", ":0\r\n"),
            ("GETRANGE s 0 -1", "$6\r\nfoobar\r\n"),
            ("GETRANGE s -3 -1", "$3\r\nbar\r\n"),
            ("GETRANGE s 0 -100", "$1\r\nf\r\n"),
            ("GETRANGE s -1 -3", "$0\r\n\r\n"),
            ("GETRANGE s 4 100", "$2\r\nar\r\n"),
            ("GETRANGE missing 0 -1", "$0\r\n\r\n"),
            (
                "GETRANGE s a 1",
                "-ERR value is not an integer or out of range\r\n",
            ),
            // SETRANGE past the end pads with zero bytes.
            ("SETRANGE r 3 ab", ":5\r\n"),
            ("GET r", "$5\r\n\0\0\0ab\r\n"),
            ("SETRANGE r 1 X", ":5\r\n"),
            ("GET r", "$5\r\n\0X\0ab\r\n"),
            ("SETRANGE none 0 ", ":0\r\n"),
            ("EXISTS none", ":0\r\n"),
            ("SETRANGE r -1 x", "-ERR offset is out of range\r\n"),
            (
                "SETRANGE r 536870911 xx",
                "-ERR string exceeds maximum allowed size (proto-max-bulk-len)\r\n",
            ),
            ("SET g v", "+OK\r\n"),
            ("GETSET g w", "$1\r\nv\r\n"),
            ("GETSET new x", "$-1\r\n"),
            ("GETDEL g", "$1\r\nw\r\n"),
            ("GETDEL g", "$-1\r\n"),
            ("SETNX n 1", ":1\r\n"),
            ("SETNX n 2", ":0\r\n"),
            ("GET n", "$1\r\n1\r\n"),
            ("MSETNX a 1 b 2", ":1\r\n"),
            ("MSETNX b 3 c 4", ":0\r\n"),
            ("EXISTS c", ":0\r\n"),
            (
                "MSETNX a",
                "-ERR wrong number of arguments for 'msetnx' command\r\n",
            ),
            ("SET f 10.5", "+OK\r\n"),
            ("INCRBYFLOAT f 0.1", "$4\r\n10.6\r\n"),
            ("INCRBYFLOAT f -5.6", "$1\r\n5\r\n"),
            ("INCRBYFLOAT nf 5.0e3", "$4\r\n5000\r\n"),
            ("INCRBYFLOAT f x", "-ERR value is not a valid float\r\n"),
            ("INCRBYFLOAT s 1", "-ERR value is not a valid float\r\n"),
        ]);
        // The sum overflows to infinity.
        db.cmd("SET big 1.7e308");
        assert_eq!(
            db.cmd("INCRBYFLOAT big 1.7e308"),
            "-ERR increment would produce NaN or Infinity\r\n"
        );
        db.cmd("HSET h f v");
        db.each_replies(
            &[
                "APPEND h x",
                "GETRANGE h 0 1",
                "STRLEN h",
                "GETDEL h",
                "SETRANGE h 0 x",
            ],
            WT,
        );
    }

    #[test]
    fn getex_sets_and_clears_the_ttl() {
        let mut db = Db::large();
        db.replies(&[
            ("SET k v", "+OK\r\n"),
            ("GETEX k EX 100", "$1\r\nv\r\n"),
            ("TTL k", ":100\r\n"),
            ("GETEX k PERSIST", "$1\r\nv\r\n"),
            ("TTL k", ":-1\r\n"),
            ("GETEX k", "$1\r\nv\r\n"),
            (
                "GETEX k EX 0",
                "-ERR invalid expire time in 'getex' command\r\n",
            ),
            ("GETEX k EX 10 PX 100", "-ERR syntax error\r\n"),
            ("GETEX k FOO", "-ERR syntax error\r\n"),
            ("GETEX missing EX 10", "$-1\r\n"),
            ("GETEX k PXAT 1", "$1\r\nv\r\n"),
            ("EXISTS k", ":0\r\n"),
        ]);
    }

    #[test]
    fn bit_commands_answer_as_redis_does() {
        let mut db = Db::large();
        db.replies(&[
            ("SETBIT b 7 1", ":0\r\n"),
            ("SETBIT b 7 1", ":1\r\n"),
            ("GET b", "$1\r\n\x01\r\n"),
            ("GETBIT b 7", ":1\r\n"),
            ("GETBIT b 6", ":0\r\n"),
            ("GETBIT b 1000", ":0\r\n"),
            (
                "SETBIT b -1 1",
                "-ERR bit offset is not an integer or out of range\r\n",
            ),
            (
                "SETBIT b 4294967296 1",
                "-ERR bit offset is not an integer or out of range\r\n",
            ),
            (
                "SETBIT b 1 2",
                "-ERR bit is not an integer or out of range\r\n",
            ),
            ("SET s foobar", "+OK\r\n"),
            ("BITCOUNT s", ":26\r\n"),
            ("BITCOUNT s 0 0", ":4\r\n"),
            ("BITCOUNT s 1 1", ":6\r\n"),
            ("BITCOUNT s -2 -1", ":7\r\n"),
            ("BITCOUNT s -1 -2", ":0\r\n"),
            ("BITCOUNT s 5 30 BIT", ":17\r\n"),
            ("BITCOUNT s -8 -1 BIT", ":4\r\n"),
            ("BITCOUNT s 0", "-ERR syntax error\r\n"),
            ("BITCOUNT s 0 1 WORD", "-ERR syntax error\r\n"),
            ("BITCOUNT missing", ":0\r\n"),
        ]);
        db.run(&[b"SET", b"p", b"\xff\xf0\x00"]);
        db.replies(&[
            ("BITPOS p 0", ":12\r\n"),
            ("BITPOS p 1", ":0\r\n"),
            ("BITPOS p 1 2", ":-1\r\n"),
            ("BITPOS p 0 1 1", ":12\r\n"),
            ("BITPOS p 1 7 15 BIT", ":7\r\n"),
            ("BITPOS p 2", "-ERR The bit argument must be 1 or 0.\r\n"),
            ("BITPOS missing 1", ":-1\r\n"),
            ("BITPOS missing 0", ":0\r\n"),
        ]);
        // All ones, no end given: the first clear bit is just past the string; with an end, none.
        db.run(&[b"SET", b"ones", b"\xff\xff"]);
        db.replies(&[
            ("BITPOS ones 0", ":16\r\n"),
            ("BITPOS ones 0 0 -1", ":-1\r\n"),
        ]);
    }
}
