//! Pub/sub: SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE (shard channels), their UNSUBSCRIBEs, PUBLISH,
//! SPUBLISH and PUBSUB.
//!
//! A handler sees only its own connection, so PUBLISH leaves each message for another
//! connection in [`PubSub::outbox`]; the server moves them into those connections' output
//! buffers after the turn's commands, writing each in its subscriber's protocol (an array in
//! RESP2, a push in RESP3). Subscribers' unread messages are bounded by Redis's pubsub class of
//! the output buffer limits ([`crate::limits::PUBSUB_OUTPUT_LIMIT`]).

use std::rc::Rc;

use cxltier_store::StoreError;

use crate::context::{Ctx, Effect, Session};
use crate::resp::reply;
use crate::subscriptions::{
    deliveries, remove, write_message, Delivery, Kind, PubSub, Subscribers,
};

/// The confirmation of one (un)subscription: kind, name (null for an UNSUBSCRIBE of nothing),
/// and the connection's subscriptions after it (its channels and patterns; for a shard
/// channel, its shard channels, as Redis counts them).
/// A push message, as Redis's CLIENT_PUSHING: sent even under CLIENT REPLY OFF or SKIP.
fn confirm(ctx: &mut Ctx<'_>, what: &[u8], kind: Kind, name: Option<&[u8]>) {
    let count = match kind {
        Kind::Shard => ctx.session.shard_channels.len(),
        _ => ctx.session.channels.len() + ctx.session.patterns.len(),
    };
    let proto = ctx.session.proto;
    let start = ctx.out.len();
    reply::push(ctx.out, proto, 3);
    reply::bulk(ctx.out, what);
    match name {
        Some(n) => reply::bulk(ctx.out, n),
        None => reply::null(ctx.out, proto),
    }
    reply::int(ctx.out, count as i64);
    ctx.session.pushed.push(start..ctx.out.len());
}

/// (Un)subscribing inside EXEC would write one reply per channel into EXEC's array, which holds
/// one per command: refused there (Redis refuses SUBSCRIBE in a transaction too).
fn refused_in_exec(ctx: &mut Ctx<'_>, name: &str) -> bool {
    if ctx.session.in_exec {
        reply::error(
            ctx.out,
            &format!("ERR {name} isn't allowed inside a transaction"),
        );
    }
    ctx.session.in_exec
}

/// The session's subscriptions of `kind` and the server's.
fn lists<'a>(
    session: &'a mut Session,
    ps: &'a mut PubSub,
    kind: Kind,
) -> (&'a mut Vec<Vec<u8>>, &'a mut Subscribers) {
    match kind {
        Kind::Channel => (&mut session.channels, &mut ps.channels),
        Kind::Pattern => (&mut session.patterns, &mut ps.patterns),
        Kind::Shard => (&mut session.shard_channels, &mut ps.shard_channels),
    }
}

fn subscribe_to(ctx: &mut Ctx<'_>, names: &[&[u8]], kind: Kind) -> Result<Effect, StoreError> {
    let command = kind.command(true);
    if refused_in_exec(ctx, command) {
        return Ok(Effect::Read);
    }
    let what = command.to_ascii_lowercase();
    for &name in names {
        let id = ctx.session.id;
        let (mine, all) = lists(ctx.session, &mut ctx.info.pubsub, kind);
        if !mine.iter().any(|c| c == name) {
            mine.push(name.to_vec());
            all.entry(name.to_vec()).or_default().push(id);
        }
        confirm(ctx, what.as_bytes(), kind, Some(name));
    }
    Ok(Effect::Read)
}

fn unsubscribe_from(ctx: &mut Ctx<'_>, names: &[&[u8]], kind: Kind) -> Result<Effect, StoreError> {
    let command = kind.command(false);
    if refused_in_exec(ctx, command) {
        return Ok(Effect::Read);
    }
    let what = command.to_ascii_lowercase();
    // Without names: all of them; none at all still gets one confirmation, with a null name.
    let names: Vec<Vec<u8>> = if names.is_empty() {
        lists(ctx.session, &mut ctx.info.pubsub, kind).0.clone()
    } else {
        names.iter().map(|n| n.to_vec()).collect()
    };
    if names.is_empty() {
        confirm(ctx, what.as_bytes(), kind, None);
    }
    for name in names {
        let id = ctx.session.id;
        let (mine, all) = lists(ctx.session, &mut ctx.info.pubsub, kind);
        if let Some(i) = mine.iter().position(|c| *c == name) {
            mine.remove(i);
            remove(all, &name, id);
        }
        confirm(ctx, what.as_bytes(), kind, Some(&name));
    }
    Ok(Effect::Read)
}

pub(crate) fn subscribe(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    subscribe_to(ctx, &args[1..], Kind::Channel)
}

pub(crate) fn psubscribe(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    subscribe_to(ctx, &args[1..], Kind::Pattern)
}

pub(crate) fn ssubscribe(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    subscribe_to(ctx, &args[1..], Kind::Shard)
}

pub(crate) fn unsubscribe(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    unsubscribe_from(ctx, &args[1..], Kind::Channel)
}

pub(crate) fn punsubscribe(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    unsubscribe_from(ctx, &args[1..], Kind::Pattern)
}

pub(crate) fn sunsubscribe(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    unsubscribe_from(ctx, &args[1..], Kind::Shard)
}

/// Send `deliveries`, and reply with how many there were (PUBLISH, SPUBLISH). A RESP3 client
/// may publish to itself: its message comes before the reply, as in Redis. Inside EXEC it would
/// land in the middle of EXEC's array (a client reads it as one of the replies): there it goes
/// out after the turn, like everyone else's.
fn send(ctx: &mut Ctx<'_>, deliveries: Vec<Delivery>) -> Result<Effect, StoreError> {
    let n = deliveries.len();
    for d in deliveries {
        if d.to == ctx.session.id && !ctx.session.in_exec {
            let start = ctx.out.len();
            write_message(ctx.out, ctx.session.proto, &d);
            ctx.session.pushed.push(start..ctx.out.len());
        } else {
            ctx.info.pubsub.outbox.push(d);
        }
    }
    reply::int(ctx.out, n as i64);
    Ok(Effect::Read)
}

/// PUBLISH channel message: the number of subscriptions it reached (channel and patterns).
pub(crate) fn publish(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    // Replicated whether or not anyone listens (Redis: forceCommandPropagation).
    ctx.session.force_propagate = true;
    let deliveries = deliveries(&ctx.info.pubsub, args[1], args[2]);
    send(ctx, deliveries)
}

/// SPUBLISH shardchannel message: the number of the shard channel's subscribers (patterns and
/// plain channels of the same name do not hear it).
pub(crate) fn spublish(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    ctx.session.force_propagate = true;
    let deliveries: Vec<Delivery> = match ctx.info.pubsub.shard_channels.get(args[1]) {
        None => Vec::new(),
        Some(ids) => {
            let channel: Rc<[u8]> = Rc::from(args[1]);
            let payload: Rc<[u8]> = Rc::from(args[2]);
            ids.iter()
                .map(|&to| Delivery {
                    to,
                    pattern: None,
                    shard: true,
                    channel: channel.clone(),
                    payload: payload.clone(),
                })
                .collect()
        }
    };
    send(ctx, deliveries)
}

/// PUBSUB CHANNELS [pattern] | NUMSUB [channel ...] | NUMPAT | SHARDCHANNELS [pattern] |
/// SHARDNUMSUB [shardchannel ...] | HELP.
pub(crate) fn pubsub(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let sub = args[1].to_ascii_uppercase();
    let ps = &ctx.info.pubsub;
    match (sub.as_slice(), args.len()) {
        (b"CHANNELS" | b"SHARDCHANNELS", 2 | 3) => {
            let all = if sub == b"CHANNELS" {
                &ps.channels
            } else {
                &ps.shard_channels
            };
            let mut names: Vec<&Vec<u8>> = all
                .keys()
                .filter(|c| {
                    args.get(2)
                        .is_none_or(|p| crate::glob::matches(p, c, false))
                })
                .collect();
            names.sort();
            reply::array(ctx.out, names.len());
            for n in names {
                reply::bulk(ctx.out, n);
            }
        }
        // Redis 7.0 answers a flat array of name, count pairs, in RESP3 too.
        (b"NUMSUB" | b"SHARDNUMSUB", _) => {
            let all = if sub == b"NUMSUB" {
                &ps.channels
            } else {
                &ps.shard_channels
            };
            let counts: Vec<(&[u8], usize)> = args[2..]
                .iter()
                .map(|c| (*c, all.get(*c).map_or(0, Vec::len)))
                .collect();
            reply::array(ctx.out, 2 * counts.len());
            for (c, n) in counts {
                reply::bulk(ctx.out, c);
                reply::int(ctx.out, n as i64);
            }
        }
        (b"NUMPAT", 2) => {
            let n = ps.patterns.len();
            reply::int(ctx.out, n as i64);
        }
        (b"HELP", 2) => {
            let lines = [
                "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "CHANNELS [<pattern>]",
                "    Return the currently active channels matching a <pattern> (default: '*').",
                "NUMPAT",
                "    Return number of subscriptions to patterns.",
                "NUMSUB [<channel> ...]",
                "    Return the number of subscribers for the specified channels, excluding",
                "    pattern subscriptions(default: no channels).",
                "SHARDCHANNELS [<pattern>]",
                "    Return the currently active shard level channels matching a <pattern> (default: '*').",
                "SHARDNUMSUB [<shardchannel> ...]",
                "    Return the number of subscribers for the specified shard level channel(s)",
                "HELP",
                "    Prints this help.",
            ];
            reply::simple_lines(ctx.out, &lines);
        }
        _ => reply::error(
            ctx.out,
            &crate::errors::unknown_subcommand("PUBSUB", args[1]),
        ),
    }
    Ok(Effect::Read)
}

#[cfg(test)]
mod tests {

    use crate::testdb::*;

    #[test]
    fn pubsub_subscriptions_messages_and_subscribed_mode() {
        let (mut db, mut other) = Db::two_connections();
        db.replies(&[
            (
                "SUBSCRIBE a b",
                "*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n*3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:2\r\n",
            ),
            ("PSUBSCRIBE n*", "*3\r\n$10\r\npsubscribe\r\n$2\r\nn*\r\n:3\r\n"),
        ]);
        // RESP2 subscribed mode: only the pub/sub commands, PING, QUIT and RESET.
        db.replies_starting(&[
            ("GET k", "-ERR Can't execute 'get': only (P|S)SUBSCRIBE"),
            ("PUBLISH a x", "-ERR Can't execute 'publish'"),
        ]);
        assert_eq!(db.cmd("PING"), "*2\r\n$4\r\npong\r\n$0\r\n\r\n");
        // Another connection publishes: one message for the channel, one for the pattern.
        db.replies_as(
            &mut other,
            &[
                ("PUBLISH a hi", ":1\r\n"),
                ("PUBLISH news hi", ":1\r\n"),
                ("PUBLISH zzz hi", ":0\r\n"),
            ],
        );
        let mut msgs = Vec::new();
        for d in std::mem::take(&mut db.info.pubsub.outbox) {
            assert_eq!(d.to, 1);
            crate::subscriptions::write_message(&mut msgs, 2, &d);
        }
        assert_eq!(
            String::from_utf8(msgs).unwrap(),
            "*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$2\r\nhi\r\n*4\r\n$8\r\npmessage\r\n$2\r\nn*\r\n$4\r\nnews\r\n$2\r\nhi\r\n"
        );
        db.replies_as(
            &mut other,
            &[
                ("PUBSUB CHANNELS", "*2\r\n$1\r\na\r\n$1\r\nb\r\n"),
                (
                    "PUBSUB NUMSUB a zzz",
                    "*4\r\n$1\r\na\r\n:1\r\n$3\r\nzzz\r\n:0\r\n",
                ),
                ("PUBSUB NUMPAT", ":1\r\n"),
            ],
        );
        // UNSUBSCRIBE without names: all channels; then nothing left gives a null name.
        db.replies(&[
            (
                "UNSUBSCRIBE",
                "*3\r\n$11\r\nunsubscribe\r\n$1\r\na\r\n:2\r\n*3\r\n$11\r\nunsubscribe\r\n$1\r\nb\r\n:1\r\n",
            ),
            ("PUNSUBSCRIBE", "*3\r\n$12\r\npunsubscribe\r\n$2\r\nn*\r\n:0\r\n"),
            ("UNSUBSCRIBE", "*3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n"),
            ("GET k", "$-1\r\n"),
        ]);
        assert!(db.info.pubsub.channels.is_empty() && db.info.pubsub.patterns.is_empty());
        // RESP3: pushes, other commands allowed, a message to oneself before PUBLISH's reply.
        db.cmd("HELLO 3");
        db.replies(&[
            ("SUBSCRIBE c", ">3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n"),
            ("GET k", "_\r\n"),
            (
                "PUBLISH c me",
                ">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$2\r\nme\r\n:1\r\n",
            ),
            ("RESET", "+RESET\r\n"),
        ]);
        assert!(db.info.pubsub.channels.is_empty());
    }

    /// Shard channels (SSUBSCRIBE, SUNSUBSCRIBE, SPUBLISH, PUBSUB SHARDCHANNELS|SHARDNUMSUB):
    /// their own namespace and their own count in confirmations, as in Redis 7.0; NUMSUB and
    /// SHARDNUMSUB answer a flat array in RESP3 too (NUMSUB used to answer a map there).
    #[test]
    fn shard_channels_are_a_namespace_of_their_own() {
        let (mut db, mut other) = Db::two_connections();
        db.replies(&[
            (
                "SSUBSCRIBE c d",
                "*3\r\n$10\r\nssubscribe\r\n$1\r\nc\r\n:1\r\n*3\r\n$10\r\nssubscribe\r\n$1\r\nd\r\n:2\r\n",
            ),
            // A channel of the same name counts apart, and both are in subscribed mode.
            ("SUBSCRIBE c", "*3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n"),
        ]);
        assert!(db.cmd("GET k").starts_with("-ERR Can't execute 'get'"));
        db.replies_as(
            &mut other,
            &[("SPUBLISH c m", ":1\r\n"), ("PUBLISH c m", ":1\r\n")],
        );
        let kinds: Vec<&[u8]> = db
            .info
            .pubsub
            .outbox
            .iter()
            .map(|d| {
                if d.shard {
                    &b"smessage"[..]
                } else {
                    &b"message"[..]
                }
            })
            .collect();
        assert_eq!(kinds, [&b"smessage"[..], &b"message"[..]]);
        let mut msg = Vec::new();
        crate::subscriptions::write_message(&mut msg, 3, &db.info.pubsub.outbox[0]);
        assert_eq!(msg, b">3\r\n$8\r\nsmessage\r\n$1\r\nc\r\n$1\r\nm\r\n");
        db.info.pubsub.outbox.clear();
        run_as(&mut db, &mut other, "HELLO 3");
        db.replies_as(
            &mut other,
            &[
                (
                    "PUBSUB SHARDNUMSUB c zz",
                    "*4\r\n$1\r\nc\r\n:1\r\n$2\r\nzz\r\n:0\r\n",
                ),
                ("PUBSUB NUMSUB c", "*2\r\n$1\r\nc\r\n:1\r\n"),
                ("PUBSUB SHARDCHANNELS", "*2\r\n$1\r\nc\r\n$1\r\nd\r\n"),
            ],
        );
        // UNSUBSCRIBE of all leaves the shard channels; SUNSUBSCRIBE of all takes them.
        assert_eq!(
            db.cmd("UNSUBSCRIBE"),
            "*3\r\n$11\r\nunsubscribe\r\n$1\r\nc\r\n:0\r\n"
        );
        assert_eq!(run_as(&mut db, &mut other, "SPUBLISH d m"), ":1\r\n");
        db.replies(&[
            (
                "SUNSUBSCRIBE",
                "*3\r\n$12\r\nsunsubscribe\r\n$1\r\nc\r\n:1\r\n*3\r\n$12\r\nsunsubscribe\r\n$1\r\nd\r\n:0\r\n",
            ),
            ("SUNSUBSCRIBE", "*3\r\n$12\r\nsunsubscribe\r\n$-1\r\n:0\r\n"),
        ]);
        assert!(!db.session.subscribed());
        assert_eq!(run_as(&mut db, &mut other, "SPUBLISH d m"), ":0\r\n");
    }
}
