//! The sorted set commands over the store's chunked sorted sets (`cxltier_store::Store::z*`):
//! two counted trees (by member, by score), so ranks, ranges and counts read only their paths.

use cxltier_store::{LexBound, ScoreBound, StoreError, ZAddFlags};

use crate::args::{
    count_reply, mpop, reply_added, reply_each_member, reply_scan_page, scan_args, typed, Popped,
};
use crate::context::{fail, Ctx, Effect};
use crate::errors::{NOT_INT, SYNTAX};
use crate::notify::class as nc;
use crate::numbers::int_arg;
use crate::resp::reply;

const NOT_FLOAT: &str = "ERR value is not a valid float";
const BAD_SCORE_RANGE: &str = "ERR min or max is not a float";
const BAD_LEX_RANGE: &str = "ERR min or max not valid string range item";

/// A score as Redis reads one: a float (`inf`, `-inf`, `+inf` included), never NaN.
fn score_arg(b: &[u8]) -> Option<f64> {
    if b.eq_ignore_ascii_case(b"inf") || b.eq_ignore_ascii_case(b"+inf") {
        return Some(f64::INFINITY);
    }
    if b.eq_ignore_ascii_case(b"-inf") {
        return Some(f64::NEG_INFINITY);
    }
    // Only a number's characters: Rust's parser would also take "infinity", "nan" and their
    // cases, which Redis refuses; whitespace is refused as Redis does.
    if !b
        .iter()
        .all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'E' | b'+' | b'-'))
    {
        return None;
    }
    std::str::from_utf8(b).ok()?.parse().ok()
}

fn score_bound(b: &[u8]) -> Option<ScoreBound> {
    match b.strip_prefix(b"(") {
        Some(rest) => score_arg(rest).map(ScoreBound::Exclusive),
        None => score_arg(b).map(ScoreBound::Inclusive),
    }
}

fn lex_bound(b: &[u8]) -> Option<LexBound<'_>> {
    match b {
        b"-" => Some(LexBound::Min),
        b"+" => Some(LexBound::Max),
        _ => match b.split_first()? {
            (b'[', rest) => Some(LexBound::Inclusive(rest)),
            (b'(', rest) => Some(LexBound::Exclusive(rest)),
            _ => None,
        },
    }
}

/// A score range's two bounds, or the error reply.
fn score_range(min: &[u8], max: &[u8]) -> Result<(ScoreBound, ScoreBound), &'static str> {
    match (score_bound(min), score_bound(max)) {
        (Some(min), Some(max)) => Ok((min, max)),
        _ => Err(BAD_SCORE_RANGE),
    }
}

/// A lexicographic range's two bounds, or the error reply.
fn lex_range<'a>(
    min: &'a [u8],
    max: &'a [u8],
) -> Result<(LexBound<'a>, LexBound<'a>), &'static str> {
    match (lex_bound(min), lex_bound(max)) {
        (Some(min), Some(max)) => Ok((min, max)),
        _ => Err(BAD_LEX_RANGE),
    }
}

/// Members with their scores: RESP3 pairs, RESP2 a flat array (WITHSCORES), or members only.
fn reply_scored(ctx: &mut Ctx<'_>, items: &[(Vec<u8>, f64)], withscores: bool) {
    let proto = ctx.session.proto;
    if !withscores {
        reply::array(ctx.out, items.len());
        for (m, _) in items {
            reply::bulk(ctx.out, m);
        }
    } else if proto >= 3 {
        reply::array(ctx.out, items.len());
        for (m, s) in items {
            reply::array(ctx.out, 2);
            reply::bulk(ctx.out, m);
            reply::double(ctx.out, proto, *s);
        }
    } else {
        reply::array(ctx.out, 2 * items.len());
        for (m, s) in items {
            reply::bulk(ctx.out, m);
            reply::double(ctx.out, proto, *s);
        }
    }
}

pub(crate) fn zadd(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let mut flags = ZAddFlags::default();
    let (mut ch, mut incr) = (false, false);
    let mut i = 2;
    while i < args.len() {
        // The options are at most 4 bytes: upper-cased on the stack, not in a new Vec per
        // argument (a ZADD's score was one).
        let arg = args[i];
        if arg.len() > 4 {
            break;
        }
        let mut word = [0u8; 4];
        word[..arg.len()].copy_from_slice(arg);
        word.make_ascii_uppercase();
        match &word[..arg.len()] {
            b"NX" => flags.nx = true,
            b"XX" => flags.xx = true,
            b"GT" => flags.gt = true,
            b"LT" => flags.lt = true,
            b"CH" => ch = true,
            b"INCR" => incr = true,
            _ => break,
        }
        i += 1;
    }
    let rest = &args[i..];
    if rest.is_empty() || rest.len() % 2 != 0 {
        return fail(ctx, SYNTAX);
    }
    if flags.nx && flags.xx {
        return fail(
            ctx,
            "ERR XX and NX options at the same time are not compatible",
        );
    }
    if (flags.gt && flags.lt) || (flags.nx && (flags.gt || flags.lt)) {
        return fail(
            ctx,
            "ERR GT, LT, and/or NX options at the same time are not compatible",
        );
    }
    if incr && rest.len() > 2 {
        return fail(
            ctx,
            "ERR INCR option supports a single increment-element pair",
        );
    }
    let mut pairs = Vec::with_capacity(rest.len() / 2);
    for p in rest.chunks(2) {
        let Some(s) = score_arg(p[0]) else {
            return fail(ctx, NOT_FLOAT);
        };
        pairs.push((s, p[1]));
    }
    typed(ctx, |ctx| {
        if incr {
            let (by, m) = pairs[0];
            let incremented = ctx.store.zincrby(args[1], flags, by, m);
            return reply_incremented(ctx, args[1], incremented);
        }
        let o = ctx.store.zadd(args[1], flags, &pairs)?;
        if o.added + o.changed > 0 {
            ctx.notify(nc::ZSET, "zadd", args[1]);
        }
        Ok(reply_added(ctx, &o, ch))
    })
}

/// ZADD INCR's and ZINCRBY's answer: the new score (the event is `zincr` for both, as Redis runs
/// ZINCRBY as ZADD INCR), or null when a flag left the member as it was.
fn reply_incremented(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    incremented: Result<Option<f64>, StoreError>,
) -> Result<Effect, StoreError> {
    match incremented {
        Ok(Some(s)) => {
            ctx.notify(nc::ZSET, "zincr", key);
            reply::double(ctx.out, ctx.session.proto, s);
            Ok(Effect::Wrote)
        }
        Ok(None) => {
            reply::null(ctx.out, ctx.session.proto);
            Ok(Effect::Read)
        }
        Err(StoreError::Config(_)) => fail(ctx, "ERR resulting score is not a number (NaN)"),
        Err(e) => Err(e),
    }
}

pub(crate) fn zincrby(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let Some(by) = score_arg(args[2]) else {
        return fail(ctx, NOT_FLOAT);
    };
    typed(ctx, |ctx| {
        let incremented = ctx
            .store
            .zincrby(args[1], ZAddFlags::default(), by, args[3]);
        reply_incremented(ctx, args[1], incremented)
    })
}

pub(crate) fn zrem(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    typed(ctx, |ctx| {
        let n = ctx.store.zrem(args[1], &args[2..])?;
        if n > 0 {
            ctx.notify(nc::ZSET, "zrem", args[1]);
        }
        reply::int(ctx.out, n as i64);
        Ok(if n > 0 { Effect::Wrote } else { Effect::Read })
    })
}

/// A member's score, or null when it is absent.
fn reply_score(ctx: &mut Ctx<'_>, score: Option<f64>) {
    match score {
        Some(s) => reply::double(ctx.out, ctx.session.proto, s),
        None => reply::null(ctx.out, ctx.session.proto),
    }
}

pub(crate) fn zscore(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    typed(ctx, |ctx| {
        let score = ctx.store.zscore(args[1], args[2])?;
        reply_score(ctx, score);
        Ok(Effect::Read)
    })
}

pub(crate) fn zmscore(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    reply_each_member(ctx, args, |store, key, m| store.zscore(key, m), reply_score)
}

pub(crate) fn zcard(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    count_reply(ctx, |store| store.zcard(args[1]))
}

pub(crate) fn zcount(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    match score_range(args[2], args[3]) {
        Ok((min, max)) => count_reply(ctx, |store| store.zcount(args[1], min, max)),
        Err(e) => fail(ctx, e),
    }
}

pub(crate) fn zlexcount(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    match lex_range(args[2], args[3]) {
        Ok((min, max)) => count_reply(ctx, |store| store.zlexcount(args[1], min, max)),
        Err(e) => fail(ctx, e),
    }
}

fn rank(ctx: &mut Ctx<'_>, args: &[&[u8]], rev: bool) -> Result<Effect, StoreError> {
    typed(ctx, |ctx| {
        match ctx.store.zrank(args[1], args[2], rev)? {
            Some(r) => reply::int(ctx.out, r as i64),
            None => reply::null(ctx.out, ctx.session.proto),
        }
        Ok(Effect::Read)
    })
}

pub(crate) fn zrank(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    rank(ctx, args, false)
}
pub(crate) fn zrevrank(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    rank(ctx, args, true)
}

#[derive(Clone, Copy, PartialEq)]
enum By {
    Rank,
    Score,
    Lex,
}

/// A parsed range request (ZRANGE's arguments after the key, in its own order).
struct Range<'a> {
    by: By,
    rev: bool,
    /// Lower and upper bound as given (REV's order already undone).
    lo: &'a [u8],
    hi: &'a [u8],
    offset: i64,
    count: Option<u64>,
    withscores: bool,
}

/// Parse `start stop [BYSCORE|BYLEX] [REV] [LIMIT offset count] [WITHSCORES]` (`store`: no
/// WITHSCORES, as ZRANGESTORE). `Err` is the message to reply.
fn parse_range<'a>(a: &[&'a [u8]], store: bool) -> Result<Range<'a>, &'static str> {
    let mut r = Range {
        by: By::Rank,
        rev: false,
        lo: a[0],
        hi: a[1],
        offset: 0,
        count: None,
        withscores: false,
    };
    let mut limit = false;
    let mut i = 2;
    while i < a.len() {
        match a[i].to_ascii_uppercase().as_slice() {
            b"BYSCORE" => r.by = By::Score,
            b"BYLEX" => r.by = By::Lex,
            b"REV" => r.rev = true,
            b"WITHSCORES" if !store => r.withscores = true,
            b"LIMIT" if i + 2 < a.len() => {
                let (Some(o), Some(c)) = (int_arg(a[i + 1]), int_arg(a[i + 2])) else {
                    return Err(NOT_INT);
                };
                r.offset = o;
                r.count = (c >= 0).then_some(c as u64);
                limit = true;
                i += 2;
            }
            _ => return Err(SYNTAX),
        }
        i += 1;
    }
    if limit && r.by == By::Rank {
        return Err(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        );
    }
    if r.withscores && r.by == By::Lex {
        return Err("ERR syntax error, WITHSCORES not supported in combination with BYLEX");
    }
    if r.rev && r.by != By::Rank {
        std::mem::swap(&mut r.lo, &mut r.hi);
    }
    Ok(r)
}

/// A range's members with their scores, or the error to reply for its bounds.
type Ranged = Result<Vec<(Vec<u8>, f64)>, &'static str>;

/// The members a range names, with their scores.
fn run_range(ctx: &mut Ctx<'_>, key: &[u8], r: &Range<'_>) -> Result<Ranged, StoreError> {
    match r.by {
        By::Rank => {
            let (Some(a), Some(b)) = (int_arg(r.lo), int_arg(r.hi)) else {
                return Ok(Err(NOT_INT));
            };
            Ok(Ok(ctx.store.zrange_by_rank(key, a, b, r.rev)?))
        }
        By::Score => by_bounds(score_range(r.lo, r.hi), r.offset, |min, max, offset| {
            ctx.store
                .zrange_by_score(key, min, max, r.rev, offset, r.count)
        }),
        By::Lex => by_bounds(lex_range(r.lo, r.hi), r.offset, |min, max, offset| {
            ctx.store
                .zrange_by_lex(key, min, max, r.rev, offset, r.count)
        }),
    }
}

/// A range by score or by lex: the error of its `bounds`, nothing for a negative LIMIT
/// `offset`, else what `read` gives for the bounds and the offset.
fn by_bounds<B>(
    bounds: Result<(B, B), &'static str>,
    offset: i64,
    read: impl FnOnce(B, B, u64) -> Result<Vec<(Vec<u8>, f64)>, StoreError>,
) -> Result<Ranged, StoreError> {
    let (min, max) = match bounds {
        Ok(b) => b,
        Err(e) => return Ok(Err(e)),
    };
    if offset < 0 {
        return Ok(Ok(Vec::new()));
    }
    Ok(Ok(read(min, max, offset as u64)?))
}

fn range_reply(ctx: &mut Ctx<'_>, key: &[u8], r: Range<'_>) -> Result<Effect, StoreError> {
    typed(ctx, |ctx| match run_range(ctx, key, &r)? {
        Err(m) => fail(ctx, m),
        Ok(items) => {
            reply_scored(ctx, &items, r.withscores);
            Ok(Effect::Read)
        }
    })
}

pub(crate) fn zrange(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    match parse_range(&args[2..], false) {
        Err(m) => fail(ctx, m),
        Ok(r) => range_reply(ctx, args[1], r),
    }
}

/// Whether the options after a legacy range command's bounds are ones it takes: WITHSCORES
/// (not BYLEX's) and LIMIT (not ZREVRANGE's). ZRANGE's own (BYSCORE, REV, ...) are a syntax
/// error there, as in Redis.
fn legacy_options_ok(opts: &[&[u8]], limit: bool, withscores: bool) -> bool {
    let mut i = 0;
    while i < opts.len() {
        if withscores && opts[i].eq_ignore_ascii_case(b"WITHSCORES") {
            i += 1;
        } else if limit && opts[i].eq_ignore_ascii_case(b"LIMIT") && i + 2 < opts.len() {
            i += 3;
        } else {
            return false;
        }
    }
    true
}

/// ZRANGEBYSCORE, ZREVRANGEBYSCORE, ZRANGEBYLEX, ZREVRANGEBYLEX and ZREVRANGE as the ZRANGE
/// they are: `by` (BYSCORE or BYLEX; `None`, by rank, takes no LIMIT) and REV after the bounds.
fn legacy_range(
    ctx: &mut Ctx<'_>,
    args: &[&[u8]],
    by: Option<&'static [u8]>,
    rev: bool,
) -> Result<Effect, StoreError> {
    if !legacy_options_ok(&args[4..], by.is_some(), by != Some(b"BYLEX")) {
        return fail(ctx, SYNTAX);
    }
    let mut a: Vec<&[u8]> = args[2..4].to_vec();
    a.extend(by);
    if rev {
        a.push(b"REV");
    }
    a.extend_from_slice(&args[4..]);
    match parse_range(&a, false) {
        Err(m) => fail(ctx, m),
        Ok(r) => range_reply(ctx, args[1], r),
    }
}

pub(crate) fn zrangebyscore(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    legacy_range(ctx, args, Some(b"BYSCORE"), false)
}
pub(crate) fn zrevrangebyscore(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    legacy_range(ctx, args, Some(b"BYSCORE"), true)
}
pub(crate) fn zrangebylex(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    legacy_range(ctx, args, Some(b"BYLEX"), false)
}

pub(crate) fn zrangestore(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let r = match parse_range(&args[3..], true) {
        Err(m) => return fail(ctx, m),
        Ok(r) => r,
    };
    typed(ctx, |ctx| {
        let items = match run_range(ctx, args[2], &r)? {
            Err(m) => return fail(ctx, m),
            Ok(i) => i,
        };
        // The destination is replaced whatever it held; an empty result deletes it.
        ctx.store.delete(args[1])?;
        let pairs: Vec<(f64, &[u8])> = items.iter().map(|(m, s)| (*s, m.as_slice())).collect();
        for chunk in pairs.chunks(1024) {
            ctx.store.zadd(args[1], ZAddFlags::default(), chunk)?;
        }
        if !items.is_empty() {
            ctx.notify(nc::ZSET, "zrangestore", args[1]);
        }
        reply::int(ctx.out, items.len() as i64);
        Ok(Effect::Wrote)
    })
}

fn pop(ctx: &mut Ctx<'_>, args: &[&[u8]], max: bool) -> Result<Effect, StoreError> {
    let count = match args.get(2) {
        None => None,
        Some(c) => match int_arg(c) {
            None => return fail(ctx, NOT_INT),
            Some(c) if c < 0 => return fail(ctx, "ERR value is out of range, must be positive"),
            Some(c) => Some(c as u64),
        },
    };
    if args.len() > 3 {
        return fail(ctx, SYNTAX);
    }
    typed(ctx, |ctx| {
        let got = ctx.store.zpop(args[1], max, count.unwrap_or(1))?;
        if !got.is_empty() {
            announce_pop(ctx, args[1], max);
        }
        let proto = ctx.session.proto;
        // Redis 7.0: without a count a flat pair; with one, RESP3's array of pairs.
        if count.is_some() && proto >= 3 {
            reply_scored(ctx, &got, true);
        } else {
            reply::array(ctx.out, 2 * got.len());
            for (m, s) in &got {
                reply::bulk(ctx.out, m);
                reply::double(ctx.out, proto, *s);
            }
        }
        Ok(if got.is_empty() {
            Effect::Read
        } else {
            Effect::Wrote
        })
    })
}

pub(crate) fn zpopmin(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    pop(ctx, args, false)
}
pub(crate) fn zpopmax(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    pop(ctx, args, true)
}

pub(crate) fn zrevrange(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    legacy_range(ctx, args, None, true)
}
pub(crate) fn zrevrangebylex(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    legacy_range(ctx, args, Some(b"BYLEX"), true)
}

/// ZREMRANGEBYRANK, ZREMRANGEBYSCORE, ZREMRANGEBYLEX: the members of the range, removed (a
/// cost in the members removed).
fn remrange(ctx: &mut Ctx<'_>, args: &[&[u8]], by: By) -> Result<Effect, StoreError> {
    let r = Range {
        by,
        rev: false,
        lo: args[2],
        hi: args[3],
        offset: 0,
        count: None,
        withscores: false,
    };
    typed(ctx, |ctx| {
        let items = match run_range(ctx, args[1], &r)? {
            Err(m) => return fail(ctx, m),
            Ok(i) => i,
        };
        let ms: Vec<&[u8]> = items.iter().map(|(m, _)| m.as_slice()).collect();
        let mut n = 0;
        for chunk in ms.chunks(1024) {
            n += ctx.store.zrem(args[1], chunk)?;
        }
        if n > 0 {
            let event = match by {
                By::Rank => "zremrangebyrank",
                By::Score => "zremrangebyscore",
                By::Lex => "zremrangebylex",
            };
            ctx.notify(nc::ZSET, event, args[1]);
        }
        reply::int(ctx.out, n as i64);
        Ok(if n > 0 { Effect::Wrote } else { Effect::Read })
    })
}
pub(crate) fn zremrangebyrank(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    remrange(ctx, args, By::Rank)
}
pub(crate) fn zremrangebyscore(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    remrange(ctx, args, By::Score)
}
pub(crate) fn zremrangebylex(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    remrange(ctx, args, By::Lex)
}

/// ZRANDMEMBER key [count [WITHSCORES]], Redis 7.0's semantics: a positive count gives
/// distinct members, a negative one allows repeats (bounded by the client-output-buffer-limit).
pub(crate) fn zrandmember(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let (count, withscores) = match crate::args::random_count_args(args, b"WITHSCORES") {
        Ok(a) => a,
        Err(e) => return fail(ctx, e),
    };
    let proto = ctx.session.proto;
    typed(ctx, |ctx| {
        let card = ctx.store.zcard(args[1])?;
        let score = |v: &[u8]| f64::from_le_bytes(v[..8].try_into().unwrap_or([0; 8]));
        let Some(c) = count else {
            let got = if card > 0 {
                ctx.store.member_at(args[1], rand::random_range(0..card))?
            } else {
                None
            };
            match got {
                Some((m, _)) => reply::bulk(ctx.out, &m),
                None => reply::null(ctx.out, proto),
            }
            return Ok(Effect::Read);
        };
        let write = move |out: &mut Vec<u8>, m: &[u8], v: &[u8]| {
            if withscores && proto >= 3 {
                reply::array(out, 2);
            }
            reply::bulk(out, m);
            if withscores {
                reply::double(out, proto, score(v));
            }
        };
        if card == 0 || c == 0 {
            reply::array(ctx.out, 0);
            return Ok(Effect::Read);
        }
        let per = if withscores && proto < 3 { 2 } else { 1 };
        if c > 0 {
            let want = (c as u64).min(card);
            let mut idx: Vec<u64> = if want == card {
                (0..card).collect()
            } else {
                let mut picked = hashbrown::HashSet::with_capacity(want as usize);
                let mut rng = rand::rng();
                for j in card - want..card {
                    let t = rand::Rng::random_range(&mut rng, 0..=j);
                    if !picked.insert(t) {
                        picked.insert(j);
                    }
                }
                picked.into_iter().collect()
            };
            idx.sort_unstable();
            let mut out = Vec::new();
            reply::array(&mut out, idx.len() * per);
            for i in idx {
                match ctx.store.member_at(args[1], i)? {
                    Some((m, v)) => write(&mut out, &m, &v),
                    None => reply::null(&mut out, proto),
                }
            }
            ctx.out.extend_from_slice(&out);
            return Ok(Effect::Read);
        }
        // Repeats: the draws' reply is bounded by the output-buffer hard limit. With scores in
        // RESP2 each draw is two elements, so the count is doubled for the bound.
        let n = c.unsigned_abs();
        match crate::args::random_draws(ctx, args[1], card, n, |_, m, v, out| write(out, m, v))? {
            Ok(mut r) => {
                if per == 2 {
                    // The array header counted draws; RESP2 pairs are two elements each.
                    let head = format!("*{n}\r\n");
                    r.splice(..head.len(), format!("*{}\r\n", 2 * n).into_bytes());
                }
                ctx.out.extend_from_slice(&r);
            }
            Err(m) => reply::error(ctx.out, &m),
        }
        Ok(Effect::Read)
    })
}

/// How ZUNION, ZINTER and ZDIFF combine.
#[derive(Clone, Copy, PartialEq)]
enum SetOp {
    Union,
    Inter,
    Diff,
}

#[derive(Clone, Copy)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

/// Every member of the sorted set (or set: score 1) at `key`, with its score.
fn scored_members(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Vec<(Vec<u8>, f64)>, StoreError> {
    let mut all = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    loop {
        let (page, next) = match ctx.store.zscan(key, after.as_deref(), 1024) {
            Err(StoreError::WrongType { .. }) => {
                let (page, next) = ctx.store.sscan(key, after.as_deref(), 1024)?;
                (page.into_iter().map(|m| (m, 1.0)).collect(), next)
            }
            r => r?,
        };
        all.extend(page);
        match next {
            Some(n) => after = Some(n),
            None => return Ok(all),
        }
    }
}

/// Redis's sum of two scores: inf + -inf is 0, not NaN.
fn add(a: f64, b: f64) -> f64 {
    let s = a + b;
    if s.is_nan() {
        0.0
    } else {
        s
    }
}

/// The result of `op` over `keys` (with `weights` and `agg`), sorted as a sorted set is.
fn combine(
    ctx: &mut Ctx<'_>,
    op: SetOp,
    keys: &[&[u8]],
    weights: &[f64],
    agg: Aggregate,
) -> Result<Vec<(Vec<u8>, f64)>, StoreError> {
    let mut sets = Vec::with_capacity(keys.len());
    for k in keys {
        // Each input is a read lookup, as in Redis (a missing one a key miss), also for the
        // STORE forms.
        let found = ctx.store.contains(k);
        ctx.info.lookup(k, found);
        sets.push(scored_members(ctx, k)?);
    }
    let mut acc: hashbrown::HashMap<Vec<u8>, (f64, usize)> = hashbrown::HashMap::new();
    for (i, set) in sets.iter().enumerate() {
        let w = weights.get(i).copied().unwrap_or(1.0);
        if op == SetOp::Diff && i > 0 {
            for (m, _) in set {
                acc.remove(m);
            }
            continue;
        }
        for (m, s) in set {
            let mut v = s * w;
            if v.is_nan() {
                v = 0.0;
            }
            match acc.get_mut(m) {
                None => {
                    if op != SetOp::Inter || i == 0 {
                        acc.insert(m.clone(), (v, 1));
                    }
                }
                Some((cur, seen)) => {
                    if op == SetOp::Inter && *seen != i {
                        continue;
                    }
                    *cur = match agg {
                        Aggregate::Sum => add(*cur, v),
                        Aggregate::Min => cur.min(v),
                        Aggregate::Max => cur.max(v),
                    };
                    *seen += 1;
                }
            }
        }
    }
    let n = keys.len();
    let mut out: Vec<(Vec<u8>, f64)> = acc
        .into_iter()
        .filter(|(_, (_, seen))| op != SetOp::Inter || *seen == n)
        .map(|(m, (s, _))| (m, if s == 0.0 { 0.0 } else { s }))
        .collect();
    out.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
    Ok(out)
}

/// `numkeys key... [WEIGHTS w...] [AGGREGATE SUM|MIN|MAX] [WITHSCORES]` from `args[at]`.
#[allow(clippy::type_complexity)]
fn combine_args<'a>(
    args: &[&'a [u8]],
    at: usize,
    op: SetOp,
    store: bool,
) -> Result<(Vec<&'a [u8]>, Vec<f64>, Aggregate, bool), String> {
    let name = String::from_utf8_lossy(args[0]).to_lowercase();
    let n = int_arg(args[at]).ok_or(NOT_INT.to_string())?;
    if n < 1 {
        return Err(format!(
            "ERR at least 1 input key is needed for '{name}' command"
        ));
    }
    if n as u64 > (args.len() - at - 1) as u64 {
        return Err(SYNTAX.into());
    }
    let n = n as usize;
    let keys = args[at + 1..at + 1 + n].to_vec();
    let (mut weights, mut agg, mut withscores) = (Vec::new(), Aggregate::Sum, false);
    let mut i = at + 1 + n;
    while i < args.len() {
        let opt = args[i].to_ascii_uppercase();
        if op != SetOp::Diff && opt == b"WEIGHTS" && i + n < args.len() {
            for w in &args[i + 1..=i + n] {
                weights.push(score_arg(w).ok_or("ERR weight value is not a float")?);
            }
            i += n + 1;
        } else if op != SetOp::Diff && opt == b"AGGREGATE" && i + 1 < args.len() {
            agg = match args[i + 1].to_ascii_uppercase().as_slice() {
                b"SUM" => Aggregate::Sum,
                b"MIN" => Aggregate::Min,
                b"MAX" => Aggregate::Max,
                _ => return Err(SYNTAX.into()),
            };
            i += 2;
        } else if !store && opt == b"WITHSCORES" {
            withscores = true;
            i += 1;
        } else {
            return Err(SYNTAX.into());
        }
    }
    Ok((keys, weights, agg, withscores))
}

fn read_op(ctx: &mut Ctx<'_>, args: &[&[u8]], op: SetOp) -> Result<Effect, StoreError> {
    let (keys, weights, agg, withscores) = match combine_args(args, 1, op, false) {
        Ok(a) => a,
        Err(e) => return fail(ctx, &e),
    };
    typed(ctx, |ctx| {
        let items = combine(ctx, op, &keys, &weights, agg)?;
        reply_scored(ctx, &items, withscores);
        Ok(Effect::Read)
    })
}

fn store_op(ctx: &mut Ctx<'_>, args: &[&[u8]], op: SetOp) -> Result<Effect, StoreError> {
    let (keys, weights, agg, _) = match combine_args(args, 2, op, true) {
        Ok(a) => a,
        Err(e) => return fail(ctx, &e),
    };
    typed(ctx, |ctx| {
        let items = combine(ctx, op, &keys, &weights, agg)?;
        // The destination is replaced whatever it held; an empty result deletes it.
        let existed = ctx.store.delete(args[1])?;
        let pairs: Vec<(f64, &[u8])> = items.iter().map(|(m, s)| (*s, m.as_slice())).collect();
        for chunk in pairs.chunks(1024) {
            ctx.store.zadd(args[1], ZAddFlags::default(), chunk)?;
        }
        if !items.is_empty() {
            let event = match op {
                SetOp::Union => "zunionstore",
                SetOp::Inter => "zinterstore",
                SetOp::Diff => "zdiffstore",
            };
            ctx.notify(nc::ZSET, event, args[1]);
        }
        reply::int(ctx.out, items.len() as i64);
        Ok(if existed || !items.is_empty() {
            Effect::Wrote
        } else {
            Effect::Read
        })
    })
}

pub(crate) fn zunion(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    read_op(ctx, args, SetOp::Union)
}
pub(crate) fn zinter(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    read_op(ctx, args, SetOp::Inter)
}
pub(crate) fn zdiff(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    read_op(ctx, args, SetOp::Diff)
}
pub(crate) fn zunionstore(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    store_op(ctx, args, SetOp::Union)
}
pub(crate) fn zinterstore(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    store_op(ctx, args, SetOp::Inter)
}
pub(crate) fn zdiffstore(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    store_op(ctx, args, SetOp::Diff)
}

pub(crate) fn zintercard(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    // Redis shares ZUNION's parsing (and its errors) for ZINTERCARD.
    let n = match int_arg(args[1]) {
        None => return fail(ctx, NOT_INT),
        Some(n) if n < 1 => {
            return fail(
                ctx,
                "ERR at least 1 input key is needed for 'zintercard' command",
            )
        }
        Some(n) => n as u64,
    };
    if n > (args.len() - 2) as u64 {
        return fail(ctx, SYNTAX);
    }
    let n = n as usize;
    let keys = &args[2..2 + n];
    let mut limit = usize::MAX;
    match &args[2 + n..] {
        [] => {}
        [l, v] if l.eq_ignore_ascii_case(b"LIMIT") => match int_arg(v) {
            Some(x) if x >= 0 => limit = if x == 0 { usize::MAX } else { x as usize },
            _ => return fail(ctx, "ERR LIMIT can't be negative"),
        },
        _ => return fail(ctx, SYNTAX),
    }
    typed(ctx, |ctx| {
        let items = combine(ctx, SetOp::Inter, keys, &[], Aggregate::Sum)?;
        reply::int(ctx.out, items.len().min(limit) as i64);
        Ok(Effect::Read)
    })
}

/// A key and the members (with scores) popped from it.
type ZPopped = Popped<(Vec<u8>, f64)>;

/// A pop's event (`zpopmin`/`zpopmax`, also for BZPOP*, ZMPOP, BZMPOP), then `del` when it
/// emptied the sorted set.
fn announce_pop(ctx: &mut Ctx<'_>, key: &[u8], max: bool) {
    ctx.notify_pop(nc::ZSET, if max { "zpopmax" } else { "zpopmin" }, key);
}

/// The first of `keys` holding a non-empty sorted set, up to `count` of its lowest (or
/// highest) members popped; a key of another type is WRONGTYPE, or only not ready while the
/// server runs a parked command again.
fn zpop_first(
    ctx: &mut Ctx<'_>,
    keys: &[&[u8]],
    max: bool,
    count: u64,
) -> Result<Option<ZPopped>, StoreError> {
    for k in keys {
        let n = match ctx.store.zcard(k) {
            Err(StoreError::WrongType { .. }) if ctx.session.block_retry => 0,
            r => r?,
        };
        if n == 0 {
            continue;
        }
        let got = ctx.store.zpop(k, max, count)?;
        if !got.is_empty() {
            announce_pop(ctx, k, max);
            return Ok(Some((k.to_vec(), got)));
        }
    }
    Ok(None)
}

/// How a blocking or multi-key pop is replicated: `ZPOPMIN|ZPOPMAX key [count]`, the count
/// being what was popped (Redis 7.0).
fn zpop_op(max: bool, key: &[u8], count: Option<usize>) -> crate::write_stream::Op {
    let verb: &[u8] = if max { b"zpopmax" } else { b"zpopmin" };
    crate::args::pop_op(verb, key, count)
}

pub(crate) fn zmpop(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    zsets_mpop(ctx, args, false)
}

pub(crate) fn bzmpop(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    zsets_mpop(ctx, args, true)
}

fn zsets_mpop(ctx: &mut Ctx<'_>, args: &[&[u8]], blocking: bool) -> Result<Effect, StoreError> {
    let min_or_max = |w: &[u8]| match w.to_ascii_uppercase().as_slice() {
        b"MIN" => Some(false),
        b"MAX" => Some(true),
        _ => None,
    };
    mpop(
        ctx,
        args,
        blocking,
        min_or_max,
        zpop_first,
        zpop_op,
        |ctx, (m, s)| {
            reply::array(ctx.out, 2);
            reply::bulk(ctx.out, m);
            reply::double(ctx.out, ctx.session.proto, *s);
        },
    )
}

fn bzpop(ctx: &mut Ctx<'_>, args: &[&[u8]], max: bool) -> Result<Effect, StoreError> {
    crate::args::bpop(
        ctx,
        args,
        |ctx, keys| zpop_first(ctx, keys, max, 1),
        |k| zpop_op(max, k, None),
        2,
        |ctx, (m, s)| {
            reply::bulk(ctx.out, m);
            reply::double(ctx.out, ctx.session.proto, *s);
        },
    )
}

pub(crate) fn bzpopmin(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    bzpop(ctx, args, false)
}
pub(crate) fn bzpopmax(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    bzpop(ctx, args, true)
}

pub(crate) fn zscan(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let Ok((after, pattern, count)) = scan_args(ctx, args) else {
        return Ok(Effect::Read);
    };
    typed(ctx, |ctx| {
        let page = ctx.store.zscan(args[1], after.as_deref(), count)?;
        reply_scan_page(ctx.out, page, pattern);
        Ok(Effect::Read)
    })
}

#[cfg(test)]
mod tests {
    use crate::testdb::{Db, WT};

    #[test]
    fn scores_are_read_as_redis_reads_them() {
        use super::score_arg;
        assert_eq!(score_arg(b"0"), Some(0.0));
        assert_eq!(score_arg(b"-1.5e3"), Some(-1500.0));
        assert_eq!(score_arg(b"+.5"), Some(0.5));
        assert_eq!(score_arg(b"inf"), Some(f64::INFINITY));
        assert_eq!(score_arg(b"+InF"), Some(f64::INFINITY));
        assert_eq!(score_arg(b"-INF"), Some(f64::NEG_INFINITY));
        for bad in [
            &b""[..],
            b"nan",
            b"NaN",
            b"infinity",
            b"-Infinity",
            b" 1",
            b"1 ",
            b"1x",
            b"0x10",
            b"1_0",
            b"\xff",
        ] {
            assert_eq!(score_arg(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn zadd_flags_scores_and_errors() {
        let mut db = Db::new();
        db.replies(&[
            ("ZADD z 1 a 2 b 3 c", ":3\r\n"),
            ("ZADD z CH 5 a 2 b 9 d", ":2\r\n"),
            ("ZADD z NX 0 a", ":0\r\n"),
            ("ZSCORE z a", "$1\r\n5\r\n"),
            ("ZADD z XX CH 7 a 1 new", ":1\r\n"),
            ("ZADD z GT CH 6 a", ":0\r\n"),
            ("ZADD z LT CH 6 a", ":1\r\n"),
            ("ZADD z INCR 1.5 a", "$3\r\n7.5\r\n"),
            ("ZADD z NX INCR 1 a", "$-1\r\n"),
            ("ZINCRBY z -0.5 a", "$1\r\n7\r\n"),
            ("ZADD z x a", "-ERR value is not a valid float\r\n"),
            ("ZADD z nan a", "-ERR value is not a valid float\r\n"),
            (
                "ZADD z 1",
                "-ERR wrong number of arguments for 'zadd' command\r\n",
            ),
            (
                "ZADD z NX XX 1 a",
                "-ERR XX and NX options at the same time are not compatible\r\n",
            ),
            (
                "ZADD z GT LT 1 a",
                "-ERR GT, LT, and/or NX options at the same time are not compatible\r\n",
            ),
            (
                "ZADD z INCR 1 a 2 b",
                "-ERR INCR option supports a single increment-element pair\r\n",
            ),
            ("ZCARD z", ":4\r\n"),
            ("ZMSCORE z a nope", "*2\r\n$1\r\n7\r\n$-1\r\n"),
            ("ZREM z d nope", ":1\r\n"),
        ]);
        db.cmd("HELLO 3");
        db.replies(&[("ZSCORE z a", ",7\r\n"), ("ZSCORE z nope", "_\r\n")]);
        db.cmd("SET s v");
        db.each_replies(
            &[
                "ZADD s 1 a",
                "ZSCORE s a",
                "ZCARD s",
                "ZRANGE s 0 -1",
                "ZPOPMIN s",
                "ZRANK s a",
            ],
            WT,
        );
    }

    #[test]
    fn ranks_counts_and_ranges() {
        let mut db = Db::new();
        db.cmd("ZADD z 1 a 2 b 3 c 4 d");
        db.replies(&[
            ("ZRANK z c", ":2\r\n"),
            ("ZREVRANK z c", ":1\r\n"),
            ("ZRANK z nope", "$-1\r\n"),
            ("ZCOUNT z (1 3", ":2\r\n"),
            ("ZCOUNT z -inf +inf", ":4\r\n"),
            ("ZCOUNT z x 3", "-ERR min or max is not a float\r\n"),
            ("ZRANGE z 0 1", "*2\r\n$1\r\na\r\n$1\r\nb\r\n"),
            ("ZRANGE z 0 0 REV WITHSCORES", "*2\r\n$1\r\nd\r\n$1\r\n4\r\n"),
            ("ZRANGE z (4 2 BYSCORE REV LIMIT 0 1", "*1\r\n$1\r\nc\r\n"),
            ("ZRANGEBYSCORE z 2 +inf LIMIT 1 5", "*2\r\n$1\r\nc\r\n$1\r\nd\r\n"),
            (
                "ZREVRANGEBYSCORE z 2 1 WITHSCORES",
                "*4\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\na\r\n$1\r\n1\r\n",
            ),
            (
                "ZRANGE z 0 1 LIMIT 0 1",
                "-ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX\r\n",
            ),
            (
                "ZRANGE z - + BYLEX WITHSCORES",
                "-ERR syntax error, WITHSCORES not supported in combination with BYLEX\r\n",
            ),
            ("ZRANGE z x 1 BYSCORE", "-ERR min or max is not a float\r\n"),
        ]);
        db.cmd("ZADD l 0 a 0 b 0 c 0 d");
        db.replies(&[
            ("ZLEXCOUNT l [b +", ":3\r\n"),
            (
                "ZLEXCOUNT l b +",
                "-ERR min or max not valid string range item\r\n",
            ),
            ("ZRANGEBYLEX l (a [c", "*2\r\n$1\r\nb\r\n$1\r\nc\r\n"),
            (
                "ZRANGE l [c - BYLEX REV",
                "*3\r\n$1\r\nc\r\n$1\r\nb\r\n$1\r\na\r\n",
            ),
            ("ZRANGESTORE dst z 1 2", ":2\r\n"),
            (
                "ZRANGE dst 0 -1 WITHSCORES",
                "*4\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n",
            ),
            ("ZRANGESTORE dst z 5 9", ":0\r\n"),
            ("EXISTS dst", ":0\r\n"),
        ]);
        db.cmd("HELLO 3");
        assert_eq!(
            db.cmd("ZRANGE z 0 0 WITHSCORES"),
            "*1\r\n*2\r\n$1\r\na\r\n,1\r\n"
        );
    }

    #[test]
    fn pops_and_scan() {
        let mut db = Db::new();
        db.cmd("ZADD z 1 a 2 b 3 c");
        db.replies(&[
            ("ZPOPMIN z", "*2\r\n$1\r\na\r\n$1\r\n1\r\n"),
            (
                "ZPOPMAX z 5",
                "*4\r\n$1\r\nc\r\n$1\r\n3\r\n$1\r\nb\r\n$1\r\n2\r\n",
            ),
            ("ZPOPMIN z", "*0\r\n"),
            (
                "ZPOPMIN z -1",
                "-ERR value is out of range, must be positive\r\n",
            ),
        ]);
        db.cmd("ZADD z 1 a 2 b");
        db.cmd("HELLO 3");
        db.replies(&[
            ("ZPOPMIN z 1", "*1\r\n*2\r\n$1\r\na\r\n,1\r\n"),
            ("ZPOPMIN z", "*2\r\n$1\r\nb\r\n,2\r\n"),
        ]);
        db.cmd("ZADD z 1.5 x 2 y");
        db.replies(&[
            (
                "ZSCAN z 0",
                "*2\r\n$1\r\n0\r\n*4\r\n$1\r\nx\r\n$3\r\n1.5\r\n$1\r\ny\r\n$1\r\n2\r\n",
            ),
            (
                "ZSCAN z 0 MATCH y",
                "*2\r\n$1\r\n0\r\n*2\r\n$1\r\ny\r\n$1\r\n2\r\n",
            ),
        ]);
        let r = db.cmd("ZSCAN z 0 COUNT 1");
        assert!(r.starts_with("*2\r\n$4\r\n1120\r\n"), "{r}");
        assert!(db.cmd("ZSCAN z 1120").contains("$1\r\ny\r\n"));
    }

    #[test]
    fn combinations_ranges_removals_and_random_members() {
        let mut db = Db::new();
        db.cmd("ZADD a 1 x 2 y 3 z");
        db.cmd("ZADD b 10 y 20 z 30 w");
        db.cmd("SADD s z");
        db.replies(&[
            (
                "ZUNION 2 a b WITHSCORES",
                "*8\r\n$1\r\nx\r\n$1\r\n1\r\n$1\r\ny\r\n$2\r\n12\r\n$1\r\nz\r\n$2\r\n23\r\n$1\r\nw\r\n$2\r\n30\r\n",
            ),
            ("ZINTER 3 a b s AGGREGATE MIN WITHSCORES", "*2\r\n$1\r\nz\r\n$1\r\n1\r\n"),
            ("ZINTER 2 a b WEIGHTS 2 0", "*2\r\n$1\r\ny\r\n$1\r\nz\r\n"),
            ("ZDIFF 2 a b", "*1\r\n$1\r\nx\r\n"),
            ("ZDIFFSTORE d 2 a b", ":1\r\n"),
            ("ZUNIONSTORE d 2 a b", ":4\r\n"),
            ("ZINTERSTORE d 2 a b", ":2\r\n"),
            ("ZINTERCARD 2 a b LIMIT 1", ":1\r\n"),
            ("ZINTERCARD 0 a", "-ERR at least 1 input key is needed for 'zintercard' command\r\n"),
            ("ZINTERCARD 3 a b", "-ERR syntax error\r\n"),
            // The legacy range commands take only their own options.
            ("ZREVRANGE a 0 -1 BYSCORE", "-ERR syntax error\r\n"),
            ("ZRANGEBYSCORE a 0 -1 REV", "-ERR syntax error\r\n"),
            ("ZREVRANGEBYSCORE a +inf -inf LIMIT 0 1", "*1\r\n$1\r\nz\r\n"),
        ]);
        // Scores as Redis 7.0 prints them (%.17g).
        db.cmd("ZADD g 0.1 m 1e20 n");
        db.replies(&[
            (
                "ZRANGE g 0 -1 WITHSCORES",
                "*4\r\n$1\r\nm\r\n$19\r\n0.10000000000000001\r\n$1\r\nn\r\n$5\r\n1e+20\r\n",
            ),
            (
                "ZUNION 0 a",
                "-ERR at least 1 input key is needed for 'zunion' command\r\n",
            ),
            ("ZUNION 3 a b", "-ERR syntax error\r\n"),
            ("ZDIFF 1 a WEIGHTS 1", "-ERR syntax error\r\n"),
            (
                "ZUNION 1 a WEIGHTS x",
                "-ERR weight value is not a float\r\n",
            ),
            ("ZREVRANGE a 0 0", "*1\r\n$1\r\nz\r\n"),
            (
                "ZREVRANGEBYLEX b + -",
                "*3\r\n$1\r\nz\r\n$1\r\ny\r\n$1\r\nw\r\n",
            ),
            ("ZREMRANGEBYSCORE b 15 +inf", ":2\r\n"),
            ("ZREMRANGEBYRANK a 0 0", ":1\r\n"),
            ("ZREMRANGEBYLEX a [z [z", ":1\r\n"),
            ("ZRANGE a 0 -1", "*1\r\n$1\r\ny\r\n"),
        ]);
        db.cmd("ZADD r 1 m 2 n");
        assert_eq!(db.cmd("ZRANDMEMBER r 5 WITHSCORES").matches('$').count(), 4);
        assert_eq!(
            db.cmd("ZRANDMEMBER r -5 WITHSCORES").matches('$').count(),
            10
        );
        assert!(db.cmd("ZRANDMEMBER r -5 WITHSCORES").starts_with("*10\r\n"));
        assert_eq!(db.cmd("ZRANDMEMBER r -3").matches('$').count(), 3);
        assert_eq!(db.cmd("ZRANDMEMBER nope 3"), "*0\r\n");
        assert!(db
            .cmd("ZRANDMEMBER r -1099511627776")
            .starts_with("-ERR the reply to 1099511627776 random draws would be over"));
        assert_eq!(
            db.cmd("ZRANDMEMBER r -9223372036854775808"),
            format!("-{}\r\n", crate::errors::RANDOM_COUNT_RANGE)
        );
        db.replies(&[
            (
                "ZMPOP 2 nope r MAX COUNT 5",
                "*2\r\n$1\r\nr\r\n*2\r\n*2\r\n$1\r\nn\r\n$1\r\n2\r\n*2\r\n$1\r\nm\r\n$1\r\n1\r\n",
            ),
            ("ZMPOP 1 r MIN", "*-1\r\n"),
        ]);
        db.cmd("ZADD q 5 e");
        assert_eq!(
            db.cmd("BZPOPMIN nope q 0"),
            "*3\r\n$1\r\nq\r\n$1\r\ne\r\n$1\r\n5\r\n"
        );
    }
}
