//! Streams as Redis 7.0 has them (t_stream.c), over the store's stream trees
//! (`cxltier_store::Store::stream_*`): entries by id, the stream's record and its groups, the
//! pending entries (by group, and by group and consumer) and the consumers, each a tree of the
//! stream's root, so a stream larger than DRAM tiers and recovers like every collection.
//!
//! Redis keeps entries in listpack nodes of at most `stream-node-max-entries` entries and
//! `stream-node-max-bytes` bytes, and `~` trimming removes only whole nodes: the node an entry
//! opened is kept as a flag on the entry (moved to the next one of its node when it is deleted),
//! and the newest node's entries and bytes in the stream's record, so that approximate trimming
//! removes what Redis's would. A node's bytes are estimated from its entries' lengths (Redis
//! counts the listpack's own encoding), which decides only when a node of large entries ends.

use cxltier_store::{Store, StoreError, StreamEdit, StreamTree as T};

use crate::args::{typed, wait};
use crate::context::{fail, now_ms, Ctx, Effect};
use crate::errors::{NOT_INT, SYNTAX};
use crate::notify::class as nc;
use crate::resp::reply;
use crate::stream_layout::{
    consumer_key, cpel_key, cpel_prefix, decode_entry, encode_entry, entry_bytes, gp, group_key,
    pel_key, Group, Id, Meta, Nack, GROUP_TAG, META_KEY, NODE_START, ZERO_ID,
};
use crate::write_stream::Op;

const MAX_ID: Id = Id {
    ms: u64::MAX,
    seq: u64::MAX,
};

impl Id {
    fn incr(self) -> Option<Id> {
        if self.seq == u64::MAX {
            if self.ms == u64::MAX {
                return None;
            }
            Some(Id {
                ms: self.ms + 1,
                seq: 0,
            })
        } else {
            Some(Id {
                ms: self.ms,
                seq: self.seq + 1,
            })
        }
    }

    fn decr(self) -> Option<Id> {
        if self.seq == 0 {
            if self.ms == 0 {
                return None;
            }
            Some(Id {
                ms: self.ms - 1,
                seq: u64::MAX,
            })
        } else {
            Some(Id {
                ms: self.ms,
                seq: self.seq - 1,
            })
        }
    }

    fn text(self) -> String {
        format!("{}-{}", self.ms, self.seq)
    }

    fn is_zero(self) -> bool {
        self == ZERO_ID
    }
}

/// The smallest key above every key that starts with `prefix` (`None`: no such key).
fn after_prefix(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut k = prefix.to_vec();
    while let Some(&last) = k.last() {
        if last == 0xff {
            k.pop();
        } else {
            *k.last_mut().expect("not empty") += 1;
            return Some(k);
        }
    }
    None
}

const BAD_ID: &str = "ERR Invalid stream ID specified as stream command argument";

/// Redis's `string2ull`: a decimal `string2ll` would take (not negative), or what `strtoull`
/// takes whole (leading spaces and a `+`, values past `i64::MAX`).
fn parse_u64(s: &[u8]) -> Option<u64> {
    let t = std::str::from_utf8(s).ok()?;
    if let Ok(v) = t.parse::<i64>() {
        // string2ll refuses "+1" and leading zeros' forms only where i64 parsing also does.
        if !t.starts_with('+') {
            return (v >= 0).then_some(v as u64);
        }
    }
    let t = t.trim_start_matches(|c: char| c.is_ascii_whitespace());
    let t = t.strip_prefix('+').unwrap_or(t);
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    t.parse::<u64>().ok()
}

/// `streamGenericParseIDOrReply`: `ms-seq`, `ms` (seq `missing_seq`), `-` and `+` (refused when
/// `strict`); with `seq_star`, `ms-*` (the second value false).
fn parse_id_full(b: &[u8], missing_seq: u64, strict: bool, seq_star: bool) -> Option<(Id, bool)> {
    if b.len() > 127 {
        return None;
    }
    if b == b"-" || b == b"+" {
        if strict {
            return None;
        }
        return Some((if b == b"-" { ZERO_ID } else { MAX_ID }, true));
    }
    // C strings end at a NUL byte.
    let b = b.split(|&c| c == 0).next().unwrap_or(b);
    match b.iter().position(|&c| c == b'-') {
        Some(dash) => {
            let ms = parse_u64(&b[..dash])?;
            let rest = &b[dash + 1..];
            if seq_star && rest == b"*" {
                return Some((Id { ms, seq: 0 }, false));
            }
            Some((
                Id {
                    ms,
                    seq: parse_u64(rest)?,
                },
                true,
            ))
        }
        None => Some((
            Id {
                ms: parse_u64(b)?,
                seq: missing_seq,
            },
            true,
        )),
    }
}

fn parse_id(b: &[u8], missing_seq: u64) -> Option<Id> {
    parse_id_full(b, missing_seq, false, false).map(|x| x.0)
}

/// Every argument as a whole id ([`parse_strict_id`]); `None` when one is not.
fn strict_ids(args: &[&[u8]]) -> Option<Vec<Id>> {
    args.iter().map(|a| parse_strict_id(a)).collect()
}

fn parse_strict_id(b: &[u8]) -> Option<Id> {
    parse_id_full(b, 0, true, false).map(|x| x.0)
}

/// `streamParseIntervalIDOrReply`: an id, or `(id` (exclusive: strict).
fn parse_interval(b: &[u8], missing_seq: u64) -> Option<(Id, bool)> {
    if b.len() > 1 && b[0] == b'(' {
        parse_id_full(&b[1..], missing_seq, true, false).map(|x| (x.0, true))
    } else {
        parse_id(b, missing_seq).map(|i| (i, false))
    }
}

/// Redis's `getLongLongFromObject`: a whole decimal i64.
fn ll(b: &[u8]) -> Option<i64> {
    crate::numbers::int_arg(b)
}

/// The command's time (frozen by dispatch for its length), in ms.
fn clock(store: &Store) -> u64 {
    store.frozen_clock().unwrap_or_else(now_ms)
}

// ---- the stream's record, its groups and entries, as the trees hold them ----

fn corrupt(key: &[u8], what: &str) -> StoreError {
    StoreError::Corrupt(format!(
        "the stream {:?} has an unreadable {what}",
        String::from_utf8_lossy(key)
    ))
}

/// The stream's record; `None` when there is no stream (WRONGTYPE for another type).
fn meta(store: &mut Store, key: &[u8]) -> Result<Option<Meta>, StoreError> {
    match store.stream_get(key, T::Meta, META_KEY)? {
        Some(b) => Meta::decode(&b)
            .map(Some)
            .ok_or_else(|| corrupt(key, "record")),
        None => {
            if store.stream_exists(key)? {
                Err(corrupt(key, "record"))
            } else {
                Ok(None)
            }
        }
    }
}

fn group(store: &mut Store, key: &[u8], name: &[u8]) -> Result<Option<Group>, StoreError> {
    match store.stream_get(key, T::Meta, &group_key(name))? {
        Some(b) => Group::decode(&b)
            .map(Some)
            .ok_or_else(|| corrupt(key, "group")),
        None => Ok(None),
    }
}

fn nack(store: &mut Store, key: &[u8], group: &[u8], id: Id) -> Result<Option<Nack>, StoreError> {
    match store.stream_get(key, T::Pending, &pel_key(group, id))? {
        Some(b) => Nack::decode(&b)
            .map(Some)
            .ok_or_else(|| corrupt(key, "pending entry")),
        None => Ok(None),
    }
}

/// The edits that make `n` the pending entry `id` of `group` (taken from `old_owner`).
fn put_nack(edits: &mut Vec<StreamEdit>, group: &[u8], id: Id, n: &Nack, old_owner: Option<&[u8]>) {
    edits.push(StreamEdit::Put(T::Pending, pel_key(group, id), n.encode()));
    if old_owner != Some(n.consumer.as_slice()) {
        if let Some(o) = old_owner {
            edits.push(StreamEdit::Delete(
                T::ConsumerPending,
                cpel_key(group, o, id),
            ));
        }
        edits.push(StreamEdit::Put(
            T::ConsumerPending,
            cpel_key(group, &n.consumer, id),
            Vec::new(),
        ));
    }
}

fn del_nack(edits: &mut Vec<StreamEdit>, group: &[u8], id: Id, owner: &[u8]) {
    edits.push(StreamEdit::Delete(T::Pending, pel_key(group, id)));
    edits.push(StreamEdit::Delete(
        T::ConsumerPending,
        cpel_key(group, owner, id),
    ));
}

fn consumer_seen(
    store: &mut Store,
    key: &[u8],
    group: &[u8],
    c: &[u8],
) -> Result<Option<u64>, StoreError> {
    Ok(store
        .stream_get(key, T::Consumers, &consumer_key(group, c))?
        .and_then(|b| {
            b.get(..8)
                .map(|s| u64::from_le_bytes(s.try_into().expect("8")))
        }))
}

fn put_consumer(edits: &mut Vec<StreamEdit>, group: &[u8], c: &[u8], seen: u64) {
    edits.push(StreamEdit::Put(
        T::Consumers,
        consumer_key(group, c),
        seen.to_le_bytes().to_vec(),
    ));
}

/// Entries of `tree` whose keys start with `prefix`.
fn count_prefix(store: &mut Store, key: &[u8], tree: T, prefix: &[u8]) -> Result<u64, StoreError> {
    store.stream_count(key, tree, prefix, after_prefix(prefix).as_deref())
}

fn edit(store: &mut Store, key: &[u8], edits: &[StreamEdit]) -> Result<(), StoreError> {
    if !edits.is_empty() {
        store.stream_edit(key, false, edits)?;
    }
    Ok(())
}

// ---- entries ----

fn with_flags(v: &[u8], flags: u8) -> Vec<u8> {
    let mut v = v.to_vec();
    if let Some(f) = v.first_mut() {
        *f = flags;
    }
    v
}

fn reply_entry(out: &mut Vec<u8>, id: Id, v: &[u8], key: &[u8]) -> Result<(), StoreError> {
    let (_, items) = decode_entry(v).ok_or_else(|| corrupt(key, "entry"))?;
    reply::array(out, 2);
    reply::bulk(out, id.text().as_bytes());
    reply::array(out, items.len());
    for i in items {
        reply::bulk(out, i);
    }
    Ok(())
}

/// Entries from `start` to `end` (inclusive), at most `count`, reversed with `rev`.
fn range(
    store: &mut Store,
    key: &[u8],
    start: Id,
    end: Id,
    rev: bool,
    count: u64,
) -> Result<Vec<(Id, Vec<u8>)>, StoreError> {
    if start > end {
        return Ok(Vec::new());
    }
    let hi = after_prefix(&end.key());
    Ok(store
        .stream_range(key, T::Entries, &start.key(), hi.as_deref(), rev, count)?
        .into_iter()
        .filter_map(|(k, v)| Some((Id::from_key(&k)?, v)))
        .collect())
}

fn entry(store: &mut Store, key: &[u8], id: Id) -> Result<Option<Vec<u8>>, StoreError> {
    store.stream_get(key, T::Entries, &id.key())
}

fn edge(store: &mut Store, key: &[u8], last: bool) -> Result<Option<(Id, Vec<u8>)>, StoreError> {
    Ok(store
        .stream_at(key, T::Entries, if last { -1 } else { 0 })?
        .and_then(|(k, v)| Some((Id::from_key(&k)?, v))))
}

fn length(store: &mut Store, key: &[u8]) -> Result<u64, StoreError> {
    Ok(store.stream_len(key, T::Entries)?.unwrap_or(0))
}

/// What the lag and read-counter rules read of a stream (`first`: 0-0 when empty).
struct Shape {
    length: u64,
    first: Id,
    meta: Meta,
}

fn shape(store: &mut Store, key: &[u8], meta: Meta) -> Result<Shape, StoreError> {
    Ok(Shape {
        length: length(store, key)?,
        first: edge(store, key, false)?.map_or(ZERO_ID, |e| e.0),
        meta,
    })
}

impl Shape {
    /// `streamRangeHasTombstones(s, start, NULL)`.
    fn tombstones_from(&self, start: Id) -> bool {
        if self.length == 0 || self.meta.max_deleted.is_zero() {
            return false;
        }
        if self.first > self.meta.max_deleted {
            return false;
        }
        start <= self.meta.max_deleted
    }

    /// `streamEstimateDistanceFromFirstEverEntry`.
    fn distance(&self, id: Id) -> Option<u64> {
        let m = &self.meta;
        if m.added == 0 {
            return Some(0);
        }
        if self.length == 0 && id <= m.last {
            return Some(m.added);
        }
        if id == m.last {
            return Some(m.added);
        } else if id > m.last {
            return None;
        }
        if m.max_deleted.is_zero() || m.max_deleted < self.first {
            if id < self.first {
                return Some(m.added - self.length);
            } else if id == self.first {
                return Some(m.added - self.length + 1);
            }
        }
        None
    }

    /// `streamReplyWithCGLag`'s value (`None`: null).
    fn lag(&self, g: &Group) -> Option<u64> {
        if self.meta.added == 0 {
            return Some(0);
        }
        if let Some(read) = g.entries_read {
            if !self.tombstones_from(g.last) {
                return Some(self.meta.added.saturating_sub(read));
            }
        }
        self.distance(g.last)
            .map(|read| self.meta.added.saturating_sub(read))
    }
}

// ---- trimming ----

#[derive(Debug, Clone, Copy, PartialEq)]
enum Strategy {
    None,
    MaxLen(u64),
    MinId(Id),
}

#[derive(Debug, Clone, Copy)]
struct TrimArgs {
    strategy: Strategy,
    approx: bool,
    limit: u64,
    /// Where the strategy's value is (its `~`/`=` before it when given).
    arg_at: usize,
    approx_given_at: Option<usize>,
    id: Option<(Id, bool)>,
    nomkstream: bool,
    /// XADD: where the id is.
    id_at: usize,
}

/// `streamParseAddOrTrimArgsOrReply`; Err is the error reply.
fn trim_args(ctx: &Ctx<'_>, args: &[&[u8]], xadd: bool) -> Result<TrimArgs, String> {
    let mut t = TrimArgs {
        strategy: Strategy::None,
        approx: false,
        limit: 0,
        arg_at: 0,
        approx_given_at: None,
        id: None,
        nomkstream: false,
        id_at: 0,
    };
    let mut limit_given = false;
    let mut i = 2;
    while i < args.len() {
        let more = args.len() - 1 - i;
        let opt = args[i];
        if xadd && opt == b"*" {
            break;
        } else if (opt.eq_ignore_ascii_case(b"MAXLEN") || opt.eq_ignore_ascii_case(b"MINID"))
            && more > 0
        {
            if t.strategy != Strategy::None {
                return Err("ERR syntax error, MAXLEN and MINID options at the same time are not compatible".into());
            }
            t.approx = false;
            t.approx_given_at = None;
            let next = args[i + 1];
            if more >= 2 && next == b"~" {
                t.approx = true;
                t.approx_given_at = Some(i + 1);
                i += 1;
            } else if more >= 2 && next == b"=" {
                t.approx_given_at = Some(i + 1);
                i += 1;
            }
            if opt.eq_ignore_ascii_case(b"MAXLEN") {
                let n = ll(args[i + 1]).ok_or(NOT_INT)?;
                if n < 0 {
                    return Err("ERR The MAXLEN argument must be >= 0.".into());
                }
                t.strategy = Strategy::MaxLen(n as u64);
            } else {
                let id = parse_strict_id(args[i + 1]).ok_or(BAD_ID)?;
                t.strategy = Strategy::MinId(id);
            }
            i += 1;
            t.arg_at = i;
        } else if opt.eq_ignore_ascii_case(b"LIMIT") && more > 0 {
            let n = ll(args[i + 1]).ok_or(NOT_INT)?;
            if n < 0 {
                return Err("ERR The LIMIT argument must be >= 0.".into());
            }
            t.limit = n as u64;
            limit_given = true;
            i += 1;
        } else if xadd && opt.eq_ignore_ascii_case(b"NOMKSTREAM") {
            t.nomkstream = true;
        } else if xadd {
            let id = parse_id_full(opt, 0, true, true).ok_or(BAD_ID)?;
            t.id = Some(id);
            break;
        } else {
            return Err(SYNTAX.into());
        }
        i += 1;
    }
    t.id_at = i;
    if t.limit > 0 && t.strategy == Strategy::None {
        return Err(
            "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy".into(),
        );
    }
    if !xadd && t.strategy == Strategy::None {
        return Err("ERR syntax error, XTRIM must be called with a trimming strategy".into());
    }
    // (cxltier serve is a primary only: no command comes from a primary or an AOF, whose
    // trims Redis runs unlimited.)
    if limit_given {
        if !t.approx {
            return Err(
                "ERR syntax error, LIMIT cannot be used without the special ~ option".into(),
            );
        }
    } else if t.approx {
        let per = ctx.info.knobs.int("stream-node-max-entries");
        let l = 100i64.saturating_mul(per);
        t.limit = if l <= 0 { 10000 } else { l.min(1_000_000) } as u64;
    } else {
        t.limit = 0;
    }
    Ok(t)
}

/// The first node's live entries (up to `most` of them counted) and its last id.
fn first_node(store: &mut Store, key: &[u8]) -> Result<Option<(u64, Id)>, StoreError> {
    const PAGE: u64 = 256;
    let mut from = ZERO_ID.key().to_vec();
    let mut n = 0u64;
    let mut last = None;
    loop {
        let page = store.stream_range(key, T::Entries, &from, None, false, PAGE)?;
        if page.is_empty() {
            return Ok(last.map(|l| (n, l)));
        }
        for (k, v) in &page {
            let flags = *v.first().ok_or_else(|| corrupt(key, "entry"))?;
            if n > 0 && flags & NODE_START != 0 {
                return Ok(last.map(|l| (n, l)));
            }
            n += 1;
            last = Id::from_key(k);
        }
        let l = last.ok_or_else(|| corrupt(key, "entry id"))?;
        match l.incr() {
            Some(nx) => from = nx.key().to_vec(),
            None => return Ok(Some((n, l))),
        }
        if (page.len() as u64) < PAGE {
            return Ok(Some((n, l)));
        }
    }
}

/// `streamTrim`: entries removed.
fn trim(store: &mut Store, key: &[u8], m: &mut Meta, t: &TrimArgs) -> Result<u64, StoreError> {
    let mut deleted = 0u64;
    loop {
        let len = length(store, key)?;
        if let Strategy::MaxLen(max) = t.strategy {
            if len <= max {
                break;
            }
        }
        let Some((entries, node_last)) = first_node(store, key)? else {
            break;
        };
        if t.limit > 0 && deleted + entries > t.limit {
            break;
        }
        let remove_node = match t.strategy {
            Strategy::MaxLen(max) => len - entries >= max,
            Strategy::MinId(id) => node_last < id,
            Strategy::None => return Ok(deleted),
        };
        if remove_node {
            store.stream_trim_front(key, T::Entries, entries)?;
            m.nodes = m.nodes.saturating_sub(1);
            deleted += entries;
            continue;
        }
        if t.approx {
            break;
        }
        // Entries from within the node: it stays, opened by its first entry left.
        let n = match t.strategy {
            Strategy::MaxLen(max) => len - max,
            Strategy::MinId(id) => {
                store.stream_count(key, T::Entries, &ZERO_ID.key(), Some(&id.key()))?
            }
            Strategy::None => 0,
        };
        if n > 0 {
            store.stream_trim_front(key, T::Entries, n)?;
            deleted += n;
            if let Some((id, v)) = edge(store, key, false)? {
                if v.first().is_some_and(|f| f & NODE_START == 0) {
                    edit(
                        store,
                        key,
                        &[StreamEdit::Put(
                            T::Entries,
                            id.key().to_vec(),
                            with_flags(&v, v[0] | NODE_START),
                        )],
                    )?;
                }
            }
        }
        break;
    }
    Ok(deleted)
}

/// After an approximate trim, the command is replicated with the exact result: `=` and the
/// stream's length (MAXLEN) or first id (MINID), as `streamRewriteTrimArgument` does.
fn exact_trim_args(
    store: &mut Store,
    key: &[u8],
    args: &[&[u8]],
    t: &TrimArgs,
    id_text: Option<&[u8]>,
) -> Result<Op, StoreError> {
    let mut op: Op = args.iter().map(|a| a.to_vec()).collect();
    if t.approx {
        if let Some(at) = t.approx_given_at {
            op[at] = b"=".to_vec();
        }
        op[t.arg_at] = match t.strategy {
            Strategy::MaxLen(_) => length(store, key)?.to_string().into_bytes(),
            _ => edge(store, key, false)?
                .map_or(ZERO_ID, |e| e.0)
                .text()
                .into_bytes(),
        };
    }
    if let Some(id) = id_text {
        op[t.id_at] = id.to_vec();
    }
    Ok(op)
}

// ---- XADD, XRANGE, XLEN, XDEL, XTRIM, XSETID ----

pub(crate) fn xadd(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let t = match trim_args(ctx, args, true) {
        Ok(t) => t,
        Err(e) => return fail(ctx, &e),
    };
    let field_at = t.id_at + 1;
    if args.len() < field_at + 2 || (args.len() - field_at) % 2 == 1 {
        crate::context::arity(ctx.out, args[0]);
        return Ok(Effect::Read);
    }
    if let Some((id, true)) = t.id {
        if id.is_zero() {
            return fail(ctx, "ERR The ID specified in XADD must be greater than 0-0");
        }
    }
    let key = args[1];
    typed(ctx, |ctx| {
        let existing = meta(ctx.store, key)?;
        let mut m = match existing {
            Some(m) => m,
            None if t.nomkstream => {
                reply::null(ctx.out, ctx.session.proto);
                return Ok(Effect::Read);
            }
            None => Meta::default(),
        };
        if m.last == MAX_ID {
            return fail(
                ctx,
                "ERR The stream has exhausted the last possible ID, unable to add more items",
            );
        }
        let id = match t.id {
            Some((id, true)) => Some(id),
            Some((id, false)) => {
                if m.last.ms == id.ms {
                    m.last.incr().filter(|_| m.last.seq != u64::MAX)
                } else {
                    Some(id)
                }
            }
            None => {
                let now = clock(ctx.store);
                Some(if now > m.last.ms {
                    Id { ms: now, seq: 0 }
                } else {
                    m.last.incr().unwrap_or(ZERO_ID)
                })
            }
        };
        let id = match id {
            Some(id) if id > m.last => id,
            _ => return fail(
                ctx,
                "ERR The ID specified in XADD is equal or smaller than the target stream top item",
            ),
        };
        let items = &args[field_at..];
        let bytes = entry_bytes(items);
        let max_bytes = match ctx.info.knobs.int("stream-node-max-bytes") {
            n if n <= 0 || n > 1 << 30 => 1u64 << 30,
            n => n as u64,
        };
        let max_entries = ctx.info.knobs.int("stream-node-max-entries");
        let values: u64 = items.iter().map(|i| i.len() as u64).sum();
        let tail_live = existing.is_some()
            && m.nodes > 0
            && ctx
                .store
                .stream_count(key, T::Entries, &m.tail_start.key(), None)?
                > 0;
        let new_node = !tail_live
            || m.tail_bytes + values >= max_bytes
            || (max_entries > 0 && m.tail_count >= max_entries as u64);
        let flags = if new_node {
            m.tail_start = id;
            m.tail_count = 1;
            m.tail_bytes = 16 + bytes;
            m.nodes += 1;
            NODE_START
        } else {
            m.tail_count += 1;
            m.tail_bytes += bytes;
            0
        };
        m.last = id;
        m.added += 1;
        let edits = [
            StreamEdit::Put(T::Entries, id.key().to_vec(), encode_entry(flags, items)),
            m.put(),
        ];
        ctx.store.stream_edit(key, true, &edits)?;
        let text = id.text();
        reply::bulk(ctx.out, text.as_bytes());
        ctx.notify(nc::STREAM, "xadd", key);
        if t.strategy != Strategy::None && trim(ctx.store, key, &mut m, &t)? > 0 {
            edit(ctx.store, key, &[m.put()])?;
            ctx.notify(nc::STREAM, "xtrim", key);
        }
        let id_rewritten = !matches!(t.id, Some((_, true)));
        if t.approx || id_rewritten {
            let op = exact_trim_args(
                ctx.store,
                key,
                args,
                &t,
                id_rewritten.then_some(text.as_bytes()),
            )?;
            ctx.session.propagate_as(|| vec![op]);
        }
        Ok(Effect::Wrote)
    })
}

fn xrange_generic(ctx: &mut Ctx<'_>, args: &[&[u8]], rev: bool) -> Result<Effect, StoreError> {
    let (start_arg, end_arg) = if rev {
        (args[3], args[2])
    } else {
        (args[2], args[3])
    };
    let Some((mut start, sx)) = parse_interval(start_arg, 0) else {
        return fail(ctx, BAD_ID);
    };
    if sx {
        match start.incr() {
            Some(s) => start = s,
            None => return fail(ctx, "ERR invalid start ID for the interval"),
        }
    }
    let Some((mut end, ex)) = parse_interval(end_arg, u64::MAX) else {
        return fail(ctx, BAD_ID);
    };
    if ex {
        match end.decr() {
            Some(e) => end = e,
            None => return fail(ctx, "ERR invalid end ID for the interval"),
        }
    }
    let mut count: Option<u64> = None;
    let mut j = 4;
    while j < args.len() {
        if args[j].eq_ignore_ascii_case(b"COUNT") && j + 1 < args.len() {
            match ll(args[j + 1]) {
                Some(c) => count = Some(c.max(0) as u64),
                None => return fail(ctx, NOT_INT),
            }
            j += 2;
        } else {
            return fail(ctx, SYNTAX);
        }
    }
    let key = args[1];
    typed(ctx, |ctx| {
        if meta(ctx.store, key)?.is_none() {
            reply::array(ctx.out, 0);
            return Ok(Effect::Read);
        }
        if count == Some(0) {
            reply::null_array(ctx.out, ctx.session.proto);
            return Ok(Effect::Read);
        }
        let got = range(ctx.store, key, start, end, rev, count.unwrap_or(u64::MAX))?;
        reply::array(ctx.out, got.len());
        for (id, v) in &got {
            reply_entry(ctx.out, *id, v, key)?;
        }
        Ok(Effect::Read)
    })
}

pub(crate) fn xrange(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    xrange_generic(ctx, args, false)
}

pub(crate) fn xrevrange(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    xrange_generic(ctx, args, true)
}

pub(crate) fn xlen(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    typed(ctx, |ctx| {
        let n = length(ctx.store, args[1])?;
        reply::int(ctx.out, n as i64);
        Ok(Effect::Read)
    })
}

pub(crate) fn xdel(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let key = args[1];
    typed(ctx, |ctx| {
        let Some(mut m) = meta(ctx.store, key)? else {
            reply::int(ctx.out, 0);
            return Ok(Effect::Read);
        };
        let Some(ids) = strict_ids(&args[2..]) else {
            return fail(ctx, BAD_ID);
        };
        let mut deleted = 0;
        for id in ids {
            let Some(v) = entry(ctx.store, key, id)? else {
                continue;
            };
            let mut edits = vec![StreamEdit::Delete(T::Entries, id.key().to_vec())];
            if v.first().is_some_and(|f| f & NODE_START != 0) {
                // The node lives on in its next entry, if it has one.
                let next = match id.incr() {
                    Some(n) => range(ctx.store, key, n, MAX_ID, false, 1)?,
                    None => Vec::new(),
                };
                match next.first() {
                    Some((nid, nv)) if nv.first().is_some_and(|f| f & NODE_START == 0) => {
                        edits.push(StreamEdit::Put(
                            T::Entries,
                            nid.key().to_vec(),
                            with_flags(nv, nv[0] | NODE_START),
                        ));
                    }
                    _ => m.nodes = m.nodes.saturating_sub(1),
                }
            }
            if id > m.max_deleted {
                m.max_deleted = id;
            }
            edits.push(m.put());
            edit(ctx.store, key, &edits)?;
            deleted += 1;
        }
        if deleted > 0 {
            ctx.notify(nc::STREAM, "xdel", key);
        }
        reply::int(ctx.out, deleted);
        Ok(if deleted > 0 {
            Effect::Wrote
        } else {
            Effect::Read
        })
    })
}

pub(crate) fn xtrim(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let t = match trim_args(ctx, args, false) {
        Ok(t) => t,
        Err(e) => return fail(ctx, &e),
    };
    let key = args[1];
    typed(ctx, |ctx| {
        let Some(mut m) = meta(ctx.store, key)? else {
            reply::int(ctx.out, 0);
            return Ok(Effect::Read);
        };
        let deleted = trim(ctx.store, key, &mut m, &t)?;
        if deleted > 0 {
            edit(ctx.store, key, &[m.put()])?;
            ctx.notify(nc::STREAM, "xtrim", key);
            if t.approx {
                let op = exact_trim_args(ctx.store, key, args, &t, None)?;
                ctx.session.propagate_as(|| vec![op]);
            }
        }
        reply::int(ctx.out, deleted as i64);
        Ok(if deleted > 0 {
            Effect::Wrote
        } else {
            Effect::Read
        })
    })
}

pub(crate) fn xsetid(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let Some(id) = parse_strict_id(args[2]) else {
        return fail(ctx, BAD_ID);
    };
    let mut added: Option<u64> = None;
    let mut max_del = ZERO_ID;
    let mut i = 3;
    while i < args.len() {
        let more = args.len() - 1 - i;
        if args[i].eq_ignore_ascii_case(b"ENTRIESADDED") && more > 0 {
            match ll(args[i + 1]) {
                None => return fail(ctx, NOT_INT),
                Some(n) if n < 0 => return fail(ctx, "ERR entries_added must be positive"),
                Some(n) => added = Some(n as u64),
            }
        } else if args[i].eq_ignore_ascii_case(b"MAXDELETEDID") && more > 0 {
            match parse_strict_id(args[i + 1]) {
                None => return fail(ctx, BAD_ID),
                Some(d) if id < d => {
                    return fail(ctx, "ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id")
                }
                Some(d) => max_del = d,
            }
        } else {
            return fail(ctx, SYNTAX);
        }
        i += 2;
    }
    let key = args[1];
    typed(ctx, |ctx| {
        let Some(mut m) = meta(ctx.store, key)? else {
            return fail(ctx, "ERR no such key");
        };
        let len = length(ctx.store, key)?;
        if len > 0 {
            let top = edge(ctx.store, key, true)?.map_or(ZERO_ID, |e| e.0);
            if id < top {
                return fail(
                    ctx,
                    "ERR The ID specified in XSETID is smaller than the target stream top item",
                );
            }
            if added.is_some_and(|a| len > a) {
                return fail(ctx, "ERR The entries_added specified in XSETID is smaller than the target stream length");
            }
        }
        m.last = id;
        if let Some(a) = added {
            m.added = a;
        }
        if !max_del.is_zero() {
            m.max_deleted = max_del;
        }
        ctx.store.stream_edit(key, false, &[m.put()])?;
        reply::ok(ctx.out);
        ctx.notify(nc::STREAM, "xsetid", key);
        Ok(Effect::Wrote)
    })
}

// ---- XREAD and XREADGROUP ----

/// One stream's part of an XREADGROUP: what it propagates, as Redis's `streamPropagateXCLAIM`
/// and `streamPropagateGroupID` do.
fn xclaim_op(key: &[u8], group: &[u8], id: Id, n: &Nack, last: Id) -> Op {
    vec![
        b"XCLAIM".to_vec(),
        key.to_vec(),
        group.to_vec(),
        n.consumer.clone(),
        b"0".to_vec(),
        id.text().into_bytes(),
        b"TIME".to_vec(),
        n.time.to_string().into_bytes(),
        b"RETRYCOUNT".to_vec(),
        n.count.to_string().into_bytes(),
        b"FORCE".to_vec(),
        b"JUSTID".to_vec(),
        b"LASTID".to_vec(),
        last.text().into_bytes(),
    ]
}

fn setid_op(key: &[u8], group: &[u8], g: &Group) -> Op {
    vec![
        b"XGROUP".to_vec(),
        b"SETID".to_vec(),
        key.to_vec(),
        group.to_vec(),
        g.last.text().into_bytes(),
        b"ENTRIESREAD".to_vec(),
        g.entries_read
            .map_or(-1, |n| n as i64)
            .to_string()
            .into_bytes(),
    ]
}

fn createconsumer_op(key: &[u8], group: &[u8], consumer: &[u8]) -> Op {
    vec![
        b"XGROUP".to_vec(),
        b"CREATECONSUMER".to_vec(),
        key.to_vec(),
        group.to_vec(),
        consumer.to_vec(),
    ]
}

/// Look up `consumer` of `group` (its seen time refreshed), creating it when missing (with its
/// event); true when created.
fn touch_consumer(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    group: &[u8],
    consumer: &[u8],
    now: u64,
) -> Result<bool, StoreError> {
    let existed = consumer_seen(ctx.store, key, group, consumer)?.is_some();
    let mut edits = Vec::new();
    put_consumer(&mut edits, group, consumer, now);
    edit(ctx.store, key, &edits)?;
    if !existed {
        ctx.notify(nc::STREAM, "xgroup-createconsumer", key);
    }
    Ok(!existed)
}

const BLOCK_IN_SCRIPT: &str = "command is not allowed with BLOCK option from scripts";

pub(crate) fn xread(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    xread_generic(ctx, args, false)
}

pub(crate) fn xreadgroup(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    xread_generic(ctx, args, true)
}

/// What one stream of an XREAD/XREADGROUP asks: entries after `after` (`None`: XREADGROUP's `>`).
#[derive(Clone, Copy)]
struct Want {
    after: Option<Id>,
}

fn xread_generic(
    ctx: &mut Ctx<'_>,
    args: &[&[u8]],
    group_read: bool,
) -> Result<Effect, StoreError> {
    let mut block: Option<&[u8]> = None;
    let mut count = 0u64;
    let mut streams_at = 0;
    let mut group_name: Option<(&[u8], &[u8])> = None;
    let mut noack = false;
    let mut i = 1;
    while i < args.len() {
        let more = args.len() - i - 1;
        let o = args[i];
        if o.eq_ignore_ascii_case(b"BLOCK") && more > 0 {
            if ctx.session.in_script {
                return fail(
                    ctx,
                    &format!("ERR {} {BLOCK_IN_SCRIPT}", String::from_utf8_lossy(args[0])),
                );
            }
            i += 1;
            match timeout_ms(args[i]) {
                Ok(_) => block = Some(args[i]),
                Err(e) => return fail(ctx, e),
            }
        } else if o.eq_ignore_ascii_case(b"COUNT") && more > 0 {
            i += 1;
            match ll(args[i]) {
                Some(c) => count = c.max(0) as u64,
                None => return fail(ctx, NOT_INT),
            }
        } else if o.eq_ignore_ascii_case(b"STREAMS") && more > 0 {
            streams_at = i + 1;
            if (args.len() - streams_at) % 2 != 0 {
                return fail(ctx, "ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.");
            }
            break;
        } else if o.eq_ignore_ascii_case(b"GROUP") && more >= 2 {
            if !group_read {
                return fail(ctx, "ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead.");
            }
            group_name = Some((args[i + 1], args[i + 2]));
            i += 2;
        } else if o.eq_ignore_ascii_case(b"NOACK") {
            if !group_read {
                return fail(ctx, "ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead.");
            }
            noack = true;
        } else {
            return fail(ctx, SYNTAX);
        }
        i += 1;
    }
    if streams_at == 0 {
        return fail(ctx, SYNTAX);
    }
    if group_read && group_name.is_none() {
        return fail(ctx, "ERR Missing GROUP option for XREADGROUP");
    }
    // A parked client run again reads at most 1000 entries when it gave no COUNT (Redis's
    // XREAD_BLOCKED_DEFAULT_COUNT).
    if count == 0 && ctx.session.block_retry {
        count = 1000;
    }
    let n = (args.len() - streams_at) / 2;
    let keys = &args[streams_at..streams_at + n];
    let ids = &args[streams_at + n..];
    typed(ctx, |ctx| {
        if ctx.session.block_retry {
            // Run again for a parked client: a stream gone or of another type is no error for
            // XREAD (it waits on), but ends XREADGROUP's wait, as Redis's blocked.c does.
            for k in keys {
                let m = match meta(ctx.store, k) {
                    Err(StoreError::WrongType { .. }) => None,
                    r => r?,
                };
                let Some((g, _)) = group_name else {
                    continue;
                };
                if m.is_none() {
                    return fail(ctx, "UNBLOCKED the stream key no longer exists");
                }
                if group(ctx.store, k, g)?.is_none() {
                    return fail(
                        ctx,
                        "NOGROUP the consumer group this client was blocked on no longer exists",
                    );
                }
            }
        }
        let mut wants = Vec::with_capacity(n);
        for (k, idb) in keys.iter().zip(ids) {
            let m = match meta(ctx.store, k) {
                Err(StoreError::WrongType { .. }) if ctx.session.block_retry => None,
                r => r?,
            };
            if let Some((g, _)) = group_name {
                if m.is_none() || group(ctx.store, k, g)?.is_none() {
                    return fail(
                        ctx,
                        &format!(
                            "NOGROUP No such key '{}' or consumer group '{}' in XREADGROUP with GROUP option",
                            String::from_utf8_lossy(crate::db::user_key(k)),
                            String::from_utf8_lossy(g)
                        ),
                    );
                }
            }
            if *idb == b"$" {
                if group_read {
                    return fail(ctx, "ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set.");
                }
                wants.push(Want {
                    after: Some(m.map_or(ZERO_ID, |m| m.last)),
                });
            } else if *idb == b">" {
                if !group_read {
                    return fail(ctx, "ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option.");
                }
                wants.push(Want { after: None });
            } else {
                match parse_strict_id(idb) {
                    Some(id) => wants.push(Want { after: Some(id) }),
                    None => return fail(ctx, BAD_ID),
                }
            }
        }
        let mut replies: Vec<(usize, Vec<u8>)> = Vec::new();
        let mut ops: Vec<Op> = Vec::new();
        let mut wrote = false;
        for (at, (k, w)) in keys.iter().zip(&wants).enumerate() {
            let m = match meta(ctx.store, k) {
                Err(StoreError::WrongType { .. }) if ctx.session.block_retry => None,
                r => r?,
            };
            let Some(m) = m else {
                continue;
            };
            let mut out = Vec::new();
            let served = match group_name {
                None => {
                    let after = w.after.expect("XREAD has ids");
                    let top = edge(ctx.store, k, true)?;
                    if top.is_some_and(|t| t.0 > after) {
                        let got = match after.incr() {
                            Some(s) => range(
                                ctx.store,
                                k,
                                s,
                                MAX_ID,
                                false,
                                if count == 0 { u64::MAX } else { count },
                            )?,
                            None => Vec::new(),
                        };
                        reply::array(&mut out, got.len());
                        for (id, v) in &got {
                            reply_entry(&mut out, *id, v, k)?;
                        }
                        true
                    } else {
                        false
                    }
                }
                Some((g, consumer)) => {
                    let gr = group(ctx.store, k, g)?.expect("checked above");
                    let history = w.after.is_some();
                    let fresh =
                        !history && edge(ctx.store, k, true)?.is_some_and(|t| t.0 > gr.last);
                    if history || fresh {
                        wrote = true;
                        let now = clock(ctx.store);
                        if touch_consumer(ctx, k, g, consumer, now)? && noack {
                            ops.push(createconsumer_op(k, g, consumer));
                        }
                        if let Some(after) = w.after {
                            serve_history(ctx, k, g, consumer, after, count, now, &mut out)?;
                        } else {
                            serve_new(
                                ctx, k, g, consumer, gr, m, count, noack, now, &mut out, &mut ops,
                            )?;
                        }
                        true
                    } else {
                        false
                    }
                }
            };
            if served {
                replies.push((at, out));
            }
        }
        if !replies.is_empty() {
            let proto = ctx.session.proto;
            if proto >= 3 {
                reply::map(ctx.out, proto, replies.len());
            } else {
                reply::array(ctx.out, replies.len());
            }
            for (at, body) in &replies {
                if proto < 3 {
                    reply::array(ctx.out, 2);
                }
                reply::bulk(ctx.out, crate::db::user_key(keys[*at]));
                ctx.out.extend_from_slice(body);
            }
            if wrote {
                ctx.session.propagate_as(|| ops);
                return Ok(Effect::Wrote);
            }
            return Ok(Effect::Read);
        }
        if wrote {
            ctx.session.propagate_as(|| ops);
        }
        if let Some(block) = block {
            if ctx.session.in_exec {
                reply::null_array(ctx.out, ctx.session.proto);
                return Ok(Effect::Read);
            }
            // Parked with `$` read now: written entries are those after the last id of this
            // moment, whatever is added before the client is served.
            // The server runs the parked command as a client's, whose keys get their database
            // byte again: the keys go back as the client wrote them.
            let mut parked: Vec<Vec<u8>> = args.iter().map(|a| a.to_vec()).collect();
            for (j, k) in keys.iter().enumerate() {
                parked[streams_at + j] = crate::db::user_key(k).to_vec();
            }
            for (j, w) in wants.iter().enumerate() {
                if ids[j] == b"$" {
                    parked[streams_at + n + j] = w.after.unwrap_or(ZERO_ID).text().into_bytes();
                }
            }
            let deadline = timeout_arg_ms(block);
            let effect = wait(ctx, keys, deadline, false);
            if let Some(b) = ctx.session.block.as_mut() {
                b.args = Some(parked);
            }
            return Ok(if wrote { Effect::Wrote } else { effect });
        }
        reply::null_array(ctx.out, ctx.session.proto);
        Ok(if wrote { Effect::Wrote } else { Effect::Read })
    })
}

/// BLOCK's milliseconds (Redis's `getTimeoutFromObjectOrReply` in ms).
fn timeout_ms(b: &[u8]) -> Result<u64, &'static str> {
    match ll(b) {
        None => Err("ERR timeout is not an integer or out of range"),
        Some(n) if n < 0 => Err("ERR timeout is negative"),
        Some(n) => Ok(n as u64),
    }
}

fn timeout_arg_ms(b: &[u8]) -> Option<std::time::Instant> {
    match timeout_ms(b) {
        Ok(0) | Err(_) => None,
        Ok(ms) => std::time::Instant::now().checked_add(std::time::Duration::from_millis(ms)),
    }
}

/// XREADGROUP `>`: entries after the group's last id, each added to the consumer's pending
/// entries (unless `noack`) and replicated as an XCLAIM; the group's last id and read counter
/// move as Redis's `streamReplyWithRange` moves them.
#[allow(clippy::too_many_arguments)]
fn serve_new(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    gname: &[u8],
    consumer: &[u8],
    mut g: Group,
    m: Meta,
    count: u64,
    noack: bool,
    now: u64,
    out: &mut Vec<u8>,
    ops: &mut Vec<Op>,
) -> Result<(), StoreError> {
    let start = match g.last.incr() {
        Some(s) => s,
        None => {
            reply::array(out, 0);
            return Ok(());
        }
    };
    let got = range(
        ctx.store,
        key,
        start,
        MAX_ID,
        false,
        if count == 0 { u64::MAX } else { count },
    )?;
    let sh = shape(ctx.store, key, m)?;
    reply::array(out, got.len());
    let mut moved = false;
    for (id, v) in &got {
        if *id > g.last {
            if g.entries_read.is_some() && !sh.tombstones_from(*id) {
                g.entries_read = g.entries_read.map(|n| n + 1);
            } else if sh.meta.added > 0 {
                g.entries_read = sh.distance(*id);
            }
            g.last = *id;
            moved = true;
        }
        reply_entry(out, *id, v, key)?;
        let mut edits = vec![g.put(gname)];
        if !noack {
            let old = nack(ctx.store, key, gname, *id)?;
            let n = Nack {
                time: now,
                count: 1,
                consumer: consumer.to_vec(),
            };
            put_nack(
                &mut edits,
                gname,
                *id,
                &n,
                old.as_ref().map(|o| o.consumer.as_slice()),
            );
            ops.push(xclaim_op(key, gname, *id, &n, g.last));
        }
        edit(ctx.store, key, &edits)?;
    }
    if noack && moved {
        ops.push(setid_op(key, gname, &g));
    }
    Ok(())
}

/// XREADGROUP with an id: the consumer's own pending entries after it (a deleted entry as its id
/// and a null), each delivered once more.
#[allow(clippy::too_many_arguments)]
fn serve_history(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    gname: &[u8],
    consumer: &[u8],
    after: Id,
    count: u64,
    now: u64,
    out: &mut Vec<u8>,
) -> Result<(), StoreError> {
    let Some(start) = after.incr() else {
        reply::array(out, 0);
        return Ok(());
    };
    let prefix = cpel_prefix(gname, consumer);
    let mut lo = prefix.clone();
    lo.extend_from_slice(&start.key());
    let hi = after_prefix(&prefix);
    let ids: Vec<Id> = ctx
        .store
        .stream_range(
            key,
            T::ConsumerPending,
            &lo,
            hi.as_deref(),
            false,
            if count == 0 { u64::MAX } else { count },
        )?
        .into_iter()
        .filter_map(|(k, _)| Id::from_key(&k))
        .collect();
    reply::array(out, ids.len());
    for id in ids {
        match entry(ctx.store, key, id)? {
            Some(v) => {
                reply_entry(out, id, &v, key)?;
                if let Some(mut n) = nack(ctx.store, key, gname, id)? {
                    n.time = now;
                    n.count += 1;
                    edit(
                        ctx.store,
                        key,
                        &[StreamEdit::Put(T::Pending, pel_key(gname, id), n.encode())],
                    )?;
                }
            }
            None => {
                reply::array(out, 2);
                reply::bulk(out, id.text().as_bytes());
                reply::null_array(out, ctx.session.proto);
            }
        }
    }
    Ok(())
}

// ---- XGROUP, XACK, XPENDING, XCLAIM, XAUTOCLAIM ----

fn nogroup(ctx: &mut Ctx<'_>, key: &[u8], group: &[u8]) -> Result<Effect, StoreError> {
    fail(
        ctx,
        &format!(
            "NOGROUP No such key '{}' or consumer group '{}'",
            String::from_utf8_lossy(crate::db::user_key(key)),
            String::from_utf8_lossy(group)
        ),
    )
}

fn subcommand_syntax(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    fail(
        ctx,
        &format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try {} HELP.",
            String::from_utf8_lossy(args[1]),
            String::from_utf8_lossy(args[0]).to_uppercase()
        ),
    )
}

/// A container command's checks before its handler, as Redis 7.0's table makes them: an unknown
/// subcommand, and a known one's arity (`subs`: name and arity, negative for "at least").
fn container_checks(
    ctx: &mut Ctx<'_>,
    args: &[&[u8]],
    subs: &[(&str, i64)],
) -> Option<Result<Effect, StoreError>> {
    let cmd = String::from_utf8_lossy(args[0]).to_uppercase();
    let Some(&(name, arity)) = subs
        .iter()
        .find(|(n, _)| n.as_bytes().eq_ignore_ascii_case(args[1]))
    else {
        let sub = &args[1][..args[1].len().min(128)];
        return Some(fail(
            ctx,
            &format!(
                "ERR unknown subcommand '{}'. Try {cmd} HELP.",
                String::from_utf8_lossy(sub)
            ),
        ));
    };
    let n = args.len() as i64;
    if (arity >= 0 && n != arity) || (arity < 0 && n < -arity) {
        return Some(fail(
            ctx,
            &format!(
                "ERR wrong number of arguments for '{}|{}' command",
                cmd.to_lowercase(),
                name
            ),
        ));
    }
    None
}

fn help(ctx: &mut Ctx<'_>, command: &str, lines: &[&str]) -> Result<Effect, StoreError> {
    let mut all = vec![format!(
        "{command} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    )];
    all.extend(lines.iter().map(|l| l.to_string()));
    all.push("HELP".into());
    all.push("    Print this help.".into());
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    reply::simple_lines(ctx.out, &refs);
    Ok(Effect::Read)
}

const XGROUP_HELP: &[&str] = &[
    "CREATE <key> <groupname> <id|$> [option]",
    "    Create a new consumer group. Options are:",
    "    * MKSTREAM",
    "      Create the empty stream if it does not exist.",
    "    * ENTRIESREAD entries_read",
    "      Set the group's entries_read counter (internal use).",
    "CREATECONSUMER <key> <groupname> <consumer>",
    "    Create a new consumer in the specified group.",
    "DELCONSUMER <key> <groupname> <consumer>",
    "    Remove the specified consumer.",
    "DESTROY <key> <groupname>",
    "    Remove the specified group.",
    "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
    "    Set the current group ID and entries_read counter.",
];

pub(crate) fn xgroup(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let subs = [
        ("create", -5),
        ("createconsumer", 5),
        ("delconsumer", 5),
        ("destroy", 4),
        ("help", 2),
        ("setid", -5),
    ];
    if let Some(r) = container_checks(ctx, args, &subs) {
        return r;
    }
    let opt = args[1];
    let is = |w: &[u8]| opt.eq_ignore_ascii_case(w);
    if is(b"HELP") {
        return help(ctx, "XGROUP", XGROUP_HELP);
    }
    let mut mkstream = false;
    let mut entries_read: Option<u64> = None;
    let mut i = 5;
    while i < args.len() {
        if is(b"CREATE") && args[i].eq_ignore_ascii_case(b"MKSTREAM") {
            mkstream = true;
            i += 1;
        } else if (is(b"CREATE") || is(b"SETID"))
            && args[i].eq_ignore_ascii_case(b"ENTRIESREAD")
            && i + 1 < args.len()
        {
            match ll(args[i + 1]) {
                None => return fail(ctx, NOT_INT),
                Some(n) if n < 0 && n != -1 => {
                    return fail(ctx, "ERR value for ENTRIESREAD must be positive or -1")
                }
                Some(n) => entries_read = (n >= 0).then_some(n as u64),
            }
            i += 2;
        } else {
            return subcommand_syntax(ctx, args);
        }
    }
    let (key, gname) = (args[2], args[3]);
    typed(ctx, |ctx| {
        let m = meta(ctx.store, key)?;
        let g = match m {
            Some(_) => group(ctx.store, key, gname)?,
            None => None,
        };
        if !mkstream {
            if m.is_none() {
                return fail(ctx, "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.");
            }
            if g.is_none() && (is(b"SETID") || is(b"CREATECONSUMER") || is(b"DELCONSUMER")) {
                return fail(
                    ctx,
                    &format!(
                        "NOGROUP No such consumer group '{}' for key name '{}'",
                        String::from_utf8_lossy(gname),
                        String::from_utf8_lossy(crate::db::user_key(key))
                    ),
                );
            }
        }
        if is(b"CREATE") && (5..=8).contains(&args.len()) {
            let id = if args[4] == b"$" {
                m.map_or(ZERO_ID, |m| m.last)
            } else {
                match parse_strict_id(args[4]) {
                    Some(id) => id,
                    None => return fail(ctx, BAD_ID),
                }
            };
            if g.is_some() {
                return fail(ctx, "BUSYGROUP Consumer Group name already exists");
            }
            let mut edits = Vec::new();
            if m.is_none() {
                edits.push(Meta::default().put());
            }
            edits.push(
                Group {
                    last: id,
                    entries_read,
                }
                .put(gname),
            );
            ctx.store.stream_edit(key, true, &edits)?;
            reply::ok(ctx.out);
            ctx.notify(nc::STREAM, "xgroup-create", key);
            if m.is_none() {
                // The key is no key position of the table's (XGROUP's moves with its
                // subcommand): named written, it touches its watchers as Redis's
                // signalModifiedKey does.
                ctx.session.written_keys.push(key.to_vec());
            }
            Ok(Effect::Wrote)
        } else if is(b"SETID") && (args.len() == 5 || args.len() == 7) {
            let Some(m) = m else {
                return subcommand_syntax(ctx, args);
            };
            let id = if args[4] == b"$" {
                m.last
            } else {
                match parse_id(args[4], 0) {
                    Some(id) => id,
                    None => return fail(ctx, BAD_ID),
                }
            };
            edit(
                ctx.store,
                key,
                &[Group {
                    last: id,
                    entries_read,
                }
                .put(gname)],
            )?;
            reply::ok(ctx.out);
            ctx.notify(nc::STREAM, "xgroup-setid", key);
            Ok(Effect::Wrote)
        } else if is(b"DESTROY") && args.len() == 4 {
            if g.is_none() {
                reply::int(ctx.out, 0);
                return Ok(Effect::Read);
            }
            let prefix = gp(gname);
            for t in [T::Pending, T::ConsumerPending, T::Consumers] {
                ctx.store.stream_delete_prefix(key, t, &prefix, u64::MAX)?;
            }
            edit(
                ctx.store,
                key,
                &[StreamEdit::Delete(T::Meta, group_key(gname))],
            )?;
            reply::int(ctx.out, 1);
            ctx.notify(nc::STREAM, "xgroup-destroy", key);
            // Clients parked on the group are run again and told it is gone (Redis's
            // signalKeyAsReady).
            ctx.session.written_keys.push(key.to_vec());
            Ok(Effect::Wrote)
        } else if is(b"CREATECONSUMER") && args.len() == 5 {
            if g.is_none() {
                return subcommand_syntax(ctx, args);
            }
            let c = args[4];
            if consumer_seen(ctx.store, key, gname, c)?.is_some() {
                reply::int(ctx.out, 0);
                return Ok(Effect::Read);
            }
            let mut edits = Vec::new();
            put_consumer(&mut edits, gname, c, clock(ctx.store));
            edit(ctx.store, key, &edits)?;
            reply::int(ctx.out, 1);
            ctx.notify(nc::STREAM, "xgroup-createconsumer", key);
            Ok(Effect::Wrote)
        } else if is(b"DELCONSUMER") && args.len() == 5 {
            if g.is_none() {
                return subcommand_syntax(ctx, args);
            }
            let c = args[4];
            if consumer_seen(ctx.store, key, gname, c)?.is_none() {
                reply::int(ctx.out, 0);
                return Ok(Effect::Read);
            }
            let prefix = cpel_prefix(gname, c);
            let pending = count_prefix(ctx.store, key, T::ConsumerPending, &prefix)?;
            // Its pending entries leave the group's list page by page (memory bounded by the
            // page, not by the consumer's list).
            let hi = after_prefix(&prefix);
            loop {
                let page = ctx.store.stream_range(
                    key,
                    T::ConsumerPending,
                    &prefix,
                    hi.as_deref(),
                    false,
                    1024,
                )?;
                if page.is_empty() {
                    break;
                }
                let mut edits = Vec::with_capacity(page.len() * 2);
                for (k, _) in &page {
                    let id = Id::from_key(k).ok_or_else(|| corrupt(key, "pending entry"))?;
                    del_nack(&mut edits, gname, id, c);
                }
                edit(ctx.store, key, &edits)?;
            }
            edit(
                ctx.store,
                key,
                &[StreamEdit::Delete(T::Consumers, consumer_key(gname, c))],
            )?;
            reply::int(ctx.out, pending as i64);
            ctx.notify(nc::STREAM, "xgroup-delconsumer", key);
            Ok(Effect::Wrote)
        } else {
            subcommand_syntax(ctx, args)
        }
    })
}

pub(crate) fn xack(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let (key, gname) = (args[1], args[2]);
    typed(ctx, |ctx| {
        let g = match meta(ctx.store, key)? {
            Some(_) => group(ctx.store, key, gname)?,
            None => None,
        };
        if g.is_none() {
            reply::int(ctx.out, 0);
            return Ok(Effect::Read);
        }
        let Some(ids) = strict_ids(&args[3..]) else {
            return fail(ctx, BAD_ID);
        };
        let mut acked = 0;
        for id in ids {
            if let Some(n) = nack(ctx.store, key, gname, id)? {
                let mut edits = Vec::new();
                del_nack(&mut edits, gname, id, &n.consumer);
                edit(ctx.store, key, &edits)?;
                acked += 1;
            }
        }
        reply::int(ctx.out, acked);
        Ok(if acked > 0 {
            Effect::Wrote
        } else {
            Effect::Read
        })
    })
}

pub(crate) fn xpending(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let justinfo = args.len() == 3;
    if args.len() != 3 && !(6..=9).contains(&args.len()) {
        return fail(ctx, SYNTAX);
    }
    let (key, gname) = (args[1], args[2]);
    let mut start = ZERO_ID;
    let mut end = MAX_ID;
    let mut count = 0u64;
    let mut minidle = 0i64;
    let mut consumer: Option<&[u8]> = None;
    if args.len() >= 6 {
        let mut at = 3;
        if args[3].eq_ignore_ascii_case(b"IDLE") {
            match ll(args[4]) {
                Some(n) => minidle = n,
                None => return fail(ctx, NOT_INT),
            }
            if args.len() < 8 {
                return fail(ctx, SYNTAX);
            }
            at += 2;
        }
        match ll(args[at + 2]) {
            Some(c) => count = c.max(0) as u64,
            None => return fail(ctx, NOT_INT),
        }
        let Some((s, sx)) = parse_interval(args[at], 0) else {
            return fail(ctx, BAD_ID);
        };
        start = s;
        if sx {
            match start.incr() {
                Some(s) => start = s,
                None => return fail(ctx, "ERR invalid start ID for the interval"),
            }
        }
        let Some((e, ex)) = parse_interval(args[at + 1], u64::MAX) else {
            return fail(ctx, BAD_ID);
        };
        end = e;
        if ex {
            match end.decr() {
                Some(e) => end = e,
                None => return fail(ctx, "ERR invalid end ID for the interval"),
            }
        }
        if at + 3 < args.len() {
            consumer = Some(args[at + 3]);
        }
    }
    typed(ctx, |ctx| {
        let g = match meta(ctx.store, key)? {
            Some(_) => group(ctx.store, key, gname)?,
            None => None,
        };
        if g.is_none() {
            return nogroup(ctx, key, gname);
        }
        let prefix = gp(gname);
        let hi = after_prefix(&prefix);
        let proto = ctx.session.proto;
        if justinfo {
            let total = count_prefix(ctx.store, key, T::Pending, &prefix)?;
            reply::array(ctx.out, 4);
            reply::int(ctx.out, total as i64);
            if total == 0 {
                reply::null(ctx.out, proto);
                reply::null(ctx.out, proto);
                reply::null_array(ctx.out, proto);
                return Ok(Effect::Read);
            }
            for rev in [false, true] {
                let e = ctx
                    .store
                    .stream_range(key, T::Pending, &prefix, hi.as_deref(), rev, 1)?;
                let id = e
                    .first()
                    .and_then(|e| Id::from_key(&e.0))
                    .unwrap_or(ZERO_ID);
                reply::bulk(ctx.out, id.text().as_bytes());
            }
            let mut owners = Vec::new();
            for_each_consumer(ctx.store, key, gname, |store, name, _| {
                let n = count_prefix(store, key, T::ConsumerPending, &cpel_prefix(gname, name))?;
                if n > 0 {
                    owners.push((name.to_vec(), n));
                }
                Ok(())
            })?;
            reply::array(ctx.out, owners.len());
            for (name, n) in owners {
                reply::array(ctx.out, 2);
                reply::bulk(ctx.out, &name);
                reply::bulk(ctx.out, n.to_string().as_bytes());
            }
            return Ok(Effect::Read);
        }
        if let Some(c) = consumer {
            if consumer_seen(ctx.store, key, gname, c)?.is_none() {
                reply::array(ctx.out, 0);
                return Ok(Effect::Read);
            }
        }
        let now = clock(ctx.store);
        let mut rows: Vec<(Id, Nack)> = Vec::new();
        let scope = match consumer {
            Some(c) => (T::ConsumerPending, cpel_prefix(gname, c)),
            None => (T::Pending, prefix.clone()),
        };
        let mut lo = scope.1.clone();
        lo.extend_from_slice(&start.key());
        let mut upper = scope.1.clone();
        upper.extend_from_slice(&end.key());
        let upper = after_prefix(&upper);
        // Paged: IDLE may skip many entries, and memory stays bounded by the page and COUNT.
        while (rows.len() as u64) < count {
            let page = ctx
                .store
                .stream_range(key, scope.0, &lo, upper.as_deref(), false, 256)?;
            let Some(last) = page.last() else { break };
            let last_id = Id::from_key(&last.0).ok_or_else(|| corrupt(key, "pending entry"))?;
            for (k, v) in &page {
                let id = Id::from_key(k).ok_or_else(|| corrupt(key, "pending entry"))?;
                let n = match scope.0 {
                    T::Pending => Nack::decode(v),
                    _ => nack(ctx.store, key, gname, id)?,
                }
                .ok_or_else(|| corrupt(key, "pending entry"))?;
                if minidle > 0 && (now as i64 - n.time as i64) < minidle {
                    continue;
                }
                rows.push((id, n));
                if rows.len() as u64 == count {
                    break;
                }
            }
            match last_id.incr() {
                Some(nx) => {
                    lo = scope.1.clone();
                    lo.extend_from_slice(&nx.key());
                }
                None => break,
            }
        }
        reply::array(ctx.out, rows.len());
        for (id, n) in rows {
            reply::array(ctx.out, 4);
            reply::bulk(ctx.out, id.text().as_bytes());
            reply::bulk(ctx.out, &n.consumer);
            reply::int(ctx.out, (now as i64 - n.time as i64).max(0));
            reply::int(ctx.out, n.count as i64);
        }
        Ok(Effect::Read)
    })
}

/// Call `f` with each consumer of `group` (name, seen time) in name order, page by page.
fn for_each_consumer(
    store: &mut Store,
    key: &[u8],
    group: &[u8],
    mut f: impl FnMut(&mut Store, &[u8], u64) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let prefix = gp(group);
    let hi = after_prefix(&prefix);
    let mut lo = prefix.clone();
    loop {
        let page = store.stream_range(key, T::Consumers, &lo, hi.as_deref(), false, 256)?;
        let Some(last) = page.last() else {
            return Ok(());
        };
        let mut next = last.0.clone();
        next.push(0);
        for (k, v) in &page {
            let seen = v
                .get(..8)
                .map(|s| u64::from_le_bytes(s.try_into().expect("8")))
                .ok_or_else(|| corrupt(key, "consumer"))?;
            f(store, &k[prefix.len()..], seen)?;
        }
        if page.len() < 256 {
            return Ok(());
        }
        lo = next;
    }
}

/// XCLAIM and XAUTOCLAIM's move of `id` to `consumer`: its new pending record.
#[allow(clippy::too_many_arguments)]
fn claim_one(
    store: &mut Store,
    key: &[u8],
    gname: &[u8],
    id: Id,
    old: Option<Nack>,
    consumer: &[u8],
    time: u64,
    count: u64,
) -> Result<Nack, StoreError> {
    let n = Nack {
        time,
        count,
        consumer: consumer.to_vec(),
    };
    let mut edits = Vec::new();
    put_nack(
        &mut edits,
        gname,
        id,
        &n,
        old.as_ref().map(|o| o.consumer.as_slice()),
    );
    edit(store, key, &edits)?;
    Ok(n)
}

pub(crate) fn xclaim(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let (key, gname, cname) = (args[1], args[2], args[3]);
    typed(ctx, |ctx| {
        let g = match meta(ctx.store, key)? {
            Some(_) => group(ctx.store, key, gname)?,
            None => None,
        };
        let Some(mut g) = g else {
            return nogroup(ctx, key, gname);
        };
        let Some(minidle) = ll(args[4]) else {
            return fail(ctx, "ERR Invalid min-idle-time argument for XCLAIM");
        };
        let minidle = minidle.max(0) as u64;
        let mut ids = Vec::new();
        let mut j = 5;
        while j < args.len() {
            match parse_strict_id(args[j]) {
                Some(id) => ids.push((id, j)),
                None => break,
            }
            j += 1;
        }
        let now = clock(ctx.store);
        let (mut force, mut justid) = (false, false);
        let mut delivery: Option<i64> = None;
        let mut retry: Option<i64> = None;
        let mut last_id = ZERO_ID;
        while j < args.len() {
            let more = args.len() - 1 - j;
            let o = args[j];
            if o.eq_ignore_ascii_case(b"FORCE") {
                force = true;
            } else if o.eq_ignore_ascii_case(b"JUSTID") {
                justid = true;
            } else if o.eq_ignore_ascii_case(b"IDLE") && more > 0 {
                j += 1;
                match ll(args[j]) {
                    Some(n) => delivery = Some(now as i64 - n),
                    None => return fail(ctx, "ERR Invalid IDLE option argument for XCLAIM"),
                }
            } else if o.eq_ignore_ascii_case(b"TIME") && more > 0 {
                j += 1;
                match ll(args[j]) {
                    Some(n) => delivery = Some(n),
                    None => return fail(ctx, "ERR Invalid TIME option argument for XCLAIM"),
                }
            } else if o.eq_ignore_ascii_case(b"RETRYCOUNT") && more > 0 {
                j += 1;
                match ll(args[j]) {
                    Some(n) => retry = Some(n),
                    None => return fail(ctx, "ERR Invalid RETRYCOUNT option argument for XCLAIM"),
                }
            } else if o.eq_ignore_ascii_case(b"LASTID") && more > 0 {
                j += 1;
                match parse_strict_id(args[j]) {
                    Some(id) => last_id = id,
                    None => return fail(ctx, BAD_ID),
                }
            } else {
                return fail(
                    ctx,
                    &format!(
                        "ERR Unrecognized XCLAIM option '{}'",
                        String::from_utf8_lossy(o)
                    ),
                );
            }
            j += 1;
        }
        let mut wrote = false;
        let mut propagate_last = false;
        if last_id > g.last {
            g.last = last_id;
            edit(ctx.store, key, &[g.put(gname)])?;
            propagate_last = true;
            wrote = true;
        }
        let time = match delivery {
            Some(t) if t < 0 || t > now as i64 => now,
            Some(t) => t as u64,
            None => now,
        };
        let mut ops = Vec::new();
        let mut out = Vec::new();
        let mut claimed = 0usize;
        let mut consumer_ready = false;
        for (id, _) in ids {
            let old = nack(ctx.store, key, gname, id)?;
            let Some(v) = entry(ctx.store, key, id)? else {
                if let Some(o) = old {
                    // Redis propagates the claim of a deleted entry, then drops it.
                    ops.push(xclaim_op(key, gname, id, &o, g.last));
                    propagate_last = false;
                    let mut edits = Vec::new();
                    del_nack(&mut edits, gname, id, &o.consumer);
                    edit(ctx.store, key, &edits)?;
                    wrote = true;
                }
                continue;
            };
            let (old, forced) = match old {
                Some(o) => (Some(o), false),
                None if force => (None, true),
                None => continue,
            };
            if let Some(o) = &old {
                if minidle > 0 && (now as i64 - o.time as i64) < minidle as i64 {
                    continue;
                }
            }
            if !consumer_ready {
                touch_consumer(ctx, key, gname, cname, now)?;
                consumer_ready = true;
            }
            let prev_count = old.as_ref().map_or(if forced { 1 } else { 0 }, |o| o.count);
            let count = match retry {
                Some(r) if r >= 0 => r as u64,
                _ if !justid => prev_count + 1,
                _ => prev_count,
            };
            let n = claim_one(ctx.store, key, gname, id, old, cname, time, count)?;
            if justid {
                reply::bulk(&mut out, id.text().as_bytes());
            } else {
                reply_entry(&mut out, id, &v, key)?;
            }
            claimed += 1;
            ops.push(xclaim_op(key, gname, id, &n, g.last));
            propagate_last = false;
            wrote = true;
        }
        if propagate_last {
            ops.push(setid_op(key, gname, &g));
        }
        reply::array(ctx.out, claimed);
        ctx.out.extend_from_slice(&out);
        ctx.session.propagate_as(|| ops);
        Ok(if wrote { Effect::Wrote } else { Effect::Read })
    })
}

pub(crate) fn xautoclaim(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let (key, gname, cname) = (args[1], args[2], args[3]);
    let Some(minidle) = ll(args[4]) else {
        return fail(ctx, "ERR Invalid min-idle-time argument for XAUTOCLAIM");
    };
    let minidle = minidle.max(0) as u64;
    let Some((mut start, sx)) = parse_interval(args[5], 0) else {
        return fail(ctx, BAD_ID);
    };
    if sx {
        match start.incr() {
            Some(s) => start = s,
            None => return fail(ctx, "ERR invalid start ID for the interval"),
        }
    }
    let mut count: u64 = 100;
    let mut justid = false;
    let mut j = 6;
    while j < args.len() {
        let more = args.len() - 1 - j;
        if args[j].eq_ignore_ascii_case(b"COUNT") && more > 0 {
            let max = i64::MAX / 16;
            match ll(args[j + 1]) {
                Some(c) if (1..=max).contains(&c) => count = c as u64,
                _ => return fail(ctx, "ERR COUNT must be > 0"),
            }
            j += 1;
        } else if args[j].eq_ignore_ascii_case(b"JUSTID") {
            justid = true;
        } else {
            return fail(ctx, SYNTAX);
        }
        j += 1;
    }
    typed(ctx, |ctx| {
        let g = match meta(ctx.store, key)? {
            Some(_) => group(ctx.store, key, gname)?,
            None => None,
        };
        let Some(g) = g else {
            return nogroup(ctx, key, gname);
        };
        let now = clock(ctx.store);
        let prefix = gp(gname);
        let hi = after_prefix(&prefix);
        let mut attempts = count.saturating_mul(10);
        let mut left = count;
        let mut out = Vec::new();
        let mut claimed = 0usize;
        let mut deleted = Vec::new();
        let mut ops = Vec::new();
        let mut consumer_ready = false;
        let mut cursor = start;
        let mut end = ZERO_ID;
        loop {
            if attempts == 0 || left == 0 {
                // The next pending entry is where a following call starts.
                let mut lo = prefix.clone();
                lo.extend_from_slice(&cursor.key());
                let next = ctx
                    .store
                    .stream_range(key, T::Pending, &lo, hi.as_deref(), false, 1)?;
                if let Some((k, _)) = next.first() {
                    end = Id::from_key(k).unwrap_or(ZERO_ID);
                }
                break;
            }
            attempts -= 1;
            let mut lo = prefix.clone();
            lo.extend_from_slice(&cursor.key());
            let page = ctx
                .store
                .stream_range(key, T::Pending, &lo, hi.as_deref(), false, 1)?;
            let Some((k, v)) = page.into_iter().next() else {
                break;
            };
            let id = Id::from_key(&k).ok_or_else(|| corrupt(key, "pending entry"))?;
            let n = Nack::decode(&v).ok_or_else(|| corrupt(key, "pending entry"))?;
            let next_cursor = id.incr();
            let Some(value) = entry(ctx.store, key, id)? else {
                ops.push(xclaim_op(key, gname, id, &n, g.last));
                let mut edits = Vec::new();
                del_nack(&mut edits, gname, id, &n.consumer);
                edit(ctx.store, key, &edits)?;
                deleted.push(id);
                left -= 1;
                match next_cursor {
                    Some(c) => cursor = c,
                    None => break,
                }
                continue;
            };
            let idle_enough = minidle == 0 || (now as i64 - n.time as i64) >= minidle as i64;
            if idle_enough {
                if !consumer_ready {
                    touch_consumer(ctx, key, gname, cname, now)?;
                    consumer_ready = true;
                }
                let count = if justid { n.count } else { n.count + 1 };
                let nn = claim_one(ctx.store, key, gname, id, Some(n), cname, now, count)?;
                if justid {
                    reply::bulk(&mut out, id.text().as_bytes());
                } else {
                    reply_entry(&mut out, id, &value, key)?;
                }
                claimed += 1;
                left -= 1;
                ops.push(xclaim_op(key, gname, id, &nn, g.last));
            }
            match next_cursor {
                Some(c) => cursor = c,
                None => break,
            }
        }
        reply::array(ctx.out, 3);
        reply::bulk(ctx.out, end.text().as_bytes());
        reply::array(ctx.out, claimed);
        ctx.out.extend_from_slice(&out);
        reply::array(ctx.out, deleted.len());
        for id in &deleted {
            reply::bulk(ctx.out, id.text().as_bytes());
        }
        let wrote = !ops.is_empty() || consumer_ready;
        ctx.session.propagate_as(|| ops);
        Ok(if wrote { Effect::Wrote } else { Effect::Read })
    })
}

// ---- XINFO ----

const XINFO_HELP: &[&str] = &[
    "CONSUMERS <key> <groupname>",
    "    Show consumers of <groupname>.",
    "GROUPS <key>",
    "    Show the stream consumer groups.",
    "STREAM <key> [FULL [COUNT <count>]",
    "    Show information about the stream.",
];

/// The groups of a stream in name order: (name, group).
fn groups(store: &mut Store, key: &[u8]) -> Result<Vec<(Vec<u8>, Group)>, StoreError> {
    let hi = [GROUP_TAG + 1];
    store
        .stream_range(key, T::Meta, &[GROUP_TAG], Some(&hi), false, u64::MAX)?
        .into_iter()
        .map(|(k, v)| {
            Group::decode(&v)
                .map(|g| (k[1..].to_vec(), g))
                .ok_or_else(|| corrupt(key, "group"))
        })
        .collect()
}

pub(crate) fn xinfo(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let subs = [("consumers", 4), ("groups", 3), ("help", 2), ("stream", -3)];
    if let Some(r) = container_checks(ctx, args, &subs) {
        return r;
    }
    let opt = args[1];
    if opt.eq_ignore_ascii_case(b"HELP") {
        return help(ctx, "XINFO", XINFO_HELP);
    }
    let key = args[2];
    typed(ctx, |ctx| {
        let Some(m) = meta(ctx.store, key)? else {
            return fail(ctx, "ERR no such key");
        };
        let proto = ctx.session.proto;
        if opt.eq_ignore_ascii_case(b"CONSUMERS") && args.len() == 4 {
            let gname = args[3];
            if group(ctx.store, key, gname)?.is_none() {
                return fail(
                    ctx,
                    &format!(
                        "NOGROUP No such consumer group '{}' for key name '{}'",
                        String::from_utf8_lossy(gname),
                        String::from_utf8_lossy(crate::db::user_key(key))
                    ),
                );
            }
            let now = clock(ctx.store);
            let mut rows = Vec::new();
            for_each_consumer(ctx.store, key, gname, |store, name, seen| {
                let n = count_prefix(store, key, T::ConsumerPending, &cpel_prefix(gname, name))?;
                rows.push((name.to_vec(), n, (now as i64 - seen as i64).max(0)));
                Ok(())
            })?;
            reply::array(ctx.out, rows.len());
            for (name, pending, idle) in rows {
                reply::map(ctx.out, proto, 3);
                reply::bulk(ctx.out, b"name");
                reply::bulk(ctx.out, &name);
                reply::bulk(ctx.out, b"pending");
                reply::int(ctx.out, pending as i64);
                reply::bulk(ctx.out, b"idle");
                reply::int(ctx.out, idle);
            }
            Ok(Effect::Read)
        } else if opt.eq_ignore_ascii_case(b"GROUPS") && args.len() == 3 {
            let all = groups(ctx.store, key)?;
            let sh = shape(ctx.store, key, m)?;
            reply::array(ctx.out, all.len());
            for (name, g) in all {
                let consumers = count_prefix(ctx.store, key, T::Consumers, &gp(&name))?;
                let pending = count_prefix(ctx.store, key, T::Pending, &gp(&name))?;
                reply::map(ctx.out, proto, 6);
                reply::bulk(ctx.out, b"name");
                reply::bulk(ctx.out, &name);
                reply::bulk(ctx.out, b"consumers");
                reply::int(ctx.out, consumers as i64);
                reply::bulk(ctx.out, b"pending");
                reply::int(ctx.out, pending as i64);
                reply::bulk(ctx.out, b"last-delivered-id");
                reply::bulk(ctx.out, g.last.text().as_bytes());
                reply::bulk(ctx.out, b"entries-read");
                opt_int(ctx.out, proto, g.entries_read);
                reply::bulk(ctx.out, b"lag");
                opt_int(ctx.out, proto, sh.lag(&g));
            }
            Ok(Effect::Read)
        } else if opt.eq_ignore_ascii_case(b"STREAM") {
            xinfo_stream(ctx, args, key, m)
        } else {
            subcommand_syntax(ctx, args)
        }
    })
}

fn opt_int(out: &mut Vec<u8>, proto: u8, n: Option<u64>) {
    match n {
        Some(n) => reply::int(out, n as i64),
        None => reply::null(out, proto),
    }
}

fn xinfo_stream(
    ctx: &mut Ctx<'_>,
    args: &[&[u8]],
    key: &[u8],
    m: Meta,
) -> Result<Effect, StoreError> {
    let opts = &args[3..];
    let mut count: u64 = 10;
    let full = !opts.is_empty();
    if full {
        if (opts.len() != 1 && opts.len() != 3) || !opts[0].eq_ignore_ascii_case(b"FULL") {
            return subcommand_syntax(ctx, args);
        }
        if opts.len() == 3 {
            if !opts[1].eq_ignore_ascii_case(b"COUNT") {
                return subcommand_syntax(ctx, args);
            }
            match ll(opts[2]) {
                None => return fail(ctx, NOT_INT),
                Some(c) if c < 0 => count = 10,
                Some(c) => count = c as u64,
            }
        }
    }
    let limit = if count == 0 { u64::MAX } else { count };
    let proto = ctx.session.proto;
    let sh = shape(ctx.store, key, m)?;
    let all = groups(ctx.store, key)?;
    let out = &mut Vec::new();
    reply::map(out, proto, if full { 9 } else { 10 });
    reply::bulk(out, b"length");
    reply::int(out, sh.length as i64);
    // cxltier keeps no radix tree: both figures are the stream's nodes.
    reply::bulk(out, b"radix-tree-keys");
    reply::int(out, m.nodes as i64);
    reply::bulk(out, b"radix-tree-nodes");
    reply::int(out, m.nodes as i64);
    reply::bulk(out, b"last-generated-id");
    reply::bulk(out, m.last.text().as_bytes());
    reply::bulk(out, b"max-deleted-entry-id");
    reply::bulk(out, m.max_deleted.text().as_bytes());
    reply::bulk(out, b"entries-added");
    reply::int(out, m.added as i64);
    reply::bulk(out, b"recorded-first-entry-id");
    reply::bulk(out, sh.first.text().as_bytes());
    if !full {
        reply::bulk(out, b"groups");
        reply::int(out, all.len() as i64);
        for (label, last) in [(&b"first-entry"[..], false), (&b"last-entry"[..], true)] {
            reply::bulk(out, label);
            match edge(ctx.store, key, last)? {
                Some((id, v)) => reply_entry(out, id, &v, key)?,
                None => reply::null(out, proto),
            }
        }
    } else {
        reply::bulk(out, b"entries");
        let got = range(ctx.store, key, ZERO_ID, MAX_ID, false, limit)?;
        reply::array(out, got.len());
        for (id, v) in &got {
            reply_entry(out, *id, v, key)?;
        }
        reply::bulk(out, b"groups");
        reply::array(out, all.len());
        for (name, g) in &all {
            let prefix = gp(name);
            let hi = after_prefix(&prefix);
            reply::map(out, proto, 7);
            reply::bulk(out, b"name");
            reply::bulk(out, name);
            reply::bulk(out, b"last-delivered-id");
            reply::bulk(out, g.last.text().as_bytes());
            reply::bulk(out, b"entries-read");
            opt_int(out, proto, g.entries_read);
            reply::bulk(out, b"lag");
            opt_int(out, proto, sh.lag(g));
            reply::bulk(out, b"pel-count");
            reply::int(
                out,
                count_prefix(ctx.store, key, T::Pending, &prefix)? as i64,
            );
            reply::bulk(out, b"pending");
            let pel =
                ctx.store
                    .stream_range(key, T::Pending, &prefix, hi.as_deref(), false, limit)?;
            reply::array(out, pel.len());
            for (k, v) in &pel {
                let id = Id::from_key(k).ok_or_else(|| corrupt(key, "pending entry"))?;
                let n = Nack::decode(v).ok_or_else(|| corrupt(key, "pending entry"))?;
                reply::array(out, 4);
                reply::bulk(out, id.text().as_bytes());
                reply::bulk(out, &n.consumer);
                reply::int(out, n.time as i64);
                reply::int(out, n.count as i64);
            }
            let mut consumers = Vec::new();
            for_each_consumer(ctx.store, key, name, |_, c, seen| {
                consumers.push((c.to_vec(), seen));
                Ok(())
            })?;
            reply::bulk(out, b"consumers");
            reply::array(out, consumers.len());
            for (c, seen) in consumers {
                let cp = cpel_prefix(name, &c);
                let chi = after_prefix(&cp);
                reply::map(out, proto, 4);
                reply::bulk(out, b"name");
                reply::bulk(out, &c);
                reply::bulk(out, b"seen-time");
                reply::int(out, seen as i64);
                reply::bulk(out, b"pel-count");
                reply::int(
                    out,
                    count_prefix(ctx.store, key, T::ConsumerPending, &cp)? as i64,
                );
                reply::bulk(out, b"pending");
                let ids = ctx.store.stream_range(
                    key,
                    T::ConsumerPending,
                    &cp,
                    chi.as_deref(),
                    false,
                    limit,
                )?;
                reply::array(out, ids.len());
                for (k, _) in &ids {
                    let id = Id::from_key(k).ok_or_else(|| corrupt(key, "pending entry"))?;
                    let n = nack(ctx.store, key, name, id)?
                        .ok_or_else(|| corrupt(key, "pending entry"))?;
                    reply::array(out, 3);
                    reply::bulk(out, id.text().as_bytes());
                    reply::int(out, n.time as i64);
                    reply::int(out, n.count as i64);
                }
            }
        }
    }
    ctx.out.extend_from_slice(out);
    Ok(Effect::Read)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdb::Db;

    /// redis-server 7.0.15's replies to the same script (time-dependent replies left out).
    #[test]
    fn replies_are_redis_server_s() {
        let mut db = Db::new();
        db.replies(&[
            ("XADD s 1-1 a 1", "$3\r\n1-1\r\n"),
            ("XADD s 1-* b 2", "$3\r\n1-2\r\n"),
            ("XADD s 1 c 3", "-ERR The ID specified in XADD is equal or smaller than the target stream top item\r\n"),
            ("XADD s 2-0 d 4 e 5", "$3\r\n2-0\r\n"),
            ("XLEN s", ":3\r\n"),
            ("XRANGE s - +", "*3\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n*2\r\n$3\r\n1-2\r\n*2\r\n$1\r\nb\r\n$1\r\n2\r\n*2\r\n$3\r\n2-0\r\n*4\r\n$1\r\nd\r\n$1\r\n4\r\n$1\r\ne\r\n$1\r\n5\r\n"),
            ("XRANGE s (1-1 + COUNT 1", "*1\r\n*2\r\n$3\r\n1-2\r\n*2\r\n$1\r\nb\r\n$1\r\n2\r\n"),
            ("XREVRANGE s + - COUNT 2", "*2\r\n*2\r\n$3\r\n2-0\r\n*4\r\n$1\r\nd\r\n$1\r\n4\r\n$1\r\ne\r\n$1\r\n5\r\n*2\r\n$3\r\n1-2\r\n*2\r\n$1\r\nb\r\n$1\r\n2\r\n"),
            ("XRANGE s - + COUNT 0", "*-1\r\n"),
            ("XRANGE nokey - +", "*0\r\n"),
            ("XADD s 0-0 a b", "-ERR The ID specified in XADD must be greater than 0-0\r\n"),
            ("XADD s MAXLEN ~ x * a b", "-ERR value is not an integer or out of range\r\n"),
            ("XADD s", "-ERR wrong number of arguments for 'xadd' command\r\n"),
            ("XADD s * a", "-ERR wrong number of arguments for 'xadd' command\r\n"),
            ("XRANGE s (- +", "-ERR Invalid stream ID specified as stream command argument\r\n"),
            ("XRANGE s - (0-0", "-ERR invalid end ID for the interval\r\n"),
            ("XRANGE s x +", "-ERR Invalid stream ID specified as stream command argument\r\n"),
            ("XDEL s 1-2 9-9", ":1\r\n"),
            ("XDEL s 1-2", ":0\r\n"),
            ("XTRIM s MAXLEN 1", ":1\r\n"),
            ("XTRIM s MAXLEN 1 LIMIT 3", "-ERR syntax error, LIMIT cannot be used without the special ~ option\r\n"),
            ("XTRIM s FOO 1", "-ERR syntax error\r\n"),
            ("XTRIM s", "-ERR wrong number of arguments for 'xtrim' command\r\n"),
            ("XRANGE s - +", "*1\r\n*2\r\n$3\r\n2-0\r\n*4\r\n$1\r\nd\r\n$1\r\n4\r\n$1\r\ne\r\n$1\r\n5\r\n"),
            ("XSETID s 5-0", "+OK\r\n"),
            ("XADD s 4-0 a b", "-ERR The ID specified in XADD is equal or smaller than the target stream top item\r\n"),
            ("XADD s 5-* a b", "$3\r\n5-1\r\n"),
            ("XADD s NOMKSTREAM 6-0 a b", "$3\r\n6-0\r\n"),
            ("XADD nokey NOMKSTREAM 6-0 a b", "$-1\r\n"),
            ("EXISTS nokey", ":0\r\n"),
            ("TYPE s", "+stream\r\n"),
            ("OBJECT ENCODING s", "$6\r\nstream\r\n"),
            ("SET str x", "+OK\r\n"),
            ("XADD str * a b", "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"),
            ("XLEN str", "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"),
            ("XLEN nokey", ":0\r\n"),
            ("XGROUP CREATE s g 0", "+OK\r\n"),
            ("XGROUP CREATE s g 0", "-BUSYGROUP Consumer Group name already exists\r\n"),
            ("XGROUP CREATE nokey g $", "-ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.\r\n"),
            ("XGROUP CREATE nokey2 g $ MKSTREAM", "+OK\r\n"),
            ("XLEN nokey2", ":0\r\n"),
            ("EXISTS nokey2", ":1\r\n"),
            ("XREADGROUP GROUP g alice COUNT 10 STREAMS s >", "*1\r\n*2\r\n$1\r\ns\r\n*3\r\n*2\r\n$3\r\n2-0\r\n*4\r\n$1\r\nd\r\n$1\r\n4\r\n$1\r\ne\r\n$1\r\n5\r\n*2\r\n$3\r\n5-1\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n*2\r\n$3\r\n6-0\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n"),
            ("XREADGROUP GROUP g alice COUNT 10 STREAMS s >", "*-1\r\n"),
            ("XPENDING s g", "*4\r\n:3\r\n$3\r\n2-0\r\n$3\r\n6-0\r\n*1\r\n*2\r\n$5\r\nalice\r\n$1\r\n3\r\n"),
            ("XACK s g 2-0 7-7", ":1\r\n"),
            ("XREADGROUP GROUP g alice STREAMS s 0", "*1\r\n*2\r\n$1\r\ns\r\n*2\r\n*2\r\n$3\r\n5-1\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n*2\r\n$3\r\n6-0\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n"),
            ("XINFO GROUPS s", "*1\r\n*12\r\n$4\r\nname\r\n$1\r\ng\r\n$9\r\nconsumers\r\n:1\r\n$7\r\npending\r\n:2\r\n$17\r\nlast-delivered-id\r\n$3\r\n6-0\r\n$12\r\nentries-read\r\n:5\r\n$3\r\nlag\r\n:0\r\n"),
            ("XGROUP CREATECONSUMER s g bob", ":1\r\n"),
            ("XGROUP CREATECONSUMER s g bob", ":0\r\n"),
            ("XREADGROUP GROUP g bob STREAMS s 0", "*1\r\n*2\r\n$1\r\ns\r\n*0\r\n"),
            ("XGROUP DELCONSUMER s g alice", ":2\r\n"),
            ("XPENDING s g", "*4\r\n:0\r\n$-1\r\n$-1\r\n*-1\r\n"),
            ("XGROUP SETID s g 0", "+OK\r\n"),
            ("XREADGROUP GROUP g bob NOACK STREAMS s >", "*1\r\n*2\r\n$1\r\ns\r\n*3\r\n*2\r\n$3\r\n2-0\r\n*4\r\n$1\r\nd\r\n$1\r\n4\r\n$1\r\ne\r\n$1\r\n5\r\n*2\r\n$3\r\n5-1\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n*2\r\n$3\r\n6-0\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n"),
            ("XPENDING s g", "*4\r\n:0\r\n$-1\r\n$-1\r\n*-1\r\n"),
            ("XGROUP DESTROY s g", ":1\r\n"),
            ("XGROUP DESTROY s g", ":0\r\n"),
            ("XREADGROUP GROUP g bob STREAMS s >", "-NOGROUP No such key 's' or consumer group 'g' in XREADGROUP with GROUP option\r\n"),
            ("XREADGROUP GROUP g bob STREAMS s $", "-NOGROUP No such key 's' or consumer group 'g' in XREADGROUP with GROUP option\r\n"),
            ("XREAD STREAMS s >", "-ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option.\r\n"),
            ("XREAD COUNT 1 STREAMS s nokey 0 0", "*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n2-0\r\n*4\r\n$1\r\nd\r\n$1\r\n4\r\n$1\r\ne\r\n$1\r\n5\r\n"),
            ("XREAD STREAMS s s", "-ERR Invalid stream ID specified as stream command argument\r\n"),
            ("XREAD GROUP a b STREAMS s 0", "-ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead.\r\n"),
            ("XGROUP HELP x", "-ERR wrong number of arguments for 'xgroup|help' command\r\n"),
            ("XINFO HELP x", "-ERR wrong number of arguments for 'xinfo|help' command\r\n"),
            ("XGROUP FOO", "-ERR unknown subcommand 'FOO'. Try XGROUP HELP.\r\n"),
            ("XGROUP CREATE s", "-ERR wrong number of arguments for 'xgroup|create' command\r\n"),
            ("XINFO STREAM nokey", "-ERR no such key\r\n"),
            ("COMMAND GETKEYS XREAD COUNT 1 STREAMS a b 0 0", "*2\r\n$1\r\na\r\n$1\r\nb\r\n"),
            ("COMMAND GETKEYS XREADGROUP GROUP g c STREAMS a 0", "*1\r\n$1\r\na\r\n"),
            ("COMMAND GETKEYS XGROUP CREATE k g $", "*1\r\n$1\r\nk\r\n"),
            ("COMMAND GETKEYS XINFO STREAM k", "*1\r\n$1\r\nk\r\n"),
            ("XSETID s 1-0", "-ERR The ID specified in XSETID is smaller than the target stream top item\r\n"),
            ("XSETID nokey 1-0", "-ERR no such key\r\n"),
            ("XSETID s 9-0 ENTRIESADDED 1", "-ERR The entries_added specified in XSETID is smaller than the target stream length\r\n"),
            ("XSETID s 9-0 ENTRIESADDED 10 MAXDELETEDID 10-0", "-ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id\r\n"),
            ("XSETID s 9-0 ENTRIESADDED 10 MAXDELETEDID 8-0", "+OK\r\n"),
            ("XCLAIM s nogroup c 0 1-1", "-NOGROUP No such key 's' or consumer group 'nogroup'\r\n"),
            ("XGROUP CREATE s g2 0", "+OK\r\n"),
            ("XREADGROUP GROUP g2 c1 COUNT 2 STREAMS s >", "*1\r\n*2\r\n$1\r\ns\r\n*2\r\n*2\r\n$3\r\n2-0\r\n*4\r\n$1\r\nd\r\n$1\r\n4\r\n$1\r\ne\r\n$1\r\n5\r\n*2\r\n$3\r\n5-1\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n"),
            ("XCLAIM s g2 c2 0 5-1 TIME 1000 RETRYCOUNT 5 JUSTID", "*1\r\n$3\r\n5-1\r\n"),
            ("XCLAIM s g2 c2 0 5-1 BADOPT", "-ERR Unrecognized XCLAIM option 'BADOPT'\r\n"),
            ("XAUTOCLAIM s g2 c3 0 0 COUNT 1 JUSTID", "*3\r\n$3\r\n5-1\r\n*1\r\n$3\r\n2-0\r\n*0\r\n"),
            ("XAUTOCLAIM s g2 c3 0 0 COUNT 0", "-ERR COUNT must be > 0\r\n"),
        ]);
    }

    /// Approximate trimming removes whole nodes of `stream-node-max-entries` entries, as
    /// redis-server's listpacks: the lengths it leaves are redis-server's.
    #[test]
    fn approximate_trims_remove_redis_s_nodes() {
        let mut db = Db::new();
        db.cmd("CONFIG SET stream-node-max-entries 10");
        for i in 1..=100 {
            assert_eq!(
                db.cmd(&format!("XADD t {i} f v")),
                format!("${}\r\n{i}-0\r\n", format!("{i}-0").len())
            );
        }
        db.replies(&[
            ("CONFIG SET stream-node-max-entries 10", "+OK\r\n"),
            ("XADD t MAXLEN ~ 55 LIMIT 30 101 f v", "$5\r\n101-0\r\n"),
            ("XLEN t", ":71\r\n"),
            ("XADD t MAXLEN ~ 55 LIMIT 30 102 f v", "$5\r\n102-0\r\n"),
            ("XLEN t", ":62\r\n"),
            ("XDEL t 41 42 43 44 45 46 47 48 49 50", ":10\r\n"),
            ("XDEL t 52", ":1\r\n"),
            ("XTRIM t MAXLEN ~ 40", ":9\r\n"),
            ("XLEN t", ":42\r\n"),
            (
                "XRANGE t - + COUNT 1",
                "*1\r\n*2\r\n$4\r\n61-0\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n",
            ),
            ("XTRIM t MINID ~ 75", ":10\r\n"),
            ("XLEN t", ":32\r\n"),
            (
                "XRANGE t - + COUNT 1",
                "*1\r\n*2\r\n$4\r\n71-0\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n",
            ),
            ("XTRIM t MINID 75", ":4\r\n"),
            (
                "XRANGE t - + COUNT 1",
                "*1\r\n*2\r\n$4\r\n75-0\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n",
            ),
            ("XTRIM t MAXLEN ~ 20", ":6\r\n"),
            ("XLEN t", ":22\r\n"),
            ("XTRIM t MAXLEN = 5", ":17\r\n"),
            ("XLEN t", ":5\r\n"),
            ("XTRIM t MAXLEN ~ 0 LIMIT 1", ":0\r\n"),
            ("XTRIM t MAXLEN ~ 0 LIMIT 10", ":5\r\n"),
            ("XLEN t", ":0\r\n"),
            ("XADD t 200 f v", "$5\r\n200-0\r\n"),
            ("XTRIM t MAXLEN ~ 0", ":1\r\n"),
            ("XLEN t", ":0\r\n"),
            ("XDEL t 200", ":0\r\n"),
            ("XLEN t", ":0\r\n"),
            ("XADD t MINID ~ 300 201 f v", "$5\r\n201-0\r\n"),
            ("XLEN t", ":0\r\n"),
            ("XADD t MAXLEN 0 202 f v", "$5\r\n202-0\r\n"),
            ("XLEN t", ":0\r\n"),
            ("EXISTS t", ":1\r\n"),
            ("CONFIG SET stream-node-max-entries 100", "+OK\r\n"),
        ]);
    }

    #[test]
    fn ids_parse_as_redis_s_and_keys_sort_as_ids() {
        assert_eq!(parse_id(b"5", 7), Some(Id { ms: 5, seq: 7 }));
        assert_eq!(parse_id(b"-", 0), Some(ZERO_ID));
        assert_eq!(parse_id(b"+", 0), Some(MAX_ID));
        assert_eq!(parse_strict_id(b"+"), None);
        assert_eq!(
            parse_id(b"18446744073709551615-18446744073709551615", 0),
            Some(MAX_ID)
        );
        assert_eq!(parse_id(b"18446744073709551616", 0), None);
        assert_eq!(parse_id(b"-1", 0), None);
        assert_eq!(parse_id(b"1-x", 0), None);
        assert_eq!(
            parse_id_full(b"3-*", 0, true, true),
            Some((Id { ms: 3, seq: 0 }, false))
        );
        assert_eq!(parse_id(&[b'1'; 200], 0), None);
        let ids = [
            ZERO_ID,
            Id { ms: 0, seq: 1 },
            Id { ms: 1, seq: 0 },
            Id {
                ms: 1,
                seq: u64::MAX,
            },
            MAX_ID,
        ];
        for w in ids.windows(2) {
            assert!(w[0].key() < w[1].key());
            assert_eq!(w[0].incr().map(|i| i <= w[1]), Some(true));
        }
        assert_eq!(MAX_ID.incr(), None);
        assert_eq!(ZERO_ID.decr(), None);
        assert_eq!(after_prefix(&[1, 0xff]), Some(vec![2]));
        assert_eq!(after_prefix(&[0xff, 0xff]), None);
    }

    /// Entry values are read back, and damaged ones refused, never trusted.
    #[test]
    fn entry_values_decode_and_damage_is_refused() {
        let v = encode_entry(NODE_START, &[b"f", b"value", b""]);
        assert_eq!(
            decode_entry(&v),
            Some((NODE_START, vec![&b"f"[..], b"value", b""]))
        );
        for cut in 0..v.len() {
            assert_eq!(decode_entry(&v[..cut]), None, "cut at {cut}");
        }
        let mut huge = v.clone();
        huge[1..5].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode_entry(&huge), None);
        let mut long = v.clone();
        long.push(0);
        assert_eq!(decode_entry(&long), None);
        let m = Meta {
            last: Id { ms: 3, seq: 4 },
            added: 9,
            nodes: 2,
            ..Meta::default()
        };
        assert_eq!(Meta::decode(&m.encode()), Some(m));
        assert_eq!(Meta::decode(&m.encode()[..79]), None);
        let n = Nack {
            time: 5,
            count: 2,
            consumer: b"c".to_vec(),
        };
        assert_eq!(Nack::decode(&n.encode()), Some(n));
        assert_eq!(Nack::decode(&[0; 15]), None);
    }

    /// XREAD with BLOCK parks the connection with `$` resolved to the last id of the moment,
    /// and answers at once when entries are there; inside MULTI it never waits.
    #[test]
    fn xread_block_parks_with_the_last_id_of_the_moment() {
        let mut db = Db::new();
        db.cmd("XADD s 5-0 a 1");
        assert_eq!(db.cmd("XREAD BLOCK 0 STREAMS s $"), "");
        let block = db.session.block.take().expect("parked");
        let args = block.args.expect("its arguments rewritten");
        assert_eq!(args.last().map(Vec::as_slice), Some(&b"5-0"[..]));
        assert_eq!(
            db.cmd("XREAD BLOCK 0 STREAMS s 0"),
            "*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n5-0\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n"
        );
        db.replies(&[
            ("MULTI", "+OK\r\n"),
            ("XREAD BLOCK 0 STREAMS s $", "+QUEUED\r\n"),
            ("EXEC", "*1\r\n*-1\r\n"),
        ]);
        assert!(db.session.block.is_none());
    }

    /// A group, its pending entries and consumers live in the stream's trees: DEL takes them
    /// with it, and a new stream under the key starts without them.
    #[test]
    fn groups_go_with_their_stream() {
        let mut db = Db::new();
        db.replies(&[
            ("XADD s 1-0 a 1", "$3\r\n1-0\r\n"),
            ("XGROUP CREATE s g 0", "+OK\r\n"),
            (
                "XREADGROUP GROUP g c STREAMS s >",
                "*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n",
            ),
            ("DEL s", ":1\r\n"),
            ("XADD s 1-0 a 1", "$3\r\n1-0\r\n"),
            ("XINFO GROUPS s", "*0\r\n"),
            (
                "XPENDING s g",
                "-NOGROUP No such key 's' or consumer group 'g'\r\n",
            ),
        ]);
        assert_eq!(db.store.check_collection(b"\0s"), Ok(()));
    }
    /// The write stream's commands (Redis's propagation of the stream commands), as text.
    fn propagated(db: &mut Db, lines: &[&str]) -> Vec<String> {
        for l in lines {
            db.cmd(l);
        }
        let bytes = std::mem::take(&mut db.info.repl.pending);
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let mut words = text.split("\r\n").filter(|w| !w.is_empty());
        let mut out = Vec::new();
        while let Some(head) = words.next() {
            let n: usize = head[1..].parse().unwrap();
            let cmd: Vec<&str> = (0..n)
                .map(|_| {
                    words.next();
                    words.next().unwrap()
                })
                .collect();
            out.push(cmd.join(" "));
        }
        out
    }

    /// XADD's generated id and exact trims, XREADGROUP's XCLAIMs and SETID, and XCLAIM's own
    /// are what the write stream carries, as t_stream.c propagates them.
    #[test]
    fn writes_are_propagated_as_redis_propagates_them() {
        let mut db = Db::new();
        db.info.repl.attach();
        db.cmd("CONFIG SET stream-node-max-entries 2");
        let got = propagated(
            &mut db,
            &[
                "XADD s 1-* a 1",
                "XADD s 2-0 a 2",
                "XADD s MAXLEN ~ 1 3-0 a 3",
                "XGROUP CREATE s g 0",
                "XREADGROUP GROUP g c STREAMS s >",
                "XREADGROUP GROUP g c STREAMS s 0",
                "XADD s 4-0 a 4",
                "XREADGROUP GROUP g d NOACK STREAMS s >",
                "XCLAIM s g e 0 3-0 TIME 7 RETRYCOUNT 2",
                "XCLAIM s g e 0 9-9 LASTID 9-9",
            ],
        );
        let now = |s: &str| -> String {
            s.split(' ')
                .map(|w| {
                    if w.len() >= 12 && w.bytes().all(|b| b.is_ascii_digit()) {
                        "*"
                    } else {
                        w
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        let got: Vec<String> = got.iter().map(|s| now(s)).collect();
        assert_eq!(
            got,
            [
                "select 0",
                "XADD s 1-0 a 1",
                "XADD s 2-0 a 2",
                "XADD s MAXLEN = 1 3-0 a 3",
                "XGROUP CREATE s g 0",
                "XCLAIM s g c 0 3-0 TIME * RETRYCOUNT 1 FORCE JUSTID LASTID 3-0",
                "XADD s 4-0 a 4",
                "multi",
                "XGROUP CREATECONSUMER s g d",
                "XGROUP SETID s g 4-0 ENTRIESREAD 4",
                "exec",
                "XCLAIM s g e 0 3-0 TIME 7 RETRYCOUNT 2 FORCE JUSTID LASTID 4-0",
                "XGROUP SETID s g 9-9 ENTRIESREAD 4",
            ]
        );
    }
}
