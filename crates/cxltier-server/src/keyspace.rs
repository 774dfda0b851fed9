//! The keyspace commands: SCAN, KEYS, RANDOMKEY, RENAME, RENAMENX, COPY, TOUCH, EXPIRETIME,
//! PEXPIRETIME, SORT, DUMP and RESTORE (Redis's payload format: `crate::rdb::dump`).
//!
//! SCAN walks the keys in the byte order the store's index keeps. A cursor stands for the
//! smallest key the next call starts from: the server keeps that key under a number (the
//! cursor the client sees), so a scan resumes exactly where it ended however many keys were
//! inserted or deleted in between, and every key present for the whole scan is returned once
//! (Redis's guarantee; Redis may return some twice, this never does while the cursor is kept).
//! The server keeps the last [`KEPT_CURSORS`] cursors; an older one starts the scan over, which
//! may repeat keys but never skips one.

use std::collections::VecDeque;
use std::hash::{BuildHasher, Hasher};

use cxltier_store::{Kind, StoreError};
use hashbrown::HashMap;

use crate::commands::{fail, now_ms, parse_i64, Ctx, Effect, SYNTAX};
use crate::notify::class as nc;
use crate::rdb::dump::PayloadError;
use crate::rdb::load::{LoadError, Strings, Value};
use crate::rdb::{RdbError, RdbWriter};
use crate::resp::reply;

/// How many SCAN cursors the server remembers (each holds one key).
pub const KEPT_CURSORS: usize = 16_384;
/// Keys fetched per store call by KEYS.
const KEYS_BATCH: usize = 1024;

/// The SCAN cursors handed out: number → the key the next call starts from.
#[derive(Debug, Default)]
pub struct Cursors {
    next: u64,
    starts: HashMap<u64, Vec<u8>>,
    order: VecDeque<u64>,
}

impl Cursors {
    /// A new cursor for a scan that goes on from `start`.
    fn issue(&mut self, start: Vec<u8>) -> u64 {
        // 0 means "begin" and "done": never issued.
        self.next = self.next.wrapping_add(1).max(1);
        let id = self.next;
        self.starts.insert(id, start);
        self.order.push_back(id);
        while self.order.len() > KEPT_CURSORS {
            if let Some(old) = self.order.pop_front() {
                self.starts.remove(&old);
            }
        }
        id
    }

    /// Where the scan of `cursor` goes on; a cursor not (or no longer) known starts over.
    fn start(&self, cursor: u64) -> Vec<u8> {
        self.starts.get(&cursor).cloned().unwrap_or_default()
    }

    pub fn len(&self) -> usize {
        self.starts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }
}

/// The smallest key after `key` in byte order.
pub(crate) fn successor(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.extend_from_slice(key);
    k.push(0);
    k
}

/// The name `TYPE` (and `SCAN ... TYPE`) gives a kind: a hash is a hash however it is kept.
pub(crate) fn type_name(kind: Kind) -> &'static str {
    match kind {
        Kind::String | Kind::BigString => "string",
        Kind::Hash | Kind::ChunkedHash => "hash",
        Kind::List => "list",
        Kind::Set => "set",
        Kind::ZSet => "zset",
        // Never reaches a user: the store hides collection parts.
        Kind::Chunk => "none",
    }
}

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
                None => return fail(ctx, crate::commands::NOT_INT),
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
            && kind.is_none_or(|t| t.eq_ignore_ascii_case(type_name(*k).as_bytes()))
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
                    return fail(ctx, crate::commands::NOT_INT);
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
    let dst = cxltier_store::db_key(ctx.info.dbs.physical(db), crate::db::user_key(args[2]));
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
    let dst = cxltier_store::db_key(ctx.info.dbs.physical(db), crate::db::user_key(args[1]));
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
        Some(f) if o.kind == Kind::Hash => crate::hash::decode(o.value).and_then(|fields| {
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
                    return fail(ctx, crate::commands::NOT_INT);
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
        Some(_) => return fail(ctx, crate::commands::WRONGTYPE),
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
    let key = args[1];
    let Some((kind, value)) = ctx.store.get(key)?.map(|o| (o.kind, o.value.to_vec())) else {
        reply::null(ctx.out, ctx.session.proto);
        return Ok(Effect::Read);
    };
    let mut w = RdbWriter::bare(Vec::new());
    let name = crate::db::user_key(key);
    let written = crate::rdb::write_value(ctx.store, &mut w, key, name, (&kind, &value), |w, t| {
        w.value_type(t)
    });
    match written {
        Ok(true) => {}
        // Nothing a user can name (an emptied collection is deleted).
        Ok(false) => {
            reply::null(ctx.out, ctx.session.proto);
            return Ok(Effect::Read);
        }
        Err(RdbError::Store(e)) => return Err(e),
        Err(RdbError::Io(e)) => return fail(ctx, &format!("ERR {e}")),
    }
    match w.finish_dump() {
        Ok(payload) => reply::bulk(ctx.out, &payload),
        Err(e) => return fail(ctx, &format!("ERR {e}")),
    }
    Ok(Effect::Read)
}

/// RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME s] [FREQ f]: a DUMP payload of Redis's
/// format (redis-server's or cxltier's) under `key`, as Redis 7.0's restoreCommand (IDLETIME
/// and FREQ are checked and ignored: no access times are kept). The whole payload is decoded
/// and validated before the keyspace is touched, and the value is built under a key of the
/// server's own database, then renamed over `key`: a RESTORE that fails, on a bad payload or on
/// a store error midway (full, I/O), leaves the keyspace as it was.
pub(crate) fn restore(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let (key, payload) = (args[1], args[3]);
    let (mut replace, mut absttl, mut idle, mut freq) = (false, false, false, false);
    let mut i = 4;
    while i < args.len() {
        let more = i + 1 < args.len();
        match args[i].to_ascii_uppercase().as_slice() {
            b"REPLACE" => replace = true,
            b"ABSTTL" => absttl = true,
            // Redis takes one of IDLETIME and FREQ, not both.
            b"IDLETIME" if more && !freq => {
                match parse_i64(args[i + 1]) {
                    None => return fail(ctx, crate::commands::NOT_INT),
                    Some(v) if v < 0 => {
                        return fail(ctx, "ERR Invalid IDLETIME value, must be >= 0")
                    }
                    Some(_) => idle = true,
                }
                i += 1;
            }
            b"FREQ" if more && !idle => {
                match parse_i64(args[i + 1]) {
                    None => return fail(ctx, crate::commands::NOT_INT),
                    Some(v) if !(0..=255).contains(&v) => {
                        return fail(ctx, "ERR Invalid FREQ value, must be >= 0 and <= 255")
                    }
                    Some(_) => freq = true,
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
        None => return fail(ctx, crate::commands::NOT_INT),
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
            let mut op: crate::replication::Op = args.iter().map(|a| a.to_vec()).collect();
            op[2] = at.to_string().into_bytes();
            op.push(b"ABSTTL".to_vec());
            vec![op]
        });
    }
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
        cxltier_store::db_key(meta, RESTORING),
        cxltier_store::db_key(meta, REPLACED),
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
            let listpack = crate::hash::redis_keeps_listpack(ctx.info, &pairs);
            let encoded = crate::hash::encode(pairs.iter().copied());
            return crate::hash::store_fields(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_resume_and_forget_the_oldest() {
        let mut c = Cursors::default();
        let a = c.issue(b"a".to_vec());
        assert_ne!(a, 0);
        assert_eq!(c.start(a), b"a");
        for i in 0..KEPT_CURSORS {
            c.issue(i.to_string().into_bytes());
        }
        assert_eq!(c.len(), KEPT_CURSORS);
        // Forgotten: the scan starts over (repeats, never skips).
        assert_eq!(c.start(a), b"");
        assert_eq!(c.start(12345678), b"");
    }

    #[test]
    fn successor_is_the_next_key_in_byte_order() {
        assert!(successor(b"ab").as_slice() > b"ab".as_slice());
        assert!(successor(b"ab").as_slice() < b"ab\x00\x00".as_slice());
        assert!(successor(b"ab").as_slice() < b"ac".as_slice());
    }

    #[test]
    fn rename_and_copy_take_collections_whole() {
        let mut db = crate::list::testdb::Db::new();
        db.cmd("RPUSH bob a b c");
        assert_eq!(db.cmd("RENAME bob foo"), "+OK\r\n");
        assert_eq!(
            db.cmd("LRANGE foo 0 -1"),
            "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"
        );
        assert_eq!(db.cmd("EXISTS bob"), ":0\r\n");
        db.cmd("ZADD z 1 a");
        assert_eq!(db.cmd("COPY z z2"), ":1\r\n");
        assert_eq!(db.cmd("ZSCORE z2 a"), "$1\r\n1\r\n");
        assert_eq!(db.cmd("RENAMENX z foo"), ":0\r\n");
        assert_eq!(db.cmd("RENAME nope x"), "-ERR no such key\r\n");
        db.cmd("SET s v");
        assert_eq!(db.cmd("RENAME s foo"), "+OK\r\n");
        assert_eq!(db.cmd("GET foo"), "$1\r\nv\r\n");
    }

    #[test]
    fn sort_follows_redis() {
        let mut db = crate::list::testdb::Db::new();
        db.cmd("RPUSH l 3 1 2");
        assert_eq!(db.cmd("SORT l"), "*3\r\n$1\r\n1\r\n$1\r\n2\r\n$1\r\n3\r\n");
        assert_eq!(
            db.cmd("SORT l DESC LIMIT 0 2"),
            "*2\r\n$1\r\n3\r\n$1\r\n2\r\n"
        );
        db.cmd("MSET w_1 30 w_2 10 w_3 20");
        db.cmd("HSET h_1 f a");
        assert_eq!(
            db.cmd("SORT l BY w_* GET # GET h_*->f"),
            "*6\r\n$1\r\n2\r\n$-1\r\n$1\r\n3\r\n$-1\r\n$1\r\n1\r\n$1\r\na\r\n"
        );
        assert_eq!(
            db.cmd("SORT l BY nosort"),
            "*3\r\n$1\r\n3\r\n$1\r\n1\r\n$1\r\n2\r\n"
        );
        db.cmd("SADD s b a c");
        assert_eq!(db.cmd("SORT s ALPHA STORE d"), ":3\r\n");
        assert_eq!(
            db.cmd("LRANGE d 0 -1"),
            "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"
        );
        assert_eq!(
            db.cmd("SORT s"),
            "-ERR One or more scores can't be converted into double\r\n"
        );
        assert_eq!(db.cmd("SORT nope STORE d"), ":0\r\n");
        // An empty result that deletes a watched destination fails the transaction.
        db.cmd("RPUSH watched x");
        db.cmd("WATCH watched");
        assert_eq!(db.cmd("SORT nope STORE watched"), ":0\r\n");
        db.cmd("MULTI");
        db.cmd("PING");
        assert_eq!(db.cmd("EXEC"), "*-1\r\n");
        assert_eq!(db.cmd("EXISTS d"), ":0\r\n");
        assert_eq!(db.cmd("SORT_RO l STORE d"), "-ERR syntax error\r\n");
        assert!(db.cmd("SORT w_1").starts_with("-WRONGTYPE"));
    }

    #[test]
    fn dump_and_restore_round_trip_every_type() {
        let mut db = crate::list::testdb::Db::new();
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
            let mut out = Vec::new();
            crate::commands::execute(
                &mut db.store,
                &mut db.info,
                &mut db.session,
                &words,
                &mut out,
            );
            // The bulk's bytes, whatever they hold.
            let nl = out.iter().position(|&b| b == b'\n').unwrap();
            let payload = out[nl + 1..out.len() - 2].to_vec();
            let new = format!("{k}2");
            let words: Vec<&[u8]> = vec![b"RESTORE", new.as_bytes(), b"0", &payload];
            let mut out = Vec::new();
            crate::commands::execute(
                &mut db.store,
                &mut db.info,
                &mut db.session,
                &words,
                &mut out,
            );
            assert_eq!(out, b"+OK\r\n", "{k}");
            assert_eq!(db.cmd(&q(&new)), want, "{k}");
            let mut out = Vec::new();
            crate::commands::execute(
                &mut db.store,
                &mut db.info,
                &mut db.session,
                &words,
                &mut out,
            );
            assert_eq!(out, b"-BUSYKEY Target key name already exists.\r\n");
            let mut bad = payload.clone();
            *bad.last_mut().unwrap() ^= 1;
            let words: Vec<&[u8]> = vec![b"RESTORE", b"x", b"0", &bad];
            let mut out = Vec::new();
            crate::commands::execute(
                &mut db.store,
                &mut db.info,
                &mut db.session,
                &words,
                &mut out,
            );
            assert_eq!(out, b"-ERR DUMP payload version or checksum are wrong\r\n");
        }
        assert_eq!(db.cmd("DUMP nope"), "$-1\r\n");
    }
}

#[cfg(test)]
mod restore_tests;
