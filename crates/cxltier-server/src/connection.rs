//! The connection commands: PING, ECHO, SELECT, AUTH, HELLO, RESET and QUIT.

use cxltier_store::StoreError;

use crate::context::*;
use crate::resp::reply;
use crate::version::REDIS_VERSION;

pub(crate) fn ping(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    // Subscribed in RESP2: Redis answers a "pong" message, the argument or "" after it.
    if ctx.session.proto < 3 && ctx.session.subscribed() && args.len() <= 2 {
        reply::array(ctx.out, 2);
        reply::bulk(ctx.out, b"pong");
        reply::bulk(ctx.out, args.get(1).copied().unwrap_or_default());
        return Ok(Effect::Read);
    }
    match args.len() {
        1 => reply::simple(ctx.out, "PONG"),
        2 => reply::bulk(ctx.out, args[1]),
        _ => arity(ctx.out, args[0]),
    }
    Ok(Effect::Read)
}

pub(crate) fn echo(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    reply::bulk(ctx.out, args[1]);
    Ok(Effect::Read)
}

/// SELECT db
pub(crate) fn select(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    match ctx.info.dbs.parse(args[1]) {
        Ok(db) => {
            ctx.session.db = db;
            reply::ok(ctx.out);
            Ok(Effect::Read)
        }
        Err(msg) => fail(ctx, msg),
    }
}

pub(crate) fn auth(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let n = args.len();
    if n > 3 {
        return fail(ctx, SYNTAX);
    }
    let user = (n == 3).then(|| args[1]);
    match check_password(&ctx.info.acl.users, ctx.session, user, args[n - 1]) {
        Ok(()) => reply::ok(ctx.out),
        Err(msg) => {
            if msg.starts_with("WRONGPASS") {
                let name = user.unwrap_or(b"default");
                let session = &*ctx.session;
                ctx.info
                    .acl_deny(session, crate::acl::Reason::Auth, args[0], Some(name));
            }
            reply::error(ctx.out, msg)
        }
    }
    Ok(Effect::Read)
}

const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

/// AUTH's check (also HELLO's AUTH option): `user` (the default one when `None`) opened by
/// `given`, the connection then runs as it. Needs no more of the server than its users, so
/// that a busy script's restricted mode runs it too.
fn check_password(
    users: &crate::acl::Users,
    session: &mut Session,
    user: Option<&[u8]>,
    given: &[u8],
) -> Result<(), &'static str> {
    // A lone password with no password set is a mistake (clients configured with credentials
    // send a user too, which the default user without a password takes).
    if user.is_none() && users.default_nopass() {
        return Err("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?");
    }
    match users.authenticate(user.unwrap_or(b"default"), given) {
        Some(id) => {
            session.authed = true;
            session.user = id;
            Ok(())
        }
        None => Err(WRONGPASS),
    }
}

/// RESET: the connection as it was when accepted (RESP2, no name, replies on; authenticated
/// again only when no password is set).
pub(crate) fn reset(ctx: &mut Ctx<'_>, _args: &[&[u8]]) -> Result<Effect, StoreError> {
    ctx.info.unwatch(ctx.session);
    ctx.info.drop_subscriptions(ctx.session);
    ctx.info.monitors.remove(ctx.session.id);
    ctx.info.tracking.disable(ctx.session.id);
    let s = &mut *ctx.session;
    *s = Session {
        last_cmd: s.last_cmd,
        last_sub: s.last_sub,
        ..Session::new(s.id, !ctx.info.acl.users.auth_required())
    };
    reply::simple(ctx.out, "RESET");
    Ok(Effect::Read)
}

pub(crate) fn quit(ctx: &mut Ctx<'_>, _args: &[&[u8]]) -> Result<Effect, StoreError> {
    reply::ok(ctx.out);
    Ok(Effect::Close)
}

/// `HELLO [protover [AUTH username password] [SETNAME clientname]]`: choose RESP2 or RESP3,
/// authenticate and name the connection in one step; the reply is Redis's map (in the protocol
/// just chosen).
pub(crate) fn hello(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    if let Err(msg) = hello_in(ctx.session, &ctx.info.acl.users, args, ctx.out) {
        if msg.starts_with("WRONGPASS") {
            // The user HELLO named: the argument after AUTH.
            let name = args
                .iter()
                .position(|a| a.eq_ignore_ascii_case(b"AUTH"))
                .and_then(|i| args.get(i + 1))
                .copied()
                .unwrap_or_default();
            let session = &*ctx.session;
            ctx.info
                .acl_deny(session, crate::acl::Reason::Auth, args[0], Some(name));
        }
        return fail(ctx, &msg);
    }
    Ok(Effect::Read)
}

/// HELLO on a connection: its protocol, authentication and name; the reply, or the error to
/// answer. Needs no more of the server than its password (a busy script's restricted mode
/// runs it too).
fn hello_in(
    session: &mut Session,
    users: &crate::acl::Users,
    args: &[&[u8]],
    out: &mut Vec<u8>,
) -> Result<(), String> {
    let mut proto = session.proto.max(2);
    if let Some(v) = args.get(1) {
        match parse_i64(v) {
            Some(p @ 2..=3) => proto = p as u8,
            Some(_) => return Err("NOPROTO sorry, this protocol version is not supported.".into()),
            None => return Err("ERR Protocol version is not an integer or out of range".into()),
        }
    }
    let mut auth: Option<(&[u8], &[u8])> = None;
    let mut name: Option<&[u8]> = None;
    let mut i = 2;
    while i < args.len() {
        let opt = args[i].to_ascii_uppercase();
        match opt.as_slice() {
            b"AUTH" if i + 2 < args.len() => {
                auth = Some((args[i + 1], args[i + 2]));
                i += 3;
            }
            b"SETNAME" if i + 1 < args.len() => {
                name = Some(args[i + 1]);
                i += 2;
            }
            _ => {
                return Err(format!(
                    "ERR Syntax error in HELLO option '{}'",
                    String::from_utf8_lossy(args[i])
                ))
            }
        }
    }
    if let Some((user, pass)) = auth {
        check_password(users, session, Some(user), pass)?;
    }
    if users.auth_required() && !session.authed {
        return Err("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time".into());
    }
    if let Some(n) = name {
        if !valid_client_name(n) {
            return Err(BAD_CLIENT_NAME.into());
        }
        session.name = (!n.is_empty()).then(|| n.to_vec());
    }
    session.proto = proto;
    reply::map(out, proto, 7);
    reply::bulk(out, b"server");
    reply::bulk(out, b"redis");
    reply::bulk(out, b"version");
    reply::bulk(out, REDIS_VERSION.as_bytes());
    reply::bulk(out, b"proto");
    reply::int(out, proto as i64);
    reply::bulk(out, b"id");
    reply::int(out, session.id as i64);
    reply::bulk(out, b"mode");
    reply::bulk(out, b"standalone");
    reply::bulk(out, b"role");
    reply::bulk(out, b"master");
    reply::bulk(out, b"modules");
    reply::array(out, 0);
    Ok(())
}

/// AUTH while a script is busy: it needs only the password, so it runs.
pub(crate) fn auth_while_busy(b: &mut BusyCtx<'_>, args: &[&[u8]]) -> BusyOutcome {
    let n = args.len();
    if n > 3 {
        return b.refuse();
    }
    match check_password(b.users, b.session, (n == 3).then(|| args[1]), args[n - 1]) {
        Ok(()) => reply::ok(b.out),
        Err(msg) => reply::error(b.out, msg),
    }
    BusyOutcome::Answered
}

/// HELLO while a script is busy: the connection's own state and the password, so it runs.
pub(crate) fn hello_while_busy(b: &mut BusyCtx<'_>, args: &[&[u8]]) -> BusyOutcome {
    if let Err(msg) = hello_in(b.session, b.users, args, b.out) {
        reply::error(b.out, &msg);
    }
    BusyOutcome::Answered
}

/// QUIT while a script is busy: answered, then the connection closes.
pub(crate) fn quit_while_busy(b: &mut BusyCtx<'_>, _args: &[&[u8]]) -> BusyOutcome {
    reply::ok(b.out);
    BusyOutcome::Close
}

#[cfg(test)]
mod tests {

    use crate::testdb::*;

    fn db_catalog() -> &'static crate::acl::Catalog {
        crate::table::COMMANDS.acl()
    }

    /// HELLO 3 switches the connection to RESP3: maps, nulls, verbatim strings; HELLO 2 back.
    #[test]
    fn hello_chooses_resp3_and_replies_take_its_shapes() {
        let mut db = Db::large();
        db.cmd("HSET h f v");
        db.replies(&[
            ("HGETALL h", "*2\r\n$1\r\nf\r\n$1\r\nv\r\n"),
            ("GET missing", "$-1\r\n"),
        ]);
        let hello = db.cmd("HELLO 3");
        assert!(
            hello.starts_with("%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n"),
            "{hello}"
        );
        assert_has(
            &hello,
            &["$5\r\nproto\r\n:3\r\n", "$7\r\nversion\r\n$6\r\n7.0.15\r\n"],
        );
        db.replies(&[
            ("HGETALL h", "%1\r\n$1\r\nf\r\n$1\r\nv\r\n"),
            ("GET missing", "_\r\n"),
            ("HGET h nope", "_\r\n"),
            ("MGET missing", "*1\r\n_\r\n"),
            ("CLIENT GETNAME", "_\r\n"),
        ]);
        assert!(db.cmd("INFO server").starts_with('='));
        assert!(db.cmd("CONFIG GET maxclients").starts_with("%1\r\n"));
        assert!(db.cmd("COMMAND INFO get").contains("~"));
        // HELLO with no version answers in the protocol in force.
        assert!(db.cmd("HELLO").contains(":3\r\n"));
        assert!(db.cmd("HELLO 2").starts_with("*14\r\n"));
        db.replies(&[
            ("GET missing", "$-1\r\n"),
            (
                "HELLO 4",
                "-NOPROTO sorry, this protocol version is not supported.\r\n",
            ),
        ]);
        db.replies_starting(&[
            ("HELLO x", "-ERR Protocol version"),
            ("HELLO 3 BOGUS", "-ERR Syntax error in HELLO option"),
        ]);
        assert_eq!(db.session.proto, 2, "a failed HELLO changes nothing");
        assert!(db.cmd("HELLO 3 SETNAME me").starts_with('%'));
        assert_eq!(db.cmd("CLIENT GETNAME"), "$2\r\nme\r\n");
        assert!(db
            .cmd("HELLO 3 SETNAME a\tb")
            .starts_with("-ERR Client names cannot"));
    }

    #[test]
    fn auth_with_a_user_and_no_password_configured() {
        let mut db = Db::large();
        assert_eq!(db.cmd("AUTH default anything"), "+OK\r\n");
        db.replies_starting(&[
            ("HELLO 3 AUTH default anything", "%7"),
            ("AUTH someone x", "-WRONGPASS"),
            ("AUTH x", "-ERR AUTH <password> called without any password"),
        ]);
    }

    #[test]
    fn hello_authenticates_with_requirepass() {
        let mut db = Db::large();
        let catalog = db_catalog();
        db.info
            .acl
            .users_mut()
            .set_default_password(catalog, Some(b"pw"));
        db.session.authed = false;
        db.replies_starting(&[
            ("HELLO 3", "-NOAUTH HELLO must be called"),
            ("HELLO 3 AUTH default wrong", "-WRONGPASS"),
            ("HELLO 3 AUTH someone pw", "-WRONGPASS"),
        ]);
        assert_eq!(db.session.proto, 2);
        assert!(db
            .cmd("HELLO 3 AUTH default pw SETNAME app")
            .starts_with("%7"));
        assert!(db.session.authed);
        assert_eq!(db.session.name.as_deref(), Some(&b"app"[..]));
        assert_eq!(db.cmd("GET k"), "_\r\n");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 128, ..Default::default() })]
        /// Any sequence of the connection-level commands (protocol switches, transactions,
        /// subscriptions, reply suppression, resets) keeps every reply well framed: one frame
        /// per command, none for CLIENT REPLY OFF/SKIP, one per channel for (un)subscribing.
        #[test]
        fn connection_commands_keep_replies_framed(picks in proptest::collection::vec(0usize..26, 1..40)) {
            const LINES: [&str; 26] = [
                "HELLO 3", "HELLO 2", "MULTI", "EXEC", "DISCARD", "WATCH k", "UNWATCH",
                "SET k 1", "GET k", "HGETALL h", "HSET h f v", "SUBSCRIBE a b", "PSUBSCRIBE a*",
                "UNSUBSCRIBE", "PUNSUBSCRIBE", "PUBLISH a m", "PING", "CLIENT REPLY SKIP",
                "CLIENT REPLY OFF", "CLIENT REPLY ON", "RESET", "CONFIG GET maxclients",
                "COMMAND INFO get", "INCR k", "GET", "CLIENT LIST",
            ];
            let mut db = Db::large();
            for p in picks {
                let line = LINES[p];
                let words: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
                let out = db.run(&words);
                let dropped = db.session.drop_reply();
                let mut at = 0;
                let mut frames = 0;
                while at < out.len() {
                    at += frame_len(&out[at..]).map_err(|e| proptest::test_runner::TestCaseError::fail(format!("{line}: {e}: {:?}", String::from_utf8_lossy(&out))))?;
                    frames += 1;
                }
                let many = line.contains("SUBSCRIBE") || line.starts_with("PUBLISH");
                proptest::prop_assert!(
                    frames == 1 || (frames == 0 && dropped) || (many && frames >= 1),
                    "{line}: {frames} frames: {:?}",
                    String::from_utf8_lossy(&out)
                );
                db.info.pubsub.outbox.clear();
            }
        }
    }
}
