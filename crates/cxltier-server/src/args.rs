//! What handlers of several kinds parse and answer alike: integers as Redis reads them, the
//! WRONGTYPE answer, SCAN's `MATCH`/`COUNT` options, the bound on a reply whose size a count
//! decides, random draws from a collection (SRANDMEMBER, ZRANDMEMBER), and floats as Redis
//! prints them.

use cxltier_store::StoreError;
use rand::Rng;

use crate::context::{Ctx, Effect};
use crate::errors::NOT_INT;
use crate::errors::{SYNTAX, WRONGTYPE};
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

/// Redis's strict integer syntax (no sign `+`, no spaces).
pub(crate) fn int_arg(b: &[u8]) -> Option<i64> {
    if b.first() == Some(&b'+') {
        return None;
    }
    std::str::from_utf8(b).ok()?.parse().ok()
}

/// `[MATCH pattern] [COUNT count]` of the SCAN family: `Err` is the reply already given.
pub(crate) fn scan_options<'a>(
    ctx: &mut Ctx<'_>,
    opts: &[&'a [u8]],
) -> Result<(Option<&'a [u8]>, usize), ()> {
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

/// A float the way INCRBYFLOAT stores it: no exponent, no trailing zeros (Rust's shortest
/// round-trip form prints `10.6`, not `10.5999999999999996`).
pub(crate) fn format_f64(f: f64) -> String {
    if f == 0.0 {
        return "0".into();
    }
    format!("{f}")
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
        });
    }
    Effect::Read
}
