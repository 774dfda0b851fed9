//! The list commands over the store's chunked lists (`cxltier_store::Store::list_*`): each
//! reads or writes only the chunks on its path, so a long list is never rewritten whole.

use cxltier_store::{ListEnd, StoreError};

use crate::args::{count_reply, mpop, timeout_arg, typed, wait, Popped};
use crate::context::{fail, Ctx, Effect};
use crate::errors::{NOT_INT, SYNTAX, WRONGTYPE};
use crate::notify::class as nc;
use crate::numbers::int_arg;
use crate::resp::reply;

fn end_arg(b: &[u8]) -> Option<ListEnd> {
    if b.eq_ignore_ascii_case(b"LEFT") {
        Some(ListEnd::Left)
    } else if b.eq_ignore_ascii_case(b"RIGHT") {
        Some(ListEnd::Right)
    } else {
        None
    }
}

/// The list family's keyspace events, Redis's (t_list.c): a push or pop names its end.
fn announce_push(ctx: &mut Ctx<'_>, key: &[u8], end: ListEnd) {
    let event = match end {
        ListEnd::Left => "lpush",
        ListEnd::Right => "rpush",
    };
    ctx.notify(nc::LIST, event, key);
}

/// A pop's event (`lpop`/`rpop`), then `del` when it emptied the list.
fn announce_pop(ctx: &mut Ctx<'_>, key: &[u8], end: ListEnd) {
    let event = match end {
        ListEnd::Left => "lpop",
        ListEnd::Right => "rpop",
    };
    ctx.notify_pop(nc::LIST, event, key);
}

fn push(
    ctx: &mut Ctx<'_>,
    args: &[&[u8]],
    end: ListEnd,
    create: bool,
) -> Result<Effect, StoreError> {
    typed(ctx, |ctx| {
        let n = if create {
            ctx.store.list_push(args[1], end, &args[2..])?
        } else {
            ctx.store.list_push_existing(args[1], end, &args[2..])?
        };
        if n > 0 {
            announce_push(ctx, args[1], end);
        }
        reply::int(ctx.out, n as i64);
        Ok(if n > 0 { Effect::Wrote } else { Effect::Read })
    })
}

pub(crate) fn lpush(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    push(ctx, args, ListEnd::Left, true)
}
pub(crate) fn rpush(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    push(ctx, args, ListEnd::Right, true)
}
pub(crate) fn lpushx(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    push(ctx, args, ListEnd::Left, false)
}
pub(crate) fn rpushx(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    push(ctx, args, ListEnd::Right, false)
}

fn pop(ctx: &mut Ctx<'_>, args: &[&[u8]], end: ListEnd) -> Result<Effect, StoreError> {
    let count = match args.len() {
        2 => None,
        3 => match int_arg(args[2]) {
            None => return fail(ctx, NOT_INT),
            Some(c) if c < 0 => return fail(ctx, "ERR value is out of range, must be positive"),
            Some(c) => Some(c as u64),
        },
        _ => {
            // The command's name only for this error: no allocation on a pop's common path.
            let name = String::from_utf8_lossy(args[0]).to_lowercase();
            return fail(
                ctx,
                &format!("ERR wrong number of arguments for '{name}' command"),
            );
        }
    };
    typed(ctx, |ctx| {
        let proto = ctx.session.proto;
        // Redis 7.0: a count of 0 answers an empty array when the list exists.
        if count == Some(0) {
            if ctx.store.list_len(args[1])? == 0 {
                reply::null_array(ctx.out, proto);
            } else {
                reply::array(ctx.out, 0);
            }
            return Ok(Effect::Read);
        }
        let got = ctx.store.list_pop(args[1], end, count.unwrap_or(1))?;
        if got.as_ref().is_some_and(|v| !v.is_empty()) {
            announce_pop(ctx, args[1], end);
        }
        match (got, count) {
            (None, None) => reply::null(ctx.out, proto),
            (None, Some(_)) => reply::null_array(ctx.out, proto),
            (Some(v), None) => match v.first() {
                Some(m) => reply::bulk(ctx.out, m),
                None => reply::null(ctx.out, proto),
            },
            (Some(v), Some(_)) => {
                reply::array(ctx.out, v.len());
                for m in &v {
                    reply::bulk(ctx.out, m);
                }
            }
        }
        Ok(Effect::Wrote)
    })
}

pub(crate) fn lpop(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    pop(ctx, args, ListEnd::Left)
}
pub(crate) fn rpop(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    pop(ctx, args, ListEnd::Right)
}

pub(crate) fn llen(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    count_reply(ctx, |store| store.list_len(args[1]))
}

pub(crate) fn lindex(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let Some(i) = int_arg(args[2]) else {
        return fail(ctx, NOT_INT);
    };
    typed(ctx, |ctx| {
        match ctx.store.list_index(args[1], i)? {
            Some(m) => reply::bulk(ctx.out, &m),
            None => reply::null(ctx.out, ctx.session.proto),
        }
        Ok(Effect::Read)
    })
}

pub(crate) fn lset(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let Some(i) = int_arg(args[2]) else {
        return fail(ctx, NOT_INT);
    };
    typed(ctx, |ctx| {
        match ctx.store.list_set(args[1], i, args[3])? {
            None => fail(ctx, "ERR no such key"),
            Some(false) => fail(ctx, "ERR index out of range"),
            Some(true) => {
                ctx.notify(nc::LIST, "lset", args[1]);
                reply::ok(ctx.out);
                Ok(Effect::Wrote)
            }
        }
    })
}

pub(crate) fn lrange(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let (Some(a), Some(b)) = (int_arg(args[2]), int_arg(args[3])) else {
        return fail(ctx, NOT_INT);
    };
    typed(ctx, |ctx| {
        // Straight from the chunks into the reply; a failed read takes back what it wrote, so
        // that only its error is answered.
        let at = ctx.out.len();
        let r = ctx.store.list_range_into(
            args[1],
            a,
            b,
            &mut *ctx.out,
            |out, n| reply::array(out, n as usize),
            reply::bulk,
        );
        if r.is_err() {
            ctx.out.truncate(at);
        }
        r.map(|()| Effect::Read)
    })
}

pub(crate) fn linsert(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let before = if args[2].eq_ignore_ascii_case(b"BEFORE") {
        true
    } else if args[2].eq_ignore_ascii_case(b"AFTER") {
        false
    } else {
        return fail(ctx, SYNTAX);
    };
    typed(ctx, |ctx| {
        let n = ctx.store.list_insert(args[1], before, args[3], args[4])?;
        if n > 0 {
            ctx.notify(nc::LIST, "linsert", args[1]);
        }
        reply::int(ctx.out, n);
        Ok(if n > 0 { Effect::Wrote } else { Effect::Read })
    })
}

pub(crate) fn lrem(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let Some(count) = int_arg(args[2]) else {
        return fail(ctx, NOT_INT);
    };
    typed(ctx, |ctx| {
        let n = ctx.store.list_remove(args[1], count, args[3])?;
        if n > 0 {
            ctx.notify(nc::LIST, "lrem", args[1]);
        }
        reply::int(ctx.out, n as i64);
        Ok(if n > 0 { Effect::Wrote } else { Effect::Read })
    })
}

pub(crate) fn ltrim(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let (Some(a), Some(b)) = (int_arg(args[2]), int_arg(args[3])) else {
        return fail(ctx, NOT_INT);
    };
    typed(ctx, |ctx| {
        // Redis announces `ltrim` for any LTRIM of an existing list (then `del` if emptied).
        let existed = ctx.store.contains(args[1]);
        ctx.store.list_trim(args[1], a, b)?;
        if existed {
            ctx.notify(nc::LIST, "ltrim", args[1]);
        }
        reply::ok(ctx.out);
        Ok(Effect::Wrote)
    })
}

/// Members read per step of LPOS's walk: bounded memory however long the list.
const LPOS_PAGE: i64 = 512;

pub(crate) fn lpos(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let (mut rank, mut count, mut maxlen) = (1i64, None::<i64>, 0i64);
    let mut i = 3;
    while i < args.len() {
        let Some(v) = args.get(i + 1) else {
            return fail(ctx, SYNTAX);
        };
        let Some(n) = int_arg(v) else {
            return fail(ctx, NOT_INT);
        };
        let opt = args[i].to_ascii_uppercase();
        match opt.as_slice() {
            b"RANK" if n == 0 || n == i64::MIN => {
                return fail(ctx, "ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list");
            }
            b"RANK" => rank = n,
            b"COUNT" if n < 0 => return fail(ctx, "ERR COUNT can't be negative"),
            b"COUNT" => count = Some(n),
            b"MAXLEN" if n < 0 => return fail(ctx, "ERR MAXLEN can't be negative"),
            b"MAXLEN" => maxlen = n,
            _ => return fail(ctx, SYNTAX),
        }
        i += 2;
    }
    typed(ctx, |ctx| {
        let len = ctx.store.list_len(args[1])? as i64;
        let want = match count {
            Some(0) => u64::MAX,
            Some(c) => c as u64,
            None => 1,
        };
        let mut skip = rank.unsigned_abs() - 1;
        let limit = if maxlen == 0 { len } else { maxlen.min(len) };
        let mut found = Vec::new();
        let mut seen = 0i64;
        // Walk from the end RANK names, a page at a time.
        'walk: while seen < limit {
            let n = LPOS_PAGE.min(limit - seen);
            let (a, b) = if rank > 0 {
                (seen, seen + n - 1)
            } else {
                (len - seen - n, len - seen - 1)
            };
            let page = ctx.store.list_range(args[1], a, b)?;
            let at_of = |j: usize| a + j as i64;
            let order: Box<dyn Iterator<Item = usize>> = if rank > 0 {
                Box::new(0..page.len())
            } else {
                Box::new((0..page.len()).rev())
            };
            for j in order {
                let (at, m) = (at_of(j), &page[j]);
                if m.as_slice() == args[2] {
                    if skip > 0 {
                        skip -= 1;
                    } else {
                        found.push(at);
                        if found.len() as u64 >= want {
                            break 'walk;
                        }
                    }
                }
            }
            seen += n;
        }
        match count {
            None => match found.first() {
                Some(&p) => reply::int(ctx.out, p),
                None => reply::null(ctx.out, ctx.session.proto),
            },
            Some(_) => {
                reply::array(ctx.out, found.len());
                for p in found {
                    reply::int(ctx.out, p);
                }
            }
        }
        Ok(Effect::Read)
    })
}

fn move_one(
    ctx: &mut Ctx<'_>,
    src: &[u8],
    dst: &[u8],
    from: ListEnd,
    to: ListEnd,
) -> Result<Effect, StoreError> {
    typed(ctx, |ctx| {
        // Redis checks both types before anything moves: a destination of another type
        // leaves the source as it was.
        if ctx.store.list_len(src)? == 0 {
            reply::null(ctx.out, ctx.session.proto);
            return Ok(Effect::Read);
        }
        ctx.store.list_len(dst)?;
        let Some(m) = ctx
            .store
            .list_pop(src, from, 1)?
            .and_then(|v| v.into_iter().next())
        else {
            reply::null(ctx.out, ctx.session.proto);
            return Ok(Effect::Read);
        };
        ctx.store.list_push(dst, to, &[&m])?;
        // Redis's order: the push to the destination, then the pop (and `del`) of the source.
        announce_push(ctx, dst, to);
        announce_pop(ctx, src, from);
        reply::bulk(ctx.out, &m);
        Ok(Effect::Wrote)
    })
}

pub(crate) fn lmove(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let (Some(from), Some(to)) = (end_arg(args[3]), end_arg(args[4])) else {
        return fail(ctx, SYNTAX);
    };
    move_one(ctx, args[1], args[2], from, to)
}

pub(crate) fn rpoplpush(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    move_one(ctx, args[1], args[2], ListEnd::Right, ListEnd::Left)
}

/// The length of the list at `key`; while the server runs a parked command again, a key of
/// another type is only not ready (Redis leaves such a client blocked).
pub(crate) fn ready_len(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<u64, StoreError> {
    match ctx.store.list_len(key) {
        Err(StoreError::WrongType { .. }) if ctx.session.block_retry => Ok(0),
        r => r,
    }
}

/// The first of `keys` holding a non-empty list, up to `count` members popped from it at
/// `end`; `None` when every list is empty or absent (WRONGTYPE for a key of another type
/// before it, in Redis's order).
fn pop_first(
    ctx: &mut Ctx<'_>,
    keys: &[&[u8]],
    end: ListEnd,
    count: u64,
) -> Result<Option<Popped<Vec<u8>>>, StoreError> {
    for k in keys {
        if ready_len(ctx, k)? == 0 {
            continue;
        }
        if let Some(v) = ctx.store.list_pop(k, end, count)? {
            if !v.is_empty() {
                announce_pop(ctx, k, end);
                return Ok(Some((k.to_vec(), v)));
            }
        }
    }
    Ok(None)
}

/// How a pop is replicated: `LPOP key [count]` or `RPOP key [count]` (Redis replicates the
/// blocking and multi-key pops so, the count being what was popped).
fn pop_op(end: ListEnd, key: &[u8], count: Option<usize>) -> crate::write_stream::Op {
    let verb: &[u8] = match end {
        ListEnd::Left => b"lpop",
        ListEnd::Right => b"rpop",
    };
    crate::args::pop_op(verb, key, count)
}

fn bpop(ctx: &mut Ctx<'_>, args: &[&[u8]], end: ListEnd) -> Result<Effect, StoreError> {
    crate::args::bpop(
        ctx,
        args,
        |ctx, keys| pop_first(ctx, keys, end, 1),
        |k| pop_op(end, k, None),
        1,
        |ctx, m| reply::bulk(ctx.out, m),
    )
}

pub(crate) fn blpop(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    bpop(ctx, args, ListEnd::Left)
}
pub(crate) fn brpop(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    bpop(ctx, args, ListEnd::Right)
}

fn bmove(
    ctx: &mut Ctx<'_>,
    args: &[&[u8]],
    from: ListEnd,
    to: ListEnd,
    timeout: &[u8],
) -> Result<Effect, StoreError> {
    let deadline = match timeout_arg(timeout) {
        Ok(d) => d,
        Err(e) => return fail(ctx, e),
    };
    let src = args[1];
    let n = match ready_len(ctx, src) {
        Err(StoreError::WrongType { .. }) => return fail(ctx, WRONGTYPE),
        r => r?,
    };
    if n == 0 {
        return Ok(wait(ctx, &[src], deadline, true));
    }
    let effect = move_one(ctx, src, args[2], from, to)?;
    // Replicated as the non-blocking command: LMOVE (with its ends) or RPOPLPUSH.
    ctx.session.propagate_as(|| {
        if args.len() == 6 {
            let mut op = vec![b"lmove".to_vec()];
            op.extend(args[1..5].iter().map(|a| a.to_vec()));
            vec![op]
        } else {
            vec![vec![b"rpoplpush".to_vec(), src.to_vec(), args[2].to_vec()]]
        }
    });
    Ok(effect)
}

pub(crate) fn brpoplpush(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    bmove(ctx, args, ListEnd::Right, ListEnd::Left, args[3])
}

pub(crate) fn blmove(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let (Some(from), Some(to)) = (end_arg(args[3]), end_arg(args[4])) else {
        return fail(ctx, SYNTAX);
    };
    bmove(ctx, args, from, to, args[5])
}

pub(crate) fn lmpop(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    lists_mpop(ctx, args, false)
}

pub(crate) fn blmpop(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    lists_mpop(ctx, args, true)
}

fn lists_mpop(ctx: &mut Ctx<'_>, args: &[&[u8]], blocking: bool) -> Result<Effect, StoreError> {
    mpop(ctx, args, blocking, end_arg, pop_first, pop_op, |ctx, m| {
        reply::bulk(ctx.out, m)
    })
}

#[cfg(test)]
mod tests {
    use crate::testdb::{Db, WT};

    #[test]
    fn push_pop_len_index_range() {
        let mut db = Db::new();
        db.replies(&[
            ("LPUSH l a b c", ":3\r\n"),
            ("RPUSH l d", ":4\r\n"),
            (
                "LRANGE l 0 -1",
                "*4\r\n$1\r\nc\r\n$1\r\nb\r\n$1\r\na\r\n$1\r\nd\r\n",
            ),
            ("LRANGE l 5 10", "*0\r\n"),
            ("LLEN l", ":4\r\n"),
            ("LLEN nope", ":0\r\n"),
            ("LINDEX l -1", "$1\r\nd\r\n"),
            ("LINDEX l 9", "$-1\r\n"),
            (
                "LINDEX l x",
                "-ERR value is not an integer or out of range\r\n",
            ),
            ("LPUSHX nope a", ":0\r\n"),
            ("RPUSHX l e", ":5\r\n"),
            ("LPOP l", "$1\r\nc\r\n"),
            ("RPOP l 2", "*2\r\n$1\r\ne\r\n$1\r\nd\r\n"),
            ("LPOP l 0", "*0\r\n"),
            (
                "LPOP l -1",
                "-ERR value is out of range, must be positive\r\n",
            ),
            ("LPOP nope", "$-1\r\n"),
            ("LPOP nope 2", "*-1\r\n"),
            (
                "LPOP l 1 2",
                "-ERR wrong number of arguments for 'lpop' command\r\n",
            ),
            ("RPOP l 10", "*2\r\n$1\r\na\r\n$1\r\nb\r\n"),
            // The last member gone, the key is.
            ("EXISTS l", ":0\r\n"),
        ]);
        db.cmd("HELLO 3");
        db.replies(&[("LPOP nope", "_\r\n"), ("LPOP nope 1", "_\r\n")]);
    }

    #[test]
    fn set_insert_rem_trim_pos() {
        let mut db = Db::new();
        db.cmd("RPUSH l a b a c a");
        db.replies(&[
            ("LSET l 1 B", "+OK\r\n"),
            ("LSET l 9 B", "-ERR index out of range\r\n"),
            ("LSET nope 0 B", "-ERR no such key\r\n"),
            ("LPOS l a", ":0\r\n"),
            ("LPOS l a RANK 2", ":2\r\n"),
            ("LPOS l a RANK -1", ":4\r\n"),
            ("LPOS l a COUNT 0", "*3\r\n:0\r\n:2\r\n:4\r\n"),
            ("LPOS l a RANK -1 COUNT 2", "*2\r\n:4\r\n:2\r\n"),
            ("LPOS l a COUNT 0 MAXLEN 3", "*2\r\n:0\r\n:2\r\n"),
            ("LPOS l z", "$-1\r\n"),
            ("LPOS nope z COUNT 1", "*0\r\n"),
        ]);
        assert!(db
            .cmd("LPOS l a RANK 0")
            .starts_with("-ERR RANK can't be zero"));
        db.replies(&[
            ("LPOS l a COUNT -1", "-ERR COUNT can't be negative\r\n"),
            ("LPOS l a MAXLEN -1", "-ERR MAXLEN can't be negative\r\n"),
            ("LPOS l a FOO 1", "-ERR syntax error\r\n"),
            ("LINSERT l BEFORE c x", ":6\r\n"),
            ("LINSERT l AFTER zz x", ":-1\r\n"),
            ("LINSERT nope AFTER a x", ":0\r\n"),
            ("LINSERT l UNDER a x", "-ERR syntax error\r\n"),
            ("LREM l -1 a", ":1\r\n"),
            (
                "LRANGE l 0 -1",
                "*5\r\n$1\r\na\r\n$1\r\nB\r\n$1\r\na\r\n$1\r\nx\r\n$1\r\nc\r\n",
            ),
            ("LREM l 0 a", ":2\r\n"),
            ("LTRIM l 1 -1", "+OK\r\n"),
            ("LRANGE l 0 -1", "*2\r\n$1\r\nx\r\n$1\r\nc\r\n"),
            ("LTRIM l 5 1", "+OK\r\n"),
            ("EXISTS l", ":0\r\n"),
        ]);
    }

    #[test]
    fn lpos_walks_long_lists_from_either_end() {
        let mut db = Db::new();
        let mut args: Vec<String> = vec!["RPUSH".into(), "l".into()];
        args.extend((0..2000).map(|i| (i % 700).to_string()));
        db.cmd(&args.join(" "));
        db.replies(&[
            ("LPOS l 5 COUNT 0", "*3\r\n:5\r\n:705\r\n:1405\r\n"),
            ("LPOS l 5 RANK -1", ":1405\r\n"),
            ("LPOS l 5 RANK -3", ":5\r\n"),
            ("LPOS l 5 RANK 4", "$-1\r\n"),
        ]);
    }

    #[test]
    fn lmove_rpoplpush_and_wrong_types() {
        let mut db = Db::new();
        db.cmd("RPUSH a 1 2 3");
        db.replies(&[
            ("LMOVE a b LEFT RIGHT", "$1\r\n1\r\n"),
            ("RPOPLPUSH a b", "$1\r\n3\r\n"),
            ("LRANGE b 0 -1", "*2\r\n$1\r\n3\r\n$1\r\n1\r\n"),
            // Rotation of one list.
            ("LMOVE b b LEFT RIGHT", "$1\r\n3\r\n"),
            ("LRANGE b 0 -1", "*2\r\n$1\r\n1\r\n$1\r\n3\r\n"),
            ("LMOVE nope b LEFT RIGHT", "$-1\r\n"),
            ("LMOVE a b UP RIGHT", "-ERR syntax error\r\n"),
        ]);
        db.cmd("SET s v");
        db.replies(&[("LMOVE a s LEFT LEFT", WT), ("LLEN a", ":1\r\n")]);
        db.each_replies(
            &[
                "LPUSH s x",
                "LLEN s",
                "LRANGE s 0 1",
                "LPOP s",
                "LINDEX s 0",
                "LSET s 0 x",
                "LPOS s x",
                "RPOPLPUSH s a",
            ],
            WT,
        );
        assert_eq!(db.cmd("GET s"), "$1\r\nv\r\n");
    }
}
