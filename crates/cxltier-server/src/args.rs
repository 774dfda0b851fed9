//! What handlers of several kinds parse and answer alike: the WRONGTYPE answer, SCAN's `MATCH`/`COUNT` options, the bound on a reply whose size a count
//! decides, random draws from a collection (SRANDMEMBER, ZRANDMEMBER), the replies that look up each member or give a count, and the
//! multi-key pops of lists and sorted sets.

use cxltier_store::{ScanPage, Store, StoreError, ZAddOutcome};
use rand::Rng;

use crate::context::{fail, Ctx, Effect};
use crate::errors::NOT_INT;
use crate::errors::{SYNTAX, WRONGTYPE};
use crate::numbers::int_arg;
use crate::resp::reply;

/// Run a handler body, answering WRONGTYPE as Redis does. Bodies write their reply only after
/// the store calls that can fail, so an error never follows a partial reply.
pub(crate) fn typed(
    ctx: &mut Ctx<'_>,
    body: impl FnOnce(&mut Ctx<'_>) -> Result<Effect, StoreError>,
) -> Result<Effect, StoreError> {
    match body(ctx) {
        Err(StoreError::WrongType { .. }) => {
            reply::error(ctx.out, WRONGTYPE);
            Ok(Effect::Read)
        }
        r => r,
    }
}

/// A read whose answer is a count the store gives (SCARD, LLEN, ZCARD, ZCOUNT, ...).
pub(crate) fn count_reply(
    ctx: &mut Ctx<'_>,
    count: impl FnOnce(&mut Store) -> Result<u64, StoreError>,
) -> Result<Effect, StoreError> {
    typed(ctx, |ctx| {
        let n = count(ctx.store)?;
        reply::int(ctx.out, n as i64);
        Ok(Effect::Read)
    })
}

/// SMISMEMBER, ZMSCORE, GEOPOS, GEOHASH: what `look` finds for each member after the key
/// (all looked up before the reply begins), answered as an array, each by `answer`.
pub(crate) fn reply_each_member<T>(
    ctx: &mut Ctx<'_>,
    args: &[&[u8]],
    mut look: impl FnMut(&mut Store, &[u8], &[u8]) -> Result<T, StoreError>,
    answer: impl Fn(&mut Ctx<'_>, T),
) -> Result<Effect, StoreError> {
    typed(ctx, |ctx| {
        let mut got = Vec::with_capacity(args.len() - 2);
        for m in &args[2..] {
            got.push(look(ctx.store, args[1], m)?);
        }
        reply::array(ctx.out, got.len());
        for g in got {
            answer(ctx, g);
        }
        Ok(Effect::Read)
    })
}

/// What SSCAN, HSCAN and ZSCAN were asked: the member to continue after (`None`: from the
/// start), the `MATCH` pattern and the `COUNT`.
pub(crate) type ScanArgs<'a> = (Option<Vec<u8>>, Option<&'a [u8]>, usize);

/// `key cursor [MATCH pattern] [COUNT count]` of SSCAN, HSCAN and ZSCAN: `Err` is the reply
/// already given.
pub(crate) fn scan_args<'a>(ctx: &mut Ctx<'_>, args: &[&'a [u8]]) -> Result<ScanArgs<'a>, ()> {
    let Some(after) = crate::cursors::cursor_from_wire(args[2]) else {
        reply::error(ctx.out, "ERR invalid cursor");
        return Err(());
    };
    let (pattern, count) = scan_options(ctx, &args[3..])?;
    Ok((after, pattern, count))
}

/// A member of a set, a hash (with its value) or a sorted set (with its score) as the SCAN
/// family answers it.
pub(crate) trait ScanItem {
    /// Reply items a member takes.
    const ITEMS: usize;
    /// What `MATCH` is matched against.
    fn member(&self) -> &[u8];
    fn reply(&self, out: &mut Vec<u8>);
}

impl ScanItem for Vec<u8> {
    const ITEMS: usize = 1;
    fn member(&self) -> &[u8] {
        self
    }
    fn reply(&self, out: &mut Vec<u8>) {
        reply::bulk(out, self);
    }
}

impl ScanItem for (Vec<u8>, Vec<u8>) {
    const ITEMS: usize = 2;
    fn member(&self) -> &[u8] {
        &self.0
    }
    fn reply(&self, out: &mut Vec<u8>) {
        reply::bulk(out, &self.0);
        reply::bulk(out, &self.1);
    }
}

impl ScanItem for (Vec<u8>, f64) {
    const ITEMS: usize = 2;
    fn member(&self) -> &[u8] {
        &self.0
    }
    fn reply(&self, out: &mut Vec<u8>) {
        reply::bulk(out, &self.0);
        // The SCAN family answers scores as strings in either protocol.
        reply::double(out, 2, self.1);
    }
}

/// A page of SSCAN, HSCAN or ZSCAN: the cursor to continue from, then the members of the page
/// that `pattern` matches.
pub(crate) fn reply_scan_page<T: ScanItem>(
    out: &mut Vec<u8>,
    (page, next): ScanPage<T>,
    pattern: Option<&[u8]>,
) {
    let page: Vec<T> = page
        .into_iter()
        .filter(|t| pattern.is_none_or(|p| crate::glob::matches(p, t.member(), false)))
        .collect();
    reply::array(out, 2);
    reply::bulk(out, &crate::cursors::cursor_to_wire(next.as_deref()));
    reply::array(out, T::ITEMS * page.len());
    for t in &page {
        t.reply(out);
    }
}

/// `[MATCH pattern] [COUNT count]` of the SCAN family: `Err` is the reply already given.
fn scan_options<'a>(ctx: &mut Ctx<'_>, opts: &[&'a [u8]]) -> Result<(Option<&'a [u8]>, usize), ()> {
    let (mut pattern, mut count) = (None, 10usize);
    let mut i = 0;
    while i < opts.len() {
        let Some(v) = opts.get(i + 1) else {
            reply::error(ctx.out, SYNTAX);
            return Err(());
        };
        if opts[i].eq_ignore_ascii_case(b"MATCH") {
            pattern = Some(*v);
        } else if opts[i].eq_ignore_ascii_case(b"COUNT") {
            match int_arg(v) {
                None => {
                    reply::error(ctx.out, NOT_INT);
                    return Err(());
                }
                Some(c) if c < 1 => {
                    reply::error(ctx.out, SYNTAX);
                    return Err(());
                }
                Some(c) => count = c.min(1 << 20) as usize,
            }
        } else {
            reply::error(ctx.out, SYNTAX);
            return Err(());
        }
        i += 2;
    }
    Ok((pattern, count))
}

/// The most bytes one reply whose size a count decides (not the data) may take: the
/// client-output-buffer-limit hard limit, past which the connection would be closed anyway.
pub(crate) fn reply_limit(ctx: &Ctx<'_>) -> usize {
    match ctx.info.client_output_buffer_limit.0 {
        0 => crate::limits::OutputBufferLimit::default().hard,
        n => n,
    }
}

/// The fewest bytes one element of an array reply takes (`$0\r\n\r\n`).
const MIN_ELEMENT_BYTES: u64 = 6;

/// A collection of at most this many members (or no more than the count) is read whole.
const DRAW_PAGE: usize = 1024;

/// The error for a count whose reply would pass [`reply_limit`].
fn over_limit(ctx: &Ctx<'_>, count: u64) -> String {
    format!(
        "ERR the reply to {count} random draws would be over the client-output-buffer-limit hard limit of {} bytes: ask for fewer",
        reply_limit(ctx)
    )
}

/// `n` members drawn at random with repeats from the set, sorted set or hash at `key` (which
/// holds `card` > 0 members), each written by `write` (member, its value or score) into an
/// array reply; `Ok(Err(message))` when that reply would pass [`reply_limit`]. The work is
/// bounded by the limit whatever `n` is: a count that cannot fit is refused before any
/// draw, and the reply is built aside and dropped as soon as it grows past the limit.
pub(crate) fn random_draws(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    card: u64,
    n: u64,
    mut write: impl FnMut(&mut Ctx<'_>, &[u8], &[u8], &mut Vec<u8>),
) -> Result<Result<Vec<u8>, String>, StoreError> {
    let limit = reply_limit(ctx);
    if n.saturating_mul(MIN_ELEMENT_BYTES) > limit as u64 {
        return Ok(Err(over_limit(ctx, n)));
    }
    let mut rng = rand::rng();
    // A small collection (or one no larger than the count) is read once and drawn from in
    // memory; a large one by index, O(log n) a draw.
    let all = if card <= (DRAW_PAGE as u64).max(n.min(1 << 16)) {
        let mut all = Vec::new();
        for i in 0..card {
            if let Some(e) = ctx.store.member_at(key, i)? {
                all.push(e);
            }
        }
        Some(all)
    } else {
        None
    };
    let mut out = Vec::new();
    reply::array(&mut out, n as usize);
    for _ in 0..n {
        let drawn = match &all {
            Some(all) if !all.is_empty() => Some(all[rng.random_range(0..all.len())].clone()),
            Some(_) => None,
            None => ctx.store.member_at(key, rng.random_range(0..card))?,
        };
        match drawn {
            Some((m, v)) => write(ctx, &m, &v, &mut out),
            // Only a set changed under the draw could miss; the array keeps its length.
            None => reply::null(&mut out, ctx.session.proto),
        }
        if out.len() > limit {
            return Ok(Err(over_limit(ctx, n)));
        }
    }
    Ok(Ok(out))
}

/// `key [count [WITH...]]` of HRANDFIELD (`with`: WITHVALUES) and ZRANDMEMBER (WITHSCORES):
/// the count, and whether `with` was given; `Err` is the error reply.
pub(crate) fn random_count_args(
    args: &[&[u8]],
    with: &[u8],
) -> Result<(Option<i64>, bool), &'static str> {
    if args.len() < 3 {
        return Ok((None, false));
    }
    let c = match int_arg(args[2]) {
        None => return Err(NOT_INT),
        // Redis's range (-LONG_MAX..LONG_MAX): -2^63 has no positive counterpart.
        Some(i64::MIN) => return Err(crate::errors::RANDOM_COUNT_RANGE),
        Some(c) => c,
    };
    if args.len() > 4 || (args.len() == 4 && !args[3].eq_ignore_ascii_case(with)) {
        return Err(SYNTAX);
    }
    let with = args.len() == 4;
    // Twice as many reply items: the count must stay within range when doubled.
    if with && !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&c) {
        return Err("ERR value is out of range");
    }
    Ok((Some(c), with))
}

/// A blocking command's timeout as Redis reads it: float seconds, rounded up to milliseconds,
/// 0 for ever. `Err` is the error reply.
pub(crate) fn timeout_arg(b: &[u8]) -> Result<Option<std::time::Instant>, &'static str> {
    let f = std::str::from_utf8(b)
        .ok()
        .filter(|t| !t.is_empty() && !t.starts_with(char::is_whitespace))
        .and_then(|t| t.parse::<f64>().ok())
        .filter(|f| !f.is_nan())
        .ok_or("ERR timeout is not a float or out of range")?;
    let ms = (f * 1000.0).ceil();
    if ms < 0.0 {
        return Err("ERR timeout is negative");
    }
    // Past about 292 million years a deadline is no deadline: Instant cannot hold it.
    if ms == 0.0 {
        return Ok(None);
    }
    if ms.is_infinite() || ms >= 9.2e18 {
        return Err("ERR timeout is out of range");
    }
    Ok(std::time::Instant::now().checked_add(std::time::Duration::from_millis(ms as u64)))
}

/// Nothing to pop: park the connection on `keys` (the server runs the command again when one
/// is written), or, inside EXEC, where nothing may block, answer as a timeout.
pub(crate) fn wait(
    ctx: &mut Ctx<'_>,
    keys: &[&[u8]],
    deadline: Option<std::time::Instant>,
    bulk: bool,
) -> Effect {
    if ctx.session.in_exec {
        if bulk {
            reply::null(ctx.out, ctx.session.proto);
        } else {
            reply::null_array(ctx.out, ctx.session.proto);
        }
    } else {
        ctx.session.block = Some(crate::context::Block {
            keys: keys.iter().map(|k| k.to_vec()).collect(),
            deadline,
            wait: None,
            args: None,
        });
    }
    Effect::Read
}

/// `numkeys key... WHERE [COUNT count]` of LMPOP, BLMPOP, ZMPOP and BZMPOP, from `args[at]`:
/// the keys, where to pop from (`where_word` reads the word: LEFT|RIGHT, MIN|MAX) and the count
/// (1 when not given), or the error reply.
fn mpop_args<'a, E>(
    args: &[&'a [u8]],
    at: usize,
    where_word: impl Fn(&[u8]) -> Option<E>,
) -> Result<(Vec<&'a [u8]>, E, u64), &'static str> {
    let n = match int_arg(args[at]) {
        Some(n) if n > 0 => n as u64,
        _ => return Err("ERR numkeys should be greater than 0"),
    };
    let end_at = (at as u64 + 1).saturating_add(n);
    if end_at >= args.len() as u64 {
        return Err(SYNTAX);
    }
    let end_at = end_at as usize;
    let end = where_word(args[end_at]).ok_or(SYNTAX)?;
    let mut count = None;
    let mut i = end_at + 1;
    while i < args.len() {
        if count.is_none() && args[i].eq_ignore_ascii_case(b"COUNT") && i + 1 < args.len() {
            match int_arg(args[i + 1]) {
                Some(c) if c > 0 => count = Some(c as u64),
                _ => return Err("ERR count should be greater than 0"),
            }
            i += 2;
        } else {
            return Err(SYNTAX);
        }
    }
    Ok((args[at + 1..end_at].to_vec(), end, count.unwrap_or(1)))
}

/// How a blocking or multi-key pop is replicated: `verb key [count]` (LPOP, RPOP, ZPOPMIN,
/// ZPOPMAX), the count being what was popped (Redis 7.0).
pub(crate) fn pop_op(verb: &[u8], key: &[u8], count: Option<usize>) -> crate::write_stream::Op {
    let mut op = vec![verb.to_vec(), key.to_vec()];
    if let Some(n) = count {
        op.push(n.to_string().into_bytes());
    }
    op
}

/// BLPOP, BRPOP, BZPOPMIN and BZPOPMAX: `key... timeout`, one member popped by `pop_first`
/// from the first of the keys that has one, replicated as `pop_op` says and answered as the key
/// then the member's `items` reply items, written by `reply_member`; nothing to pop: the
/// connection parked.
pub(crate) fn bpop<T>(
    ctx: &mut Ctx<'_>,
    args: &[&[u8]],
    pop_first: impl FnOnce(&mut Ctx<'_>, &[&[u8]]) -> Result<Option<Popped<T>>, StoreError>,
    pop_op: impl FnOnce(&[u8]) -> crate::write_stream::Op,
    items: usize,
    reply_member: impl FnOnce(&mut Ctx<'_>, &T),
) -> Result<Effect, StoreError> {
    let deadline = match timeout_arg(args[args.len() - 1]) {
        Ok(d) => d,
        Err(e) => return fail(ctx, e),
    };
    let keys = &args[1..args.len() - 1];
    typed(ctx, |ctx| match pop_first(ctx, keys)? {
        Some((k, popped)) => {
            ctx.session.propagate_as(|| vec![pop_op(&k)]);
            reply::array(ctx.out, 1 + items);
            reply::bulk(ctx.out, crate::db::user_key(&k));
            reply_member(ctx, &popped[0]);
            Ok(Effect::Wrote)
        }
        None => Ok(wait(ctx, keys, deadline, false)),
    })
}

/// A key and the members popped from it.
pub(crate) type Popped<T> = (Vec<u8>, Vec<T>);

/// LMPOP and ZMPOP (`blocking` false: `numkeys ...`), BLMPOP and BZMPOP (true: `timeout
/// numkeys ...`): `where_word` reads LEFT|RIGHT or MIN|MAX, `pop_first` pops from the first
/// key that has members, `pop_op` is how the pop is replicated, and `reply_member` answers one
/// member popped. Nothing popped: a null array, or the connection parked when blocking.
pub(crate) fn mpop<E: Copy, T>(
    ctx: &mut Ctx<'_>,
    args: &[&[u8]],
    blocking: bool,
    where_word: impl Fn(&[u8]) -> Option<E>,
    pop_first: impl FnOnce(&mut Ctx<'_>, &[&[u8]], E, u64) -> Result<Option<Popped<T>>, StoreError>,
    pop_op: impl FnOnce(E, &[u8], Option<usize>) -> crate::write_stream::Op,
    reply_member: impl Fn(&mut Ctx<'_>, &T),
) -> Result<Effect, StoreError> {
    let (keys, end, count) = match mpop_args(args, if blocking { 2 } else { 1 }, where_word) {
        Ok(a) => a,
        Err(e) => return fail(ctx, e),
    };
    let deadline = if blocking {
        match timeout_arg(args[1]) {
            Ok(d) => Some(d),
            Err(e) => return fail(ctx, e),
        }
    } else {
        None
    };
    typed(ctx, |ctx| match pop_first(ctx, &keys, end, count)? {
        Some((k, popped)) => {
            ctx.session
                .propagate_as(|| vec![pop_op(end, &k, Some(popped.len()))]);
            reply::array(ctx.out, 2);
            reply::bulk(ctx.out, crate::db::user_key(&k));
            reply::array(ctx.out, popped.len());
            for m in &popped {
                reply_member(ctx, m);
            }
            Ok(Effect::Wrote)
        }
        None => match deadline {
            Some(deadline) => Ok(wait(ctx, &keys, deadline, false)),
            None => {
                reply::null_array(ctx.out, ctx.session.proto);
                Ok(Effect::Read)
            }
        },
    })
}

/// ZADD's and GEOADD's answer: the members added (and changed, with CH).
pub(crate) fn reply_added(ctx: &mut Ctx<'_>, o: &ZAddOutcome, ch: bool) -> Effect {
    reply::int(ctx.out, (o.added + if ch { o.changed } else { 0 }) as i64);
    if o.added + o.changed > 0 {
        Effect::Wrote
    } else {
        Effect::Read
    }
}
