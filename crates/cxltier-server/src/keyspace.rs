//! The keyspace commands: DEL, EXISTS, TYPE, the expiry commands (EXPIRE and its kin, PERSIST,
//! TTL, PTTL, EXPIRETIME, PEXPIRETIME), OBJECT, SCANRANGE (the ordered range scan of YCSB
//! workload E), SCAN, KEYS, RANDOMKEY, RENAME, RENAMENX, COPY, TOUCH, SORT, DUMP and RESTORE
//! (Redis's payload format: `crate::rdb::dump`).
//!
//! SCAN walks the keys in the byte order the store's index keeps. A cursor stands for the
//! smallest key the next call starts from: the server keeps that key under a number (the
//! cursor the client sees), so a scan resumes exactly where it ended however many keys were
//! inserted or deleted in between, and every key present for the whole scan is returned once
//! (Redis's guarantee; Redis may return some twice, this never does while the cursor is kept).
//! The server keeps the last [`KEPT_CURSORS`] cursors; an older one starts the scan over, which
//! may repeat keys but never skips one.

use std::hash::{BuildHasher, Hasher};

use cxltier_store::{Kind, StoreError};

use crate::context::{
    expire_at_ms, expired_delete_op, fail, invalid_expire, now_ms, parse_i64, Ctx, Effect, NOT_INT,
    SYNTAX,
};
use crate::cursors::successor;
use crate::notify::class as nc;
use crate::rdb::dump::PayloadError;
use crate::rdb::load::{LoadError, Strings, Value};
use crate::rdb::RdbError;
use crate::resp::reply;

/// Keys fetched per store call by KEYS.
const KEYS_BATCH: usize = 1024;

/// SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]
pub(crate) fn scan(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let Some(cursor) = std::str::from_utf8(args[1])
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    else {
        return fail(ctx, "ERR invalid cursor");
    };
    let (mut pattern, mut count, mut kind) = (None, 10usize, None);
    let mut i = 2;
    while i < args.len() {
        if i + 1 >= args.len() {
            return fail(ctx, SYNTAX);
        }
        let v = args[i + 1];
        match args[i].to_ascii_uppercase().as_slice() {
            b"MATCH" => pattern = Some(v),
            b"COUNT" => match parse_i64(v) {
                Some(c) if c >= 1 => count = c.min(100_000) as usize,
                Some(_) => return fail(ctx, SYNTAX),
                None => return fail(ctx, crate::errors::NOT_INT),
            },
            b"TYPE" => kind = Some(v),
            _ => return fail(ctx, SYNTAX),
        }
        i += 2;
    }
    let start = if cursor == 0 {
        Vec::new()
    } else {
        ctx.info.scan_cursors.start(cursor)
    };
    let physical = ctx.info.dbs.physical(ctx.session.db);
    let items = ctx.store.scan_db_keys(physical, &start, count)?;
    let next = match items.last() {
        Some((last, _)) if items.len() >= count => ctx.info.scan_cursors.issue(successor(last)),
        _ => 0,
    };
    let keep = |(key, k): &(Vec<u8>, Kind)| {
        pattern.is_none_or(|p| crate::glob::matches(p, key, false))
            && kind.is_none_or(|t| t.eq_ignore_ascii_case(k.type_name().as_bytes()))
    };
    let keys: Vec<&(Vec<u8>, Kind)> = items.iter().filter(|it| keep(it)).collect();
    reply::array(ctx.out, 2);
    reply::bulk(ctx.out, next.to_string().as_bytes());
    reply::array(ctx.out, keys.len());
    for (key, _) in keys {
        reply::bulk(ctx.out, key);
    }
    Ok(Effect::Read)
}

/// KEYS pattern: every live key that matches, in byte order.
pub(crate) fn keys(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let mut found = Vec::new();
    let mut start = Vec::new();
    let physical = ctx.info.dbs.physical(ctx.session.db);
    loop {
        let items = ctx.store.scan_db_keys(physical, &start, KEYS_BATCH)?;
        let done = items.len() < KEYS_BATCH;
        if let Some((last, _)) = items.last() {
            start = successor(last);
        }
        found.extend(
            items
                .into_iter()
                .filter(|(key, _)| crate::glob::matches(args[1], key, false))
                .map(|(key, _)| key),
        );
        if done {
            break;
        }
    }
    reply::array(ctx.out, found.len());
    for k in found {
        reply::bulk(ctx.out, &k);
    }
    Ok(Effect::Read)
}

/// A random 64-bit number (std's per-instance random hash keys, so no extra crate).
fn random_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(now_ms());
    h.finish()
}

/// Up to this many keys, RANDOMKEY picks uniformly by walking to a random position; beyond,
/// it takes the first key after a random point of the key order (cheaper, but biased by how
/// the keys spread over the byte space).
const RANDOMKEY_WALK: u64 = 1024;

/// RANDOMKEY: a random key, or nil when there is none.
pub(crate) fn randomkey(ctx: &mut Ctx<'_>, _args: &[&[u8]]) -> Result<Effect, StoreError> {
    let physical = ctx.info.dbs.physical(ctx.session.db);
    let n = ctx.store.db_len(physical);
    let r = random_u64();
    let key = if n == 0 {
        None
    } else if n <= RANDOMKEY_WALK {
        let items = ctx
            .store
            .scan_db_keys(physical, b"", (r % n) as usize + 1)?;
        items.last().map(|(key, _)| key.clone())
    } else {
        let mut items = ctx.store.scan_db_keys(physical, &r.to_be_bytes(), 1)?;
        if items.is_empty() {
            items = ctx.store.scan_db_keys(physical, b"", 1)?;
        }
        items.first().map(|(key, _)| key.clone())
    };
    match key {
        Some(k) => reply::bulk(ctx.out, &k),
        None => reply::null(ctx.out, ctx.session.proto),
    }
    Ok(Effect::Read)
}

fn rename_command(ctx: &mut Ctx<'_>, args: &[&[u8]], nx: bool) -> Result<Effect, StoreError> {
    if !ctx.store.contains(args[1]) {
        return fail(ctx, "ERR no such key");
    }
    if args[1] == args[2] {
        if nx {
            reply::int(ctx.out, 0);
        } else {
            reply::ok(ctx.out);
        }
        return Ok(Effect::Read);
    }
    // The store moves any kind (a collection with its parts) and the TTL goes with the value
    // (Redis's rule).
    let moved = ctx.store.rename(args[1], args[2], !nx)?;
    if moved {
        // Redis's renameGenericCommand: the destination is added anew (`new`, even over a key
        // it replaced, which goes without an event), then rename_from and rename_to.
        let n = &mut ctx.info.notify;
        n.emit(nc::NEW, "new", args[2]);
        n.emit(nc::GENERIC, "rename_from", args[1]);
        n.emit(nc::GENERIC, "rename_to", args[2]);
    }
    if nx {
        reply::int(ctx.out, i64::from(moved));
    } else {
        reply::ok(ctx.out);
    }
    Ok(if moved { Effect::Wrote } else { Effect::Read })
}

pub(crate) fn rename(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    rename_command(ctx, args, false)
}

pub(crate) fn renamenx(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    rename_command(ctx, args, true)
}

/// COPY source destination [DB destination-db] [REPLACE]
pub(crate) fn copy(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let mut replace = false;
    let mut db = ctx.session.db;
    let mut i = 3;
    while i < args.len() {
        match args[i].to_ascii_uppercase().as_slice() {
            b"REPLACE" => replace = true,
            b"DB" if i + 1 < args.len() => {
                // Redis's words: a number that does not parse, then one out of range.
                if parse_i64(args[i + 1]).is_none() {
                    return fail(ctx, crate::errors::NOT_INT);
                }
                match ctx.info.dbs.parse(args[i + 1]) {
                    Ok(d) => db = d,
                    Err(_) => return fail(ctx, crate::db::OUT_OF_RANGE),
                }
                i += 1;
            }
            _ => return fail(ctx, SYNTAX),
        }
        i += 1;
    }
    // Dispatch gave the destination the selected database; DB names another.
    let dst = crate::db::store_key(ctx.info.dbs.physical(db), crate::db::user_key(args[2]));
    if args[1] == dst.as_slice() {
        return fail(ctx, "ERR source and destination objects are the same");
    }
    // Any kind: a collection is copied with all its parts.
    let copied = ctx.store.copy_key(args[1], &dst, replace)?;
    if copied {
        // Redis's copyCommand: a replaced destination goes without an event, the copy is
        // added anew (`new`) and announced as copy_to (in the destination's database).
        ctx.notify(nc::NEW, "new", &dst);
        ctx.notify(nc::GENERIC, "copy_to", &dst);
    }
    reply::int(ctx.out, i64::from(copied));
    if db != ctx.session.db {
        // The key written is not the argument dispatch knows: tell its watchers here.
        ctx.session.unchanged_keys.push(args[2].to_vec());
        if copied {
            ctx.info.wrote(&dst);
        }
    }
    Ok(if copied { Effect::Wrote } else { Effect::Read })
}

/// MOVE key db: the key (any kind, with its TTL) to another database, unless it holds the
/// name already. The store renames it to its other database's key: no value is copied.
pub(crate) fn move_key(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let db = match ctx.info.dbs.parse(args[2]) {
        Ok(db) => db,
        Err(msg) => return fail(ctx, msg),
    };
    if db == ctx.session.db {
        return fail(ctx, "ERR source and destination objects are the same");
    }
    let dst = crate::db::store_key(ctx.info.dbs.physical(db), crate::db::user_key(args[1]));
    if !ctx.store.contains(args[1]) || ctx.store.contains(&dst) {
        reply::int(ctx.out, 0);
        return Ok(Effect::Read);
    }
    let moved = ctx.store.rename(args[1], &dst, false)?;
    reply::int(ctx.out, i64::from(moved));
    if moved {
        ctx.info.wrote(&dst);
    }
    Ok(if moved { Effect::Wrote } else { Effect::Read })
}

/// TOUCH: how many of the keys exist (repeats counted), without reading their values.
pub(crate) fn touch(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let n = args[1..].iter().filter(|k| ctx.store.touch(k)).count();
    reply::int(ctx.out, n as i64);
    Ok(Effect::Read)
}

fn expire_time(ctx: &mut Ctx<'_>, key: &[u8], seconds: bool) -> Result<Effect, StoreError> {
    // From the index, without counting an access (Redis's LOOKUP_NOTOUCH).
    let o = ctx.store.key_info(key);
    let n = match o {
        None => -2,
        Some(o) => match o.expires_at_ms {
            None => -1,
            Some(t) if seconds => (t / 1000) as i64,
            Some(t) => t as i64,
        },
    };
    reply::int(ctx.out, n);
    Ok(Effect::Read)
}

pub(crate) fn expiretime(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    expire_time(ctx, args[1], true)
}

pub(crate) fn pexpiretime(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    expire_time(ctx, args[1], false)
}

/// SORT's pattern lookup (Redis's `lookupKeyByPattern`): `#` is the element itself; otherwise
/// the first `*` is replaced by the element, and a `->field` after it names a hash field. A
/// pattern without `*`, a missing key or a key of another type is `None`.
fn by_pattern(
    ctx: &mut Ctx<'_>,
    pattern: &[u8],
    elem: &[u8],
) -> Result<Option<Vec<u8>>, StoreError> {
    if pattern == b"#" {
        return Ok(Some(elem.to_vec()));
    }
    let Some(star) = pattern.iter().position(|&b| b == b'*') else {
        return Ok(None);
    };
    let after = &pattern[star + 1..];
    let (post, field) = match after.windows(2).position(|w| w == b"->") {
        Some(f) if f + 2 < after.len() => (&after[..f], Some(&after[f + 2..])),
        _ => (after, None),
    };
    // The key named is one of the selected database's.
    let mut key = vec![ctx.info.dbs.physical(ctx.session.db)];
    key.extend_from_slice(&pattern[..star]);
    key.extend_from_slice(elem);
    key.extend_from_slice(post);
    let Some(o) = ctx.store.get(&key)? else {
        return Ok(None);
    };
    if o.kind == Kind::ChunkedHash {
        return match field {
            Some(f) => ctx.store.hget(&key, f),
            None => Ok(None),
        };
    }
    Ok(match field {
        None => (o.kind == Kind::String).then(|| o.value.to_vec()),
        Some(f) if o.kind == Kind::Hash => crate::hash_layout::decode(o.value).and_then(|fields| {
            fields
                .into_iter()
                .find(|(k, _)| *k == f)
                .map(|(_, v)| v.to_vec())
        }),
        Some(_) => None,
    })
}

/// A number as SORT reads one (`strtod` on the whole string: leading spaces allowed, the
/// empty string is 0); `None` is Redis's conversion error.
fn sort_score(b: &[u8]) -> Option<f64> {
    let t = std::str::from_utf8(b).ok()?.trim_start();
    if t.is_empty() {
        return Some(0.0);
    }
    t.parse::<f64>().ok().filter(|f| !f.is_nan())
}

/// SORT key [BY pattern] [LIMIT offset count] [GET pattern ...] [ASC|DESC] [ALPHA]
/// [STORE destination], and SORT_RO (no STORE), as Redis 7.0 does them (ALPHA compares bytes,
/// as the C locale does).
pub(crate) fn sort(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let readonly = args[0].eq_ignore_ascii_case(b"SORT_RO");
    let (mut desc, mut alpha, mut by, mut store) = (false, false, None::<&[u8]>, None::<&[u8]>);
    let (mut limit_start, mut limit_count) = (0i64, -1i64);
    let mut gets: Vec<&[u8]> = Vec::new();
    let mut dontsort = false;
    let mut j = 2;
    while j < args.len() {
        let left = args.len() - j - 1;
        let a = args[j].to_ascii_uppercase();
        match a.as_slice() {
            b"ASC" => desc = false,
            b"DESC" => desc = true,
            b"ALPHA" => alpha = true,
            b"LIMIT" if left >= 2 => {
                let (Some(st), Some(ct)) = (parse_i64(args[j + 1]), parse_i64(args[j + 2])) else {
                    return fail(ctx, crate::errors::NOT_INT);
                };
                (limit_start, limit_count) = (st, ct);
                j += 2;
            }
            b"STORE" if !readonly && left >= 1 => {
                store = Some(args[j + 1]);
                j += 1;
            }
            b"BY" if left >= 1 => {
                by = Some(args[j + 1]);
                dontsort = !args[j + 1].contains(&b'*');
                j += 1;
            }
            b"GET" if left >= 1 => {
                gets.push(args[j + 1]);
                j += 1;
            }
            _ => return fail(ctx, SYNTAX),
        }
        j += 1;
    }
    let kind = ctx.store.get(args[1])?.map(|o| o.kind);
    ctx.info.lookup(args[1], kind.is_some());
    // The elements in their native order (a set's is its members' byte order here).
    let mut elems: Vec<Vec<u8>> = match kind {
        None => Vec::new(),
        Some(Kind::List) => ctx.store.list_range(args[1], 0, -1)?,
        Some(Kind::Set) => {
            let mut all = Vec::new();
            let mut after: Option<Vec<u8>> = None;
            loop {
                let (page, next) = ctx.store.sscan(args[1], after.as_deref(), 1024)?;
                all.extend(page);
                match next {
                    Some(n) => after = Some(n),
                    None => break all,
                }
            }
        }
        Some(Kind::ZSet) => ctx
            .store
            .zrange_by_rank(args[1], 0, -1, false)?
            .into_iter()
            .map(|(m, _)| m)
            .collect(),
        Some(_) => return fail(ctx, crate::errors::WRONGTYPE),
    };
    // A set stored unsorted would be in an arbitrary order: Redis sorts it ALPHA then.
    if dontsort && kind == Some(Kind::Set) && store.is_some() {
        dontsort = false;
        alpha = true;
        by = None;
    }
    if dontsort && desc && kind == Some(Kind::ZSet) {
        elems.reverse();
    }
    if !dontsort {
        let mut keyed = Vec::with_capacity(elems.len());
        for e in elems {
            let byval = match by {
                Some(p) => by_pattern(ctx, p, &e)?,
                None => Some(e.clone()),
            };
            keyed.push((e, byval));
        }
        if alpha {
            keyed.sort_by(|a, b| {
                let c = match by {
                    Some(_) => a.1.cmp(&b.1),
                    None => a.0.cmp(&b.0),
                };
                if desc {
                    c.reverse()
                } else {
                    c
                }
            });
        } else {
            let mut scored = Vec::with_capacity(keyed.len());
            for (e, v) in keyed {
                let s = match &v {
                    None => 0.0,
                    Some(v) => match sort_score(v) {
                        Some(s) => s,
                        None => {
                            return fail(
                                ctx,
                                "ERR One or more scores can't be converted into double",
                            )
                        }
                    },
                };
                scored.push((e, s));
            }
            scored.sort_by(|a, b| {
                let c = a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0));
                if desc {
                    c.reverse()
                } else {
                    c
                }
            });
            keyed = scored.into_iter().map(|(e, _)| (e, None)).collect();
        }
        elems = keyed.into_iter().map(|(e, _)| e).collect();
    }
    // Redis's LIMIT arithmetic.
    let len = elems.len() as i64;
    let mut start = limit_start.max(0);
    let mut end = if limit_count < 0 {
        len - 1
    } else {
        start.saturating_add(limit_count) - 1
    };
    if start >= len {
        start = len - 1;
        end = len - 2;
    }
    if end >= len {
        end = len - 1;
    }
    let picked: &[Vec<u8>] = if end >= start && start >= 0 {
        &elems[start as usize..=end as usize]
    } else {
        &[]
    };
    let mut out: Vec<Option<Vec<u8>>> = Vec::new();
    for e in picked {
        if gets.is_empty() {
            out.push(Some(e.clone()));
        }
        for g in &gets {
            out.push(by_pattern(ctx, g, e)?);
        }
    }
    match store {
        None => {
            let proto = ctx.session.proto;
            reply::array(ctx.out, out.len());
            for v in &out {
                match v {
                    Some(v) => reply::bulk(ctx.out, v),
                    None => reply::null(ctx.out, proto),
                }
            }
            Ok(Effect::Read)
        }
        Some(dst) => {
            let existed = ctx.store.delete(dst)?;
            let vals: Vec<&[u8]> = out.iter().map(|v| v.as_deref().unwrap_or(b"")).collect();
            for chunk in vals.chunks(1024) {
                ctx.store
                    .list_push(dst, cxltier_store::ListEnd::Right, chunk)?;
            }
            // Redis's sortCommand: a result stored, or an empty one that deleted the
            // destination, is a write of it (its watchers' EXEC fails, a client blocked on it
            // is tried), announced as `sortstore` or `del`. The destination is no key position
            // of the table's, so the handler names it; the source is only read.
            let n = &mut ctx.info.notify;
            if !out.is_empty() {
                n.emit(crate::notify::class::LIST, "sortstore", dst);
                if !existed {
                    n.insert_new(dst);
                }
            } else if existed {
                n.emit(crate::notify::class::GENERIC, "del", dst);
            }
            if existed || !out.is_empty() {
                ctx.info.wrote(dst);
            }
            if dst != args[1] {
                ctx.session.unchanged_keys.push(args[1].to_vec());
            }
            reply::int(ctx.out, out.len() as i64);
            Ok(if existed || !out.is_empty() {
                Effect::Wrote
            } else {
                Effect::Read
            })
        }
    }
}

const BAD_PAYLOAD: &str = "ERR DUMP payload version or checksum are wrong";

/// Where RESTORE builds the new value, and where it keeps the value it replaces until the new
/// one is in place: keys of the server's own database, which no client can select.
const RESTORING: &[u8] = b"restore:new";
const REPLACED: &[u8] = b"restore:replaced";

/// A string up to this long that replaces no collection is written straight under its key: one
/// write, whole or not at all (the store keeps larger strings in pieces, written one by one).
const DIRECT_STRING_MAX: usize = 64 << 10;

/// DUMP key: the value in Redis's serialized form (its RDB type and serialization, RDB version
/// 10, CRC64), which redis-server's RESTORE takes.
pub(crate) fn dump(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    match crate::rdb::dump::key_payload(ctx.store, args[1]) {
        Ok(Some(payload)) => reply::bulk(ctx.out, &payload),
        Ok(None) => reply::null(ctx.out, ctx.session.proto),
        Err(RdbError::Store(e)) => return Err(e),
        Err(RdbError::Io(e)) => return fail(ctx, &format!("ERR {e}")),
    }
    Ok(Effect::Read)
}

/// RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME s] [FREQ f]: a DUMP payload of Redis's
/// format (redis-server's or cxltier's) under `key`, as Redis 7.0's restoreCommand (IDLETIME
/// sets the key's access clock under a non-LFU policy, FREQ its counter under an LFU one;
/// the other is checked and ignored). The whole payload is decoded
/// and validated before the keyspace is touched, and the value is built under a key of the
/// server's own database, then renamed over `key`: a RESTORE that fails, on a bad payload or on
/// a store error midway (full, I/O), leaves the keyspace as it was.
pub(crate) fn restore(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let (key, payload) = (args[1], args[3]);
    let (mut replace, mut absttl) = (false, false);
    let (mut idle, mut freq): (Option<u64>, Option<u8>) = (None, None);
    let mut i = 4;
    while i < args.len() {
        let more = i + 1 < args.len();
        match args[i].to_ascii_uppercase().as_slice() {
            b"REPLACE" => replace = true,
            b"ABSTTL" => absttl = true,
            // Redis takes one of IDLETIME and FREQ, not both.
            b"IDLETIME" if more && freq.is_none() => {
                match parse_i64(args[i + 1]) {
                    None => return fail(ctx, crate::errors::NOT_INT),
                    Some(v) if v < 0 => {
                        return fail(ctx, "ERR Invalid IDLETIME value, must be >= 0")
                    }
                    Some(v) => idle = Some(v as u64),
                }
                i += 1;
            }
            b"FREQ" if more && idle.is_none() => {
                match parse_i64(args[i + 1]) {
                    None => return fail(ctx, crate::errors::NOT_INT),
                    Some(v) if !(0..=255).contains(&v) => {
                        return fail(ctx, "ERR Invalid FREQ value, must be >= 0 and <= 255")
                    }
                    Some(v) => freq = Some(v as u8),
                }
                i += 1;
            }
            _ => return fail(ctx, SYNTAX),
        }
        i += 1;
    }
    // Redis's order: the key, then the TTL, then the payload.
    if !replace && ctx.store.contains(key) {
        return fail(ctx, "BUSYKEY Target key name already exists.");
    }
    let ttl = match parse_i64(args[2]) {
        None => return fail(ctx, crate::errors::NOT_INT),
        Some(t) if t < 0 => return fail(ctx, "ERR Invalid TTL value, must be >= 0"),
        Some(t) => t as u64,
    };
    let value = match crate::rdb::dump::parse(payload, ctx.store.max_object()) {
        Ok(v) => v,
        Err(PayloadError::Footer) => return fail(ctx, BAD_PAYLOAD),
        Err(PayloadError::Value(LoadError::TooLarge { len, max })) => {
            return fail(
                ctx,
                &format!(
                    "ERR the DUMP payload holds a string of {len} bytes, more than the server's largest value ({max} bytes): restart cxltier serve with a larger --max-object"
                ),
            )
        }
        Err(PayloadError::Value(e)) => return fail(ctx, &format!("ERR Bad data format: {e}")),
    };
    let expires = match (ttl, absttl) {
        (0, _) => None,
        (t, true) => Some(t),
        (t, false) => Some(now_ms().saturating_add(t)),
    };
    // A time already past: the key would expire at once, so it is not created (Redis's rule);
    // REPLACE still deletes the old value, replicated as a DEL.
    if expires.is_some_and(|t| t <= now_ms()) {
        if replace && ctx.store.delete(key)? {
            ctx.session
                .propagate_as(|| vec![vec![b"del".to_vec(), key.to_vec()]]);
        }
        reply::ok(ctx.out);
        return Ok(Effect::Wrote);
    }
    if let Err(e) = put_value(ctx, key, &value, expires) {
        // Nothing of a failed RESTORE reaches the replicas (its hidden writes changed the
        // store's count of changes).
        ctx.session.propagate_as(Vec::new);
        return Err(e);
    }
    // A relative TTL is replicated as the time it stands for, with ABSTTL (Redis 7.0).
    if let (Some(at), false) = (expires, absttl) {
        ctx.session.propagate_as(|| {
            let mut op: crate::write_stream::Op = args.iter().map(|a| a.to_vec()).collect();
            op[2] = at.to_string().into_bytes();
            op.push(b"ABSTTL".to_vec());
            vec![op]
        });
    }
    ctx.store.set_access_stats(key, idle, freq);
    // Redis's restoreCommand: a replaced key goes without an event, the value is added anew
    // (`new`) and announced as restore.
    ctx.notify(nc::NEW, "new", key);
    ctx.notify(nc::GENERIC, "restore", key);
    reply::ok(ctx.out);
    Ok(Effect::Wrote)
}

/// `value` under `key` (replacing what is there), whole or not at all: on an error the key
/// holds what it held before.
fn put_value(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    value: &Value,
    expires: Option<u64>,
) -> Result<(), StoreError> {
    if let Value::String(s) = value {
        let plain = match ctx.store.key_info(key) {
            None => true,
            Some(info) => info.kind == Kind::String,
        };
        if s.len() <= DIRECT_STRING_MAX && plain {
            return ctx.store.put(key, Kind::String, s, expires);
        }
    }
    let meta = crate::db::META_DB;
    let (new, old) = (
        crate::db::store_key(meta, RESTORING),
        crate::db::store_key(meta, REPLACED),
    );
    // Left behind only by a crash in the middle of an earlier RESTORE.
    ctx.store.delete(&new)?;
    ctx.store.delete(&old)?;
    if let Err(e) = build(ctx, &new, value, expires) {
        let _ = ctx.store.delete(&new);
        return Err(e);
    }
    // Renaming copies a collection's parts one by one, and the store deletes the destination
    // before it copies: the old value is moved aside first, so that a failure while the new
    // one is moved in can put it back.
    let replacing = ctx.store.contains(key);
    if replacing {
        if let Err(e) = ctx.store.rename(key, &old, true) {
            let _ = ctx.store.delete(&old);
            let _ = ctx.store.delete(&new);
            return Err(e);
        }
    }
    let moved = ctx.store.rename(&new, key, false);
    if !matches!(moved, Ok(true)) {
        let _ = ctx.store.delete(key);
        if replacing {
            let _ = ctx.store.rename(&old, key, true);
        }
        let _ = ctx.store.delete(&new);
        return Err(moved.err().unwrap_or_else(|| {
            StoreError::Config("RESTORE could not move the new value in place".into())
        }));
    }
    if replacing {
        // The new value is in place: a failure here leaves only a hidden copy of the old one,
        // which the next RESTORE deletes.
        let _ = ctx.store.delete(&old);
    }
    Ok(())
}

/// Members handed to the store per call while a collection is built.
const BUILD_BATCH: usize = 1024;

fn members_of(s: &Strings) -> Vec<&[u8]> {
    s.iter().collect()
}

/// Write `value` under `key` (absent) with its expiry.
fn build(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    value: &Value,
    expires: Option<u64>,
) -> Result<(), StoreError> {
    match value {
        Value::String(s) => return ctx.store.put(key, Kind::String, s, expires),
        Value::Hash(_) => {
            let pairs = value.pairs();
            let listpack = crate::encoding::redis_keeps_listpack(ctx.info, &pairs);
            let encoded = crate::hash_layout::encode(pairs.iter().copied());
            return crate::hash_layout::store_fields(
                ctx.store, key, &pairs, listpack, &encoded, expires, false,
            );
        }
        Value::List(s) => {
            for batch in members_of(s).chunks(BUILD_BATCH) {
                ctx.store
                    .list_push(key, cxltier_store::ListEnd::Right, batch)?;
            }
        }
        Value::Set(s) => {
            for batch in members_of(s).chunks(BUILD_BATCH) {
                ctx.store.sadd(key, batch)?;
            }
        }
        Value::Stream(s) => crate::rdb::stream::build(ctx.store, key, s)?,
        Value::ZSet { members, scores } => {
            let all: Vec<(f64, &[u8])> = scores.iter().copied().zip(members.iter()).collect();
            for batch in all.chunks(BUILD_BATCH) {
                ctx.store
                    .zadd(key, cxltier_store::ZAddFlags::default(), batch)?;
            }
        }
    }
    if expires.is_some() {
        ctx.store.set_expiry(key, expires)?;
    }
    Ok(())
}

/// DEL and UNLINK.
pub(crate) fn del(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let mut count = 0;
    for k in &args[1..] {
        count += ctx.store.delete(k)? as i64;
    }
    reply::int(ctx.out, count);
    Ok(Effect::Wrote)
}

pub(crate) fn exists(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let mut count = 0;
    for k in &args[1..] {
        let found = ctx.store.contains(k);
        ctx.info.lookup(k, found);
        count += usize::from(found);
    }
    reply::int(ctx.out, count as i64);
    Ok(Effect::Read)
}

pub(crate) fn type_(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    // From the index, without counting an access (Redis's LOOKUP_NOTOUCH), except for a value
    // kept in pieces, whose root says whether it is a string or a hash.
    let kind = match ctx.store.key_info(args[1]) {
        Some(i) if i.kind == Kind::BigString => ctx.store.get(args[1])?.map(|o| o.kind),
        i => i.map(|i| i.kind),
    };
    ctx.info.lookup(args[1], kind.is_some());
    let name = kind.map_or("none", Kind::type_name);
    reply::simple(ctx.out, name);
    Ok(Effect::Read)
}

/// EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT: `key time [NX | XX | GT | LT]`, Redis 7's rules (a
/// key without a TTL counts as one that never expires: GT never applies to it, LT always).
fn expire_command(
    ctx: &mut Ctx<'_>,
    args: &[&[u8]],
    name: &str,
    seconds: bool,
    relative: bool,
) -> Result<Effect, StoreError> {
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for opt in &args[3..] {
        match opt.to_ascii_uppercase().as_slice() {
            b"NX" => nx = true,
            b"XX" => xx = true,
            b"GT" => gt = true,
            b"LT" => lt = true,
            _ => {
                return fail(
                    ctx,
                    &format!("ERR Unsupported option {}", String::from_utf8_lossy(opt)),
                )
            }
        }
    }
    if nx && (xx || gt || lt) {
        return fail(
            ctx,
            "ERR NX and XX, GT or LT options at the same time are not compatible",
        );
    }
    if gt && lt {
        return fail(
            ctx,
            "ERR GT and LT options at the same time are not compatible",
        );
    }
    let Some(t) = parse_i64(args[2]) else {
        return fail(ctx, NOT_INT);
    };
    let Some(at) = expire_at_ms(t, seconds, relative) else {
        invalid_expire(ctx.out, name);
        return Ok(Effect::Read);
    };
    let Some(current) = ctx.store.get(args[1])?.map(|o| o.expires_at_ms) else {
        reply::int(ctx.out, 0);
        return Ok(Effect::Read);
    };
    let applies = match current {
        None => !(xx || gt),
        Some(c) => {
            let c = c as i64;
            !(nx || (gt && at <= c) || (lt && at >= c))
        }
    };
    if !applies {
        reply::int(ctx.out, 0);
        return Ok(Effect::Read);
    }
    if at <= now_ms() as i64 {
        let existed = ctx.store.delete(args[1])?;
        // Redis replicates an expiry already past as the delete it is.
        ctx.session
            .propagate_as(|| vec![expired_delete_op(ctx.info, args[1])]);
        reply::int(ctx.out, existed as i64);
    } else {
        let ok = ctx.store.set_expiry(args[1], Some(at as u64))?;
        // As `PEXPIREAT key ms`, the options kept (Redis's expireGenericCommand).
        ctx.session.propagate_as(|| {
            let mut op: crate::write_stream::Op = vec![
                b"pexpireat".to_vec(),
                args[1].to_vec(),
                at.to_string().into_bytes(),
            ];
            op.extend(args[3..].iter().map(|a| a.to_vec()));
            vec![op]
        });
        if ok {
            ctx.notify(nc::GENERIC, "expire", args[1]);
        }
        reply::int(ctx.out, ok as i64);
    }
    Ok(Effect::Wrote)
}

pub(crate) fn expire(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    expire_command(ctx, args, "expire", true, true)
}

pub(crate) fn pexpire(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    expire_command(ctx, args, "pexpire", false, true)
}

pub(crate) fn expireat(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    expire_command(ctx, args, "expireat", true, false)
}

pub(crate) fn pexpireat(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    expire_command(ctx, args, "pexpireat", false, false)
}

pub(crate) fn persist(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let had = ctx
        .store
        .get(args[1])?
        .is_some_and(|o| o.expires_at_ms.is_some());
    if had {
        ctx.store.set_expiry(args[1], None)?;
        ctx.notify(nc::GENERIC, "persist", args[1]);
    }
    reply::int(ctx.out, had as i64);
    Ok(Effect::Wrote)
}

fn time_to_live(ctx: &mut Ctx<'_>, key: &[u8], seconds: bool) -> Result<Effect, StoreError> {
    // From the index alone: TTL neither reads the value nor counts an access (Redis's
    // LOOKUP_NOTOUCH: OBJECT IDLETIME goes on growing).
    let o = ctx.store.key_info(key);
    ctx.info.lookup(key, o.is_some());
    match o {
        None => reply::int(ctx.out, -2),
        Some(o) => match o.expires_at_ms {
            None => reply::int(ctx.out, -1),
            Some(t) => {
                let left = t.saturating_sub(now_ms()) as i64;
                reply::int(ctx.out, if seconds { (left + 500) / 1000 } else { left });
            }
        },
    }
    Ok(Effect::Read)
}

pub(crate) fn ttl(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    time_to_live(ctx, args[1], true)
}

pub(crate) fn pttl(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    time_to_live(ctx, args[1], false)
}

pub(crate) fn scanrange(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let Some(count) = parse_i64(args[2]).filter(|&c| (0..=100_000).contains(&c)) else {
        return fail(ctx, "ERR count must be an integer from 0 to 100000");
    };
    let physical = ctx.info.dbs.physical(ctx.session.db);
    let items = ctx.store.scan_db(physical, args[1], count as usize)?;
    reply::array(ctx.out, items.len());
    for it in items {
        reply::array(ctx.out, 2);
        reply::bulk(ctx.out, &it.key);
        if it.kind == Kind::ChunkedHash {
            let key = crate::db::store_key(physical, &it.key);
            let fields = crate::hash_layout::chunked_fields(ctx.store, &key)?;
            let out = &mut *ctx.out;
            reply::array(out, fields.len() * 2);
            for (f, v) in &fields {
                reply::bulk(out, f);
                reply::bulk(out, v);
            }
            continue;
        }
        let out = &mut *ctx.out;
        match (it.kind, crate::hash_layout::decode(&it.value)) {
            (Kind::Hash, Some(fields)) => {
                reply::array(out, fields.len() * 2);
                for (f, v) in fields {
                    reply::bulk(out, f);
                    reply::bulk(out, v);
                }
            }
            _ => reply::bulk(out, &it.value),
        }
    }
    Ok(Effect::Read)
}

pub(crate) fn object(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let sub = args[1].to_ascii_uppercase();
    let proto = ctx.session.proto;
    if sub == b"HELP" && args.len() == 2 {
        let lines = [
            "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "ENCODING <key>",
            "    Return the kind of internal representation used in order to store the value",
            "    associated with a <key>.",
            "FREQ <key>",
            "    Return the access frequency index of the <key>. The returned integer is",
            "    proportional to the logarithm of the recent access frequency of the key.",
            "IDLETIME <key>",
            "    Return the idle time of the <key>, that is the approximated number of",
            "    seconds elapsed since the last access to the key.",
            "REFCOUNT <key>",
            "    Return the number of references of the value associated with the specified",
            "    <key>.",
            "TIER <key>",
            "    Return where the value stored at <key> is: dram, cxl or nvme, or mixed for a",
            "    collection whose parts are in more than one tier (cxltier's own).",
            "HELP",
            "    Print this help.",
        ];
        reply::simple_lines(ctx.out, &lines);
        return Ok(Effect::Read);
    }
    if args.len() != 3 {
        return fail(ctx, &crate::errors::unknown_subcommand("OBJECT", args[1]));
    }
    let key = args[2];
    // Looked at without counting an access (Redis's OBJECT does not touch the key either); a
    // value only on NVMe is read for ENCODING, which needs its bytes.
    if !ctx.store.contains(key) {
        reply::null(ctx.out, proto);
        return Ok(Effect::Read);
    }
    match sub.as_slice() {
        b"ENCODING" => {
            match crate::encoding::object_encoding(ctx, key)? {
                Some(name) => reply::bulk(ctx.out, name.as_bytes()),
                None => reply::null(ctx.out, proto),
            }
        }
        // Where the value really is (ENCODING names what Redis would use).
        b"TIER" => match ctx.store.tier_of(key) {
            Some(t) => reply::bulk(ctx.out, t.as_bytes()),
            None => reply::null(ctx.out, proto),
        },
        // Redis shares the objects of the integers 0 to 9999 (their count is INT_MAX) unless
        // an LRU or LFU policy needs each key's own access bits.
        b"REFCOUNT" => {
            let policy = ctx.store.eviction_policy();
            let shared = !policy.is_lfu()
                && !policy.name().contains("lru")
                && crate::encoding::object_encoding(ctx, key)? == Some("int")
                && match ctx.store.peek(key) {
                    // Looked at without counting an access; a value only on NVMe is read.
                    Some(o) => parse_i64(o.value),
                    None => ctx.store.get(key)?.and_then(|o| parse_i64(o.value)),
                }
                .is_some_and(|n| (0..10_000).contains(&n));
            reply::int(ctx.out, if shared { 2_147_483_647 } else { 1 })
        }
        // The access bits hold an LRU clock or an LFU counter, by the policy (as in Redis).
        b"IDLETIME" if ctx.store.eviction_policy().is_lfu() => {
            return fail(ctx, "ERR An LFU maxmemory policy is selected, idle time not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.")
        }
        b"IDLETIME" => match ctx.store.key_info(key) {
            Some(i) => reply::int(ctx.out, i.idle_seconds as i64),
            None => reply::null(ctx.out, proto),
        },
        b"FREQ" if !ctx.store.eviction_policy().is_lfu() => {
            return fail(ctx, "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.")
        }
        b"FREQ" => match ctx.store.key_info(key) {
            Some(i) => reply::int(ctx.out, i64::from(i.lfu_frequency)),
            None => reply::null(ctx.out, proto),
        },
        _ => {
            return fail(
                ctx,
                &format!(
                    "ERR unknown subcommand '{}'. Try OBJECT HELP.",
                    String::from_utf8_lossy(args[1])
                ),
            )
        }
    }
    Ok(Effect::Read)
}

#[cfg(test)]
mod tests {

    use crate::context::*;
    use crate::testdb::*;

    #[test]
    fn rename_and_copy_take_collections_whole() {
        let mut db = crate::testdb::Db::new();
        db.cmd("RPUSH bob a b c");
        db.replies(&[
            ("RENAME bob foo", "+OK\r\n"),
            ("LRANGE foo 0 -1", "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"),
            ("EXISTS bob", ":0\r\n"),
        ]);
        db.cmd("ZADD z 1 a");
        db.replies(&[
            ("COPY z z2", ":1\r\n"),
            ("ZSCORE z2 a", "$1\r\n1\r\n"),
            ("RENAMENX z foo", ":0\r\n"),
            ("RENAME nope x", "-ERR no such key\r\n"),
        ]);
        db.cmd("SET s v");
        db.replies(&[("RENAME s foo", "+OK\r\n"), ("GET foo", "$1\r\nv\r\n")]);
    }

    #[test]
    fn sort_follows_redis() {
        let mut db = crate::testdb::Db::new();
        db.cmd("RPUSH l 3 1 2");
        db.replies(&[
            ("SORT l", "*3\r\n$1\r\n1\r\n$1\r\n2\r\n$1\r\n3\r\n"),
            ("SORT l DESC LIMIT 0 2", "*2\r\n$1\r\n3\r\n$1\r\n2\r\n"),
        ]);
        db.cmd("MSET w_1 30 w_2 10 w_3 20");
        db.cmd("HSET h_1 f a");
        db.replies(&[
            (
                "SORT l BY w_* GET # GET h_*->f",
                "*6\r\n$1\r\n2\r\n$-1\r\n$1\r\n3\r\n$-1\r\n$1\r\n1\r\n$1\r\na\r\n",
            ),
            (
                "SORT l BY nosort",
                "*3\r\n$1\r\n3\r\n$1\r\n1\r\n$1\r\n2\r\n",
            ),
        ]);
        db.cmd("SADD s b a c");
        db.replies(&[
            ("SORT s ALPHA STORE d", ":3\r\n"),
            ("LRANGE d 0 -1", "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"),
            (
                "SORT s",
                "-ERR One or more scores can't be converted into double\r\n",
            ),
            ("SORT nope STORE d", ":0\r\n"),
        ]);
        // An empty result that deletes a watched destination fails the transaction.
        db.cmd("RPUSH watched x");
        assert_eq!(
            db.watched_exec("watched", "SORT nope STORE watched"),
            (":0\r\n".into(), "*-1\r\n".into())
        );
        db.replies(&[
            ("EXISTS d", ":0\r\n"),
            ("SORT_RO l STORE d", "-ERR syntax error\r\n"),
        ]);
        assert!(db.cmd("SORT w_1").starts_with("-WRONGTYPE"));
    }

    #[test]
    fn dump_and_restore_round_trip_every_type() {
        let mut db = crate::testdb::Db::new();
        db.cmd("SET s hello");
        db.cmd("HSET h a 1 b 2");
        db.cmd("RPUSH l x y z");
        db.cmd("SADD st 1 2 a");
        db.cmd("ZADD z 1.5 a -2 b");
        for (k, check) in [
            ("s", "GET"),
            ("h", "HGETALL"),
            ("l", "LRANGE {} 0 -1"),
            ("st", "SMEMBERS"),
            ("z", "ZRANGE {} 0 -1 WITHSCORES"),
        ] {
            let q = |key: &str| {
                if check.contains("{}") {
                    check.replace("{}", key)
                } else {
                    format!("{check} {key}")
                }
            };
            let want = db.cmd(&q(k));
            let words: Vec<&[u8]> = vec![b"DUMP", k.as_bytes()];
            let out = db.run(&words);
            // The bulk's bytes, whatever they hold.
            let nl = out.iter().position(|&b| b == b'\n').unwrap();
            let payload = out[nl + 1..out.len() - 2].to_vec();
            let new = format!("{k}2");
            let words: Vec<&[u8]> = vec![b"RESTORE", new.as_bytes(), b"0", &payload];
            let out = db.run(&words);
            assert_eq!(out, b"+OK\r\n", "{k}");
            assert_eq!(db.cmd(&q(&new)), want, "{k}");
            let out = db.run(&words);
            assert_eq!(out, b"-BUSYKEY Target key name already exists.\r\n");
            let mut bad = payload.clone();
            *bad.last_mut().unwrap() ^= 1;
            let words: Vec<&[u8]> = vec![b"RESTORE", b"x", b"0", &bad];
            let out = db.run(&words);
            assert_eq!(out, b"-ERR DUMP payload version or checksum are wrong\r\n");
        }
        assert_eq!(db.cmd("DUMP nope"), "$-1\r\n");
    }

    /// COPY and RENAME take any type with all its members and its TTL (Redis's keyspace tests
    /// COPY lists, sets, sorted sets and hashes; this answered "a list is written through the
    /// store's collection calls").
    #[test]
    fn copy_and_rename_carry_collections_whole() {
        let mut db = Db::large();
        db.cmd("RPUSH l a b c");
        db.cmd("SADD s 1 2 3");
        db.cmd("ZADD z 1 a 2 b");
        db.cmd("HSET h f v");
        db.cmd("PEXPIRE l 100000");
        for k in ["l", "s", "z", "h"] {
            assert_eq!(db.cmd(&format!("COPY {k} {k}2")), ":1\r\n", "{k}");
        }
        db.replies(&[
            ("LRANGE l2 0 -1", "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"),
            ("SCARD s2", ":3\r\n"),
            ("ZSCORE z2 b", "$1\r\n2\r\n"),
            ("HGET h2 f", "$1\r\nv\r\n"),
        ]);
        assert!(db.cmd("PTTL l2").starts_with(':') && db.cmd("PTTL l2") != ":-1\r\n");
        // The copy is its own: changing it leaves the source alone.
        db.cmd("RPUSH l2 d");
        db.replies(&[
            ("LLEN l", ":3\r\n"),
            // COPY onto an existing key needs REPLACE.
            ("COPY s l2", ":0\r\n"),
            ("COPY s l2 REPLACE", ":1\r\n"),
            ("TYPE l2", "+set\r\n"),
            ("RENAME z zz", "+OK\r\n"),
            ("EXISTS z", ":0\r\n"),
            ("ZRANGE zz 0 -1", "*2\r\n$1\r\na\r\n$1\r\nb\r\n"),
            ("RENAMENX h zz", ":0\r\n"),
            ("RENAMENX h hh", ":1\r\n"),
            ("HGET hh f", "$1\r\nv\r\n"),
            ("RENAME nothing x", "-ERR no such key\r\n"),
        ]);
    }

    #[test]
    fn idle_time_counts_reads_and_writes_not_ttl_type_exists_or_object() {
        let mut db = Db::large();
        db.cmd("SET foo bar");
        db.cmd("ZADD z 1 a");
        db.cmd("SET bar x");
        // More than a second: the clock of seconds has ticked at least once.
        std::thread::sleep(std::time::Duration::from_millis(1100));
        for c in [
            "TTL foo",
            "PTTL foo",
            "TYPE foo",
            "EXISTS foo",
            "EXPIRETIME foo",
            "OBJECT ENCODING foo",
            "OBJECT IDLETIME foo",
            "TYPE z",
        ] {
            db.cmd(c);
        }
        // At least 1 (more on a machine slow enough to oversleep).
        for k in ["foo", "z"] {
            let r = db.cmd(&format!("OBJECT IDLETIME {k}"));
            let idle: i64 = r.trim_start_matches(':').trim_end().parse().unwrap();
            assert!(idle >= 1, "{k}: {r}");
        }
        db.cmd("GET foo");
        db.cmd("ZSCORE z a");
        db.replies(&[
            ("TOUCH bar nope", ":1\r\n"),
            ("OBJECT IDLETIME foo", ":0\r\n"),
            ("OBJECT IDLETIME z", ":0\r\n"),
            ("OBJECT IDLETIME bar", ":0\r\n"),
            ("OBJECT IDLETIME nope", "$-1\r\n"),
        ]);
    }

    #[test]
    fn object_encoding_follows_the_thresholds() {
        let mut db = Db::large();
        let long = "x".repeat(45);
        db.cmd("SET i 12345");
        db.cmd("SET z 012");
        db.cmd("SET e hello");
        db.cmd(&format!("SET r {long}"));
        db.cmd("HSET h a 1 b 2");
        db.replies(&[
            ("OBJECT ENCODING i", "$3\r\nint\r\n"),
            ("OBJECT ENCODING z", "$6\r\nembstr\r\n"),
            ("OBJECT ENCODING e", "$6\r\nembstr\r\n"),
            ("OBJECT ENCODING r", "$3\r\nraw\r\n"),
            ("OBJECT ENCODING h", "$8\r\nlistpack\r\n"),
            ("OBJECT ENCODING missing", "$-1\r\n"),
        ]);
        db.cmd("CONFIG SET hash-max-listpack-entries 1");
        assert_eq!(db.cmd("OBJECT ENCODING h"), "$9\r\nhashtable\r\n");
        db.cmd("CONFIG SET hash-max-listpack-entries 128");
        db.cmd("CONFIG SET hash-max-ziplist-value 0");
        assert_eq!(db.cmd("OBJECT ENCODING h"), "$9\r\nhashtable\r\n");
        assert_eq!(db.cmd("OBJECT TIER e"), "$4\r\ndram\r\n");
        db.cmd("RPUSH l a b");
        db.replies(&[
            ("OBJECT TIER l", "$4\r\ndram\r\n"),
            ("OBJECT TIER missing", "$-1\r\n"),
            ("OBJECT REFCOUNT e", ":1\r\n"),
            ("OBJECT IDLETIME e", ":0\r\n"),
        ]);
        assert!(db
            .cmd("OBJECT FREQ e")
            .starts_with("-ERR An LFU maxmemory policy is not selected"));
        assert!(db.cmd("OBJECT HELP").starts_with('*'));
        assert!(db
            .cmd("OBJECT NOPE e")
            .starts_with("-ERR unknown subcommand"));
        assert_eq!(
            db.cmd("MEMORY USAGE e"),
            // The key as the store keeps it: its byte of database and its one byte.
            format!(":{}\r\n", 2 + 5 + crate::admin::INDEX_ENTRY_BYTES)
        );
        assert_eq!(db.cmd("MEMORY USAGE missing"), "$-1\r\n");
    }

    #[test]
    fn expire_times_out_of_range_are_refused_as_redis_does() {
        let mut db = Db::large();
        assert_eq!(db.cmd("SET k v"), "+OK\r\n");
        // now + t*1000 overflows: refused, and the key is kept (it used to be deleted).
        for (line, name) in [
            ("EXPIRE k 9223372036854775", "expire"),
            ("EXPIRE k 9223372036854776", "expire"),
            ("EXPIREAT k 9223372036854776", "expireat"),
            ("PEXPIRE k 9223372036854775807", "pexpire"),
        ] {
            assert_eq!(
                db.cmd(line),
                format!("-ERR invalid expire time in '{name}' command\r\n"),
                "{line}"
            );
        }
        db.replies(&[
            ("TTL k", ":-1\r\n"),
            ("GET k", "$1\r\nv\r\n"),
            // The largest absolute time is accepted, and far in the future.
            ("PEXPIREAT k 9223372036854775807", ":1\r\n"),
            ("EXPIREAT k 9223372036854775", ":1\r\n"),
        ]);
        assert!(db.cmd("TTL k").starts_with(":92233"));
        for (line, name) in [
            ("SET k v EX 99999999999999999", "set"),
            ("SET k v PX 9223372036854775807", "set"),
            ("SET k v EXAT 9223372036854776", "set"),
            ("SET k v EX 0", "set"),
            ("SET k v PX -1", "set"),
            ("SETEX k 99999999999999999 v", "setex"),
            ("SETEX k 0 v", "setex"),
            ("PSETEX k 9223372036854775807 v", "psetex"),
        ] {
            assert_eq!(
                db.cmd(line),
                format!("-ERR invalid expire time in '{name}' command\r\n"),
                "{line}"
            );
        }
        assert_eq!(db.cmd("SET k v EX 100"), "+OK\r\n");
        let ttl = db.cmd("TTL k");
        assert!(ttl == ":100\r\n" || ttl == ":99\r\n", "{ttl}");
        assert_eq!(db.cmd("SET k v EXAT 9223372036854775"), "+OK\r\n");
        assert!(db.cmd("TTL k").starts_with(":92233"));
        // A time in the past still deletes, as in Redis.
        db.replies(&[
            ("EXPIRE k -9223372036854775", ":1\r\n"),
            ("EXISTS k", ":0\r\n"),
        ]);
    }

    #[test]
    fn expire_flags_follow_redis_7() {
        let mut db = Db::large();
        db.replies(&[
            ("SET k v", "+OK\r\n"),
            ("EXPIRE k 100 XX", ":0\r\n"),
            ("EXPIRE k 100 GT", ":0\r\n"),
            ("EXPIRE k 100 LT", ":1\r\n"),
            ("EXPIRE k 200 NX", ":0\r\n"),
            ("EXPIRE k 50 GT", ":0\r\n"),
            ("EXPIRE k 200 GT", ":1\r\n"),
            ("EXPIRE k 300 LT", ":0\r\n"),
            ("EXPIRE k 150 XX LT", ":1\r\n"),
            ("TTL k", ":150\r\n"),
            ("PERSIST k", ":1\r\n"),
            ("EXPIRE k 100 NX", ":1\r\n"),
            (
                "EXPIRE k 100 NX XX",
                "-ERR NX and XX, GT or LT options at the same time are not compatible\r\n",
            ),
            (
                "EXPIRE k 100 GT LT",
                "-ERR GT and LT options at the same time are not compatible\r\n",
            ),
            ("EXPIRE k 100 FOO", "-ERR Unsupported option FOO\r\n"),
            ("EXPIRE missing 100", ":0\r\n"),
            ("EXPIRETIME missing", ":-2\r\n"),
            ("SET p v", "+OK\r\n"),
            ("EXPIRETIME p", ":-1\r\n"),
            ("PEXPIRETIME p", ":-1\r\n"),
            ("PEXPIREAT p 99999999999999", ":1\r\n"),
            ("PEXPIRETIME p", ":99999999999999\r\n"),
            ("EXPIRETIME p", ":99999999999\r\n"),
        ]);
    }

    #[test]
    fn rename_copy_touch_and_randomkey() {
        let mut db = Db::large();
        db.replies(&[
            ("RANDOMKEY", "$-1\r\n"),
            ("RENAME a b", "-ERR no such key\r\n"),
            ("SET a 1", "+OK\r\n"),
            ("EXPIRE a 100", ":1\r\n"),
            ("RENAME a b", "+OK\r\n"),
            ("EXISTS a", ":0\r\n"),
            ("TTL b", ":100\r\n"),
            ("RENAME b b", "+OK\r\n"),
            ("SET c 2", "+OK\r\n"),
            ("RENAMENX b c", ":0\r\n"),
            ("RENAMENX b d", ":1\r\n"),
            ("GET d", "$1\r\n1\r\n"),
            (
                "COPY d d",
                "-ERR source and destination objects are the same\r\n",
            ),
            ("COPY d c", ":0\r\n"),
            ("COPY d c REPLACE", ":1\r\n"),
            ("GET c", "$1\r\n1\r\n"),
            ("TTL c", ":100\r\n"),
            ("COPY d e DB 0", ":1\r\n"),
            ("COPY missing e", ":0\r\n"),
            ("COPY d e DB 1 REPLACE", ":1\r\n"),
            ("COPY d e DB 16", "-ERR DB index is out of range\r\n"),
            ("TOUCH c d c missing", ":3\r\n"),
        ]);
        let r = db.cmd("RANDOMKEY");
        assert!(
            ["$1\r\nc\r\n", "$1\r\nd\r\n", "$1\r\ne\r\n"].contains(&r.as_str()),
            "{r}"
        );
        db.cmd("HSET h f v");
        db.replies(&[("RENAME h h2", "+OK\r\n"), ("HGET h2 f", "$1\r\nv\r\n")]);
    }

    #[test]
    fn scan_keys_match_count_type() {
        let mut db = Db::large();
        for i in 0..50 {
            db.cmd(&format!("SET k{i:02} v"));
        }
        db.cmd("HSET h f v");
        let mut all = scan_all(&mut db, " COUNT 7");
        all.sort();
        assert_eq!(all.len(), 51);
        assert_eq!(scan_all(&mut db, " MATCH k1* COUNT 3").len(), 10);
        assert_eq!(scan_all(&mut db, " TYPE hash"), ["h"]);
        assert_eq!(scan_all(&mut db, " TYPE list").len(), 0);
        db.replies(&[
            ("SCAN x", "-ERR invalid cursor\r\n"),
            ("SCAN 0 COUNT 0", "-ERR syntax error\r\n"),
            ("SCAN 0 MATCH", "-ERR syntax error\r\n"),
        ]);
        assert_eq!(db.cmd("KEYS k4*").matches("$3\r\nk4").count(), 10);
        db.replies(&[("KEYS nothing*", "*0\r\n"), ("DBSIZE", ":51\r\n")]);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Redis's guarantee under inserts and deletes between SCAN calls: every key present
        /// for the whole scan is returned, and (cursors kept) none twice.
        #[test]
        fn scan_returns_every_key_present_throughout(
            initial in proptest::collection::btree_set(0u16..300, 0..120),
            ops in proptest::collection::vec((proptest::bool::ANY, 0u16..300), 0..200),
            count in 1usize..20,
        ) {
            let mut db = Db::large();
            for k in &initial {
                db.cmd(&format!("SET {k} v"));
            }
            let mut present_throughout: std::collections::BTreeSet<String> =
                initial.iter().map(|k| k.to_string()).collect();
            let mut seen = Vec::new();
            let mut cursor = "0".to_string();
            let mut ops = ops.into_iter();
            loop {
                let (next, found) = parse_scan(&db.cmd(&format!("SCAN {cursor} COUNT {count}")));
                seen.extend(found);
                if next == "0" {
                    break;
                }
                cursor = next;
                for (insert, k) in ops.by_ref().take(3) {
                    if insert {
                        db.cmd(&format!("SET {k} v"));
                    } else {
                        db.cmd(&format!("DEL {k}"));
                        present_throughout.remove(&k.to_string());
                    }
                }
            }
            let unique: std::collections::BTreeSet<String> = seen.iter().cloned().collect();
            proptest::prop_assert_eq!(unique.len(), seen.len(), "a key returned twice");
            for k in &present_throughout {
                proptest::prop_assert!(unique.contains(k), "{} missed", k);
            }
        }
    }

    #[test]
    fn expired_keys_counts_keys_a_command_found_expired() {
        let mut db = Db::large();
        db.cmd("SET gone v PX 1");
        db.cmd("SET stays v");
        // Let the 1 ms TTL pass (a wait for a state, not a timed assertion).
        while db
            .store
            .peek(&crate::db::store_key(0, b"gone"))
            .is_some_and(|o| o.expires_at_ms > Some(now_ms()))
        {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
        db.replies(&[
            ("GET gone", "$-1\r\n"),
            ("GET stays", "$1\r\nv\r\n"),
            ("DEL stays", ":1\r\n"),
        ]);
        assert_eq!(info_field(&mut db, "stats", "expired_keys"), "1");
    }

    #[test]
    fn randomkey_reaches_every_key_of_a_small_database() {
        let mut db = Db::large();
        // Keys bunched in the byte space: a random point of it would almost never give "a00".
        for k in ["a", "a0", "a00", "zzzz"] {
            db.cmd(&format!("SET {k} v"));
        }
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..200 {
            seen.insert(db.cmd("RANDOMKEY"));
        }
        assert_eq!(seen.len(), 4, "{seen:?}");
    }

    /// Every type of key, one name in two databases: each database sees only its own (value,
    /// type, TTL, counts, KEYS, SCAN, RANDOMKEY, DEL, RENAME), and SELECT's errors are Redis's.
    #[test]
    fn databases_keep_keys_of_every_type_apart() {
        let mut db = Db::large();
        let fill = |db: &mut Db, tag: &str| {
            for line in [
                format!("SET s {tag}"),
                format!("HSET h f {tag}"),
                format!("RPUSH l {tag} x"),
                format!("SADD set {tag}"),
                format!("ZADD z 1 {tag}"),
                format!("SET only{tag} 1"),
            ] {
                assert!(!db.cmd(&line).starts_with('-'), "{line}");
            }
        };
        fill(&mut db, "zero");
        db.replies(&[
            ("SELECT 1", "+OK\r\n"),
            ("DBSIZE", ":0\r\n"),
            ("GET s", "$-1\r\n"),
            ("TYPE l", "+none\r\n"),
            // The same names as other types: no WRONGTYPE from database 0's keys.
            ("LPUSH s one", ":1\r\n"),
            ("SET l one", "+OK\r\n"),
        ]);
        db.cmd("DEL s l");
        fill(&mut db, "one");
        db.cmd("EXPIRE s 100");
        for (d, tag) in [(0, "zero"), (1, "one")] {
            db.cmd(&format!("SELECT {d}"));
            let n = tag.len();
            assert_eq!(db.cmd("GET s"), format!("${n}\r\n{tag}\r\n"));
            assert_eq!(db.cmd("HGET h f"), format!("${n}\r\n{tag}\r\n"));
            assert_eq!(db.cmd("LINDEX l 0"), format!("${n}\r\n{tag}\r\n"));
            assert_eq!(
                db.cmd("SISMEMBER set zero"),
                format!(":{}\r\n", u8::from(d == 0))
            );
            assert_eq!(
                db.cmd("ZSCORE z one"),
                if d == 1 { "$1\r\n1\r\n" } else { "$-1\r\n" }
            );
            assert_eq!(db.cmd("TTL s"), if d == 1 { ":100\r\n" } else { ":-1\r\n" });
            assert_eq!(db.cmd("DBSIZE"), ":6\r\n");
            assert_eq!(
                db.cmd("KEYS only*"),
                format!("*1\r\n${}\r\nonly{tag}\r\n", n + 4)
            );
            let scan = db.cmd("SCAN 0 COUNT 100");
            assert!(scan.starts_with("*2\r\n$1\r\n0\r\n*6\r\n"), "{scan}");
            let other = if d == 0 { "onlyone" } else { "onlyzero" };
            assert!(
                scan.contains(&format!("only{tag}")) && !scan.contains(other),
                "{scan}"
            );
            for _ in 0..20 {
                let r = db.cmd("RANDOMKEY");
                assert!(
                    !r.contains(if d == 0 { "onlyone" } else { "onlyzero" }),
                    "{r}"
                );
            }
        }
        // DEL and RENAME stay in their database.
        db.cmd("SELECT 0");
        db.replies(&[("RENAME s s2", "+OK\r\n"), ("DEL h", ":1\r\n")]);
        db.cmd("SELECT 1");
        db.replies(&[
            ("EXISTS s h s2", ":2\r\n"),
            // SELECT's errors, Redis's words.
            ("SELECT 16", "-ERR DB index is out of range\r\n"),
            ("SELECT -1", "-ERR DB index is out of range\r\n"),
        ]);
        assert_eq!(db.cmd("SELECT x"), format!("-{NOT_INT}\r\n"));
        assert_eq!(db.session.db, 1, "a refused SELECT keeps the database");
        // RESET goes back to database 0; HELLO keeps the database (as Redis 7.0 does).
        db.cmd("HELLO 2");
        assert_eq!(db.cmd("GET s"), "$3\r\none\r\n");
        db.cmd("RESET");
        assert_eq!(db.cmd("GET s2"), "$4\r\nzero\r\n");
    }

    /// MOVE, COPY ... DB, FLUSHDB, FLUSHALL and SWAPDB, with Redis's replies and errors.
    #[test]
    fn move_copy_flushdb_and_swapdb() {
        let mut db = Db::large();
        db.replies(&[
            ("RPUSH l a b", ":2\r\n"),
            ("PEXPIRE l 100000", ":1\r\n"),
            ("MOVE l 2", ":1\r\n"),
            ("EXISTS l", ":0\r\n"),
            ("MOVE l 2", ":0\r\n"),
            (
                "MOVE l 0",
                "-ERR source and destination objects are the same\r\n",
            ),
            ("MOVE l 16", "-ERR DB index is out of range\r\n"),
            (
                "MOVE l x",
                "-ERR value is not an integer or out of range\r\n",
            ),
            ("SELECT 2", "+OK\r\n"),
            ("LRANGE l 0 -1", "*2\r\n$1\r\na\r\n$1\r\nb\r\n"),
            // The TTL went with it.
            ("EXPIRE l 100 NX", ":0\r\n"),
            ("SET s v", "+OK\r\n"),
            // MOVE onto a key the other database holds moves nothing.
            ("SELECT 0", "+OK\r\n"),
            ("SET s mine", "+OK\r\n"),
            ("MOVE s 2", ":0\r\n"),
            ("GET s", "$4\r\nmine\r\n"),
            (
                "COPY s s DB 0",
                "-ERR source and destination objects are the same\r\n",
            ),
            ("COPY s s DB 2", ":0\r\n"),
            ("COPY s s DB 2 REPLACE", ":1\r\n"),
            ("COPY s s DB 3", ":1\r\n"),
            (
                "COPY s t DB x",
                "-ERR value is not an integer or out of range\r\n",
            ),
            ("COPY s t DB 99", "-ERR DB index is out of range\r\n"),
            ("SELECT 2", "+OK\r\n"),
            ("GET s", "$4\r\nmine\r\n"),
            ("DBSIZE", ":2\r\n"),
            // FLUSHDB empties database 2 only.
            ("FLUSHDB", "+OK\r\n"),
            ("DBSIZE", ":0\r\n"),
            ("SELECT 3", "+OK\r\n"),
            ("GET s", "$4\r\nmine\r\n"),
            // SWAPDB: database 3's keys are database 5's and back.
            ("SWAPDB 3 5", "+OK\r\n"),
            ("DBSIZE", ":0\r\n"),
            ("SELECT 5", "+OK\r\n"),
            ("GET s", "$4\r\nmine\r\n"),
            ("SET n 1", "+OK\r\n"),
            ("SWAPDB 5 3", "+OK\r\n"),
            ("GET n", "$-1\r\n"),
            ("SELECT 3", "+OK\r\n"),
            ("MGET s n", "*2\r\n$4\r\nmine\r\n$1\r\n1\r\n"),
            ("SWAPDB 0 0", "+OK\r\n"),
            ("SWAPDB a 1", "-ERR invalid first DB index\r\n"),
            ("SWAPDB 1 b", "-ERR invalid second DB index\r\n"),
            ("SWAPDB 1 16", "-ERR DB index is out of range\r\n"),
            ("SWAPDB 3 9", "+OK\r\n"),
            ("FLUSHALL", "+OK\r\n"),
            ("DBSIZE", ":0\r\n"),
            ("SELECT 9", "+OK\r\n"),
            ("DBSIZE", ":0\r\n"),
            ("SELECT 0", "+OK\r\n"),
            ("DBSIZE", ":0\r\n"),
            (
                "CONFIG GET databases",
                "*2\r\n$9\r\ndatabases\r\n$2\r\n16\r\n",
            ),
        ]);
    }

    /// SORT ... STORE writes a key that is no key position of the table's: its watchers (in the
    /// database it is written in) hear of it when it was written, a result stored or an old key
    /// deleted by an empty result (Redis's multi test "EXEC fail on WATCHed key modified by
    /// SORT with STORE even if the result is empty").
    #[test]
    fn sort_store_touches_its_destination_in_its_database() {
        let mut db = Db::large();
        db.session.id = 1;
        db.cmd("SELECT 1");
        db.cmd("LPUSH foo bar");
        assert_eq!(
            db.watched_exec("foo", "SORT emptylist STORE foo"),
            (":0\r\n".into(), "*-1\r\n".into())
        );
        // Nothing stored and nothing deleted: no change.
        let (_, exec) = db.watched_exec("foo", "SORT emptylist STORE foo");
        assert_eq!(exec, "*1\r\n+PONG\r\n");
    }
}

#[cfg(test)]
mod restore_tests;
