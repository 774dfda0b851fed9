//! The hash commands over both layouts ([`crate::hash_layout`]): HSET, HGET, HMGET, HGETALL,
//! HDEL, HINCRBY, HSCAN, ...

/// HSET's field-value arguments as distinct pairs for the store: the arguments may name a field
/// twice (the last value wins, and the field is added once).
pub(crate) fn last_wins<'a>(pairs: &[&'a [u8]]) -> Vec<(&'a [u8], &'a [u8])> {
    let mut at: hashbrown::HashMap<&[u8], usize> = hashbrown::HashMap::new();
    let mut out: Vec<(&[u8], &[u8])> = Vec::with_capacity(pairs.len() / 2);
    for fv in pairs.chunks(2) {
        match at.entry(fv[0]) {
            hashbrown::hash_map::Entry::Occupied(e) => out[*e.get()].1 = fv[1],
            hashbrown::hash_map::Entry::Vacant(e) => {
                e.insert(out.len());
                out.push((fv[0], fv[1]));
            }
        }
    }
    out
}

// ---- the commands that read or change one field, or draw fields at random ----

use cxltier_store::{Kind, Store, StoreError};

use hashbrown::HashMap;

use crate::context::{arity, fail, Ctx, Effect};
use crate::encoding::redis_keeps_listpack;
use crate::errors::{NOT_INT, WRONGTYPE};
use crate::hash_layout::{
    chunked_fields, decode, encode, store_fields, value_span, FLAT_MAX_BYTES,
};
use crate::notify::class as nc;
use crate::numbers::{int_arg, parse_f64};
use crate::resp::reply;

const CORRUPT: &str = "ERR the stored hash is corrupt; DEL the key";

/// A hash as these commands find it.
enum Loaded {
    Absent,
    /// A one-value hash: its fields and expiry.
    Flat(Vec<(Vec<u8>, Vec<u8>)>, Option<u64>),
    /// A chunked hash: its fields are read from the store as needed.
    Chunked,
}

/// The hash at `key`; `Err` the error reply (another type, or a corrupt value). A `read`
/// command's lookup counts as a hit or miss; a write's is neither (Redis's lookupKeyWrite).
fn load(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    read: bool,
) -> Result<Result<Loaded, &'static str>, StoreError> {
    let o = ctx.store.get(key)?;
    if read {
        ctx.info.lookup(key, o.is_some());
    }
    Ok(match o {
        None => Ok(Loaded::Absent),
        Some(o) if o.kind == Kind::ChunkedHash => Ok(Loaded::Chunked),
        Some(o) if o.kind != Kind::Hash => Err(WRONGTYPE),
        Some(o) => match decode(o.value) {
            Some(f) => Ok(Loaded::Flat(
                f.into_iter()
                    .map(|(f, v)| (f.to_vec(), v.to_vec()))
                    .collect(),
                o.expires_at_ms,
            )),
            None => Err(CORRUPT),
        },
    })
}

/// Write a one-value hash's `fields` back under `key`, keeping its expiry (chunked once large).
fn save(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    fields: &[(Vec<u8>, Vec<u8>)],
    expires: Option<u64>,
    was_flat: bool,
) -> Result<(), StoreError> {
    let pairs: Vec<(&[u8], &[u8])> = fields
        .iter()
        .map(|(f, v)| (f.as_slice(), v.as_slice()))
        .collect();
    let encoded = encode(pairs.iter().copied());
    let listpack = redis_keeps_listpack(ctx.info, &pairs);
    store_fields(
        ctx.store, key, &pairs, listpack, &encoded, expires, was_flat,
    )
}

/// Change (or add) one field through `change`, which is given its old value and answers the
/// new one or the error reply; then reply with what `change` returned.
fn update_field(
    ctx: &mut Ctx<'_>,
    args: &[&[u8]],
    change: impl FnOnce(Option<&[u8]>) -> Result<Vec<u8>, &'static str>,
    answer: impl FnOnce(&mut Ctx<'_>, &[u8]),
) -> Result<Effect, StoreError> {
    let (mut fields, expires, was_flat) = match load(ctx, args[1], false)? {
        Err(e) => return fail(ctx, e),
        Ok(Loaded::Chunked) => {
            let old = ctx.store.hget(args[1], args[2])?;
            let new = match change(old.as_deref()) {
                Ok(v) => v,
                Err(e) => return fail(ctx, e),
            };
            ctx.store.hset(args[1], &[(args[2], &new)])?;
            answer(ctx, &new);
            return Ok(Effect::Wrote);
        }
        Ok(Loaded::Absent) => (Vec::new(), None, false),
        Ok(Loaded::Flat(f, e)) => (f, e, true),
    };
    let at = fields.iter().position(|(f, _)| f == args[2]);
    let new = match change(at.map(|i| fields[i].1.as_slice())) {
        Ok(v) => v,
        Err(e) => return fail(ctx, e),
    };
    match at {
        Some(i) => fields[i].1 = new.clone(),
        None => fields.push((args[2].to_vec(), new.clone())),
    }
    save(ctx, args[1], &fields, expires, was_flat)?;
    answer(ctx, &new);
    Ok(Effect::Wrote)
}

pub(crate) fn hsetnx(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let (mut fields, expires, was_flat) = match load(ctx, args[1], false)? {
        Err(e) => return fail(ctx, e),
        Ok(Loaded::Chunked) => {
            let added = ctx.store.hget(args[1], args[2])?.is_none();
            if added {
                ctx.store.hset(args[1], &[(args[2], args[3])])?;
                ctx.notify(crate::notify::class::HASH, "hset", args[1]);
            }
            reply::int(ctx.out, added as i64);
            return Ok(if added { Effect::Wrote } else { Effect::Read });
        }
        Ok(Loaded::Absent) => (Vec::new(), None, false),
        Ok(Loaded::Flat(f, e)) => (f, e, true),
    };
    if fields.iter().any(|(f, _)| f == args[2]) {
        reply::int(ctx.out, 0);
        return Ok(Effect::Read);
    }
    fields.push((args[2].to_vec(), args[3].to_vec()));
    save(ctx, args[1], &fields, expires, was_flat)?;
    ctx.notify(crate::notify::class::HASH, "hset", args[1]);
    reply::int(ctx.out, 1);
    Ok(Effect::Wrote)
}

pub(crate) fn hincrby(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let Some(by) = int_arg(args[3]) else {
        return fail(ctx, NOT_INT);
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

pub(crate) fn hincrbyfloat(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let Some(by) = parse_f64(args[3]) else {
        return fail(ctx, "ERR value is not a valid float");
    };
    if by.is_infinite() {
        return fail(ctx, "ERR value is NaN or Infinity");
    }
    update_field(
        ctx,
        args,
        |old| {
            let old = match old {
                None => 0.0,
                Some(v) => parse_f64(v).ok_or("ERR hash value is not a float")?,
            };
            let next = old + by;
            if !next.is_finite() {
                return Err("ERR increment would produce NaN or Infinity");
            }
            Ok(crate::numbers::format_f64(next).into_bytes())
        },
        |ctx, new| {
            // Replicated as the value it made (Redis: `HSET key field value`), so that a
            // replica does not compute it again with its own rounding.
            ctx.session.propagate_as(|| {
                vec![vec![
                    b"hset".to_vec(),
                    args[1].to_vec(),
                    args[2].to_vec(),
                    new.to_vec(),
                ]]
            });
            ctx.notify(crate::notify::class::HASH, "hincrbyfloat", args[1]);
            reply::bulk(ctx.out, new)
        },
    )
}

pub(crate) fn hstrlen(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    match load(ctx, args[1], true)? {
        Err(e) => fail(ctx, e),
        Ok(h) => {
            let n = match h {
                Loaded::Absent => 0,
                Loaded::Chunked => ctx.store.hget(args[1], args[2])?.map_or(0, |v| v.len()),
                Loaded::Flat(fields, _) => fields
                    .into_iter()
                    .find(|(f, _)| f == args[2])
                    .map_or(0, |(_, v)| v.len()),
            };
            reply::int(ctx.out, n as i64);
            Ok(Effect::Read)
        }
    }
}

/// HSCAN. A one-value hash (a listpack in Redis's terms) answers, as Redis does for one, every
/// field matching in the first call, with cursor 0; a chunked hash is scanned in pages of about
/// COUNT fields, the cursor naming the last field returned (as SSCAN's), so every field present
/// for the whole scan is returned once.
pub(crate) fn hscan(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let Ok((after, pattern, count)) = crate::args::scan_args(ctx, args) else {
        return Ok(Effect::Read);
    };
    let page = match load(ctx, args[1], true)? {
        Err(e) => return fail(ctx, e),
        // A hash kept whole is one page: all of it at cursor 0, nothing after.
        Ok(Loaded::Absent) => (Vec::new(), None),
        Ok(Loaded::Flat(f, _)) if args[2] == b"0" => (f, None),
        Ok(Loaded::Flat(..)) => (Vec::new(), None),
        Ok(Loaded::Chunked) => ctx.store.hscan(args[1], after.as_deref(), count)?,
    };
    crate::args::reply_scan_page(ctx.out, page, pattern);
    Ok(Effect::Read)
}

/// HRANDFIELD key [count [WITHVALUES]], Redis 7.0's semantics: a positive count gives distinct
/// fields, a negative one allows repeats (bounded by the client-output-buffer-limit).
pub(crate) fn hrandfield(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let (count, withvalues) = match crate::args::random_count_args(args, b"WITHVALUES") {
        Ok(a) => a,
        Err(e) => return fail(ctx, e),
    };
    let proto = ctx.session.proto;
    let (fields, len) = match load(ctx, args[1], true)? {
        Err(e) => return fail(ctx, e),
        Ok(Loaded::Absent) => (Fields::Flat(Vec::new()), 0),
        Ok(Loaded::Flat(f, _)) => {
            let n = f.len();
            (Fields::Flat(f), n)
        }
        Ok(Loaded::Chunked) => (Fields::Chunked, ctx.store.hlen(args[1])? as usize),
    };
    let Some(c) = count else {
        if len == 0 {
            reply::null(ctx.out, proto);
        } else {
            let (f, _) = fields.at(ctx, args[1], rand::random_range(0..len))?;
            reply::bulk(ctx.out, &f);
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
    if len == 0 || c == 0 {
        reply::array(ctx.out, 0);
        return Ok(Effect::Read);
    }
    if c > 0 {
        // Distinct fields: a random sample of min(count, len) of them.
        let want = (c as u64).min(len as u64) as usize;
        let picked = rand::seq::index::sample(&mut rand::rng(), len, want);
        let mut out = Vec::new();
        reply::array(&mut out, want * per);
        for i in picked {
            let fv = fields.at(ctx, args[1], i)?;
            write(&mut out, &fv);
        }
        ctx.out.extend_from_slice(&out);
        return Ok(Effect::Read);
    }
    let n = c.unsigned_abs();
    let limit = crate::args::reply_limit(ctx);
    let over = || {
        format!(
            "ERR the reply to {n} random draws would be over the client-output-buffer-limit hard limit of {limit} bytes: ask for fewer"
        )
    };
    if n.saturating_mul(6 * per as u64) > limit as u64 {
        return fail(ctx, &over());
    }
    let mut out = Vec::new();
    reply::array(&mut out, n as usize * per);
    for _ in 0..n {
        let fv = fields.at(ctx, args[1], rand::random_range(0..len))?;
        write(&mut out, &fv);
        if out.len() > limit {
            return fail(ctx, &over());
        }
    }
    ctx.out.extend_from_slice(&out);
    Ok(Effect::Read)
}

/// Where HRANDFIELD draws from: a one-value hash's fields, or a chunked hash's, by index in
/// O(log n) each (`Store::member_at`) without reading the rest.
enum Fields {
    Flat(Vec<(Vec<u8>, Vec<u8>)>),
    Chunked,
}

impl Fields {
    fn at(
        &self,
        ctx: &mut Ctx<'_>,
        key: &[u8],
        i: usize,
    ) -> Result<(Vec<u8>, Vec<u8>), StoreError> {
        match self {
            Fields::Flat(f) => Ok(f[i].clone()),
            Fields::Chunked => ctx.store.member_at(key, i as u64)?.ok_or_else(|| {
                StoreError::Corrupt(format!(
                    "the hash {:?} has no field at index {i} below its length",
                    String::from_utf8_lossy(key)
                ))
            }),
        }
    }
}

const CORRUPT_HASH: &str = "ERR the stored hash is corrupt; DEL the key";

/// Up to this many fields in one HSET/HMGET/HDEL, each is looked for by a scan of the list (no
/// allocation: the common case); beyond, through a hash index, so the work stays linear.
const FEW_FIELDS: usize = 8;

/// A hash's fields, or the reply to give when the key holds something else.
enum HashRead {
    Missing,
    Fields(Vec<(Vec<u8>, Vec<u8>)>),
    /// A large hash, kept as a collection: its fields are read from the store as needed.
    Chunked,
    WrongType,
    Corrupt,
}

fn read_hash(store: &mut Store, key: &[u8]) -> Result<HashRead, StoreError> {
    Ok(match store.get(key)? {
        None => HashRead::Missing,
        Some(o) if o.kind == Kind::ChunkedHash => HashRead::Chunked,
        Some(o) if o.kind != Kind::Hash => HashRead::WrongType,
        Some(o) => match decode(o.value) {
            Some(f) => HashRead::Fields(
                f.into_iter()
                    .map(|(f, v)| (f.to_vec(), v.to_vec()))
                    .collect(),
            ),
            None => HashRead::Corrupt,
        },
    })
}

pub(crate) fn hset(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    hset_fields(ctx, args, false)
}

pub(crate) fn hmset(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    hset_fields(ctx, args, true)
}

fn hset_fields(ctx: &mut Ctx<'_>, args: &[&[u8]], hmset: bool) -> Result<Effect, StoreError> {
    let n = args.len();
    if n % 2 != 0 {
        arity(ctx.out, args[0]);
        return Ok(Effect::Read);
    }
    let store = &mut *ctx.store;
    let out = &mut *ctx.out;
    // The common update (YCSB's): one existing field rewritten at the same length. Its
    // bytes are overwritten in place; nothing else of the record is read or written.
    if n == 4 {
        let span = match store.get(args[1])? {
            Some(o) if o.kind == Kind::Hash => value_span(o.value, args[2])
                .flatten()
                .filter(|r| r.len() == args[3].len()),
            _ => None,
        };
        if let Some(r) = span {
            if store.patch(args[1], r.start, args[3])? {
                ctx.info.notify.emit(nc::HASH, "hset", args[1]);
                if hmset {
                    reply::ok(out);
                } else {
                    reply::int(out, 0);
                }
                return Ok(Effect::Wrote);
            }
        }
    }
    // One read of the record, borrowed: the new encoding is built from the old bytes and
    // the arguments without copying each field. When the one-field path above already
    // read it, its value is at hand: reading it again with `get` would count a second
    // access (admission would rate updated keys above read ones) and a second hit.
    let read_above = n == 4 && store.peek(args[1]).is_some();
    let (encoded, expires, added) = {
        let current = if read_above {
            store.peek(args[1])
        } else {
            store.get(args[1])?
        };
        let (old, expires) = match current {
            None => (None, None),
            Some(o) if o.kind == Kind::ChunkedHash => {
                // A large hash: the fields are written into its tree, the rest untouched.
                let added = store.hset(args[1], &last_wins(&args[2..]))?;
                ctx.info.notify.emit(nc::HASH, "hset", args[1]);
                if hmset {
                    reply::ok(out);
                } else {
                    reply::int(out, added as i64);
                }
                return Ok(Effect::Wrote);
            }
            Some(o) if o.kind != Kind::Hash => {
                reply::error(out, WRONGTYPE);
                return Ok(Effect::Read);
            }
            Some(o) => (Some(o.value), o.expires_at_ms),
        };
        let mut fields: Vec<(&[u8], &[u8])> = match old.map(decode) {
            None => Vec::new(),
            Some(Some(f)) => f,
            Some(None) => {
                reply::error(out, CORRUPT_HASH);
                return Ok(Effect::Read);
            }
        };
        let mut added = 0;
        if n - 2 <= 2 * FEW_FIELDS {
            for fv in args[2..].chunks(2) {
                match fields.iter_mut().find(|(f, _)| *f == fv[0]) {
                    Some(slot) => slot.1 = fv[1],
                    None => {
                        fields.push((fv[0], fv[1]));
                        added += 1;
                    }
                }
            }
        } else {
            // Many fields: a search of the list for each was quadratic (150,000 fields
            // held the server 15 s). An index from field to its place instead.
            let mut at: HashMap<&[u8], usize> = HashMap::with_capacity(fields.len());
            for (i, (f, _)) in fields.iter().enumerate() {
                at.entry(f).or_insert(i);
            }
            for fv in args[2..].chunks(2) {
                match at.entry(fv[0]) {
                    hashbrown::hash_map::Entry::Occupied(e) => fields[*e.get()].1 = fv[1],
                    hashbrown::hash_map::Entry::Vacant(e) => {
                        e.insert(fields.len());
                        fields.push((fv[0], fv[1]));
                        added += 1;
                    }
                }
            }
        }
        let encoded = encode(fields.iter().copied());
        if encoded.len() > FLAT_MAX_BYTES {
            // Too large to stay one value: the fields are copied out of the borrowed record.
            let owned: Vec<(Vec<u8>, Vec<u8>)> = fields
                .iter()
                .map(|(f, v)| (f.to_vec(), v.to_vec()))
                .collect();
            let was_flat = old.is_some();
            let pairs: Vec<(&[u8], &[u8])> = owned
                .iter()
                .map(|(f, v)| (f.as_slice(), v.as_slice()))
                .collect();
            let listpack = redis_keeps_listpack(ctx.info, &pairs);
            store_fields(
                store, args[1], &pairs, listpack, &encoded, expires, was_flat,
            )?;
            ctx.info.notify.emit(nc::HASH, "hset", args[1]);
            if hmset {
                reply::ok(out);
            } else {
                reply::int(out, added);
            }
            return Ok(Effect::Wrote);
        }
        (encoded, expires, added)
    };
    store.put(args[1], Kind::Hash, &encoded, expires)?;
    ctx.info.notify.emit(nc::HASH, "hset", args[1]);
    if hmset {
        reply::ok(out);
    } else {
        reply::int(out, added);
    }
    Ok(Effect::Wrote)
}

/// The hash reads, one handler each in the table, one body.
#[derive(Clone, Copy, PartialEq, Eq)]
enum HashQuery {
    Get,
    MGet,
    GetAll,
    Len,
    Exists,
    Keys,
    Vals,
}

pub(crate) fn hget(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    hash_query(ctx, args, HashQuery::Get)
}

pub(crate) fn hmget(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    hash_query(ctx, args, HashQuery::MGet)
}

pub(crate) fn hgetall(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    hash_query(ctx, args, HashQuery::GetAll)
}

pub(crate) fn hlen(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    hash_query(ctx, args, HashQuery::Len)
}

pub(crate) fn hexists(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    hash_query(ctx, args, HashQuery::Exists)
}

pub(crate) fn hkeys(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    hash_query(ctx, args, HashQuery::Keys)
}

pub(crate) fn hvals(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    hash_query(ctx, args, HashQuery::Vals)
}

fn hash_query(ctx: &mut Ctx<'_>, args: &[&[u8]], q: HashQuery) -> Result<Effect, StoreError> {
    let n = args.len();
    let proto = ctx.session.proto;
    let out = &mut *ctx.out;
    let o = ctx.store.get(args[1])?;
    ctx.info.lookup(args[1], o.is_some());
    let fields = match o {
        Some(o) if o.kind == Kind::ChunkedHash => return chunked_hash_query(ctx, args, q),
        None => Vec::new(),
        Some(o) if o.kind != Kind::Hash => {
            reply::error(out, WRONGTYPE);
            return Ok(Effect::Read);
        }
        Some(o) => match decode(o.value) {
            Some(f) => f,
            None => {
                reply::error(out, CORRUPT_HASH);
                return Ok(Effect::Read);
            }
        },
    };
    // HMGET of many fields: an index rather than a search of the list for each. The
    // first of equal fields wins, as in `value_span`.
    let index: Option<HashMap<&[u8], &[u8]>> = (n - 2 > FEW_FIELDS).then(|| {
        let mut m = HashMap::with_capacity(fields.len());
        for &(f, v) in fields.iter().rev() {
            m.insert(f, v);
        }
        m
    });
    let find = |f: &[u8]| match &index {
        Some(m) => m.get(f).copied(),
        None => fields.iter().find(|(k, _)| *k == f).map(|(_, v)| *v),
    };
    match q {
        HashQuery::Get => match find(args[2]) {
            Some(v) => reply::bulk(out, v),
            None => reply::null(out, proto),
        },
        HashQuery::MGet => {
            reply::array(out, n - 2);
            for f in &args[2..] {
                match find(f) {
                    Some(v) => reply::bulk(out, v),
                    None => reply::null(out, proto),
                }
            }
        }
        HashQuery::GetAll => {
            reply::map(out, proto, fields.len());
            for (f, v) in &fields {
                reply::bulk(out, f);
                reply::bulk(out, v);
            }
        }
        HashQuery::Keys | HashQuery::Vals => {
            reply::array(out, fields.len());
            for (f, v) in &fields {
                reply::bulk(out, if q == HashQuery::Keys { f } else { v });
            }
        }
        HashQuery::Len => reply::int(out, fields.len() as i64),
        HashQuery::Exists => reply::int(out, find(args[2]).is_some() as i64),
    }
    Ok(Effect::Read)
}

/// [`hash_query`] on a chunked hash: the fields asked for are looked up in its tree; HGETALL,
/// HKEYS and HVALS read it all, as Redis does.
fn chunked_hash_query(
    ctx: &mut Ctx<'_>,
    args: &[&[u8]],
    q: HashQuery,
) -> Result<Effect, StoreError> {
    let proto = ctx.session.proto;
    let key = args[1];
    match q {
        HashQuery::Get => match ctx.store.hget(key, args[2])? {
            Some(v) => reply::bulk(ctx.out, &v),
            None => reply::null(ctx.out, proto),
        },
        HashQuery::MGet => {
            let mut out = Vec::new();
            reply::array(&mut out, args.len() - 2);
            for f in &args[2..] {
                match ctx.store.hget(key, f)? {
                    Some(v) => reply::bulk(&mut out, &v),
                    None => reply::null(&mut out, proto),
                }
            }
            ctx.out.extend_from_slice(&out);
        }
        HashQuery::Exists => {
            let found = ctx.store.hget(key, args[2])?.is_some();
            reply::int(ctx.out, found as i64);
        }
        HashQuery::Len => {
            let n = ctx.store.hlen(key)?;
            reply::int(ctx.out, n as i64);
        }
        HashQuery::GetAll | HashQuery::Keys | HashQuery::Vals => {
            let fields = chunked_fields(ctx.store, key)?;
            let out = &mut *ctx.out;
            if q == HashQuery::GetAll {
                reply::map(out, proto, fields.len());
            } else {
                reply::array(out, fields.len());
            }
            for (f, v) in &fields {
                match q {
                    HashQuery::GetAll => {
                        reply::bulk(out, f);
                        reply::bulk(out, v);
                    }
                    HashQuery::Keys => reply::bulk(out, f),
                    _ => reply::bulk(out, v),
                }
            }
        }
    }
    Ok(Effect::Read)
}

pub(crate) fn hdel(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let n = args.len();
    let fields = match read_hash(ctx.store, args[1])? {
        HashRead::Missing => {
            reply::int(ctx.out, 0);
            return Ok(Effect::Read);
        }
        HashRead::Chunked => {
            // Removing the last field deletes the key (the store has no empty collections).
            let removed = ctx.store.hdel(args[1], &args[2..])?;
            if removed > 0 {
                ctx.notify(nc::HASH, "hdel", args[1]);
            }
            reply::int(ctx.out, removed as i64);
            return Ok(if removed > 0 {
                Effect::Wrote
            } else {
                Effect::Read
            });
        }
        HashRead::Fields(f) => f,
        HashRead::WrongType => return fail(ctx, WRONGTYPE),
        HashRead::Corrupt => return fail(ctx, CORRUPT_HASH),
    };
    let before = fields.len();
    // Many fields to delete: a set, not a search of the arguments for each field.
    let gone: Option<hashbrown::HashSet<&[u8]>> =
        (n - 2 > FEW_FIELDS).then(|| args[2..].iter().copied().collect());
    let kept: Vec<_> = fields
        .into_iter()
        .filter(|(f, _)| match &gone {
            Some(set) => !set.contains(f.as_slice()),
            None => !args[2..].contains(&f.as_slice()),
        })
        .collect();
    let removed = before - kept.len();
    if removed > 0 {
        // Redis's order: hdel, then del when the hash is gone (the latter from dispatch).
        ctx.notify(nc::HASH, "hdel", args[1]);
    }
    if kept.is_empty() {
        ctx.store.delete(args[1])?;
    } else if removed > 0 {
        let expires = ctx.store.get(args[1])?.and_then(|o| o.expires_at_ms);
        let encoded = encode(kept.iter().map(|(f, v)| (f.as_slice(), v.as_slice())));
        ctx.store.put(args[1], Kind::Hash, &encoded, expires)?;
    }
    reply::int(ctx.out, removed as i64);
    Ok(Effect::Wrote)
}

#[cfg(test)]
mod tests {

    use super::*;

    use crate::testdb::{Db, WT};

    /// `HSET key` of fields `field:N` = `value:N` for N in `range`, 100 a command.
    fn fill(db: &mut Db, key: &str, range: std::ops::Range<u32>) {
        let all: Vec<u32> = range.collect();
        for part in all.chunks(100) {
            let mut c = format!("HSET {key}");
            for i in part {
                c.push_str(&format!(" field:{i:06} value:{i:06}"));
            }
            db.cmd(&c);
        }
    }

    #[test]
    fn a_large_hash_is_chunked_and_a_field_change_writes_a_path_not_the_hash() {
        let mut db = Db::new();
        // 2,000 fields: about 60 KiB as one value, over FLAT_MAX_BYTES.
        fill(&mut db, "big", 0..2000);
        assert_eq!(db.kind_of("big"), Kind::ChunkedHash);
        db.replies(&[
            ("HLEN big", ":2000\r\n"),
            ("OBJECT ENCODING big", "$9\r\nhashtable\r\n"),
            ("TYPE big", "+hash\r\n"),
        ]);
        // A one-field change writes the path to one leaf: a few chunks, not the ~15 a
        // rewrite of the whole hash would be.
        let before = db.store.collection_chunk_writes();
        db.replies(&[
            ("HSET big field:001000 changed", ":0\r\n"),
            ("HSET big new 1 new 2", ":1\r\n"),
        ]);
        let writes = db.store.collection_chunk_writes() - before;
        assert!(writes <= 6, "two field changes wrote {writes} chunks");
        db.replies(&[
            ("HGET big field:001000", "$7\r\nchanged\r\n"),
            ("HGET big new", "$1\r\n2\r\n"),
            ("HGET big nope", "$-1\r\n"),
            (
                "HMGET big field:000001 nope",
                "*2\r\n$12\r\nvalue:000001\r\n$-1\r\n",
            ),
            ("HEXISTS big field:000002", ":1\r\n"),
            ("HSTRLEN big field:000002", ":12\r\n"),
            ("HSETNX big field:000002 x", ":0\r\n"),
            ("HSETNX big n2 x", ":1\r\n"),
            ("HINCRBY big counter 5", ":5\r\n"),
            ("HINCRBYFLOAT big counter 0.5", "$3\r\n5.5\r\n"),
            ("HDEL big n2 counter nope n2", ":2\r\n"),
            ("HLEN big", ":2001\r\n"),
        ]);
        assert_eq!(db.cmd("HKEYS big").matches("\r\n$").count(), 2001);
        assert_eq!(db.cmd("HVALS big").matches("\r\n$").count(), 2001);
        assert!(db.cmd("HGETALL big").starts_with("*4002\r\n"));
        // HSCAN in pages returns every field once.
        let mut seen = std::collections::HashSet::new();
        let mut cursor = "0".to_string();
        let mut calls = 0;
        loop {
            let r = db.cmd(&format!("HSCAN big {cursor} COUNT 100"));
            calls += 1;
            let lines: Vec<&str> = r.split("\r\n").collect();
            cursor = lines[2].to_string();
            for pair in lines[4..].chunks(4) {
                if pair.len() == 4 {
                    assert!(seen.insert(pair[1].to_string()), "{} twice", pair[1]);
                }
            }
            if cursor == "0" {
                break;
            }
        }
        assert_eq!(seen.len(), 2001);
        assert!(calls > 10, "one call returned the whole hash");
        assert_eq!(db.cmd("HRANDFIELD big 5").matches('$').count(), 5);
        assert_eq!(
            db.cmd("HRANDFIELD big -7 WITHVALUES").matches('$').count(),
            14
        );
        assert!(db.cmd("HRANDFIELD big").starts_with('$'));
        // SORT ... GET through a field of it.
        db.cmd("RPUSH l g");
        assert_eq!(
            db.cmd("SORT l BY nosort GET bi*->field:000005"),
            "*1\r\n$12\r\nvalue:000005\r\n"
        );
        // DUMP and RESTORE round trip, chunked again on the way in.
        let payload = db.run(&[b"DUMP", b"big"]);
        let start = payload.iter().position(|&b| b == b'\n').unwrap() + 1;
        let body = &payload[start..payload.len() - 2];
        assert_eq!(db.run(&[b"RESTORE", b"copy", b"0", body]), b"+OK\r\n");
        assert_eq!(db.kind_of("copy"), Kind::ChunkedHash);
        db.replies(&[
            ("HLEN copy", ":2001\r\n"),
            ("HGET copy field:001000", "$7\r\nchanged\r\n"),
        ]);
        // Removing every field removes the key.
        db.cmd("DEL copy");
        fill(&mut db, "gone", 0..2000);
        let mut c = "HDEL gone".to_string();
        for i in 0..2000 {
            c.push_str(&format!(" field:{i:06}"));
        }
        assert_eq!(db.cmd(&c), ":2000\r\n");
        assert_eq!(db.cmd("EXISTS gone"), ":0\r\n");
        db.store
            .check_collection(&crate::db::store_key(0, b"big"))
            .unwrap();
    }

    #[test]
    fn a_hash_that_grows_past_the_flat_size_keeps_its_ttl_and_fields() {
        let mut db = Db::new();
        fill(&mut db, "h", 0..10);
        assert_eq!(db.kind_of("h"), Kind::Hash);
        assert_eq!(db.cmd("EXPIRE h 1000"), ":1\r\n");
        // Grown by each kind of write: HSET, then a value too long for one value by HSETNX.
        fill(&mut db, "h", 10..1500);
        assert_eq!(db.kind_of("h"), Kind::ChunkedHash);
        db.replies(&[
            ("HLEN h", ":1500\r\n"),
            ("HGET h field:000003", "$12\r\nvalue:000003\r\n"),
        ]);
        let ttl = db.cmd("TTL h");
        assert!(ttl.starts_with(":9") || ttl == ":1000\r\n", "{ttl}");
        let long = "x".repeat(40 * 1024);
        assert_eq!(db.cmd(&format!("HSETNX small f {long}")), ":1\r\n");
        assert_eq!(db.kind_of("small"), Kind::ChunkedHash);
        assert_eq!(db.cmd("HSTRLEN small f"), format!(":{}\r\n", long.len()));
        assert_eq!(db.cmd("HINCRBY small n 2"), ":2\r\n");
        // With thresholds raised so that Redis keeps a listpack (insertion order, which
        // clients see), a large hash stays one value too.
        db.cmd("CONFIG SET hash-max-listpack-entries 1000000000");
        db.cmd("CONFIG SET hash-max-listpack-value 1000000000");
        assert_eq!(db.cmd(&format!("HSET lp z 1 a {long} m 2")), ":3\r\n");
        assert_eq!(db.kind_of("lp"), Kind::Hash);
        assert!(db
            .cmd("HKEYS lp")
            .starts_with("*3\r\n$1\r\nz\r\n$1\r\na\r\n$1\r\nm\r\n"));
        db.cmd("CONFIG SET hash-max-listpack-entries 128");
        db.cmd("CONFIG SET hash-max-listpack-value 64");
        // A small hash stays one value: YCSB's records are updated in place.
        fill(&mut db, "rec", 0..10);
        assert_eq!(db.kind_of("rec"), Kind::Hash);
        assert_eq!(db.cmd("OBJECT ENCODING rec"), "$8\r\nlistpack\r\n");
    }

    #[test]
    fn field_commands_follow_redis() {
        let mut db = Db::new();
        db.replies(&[
            ("HSETNX h a 1", ":1\r\n"),
            ("HSETNX h a 2", ":0\r\n"),
            ("HGET h a", "$1\r\n1\r\n"),
            ("HINCRBY h a 41", ":42\r\n"),
            ("HINCRBY h n -5", ":-5\r\n"),
            (
                "HINCRBY h a 9223372036854775807",
                "-ERR increment or decrement would overflow\r\n",
            ),
            (
                "HINCRBY h a x",
                "-ERR value is not an integer or out of range\r\n",
            ),
        ]);
        db.cmd("HSET h s hello f 1.5");
        db.replies(&[
            ("HINCRBY h s 1", "-ERR hash value is not an integer\r\n"),
            ("HINCRBYFLOAT h f 0.25", "$4\r\n1.75\r\n"),
            ("HINCRBYFLOAT h new 3", "$1\r\n3\r\n"),
            ("HINCRBYFLOAT h s 1", "-ERR hash value is not a float\r\n"),
            ("HINCRBYFLOAT h f x", "-ERR value is not a valid float\r\n"),
            ("HINCRBYFLOAT h f inf", "-ERR value is NaN or Infinity\r\n"),
            ("HSTRLEN h s", ":5\r\n"),
            ("HSTRLEN h nope", ":0\r\n"),
            ("HSTRLEN nope s", ":0\r\n"),
        ]);
        db.cmd("SET str v");
        db.each_replies(
            &[
                "HSETNX str a 1",
                "HINCRBY str a 1",
                "HSTRLEN str a",
                "HRANDFIELD str",
                "HSCAN str 0",
            ],
            WT,
        );
    }

    #[test]
    fn hscan_and_hrandfield() {
        let mut db = Db::new();
        db.cmd("HSET h a 1 b 2 c 3 ab 4");
        db.replies(&[
            (
                "HSCAN h 0 MATCH a*",
                "*2\r\n$1\r\n0\r\n*4\r\n$1\r\na\r\n$1\r\n1\r\n$2\r\nab\r\n$1\r\n4\r\n",
            ),
            ("HSCAN h x", "-ERR invalid cursor\r\n"),
        ]);
        assert_eq!(db.cmd("HRANDFIELD h 10").matches('$').count(), 4);
        assert_eq!(db.cmd("HRANDFIELD h 10 WITHVALUES").matches('$').count(), 8);
        assert_eq!(db.cmd("HRANDFIELD h -10").matches('$').count(), 10);
        db.replies(&[
            ("HRANDFIELD h 0", "*0\r\n"),
            ("HRANDFIELD nope 3", "*0\r\n"),
            ("HRANDFIELD nope", "$-1\r\n"),
        ]);
        assert!(db.cmd("HRANDFIELD h").starts_with('$'));
        assert_eq!(db.cmd("HRANDFIELD h 1 X"), "-ERR syntax error\r\n");
        assert_eq!(
            db.cmd("HRANDFIELD h -9223372036854775808"),
            format!("-{}\r\n", crate::errors::RANDOM_COUNT_RANGE)
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

    /// 150,000 fields in one HSET (a search per field made this quadratic: 15 s of a frozen
    /// server), with duplicates: the last value wins, `added` counts distinct new fields; then
    /// HMGET and HDEL of as many.
    #[test]
    fn hset_hmget_hdel_of_many_fields() {
        let mut db = Db::large();
        const N: usize = 150_000;
        let names: Vec<String> = (0..N).map(|i| format!("f{}", i % (N / 2))).collect();
        let values: Vec<String> = (0..N).map(|i| format!("v{i}")).collect();
        let mut args: Vec<&[u8]> = vec![b"HSET", b"h", b"f0", b"old"];
        for i in 0..N {
            args.push(names[i].as_bytes());
            args.push(values[i].as_bytes());
        }
        assert_eq!(db.run(&args), format!(":{}\r\n", N / 2).into_bytes());
        assert_eq!(db.cmd("HLEN h"), format!(":{}\r\n", N / 2));
        // Field f<i> was set twice: at i and at i + N/2; the second wins.
        assert_eq!(
            db.cmd("HGET h f0"),
            format!("${}\r\nv{}\r\n", 1 + (N / 2).to_string().len(), N / 2)
        );
        args.truncate(4);
        assert_eq!(db.run(&args), b":0\r\n".to_vec());
        assert_eq!(db.cmd("HGET h f0"), "$3\r\nold\r\n");

        let mut get: Vec<&[u8]> = vec![b"HMGET", b"h"];
        get.extend(names.iter().map(|f| f.as_bytes()));
        get.push(b"missing");
        let reply = db.run(&get);
        let mut want = format!("*{}\r\n$3\r\nold\r\n", N + 1).into_bytes();
        for i in 1..N {
            let v = match i % (N / 2) {
                0 => "old".to_string(),
                j => format!("v{}", j + N / 2),
            };
            want.extend_from_slice(format!("${}\r\n{v}\r\n", v.len()).as_bytes());
        }
        want.extend_from_slice(b"$-1\r\n");
        assert!(reply == want, "HMGET of {} fields: wrong reply", N + 1);

        let mut del: Vec<&[u8]> = vec![b"HDEL", b"h"];
        del.extend(names.iter().filter(|f| *f != "f0").map(|f| f.as_bytes()));
        del.push(b"missing");
        assert_eq!(db.run(&del), format!(":{}\r\n", N / 2 - 1).into_bytes());
        assert_eq!(db.cmd("HGETALL h"), "*2\r\n$2\r\nf0\r\n$3\r\nold\r\n");
    }
}
