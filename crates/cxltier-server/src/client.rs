//! The CLIENT family: LIST, INFO, KILL, SETNAME/GETNAME, ID, REPLY, NO-EVICT, PAUSE,
//! UNBLOCK and the rest, over the connections the server keeps in [`ServerInfo::clients`].

use cxltier_store::StoreError;

use crate::context::*;
use crate::resp::reply;

/// One line of CLIENT LIST / CLIENT INFO, in Redis 7's fields.
fn client_line(t: &mut String, id: u64, m: &ClientMeta, now: std::time::Instant, blocked: bool) {
    use std::fmt::Write;
    let mut flags = String::new();
    // Parked by a blocking command (Redis's `b`).
    if blocked {
        flags.push('b');
    }
    // A replica (Redis's `S`).
    if m.replica {
        flags.push('S');
    }
    if m.sub + m.psub + m.ssub > 0 {
        flags.push('P');
    }
    if m.multi >= 0 {
        flags.push('x');
    }
    if m.no_evict {
        flags.push('e');
    }
    if flags.is_empty() {
        flags.push('N');
    }
    let _ = writeln!(
        t,
        "id={id} addr={} laddr={} fd={} name={} age={} idle={} flags={flags} db={} sub={} psub={} ssub={} multi={} qbuf={} qbuf-free=0 argv-mem=0 multi-mem=0 rbs=16384 rbp=0 obl=0 oll=0 omem={} tot-mem={} events=r cmd={} user=default redir=-1 resp={}",
        m.addr,
        m.laddr,
        m.fd,
        String::from_utf8_lossy(m.name.as_deref().unwrap_or_default()),
        now.saturating_duration_since(m.created).as_secs(),
        now.saturating_duration_since(m.last_active).as_secs(),
        m.db,
        m.sub,
        m.psub,
        m.ssub,
        m.multi,
        m.qbuf,
        m.omem,
        m.qbuf + m.omem,
        m.last_cmd.to_ascii_lowercase(),
        m.proto.max(2),
    );
}

/// The caller's own line is built from its session, which is current; the others' from what
/// the server last recorded of them.
fn client_meta(ctx: &Ctx<'_>, id: u64) -> Option<ClientMeta> {
    let mut m = ctx.info.clients.get(&id)?.clone();
    if id == ctx.session.id {
        m.update_from(ctx.session);
        m.last_active = std::time::Instant::now();
    }
    Some(m)
}

/// A `CLIENT KILL` filter: which connections it closes.
#[derive(Default)]
struct KillFilter {
    id: Option<u64>,
    addr: Option<Vec<u8>>,
    laddr: Option<Vec<u8>>,
    user: Option<Vec<u8>>,
    /// TYPE: normal or pubsub (there are no masters or replicas: those match nothing).
    kind: Option<&'static str>,
    skipme: bool,
}

fn parse_kill_filter(args: &[&[u8]]) -> Result<KillFilter, &'static str> {
    let mut f = KillFilter {
        skipme: true,
        ..KillFilter::default()
    };
    if args.len() % 2 != 0 {
        return Err(SYNTAX);
    }
    for pair in args.chunks(2) {
        let v = pair[1];
        match pair[0].to_ascii_uppercase().as_slice() {
            b"ID" => match parse_i64(v) {
                Some(id) if id > 0 => f.id = Some(id as u64),
                _ => return Err("ERR client-id should be greater than 0"),
            },
            b"ADDR" => f.addr = Some(v.to_vec()),
            b"LADDR" => f.laddr = Some(v.to_vec()),
            b"USER" => f.user = Some(v.to_vec()),
            b"SKIPME" => match v.to_ascii_lowercase().as_slice() {
                b"yes" => f.skipme = true,
                b"no" => f.skipme = false,
                _ => return Err(SYNTAX),
            },
            b"TYPE" => match v.to_ascii_lowercase().as_slice() {
                b"normal" => f.kind = Some("normal"),
                b"pubsub" => f.kind = Some("pubsub"),
                b"master" | b"slave" | b"replica" => f.kind = Some("replica"),
                _ => return Err("ERR Unknown client type"),
            },
            b"MAXAGE" => match parse_i64(v) {
                Some(_) => {}
                None => return Err(NOT_INT),
            },
            _ => return Err(SYNTAX),
        }
    }
    Ok(f)
}

pub(crate) fn client(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let n = args.len();
    let sub = args[1].to_ascii_uppercase();
    let proto = ctx.session.proto;
    let wrong =
        |ctx: &mut Ctx<'_>| fail(ctx, &crate::errors::unknown_subcommand("CLIENT", args[1]));
    match (sub.as_slice(), n) {
        (b"ID", 2) => reply::int(ctx.out, ctx.session.id as i64),
        (b"SETNAME", 3) => {
            if !valid_client_name(args[2]) {
                return fail(ctx, BAD_CLIENT_NAME);
            }
            ctx.session.name = (!args[2].is_empty()).then(|| args[2].to_vec());
            reply::ok(ctx.out);
        }
        (b"GETNAME", 2) => match &ctx.session.name {
            Some(nm) => reply::bulk(ctx.out, nm),
            None => reply::null(ctx.out, proto),
        },
        // Redis 7.2's library name and version: accepted, as clients send them at connect.
        (b"SETINFO", 4) => reply::ok(ctx.out),
        (b"INFO", 2) => {
            let mut t = String::new();
            if let Some(m) = client_meta(ctx, ctx.session.id) {
                client_line(&mut t, ctx.session.id, &m, std::time::Instant::now(), false);
            }
            reply::verbatim(ctx.out, proto, "txt", t.as_bytes());
        }
        (b"LIST", _) => {
            // CLIENT LIST [TYPE normal|master|replica|pubsub] [ID id ...]
            let mut ids: Vec<u64> = ctx.info.clients.keys().copied().collect();
            ids.sort_unstable();
            let mut want_kind = None;
            let rest = &args[2..];
            if let Some(kind) = rest.first() {
                match (kind.to_ascii_uppercase().as_slice(), rest.len()) {
                    (b"TYPE", 2) => match rest[1].to_ascii_lowercase().as_slice() {
                        b"normal" => want_kind = Some("normal"),
                        b"pubsub" => want_kind = Some("pubsub"),
                        b"slave" | b"replica" => want_kind = Some("replica"),
                        // cxltier is no replica: it has no master link.
                        b"master" => ids.clear(),
                        _ => {
                            return fail(
                                ctx,
                                &format!(
                                    "ERR Unknown client type '{}'",
                                    String::from_utf8_lossy(rest[1])
                                ),
                            )
                        }
                    },
                    (b"ID", k) if k >= 2 => {
                        let mut wanted = Vec::new();
                        for v in &rest[1..] {
                            match parse_i64(v) {
                                Some(id) if id > 0 => wanted.push(id as u64),
                                _ => return fail(ctx, "ERR Invalid client ID"),
                            }
                        }
                        ids.retain(|id| wanted.contains(id));
                    }
                    _ => return fail(ctx, SYNTAX),
                }
            }
            let now = std::time::Instant::now();
            let mut t = String::new();
            for id in ids {
                if let Some(m) = client_meta(ctx, id) {
                    if want_kind.is_none_or(|k| k == m.kind()) {
                        client_line(&mut t, id, &m, now, ctx.info.blocked.contains(&id));
                    }
                }
            }
            reply::verbatim(ctx.out, proto, "txt", t.as_bytes());
        }
        (b"KILL", 3) => {
            // The old form: CLIENT KILL addr:port.
            let found = ctx
                .info
                .clients
                .iter()
                .find(|(_, m)| m.addr.as_bytes() == args[2])
                .map(|(&id, _)| id);
            match found {
                Some(id) => {
                    ctx.info.kill.push(id);
                    reply::ok(ctx.out);
                }
                None => return fail(ctx, "ERR No such client"),
            }
        }
        (b"KILL", _) if n >= 4 => {
            let f = match parse_kill_filter(&args[2..]) {
                Ok(f) => f,
                Err(e) => return fail(ctx, e),
            };
            let me = ctx.session.id;
            // The caller's own type from its session, which is current.
            let my_kind = if ctx.session.is_replica {
                "replica"
            } else if ctx.session.subscribed() {
                "pubsub"
            } else {
                "normal"
            };
            let mut killed: Vec<u64> = ctx
                .info
                .clients
                .iter()
                .filter(|(&id, m)| {
                    f.kind
                        .is_none_or(|k| k == if id == me { my_kind } else { m.kind() })
                        && f.id.is_none_or(|want| want == id)
                        && f.addr.as_deref().is_none_or(|a| a == m.addr.as_bytes())
                        && f.laddr.as_deref().is_none_or(|a| a == m.laddr.as_bytes())
                        && f.user.as_deref().is_none_or(|u| u == b"default")
                        && !(f.skipme && id == me)
                })
                .map(|(&id, _)| id)
                .collect();
            killed.sort_unstable();
            reply::int(ctx.out, killed.len() as i64);
            ctx.info.kill.extend(killed);
        }
        // The connection is woken by the server after this command: with an error, or as if
        // its timeout had passed.
        (b"UNBLOCK", 3 | 4) => {
            let Some(id) = parse_i64(args[2]) else {
                return fail(ctx, NOT_INT);
            };
            let error = match args.get(3).map(|a| a.to_ascii_uppercase()) {
                None => false,
                Some(m) if m == b"TIMEOUT" => false,
                Some(m) if m == b"ERROR" => true,
                Some(_) => {
                    return fail(ctx, "ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR")
                }
            };
            let id = id as u64;
            let blocked =
                ctx.info.blocked.contains(&id) && !ctx.info.unblock.iter().any(|u| u.0 == id);
            if blocked {
                ctx.info.unblock.push((id, error));
            }
            reply::int(ctx.out, blocked as i64);
        }
        (b"NO-EVICT", 3) => match args[2].to_ascii_lowercase().as_slice() {
            b"on" => {
                ctx.session.no_evict = true;
                reply::ok(ctx.out);
            }
            b"off" => {
                ctx.session.no_evict = false;
                reply::ok(ctx.out);
            }
            _ => return fail(ctx, SYNTAX),
        },
        // Inside EXEC it would leave a hole in EXEC's array of replies.
        (b"REPLY", 3) if ctx.session.in_exec => {
            return fail(ctx, "ERR CLIENT REPLY is not allowed inside a transaction")
        }
        (b"REPLY", 3) => match args[2].to_ascii_lowercase().as_slice() {
            b"on" => {
                ctx.session.reply_off = false;
                ctx.session.reply_skip = 0;
                reply::ok(ctx.out);
            }
            // No reply to these: the server drops what this command writes, and with SKIP
            // the next command's reply too.
            b"off" => ctx.session.reply_off = true,
            b"skip" => ctx.session.reply_skip = 2,
            _ => return fail(ctx, SYNTAX),
        },
        (b"HELP", 2) => {
            let lines = [
                "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "ID",
                "    Return the ID of the current connection.",
                "INFO",
                "    Return information about the current client connection.",
                "GETNAME",
                "    Return the name of the current connection.",
                "SETNAME <name>",
                "    Assign the name <name> to the current connection.",
                "LIST [TYPE (NORMAL|MASTER|REPLICA|PUBSUB)] [ID <id> [<id> ...]]",
                "    Return information about client connections.",
                "KILL <ip:port>",
                "    Kill connection made from <ip:port>.",
                "KILL <option> <value> [<option> <value> [...]]",
                "    Kill connections. Options are: ID, ADDR, LADDR, USER, TYPE, SKIPME, MAXAGE.",
                "NO-EVICT (ON|OFF)",
                "    Protect the current client connection from eviction.",
                "REPLY (ON|OFF|SKIP)",
                "    Control the replies sent to the current connection.",
            ];
            reply::simple_lines(ctx.out, &lines);
        }
        _ => return wrong(ctx),
    }
    Ok(Effect::Read)
}

#[cfg(test)]
mod tests {

    use super::*;

    use crate::testdb::*;

    #[test]
    fn client_subcommands() {
        let mut db = Db::large();
        db.session.id = 7;
        let now = std::time::Instant::now();
        for (id, addr) in [(7u64, "127.0.0.1:5000"), (8, "127.0.0.1:5001")] {
            db.info.clients.insert(
                id,
                ClientMeta::new(addr.into(), "127.0.0.1:6379".into(), 9, now),
            );
        }
        db.replies(&[
            ("CLIENT ID", ":7\r\n"),
            ("CLIENT SETNAME worker", "+OK\r\n"),
        ]);
        assert!(db
            .cmd("CLIENT SETNAME a b")
            .contains("wrong number of arguments"));
        let list = db.cmd("CLIENT LIST");
        assert!(
            list.contains("id=7 addr=127.0.0.1:5000 laddr=127.0.0.1:6379 fd=9 name=worker "),
            "{list}"
        );
        assert!(list.contains("cmd=client "), "{list}");
        assert!(list.contains("id=8 addr=127.0.0.1:5001 "), "{list}");
        assert!(!db.cmd("CLIENT LIST ID 8").contains("id=7"));
        assert!(db.cmd("CLIENT LIST TYPE pubsub").starts_with("$0\r\n"));
        assert!(db.cmd("CLIENT INFO").contains("id=7 "));
        assert_eq!(db.cmd("CLIENT NO-EVICT on"), "+OK\r\n");
        assert!(db.cmd("CLIENT INFO").contains(" flags=e "));
        // KILL: the old form by address, and filters (SKIPME yes by default).
        db.replies(&[
            ("CLIENT KILL 127.0.0.1:9", "-ERR No such client\r\n"),
            ("CLIENT KILL ID 7", ":0\r\n"),
            ("CLIENT KILL ID 7 SKIPME no", ":1\r\n"),
            ("CLIENT KILL LADDR 127.0.0.1:6379", ":1\r\n"),
            ("CLIENT KILL 127.0.0.1:5001", "+OK\r\n"),
        ]);
        assert_eq!(db.info.kill, [7, 8, 8]);
        db.replies_starting(&[
            (
                "CLIENT KILL ID 0",
                "-ERR client-id should be greater than 0",
            ),
            ("CLIENT KILL ID", "-ERR"),
            ("CLIENT NOPE", "-ERR unknown subcommand"),
        ]);
        // REPLY: OFF and SKIP write nothing and mark what the server drops.
        assert_eq!(db.cmd("CLIENT REPLY SKIP"), "");
        assert!(db.session.drop_reply() && db.session.drop_reply());
        assert!(!db.session.drop_reply());
        assert_eq!(db.cmd("CLIENT REPLY OFF"), "");
        assert!(db.session.drop_reply() && db.session.drop_reply());
        assert_eq!(db.cmd("CLIENT REPLY ON"), "+OK\r\n");
        assert!(!db.session.drop_reply());
        // Subscribed: type pubsub, flag P, sub counted; in MULTI: flag x.
        db.cmd("HELLO 3");
        db.cmd("SUBSCRIBE ch");
        let pubsub = db.cmd("CLIENT LIST TYPE pubsub");
        assert!(
            pubsub.contains("id=7 ") && !pubsub.contains("id=8 "),
            "{pubsub}"
        );
        assert!(
            pubsub.contains(" flags=Pe ") && pubsub.contains(" sub=1 psub=0 "),
            "{pubsub}"
        );
        assert!(!db.cmd("CLIENT LIST TYPE normal").contains("id=7 "));
        assert_eq!(db.cmd("CLIENT KILL TYPE normal SKIPME no"), ":1\r\n");
        db.cmd("MULTI");
        db.cmd("GET k");
        db.cmd("DISCARD");
    }

    /// Redis's "PubSub messages with CLIENT REPLY OFF": subscription confirmations and
    /// messages are pushes, sent whatever CLIENT REPLY says (RESP2 and RESP3 alike); only the
    /// replies go. The old server dropped them with the reply, and the subscriber waited for ever.
    #[test]
    fn pushes_are_sent_under_client_reply_off_and_skip() {
        for proto in ["2", "3"] {
            let mut db = Db::large();
            db.session.id = 1;
            served(&mut db, &format!("HELLO {proto}"));
            let push = if proto == "3" { ">" } else { "*" };
            // Each line and what the server sends for it, a push's type written `{push}`.
            let script: &[(&str, &str)] = &[
                ("CLIENT REPLY OFF", ""),
                (
                    "SUBSCRIBE ch",
                    "{push}3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n",
                ),
                (
                    "PSUBSCRIBE c*",
                    "{push}3\r\n$10\r\npsubscribe\r\n$2\r\nc*\r\n:2\r\n",
                ),
                // PING's answer is a reply, not a push: dropped.
                ("PING", ""),
                (
                    "UNSUBSCRIBE ch",
                    "{push}3\r\n$11\r\nunsubscribe\r\n$2\r\nch\r\n:1\r\n",
                ),
                (
                    "PUNSUBSCRIBE",
                    "{push}3\r\n$12\r\npunsubscribe\r\n$2\r\nc*\r\n:0\r\n",
                ),
                ("CLIENT REPLY ON", "+OK\r\n"),
                // SKIP: the next command's reply goes, its pushes stay.
                ("CLIENT REPLY SKIP", ""),
                (
                    "SUBSCRIBE x",
                    "{push}3\r\n$9\r\nsubscribe\r\n$1\r\nx\r\n:1\r\n",
                ),
            ];
            for (line, want) in script {
                let want = want.replace("{push}", push);
                assert_eq!(served(&mut db, line), want, "RESP{proto}: {line}");
            }
            assert!(!served(&mut db, "PING").is_empty());
        }
        // RESP3: a message to itself survives OFF, PUBLISH's count does not.
        let mut db = Db::large();
        served(&mut db, "HELLO 3");
        served(&mut db, "SUBSCRIBE ch");
        served(&mut db, "CLIENT REPLY OFF");
        assert_eq!(
            served(&mut db, "PUBLISH ch hi"),
            ">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n"
        );
    }
}
