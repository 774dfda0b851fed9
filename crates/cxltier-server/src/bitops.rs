//! BITOP and BITFIELD/BITFIELD_RO, answered (errors included, word for word) as Redis 7.0's
//! `bitops.c` answers them. SETBIT, GETBIT, BITCOUNT and BITPOS are with the other string
//! commands (`strings`).
//!
//! BITFIELD reads and writes only the bytes each field spans (the store's range calls), so a
//! field far into a large string costs the field, not the string; a write past the end grows
//! the string with zero bytes once, to the farthest field written, after the same checks as
//! SETBIT (Redis's 512 MB limit, then the server's largest object).

use cxltier_store::{Kind, StoreError};

use crate::context::{fail, Ctx, Effect, NOT_INT, SYNTAX, WRONGTYPE};
use crate::limits::MAX_STRING;
use crate::notify::class as nc;
use crate::resp::reply;

const BAD_BIT_OFFSET: &str = "ERR bit offset is not an integer or out of range";
const BAD_TYPE: &str =
    "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.";

/// Redis's `string2ll`: a decimal integer without spaces, a sign `+` or leading zeros.
fn strict_i64(b: &[u8]) -> Option<i64> {
    let digits = b.strip_prefix(b"-").unwrap_or(b);
    if digits.is_empty()
        || !digits.iter().all(u8::is_ascii_digit)
        || (digits.len() > 1 && digits[0] == b'0')
        || b == b"-0"
    {
        return None;
    }
    std::str::from_utf8(b).ok()?.parse().ok()
}

/// The error for a string that would grow past the server's largest value, as the string
/// commands word it; `None` when `len` bytes fit.
fn too_long(ctx: &Ctx<'_>, len: u64) -> Option<String> {
    let max = ctx.store.max_object() as u64;
    (len > max).then(|| {
        format!(
            "ERR string of {len} bytes exceeds the server's largest value ({max} bytes): restart cxltier serve with a larger --max-object"
        )
    })
}

/// BITOP AND|OR|XOR|NOT destkey key [key ...]: the result's length; an empty result deletes
/// the destination.
pub(crate) fn bitop(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    #[derive(PartialEq)]
    enum Op {
        And,
        Or,
        Xor,
        Not,
    }
    let op = match args[1].to_ascii_uppercase().as_slice() {
        b"AND" => Op::And,
        b"OR" => Op::Or,
        b"XOR" => Op::Xor,
        b"NOT" => Op::Not,
        _ => return fail(ctx, SYNTAX),
    };
    if op == Op::Not && args.len() != 4 {
        return fail(
            ctx,
            "ERR BITOP NOT must be called with a single source key.",
        );
    }
    // Each source is folded into the result as it is read: the memory held is the result and
    // one source, however many keys are named. Past its end a source (or the result) is zeros.
    let mut res: Vec<u8> = Vec::new();
    for (j, key) in args[3..].iter().enumerate() {
        let o = ctx.store.get(key)?;
        ctx.info.lookup(key, o.is_some());
        let src: &[u8] = match &o {
            None => &[],
            Some(o) if o.kind != Kind::String => return fail(ctx, WRONGTYPE),
            Some(o) => o.value,
        };
        if j == 0 {
            res = src.to_vec();
            if op == Op::Not {
                res.iter_mut().for_each(|b| *b = !*b);
            }
            continue;
        }
        if res.len() < src.len() {
            res.resize(src.len(), 0);
        }
        match op {
            Op::And => res
                .iter_mut()
                .enumerate()
                .for_each(|(i, b)| *b &= src.get(i).copied().unwrap_or(0)),
            Op::Or => res.iter_mut().zip(src).for_each(|(b, s)| *b |= s),
            Op::Xor => res.iter_mut().zip(src).for_each(|(b, s)| *b ^= s),
            Op::Not => {}
        }
    }
    let maxlen = res.len();
    let dest = args[2];
    if maxlen == 0 {
        if ctx.store.delete(dest)? {
            ctx.notify(nc::GENERIC, "del", dest);
        }
        reply::int(ctx.out, 0);
        return Ok(Effect::Wrote);
    }
    // Redis's setKey: the destination's TTL goes.
    ctx.store.put(dest, Kind::String, &res, None)?;
    ctx.notify(nc::STRING, "set", dest);
    reply::int(ctx.out, maxlen as i64);
    Ok(Effect::Wrote)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Overflow {
    Wrap,
    Sat,
    Fail,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FieldOp {
    Get,
    Set,
    Incrby,
}

#[derive(Debug, Clone, Copy)]
struct Field {
    op: FieldOp,
    signed: bool,
    bits: u32,
    offset: u64,
    value: i64,
    overflow: Overflow,
}

/// `i1`..`i64` or `u1`..`u63`: (signed, bits).
fn field_type(b: &[u8]) -> Option<(bool, u32)> {
    let signed = match b.first()? {
        b'i' => true,
        b'u' => false,
        _ => return None,
    };
    let bits = strict_i64(&b[1..])?;
    let most = if signed { 64 } else { 63 };
    (1..=most).contains(&bits).then_some((signed, bits as u32))
}

/// A field's bit offset: a number of bits, or `#n`, the n-th field of this width. Redis's limit:
/// within proto-max-bulk-len's default 512 MB.
fn field_offset(b: &[u8], bits: u32) -> Option<u64> {
    let (hash, digits) = match b.strip_prefix(b"#") {
        Some(rest) => (true, rest),
        None => (false, b),
    };
    let mut n = strict_i64(digits)?;
    if hash {
        n = n.checked_mul(i64::from(bits))?;
    }
    (n >= 0 && ((n as u64) >> 3) < MAX_STRING).then_some(n as u64)
}

/// The `bits`-bit unsigned field at bit `offset` of `buf` (most significant bit first; past
/// the end, zeros).
fn get_unsigned(buf: &[u8], offset: u64, bits: u32) -> u64 {
    let mut v = 0u64;
    for i in 0..u64::from(bits) {
        let at = offset + i;
        let byte = buf.get((at >> 3) as usize).copied().unwrap_or(0);
        v = (v << 1) | u64::from((byte >> (7 - (at & 7))) & 1);
    }
    v
}

fn get_signed(buf: &[u8], offset: u64, bits: u32) -> i64 {
    let mut v = get_unsigned(buf, offset, bits);
    if bits < 64 && v & (1 << (bits - 1)) != 0 {
        v |= u64::MAX << bits;
    }
    v as i64
}

fn set_unsigned(buf: &mut [u8], offset: u64, bits: u32, value: u64) {
    for j in 0..u64::from(bits) {
        let bit = (value >> (u64::from(bits) - 1 - j)) & 1;
        let at = offset + j;
        if let Some(byte) = buf.get_mut((at >> 3) as usize) {
            let mask = 1u8 << (7 - (at & 7));
            if bit == 1 {
                *byte |= mask;
            } else {
                *byte &= !mask;
            }
        }
    }
}

/// Redis's `checkUnsignedBitfieldOverflow`: (overflowed, the value to store when it did under
/// WRAP or SAT).
fn unsigned_overflow(value: u64, incr: i64, bits: u32, ow: Overflow) -> (bool, u64) {
    let max = (1u64 << bits) - 1;
    let maxincr = max.wrapping_sub(value) as i64;
    let minincr = 0u64.wrapping_sub(value) as i64;
    let wrap = || value.wrapping_add(incr as u64) & !(u64::MAX << bits);
    if value > max || (incr > 0 && incr > maxincr) {
        return (
            true,
            match ow {
                Overflow::Wrap => wrap(),
                _ => max,
            },
        );
    }
    if incr < 0 && incr < minincr {
        return (
            true,
            match ow {
                Overflow::Wrap => wrap(),
                _ => 0,
            },
        );
    }
    (false, 0)
}

/// Redis's `checkSignedBitfieldOverflow`.
fn signed_overflow(value: i64, incr: i64, bits: u32, ow: Overflow) -> (bool, i64) {
    let max: i64 = if bits == 64 {
        i64::MAX
    } else {
        (1i64 << (bits - 1)) - 1
    };
    let min = -max - 1;
    let maxincr = (max as u64).wrapping_sub(value as u64) as i64;
    let minincr = min.wrapping_sub(value);
    let wrap = || {
        let mut c = (value as u64).wrapping_add(incr as u64);
        if bits < 64 {
            let mask = u64::MAX << bits;
            if c & (1u64 << (bits - 1)) != 0 {
                c |= mask;
            } else {
                c &= !mask;
            }
        }
        c as i64
    };
    if value > max || (bits != 64 && incr > maxincr) || (value >= 0 && incr > 0 && incr > maxincr) {
        return (
            true,
            match ow {
                Overflow::Wrap => wrap(),
                _ => max,
            },
        );
    }
    if value < min || (bits != 64 && incr < minincr) || (value < 0 && incr < 0 && incr < minincr) {
        return (
            true,
            match ow {
                Overflow::Wrap => wrap(),
                _ => min,
            },
        );
    }
    (false, 0)
}

/// Parse BITFIELD's operations: `Err` is the error to answer.
fn parse_fields(args: &[&[u8]]) -> Result<Vec<Field>, &'static str> {
    let mut fields = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut j = 2;
    while j < args.len() {
        let rem = args.len() - j - 1;
        let sub = args[j].to_ascii_uppercase();
        let op = match sub.as_slice() {
            b"GET" if rem >= 2 => FieldOp::Get,
            b"SET" if rem >= 3 => FieldOp::Set,
            b"INCRBY" if rem >= 3 => FieldOp::Incrby,
            b"OVERFLOW" if rem >= 1 => {
                overflow = match args[j + 1].to_ascii_uppercase().as_slice() {
                    b"WRAP" => Overflow::Wrap,
                    b"SAT" => Overflow::Sat,
                    b"FAIL" => Overflow::Fail,
                    _ => return Err("ERR Invalid OVERFLOW type specified"),
                };
                j += 2;
                continue;
            }
            _ => return Err(SYNTAX),
        };
        let (signed, bits) = field_type(args[j + 1]).ok_or(BAD_TYPE)?;
        let offset = field_offset(args[j + 2], bits).ok_or(BAD_BIT_OFFSET)?;
        let value = if op == FieldOp::Get {
            0
        } else {
            strict_i64(args[j + 3]).ok_or(NOT_INT)?
        };
        fields.push(Field {
            op,
            signed,
            bits,
            offset,
            value,
            overflow,
        });
        j += if op == FieldOp::Get { 3 } else { 4 };
    }
    Ok(fields)
}

pub(crate) fn bitfield(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    bitfield_generic(ctx, args, false)
}

pub(crate) fn bitfield_ro(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    bitfield_generic(ctx, args, true)
}

/// BITFIELD key [GET type offset | SET type offset value | INCRBY type offset increment |
/// OVERFLOW WRAP|SAT|FAIL] ..., and BITFIELD_RO (GET only).
fn bitfield_generic(
    ctx: &mut Ctx<'_>,
    args: &[&[u8]],
    read_only: bool,
) -> Result<Effect, StoreError> {
    let fields = match parse_fields(args) {
        Ok(f) => f,
        Err(e) => return fail(ctx, e),
    };
    let key = args[1];
    let highest = fields
        .iter()
        .filter(|f| f.op != FieldOp::Get)
        .map(|f| f.offset + u64::from(f.bits) - 1)
        .max();
    let mut grow_to = None;
    match highest {
        None => {
            let len = match ctx.store.strlen(key) {
                Ok(len) => len,
                Err(StoreError::WrongType { .. }) => {
                    ctx.info.lookup(key, true);
                    return fail(ctx, WRONGTYPE);
                }
                Err(e) => return Err(e),
            };
            ctx.info.lookup(key, len.is_some());
        }
        Some(_) if read_only => {
            return fail(ctx, "ERR BITFIELD_RO only supports the GET subcommand");
        }
        Some(highest) => {
            let len = match ctx.store.strlen(key) {
                Ok(len) => len,
                Err(StoreError::WrongType { .. }) => return fail(ctx, WRONGTYPE),
                Err(e) => return Err(e),
            };
            let need = (highest >> 3) + 1;
            if len.is_none_or(|l| l < need) {
                if let Some(e) = too_long(ctx, need) {
                    return fail(ctx, &e);
                }
                // Each field's write pads the gap before it with zeros; the string reaches
                // `need` bytes by the farthest one, or at the end if that one wrote nothing.
                grow_to = Some(need);
            }
        }
    }
    // Redis's `dirty`: the key is new or longer, so every field written counts as a change.
    let grown = grow_to.is_some();
    reply::array(ctx.out, fields.len());
    let mut changes = 0;
    for f in &fields {
        let first = f.offset >> 3;
        let span = (((f.offset & 7) + u64::from(f.bits)).div_ceil(8)).max(1);
        let mut buf = ctx.store.get_range(key, first, span)?.unwrap_or_default();
        let rel = f.offset & 7;
        if f.op == FieldOp::Get {
            if f.signed {
                reply::int(ctx.out, get_signed(&buf, rel, f.bits));
            } else {
                reply::int(ctx.out, get_unsigned(&buf, rel, f.bits) as i64);
            }
            continue;
        }
        buf.resize(span as usize, 0);
        let (overflowed, old, new, answer) = if f.signed {
            let old = get_signed(&buf, rel, f.bits);
            let (incr, base) = match f.op {
                FieldOp::Incrby => (f.value, old),
                _ => (0, f.value),
            };
            let (of, wrapped) = signed_overflow(base, incr, f.bits, f.overflow);
            let new = if of { wrapped } else { base.wrapping_add(incr) };
            let answer = if f.op == FieldOp::Incrby { new } else { old };
            (of, old as u64, new as u64, answer)
        } else {
            let old = get_unsigned(&buf, rel, f.bits);
            let (incr, base) = match f.op {
                FieldOp::Incrby => (f.value, old),
                _ => (0, f.value as u64),
            };
            let (of, wrapped) = unsigned_overflow(base, incr, f.bits, f.overflow);
            let new = if of {
                wrapped
            } else {
                base.wrapping_add(incr as u64)
            };
            let answer = if f.op == FieldOp::Incrby { new } else { old };
            (of, old, new, answer as i64)
        };
        if overflowed && f.overflow == Overflow::Fail {
            reply::null(ctx.out, ctx.session.proto);
            continue;
        }
        reply::int(ctx.out, answer);
        let before = buf.clone();
        set_unsigned(&mut buf, rel, f.bits, new);
        // A field that keeps its bytes is not written (Redis counts no change for it).
        if buf != before {
            ctx.store.set_range(key, first, &buf)?;
        }
        if grown || old != new {
            changes += 1;
        }
    }
    if let Some(need) = grow_to {
        if ctx.store.strlen(key)?.is_none_or(|l| l < need) {
            // One zero byte at the end pads the gap (and creates the key).
            ctx.store.set_range(key, need - 1, &[0])?;
        }
    }
    if changes > 0 {
        ctx.notify(nc::STRING, "setbit", key);
    }
    Ok(if changes > 0 || grown {
        Effect::Wrote
    } else {
        Effect::Read
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdb::Db;

    #[test]
    fn bitop_answers_as_redis_does() {
        let mut db = Db::new();
        db.run(&[b"SET", b"a", b"\x0f\xf0\xaa"]);
        db.run(&[b"SET", b"b", b"\xff"]);
        db.replies(&[
            ("BITOP AND d a b", ":3\r\n"),
            ("GET d", "$3\r\n\x0f\0\0\r\n"),
            ("BITOP OR d a b", ":3\r\n"),
            ("BITOP AND d b a", ":3\r\n"),
            ("GET d", "$3\r\n\x0f\0\0\r\n"),
            ("BITOP XOR d a b missing", ":3\r\n"),
            ("BITOP NOT d b", ":1\r\n"),
            ("GET d", "$1\r\n\0\r\n"),
            (
                "BITOP NOT d a b",
                "-ERR BITOP NOT must be called with a single source key.\r\n",
            ),
            ("BITOP NAND d a", "-ERR syntax error\r\n"),
            ("BITOP AND d missing", ":0\r\n"),
            ("EXISTS d", ":0\r\n"),
            ("RPUSH l x", ":1\r\n"),
            ("BITOP OR d a l", &format!("-{WRONGTYPE}\r\n")),
        ]);
        // Shorter sources read as zeros, whichever comes first.
        assert_eq!(db.cmd("BITOP OR d missing b a"), ":3\r\n");
        assert_eq!(db.run(&[b"GET", b"d"]), b"$3\r\n\xff\xf0\xaa\r\n");
        assert_eq!(db.cmd("BITOP XOR d b a"), ":3\r\n");
        assert_eq!(db.run(&[b"GET", b"d"]), b"$3\r\n\xf0\xf0\xaa\r\n");
    }

    #[test]
    fn bitfield_answers_as_redis_does() {
        let mut db = Db::new();
        db.replies(
            &[
                ("BITFIELD bits set i8 0 -100", "*1\r\n:0\r\n"),
                ("BITFIELD bits set i8 0 101", "*1\r\n:-100\r\n"),
                ("BITFIELD bits get i8 0", "*1\r\n:101\r\n"),
                ("DEL bits", ":1\r\n"),
                (
                    "BITFIELD bits set u8 0 255 incrby u8 0 100 get u8 0",
                    "*3\r\n:0\r\n:99\r\n:99\r\n",
                ),
                ("BITFIELD nothing", "*0\r\n"),
                ("EXISTS nothing", ":0\r\n"),
                ("BITFIELD nothing get u8 100", "*1\r\n:0\r\n"),
                ("EXISTS nothing", ":0\r\n"),
                ("DEL bits", ":1\r\n"),
                ("BITFIELD bits set u8 #0 65 set u8 #1 66 set u8 #2 67", "*3\r\n:0\r\n:0\r\n:0\r\n"),
                ("GET bits", "$3\r\nABC\r\n"),
                (
                    "BITFIELD m SET i8 0 10 SET i8 64 10 INCRBY i8 10 99900",
                    "*3\r\n:0\r\n:0\r\n:60\r\n",
                ),
                ("BITFIELD o overflow fail incrby u2 0 5", "*1\r\n$-1\r\n"),
                ("BITFIELD o overflow sat incrby u2 0 5", "*1\r\n:3\r\n"),
                ("BITFIELD o overflow sat incrby i8 0 -1000", "*1\r\n:-128\r\n"),
                // Replies recorded from redis-server 7.0.15 (the field holds i64::MIN).
                ("BITFIELD o incrby i64 0 9223372036854775807", "*1\r\n:-1\r\n"),
                ("BITFIELD o incrby i64 0 1", "*1\r\n:0\r\n"),
                ("BITFIELD o overflow fail incrby i64 0 -1", "*1\r\n:-1\r\n"),
                ("BITFIELD o overflow fail incrby i64 0 -9223372036854775808", "*1\r\n$-1\r\n"),
                ("BITFIELD o get u64 0", "-ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.\r\n"),
                ("BITFIELD o get u8 -1", "-ERR bit offset is not an integer or out of range\r\n"),
                ("BITFIELD o get u8 4294967296", "-ERR bit offset is not an integer or out of range\r\n"),
                ("BITFIELD o get u8 #536870912", "-ERR bit offset is not an integer or out of range\r\n"),
                ("BITFIELD o get i64 #9223372036854775807", "-ERR bit offset is not an integer or out of range\r\n"),
                ("BITFIELD o set u8 0 x", "-ERR value is not an integer or out of range\r\n"),
                ("BITFIELD o overflow nope", "-ERR Invalid OVERFLOW type specified\r\n"),
                ("BITFIELD o get u8", "-ERR syntax error\r\n"),
                ("BITFIELD_RO o get u8 0", "*1\r\n:255\r\n"),
                ("BITFIELD_RO o set u8 0 1", "-ERR BITFIELD_RO only supports the GET subcommand\r\n"),
            ],
        );
        // A field far past the largest object is refused before anything is written.
        let r = db.cmd("BITFIELD far set u8 4294967000 1");
        assert!(r.starts_with("-ERR string of"), "{r}");
        assert_eq!(db.cmd("EXISTS far"), ":0\r\n");
    }

    /// Redis 7.0.15's `rdb_changes_since_last_save` after SETBIT and BITFIELD: a change, a new
    /// key or a longer string counts, a write that leaves the bytes as they were does not.
    #[test]
    fn only_changes_count_as_changes() {
        let mut db = Db::new();
        let changes = |db: &mut Db| db.store.changes();
        let start = changes(&mut db);
        db.cmd("SETBIT foo 0 0");
        db.cmd("BITFIELD foo2 SET i5 0 0");
        assert_eq!(changes(&mut db), start + 2, "new keys");
        db.cmd("SETBIT foo 0 0");
        db.cmd("BITFIELD foo2 SET i5 0 0");
        assert_eq!(changes(&mut db), start + 2, "no change");
        for line in [
            "SETBIT foo 0 1",
            "SETBIT foo 0 1",
            "SETBIT foo 0 0",
            "SETBIT foo 0 0",
            "BITFIELD foo2 SET i5 0 1",
            "BITFIELD foo2 SET i5 0 1",
            "BITFIELD foo2 SET i5 0 0",
            "BITFIELD foo2 SET i5 0 0",
        ] {
            db.cmd(line);
        }
        assert_eq!(changes(&mut db), start + 6, "two changes each");
        db.cmd("BITFIELD foo3 INCRBY i5 0 1");
        db.cmd("BITFIELD foo3 INCRBY i5 0 1");
        assert_eq!(changes(&mut db), start + 8);
        db.cmd("SETBIT foo 90 0");
        db.cmd("BITFIELD foo2 SET i5 90 0");
        assert_eq!(changes(&mut db), start + 10, "longer strings");
        assert!(db
            .cmd("INFO persistence")
            .contains("rdb_changes_since_last_save:"));
    }

    #[test]
    fn overflow_checks_match_redis() {
        assert_eq!(unsigned_overflow(255, 100, 8, Overflow::Wrap), (true, 99));
        assert_eq!(unsigned_overflow(0, -1, 8, Overflow::Sat), (true, 0));
        assert_eq!(unsigned_overflow(3, 0, 8, Overflow::Wrap), (false, 0));
        assert_eq!(signed_overflow(127, 1, 8, Overflow::Wrap), (true, -128));
        assert_eq!(signed_overflow(-128, -1, 8, Overflow::Sat), (true, -128));
        assert_eq!(signed_overflow(255, 0, 8, Overflow::Wrap), (true, -1));
        assert_eq!(
            signed_overflow(i64::MIN, -1, 64, Overflow::Wrap),
            (true, i64::MAX)
        );
    }
}
