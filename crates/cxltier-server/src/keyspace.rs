//! The keyspace commands: SCAN, KEYS, RANDOMKEY, RENAME, RENAMENX, COPY, TOUCH, EXPIRETIME,
//! PEXPIRETIME.
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

use cxltier_store::{Kind, ScanItem, StoreError};
use hashbrown::HashMap;

use crate::commands::{fail, now_ms, parse_i64, Ctx, Effect, SYNTAX};
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
fn successor(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.extend_from_slice(key);
    k.push(0);
    k
}

/// The name `TYPE` (and `SCAN ... TYPE`) gives a kind: a hash is a hash however it is kept.
pub(crate) fn type_name(kind: Kind) -> &'static str {
    match kind {
        Kind::String => "string",
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
    let items = ctx.store.scan(&start, count)?;
    let next = match items.last() {
        Some(last) if items.len() >= count => ctx.info.scan_cursors.issue(successor(&last.key)),
        _ => 0,
    };
    let keep = |it: &ScanItem| {
        pattern.is_none_or(|p| crate::glob::matches(p, &it.key, false))
            && kind.is_none_or(|t| t.eq_ignore_ascii_case(type_name(it.kind).as_bytes()))
    };
    let keys: Vec<&ScanItem> = items.iter().filter(|it| keep(it)).collect();
    reply::array(ctx.out, 2);
    reply::bulk(ctx.out, next.to_string().as_bytes());
    reply::array(ctx.out, keys.len());
    for it in keys {
        reply::bulk(ctx.out, &it.key);
    }
    Ok(Effect::Read)
}

/// KEYS pattern: every live key that matches, in byte order.
pub(crate) fn keys(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let mut found = Vec::new();
    let mut start = Vec::new();
    loop {
        let items = ctx.store.scan(&start, KEYS_BATCH)?;
        let done = items.len() < KEYS_BATCH;
        if let Some(last) = items.last() {
            start = successor(&last.key);
        }
        found.extend(
            items
                .into_iter()
                .filter(|it| crate::glob::matches(args[1], &it.key, false))
                .map(|it| it.key),
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
    let n = ctx.store.len();
    let r = random_u64();
    let key = if n == 0 {
        None
    } else if n <= RANDOMKEY_WALK {
        let items = ctx.store.scan(b"", (r % n) as usize + 1)?;
        items.last().map(|it| it.key.clone())
    } else {
        let mut items = ctx.store.scan(&r.to_be_bytes(), 1)?;
        if items.is_empty() {
            items = ctx.store.scan(b"", 1)?;
        }
        items.first().map(|it| it.key.clone())
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
    if nx && ctx.store.contains(args[2]) {
        reply::int(ctx.out, 0);
        return Ok(Effect::Read);
    }
    // The TTL goes with the value (Redis's rule); a collection goes with all its parts (the
    // store's rename: a root written as one value would lose them).
    ctx.store.rename(args[1], args[2], true)?;
    if nx {
        reply::int(ctx.out, 1);
    } else {
        reply::ok(ctx.out);
    }
    Ok(Effect::Wrote)
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
    let mut i = 3;
    while i < args.len() {
        match args[i].to_ascii_uppercase().as_slice() {
            b"REPLACE" => replace = true,
            b"DB" if i + 1 < args.len() => {
                match parse_i64(args[i + 1]) {
                    None => return fail(ctx, crate::commands::NOT_INT),
                    Some(0) => {}
                    Some(_) => {
                        return fail(
                            ctx,
                            "ERR DB index is out of range (cxltier serves database 0 only)",
                        )
                    }
                }
                i += 1;
            }
            _ => return fail(ctx, SYNTAX),
        }
        i += 1;
    }
    if args[1] == args[2] {
        return fail(ctx, "ERR source and destination objects are the same");
    }
    // The store's copy takes a collection's parts with its root.
    if !ctx.store.copy_key(args[1], args[2], replace)? {
        reply::int(ctx.out, 0);
        return Ok(Effect::Read);
    }
    reply::int(ctx.out, 1);
    Ok(Effect::Wrote)
}

/// TOUCH: how many of the keys exist (repeats counted), without reading their values.
pub(crate) fn touch(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let n = args[1..].iter().filter(|k| ctx.store.contains(k)).count();
    reply::int(ctx.out, n as i64);
    Ok(Effect::Read)
}

fn expire_time(ctx: &mut Ctx<'_>, key: &[u8], seconds: bool) -> Result<Effect, StoreError> {
    let o = ctx.store.get(key)?;
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
}
