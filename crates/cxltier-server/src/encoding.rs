//! OBJECT ENCODING: Redis's name for how it would encode a value under the configured
//! thresholds (`hash-max-listpack-*`, `set-max-intset-entries`, `zset-max-listpack-*`). Tools
//! and Redis's own tests branch on it. cxltier keeps every value as bytes or as a chunked
//! collection in its tiers; the name says what Redis would do, not how cxltier lays the value
//! out. The hash commands also ask [`redis_keeps_listpack`] (a listpack answers in insertion
//! order) and the set commands mark a set Redis would have converted ([`SET_HASHTABLE`]).

use cxltier_store::{Kind, StoreError};

use crate::context::{parse_i64, Ctx, ServerInfo};
use crate::hash_layout::{chunked_fields, decode};
use crate::numbers::int_arg;

/// Members read a page at a time while a collection's name is decided.
const PAGE: usize = 1024;

/// The name OBJECT ENCODING answers for `key`, `None` when it holds nothing. Looked at without
/// counting an access; a value only on NVMe is read, as the name needs its bytes.
pub(crate) fn object_encoding(
    ctx: &mut Ctx<'_>,
    key: &[u8],
) -> Result<Option<&'static str>, StoreError> {
    let (kind, name) = match ctx.store.peek(key) {
        Some(o) => (o.kind, redis_encoding(ctx.info, o.kind, o.value)),
        None => match ctx.store.get(key)? {
            Some(o) => (o.kind, redis_encoding(ctx.info, o.kind, o.value)),
            None => return Ok(None),
        },
    };
    // Collections: the name follows their members, which the root alone does not tell.
    // Redis 7.0 keeps every list in a quicklist.
    Ok(Some(match kind {
        Kind::List => "quicklist",
        Kind::Set => set_encoding(ctx, key)?,
        Kind::ZSet => zset_encoding(ctx, key)?,
        Kind::ChunkedHash => chunked_hash_encoding(ctx, key)?,
        Kind::Stream => "stream",
        _ => name,
    }))
}

/// Whether Redis would keep `fields` in a listpack under the configured thresholds
/// (`hash-max-listpack-entries`, `hash-max-listpack-value`): a listpack answers in insertion
/// order, which clients then see (Redis's own tests check it), so such a hash stays one value
/// here however large, as it stays one listpack there.
pub(crate) fn redis_keeps_listpack(info: &ServerInfo, fields: &[(&[u8], &[u8])]) -> bool {
    let entries = info.knobs.int("hash-max-listpack-entries");
    let longest = info.knobs.int("hash-max-listpack-value");
    fields.len() as i64 <= entries
        && fields
            .iter()
            .all(|(f, v)| f.len() as i64 <= longest && v.len() as i64 <= longest)
}

/// The root flag of a set Redis would have converted to a hashtable: it never converts one
/// back, so neither does `OBJECT ENCODING`.
pub(crate) const SET_HASHTABLE: u8 = 1;

/// The encoding Redis 7.0 would give the set at `key` (OBJECT ENCODING): `intset` while it
/// holds at most `set-max-intset-entries` members, all integers as Redis writes them, else
/// `hashtable`. Costs at most that many members read.
fn set_encoding(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<&'static str, StoreError> {
    let most = ctx.info.knobs.int("set-max-intset-entries");
    if ctx.store.scard(key)? as i64 > most
        || ctx.store.collection_flags(key, Kind::Set)? & SET_HASHTABLE != 0
    {
        return Ok("hashtable");
    }
    let mut after: Option<Vec<u8>> = None;
    loop {
        let (page, next) = ctx.store.sscan(key, after.as_deref(), PAGE)?;
        if !page.iter().all(|m| is_canonical_int(m)) {
            return Ok("hashtable");
        }
        match next {
            Some(n) => after = Some(n),
            None => return Ok("intset"),
        }
    }
}

/// Whether Redis would take `m` for a 64-bit integer (`string2ll`: no sign `+`, no leading
/// zeros, no `-0`).
pub(crate) fn is_canonical_int(m: &[u8]) -> bool {
    m.len() <= 20 && int_arg(m).is_some_and(|n| n.to_string().as_bytes() == m)
}

/// The encoding Redis 7.0 would give the sorted set at `key` (OBJECT ENCODING): `listpack`
/// while it holds at most `zset-max-listpack-entries` members, none longer than
/// `zset-max-listpack-value` bytes, else `skiplist`. Costs at most that many members read.
fn zset_encoding(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<&'static str, StoreError> {
    let most = ctx.info.knobs.int("zset-max-listpack-entries");
    let longest = ctx.info.knobs.int("zset-max-listpack-value");
    if ctx.store.zcard(key)? as i64 > most {
        return Ok("skiplist");
    }
    let mut after: Option<Vec<u8>> = None;
    loop {
        let (page, next) = ctx.store.zscan(key, after.as_deref(), PAGE)?;
        if page.iter().any(|(m, _)| m.len() as i64 > longest) {
            return Ok("skiplist");
        }
        match next {
            Some(n) => after = Some(n),
            None => return Ok("listpack"),
        }
    }
}

/// OBJECT ENCODING of a chunked hash: what Redis would use for its fields under the configured
/// thresholds (a chunked hash is over 32 KiB, so almost always "hashtable"; the fields are
/// read only when there are few enough for a listpack).
fn chunked_hash_encoding(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<&'static str, StoreError> {
    let entries = ctx.info.knobs.int("hash-max-listpack-entries");
    let longest = ctx.info.knobs.int("hash-max-listpack-value");
    if ctx.store.hlen(key)? as i64 > entries {
        return Ok("hashtable");
    }
    let fields = chunked_fields(ctx.store, key)?;
    let small = fields
        .iter()
        .all(|(f, v)| f.len() as i64 <= longest && v.len() as i64 <= longest);
    Ok(if small { "listpack" } else { "hashtable" })
}

/// Redis's name for how it would encode a value under the configured thresholds (OBJECT
/// ENCODING): tools and Redis's own tests branch on it. cxltier stores every value as bytes in
/// one tier; the name says what Redis would do, not how cxltier lays the value out.
fn redis_encoding(info: &ServerInfo, kind: Kind, value: &[u8]) -> &'static str {
    match kind {
        Kind::Hash => {
            let fields = decode(value).unwrap_or_default();
            if redis_keeps_listpack(info, &fields) {
                "listpack"
            } else {
                "hashtable"
            }
        }
        _ => {
            // An integer without leading zeros or sign tricks that fits an i64 is "int";
            // short strings are "embstr" (44 bytes fit one allocation with the object).
            let int = value.len() <= 20
                && parse_i64(value).is_some_and(|n| n.to_string().as_bytes() == value);
            // An HLL is always raw in Redis (PFADD unshares it into a raw string).
            let hll = value.len() >= 16 && value.starts_with(b"HYLL");
            if int {
                "int"
            } else if hll {
                "raw"
            } else if value.len() <= 44 {
                "embstr"
            } else {
                "raw"
            }
        }
    }
}
