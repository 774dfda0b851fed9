//! The encoding of a hash's fields inside one stored value:
//! `count u32 | (field_len u32 | field | value_len u32 | value) × count`, little-endian, fields in
//! insertion order. Small and flat: HGETALL is one pass, HSET of one field one decode and encode.

/// Decode; `None` when the bytes are not a valid encoding (a corrupt value).
pub fn decode(bytes: &[u8]) -> Option<Vec<(&[u8], &[u8])>> {
    let mut at: usize = 0;
    let mut take = |n: usize| -> Option<&[u8]> {
        let s = bytes.get(at..at.checked_add(n)?)?;
        at += n;
        Some(s)
    };
    let count = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
    let mut out = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        let fl = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
        let f = take(fl)?;
        let vl = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
        let v = take(vl)?;
        out.push((f, v));
    }
    (at == bytes.len()).then_some(out)
}

/// Where the value of `field` is in an encoding: `Some(Some(range))`, `Some(None)` when the
/// field is absent, `None` when the bytes are not a valid encoding. One pass over the lengths,
/// no allocation: lets a one-field update of the same length be written in place.
pub fn value_span(bytes: &[u8], field: &[u8]) -> Option<Option<std::ops::Range<usize>>> {
    let mut at: usize = 0;
    let mut take = |n: usize| -> Option<std::ops::Range<usize>> {
        let end = at.checked_add(n)?;
        bytes.get(at..end)?;
        let r = at..end;
        at = end;
        Some(r)
    };
    let le = |r: std::ops::Range<usize>| {
        u32::from_le_bytes(bytes[r].try_into().expect("4 bytes")) as usize
    };
    let count = le(take(4)?);
    let mut found = None;
    for _ in 0..count {
        let fl = le(take(4)?);
        let f = take(fl)?;
        let vl = le(take(4)?);
        let v = take(vl)?;
        if found.is_none() && &bytes[f] == field {
            found = Some(v);
        }
    }
    (at == bytes.len()).then_some(found)
}

/// Encode fields (in the order given).
pub fn encode<'a>(fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> Vec<u8> {
    let mut out = vec![0u8; 4];
    let mut n: u32 = 0;
    for (f, v) in fields {
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(f);
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        out.extend_from_slice(v);
        n += 1;
    }
    out[0..4].copy_from_slice(&n.to_le_bytes());
    out
}

// ---- the commands that read or change one field, or draw fields at random ----

use cxltier_store::{Kind, StoreError};

use crate::commands::{Ctx, Effect};
use crate::list::{err, int_arg, NOT_INTEGER, SYNTAX, WRONGTYPE};
use crate::resp::reply;

const CORRUPT: &str = "ERR the stored hash is corrupt; DEL the key";

/// The hash at `key`: its fields and expiry, `Ok(None)` when absent, `Err` the error reply.
#[allow(clippy::type_complexity)]
/// A `read` command's lookup counts as a hit or miss; a write's is neither (Redis's
/// lookupKeyWrite).
fn load(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    read: bool,
) -> Result<Result<Option<(Vec<(Vec<u8>, Vec<u8>)>, Option<u64>)>, &'static str>, StoreError> {
    let o = ctx.store.get(key)?;
    if read {
        ctx.info.lookup(key, o.is_some());
    }
    Ok(match o {
        None => Ok(None),
        Some(o) if o.kind != Kind::Hash => Err(WRONGTYPE),
        Some(o) => match decode(o.value) {
            Some(f) => Ok(Some((
                f.into_iter()
                    .map(|(f, v)| (f.to_vec(), v.to_vec()))
                    .collect(),
                o.expires_at_ms,
            ))),
            None => Err(CORRUPT),
        },
    })
}

/// Write `fields` back under `key`, keeping its expiry.
fn save(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    fields: &[(Vec<u8>, Vec<u8>)],
    expires: Option<u64>,
) -> Result<(), StoreError> {
    let encoded = encode(fields.iter().map(|(f, v)| (f.as_slice(), v.as_slice())));
    ctx.store.put(key, Kind::Hash, &encoded, expires)
}

/// Change (or add) one field through `change`, which is given its old value and answers the
/// new one or the error reply; then reply with what `change` returned.
fn update_field(
    ctx: &mut Ctx<'_>,
    args: &[&[u8]],
    change: impl FnOnce(Option<&[u8]>) -> Result<Vec<u8>, &'static str>,
    answer: impl FnOnce(&mut Ctx<'_>, &[u8]),
) -> Result<Effect, StoreError> {
    let (mut fields, expires) = match load(ctx, args[1], false)? {
        Err(e) => return err(ctx, e),
        Ok(None) => (Vec::new(), None),
        Ok(Some(h)) => h,
    };
    let at = fields.iter().position(|(f, _)| f == args[2]);
    let new = match change(at.map(|i| fields[i].1.as_slice())) {
        Ok(v) => v,
        Err(e) => return err(ctx, e),
    };
    match at {
        Some(i) => fields[i].1 = new.clone(),
        None => fields.push((args[2].to_vec(), new.clone())),
    }
    save(ctx, args[1], &fields, expires)?;
    answer(ctx, &new);
    Ok(Effect::Wrote)
}

pub(crate) fn hsetnx(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let (mut fields, expires) = match load(ctx, args[1], false)? {
        Err(e) => return err(ctx, e),
        Ok(None) => (Vec::new(), None),
        Ok(Some(h)) => h,
    };
    if fields.iter().any(|(f, _)| f == args[2]) {
        reply::int(ctx.out, 0);
        return Ok(Effect::Read);
    }
    fields.push((args[2].to_vec(), args[3].to_vec()));
    save(ctx, args[1], &fields, expires)?;
    ctx.notify(crate::notify::class::HASH, "hset", args[1]);
    reply::int(ctx.out, 1);
    Ok(Effect::Wrote)
}

pub(crate) fn hincrby(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let Some(by) = int_arg(args[3]) else {
        return err(ctx, NOT_INTEGER);
    };
    update_field(
        ctx,
        args,
        |old| {
            let old = match old {
                None => 0,
                Some(v) => int_arg(v)
                    .filter(|n| n.to_string().as_bytes() == v)
                    .ok_or("ERR hash value is not an integer")?,
            };
            old.checked_add(by)
                .map(|n| n.to_string().into_bytes())
                .ok_or("ERR increment or decrement would overflow")
        },
        |ctx, new| {
            ctx.notify(crate::notify::class::HASH, "hincrby", args[1]);
            reply::int(
                ctx.out,
                std::str::from_utf8(new).unwrap_or("0").parse().unwrap_or(0),
            )
        },
    )
}

/// A float as Redis reads one (`strtold` on the whole string): no spaces, no NaN.
fn float_arg(b: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(b).ok()?;
    if s.is_empty() || s.bytes().any(|c| c.is_ascii_whitespace()) {
        return None;
    }
    s.parse::<f64>().ok().filter(|f| !f.is_nan())
}

pub(crate) fn hincrbyfloat(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let Some(by) = float_arg(args[3]) else {
        return err(ctx, "ERR value is not a valid float");
    };
    if by.is_infinite() {
        return err(ctx, "ERR value is NaN or Infinity");
    }
    update_field(
        ctx,
        args,
        |old| {
            let old = match old {
                None => 0.0,
                Some(v) => float_arg(v).ok_or("ERR hash value is not a float")?,
            };
            let next = old + by;
            if !next.is_finite() {
                return Err("ERR increment would produce NaN or Infinity");
            }
            Ok(crate::strings::format_f64(next).into_bytes())
        },
        |ctx, new| {
            ctx.notify(crate::notify::class::HASH, "hincrbyfloat", args[1]);
            reply::bulk(ctx.out, new)
        },
    )
}

pub(crate) fn hstrlen(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    match load(ctx, args[1], true)? {
        Err(e) => err(ctx, e),
        Ok(h) => {
            let n = h
                .and_then(|(fields, _)| fields.into_iter().find(|(f, _)| f == args[2]))
                .map_or(0, |(_, v)| v.len());
            reply::int(ctx.out, n as i64);
            Ok(Effect::Read)
        }
    }
}

/// HSCAN: a hash is one value here (a listpack in Redis's terms), so, as Redis does for one,
/// every field matching comes in the first call, with cursor 0.
pub(crate) fn hscan(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    if crate::set::cursor_from_wire(args[2]).is_none() {
        return err(ctx, "ERR invalid cursor");
    }
    let Ok((pattern, _)) = crate::set::scan_options(ctx, &args[3..]) else {
        return Ok(Effect::Read);
    };
    let fields = match load(ctx, args[1], true)? {
        Err(e) => return err(ctx, e),
        Ok(h) => h.map(|(f, _)| f).unwrap_or_default(),
    };
    let fields: Vec<_> = if args[2] == b"0" {
        fields
            .into_iter()
            .filter(|(f, _)| pattern.is_none_or(|p| crate::glob::matches(p, f, false)))
            .collect()
    } else {
        Vec::new()
    };
    reply::array(ctx.out, 2);
    reply::bulk(ctx.out, b"0");
    reply::array(ctx.out, 2 * fields.len());
    for (f, v) in &fields {
        reply::bulk(ctx.out, f);
        reply::bulk(ctx.out, v);
    }
    Ok(Effect::Read)
}

/// HRANDFIELD key [count [WITHVALUES]], Redis 7.0's semantics: a positive count gives distinct
/// fields, a negative one allows repeats (bounded by the client-output-buffer-limit).
pub(crate) fn hrandfield(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let mut count = None;
    let mut withvalues = false;
    if args.len() >= 3 {
        let c = match int_arg(args[2]) {
            None => return err(ctx, NOT_INTEGER),
            Some(i64::MIN) => return err(ctx, crate::set::RANDOM_COUNT_RANGE),
            Some(c) => c,
        };
        if args.len() > 4 || (args.len() == 4 && !args[3].eq_ignore_ascii_case(b"WITHVALUES")) {
            return err(ctx, SYNTAX);
        }
        withvalues = args.len() == 4;
        if withvalues && !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&c) {
            return err(ctx, "ERR value is out of range");
        }
        count = Some(c);
    }
    let proto = ctx.session.proto;
    let fields = match load(ctx, args[1], true)? {
        Err(e) => return err(ctx, e),
        Ok(h) => h.map(|(f, _)| f).unwrap_or_default(),
    };
    let Some(c) = count else {
        match fields.get(rand::random_range(0..fields.len().max(1))) {
            Some((f, _)) if !fields.is_empty() => reply::bulk(ctx.out, f),
            _ => reply::null(ctx.out, proto),
        }
        return Ok(Effect::Read);
    };
    let write = |out: &mut Vec<u8>, (f, v): &(Vec<u8>, Vec<u8>)| {
        if withvalues && proto >= 3 {
            reply::array(out, 2);
        }
        reply::bulk(out, f);
        if withvalues {
            reply::bulk(out, v);
        }
    };
    let per = if withvalues && proto < 3 { 2 } else { 1 };
    if fields.is_empty() || c == 0 {
        reply::array(ctx.out, 0);
        return Ok(Effect::Read);
    }
    if c > 0 {
        // Distinct fields: a random sample of min(count, len) of them.
        let want = (c as u64).min(fields.len() as u64) as usize;
        let picked = rand::seq::index::sample(&mut rand::rng(), fields.len(), want);
        reply::array(ctx.out, want * per);
        for i in picked {
            write(ctx.out, &fields[i]);
        }
        return Ok(Effect::Read);
    }
    let n = c.unsigned_abs();
    let limit = crate::set::reply_limit(ctx);
    let over = || {
        format!(
            "ERR the reply to {n} random draws would be over the client-output-buffer-limit hard limit of {limit} bytes: ask for fewer"
        )
    };
    if n.saturating_mul(6 * per as u64) > limit as u64 {
        return err(ctx, &over());
    }
    let mut out = Vec::new();
    reply::array(&mut out, n as usize * per);
    for _ in 0..n {
        write(&mut out, &fields[rand::random_range(0..fields.len())]);
        if out.len() > limit {
            return err(ctx, &over());
        }
    }
    ctx.out.extend_from_slice(&out);
    Ok(Effect::Read)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_rejects_garbage() {
        let e = encode([(&b"f1"[..], &b"v1"[..]), (b"", b"")]);
        assert_eq!(
            decode(&e).unwrap(),
            vec![(&b"f1"[..], &b"v1"[..]), (&b""[..], &b""[..])]
        );
        assert!(decode(&e[..e.len() - 1]).is_none());
        assert!(decode(b"\xff\xff\xff\xff").is_none());
        assert!(decode(&encode([])).unwrap().is_empty());
    }

    #[test]
    fn value_span_finds_a_field_or_says_why_not() {
        let e = encode([(&b"f1"[..], &b"v1"[..]), (b"field2", b"value2"), (b"", b"")]);
        let r = value_span(&e, b"field2").unwrap().unwrap();
        assert_eq!(&e[r], b"value2");
        assert_eq!(&e[value_span(&e, b"").unwrap().unwrap()], b"");
        assert_eq!(value_span(&e, b"f3"), Some(None));
        assert_eq!(value_span(&e[..e.len() - 1], b"f1"), None);
        assert_eq!(value_span(b"\xff\xff\xff\xff", b"f1"), None);
    }

    use crate::list::testdb::Db;

    #[test]
    fn field_commands_follow_redis() {
        let mut db = Db::new();
        assert_eq!(db.cmd("HSETNX h a 1"), ":1\r\n");
        assert_eq!(db.cmd("HSETNX h a 2"), ":0\r\n");
        assert_eq!(db.cmd("HGET h a"), "$1\r\n1\r\n");
        assert_eq!(db.cmd("HINCRBY h a 41"), ":42\r\n");
        assert_eq!(db.cmd("HINCRBY h n -5"), ":-5\r\n");
        assert_eq!(
            db.cmd("HINCRBY h a 9223372036854775807"),
            "-ERR increment or decrement would overflow\r\n"
        );
        assert_eq!(
            db.cmd("HINCRBY h a x"),
            "-ERR value is not an integer or out of range\r\n"
        );
        db.cmd("HSET h s hello f 1.5");
        assert_eq!(
            db.cmd("HINCRBY h s 1"),
            "-ERR hash value is not an integer\r\n"
        );
        assert_eq!(db.cmd("HINCRBYFLOAT h f 0.25"), "$4\r\n1.75\r\n");
        assert_eq!(db.cmd("HINCRBYFLOAT h new 3"), "$1\r\n3\r\n");
        assert_eq!(
            db.cmd("HINCRBYFLOAT h s 1"),
            "-ERR hash value is not a float\r\n"
        );
        assert_eq!(
            db.cmd("HINCRBYFLOAT h f x"),
            "-ERR value is not a valid float\r\n"
        );
        assert_eq!(
            db.cmd("HINCRBYFLOAT h f inf"),
            "-ERR value is NaN or Infinity\r\n"
        );
        assert_eq!(db.cmd("HSTRLEN h s"), ":5\r\n");
        assert_eq!(db.cmd("HSTRLEN h nope"), ":0\r\n");
        assert_eq!(db.cmd("HSTRLEN nope s"), ":0\r\n");
        db.cmd("SET str v");
        for c in [
            "HSETNX str a 1",
            "HINCRBY str a 1",
            "HSTRLEN str a",
            "HRANDFIELD str",
            "HSCAN str 0",
        ] {
            assert!(db.cmd(c).starts_with("-WRONGTYPE"), "{c}");
        }
    }

    #[test]
    fn hscan_and_hrandfield() {
        let mut db = Db::new();
        db.cmd("HSET h a 1 b 2 c 3 ab 4");
        assert_eq!(
            db.cmd("HSCAN h 0 MATCH a*"),
            "*2\r\n$1\r\n0\r\n*4\r\n$1\r\na\r\n$1\r\n1\r\n$2\r\nab\r\n$1\r\n4\r\n"
        );
        assert_eq!(db.cmd("HSCAN h x"), "-ERR invalid cursor\r\n");
        assert_eq!(db.cmd("HRANDFIELD h 10").matches('$').count(), 4);
        assert_eq!(db.cmd("HRANDFIELD h 10 WITHVALUES").matches('$').count(), 8);
        assert_eq!(db.cmd("HRANDFIELD h -10").matches('$').count(), 10);
        assert_eq!(db.cmd("HRANDFIELD h 0"), "*0\r\n");
        assert_eq!(db.cmd("HRANDFIELD nope 3"), "*0\r\n");
        assert_eq!(db.cmd("HRANDFIELD nope"), "$-1\r\n");
        assert!(db.cmd("HRANDFIELD h").starts_with('$'));
        assert_eq!(db.cmd("HRANDFIELD h 1 X"), "-ERR syntax error\r\n");
        assert_eq!(
            db.cmd("HRANDFIELD h -9223372036854775808"),
            format!("-{}\r\n", crate::set::RANDOM_COUNT_RANGE)
        );
        assert_eq!(
            db.cmd("HRANDFIELD h -9223372036854775807 WITHVALUES"),
            "-ERR value is out of range\r\n"
        );
        assert!(db
            .cmd("HRANDFIELD h -1099511627776")
            .starts_with("-ERR the reply to 1099511627776 random draws would be over"));
        db.cmd("HELLO 3");
        let r = db.cmd("HRANDFIELD h 2 WITHVALUES");
        assert!(r.starts_with("*2\r\n*2\r\n$"), "{r}");
    }
}
