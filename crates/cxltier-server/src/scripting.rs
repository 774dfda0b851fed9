//! Lua scripting as Redis 7.0 does it: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT, over a
//! Lua 5.1 interpreter (`mlua`, built from source; [`crate::lua`]). A script's `redis.call`
//! goes through [`crate::dispatch::execute`] (handed down as [`Ctx::execute`]) like a client's
//! command (the table's arity and flags, OOM), after the checks Redis makes for scripts (`noscript` commands, writes from a read-only
//! script). Scripts are atomic: the loop runs nothing else while one runs. A script that runs
//! past `busy-reply-threshold` (`lua-time-limit`) ms lets the server answer the other
//! connections in a restricted mode ([`BusyPeers`]): BUSY to everything but `SCRIPT KILL`,
//! `SHUTDOWN NOSAVE` and the few commands Redis allows then.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Instant;

use cxltier_store::StoreError;
use mlua::{HookTriggers, Lua, Value, VmState};

use crate::context::{self, BusyCtx, BusyOutcome, Ctx, Effect, Session};
use crate::lua::{
    collect_if_grown, engine, is_lib_error, lib_error, BusyPeers, RunState, Scripts,
    HOOK_INSTRUCTIONS, KILLED, MAX_NESTING, SCRIPT_MEMORY_LIMIT,
};
use crate::resp::reply;
use crate::table::{self, flag};

const NOTBUSY: &str = "NOTBUSY No scripts in execution right now.";
const UNKILLABLE: &str = "UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.";
const NOSCRIPT: &str = "NOSCRIPT No matching script. Please use EVAL.";
const NO_FUNCTIONS: &str = "ERR Redis 7.0 functions (FUNCTION LOAD, FCALL, FCALL_RO) are not supported by cxltier serve: load the code with SCRIPT LOAD and run it with EVALSHA, or send it with EVAL";

/// SCRIPT while a script is busy: KILL stops it unless it has written (then UNKILLABLE: only
/// `SHUTDOWN NOSAVE` can stop it); the other subcommands wait for its end.
pub(crate) fn script_while_busy(b: &mut BusyCtx<'_>, args: &[&[u8]]) -> BusyOutcome {
    if !is_kill(args) {
        return b.refuse();
    }
    if b.run.wrote {
        reply::error(b.out, UNKILLABLE);
    } else {
        b.run.kill = true;
        reply::ok(b.out);
    }
    BusyOutcome::Answered
}

/// FUNCTION while a script is busy: KILL answers NOTBUSY (no function runs, a script does).
pub(crate) fn function_while_busy(b: &mut BusyCtx<'_>, args: &[&[u8]]) -> BusyOutcome {
    if !is_kill(args) {
        return b.refuse();
    }
    reply::error(b.out, NOTBUSY);
    BusyOutcome::Answered
}

fn is_kill(args: &[&[u8]]) -> bool {
    args.len() == 2 && args[1].eq_ignore_ascii_case(b"KILL")
}

/// A command's reply (as this server wrote it) as the Lua value Redis gives a script:
/// integers as numbers, bulk strings as strings, nulls as false (RESP2) or nil (RESP3), status
/// as `{ok=...}`, errors as `{err=...}`, arrays as tables; RESP3's map `{map=...}`, set
/// `{set=...}`, double `{double=...}`, big number `{big_number=...}`, verbatim
/// `{verbatim_string={format=..., string=...}}` and booleans. The replies are our own, so
/// their nesting is bounded by the commands' shapes (three levels at most).
fn reply_to_lua(lua: &Lua, b: &[u8], at: &mut usize) -> mlua::Result<Value> {
    let line_end = b[*at..]
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|p| *at + p)
        .ok_or_else(|| mlua::Error::runtime("a command's reply was cut short"))?;
    let tag = b[*at];
    let text = &b[*at + 1..line_end];
    *at = line_end + 2;
    let num = || -> i64 {
        std::str::from_utf8(text)
            .ok()
            .and_then(|t| t.parse().ok())
            .unwrap_or(0)
    };
    let tagged = |key: &str, v: Value| -> mlua::Result<Value> {
        let t = lua.create_table()?;
        t.raw_set(key, v)?;
        Ok(Value::Table(t))
    };
    Ok(match tag {
        b'+' => tagged("ok", Value::String(lua.create_string(text)?))?,
        b'-' => tagged("err", Value::String(lua.create_string(text)?))?,
        b':' => Value::Number(num() as f64),
        b'$' | b'=' => {
            let n = num();
            if n < 0 {
                return Ok(Value::Boolean(false));
            }
            let body = &b[*at..*at + n as usize];
            *at += n as usize + 2;
            if tag == b'=' {
                let inner = lua.create_table()?;
                inner.raw_set("format", lua.create_string(&body[..3])?)?;
                inner.raw_set("string", lua.create_string(&body[4..])?)?;
                tagged("verbatim_string", Value::Table(inner))?
            } else {
                Value::String(lua.create_string(body)?)
            }
        }
        b'*' | b'>' => {
            let n = num();
            if n < 0 {
                return Ok(Value::Boolean(false));
            }
            let t = lua.create_table()?;
            for i in 1..=n {
                t.raw_set(i, reply_to_lua(lua, b, at)?)?;
            }
            Value::Table(t)
        }
        b'%' => {
            let t = lua.create_table()?;
            for _ in 0..num() {
                let k = reply_to_lua(lua, b, at)?;
                let v = reply_to_lua(lua, b, at)?;
                t.raw_set(k, v)?;
            }
            tagged("map", Value::Table(t))?
        }
        b'~' => {
            let t = lua.create_table()?;
            for _ in 0..num() {
                let k = reply_to_lua(lua, b, at)?;
                t.raw_set(k, true)?;
            }
            tagged("set", Value::Table(t))?
        }
        b'_' => Value::Nil,
        b'#' => Value::Boolean(text == b"t"),
        b',' => {
            let d = match text {
                b"inf" => f64::INFINITY,
                b"-inf" => f64::NEG_INFINITY,
                t => std::str::from_utf8(t)
                    .ok()
                    .and_then(|t| t.parse().ok())
                    .unwrap_or(f64::NAN),
            };
            tagged("double", Value::Number(d))?
        }
        b'(' => tagged("big_number", Value::String(lua.create_string(text)?))?,
        _ => {
            return Err(mlua::Error::runtime(
                "a command's reply has an unknown type",
            ))
        }
    })
}

/// Write the value a script returned as Redis does (`luaReplyToRedisReply`), in the caller's
/// protocol: numbers truncated to integers, tables as arrays up to their first nil, `{ok=}`
/// status, `{err=}` error, booleans (RESP2: 1 and null), RESP3's `{double=}`, `{map=}`,
/// `{set=}`, `{big_number=}`, `{verbatim_string=}`. Iterative, nesting bounded: a table that
/// holds itself is an error, not an endless reply.
/// Booleans follow the script's own protocol (`redis.setresp`), as Redis 7.0's do: `true` is
/// `:1` unless the script chose RESP3 and the caller speaks it.
pub(crate) fn lua_to_reply(
    v: Value,
    proto: u8,
    script_resp: u8,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    let mut stack: Vec<(Value, usize)> = vec![(v, 0)];
    while let Some((v, depth)) = stack.pop() {
        if depth > MAX_NESTING {
            return Err("ERR reached lua stack limit".into());
        }
        match v {
            Value::String(s) => reply::bulk(out, &s.as_bytes()),
            Value::Boolean(b) => {
                if script_resp >= 3 {
                    reply::boolean(out, proto, b);
                } else if b {
                    reply::int(out, 1);
                } else {
                    reply::null(out, proto);
                }
            }
            Value::Integer(i) => reply::int(out, i),
            Value::Number(n) => reply::int(out, n as i64),
            Value::Table(t) => {
                let field = |k: &str| t.raw_get::<Value>(k).unwrap_or(Value::Nil);
                if let Value::String(e) = field("err") {
                    reply::error(out, &e.to_string_lossy());
                    continue;
                }
                if let Value::String(s) = field("ok") {
                    reply::simple(out, &s.to_string_lossy().replace(['\r', '\n'], " "));
                    continue;
                }
                if let Value::Number(d) = field("double") {
                    reply::double(out, proto, d);
                    continue;
                }
                if let Value::Integer(d) = field("double") {
                    reply::double(out, proto, d as f64);
                    continue;
                }
                if let Value::String(s) = field("big_number") {
                    reply::big_number(out, proto, &s.to_string_lossy());
                    continue;
                }
                if let Value::Table(vs) = field("verbatim_string") {
                    if let (Ok(Value::String(f)), Ok(Value::String(s))) =
                        (vs.raw_get::<Value>("format"), vs.raw_get::<Value>("string"))
                    {
                        reply::verbatim(out, proto, &f.to_string_lossy(), &s.as_bytes());
                        continue;
                    }
                }
                if let Value::Table(m) = field("map") {
                    let pairs: Vec<(Value, Value)> =
                        m.pairs::<Value, Value>().filter_map(Result::ok).collect();
                    reply::map(out, proto, pairs.len());
                    for (k, v) in pairs.into_iter().rev() {
                        stack.push((v, depth + 1));
                        stack.push((k, depth + 1));
                    }
                    continue;
                }
                if let Value::Table(s) = field("set") {
                    let keys: Vec<Value> = s
                        .pairs::<Value, Value>()
                        .filter_map(Result::ok)
                        .map(|(k, _)| k)
                        .collect();
                    reply::set(out, proto, keys.len());
                    for k in keys.into_iter().rev() {
                        stack.push((k, depth + 1));
                    }
                    continue;
                }
                let mut items = Vec::new();
                for i in 1.. {
                    match t.raw_get::<Value>(i) {
                        Ok(Value::Nil) | Err(_) => break,
                        Ok(v) => items.push(v),
                    }
                }
                reply::array(out, items.len());
                for v in items.into_iter().rev() {
                    stack.push((v, depth + 1));
                }
            }
            _ => reply::null(out, proto),
        }
    }
    Ok(())
}

/// The numkeys argument of EVAL and the like: Redis's errors for a bad one.
fn numkeys(args: &[&[u8]]) -> Result<usize, &'static str> {
    let n = context::parse_i64(args[2]).ok_or(context::NOT_INT)?;
    if n < 0 {
        return Err("ERR Number of keys can't be negative");
    }
    if n as u64 > (args.len() - 3) as u64 {
        return Err("ERR Number of keys can't be greater than number of args");
    }
    Ok(n as usize)
}

pub(crate) fn eval(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    eval_generic(ctx, args, false, false)
}
pub(crate) fn eval_ro(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    eval_generic(ctx, args, false, true)
}
pub(crate) fn evalsha(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    eval_generic(ctx, args, true, false)
}
pub(crate) fn evalsha_ro(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    eval_generic(ctx, args, true, true)
}

/// FCALL, FCALL_RO: refused, naming EVAL/EVALSHA.
pub(crate) fn no_functions(ctx: &mut Ctx<'_>, _args: &[&[u8]]) -> Result<Effect, StoreError> {
    context::fail(ctx, NO_FUNCTIONS)
}

/// FUNCTION: FLUSH, LIST and STATS of an empty library, KILL (no function runs); LOAD and the
/// rest refused, naming EVAL.
pub(crate) fn function(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let sub = args[1].to_ascii_uppercase();
    match sub.as_slice() {
        b"FLUSH" if args.len() <= 3 => flush_mode(ctx, &args[2..], |_| {}),
        b"LIST" => {
            reply::array(ctx.out, 0);
            Ok(Effect::Read)
        }
        b"KILL" if args.len() == 2 => context::fail(ctx, NOTBUSY),
        b"STATS" if args.len() == 2 => {
            let proto = ctx.session.proto;
            reply::map(ctx.out, proto, 2);
            reply::bulk(ctx.out, b"running_script");
            reply::null(ctx.out, proto);
            reply::bulk(ctx.out, b"engines");
            reply::map(ctx.out, proto, 0);
            Ok(Effect::Read)
        }
        _ => context::fail(ctx, NO_FUNCTIONS),
    }
}

fn flush_mode(
    ctx: &mut Ctx<'_>,
    mode: &[&[u8]],
    then: impl FnOnce(&mut Ctx<'_>),
) -> Result<Effect, StoreError> {
    match mode {
        [] => {}
        [m] if m.eq_ignore_ascii_case(b"ASYNC") || m.eq_ignore_ascii_case(b"SYNC") => {}
        _ => return context::fail(ctx, "ERR SCRIPT FLUSH only support SYNC|ASYNC option"),
    }
    then(ctx);
    reply::ok(ctx.out);
    Ok(Effect::Read)
}

const SCRIPT_HELP: &[&str] = &[
    "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DEBUG (YES|SYNC|NO)",
    "    Set the debug mode for subsequent scripts executed (not supported by cxltier serve).",
    "EXISTS <sha1> [<sha1> ...]",
    "    Return information about the existence of the scripts in the script cache.",
    "FLUSH [ASYNC|SYNC]",
    "    Flush the Lua scripts cache. Very dangerous on replicas.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the scripts cache.",
    "    * SYNC: Synchronously flush the scripts cache.",
    "KILL",
    "    Kill the currently executing Lua script.",
    "LOAD <script>",
    "    Load a script into the scripts cache without executing it.",
    "HELP",
    "    Prints this help.",
];

/// SCRIPT LOAD | EXISTS | FLUSH | KILL | HELP.
pub(crate) fn script(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let sub = args[1].to_ascii_uppercase();
    match (sub.as_slice(), args.len()) {
        (b"FLUSH", 2 | 3) => flush_mode(ctx, &args[2..], |ctx| {
            // A new interpreter, as Redis does: the old one's globals and scripts go.
            ctx.info.scripts.engine = None;
        }),
        (b"EXISTS", n) if n >= 3 => {
            let cache = ctx.info.scripts.engine.as_ref().map(|e| &e.cache);
            reply::array(ctx.out, n - 2);
            for sha in &args[2..] {
                let sha = String::from_utf8_lossy(sha).to_ascii_lowercase();
                let found = cache.is_some_and(|c| c.contains_key(&sha));
                reply::int(ctx.out, found as i64);
            }
            Ok(Effect::Read)
        }
        (b"LOAD", 3) => {
            let loaded = engine(&mut ctx.info.scripts).and_then(|e| e.load(args[2]));
            match loaded {
                Ok(sha) => reply::bulk(ctx.out, sha.as_bytes()),
                Err(e) => reply::error(ctx.out, &e),
            }
            Ok(Effect::Read)
        }
        // A script running now is killed from the busy mode (`busy_command`).
        (b"KILL", 2) => context::fail(ctx, NOTBUSY),
        (b"HELP", 2) => {
            reply::simple_lines(ctx.out, SCRIPT_HELP);
            Ok(Effect::Read)
        }
        (b"DEBUG", 3) => context::fail(
            ctx,
            "ERR SCRIPT DEBUG (the Lua debugger) is not supported by cxltier serve: debug the script with redis.log-free prints of its values returned as the reply",
        ),
        (b"FLUSH" | b"EXISTS" | b"LOAD" | b"KILL" | b"HELP" | b"DEBUG", _) => context::fail(
            ctx,
            &format!(
                "ERR wrong number of arguments for 'script|{}' command",
                String::from_utf8_lossy(args[1]).to_ascii_lowercase()
            ),
        ),
        _ => context::fail(
            ctx,
            &format!(
                "ERR unknown subcommand '{}'. Try SCRIPT HELP.",
                String::from_utf8_lossy(args[1])
            ),
        ),
    }
}

/// The text of a Lua error value: the message of a `{err=...}` table, or the string.
fn error_text(v: &Value) -> Option<String> {
    match v {
        Value::Table(t) => match t.raw_get::<Value>("err").ok()? {
            Value::String(s) => Some(s.to_string_lossy()),
            _ => None,
        },
        Value::String(s) => Some(s.to_string_lossy()),
        Value::Error(e) => Some(rust_error_text(e)),
        _ => None,
    }
}

/// The innermost message of an error raised by Rust code called from Lua.
fn rust_error_text(e: &mlua::Error) -> String {
    match e {
        mlua::Error::CallbackError { cause, .. } => rust_error_text(cause),
        mlua::Error::RuntimeError(m) => m.clone(),
        mlua::Error::ExternalError(inner) => inner.to_string(),
        other => other.to_string(),
    }
}

/// The line of the script at stack `level`, when that frame is the script's.
fn script_line(lua: &Lua, level: usize) -> Option<usize> {
    lua.inspect_stack(level, |d| {
        let src = d.source().source.map(|s| s.to_string());
        (src.as_deref() == Some("@user_script"))
            .then(|| d.current_line())
            .flatten()
    })
    .flatten()
}

fn eval_generic(
    ctx: &mut Ctx<'_>,
    args: &[&[u8]],
    by_sha: bool,
    read_only: bool,
) -> Result<Effect, StoreError> {
    let nkeys = match numkeys(args) {
        Ok(n) => n,
        Err(e) => return context::fail(ctx, e),
    };
    let mut scripts = std::mem::take(&mut ctx.info.scripts);
    let peers = scripts.peers.clone();
    let result = run(ctx, &mut scripts, peers, args, nkeys, by_sha, read_only);
    // SCRIPT FLUSH cannot run inside a script (noscript), so nothing replaced the cache.
    ctx.info.scripts = scripts;
    result
}

#[allow(clippy::too_many_arguments)]
fn run(
    ctx: &mut Ctx<'_>,
    scripts: &mut Scripts,
    peers: Option<Rc<RefCell<dyn BusyPeers>>>,
    args: &[&[u8]],
    nkeys: usize,
    by_sha: bool,
    read_only: bool,
) -> Result<Effect, StoreError> {
    let engine = match engine(scripts) {
        Ok(e) => e,
        Err(e) => return context::fail(ctx, &e),
    };
    let sha = if by_sha {
        let sha = String::from_utf8_lossy(args[1]).to_ascii_lowercase();
        if !engine.cache.contains_key(&sha) {
            return context::fail(ctx, NOSCRIPT);
        }
        sha
    } else {
        match engine.load(args[1]) {
            Ok(sha) => sha,
            Err(e) => return context::fail(ctx, &e),
        }
    };
    let func = engine.cache[&sha].clone();
    let lua = engine.lua.clone();
    let limit_ms = ctx.info.knobs.int("lua-time-limit").max(0) as u64;
    *engine.run.borrow_mut() = Some(RunState {
        started: Instant::now(),
        limit_ms,
        busy: false,
        wrote: false,
        kill: false,
        shutdown: false,
        kill_message: KILLED,
        call_line: None,
    });
    let hook_run = engine.run.clone();
    let hook_peers = peers.clone();
    let hooked = lua.set_hook(
        HookTriggers::new().every_nth_instruction(HOOK_INSTRUCTIONS),
        move |_, _| {
            let mut guard = hook_run.borrow_mut();
            let Some(st) = guard.as_mut() else {
                return Ok(VmState::Continue);
            };
            if !st.kill
                && !st.busy
                && st.limit_ms > 0
                && st.started.elapsed().as_millis() as u64 >= st.limit_ms
            {
                st.busy = true;
            }
            if let Some(p) = &hook_peers {
                p.borrow_mut().tick(st);
            }
            if st.kill {
                return Err(lib_error(st.kill_message));
            }
            Ok(VmState::Continue)
        },
    );
    let session_id = ctx.session.id;
    let caller_proto = ctx.session.proto;
    let caller_db = ctx.session.db;
    let run_state = engine.run.clone();
    let dispatch = engine.dispatch.clone();
    let mut effect = Effect::Read;
    let outcome: mlua::Result<Result<Value, String>> = (|| {
        hooked?;
        let g = lua.globals();
        let keys = lua.create_table()?;
        for (i, k) in args[3..3 + nkeys].iter().enumerate() {
            keys.raw_set(i + 1, lua.create_string(k)?)?;
        }
        let argv = lua.create_table()?;
        for (i, a) in args[3 + nkeys..].iter().enumerate() {
            argv.raw_set(i + 1, lua.create_string(a)?)?;
        }
        g.raw_set("KEYS", keys)?;
        g.raw_set("ARGV", argv)?;
        let resp = Cell::new(2u8);
        let mut script_session = Session::new(session_id, true);
        // The script's commands run in the caller's database (a SELECT inside it stays
        // inside it, as in Redis 7).
        script_session.db = caller_db;
        script_session.in_script = true;
        let effect = &mut effect;
        lua.scope(|scope| {
            let runner = scope.create_function_mut(|lua, call_args: mlua::Variadic<Value>| {
                // Where in the script the call is (a Lua frame above redis.call's wrapper),
                // for the error's "on @user_script:N"; lost when the script tail-calls it.
                let line = script_line(lua, 2);
                if let Some(st) = run_state.borrow_mut().as_mut() {
                    st.call_line = line;
                }
                let err = |msg: &str| -> mlua::Result<Value> {
                    let t = lua.create_table()?;
                    t.raw_set("err", msg)?;
                    Ok(Value::Table(t))
                };
                if call_args.is_empty() {
                    return err("ERR Please specify at least one argument for this redis lib call");
                }
                let mut owned: Vec<Vec<u8>> = Vec::with_capacity(call_args.len());
                for a in call_args.iter() {
                    match a {
                        Value::String(s) => owned.push(s.as_bytes().to_vec()),
                        Value::Integer(_) | Value::Number(_) => owned.push(
                            lua.coerce_string(a.clone())?
                                .map(|s| s.as_bytes().to_vec())
                                .unwrap_or_default(),
                        ),
                        _ => {
                            return err(
                                "ERR Lua redis lib command arguments must be strings or integers",
                            )
                        }
                    }
                }
                let argv: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
                let Some(cmd) = table::lookup(argv[0]) else {
                    return err("ERR Unknown Redis command called from script");
                };
                if !cmd.arity_ok(argv.len()) {
                    return err("ERR Wrong number of args calling Redis command from script");
                }
                if cmd.has(flag::NOSCRIPT) {
                    return err("ERR This Redis command is not allowed from script");
                }
                if read_only && cmd.has(flag::WRITE) {
                    return err("ERR Write commands are not allowed from read-only scripts.");
                }
                script_session.proto = resp.get();
                let mut out = Vec::new();
                let e = (ctx.execute)(ctx.store, ctx.info, &mut script_session, &argv, &mut out);
                if e == Effect::Wrote {
                    *effect = Effect::Wrote;
                    if let Some(st) = run_state.borrow_mut().as_mut() {
                        st.wrote = true;
                    }
                }
                let mut at = 0;
                reply_to_lua(lua, &out, &mut at)
            })?;
            dispatch.raw_set("run", runner)?;
            let setresp = scope.create_function(|_, v: i64| {
                if v != 2 && v != 3 {
                    return Err(lib_error("RESP version must be 2 or 3."));
                }
                resp.set(v as u8);
                Ok(())
            })?;
            dispatch.raw_set("setresp", setresp)?;
            // Run under a message handler that records where the error was raised, as
            // Redis's __redis__err__handler does: the line of the script, not of a C
            // function or of redis.call's wrapper.
            let handler_run = run_state.clone();
            let handler_dispatch = dispatch.clone();
            let handler = lua.create_function(move |lua, e: Value| {
                let mut line = (1..8).find_map(|level| script_line(lua, level));
                // redis.call's error: its message as the command gave it, at the call's line.
                let raised: Option<mlua::String> = handler_dispatch.raw_get("raised")?;
                handler_dispatch.raw_set("raised", Value::Nil)?;
                let from_call = match (&e, &raised) {
                    (Value::String(s), Some(r)) => s.as_bytes() == r.as_bytes(),
                    _ => false,
                };
                if from_call {
                    line = handler_run.borrow().as_ref().and_then(|st| st.call_line);
                }
                let text = error_text(&e).map(|t| match &e {
                    Value::Table(_) => t,
                    Value::String(_) if from_call => t,
                    // Raised by a library function (Rust): Lua's luaL_error adds where the
                    // script called it.
                    Value::Error(err) if is_lib_error(err) => format!("ERR {t}"),
                    Value::Error(_) => match line {
                        Some(l) => format!("ERR user_script:{l}: {t}"),
                        None => format!("ERR {t}"),
                    },
                    _ => format!("ERR {t}"),
                });
                let info = lua.create_table()?;
                info.raw_set("err", text.unwrap_or_else(|| "ERR unknown error".into()))?;
                if let Some(l) = line {
                    info.raw_set("line", l)?;
                }
                Ok(info)
            })?;
            let xpcall: mlua::Function = lua.globals().raw_get("xpcall")?;
            let (ok, v): (bool, Value) = xpcall.call((func.clone(), handler))?;
            if ok {
                let mut out = Vec::new();
                return Ok(match lua_to_reply(v, caller_proto, resp.get(), &mut out) {
                    Ok(()) => Ok(Value::String(lua.create_string(&out)?)),
                    Err(e) => Err(e),
                });
            }
            let Value::Table(info) = v else {
                // An error the message handler never saw: Lua 5.1 raises a failed allocation
                // ("not enough memory") without calling it.
                return Ok(Err(match error_text(&v) {
                    Some(t) if t.contains("not enough memory") => format!(
                        "ERR {t}: the script went past the {} MiB that scripts may hold",
                        SCRIPT_MEMORY_LIMIT >> 20
                    ),
                    Some(t) => format!("ERR {t}"),
                    None => "ERR unknown error".into(),
                }));
            };
            let msg: String = info.raw_get("err")?;
            let line: Option<i64> = info.raw_get("line")?;
            let _ = &sha;
            Ok(Err(match line {
                Some(l) => format!("{msg} script: {sha}, on @user_script:{l}."),
                None => msg,
            }))
        })
    })();
    lua.remove_hook();
    // Lua 5.1 collects garbage only as it allocates, and has no emergency collection when an
    // allocation fails: a script that went up to the cap (or near it) would leave the heap
    // full of its garbage, and every later script would fail to compile ("not enough memory")
    // until something freed it. A heap grown past the threshold is collected whole after the
    // script, which gives its memory back to the allocator (and so the process's RSS falls).
    collect_if_grown(&lua);
    let st = engine.run.borrow_mut().take();
    let _ = engine.dispatch.raw_set("run", Value::Nil);
    if st.as_ref().is_some_and(|s| s.shutdown) {
        ctx.info.shutdown_after_script = true;
    }
    match outcome {
        Ok(Ok(Value::String(reply))) => ctx.out.extend_from_slice(&reply.as_bytes()),
        Ok(Ok(_)) => {}
        Ok(Err(msg)) => reply::error(ctx.out, &msg),
        Err(e) => reply::error(ctx.out, &format!("ERR {}", rust_error_text(&e))),
    }
    Ok(effect)
}

#[cfg(test)]
mod tests {

    use crate::testdb::*;

    /// A script that allocates without bound (a client's bytes) stops at the interpreter's
    /// memory limit with an error, and the server serves the next script.
    #[test]
    fn a_script_that_grows_without_bound_fails_at_the_memory_limit() {
        let mut db = Db::large();
        let script: &[u8] =
            b"local t = {} local s = string.rep('x', 1048576) for i = 1, 100000 do t[i] = s .. i end return 1";
        let out = db.run(&[b"EVAL", script, b"0"]);
        let reply = String::from_utf8_lossy(&out).into_owned();
        assert!(
            reply.starts_with('-') && reply.contains("memory"),
            "{reply}"
        );
        let out = db.run(&[b"EVAL", b"return 7", b"0"]);
        assert_eq!(out, b":7\r\n");
    }

    #[test]
    fn scripts_convert_replies_both_ways_as_redis_does() {
        let mut db = Db::large();
        let cases: &[(&[&str], &str)] = &[
            // Lua to RESP2: numbers truncate, tables stop at the first nil, booleans.
            (&["EVAL", "return {1,2,3.7,'x',nil,5}", "0"], "*4\r\n:1\r\n:2\r\n:3\r\n$1\r\nx\r\n"),
            (&["EVAL", "return -3.99", "0"], ":-3\r\n"),
            (&["EVAL", "return true", "0"], ":1\r\n"),
            (&["EVAL", "return false", "0"], "$-1\r\n"),
            (&["EVAL", "return nil", "0"], "$-1\r\n"),
            (&["EVAL", "return {ok='fine'}", "0"], "+fine\r\n"),
            (&["EVAL", "return {err='My Error'}", "0"], "-My Error\r\n"),
            (&["EVAL", "return redis.error_reply('-E x')", "0"], "-E x\r\n"),
            (&["EVAL", "return redis.status_reply('S')", "0"], "+S\r\n"),
            (&["EVAL", "return {double=3.5}", "0"], "$3\r\n3.5\r\n"),
            (&["EVAL", "return {KEYS[1],ARGV[1],#KEYS,#ARGV}", "1", "k", "a"], "*4\r\n$1\r\nk\r\n$1\r\na\r\n:1\r\n:1\r\n"),
            // RESP to Lua: null bulk is false, status a table, integers numbers.
            (&["EVAL", "return redis.call('get','nokey') == false", "0"], ":1\r\n"),
            (&["EVAL", "return redis.call('set','k','v').ok", "0"], "$2\r\nOK\r\n"),
            (&["EVAL", "return redis.call('incr','n') + 1", "0"], ":2\r\n"),
            (&["EVAL", "return redis.pcall('incr','k').err", "0"], "$43\r\nERR value is not an integer or out of range\r\n"),
            (&["EVAL", "redis.setresp(3) return redis.call('hgetall','none').map ~= nil", "0"], ":1\r\n"),
            // Errors, as redis-server 7.0.15 words them.
            (&["EVAL", "return redis.call('incr','k')", "0"], "-ERR value is not an integer or out of range\r\n"),
            (&["EVAL", "local x = redis.call('nosuch') return x", "0"], "-ERR Unknown Redis command called from script script: 1f0f2a4b0b6f7bb4bd4a48b6c47e2b6e9ba84f0f, on @user_script:1.\r\n"),
            (&["EVAL", "a = 1", "0"], "-ERR user_script:1: Attempt to modify a readonly table script: 86eda770a6060824b090dd4df091e3bd4121279c, on @user_script:1.\r\n"),
            (&["EVAL", "return nosuch(", "0"], "-ERR Error compiling script (new function): user_script:1: unexpected symbol near '<eof>'\r\n"),
            (&["EVAL_RO", "return redis.call('del','k')", "0"], "-ERR Write commands are not allowed from read-only scripts.\r\n"),
            (&["EVAL", "return redis.call('client','list')", "0"], "-ERR This Redis command is not allowed from script\r\n"),
            (&["EVAL", "return 1", "-1"], "-ERR Number of keys can't be negative\r\n"),
            (&["EVAL", "return 1", "2", "a"], "-ERR Number of keys can't be greater than number of args\r\n"),
            (&["EVAL", "local t = {} t[1] = t return t", "0"], "-ERR reached lua stack limit\r\n"),
            (&["EVALSHA", "ffffffffffffffffffffffffffffffffffffffff", "0"], "-NOSCRIPT No matching script. Please use EVAL.\r\n"),
            (&["SCRIPT", "KILL"], "-NOTBUSY No scripts in execution right now.\r\n"),
            // Libraries.
            (&["EVAL", "return cjson.encode({1,'a/b',{x=true}})", "0"], "$21\r\n[1,\"a\\/b\",{\"x\":true}]\r\n"),
            (&["EVAL", "return cjson.decode('[1,{\"a\":[5]}]')[2].a[1]", "0"], ":5\r\n"),
            (&["EVAL", "return {bit.band(0xff,0x0f), bit.tobit(0xffffffff), bit.tohex(-1,-4)}", "0"], "*3\r\n:15\r\n:-1\r\n$4\r\nFFFF\r\n"),
            (&["EVAL", "return redis.sha1hex('')", "0"], "$40\r\nda39a3ee5e6b4b0d3255bfef95601890afd80709\r\n"),
            (&["EVAL", "return {type(os), type(io), type(dofile)}", "0"], "-ERR user_script:1: Script attempted to access nonexistent global variable 'os' script: 0d4a2cb4e1b9b4f5cf3bb8d8e0e0b0ad1a8d53f4, on @user_script:1.\r\n"),
        ];
        let mut diffs = Vec::new();
        for (args, want) in cases {
            let got = eval(&mut db, args);
            // The SHA1 in an error's suffix is the script's: computed, not copied.
            let want = match want.find(" script: ") {
                Some(at) => format!(
                    "{} script: {}{}",
                    &want[..at],
                    crate::lua::sha1hex(args[1].as_bytes()),
                    &want[at + 49..]
                ),
                None => want.to_string(),
            };
            if got != want {
                diffs.push(format!("{args:?}\n  got:  {got:?}\n  want: {want:?}"));
            }
        }
        assert!(diffs.is_empty(), "{}", diffs.join("\n"));
    }

    /// A script's commands run in the caller's database (a SELECT inside stays inside), and
    /// its writes reach the write stream under that database's `select`, with the user's keys,
    /// in one `multi` ... `exec`.
    #[test]
    fn scripts_write_in_the_callers_database_and_replicate_their_effects() {
        let mut db = Db::large();
        db.info.repl.attach();
        db.store.track_expired(true);
        db.cmd("SELECT 2");
        let script = "redis.call('set',KEYS[1],'v'); redis.call('incr',KEYS[2]); redis.call('select','5'); return redis.call('get',KEYS[1])";
        let words: Vec<&[u8]> = vec![b"EVAL", script.as_bytes(), b"2", b"k", b"n"];
        let out = db.run(&words);
        assert_eq!(out, b"$-1\r\n", "the script's own SELECT 5 holds inside it");
        assert_eq!(db.cmd("GET k"), "$1\r\nv\r\n");
        assert_eq!(db.session.db, 2, "the caller's database is unchanged");
        db.cmd("SELECT 0");
        assert_eq!(db.cmd("GET k"), "$-1\r\n");
        let stream = String::from_utf8_lossy(&db.info.repl.pending).into_owned();
        assert_eq!(
            stream,
            "*2\r\n$6\r\nselect\r\n$1\r\n2\r\n*1\r\n$5\r\nmulti\r\n*3\r\n$3\r\nset\r\n$1\r\nk\r\n$1\r\nv\r\n*2\r\n$4\r\nincr\r\n$1\r\nn\r\n*1\r\n$4\r\nexec\r\n"
        );
    }

    #[test]
    fn script_load_exists_flush_and_evalsha() {
        let mut db = Db::large();
        let sha = crate::lua::sha1hex(b"return 'loaded'");
        assert_eq!(
            eval(&mut db, &["SCRIPT", "LOAD", "return 'loaded'"]),
            format!("$40\r\n{sha}\r\n")
        );
        let upper = sha.to_ascii_uppercase();
        assert_eq!(
            eval(&mut db, &["SCRIPT", "EXISTS", &sha, &upper, "nope"]),
            "*3\r\n:1\r\n:1\r\n:0\r\n"
        );
        assert_eq!(eval(&mut db, &["EVALSHA", &upper, "0"]), "$6\r\nloaded\r\n");
        assert_eq!(
            eval(&mut db, &["EVALSHA_RO", &sha, "0"]),
            "$6\r\nloaded\r\n"
        );
        assert_eq!(db.cmd("SCRIPT FLUSH ASYNC"), "+OK\r\n");
        assert_eq!(eval(&mut db, &["SCRIPT", "EXISTS", &sha]), "*1\r\n:0\r\n");
        assert!(eval(&mut db, &["EVALSHA", &sha, "0"]).starts_with("-NOSCRIPT"));
        db.replies(&[
            (
                "SCRIPT FLUSH bogus",
                "-ERR SCRIPT FLUSH only support SYNC|ASYNC option\r\n",
            ),
            (
                "SCRIPT NOPE",
                "-ERR unknown subcommand 'NOPE'. Try SCRIPT HELP.\r\n",
            ),
        ]);
        // EVAL caches what it ran; a write inside commits like the command's own.
        let set = "return redis.call('set',KEYS[1],ARGV[1])";
        assert_eq!(eval(&mut db, &["EVAL", set, "1", "k", "v"]), "+OK\r\n");
        assert_eq!(db.cmd("GET k"), "$1\r\nv\r\n");
        assert_eq!(
            eval(
                &mut db,
                &["SCRIPT", "EXISTS", &crate::lua::sha1hex(set.as_bytes())]
            ),
            "*1\r\n:1\r\n"
        );
        // math.random follows Redis's rand48 from its initial state (redis-server 7.0.15
        // answers 0.39646477363839 first after it starts).
        assert_eq!(
            eval(&mut db, &["EVAL", "return tostring(math.random())", "0"]),
            "$16\r\n0.39646477363839\r\n"
        );
        // Inside MULTI a script is queued and runs in EXEC.
        db.cmd("MULTI");
        assert_eq!(eval(&mut db, &["EVAL", "return 7", "0"]), "+QUEUED\r\n");
        assert_eq!(db.cmd("EXEC"), "*1\r\n:7\r\n");
    }
}
