//! The set commands over the store's chunked sets (`cxltier_store::Store::s*`). Whole-set
//! commands (SMEMBERS, SINTER, ...) read a set a page at a time through `sscan`; SPOP and
//! SRANDMEMBER draw members by index (`member_at`), O(log n) each.

use cxltier_store::{Kind, StoreError};
use rand::Rng;

use crate::args::{
    count_reply, random_draws, reply_each_member, reply_scan_page, scan_args, typed,
};
use crate::context::{fail, Ctx, Effect};
use crate::encoding::{is_canonical_int, SET_HASHTABLE as HASHTABLE};
use crate::errors::{NOT_INT, RANDOM_COUNT_RANGE, SYNTAX};
use crate::notify::class as nc;
use crate::numbers::int_arg;
use crate::resp::reply;

/// Members read per `sscan` call when a command walks a whole set.
const PAGE: usize = 1024;

/// Every member of the set at `key` (empty when absent; WRONGTYPE as an error).
fn members(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Vec<Vec<u8>>, StoreError> {
    let mut all = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    loop {
        let (page, next) = ctx.store.sscan(key, after.as_deref(), PAGE)?;
        all.extend(page);
        match next {
            Some(n) => after = Some(n),
            None => return Ok(all),
        }
    }
}

fn reply_set(ctx: &mut Ctx<'_>, ms: &[Vec<u8>]) {
    reply::set(ctx.out, ctx.session.proto, ms.len());
    for m in ms {
        reply::bulk(ctx.out, m);
    }
}

pub(crate) fn sadd(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    typed(ctx, |ctx| {
        let n = ctx.store.sadd(args[1], &args[2..])?;
        if n > 0 {
            ctx.notify(nc::SET, "sadd", args[1]);
        }
        reply::int(ctx.out, n as i64);
        Ok(if n > 0 { Effect::Wrote } else { Effect::Read })
    })
}

/// Before `leaving` (members of it) leave the set at `key`: when Redis holds it as a
/// hashtable now (more than set-max-intset-entries members, or a non-integer among those
/// leaving), mark it so. Costs nothing more for integers leaving a small set.
fn keep_hashtable(ctx: &mut Ctx<'_>, key: &[u8], leaving: &[&[u8]]) -> Result<(), StoreError> {
    if ctx.store.collection_flags(key, Kind::Set)? & HASHTABLE != 0 {
        return Ok(());
    }
    let most = ctx.info.knobs.int("set-max-intset-entries");
    let big = ctx.store.scard(key)? as i64 > most;
    if big || leaving.iter().any(|m| !is_canonical_int(m)) {
        ctx.store.add_collection_flags(key, Kind::Set, HASHTABLE)?;
    }
    Ok(())
}

pub(crate) fn srem(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    typed(ctx, |ctx| {
        // Only members that are there leave: a non-integer that is not one tells nothing.
        let mut leaving = Vec::new();
        for m in &args[2..] {
            if !is_canonical_int(m) && ctx.store.sismember(args[1], m)? {
                leaving.push(*m);
                break;
            }
        }
        keep_hashtable(ctx, args[1], &leaving)?;
        let n = ctx.store.srem(args[1], &args[2..])?;
        if n > 0 {
            ctx.notify(nc::SET, "srem", args[1]);
        }
        reply::int(ctx.out, n as i64);
        Ok(if n > 0 { Effect::Wrote } else { Effect::Read })
    })
}

pub(crate) fn sismember(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    typed(ctx, |ctx| {
        let b = ctx.store.sismember(args[1], args[2])?;
        reply::int(ctx.out, b as i64);
        Ok(Effect::Read)
    })
}

pub(crate) fn smismember(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    reply_each_member(
        ctx,
        args,
        |store, key, m| store.sismember(key, m),
        |ctx, found| reply::int(ctx.out, found as i64),
    )
}

pub(crate) fn scard(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    count_reply(ctx, |store| store.scard(args[1]))
}

pub(crate) fn smembers(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    typed(ctx, |ctx| {
        let ms = members(ctx, args[1])?;
        reply_set(ctx, &ms);
        Ok(Effect::Read)
    })
}

/// The optional count of SPOP and SRANDMEMBER: `Err` is the reply already given.
fn count_arg(ctx: &mut Ctx<'_>, args: &[&[u8]], negative_ok: bool) -> Result<Option<i64>, ()> {
    match args.len() {
        2 => Ok(None),
        3 => match int_arg(args[2]) {
            None => {
                reply::error(ctx.out, NOT_INT);
                Err(())
            }
            Some(c) if c < 0 && !negative_ok => {
                reply::error(ctx.out, "ERR value is out of range, must be positive");
                Err(())
            }
            // Redis's range (-LONG_MAX..LONG_MAX): -2^63 has no positive counterpart.
            Some(i64::MIN) => {
                reply::error(ctx.out, RANDOM_COUNT_RANGE);
                Err(())
            }
            Some(c) => Ok(Some(c)),
        },
        _ => {
            reply::error(ctx.out, SYNTAX);
            Err(())
        }
    }
}

pub(crate) fn spop(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let Ok(count) = count_arg(ctx, args, false) else {
        return Ok(Effect::Read);
    };
    typed(ctx, |ctx| {
        let card = ctx.store.scard(args[1])?;
        let want = count.map_or(1, |c| c as u64).min(card);
        let mut rng = rand::rng();
        let mut got = Vec::with_capacity(want as usize);
        if want > 0 {
            keep_hashtable(ctx, args[1], &[])?;
        }
        for left in (card - want + 1..=card).rev() {
            if let Some((m, _)) = ctx.store.member_at(args[1], rng.random_range(0..left))? {
                if !is_canonical_int(&m) {
                    keep_hashtable(ctx, args[1], &[&m])?;
                }
                ctx.store.srem(args[1], &[&m])?;
                got.push(m);
            }
        }
        // Replicated as Redis 7.0 does: the whole set taken by a count is a DEL, anything
        // else one SREM per member (a replica must not draw its own random members).
        if !got.is_empty() {
            ctx.session.propagate_as(|| {
                if count.is_some() && want == card {
                    vec![vec![b"del".to_vec(), args[1].to_vec()]]
                } else {
                    got.iter()
                        .map(|m| vec![b"srem".to_vec(), args[1].to_vec(), m.clone()])
                        .collect()
                }
            });
            // Redis: one `spop` event for the command, whatever the count.
            ctx.notify(nc::SET, "spop", args[1]);
        }
        match count {
            None => match got.first() {
                Some(m) => reply::bulk(ctx.out, m),
                None => reply::null(ctx.out, ctx.session.proto),
            },
            Some(_) => reply_set(ctx, &got),
        }
        Ok(if got.is_empty() {
            Effect::Read
        } else {
            Effect::Wrote
        })
    })
}

pub(crate) fn srandmember(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let Ok(count) = count_arg(ctx, args, true) else {
        return Ok(Effect::Read);
    };
    typed(ctx, |ctx| {
        let card = ctx.store.scard(args[1])?;
        let mut rng = rand::rng();
        let Some(c) = count else {
            match (card > 0)
                .then(|| ctx.store.member_at(args[1], rng.random_range(0..card)))
                .transpose()?
                .flatten()
            {
                Some((m, _)) => reply::bulk(ctx.out, &m),
                None => reply::null(ctx.out, ctx.session.proto),
            }
            return Ok(Effect::Read);
        };
        let mut got = Vec::new();
        if card > 0 && c < 0 {
            // A negative count: that many draws, repeats allowed. The reply's size is the
            // count's, not the set's, so it is bounded (Redis would grow the buffer until it
            // ran out of memory).
            let draws = random_draws(ctx, args[1], card, c.unsigned_abs(), |_, m, _, out| {
                reply::bulk(out, m)
            })?;
            match draws {
                Ok(reply) => ctx.out.extend_from_slice(&reply),
                Err(msg) => reply::error(ctx.out, &msg),
            }
            return Ok(Effect::Read);
        } else if card > 0 && c > 0 {
            // Distinct members: distinct indexes (Floyd's sampling), or the whole set.
            let want = (c as u64).min(card);
            let mut picked = hashbrown::HashSet::with_capacity(want as usize);
            for j in card - want..card {
                let t = rng.random_range(0..=j);
                if !picked.insert(t) {
                    picked.insert(j);
                }
            }
            let mut idx: Vec<u64> = picked.into_iter().collect();
            idx.sort_unstable();
            for i in idx {
                if let Some((m, _)) = ctx.store.member_at(args[1], i)? {
                    got.push(m);
                }
            }
        }
        reply::array(ctx.out, got.len());
        for m in &got {
            reply::bulk(ctx.out, m);
        }
        Ok(Effect::Read)
    })
}

pub(crate) fn sscan(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let Ok((after, pattern, count)) = scan_args(ctx, args) else {
        return Ok(Effect::Read);
    };
    typed(ctx, |ctx| {
        let page = ctx.store.sscan(args[1], after.as_deref(), count)?;
        reply_scan_page(ctx.out, page, pattern);
        Ok(Effect::Read)
    })
}

pub(crate) fn smove(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    typed(ctx, |ctx| {
        // Redis's order: an absent source is 0 whatever the destination holds; otherwise both
        // types are checked before anything moves.
        if ctx.store.scard(args[1])? == 0 {
            reply::int(ctx.out, 0);
            return Ok(Effect::Read);
        }
        ctx.store.scard(args[2])?;
        if ctx.store.sismember(args[1], args[3])? {
            keep_hashtable(ctx, args[1], &[args[3]])?;
        }
        if ctx.store.srem(args[1], &[args[3]])? == 0 {
            reply::int(ctx.out, 0);
            return Ok(Effect::Read);
        }
        // Redis's events: srem (and del) of the source, then sadd of the destination when
        // the member was new there; none when both are one set (a no-op).
        let same = args[1] == args[2];
        if !same {
            ctx.notify(nc::SET, "srem", args[1]);
            if !ctx.store.contains(args[1]) {
                ctx.notify(nc::GENERIC, "del", args[1]);
            }
        }
        if ctx.store.sadd(args[2], &[args[3]])? == 0 && !same {
            // Already a member there: only the source changed (Redis's WATCH sees the same).
            ctx.session.unchanged_keys.push(args[2].to_vec());
        } else if !same {
            ctx.notify(nc::SET, "sadd", args[2]);
        }
        reply::int(ctx.out, 1);
        Ok(Effect::Wrote)
    })
}

#[derive(Clone, Copy, PartialEq)]
enum Op {
    Inter,
    Union,
    Diff,
}

/// The members of `op` over the sets at `keys`, at most `limit` of them (SINTERCARD).
fn combine(
    ctx: &mut Ctx<'_>,
    op: Op,
    keys: &[&[u8]],
    limit: usize,
) -> Result<Vec<Vec<u8>>, StoreError> {
    // Each input is a read lookup, as in Redis (a missing one a key miss), also for the STORE
    // forms.
    for k in keys {
        let found = ctx.store.contains(k);
        ctx.info.lookup(k, found);
    }
    match op {
        Op::Inter => {
            // Walk the smallest set and look the others' members up: no other set is read
            // whole. Every type is checked first, as Redis does.
            let mut cards = Vec::with_capacity(keys.len());
            for k in keys {
                cards.push(ctx.store.scard(k)?);
            }
            let Some((small, _)) = cards.iter().enumerate().min_by_key(|(_, c)| **c) else {
                return Ok(Vec::new());
            };
            let mut out = Vec::new();
            'member: for m in members(ctx, keys[small])? {
                if out.len() >= limit {
                    break;
                }
                for (i, k) in keys.iter().enumerate() {
                    if i != small && !ctx.store.sismember(k, &m)? {
                        continue 'member;
                    }
                }
                out.push(m);
            }
            Ok(out)
        }
        Op::Union => {
            let mut seen = std::collections::BTreeSet::new();
            for k in keys {
                seen.extend(members(ctx, k)?);
            }
            Ok(seen.into_iter().collect())
        }
        Op::Diff => {
            for k in &keys[1..] {
                ctx.store.scard(k)?;
            }
            let mut out = Vec::new();
            'member: for m in members(ctx, keys[0])? {
                for k in &keys[1..] {
                    if ctx.store.sismember(k, &m)? {
                        continue 'member;
                    }
                }
                out.push(m);
            }
            Ok(out)
        }
    }
}

fn read_op(ctx: &mut Ctx<'_>, args: &[&[u8]], op: Op) -> Result<Effect, StoreError> {
    typed(ctx, |ctx| {
        let ms = combine(ctx, op, &args[1..], usize::MAX)?;
        reply_set(ctx, &ms);
        Ok(Effect::Read)
    })
}

fn store_op(ctx: &mut Ctx<'_>, args: &[&[u8]], op: Op) -> Result<Effect, StoreError> {
    typed(ctx, |ctx| {
        let ms = combine(ctx, op, &args[2..], usize::MAX)?;
        // The destination is replaced whatever it held; an empty result deletes it.
        ctx.store.delete(args[1])?;
        let refs: Vec<&[u8]> = ms.iter().map(Vec::as_slice).collect();
        for chunk in refs.chunks(PAGE) {
            ctx.store.sadd(args[1], chunk)?;
        }
        // A result stored is announced by its command's name; an empty one that deleted the
        // destination as `del` (by dispatch, which sees the key go).
        if !ms.is_empty() {
            let event = match op {
                Op::Inter => "sinterstore",
                Op::Union => "sunionstore",
                Op::Diff => "sdiffstore",
            };
            ctx.notify(nc::SET, event, args[1]);
        }
        reply::int(ctx.out, ms.len() as i64);
        Ok(Effect::Wrote)
    })
}

pub(crate) fn sinter(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    read_op(ctx, args, Op::Inter)
}
pub(crate) fn sunion(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    read_op(ctx, args, Op::Union)
}
pub(crate) fn sdiff(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    read_op(ctx, args, Op::Diff)
}
pub(crate) fn sinterstore(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    store_op(ctx, args, Op::Inter)
}
pub(crate) fn sunionstore(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    store_op(ctx, args, Op::Union)
}
pub(crate) fn sdiffstore(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    store_op(ctx, args, Op::Diff)
}

pub(crate) fn sintercard(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let n = match int_arg(args[1]) {
        Some(n) if n > 0 => n as usize,
        _ => return fail(ctx, "ERR numkeys should be greater than 0"),
    };
    if n > args.len() - 2 {
        return fail(
            ctx,
            "ERR Number of keys can't be greater than number of args",
        );
    }
    let keys = &args[2..2 + n];
    let mut limit = usize::MAX;
    let rest = &args[2 + n..];
    match rest {
        [] => {}
        [l, v] if l.eq_ignore_ascii_case(b"LIMIT") => match int_arg(v) {
            // Redis gives one error for both (getPositiveLongFromObjectOrReply).
            None => return fail(ctx, "ERR LIMIT can't be negative"),
            Some(x) if x < 0 => return fail(ctx, "ERR LIMIT can't be negative"),
            Some(0) => {}
            Some(x) => limit = x as usize,
        },
        _ => return fail(ctx, SYNTAX),
    }
    typed(ctx, |ctx| {
        let ms = combine(ctx, Op::Inter, keys, limit)?;
        reply::int(ctx.out, ms.len() as i64);
        Ok(Effect::Read)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cursors::{cursor_from_wire, cursor_to_wire};
    use crate::testdb::{Db, WT};

    #[test]
    fn cursors_are_integers_and_round_trip() {
        for m in [&b""[..], b"a", b"\x00\xff\x10", b"member:42"] {
            let w = cursor_to_wire(Some(m));
            assert!(w.iter().all(u8::is_ascii_digit) && w[0] == b'1');
            assert_eq!(cursor_from_wire(&w), Some(Some(m.to_vec())));
        }
        assert_eq!(cursor_from_wire(b"0"), Some(None));
        assert_eq!(cursor_from_wire(b"12"), None);
        assert_eq!(cursor_from_wire(b"1256"), None);
        assert_eq!(cursor_from_wire(b"abc"), None);
    }

    #[test]
    fn add_rem_members_and_shapes() {
        let mut db = Db::new();
        db.replies(&[
            ("SADD s b a c a", ":3\r\n"),
            ("SADD s a", ":0\r\n"),
            ("SCARD s", ":3\r\n"),
            ("SISMEMBER s a", ":1\r\n"),
            ("SMISMEMBER s a z c", "*3\r\n:1\r\n:0\r\n:1\r\n"),
            ("SMEMBERS s", "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"),
        ]);
        db.cmd("HELLO 3");
        db.replies(&[
            ("SMEMBERS s", "~3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"),
            ("SMEMBERS nope", "~0\r\n"),
            ("SREM s a z", ":1\r\n"),
            ("SMOVE s t b", ":1\r\n"),
            ("SMOVE s t zz", ":0\r\n"),
            ("SMEMBERS t", "~1\r\n$1\r\nb\r\n"),
        ]);
        db.cmd("SET str v");
        db.replies(&[
            ("SMOVE s str c", WT),
            ("SISMEMBER s c", ":1\r\n"),
            ("SMOVE nope str c", ":0\r\n"),
        ]);
        db.each_replies(
            &[
                "SADD str a",
                "SCARD str",
                "SMEMBERS str",
                "SPOP str",
                "SINTER s str",
                "SUNION s str",
                "SSCAN str 0",
            ],
            WT,
        );
        db.cmd("RPUSH l x");
        assert_eq!(db.cmd("SRANDMEMBER l"), WT);
    }

    #[test]
    fn pop_and_random_members() {
        let mut db = Db::new();
        db.cmd("SADD s a b c d e");
        assert_eq!(db.cmd("SRANDMEMBER s 10").matches('$').count(), 5);
        assert_eq!(db.cmd("SRANDMEMBER s 3").matches('$').count(), 3);
        let r = db.cmd("SRANDMEMBER s 3");
        let mut ms: Vec<&str> = r.split("\r\n").skip(2).step_by(2).collect();
        ms.dedup();
        assert_eq!(ms.iter().filter(|m| !m.is_empty()).count(), 3, "{r}");
        assert_eq!(db.cmd("SRANDMEMBER s -8").matches('$').count(), 8);
        db.replies(&[
            ("SRANDMEMBER nope", "$-1\r\n"),
            ("SRANDMEMBER nope 3", "*0\r\n"),
            (
                "SPOP s -1",
                "-ERR value is out of range, must be positive\r\n",
            ),
        ]);
        assert!(db.cmd("SPOP s").starts_with("$1\r\n"));
        assert_eq!(db.cmd("SPOP s 2").matches('$').count(), 2);
        assert_eq!(db.cmd("SCARD s"), ":2\r\n");
        assert_eq!(db.cmd("SPOP s 9").matches('$').count(), 2);
        db.replies(&[
            ("EXISTS s", ":0\r\n"),
            ("SPOP s", "$-1\r\n"),
            ("SPOP s 1", "*0\r\n"),
        ]);
    }

    #[test]
    fn random_counts_are_checked_and_their_replies_bounded() {
        let mut db = Db::new();
        db.cmd("SADD s a");
        // Redis's range is -LONG_MAX..LONG_MAX: -2^63 used to loop 2^63 times.
        assert_eq!(
            db.cmd("SRANDMEMBER s -9223372036854775808"),
            format!("-{RANDOM_COUNT_RANGE}\r\n")
        );
        // A count whose reply cannot fit the output buffer's hard limit is refused at once.
        let r = db.cmd("SRANDMEMBER s -1099511627776");
        assert!(
            r.starts_with("-ERR the reply to 1099511627776 random draws would be over the client-output-buffer-limit hard limit of 67108864 bytes"),
            "{r}"
        );
        // Under the limit by the count, over it by the members' bytes: refused while building.
        db.info.client_output_buffer_limit = (1 << 20, 1 << 20, 0);
        let big = "x".repeat(100_000);
        db.cmd(&format!("SADD b {big}"));
        let r = db.cmd("SRANDMEMBER b -20");
        assert!(r.starts_with("-ERR the reply to 20 random draws"), "{r}");
        assert!(r.len() < 200, "{}", r.len());
        // What fits is answered, repeats and all.
        assert_eq!(
            db.cmd("SRANDMEMBER s -1000"),
            format!("*1000\r\n{}", "$1\r\na\r\n".repeat(1000))
        );
        assert_eq!(db.cmd("SRANDMEMBER b -5").matches("$100000\r\n").count(), 5);
        assert_eq!(
            db.cmd("SRANDMEMBER s 9223372036854775807"),
            "*1\r\n$1\r\na\r\n"
        );
    }

    #[test]
    fn extreme_counts_and_bounds_are_answered_by_the_data() {
        // Every count or bound a client can push to the i64 limits: answered at once, sized by
        // the collection, never by the number.
        let mut db = Db::new();
        db.cmd("RPUSH l a b c");
        db.cmd("ZADD z 1 a 2 b");
        db.cmd("SADD s a");
        let (min, max) = ("-9223372036854775808", "9223372036854775807");
        for (c, want) in [
            (format!("LRANGE l {min} {max}"), "*3\r\n"),
            (format!("LRANGE l {max} {min}"), "*0\r\n"),
            (format!("LINDEX l {min}"), "$-1\r\n"),
            (
                format!("LPOS l a COUNT {max} MAXLEN {max} RANK {max}"),
                "*0\r\n",
            ),
            (format!("LPOS l a RANK -{max}"), "$-1\r\n"),
            (format!("ZRANGE z {min} {max}"), "*2\r\n"),
            (
                format!("ZRANGE z -inf +inf BYSCORE LIMIT {max} {max}"),
                "*0\r\n",
            ),
            (format!("ZRANGEBYSCORE z -inf +inf LIMIT 0 {min}"), "*2\r\n"),
            (format!("SSCAN s 0 COUNT {max}"), "*2\r\n$1\r\n0\r\n*1\r\n"),
            (format!("SCAN 0 COUNT {max}"), "*2\r\n$1\r\n0\r\n*3\r\n"),
            (format!("SRANDMEMBER s {max}"), "*1\r\n"),
            (format!("ZRANDMEMBER z {max}"), "*2\r\n"),
            (format!("SPOP s {max}"), "*1\r\n"),
            (format!("ZPOPMIN z {max}"), "*4\r\n"),
            (format!("LPOP l {max}"), "*3\r\n"),
        ] {
            let r = db.cmd(&c);
            assert!(r.starts_with(want), "{c}: {r}");
        }
    }

    #[test]
    fn object_encoding_names_what_redis_would_use_for_collections() {
        let mut db = Db::new();
        let many: Vec<String> = (0..513).map(|i| i.to_string()).collect();
        let big = format!("SADD big {}", many.join(" "));
        let long = format!("ZADD z 3 {}", "m".repeat(65));
        db.encodings(&[
            (&["SADD s 1 2 -3"], "s", "intset"),
            (&["SADD s a"], "s", "hashtable"),
            (&["SADD t-0 -0"], "t-0", "hashtable"),
            (&["SADD t01 01"], "t01", "hashtable"),
            (&["SADD t+1 +1"], "t+1", "hashtable"),
            (
                &["SADD t9223372036854775808 9223372036854775808"],
                "t9223372036854775808",
                "hashtable",
            ),
            (&[big.as_str()], "big", "hashtable"),
            (&["CONFIG SET set-max-intset-entries 513"], "big", "intset"),
            // Redis never converts a hashtable back: neither after SREM, SPOP or SMOVE of the
            // non-integers, nor after the set shrinks below the threshold.
            (&["SADD back 1 2 3 a", "SREM back a"], "back", "hashtable"),
            (&["SADD mv 1 b", "SMOVE mv other b"], "mv", "hashtable"),
            (&["SADD ints 1 2", "SREM ints 1 zz"], "ints", "intset"),
            (
                &["CONFIG SET set-max-intset-entries 512", "SPOP big 2"],
                "big",
                "hashtable",
            ),
            // A new set under the key starts afresh.
            (&["DEL back", "SADD back 1"], "back", "intset"),
            (&["RPUSH l a"], "l", "quicklist"),
            (&["ZADD z 1 a 2 b"], "z", "listpack"),
            (&[long.as_str()], "z", "skiplist"),
            (&["CONFIG SET zset-max-ziplist-value 100"], "z", "listpack"),
            (&["CONFIG SET zset-max-listpack-entries 2"], "z", "skiplist"),
        ]);
        // SPOP took two, and no later step touched the set.
        assert_eq!(db.cmd("SCARD big"), ":511\r\n");
    }

    #[test]
    fn sscan_returns_every_member_once() {
        let mut db = Db::new();
        let mut args = vec!["SADD".to_string(), "s".into()];
        args.extend((0..500).map(|i| format!("m{i}")));
        db.cmd(&args.join(" "));
        let mut cursor = "0".to_string();
        let mut seen = Vec::new();
        loop {
            let r = db.cmd(&format!("SSCAN s {cursor} COUNT 37"));
            let parts: Vec<&str> = r.split("\r\n").collect();
            cursor = parts[2].to_string();
            seen.extend(parts[4..].iter().skip(1).step_by(2).map(|s| s.to_string()));
            if cursor == "0" {
                break;
            }
        }
        seen.retain(|s| !s.is_empty());
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 500);
        let nines: String = std::iter::once("m49".to_string())
            .chain((490..500).map(|i| format!("$4\r\nm{i}")))
            .collect::<Vec<_>>()
            .join("\r\n");
        assert_eq!(
            db.cmd("SSCAN s 0 MATCH m49* COUNT 1000"),
            "*2\r\n$1\r\n0\r\n*2\r\n$3\r\nm49\r\n$4\r\nm499\r\n"
                .replace("*2\r\n$3", "*11\r\n$3")
                .replace("m49\r\n$4\r\nm499", &nines)
        );
        db.replies(&[
            ("SSCAN s x", "-ERR invalid cursor\r\n"),
            ("SSCAN s 0 COUNT 0", "-ERR syntax error\r\n"),
        ]);
    }

    #[test]
    fn inter_union_diff_and_stores() {
        let mut db = Db::new();
        db.cmd("SADD a 1 2 3 4");
        db.cmd("SADD b 3 4 5");
        db.cmd("SADD c 4 5 6");
        db.replies(&[
            ("SINTER a b c", "*1\r\n$1\r\n4\r\n"),
            ("SINTER a nope", "*0\r\n"),
            ("SDIFF a b", "*2\r\n$1\r\n1\r\n$1\r\n2\r\n"),
        ]);
        assert_eq!(db.cmd("SUNION b c").matches('$').count(), 4);
        db.replies(&[
            ("SINTERCARD 2 a b", ":2\r\n"),
            ("SINTERCARD 2 a b LIMIT 1", ":1\r\n"),
            (
                "SINTERCARD 0 a",
                "-ERR numkeys should be greater than 0\r\n",
            ),
            (
                "SINTERCARD 3 a b",
                "-ERR Number of keys can't be greater than number of args\r\n",
            ),
            (
                "SINTERCARD 2 a b LIMIT -1",
                "-ERR LIMIT can't be negative\r\n",
            ),
            (
                "SINTERCARD 2 a b LIMIT x",
                "-ERR LIMIT can't be negative\r\n",
            ),
        ]);
        db.cmd("SET d str");
        db.replies(&[
            ("SUNIONSTORE d a b", ":5\r\n"),
            ("SCARD d", ":5\r\n"),
            ("SINTERSTORE d a b", ":2\r\n"),
            ("SDIFFSTORE d a a", ":0\r\n"),
            ("EXISTS d", ":0\r\n"),
        ]);
    }
}
