//! Lua scripting as Redis 7.0 does it: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT, and
//! Redis 7.0's functions (FUNCTION, FCALL, FCALL_RO, over the libraries of
//! [`crate::functions`], in an interpreter of their own), over a Lua 5.1 interpreter (`mlua`,
//! built from source; [`crate::lua`]). A script's `redis.call`
//! goes through [`crate::dispatch::execute`] (handed down as [`Ctx::execute`]) like a client's
//! command (the table's arity and flags, OOM), after the checks Redis makes for scripts (`noscript` commands, writes from a read-only
//! script). Scripts are atomic: the loop runs nothing else while one runs. A script that runs
//! past `busy-reply-threshold` (`lua-time-limit`) ms lets the server answer the other
//! connections in a restricted mode ([`BusyPeers`]): BUSY to everything but `SCRIPT KILL`,
//! `SHUTDOWN NOSAVE` and the few commands Redis allows then.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Instant;

use cxltier_store::StoreError;
use mlua::{HookTriggers, Lua, Value, VmState};

use crate::command::flag;
use crate::context::{self, BusyCtx, BusyOutcome, Ctx, Effect, Session};
use crate::functions::{flags as fflags, RestorePolicy};
use crate::lua::{
    collect_if_grown, engine, is_lib_error, lib_error, BusyPeers, FunctionRun, RunState, Scripts,
    HOOK_INSTRUCTIONS, KILLED, MAX_NESTING, SCRIPT_MEMORY_LIMIT,
};
use crate::resp::reply;

const NOTBUSY: &str = "NOTBUSY No scripts in execution right now.";
const UNKILLABLE: &str = "UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.";
const NOSCRIPT: &str = "NOSCRIPT No matching script. Please use EVAL.";
const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";

/// SCRIPT while a script is busy: KILL stops it unless it has written (then UNKILLABLE: only
/// `SHUTDOWN NOSAVE` can stop it) or it is a function (FUNCTION KILL's); the other
/// subcommands wait for its end.
pub(crate) fn script_while_busy(b: &mut BusyCtx<'_>, args: &[&[u8]]) -> BusyOutcome {
    if !is_kill(args) || b.run.function.is_some() {
        return b.refuse();
    }
    kill(b)
}

/// FUNCTION while a script is busy: KILL stops a function (as SCRIPT KILL a script), STATS
/// tells which runs; a script (EVAL) answers both BUSY, as Redis does.
pub(crate) fn function_while_busy(b: &mut BusyCtx<'_>, args: &[&[u8]]) -> BusyOutcome {
    let stats = args.len() == 2 && args[1].eq_ignore_ascii_case(b"STATS");
    if !(is_kill(args) || stats) || b.run.function.is_none() {
        return b.refuse();
    }
    if is_kill(args) {
        return kill(b);
    }
    let ms = b.run.started.elapsed().as_millis() as u64;
    if let Some(f) = &b.run.function {
        stats_reply(
            b.out,
            b.session.proto,
            Some((f, ms)),
            f.libraries,
            f.functions,
        );
    }
    BusyOutcome::Answered
}

fn kill(b: &mut BusyCtx<'_>) -> BusyOutcome {
    if b.run.wrote {
        reply::error(b.out, UNKILLABLE);
    } else {
        b.run.kill = true;
        reply::ok(b.out);
    }
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

/// C's `printf("%.17g", x)`: how Redis turns a Lua number given to `redis.call` into the
/// command's argument (every digit a double holds, unlike Lua's own "%.14g").
fn format_g17(x: f64) -> String {
    const PRECISION: i32 = 17;
    if x.is_nan() {
        return if x.is_sign_negative() { "-nan" } else { "nan" }.into();
    }
    if x.is_infinite() {
        return if x < 0.0 { "-inf" } else { "inf" }.into();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let strip = |t: &str| -> String {
        if t.contains('.') {
            t.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            t.to_string()
        }
    };
    let sci = format!("{:.*e}", (PRECISION - 1) as usize, x);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..PRECISION).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", strip(mantissa), exp.abs())
    } else {
        strip(&format!("{:.*}", (PRECISION - 1 - exp) as usize, x))
    }
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

/// FCALL: the function named (any case) with its keys and arguments.
pub(crate) fn fcall(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    fcall_generic(ctx, args, false)
}

/// FCALL_RO: as FCALL, for functions flagged `no-writes` only.
pub(crate) fn fcall_ro(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    fcall_generic(ctx, args, true)
}

/// Redis's `fcallCommandGeneric` and `scriptPrepareForRun`: the function, its key count, then
/// what its flags allow (a write-flagged function from FCALL_RO, one without `allow-oom` or
/// `no-writes` past `maxmemory`), then the run.
fn fcall_generic(ctx: &mut Ctx<'_>, args: &[&[u8]], ro: bool) -> Result<Effect, StoreError> {
    let Some(f) = ctx.info.scripts.functions.find(args[1]).cloned() else {
        return context::fail(ctx, "ERR Function not found");
    };
    let Some(n) = context::parse_i64(args[2]) else {
        return context::fail(ctx, "ERR Bad number of keys provided");
    };
    if n > (args.len() - 3) as i64 {
        return context::fail(
            ctx,
            "ERR Number of keys can't be greater than number of args",
        );
    }
    if n < 0 {
        return context::fail(ctx, "ERR Number of keys can't be negative");
    }
    if let Some(err) = refusal_by_flags(ctx, f.flags, ro) {
        return context::fail(ctx, err);
    }
    let mut scripts = std::mem::take(&mut ctx.info.scripts);
    let peers = scripts.peers.clone();
    let rand = scripts.rand.clone();
    let (libraries, functions) = (
        scripts.functions.library_count(),
        scripts.functions.function_count(),
    );
    let result = match scripts.functions.vm(&rand) {
        Ok(vm) => {
            let job = Job {
                lua: vm.engine.lua.clone(),
                func: f.callback.clone(),
                run: vm.engine.run.clone(),
                dispatch: vm.engine.dispatch.clone(),
                name: f.name.clone(),
                source: "user_function",
                read_only: f.flags & fflags::NO_WRITES != 0,
                flags: Some(f.flags),
                function: Some(FunctionRun {
                    name: f.name.clone(),
                    command: args.iter().map(|a| a.to_vec()).collect(),
                    libraries,
                    functions,
                }),
            };
            run(ctx, job, peers, args, n as usize)
        }
        Err(e) => context::fail(ctx, &e),
    };
    // FUNCTION cannot run inside a function (noscript), so nothing replaced the libraries.
    ctx.info.scripts = scripts;
    result
}

const FUNCTION_HELP: &[&str] = &[
    "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "LOAD [REPLACE] <FUNCTION CODE>",
    "    Create a new library with the given library name and code.",
    "DELETE <LIBRARY NAME>",
    "    Delete the given library.",
    "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
    "    Return general information on all the libraries:",
    "    * Library name",
    "    * The engine used to run the Library",
    "    * Library description",
    "    * Functions list",
    "    * Library code (if WITHCODE is given)",
    "    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
    "STATS",
    "    Return information about the current function running:",
    "    * Function name",
    "    * Command used to run the function",
    "    * Duration in MS that the function is running",
    "    If no function is running, return nil",
    "    In addition, returns a list of available engines.",
    "KILL",
    "    Kill the current running function.",
    "FLUSH [ASYNC|SYNC]",
    "    Delete all the libraries.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the libraries.",
    "    * SYNC: Synchronously flush the libraries.",
    "DUMP",
    "    Return a serialized payload representing the current libraries, can be restored using FUNCTION RESTORE command",
    "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
    "    Restore the libraries represented by the given payload, it is possible to give a restore policy to",
    "    control how to handle existing libraries (default APPEND):",
    "    * FLUSH: delete all existing libraries.",
    "    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
    "    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old",
    "      libraries with the new libraries (notice that even on this option there is a chance of failure",
    "      in case of functions name collision with another library).",
    "HELP",
    "    Prints this help.",
];

/// The subcommands of FUNCTION and their arities (Redis's, negative: at least).
const FUNCTION_ARITY: &[(&[u8], i64)] = &[
    (b"DELETE", 3),
    (b"DUMP", 2),
    (b"FLUSH", -2),
    (b"HELP", 2),
    (b"KILL", 2),
    (b"LIST", -2),
    (b"LOAD", -3),
    (b"RESTORE", -3),
    (b"STATS", 2),
];

/// `used_memory` past `maxmemory`: FUNCTION LOAD and RESTORE are refused, as Redis's
/// `denyoom` commands are.
fn over_maxmemory(ctx: &Ctx<'_>) -> bool {
    ctx.info
        .maxmemory_limit
        .is_some_and(|limit| ctx.store.memory_used() > limit)
}

/// A change to the libraries made: written to the store's log in the command's batch (so that
/// a restart keeps it; the libraries as `saved` come back if the store refuses it, too large
/// for `--max-object`), replicated as the command itself (it touches no key), then `reply`.
fn libraries_changed(
    ctx: &mut Ctx<'_>,
    saved: BTreeMap<String, crate::functions::Library>,
    reply: impl FnOnce(&mut Vec<u8>),
) -> Result<Effect, StoreError> {
    if let Err(e) = crate::functions::persist(ctx.store, &ctx.info.scripts.functions) {
        ctx.info.scripts.functions.put_back(saved);
        return Err(e);
    }
    ctx.session.force_propagate = true;
    reply(ctx.out);
    Ok(Effect::Wrote)
}

/// FUNCTION LOAD | DELETE | FLUSH | LIST | STATS | DUMP | RESTORE | KILL | HELP.
pub(crate) fn function(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> Result<Effect, StoreError> {
    let sub = args[1].to_ascii_uppercase();
    let Some(&(_, arity)) = FUNCTION_ARITY
        .iter()
        .find(|(name, _)| *name == sub.as_slice())
    else {
        return context::fail(
            ctx,
            &format!(
                "ERR unknown subcommand '{}'. Try FUNCTION HELP.",
                String::from_utf8_lossy(args[1])
            ),
        );
    };
    let n = args.len() as i64;
    if (arity > 0 && n != arity) || (arity < 0 && n < -arity) {
        return context::fail(
            ctx,
            &format!(
                "ERR wrong number of arguments for 'function|{}' command",
                String::from_utf8_lossy(args[1]).to_ascii_lowercase()
            ),
        );
    }
    let proto = ctx.session.proto;
    let rand = ctx.info.scripts.rand.clone();
    match sub.as_slice() {
        b"LOAD" => {
            let mut replace = false;
            for opt in &args[2..args.len() - 1] {
                if !opt.eq_ignore_ascii_case(b"REPLACE") {
                    return context::fail(
                        ctx,
                        &format!("ERR Unknown option given: {}", String::from_utf8_lossy(opt)),
                    );
                }
                replace = true;
            }
            if over_maxmemory(ctx) {
                return context::fail(ctx, OOM);
            }
            let code = args[args.len() - 1];
            let functions = &mut ctx.info.scripts.functions;
            let saved = functions.saved();
            match functions.load(&rand, code, replace, crate::functions::LOAD_TIMEOUT_MS) {
                Ok(name) => libraries_changed(ctx, saved, |out| reply::bulk(out, name.as_bytes())),
                Err(e) => context::fail(ctx, &e),
            }
        }
        b"DELETE" => {
            let saved = ctx.info.scripts.functions.saved();
            if !ctx.info.scripts.functions.delete(args[2]) {
                return context::fail(ctx, "ERR Library not found");
            }
            libraries_changed(ctx, saved, reply::ok)
        }
        b"FLUSH" => {
            match &args[2..] {
                [] => {}
                [m] if m.eq_ignore_ascii_case(b"ASYNC") || m.eq_ignore_ascii_case(b"SYNC") => {}
                [_] => {
                    return context::fail(ctx, "ERR FUNCTION FLUSH only supports SYNC|ASYNC option")
                }
                _ => {
                    return context::fail(
                        ctx,
                        &crate::errors::unknown_subcommand("FUNCTION", args[1]),
                    )
                }
            }
            let saved = ctx.info.scripts.functions.saved();
            ctx.info.scripts.functions.flush();
            libraries_changed(ctx, saved, reply::ok)
        }
        b"LIST" => {
            let mut with_code = false;
            let mut pattern: Option<&[u8]> = None;
            let mut i = 2;
            while i < args.len() {
                let a = args[i];
                if !with_code && a.eq_ignore_ascii_case(b"WITHCODE") {
                    with_code = true;
                } else if pattern.is_none() && a.eq_ignore_ascii_case(b"LIBRARYNAME") {
                    if i + 1 >= args.len() {
                        return context::fail(ctx, "ERR library name argument was not given");
                    }
                    i += 1;
                    pattern = Some(args[i]);
                } else {
                    // Redis's addReplyErrorSdsSafe: no line breaks in an error.
                    let shown = String::from_utf8_lossy(a).replace(['\r', '\n'], " ");
                    return context::fail(ctx, &format!("ERR Unknown argument {shown}"));
                }
                i += 1;
            }
            let libs: Vec<&crate::functions::Library> = ctx
                .info
                .scripts
                .functions
                .libraries()
                .filter(|l| {
                    pattern.is_none_or(|p| crate::glob::matches(p, l.name.as_bytes(), true))
                })
                .collect();
            reply::array(ctx.out, libs.len());
            for lib in libs {
                reply::map(ctx.out, proto, if with_code { 4 } else { 3 });
                reply::bulk(ctx.out, b"library_name");
                reply::bulk(ctx.out, lib.name.as_bytes());
                reply::bulk(ctx.out, b"engine");
                reply::bulk(ctx.out, b"LUA");
                reply::bulk(ctx.out, b"functions");
                reply::array(ctx.out, lib.functions.len());
                for f in &lib.functions {
                    reply::map(ctx.out, proto, 3);
                    reply::bulk(ctx.out, b"name");
                    reply::bulk(ctx.out, f.name.as_bytes());
                    reply::bulk(ctx.out, b"description");
                    match &f.description {
                        Some(d) => reply::bulk(ctx.out, d),
                        None => reply::null(ctx.out, proto),
                    }
                    reply::bulk(ctx.out, b"flags");
                    let names: Vec<&str> = fflags::NAMES
                        .iter()
                        .filter(|(bit, _)| f.flags & bit != 0)
                        .map(|(_, name)| *name)
                        .collect();
                    reply::set(ctx.out, proto, names.len());
                    for name in names {
                        reply::simple(ctx.out, name);
                    }
                }
                if with_code {
                    reply::bulk(ctx.out, b"library_code");
                    reply::bulk(ctx.out, &lib.code);
                }
            }
            Ok(Effect::Read)
        }
        b"STATS" => {
            let f = &ctx.info.scripts.functions;
            let (libraries, functions) = (f.library_count(), f.function_count());
            stats_reply(ctx.out, proto, None, libraries, functions);
            Ok(Effect::Read)
        }
        b"DUMP" => {
            let payload = ctx.info.scripts.functions.dump();
            reply::bulk(ctx.out, &payload);
            Ok(Effect::Read)
        }
        b"RESTORE" => {
            if args.len() > 4 {
                return context::fail(ctx, &crate::errors::unknown_subcommand("FUNCTION", args[1]));
            }
            let policy = match args.get(3) {
                None => RestorePolicy::Append,
                Some(p) if p.eq_ignore_ascii_case(b"APPEND") => RestorePolicy::Append,
                Some(p) if p.eq_ignore_ascii_case(b"REPLACE") => RestorePolicy::Replace,
                Some(p) if p.eq_ignore_ascii_case(b"FLUSH") => RestorePolicy::Flush,
                Some(_) => {
                    return context::fail(
                        ctx,
                        "ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.",
                    )
                }
            };
            if over_maxmemory(ctx) {
                return context::fail(ctx, OOM);
            }
            let saved = ctx.info.scripts.functions.saved();
            match ctx.info.scripts.functions.restore(&rand, args[2], policy) {
                Ok(()) => libraries_changed(ctx, saved, reply::ok),
                Err(e) => context::fail(ctx, &e),
            }
        }
        // A function running now is killed from the busy mode (`busy_command`).
        b"KILL" => context::fail(ctx, NOTBUSY),
        _ => {
            reply::simple_lines(ctx.out, FUNCTION_HELP);
            Ok(Effect::Read)
        }
    }
}

/// FUNCTION STATS: the function running (`None`: nil) and the Lua engine's counts.
fn stats_reply(
    out: &mut Vec<u8>,
    proto: u8,
    running: Option<(&FunctionRun, u64)>,
    libraries: usize,
    functions: usize,
) {
    reply::map(out, proto, 2);
    reply::bulk(out, b"running_script");
    match running {
        None => reply::null(out, proto),
        Some((f, ms)) => {
            reply::map(out, proto, 3);
            reply::bulk(out, b"name");
            reply::bulk(out, f.name.as_bytes());
            reply::bulk(out, b"command");
            reply::array(out, f.command.len());
            for a in &f.command {
                reply::bulk(out, a);
            }
            reply::bulk(out, b"duration_ms");
            reply::int(out, ms as i64);
        }
    }
    reply::bulk(out, b"engines");
    reply::map(out, proto, 1);
    reply::bulk(out, b"LUA");
    reply::map(out, proto, 2);
    reply::bulk(out, b"libraries_count");
    reply::int(out, libraries as i64);
    reply::bulk(out, b"functions_count");
    reply::int(out, functions as i64);
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

/// The line of the code at stack `level`, when that frame is the script's or function's
/// (`source`: `user_script` or `user_function`).
fn script_line(lua: &Lua, level: usize, source: &str) -> Option<usize> {
    lua.inspect_stack(level, |d| {
        let src = d.source().source.map(|s| s.to_string());
        (src.as_deref().and_then(|s| s.strip_prefix('@')) == Some(source))
            .then(|| d.current_line())
            .flatten()
    })
    .flatten()
}

/// What runs: a script (EVAL) or a function (FCALL), in its interpreter.
struct Job {
    lua: Lua,
    func: mlua::Function,
    run: Rc<RefCell<Option<RunState>>>,
    dispatch: mlua::Table,
    /// Named in errors (`script: <name>`): the script's SHA1 or the function's name.
    name: String,
    /// The chunk's name: `user_script` or `user_function`.
    source: &'static str,
    /// Its commands may not write (EVAL_RO, a `no-writes` function or script).
    read_only: bool,
    /// The flags it declared (a function's, a script's shebang); `None` for a script without
    /// a shebang, whose commands are each refused OOM as a client's would be.
    flags: Option<u8>,
    /// A function: its keys and arguments are its parameters (a script's are the globals
    /// KEYS and ARGV), and FUNCTION KILL and STATS see it.
    function: Option<FunctionRun>,
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
    let job = eval_job(&mut scripts, args, by_sha, read_only);
    let refused = match &job {
        Ok(Job {
            flags: Some(flags), ..
        }) => refusal_by_flags(ctx, *flags, read_only),
        _ => None,
    };
    let result = match (job, refused) {
        (_, Some(err)) => context::fail(ctx, err),
        (Ok(job), None) => run(ctx, job, peers, args, nkeys),
        (Err(e), None) => context::fail(ctx, &e),
    };
    // SCRIPT FLUSH cannot run inside a script (noscript), so nothing replaced the cache.
    ctx.info.scripts = scripts;
    result
}

/// The script EVAL (its text, compiled and cached) or EVALSHA (cached) names.
fn eval_job(
    scripts: &mut Scripts,
    args: &[&[u8]],
    by_sha: bool,
    read_only: bool,
) -> Result<Job, String> {
    let engine = engine(scripts)?;
    let sha = if by_sha {
        let sha = String::from_utf8_lossy(args[1]).to_ascii_lowercase();
        if !engine.cache.contains_key(&sha) {
            return Err(NOSCRIPT.into());
        }
        sha
    } else {
        engine.load(args[1])?
    };
    let script = &engine.cache[&sha];
    Ok(Job {
        lua: engine.lua.clone(),
        func: script.func.clone(),
        run: engine.run.clone(),
        dispatch: engine.dispatch.clone(),
        name: sha,
        source: "user_script",
        // A script that declared `no-writes` runs read-only, as EVAL_RO's scripts do.
        read_only: read_only || script.flags.is_some_and(|f| f & fflags::NO_WRITES != 0),
        flags: script.flags,
        function: None,
    })
}

/// Redis's `scriptPrepareForRun` for a script or function that declared its flags: why it may
/// not run now, if so. One that may write is refused from a `_RO` command and while
/// `min-replicas-to-write` asks for more replicas than acknowledge; one that neither declared
/// `allow-oom` nor `no-writes` is refused while `used_memory` is over `maxmemory`.
fn refusal_by_flags(ctx: &Ctx<'_>, flags: u8, ro: bool) -> Option<&'static str> {
    if flags & fflags::NO_WRITES == 0 {
        if ro {
            return Some("ERR Can not execute a script with write flag using *_ro command.");
        }
        if ctx.info.too_few_good_replicas() {
            return Some("NOREPLICAS Not enough good replicas to write.");
        }
    }
    let over_limit = ctx
        .info
        .maxmemory_limit
        .is_some_and(|limit| ctx.store.memory_used() > limit);
    if over_limit && flags & (fflags::ALLOW_OOM | fflags::NO_WRITES) == 0 {
        return Some(
            "OOM allow-oom flag is not set on the script, can not run it when used memory > 'maxmemory'",
        );
    }
    None
}

fn run(
    ctx: &mut Ctx<'_>,
    job: Job,
    peers: Option<Rc<RefCell<dyn BusyPeers>>>,
    args: &[&[u8]],
    nkeys: usize,
) -> Result<Effect, StoreError> {
    let Job {
        lua,
        func,
        run: run_state,
        dispatch,
        name,
        source,
        read_only,
        flags,
        function,
    } = job;
    let is_function = function.is_some();
    let limit_ms = ctx.info.knobs.int("lua-time-limit").max(0) as u64;
    *run_state.borrow_mut() = Some(RunState {
        started: Instant::now(),
        limit_ms,
        busy: false,
        wrote: false,
        kill: false,
        shutdown: false,
        kill_message: KILLED,
        call_line: None,
        function,
    });
    let hook_run = run_state.clone();
    let hook_peers = peers.clone();
    let hooked = lua.set_hook(
        HookTriggers::new().every_nth_instruction(HOOK_INSTRUCTIONS),
        move |lua, _| {
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
                // From now on every instruction raises it, as Redis's hook does every line
                // once killed: a script that catches the error with pcall gets it again at
                // its next instruction, outside the pcall too, and so ends.
                let message = st.kill_message;
                lua.set_hook(HookTriggers::new().every_nth_instruction(1), move |_, _| {
                    Err(lib_error(message))
                })?;
                return Err(lib_error(message));
            }
            Ok(VmState::Continue)
        },
    );
    let session_id = ctx.session.id;
    let caller_proto = ctx.session.proto;
    let caller_db = ctx.session.db;
    let caller_user = ctx.session.user;
    let mut effect = Effect::Read;
    let outcome: mlua::Result<Result<Value, String>> = (|| {
        hooked?;
        let keys = lua.create_table()?;
        for (i, k) in args[3..3 + nkeys].iter().enumerate() {
            keys.raw_set(i + 1, lua.create_string(k)?)?;
        }
        let argv = lua.create_table()?;
        for (i, a) in args[3 + nkeys..].iter().enumerate() {
            argv.raw_set(i + 1, lua.create_string(a)?)?;
        }
        // A script reads its keys and arguments from globals; a function is given them.
        let func = if is_function {
            func.bind((keys, argv))?
        } else {
            let g = lua.globals();
            g.raw_set("KEYS", keys)?;
            g.raw_set("ARGV", argv)?;
            func.clone()
        };
        let resp = Cell::new(2u8);
        let mut script_session = Session::new(session_id, true);
        // The script's commands run in the caller's database (a SELECT inside it stays
        // inside it, as in Redis 7).
        script_session.db = caller_db;
        // And as the caller's ACL user.
        script_session.user = caller_user;
        script_session.in_script = true;
        // A function, or a script that declared its flags, was refused up front unless its
        // flags allow it past maxmemory, and Redis refuses none of its commands then.
        script_session.function_call = flags.is_some();
        let effect = &mut effect;
        lua.scope(|scope| {
            let runner =
                scope.create_function_mut(|lua, (count, packed): (usize, mlua::Table)| {
                    // Where in the script the call is (a Lua frame above redis.call's wrapper),
                    // for the error's "on @user_script:N"; lost when the script tail-calls it.
                    let line = script_line(lua, 2, source);
                    if let Some(st) = run_state.borrow_mut().as_mut() {
                        st.call_line = line;
                        // Killed: no more commands. A script that catches the kill's error with
                        // pcall around its redis.call loop would otherwise spend nearly all its
                        // time inside the pcall, where the hook's next error is caught again.
                        if st.kill {
                            return Err(lib_error(st.kill_message));
                        }
                    }
                    let err = |msg: &str| -> mlua::Result<Value> {
                        let t = lua.create_table()?;
                        t.raw_set("err", msg)?;
                        Ok(Value::Table(t))
                    };
                    if count == 0 {
                        return err(
                            "ERR Please specify at least one argument for this redis lib call",
                        );
                    }
                    let mut owned: Vec<Vec<u8>> = Vec::with_capacity(count);
                    for i in 1..=count {
                        let a: Value = packed.raw_get(i)?;
                        match &a {
                            Value::String(s) => owned.push(s.as_bytes().to_vec()),
                            // As Redis 7.0 writes a number argument: "%.17g", all its digits.
                            Value::Integer(i) => owned.push(i.to_string().into_bytes()),
                            Value::Number(n) => owned.push(format_g17(*n).into_bytes()),
                            _ => return err(
                                "ERR Lua redis lib command arguments must be strings or integers",
                            ),
                        }
                    }
                    let argv: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
                    let Some(cmd) = ctx.commands.lookup(argv[0]) else {
                        return err("ERR Unknown Redis command called from script");
                    };
                    if !cmd.arity_ok(argv.len()) {
                        return err("ERR Wrong number of args calling Redis command from script");
                    }
                    if cmd.has(flag::NOSCRIPT) || ctx.commands.noscript_subcommand(cmd, &argv) {
                        return err("ERR This Redis command is not allowed from script");
                    }
                    // Redis counts the commands that may replicate (PUBLISH, PFCOUNT) as writes
                    // here, so that a read-only script may run through CLIENT PAUSE WRITE.
                    if read_only && cmd.has(flag::WRITE | flag::MAY_REPLICATE) {
                        return err("ERR Write commands are not allowed from read-only scripts.");
                    }
                    script_session.proto = resp.get();
                    let mut out = Vec::new();
                    let e =
                        (ctx.execute)(ctx.store, ctx.info, &mut script_session, &argv, &mut out);
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
                let mut line = (1..8).find_map(|level| script_line(lua, level, source));
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
                        Some(l) => format!("ERR {source}:{l}: {t}"),
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
            Ok(Err(match line {
                Some(l) => format!("{msg} script: {name}, on @{source}:{l}."),
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
    let st = run_state.borrow_mut().take();
    let _ = dispatch.raw_set("run", Value::Nil);
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
            (&["EVAL_RO", "local r = redis.call('publish','ch','msg') return r", "0"], "-ERR Write commands are not allowed from read-only scripts. script: 5d4d0c9e4e1d0ec5a7a2ef0b8d1e39ad8f7bde0e, on @user_script:1.\r\n"),
            (&["EVAL", "#!lua flags=no-writes\nlocal r = redis.call('pfcount','h') return r", "0"], "-ERR Write commands are not allowed from read-only scripts. script: 5d4d0c9e4e1d0ec5a7a2ef0b8d1e39ad8f7bde0e, on @user_script:2.\r\n"),
            (&["EVAL", "return redis.call('publish','ch','msg')", "0"], ":0\r\n"),
            (&["EVAL", "return redis.call('client','list')", "0"], "-ERR This Redis command is not allowed from script\r\n"),
            // Redis flags this one subcommand noscript; the other CLUSTER subcommands run.
            (&["EVAL", "return redis.call('cluster','reset','hard')", "0"], "-ERR This Redis command is not allowed from script\r\n"),
            (&["EVAL", "return redis.call('cluster','info')", "0"], "-ERR This instance has cluster support disabled\r\n"),
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

    fn load(db: &mut Db, code: &str) -> String {
        eval(db, &["FUNCTION", "LOAD", "REPLACE", code])
    }

    /// A library in a function's body, as Redis's suite writes it.
    fn lib(name: &str, function: &str, body: &str) -> String {
        format!("#!lua name={name}\nredis.register_function('{function}', function(KEYS, ARGV)\n {body} \nend)")
    }

    #[test]
    fn function_load_fcall_list_and_delete() {
        let mut db = Db::large();
        assert_eq!(
            load(&mut db, &lib("test", "test", "return 'hello'")),
            "$4\r\ntest\r\n"
        );
        assert_eq!(eval(&mut db, &["FCALL", "TEST", "0"]), "$5\r\nhello\r\n");
        assert_eq!(
            eval(
                &mut db,
                &["FUNCTION", "LOAD", &lib("test", "other", "return 1")]
            ),
            "-ERR Library 'test' already exists\r\n"
        );
        assert_eq!(
            load(&mut db, &lib("lib2", "TeSt", "return 1")),
            "-ERR Function TeSt already exists\r\n"
        );
        let keys = lib("kv", "kv", "return redis.call('set', KEYS[1], ARGV[1])");
        assert_eq!(load(&mut db, &keys), "$2\r\nkv\r\n");
        assert_eq!(eval(&mut db, &["FCALL", "kv", "1", "x", "foo"]), "+OK\r\n");
        assert_eq!(db.cmd("GET x"), "$3\r\nfoo\r\n");
        db.replies(&[
            ("FCALL kv bad", "-ERR Bad number of keys provided\r\n"),
            ("FCALL kv 3 a", "-ERR Number of keys can't be greater than number of args\r\n"),
            ("FCALL kv -1 a", "-ERR Number of keys can't be negative\r\n"),
            ("FCALL nosuch 0", "-ERR Function not found\r\n"),
            ("FCALL_RO kv 1 x y", "-ERR Can not execute a script with write flag using *_ro command.\r\n"),
            ("FUNCTION LIST LIBRARYNAME k*", "*1\r\n*6\r\n$12\r\nlibrary_name\r\n$2\r\nkv\r\n$6\r\nengine\r\n$3\r\nLUA\r\n$9\r\nfunctions\r\n*1\r\n*6\r\n$4\r\nname\r\n$2\r\nkv\r\n$11\r\ndescription\r\n$-1\r\n$5\r\nflags\r\n*0\r\n"),
            ("FUNCTION LIST bogus", "-ERR Unknown argument bogus\r\n"),
            ("FUNCTION LIST LIBRARYNAME", "-ERR library name argument was not given\r\n"),
            ("FUNCTION LIST WITHCODE LIBRARYNAME x LIBRARYNAME y", "-ERR Unknown argument LIBRARYNAME\r\n"),
            ("FUNCTION STATS", "*4\r\n$14\r\nrunning_script\r\n$-1\r\n$7\r\nengines\r\n*2\r\n$3\r\nLUA\r\n*4\r\n$15\r\nlibraries_count\r\n:2\r\n$15\r\nfunctions_count\r\n:2\r\n"),
            ("FUNCTION DELETE nosuch", "-ERR Library not found\r\n"),
            ("FUNCTION DELETE test", "+OK\r\n"),
            ("FCALL test 0", "-ERR Function not found\r\n"),
            ("FUNCTION KILL", "-NOTBUSY No scripts in execution right now.\r\n"),
            ("FUNCTION NOPE", "-ERR unknown subcommand 'NOPE'. Try FUNCTION HELP.\r\n"),
            ("FUNCTION DELETE", "-ERR wrong number of arguments for 'function|delete' command\r\n"),
            ("FUNCTION FLUSH bogus", "-ERR FUNCTION FLUSH only supports SYNC|ASYNC option\r\n"),
            ("FUNCTION FLUSH sync extra", "-ERR unknown subcommand or wrong number of arguments for 'FLUSH'. Try FUNCTION HELP.\r\n"),
            ("FUNCTION RESTORE a b c", "-ERR unknown subcommand or wrong number of arguments for 'RESTORE'. Try FUNCTION HELP.\r\n"),
            ("FUNCTION LOAD foo bar", "-ERR Unknown option given: foo\r\n"),
            ("FLUSHALL", "+OK\r\n"),
            ("FCALL kv 1 x bar", "+OK\r\n"),
            ("FUNCTION FLUSH ASYNC", "+OK\r\n"),
            ("FUNCTION LIST", "*0\r\n"),
        ]);
    }

    /// The load's sandbox and register_function's checks, in the words of redis-server 7.0.15.
    #[test]
    fn function_load_refuses_what_redis_refuses() {
        let mut db = Db::large();
        let cases: &[(&str, &str)] = &[
            ("#!lua name=l\nredis.register_function()", "-ERR Error registering functions: ERR wrong number of arguments to redis.register_function\r\n"),
            ("#!lua name=l\nredis.register_function('f')", "-ERR Error registering functions: ERR calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).\r\n"),
            ("#!lua name=l\nredis.register_function('f', 'x')", "-ERR Error registering functions: ERR second argument to redis.register_function must be a function\r\n"),
            ("#!lua name=l\nredis.register_function(nil, function() end)", "-ERR Error registering functions: ERR first argument to redis.register_function must be a string\r\n"),
            ("#!lua name=l\nredis.register_function('', function() end)", "-ERR Error registering functions: ERR Library names can only contain letters, numbers, or underscores(_) and must be at least one character long\r\n"),
            ("#!lua name=l\nredis.register_function('f', function() end)\nredis.register_function('f', function() end)", "-ERR Error registering functions: ERR Function already exists in the library\r\n"),
            ("#!lua name=l\nreturn math.random()", "-ERR Error registering functions: ERR user_function:2: Script attempted to access nonexistent global variable 'math'\r\n"),
            ("#!lua name=l\nreturn redis.call('ping')", "-ERR Error registering functions: ERR user_function:2: Script attempted to access nonexistent global variable 'call'\r\n"),
            ("#!lua name=l\nreturn redis.setresp(3)", "-ERR Error registering functions: ERR user_function:2: Script attempted to access nonexistent global variable 'setresp'\r\n"),
            ("#!lua name=l\nmt = getmetatable(_G)", "-ERR Error registering functions: ERR user_function:2: Script attempted to access nonexistent global variable 'getmetatable'\r\n"),
            ("#!lua name=l\n a = 1", "-ERR Error registering functions: ERR user_function:2: Attempt to modify a readonly table\r\n"),
            ("#!lua name=l\n bad script", "-ERR Error compiling function: user_function:2: '=' expected near 'script'\r\n"),
            ("#!lua name=l\n local a = 1 while 1 do a = a + 1 end", "-ERR Error registering functions: ERR FUNCTION LOAD timeout\r\n"),
            ("#!lua name=l\nreturn 1", "-ERR No functions registered\r\n"),
            ("#!lua name=l\nredis.register_function{function_name='f', callback=function() end, flags='x'}", "-ERR Error registering functions: ERR flags argument to redis.register_function must be a table representing function flags\r\n"),
            ("#!lua name=l\nredis.register_function{function_name='f', callback=function() end, flags={'unknown'}}", "-ERR Error registering functions: ERR unknown flag given\r\n"),
            ("#!lua name=l\nredis.register_function{function_name='f', callback=function() end, some_unknown='u'}", "-ERR Error registering functions: ERR unknown argument given to redis.register_function\r\n"),
            ("#!lua name=l\nredis.register_function{callback=function() end}", "-ERR Error registering functions: ERR redis.register_function must get a function name argument\r\n"),
            ("#!lua name=l\nredis.register_function{function_name='f'}", "-ERR Error registering functions: ERR redis.register_function must get a callback argument\r\n"),
            ("#!lua name=l\nredis.register_function{function_name=function() end, callback=function() end}", "-ERR Error registering functions: ERR function_name argument given to redis.register_function must be a string\r\n"),
            ("#! name=l\n", "-ERR Engine '' not found\r\n"),
            ("#!lua name=l foo=bar\n", "-ERR Invalid metadata value given: foo=bar\r\n"),
            ("#!lua\n", "-ERR Library name was not given\r\n"),
            ("#!lua name=a name=b\n", "-ERR Invalid metadata value, name argument was given multiple times\r\n"),
            ("#!lua name=a\0b\n", "-ERR Library names can only contain letters, numbers, or underscores(_) and must be at least one character long\r\n"),
            ("#!lua name=\"q\"\nredis.register_function('q', function() return 1 end)", "$1\r\nq\r\n"),
        ];
        let mut diffs = Vec::new();
        for (code, want) in cases {
            let got = load(&mut db, code);
            if got != *want {
                diffs.push(format!("{code:?}\n  got:  {got:?}\n  want: {want:?}"));
            }
        }
        assert!(diffs.is_empty(), "{}", diffs.join("\n"));
    }

    /// At run time a library sees the interpreter's globals, read-only, and its load-time
    /// `redis` table no longer registers anything.
    #[test]
    fn functions_run_with_the_globals_protected() {
        let mut db = Db::large();
        let code = "#!lua name=lib1\nlocal lib = redis\nlib.register_function('f1', function() lib.redis = redis return {ok='OK'} end)\nlib.register_function('f2', function() lib.register_function('f3', function() end) end)\nlib.register_function('f4', function() redis.register_function('f5', function() end) end)\nlib.register_function('f6', function(keys, args) return {#keys, #args, string.format('%d', bit.band(7, 3))} end)\nlib.register_function('f7', function() mt = 1 end)";
        assert_eq!(load(&mut db, code), "$4\r\nlib1\r\n");
        let got = eval(&mut db, &["FCALL", "f1", "0"]);
        assert!(got.contains("Attempt to modify a readonly table"), "{got}");
        let got = eval(&mut db, &["FCALL", "f2", "0"]);
        assert!(
            got.contains("can only be called on FUNCTION LOAD command"),
            "{got}"
        );
        let got = eval(&mut db, &["FCALL", "f4", "0"]);
        assert!(
            got.contains("attempt to call field 'register_function' (a nil value)"),
            "{got}"
        );
        assert_eq!(
            eval(&mut db, &["FCALL", "f6", "2", "a", "b", "c"]),
            "*3\r\n:2\r\n:1\r\n$1\r\n3\r\n"
        );
        assert_eq!(
            eval(&mut db, &["FCALL", "f7", "0"]),
            "-ERR user_function:7: Attempt to modify a readonly table script: f7, on @user_function:7.\r\n"
        );
        let boom = "#!lua name=e\nredis.register_function('e', function()\n local x = redis.call('nosuch') return x end)";
        assert_eq!(load(&mut db, boom), "$1\r\ne\r\n");
        assert_eq!(
            eval(&mut db, &["FCALL", "e", "0"]),
            "-ERR Unknown Redis command called from script script: e, on @user_function:3.\r\n"
        );
    }

    /// The flags' effects: `no-writes` makes the function read-only (and FCALL_RO-able, and
    /// runnable past maxmemory), `allow-oom` lets it write past maxmemory, a function without
    /// either is refused there; FUNCTION LIST names them in Redis's order.
    #[test]
    fn function_flags_act_as_redis_flags() {
        let mut db = Db::large();
        let code = "#!lua name=f\nredis.register_function{function_name='ro', callback=function() local r = redis.call('set', 'x', '1') return r end, flags={'no-writes'}}\nredis.register_function{function_name='get', callback=function() return redis.call('get', 'x') end, flags={'allow-stale', 'no-writes'}}\nredis.register_function{function_name='oom', callback=function() return redis.call('set', 'x', '2') end, flags={'allow-oom'}}\nredis.register_function('plain', function() return redis.call('set', 'x', '3') end)";
        assert_eq!(load(&mut db, code), "$1\r\nf\r\n");
        db.replies(&[
            ("FCALL ro 0", "-ERR Write commands are not allowed from read-only scripts. script: ro, on @user_function:2.\r\n"),
            ("FCALL plain 0", "+OK\r\n"),
            ("FCALL_RO get 0", "$1\r\n3\r\n"),
            ("CONFIG SET maxmemory 1", "+OK\r\n"),
            // Refused as Redis's processCommand does: the function's flags make FCALL deny-oom.
            ("FCALL plain 0", "-OOM command not allowed when used memory > 'maxmemory'.\r\n"),
            ("FCALL oom 0", "+OK\r\n"),
            ("FCALL_RO get 0", "$1\r\n2\r\n"),
            ("FUNCTION LOAD REPLACE x", "-OOM command not allowed when used memory > 'maxmemory'.\r\n"),
            ("CONFIG SET maxmemory 0", "+OK\r\n"),
        ]);
        let list = eval(&mut db, &["FUNCTION", "LIST"]);
        assert!(list.contains("$3\r\nget\r\n$11\r\ndescription\r\n$-1\r\n$5\r\nflags\r\n*2\r\n+no-writes\r\n+allow-stale\r\n"), "{list}");
    }

    /// EVAL's shebang as redis-server 7.0.15 reads it (checked against it): `#!lua` and its
    /// `flags=`, every other engine or option refused with Redis's words, by EVAL and SCRIPT
    /// LOAD alike, and the line numbers kept.
    #[test]
    fn eval_shebangs_are_read_as_redis_reads_them() {
        let mut db = Db::large();
        let errors: &[(&str, &str)] = &[
            (
                "#!lua name=x\nreturn 1",
                "-ERR Unknown lua shebang option: name=x\r\n",
            ),
            (
                "#!lua badger=data\nreturn 1",
                "-ERR Unknown lua shebang option: badger=data\r\n",
            ),
            (
                "#!lua flags=no-writes,bogus\nreturn 1",
                "-ERR Unexpected flag in script shebang: bogus\r\n",
            ),
            (
                "#!lua flags=allow-oom,what?\nreturn 1",
                "-ERR Unexpected flag in script shebang: what?\r\n",
            ),
            ("#!lua", "-ERR Invalid script shebang\r\n"),
            (
                "#!luax\nreturn 1",
                "-ERR Unexpected engine in script shebang: #!luax\r\n",
            ),
            (
                "#! lua\nreturn 1",
                "-ERR Unexpected engine in script shebang: #!\r\n",
            ),
            (
                "#!not-lua\nreturn 1",
                "-ERR Unexpected engine in script shebang: #!not-lua\r\n",
            ),
            (
                "#!lua \"flags\nreturn 1",
                "-ERR Invalid engine in script shebang\r\n",
            ),
        ];
        for (script, want) in errors {
            assert_eq!(eval(&mut db, &["EVAL", script, "0"]), *want, "{script}");
            assert_eq!(
                eval(&mut db, &["SCRIPT", "LOAD", script]),
                *want,
                "{script}"
            );
        }
        let ok: &[(&str, &str)] = &[
            ("#!lua\nreturn 1", ":1\r\n"),
            ("#!lua flags=\nreturn 2", ":2\r\n"),
            ("#!lua flags=no-writes,allow-oom,allow-stale,no-cluster,allow-cross-slot-keys\nreturn 3", ":3\r\n"),
            ("#!lua \"flags=no-writes\"\nlocal r = redis.call('set','a','b') return r", "-ERR Write commands are not allowed from read-only scripts. script: SHA, on @user_script:2.\r\n"),
            ("#!lua\nreturn redis.call('set','a','b')", "+OK\r\n"),
        ];
        for (script, want) in ok {
            let want = want.replace("SHA", &crate::lua::sha1hex(script.as_bytes()));
            assert_eq!(eval(&mut db, &["EVAL", script, "0"]), want, "{script}");
        }
        // A script with a shebang may write unless it says no-writes: not from a _RO command.
        let sha = crate::lua::sha1hex(b"#!lua\nreturn 1");
        let refused = "-ERR Can not execute a script with write flag using *_ro command.\r\n";
        assert_eq!(eval(&mut db, &["EVAL_RO", "#!lua\nreturn 1", "0"]), refused);
        assert_eq!(eval(&mut db, &["EVALSHA_RO", &sha, "0"]), refused);
        assert_eq!(
            eval(
                &mut db,
                &[
                    "EVAL_RO",
                    "#!lua flags=no-writes\nreturn redis.call('get','a')",
                    "0"
                ]
            ),
            "$1\r\nb\r\n"
        );
    }

    /// scripting.tcl's "allow-oom shebang flag": past maxmemory a script with a shebang is
    /// refused as a deny-oom write unless it declared `allow-oom` (then its writes go through)
    /// or `no-writes` (which implies it); a script without one is as before, each of its
    /// commands refused OOM as a client's would be.
    #[test]
    fn eval_shebang_flags_decide_oom_as_in_redis() {
        let mut db = Db::large();
        db.cmd("SET x 123");
        let sha = crate::lua::sha1hex(b"#!lua\nreturn 1");
        assert_eq!(
            eval(&mut db, &["SCRIPT", "LOAD", "#!lua\nreturn 1"]),
            format!("$40\r\n{sha}\r\n")
        );
        db.cmd("CONFIG SET maxmemory 1");
        let oom = "-OOM command not allowed when used memory > 'maxmemory'.\r\n";
        let cases: &[(&str, &str, &str)] = &[
            ("EVAL", "redis.call('set','x',1) return 1", "-OOM command not allowed when used memory > 'maxmemory'. script: SHA, on @user_script:1.\r\n"),
            ("EVAL", "return redis.call('get','x')", "$3\r\n123\r\n"),
            ("EVAL", "#!lua flags=\nreturn 1", oom),
            ("EVAL", "#!lua\nreturn 1", oom),
            ("EVAL", "#!lua flags=allow-oom\nredis.call('set','x',1) return 1", ":1\r\n"),
            ("EVAL", "#!lua flags=no-writes\nredis.call('get','x') return 1", ":1\r\n"),
            ("EVAL_RO", "#!lua flags=no-writes\nredis.call('get','x') return 1", ":1\r\n"),
            ("EVAL_RO", "redis.call('get','x') return 1", ":1\r\n"),
        ];
        for (cmd, script, want) in cases {
            let want = want.replace("SHA", &crate::lua::sha1hex(script.as_bytes()));
            assert_eq!(eval(&mut db, &[cmd, script, "0"]), want, "{script}");
        }
        // EVALSHA of a cached script with a shebang is refused the same way.
        assert_eq!(eval(&mut db, &["EVALSHA", &sha, "0"]), oom);
        db.cmd("CONFIG SET maxmemory 0");
        assert_eq!(eval(&mut db, &["EVALSHA", &sha, "0"]), ":1\r\n");
    }

    /// CLIENT PAUSE WRITE holds a script that may write, as Redis's `evalGetCommandFlags`
    /// makes it: one with a shebang without `no-writes`, and one without a shebang (EVAL may
    /// replicate); a script that declared `no-writes` runs through it, by EVAL or EVALSHA.
    #[test]
    fn a_write_pause_holds_scripts_by_their_flags() {
        let (mut db, mut other) = Db::two_connections();
        let ro = "#!lua flags=no-writes\nreturn 1";
        let rw = "#!lua\nreturn 2";
        let ro_sha = crate::lua::sha1hex(ro.as_bytes());
        let rw_sha = crate::lua::sha1hex(rw.as_bytes());
        eval(&mut db, &["SCRIPT", "LOAD", ro]);
        eval(&mut db, &["SCRIPT", "LOAD", rw]);
        db.cmd("CLIENT PAUSE 100000 WRITE");
        let mut as_other = |args: &[&str]| {
            let words: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            let mut out = Vec::new();
            crate::dispatch::execute(&mut db.store, &mut db.info, &mut other, &words, &mut out);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(as_other(&["EVAL", ro, "0"]), ":1\r\n");
        assert_eq!(as_other(&["EVALSHA", &ro_sha, "0"]), ":1\r\n");
        assert_eq!(
            as_other(&["EVAL", "#!lua flags=no-writes\nreturn 3", "0"]),
            ":3\r\n"
        );
        assert_eq!(as_other(&["EVAL", rw, "0"]), "");
        assert_eq!(as_other(&["EVALSHA", &rw_sha, "0"]), "");
        assert_eq!(as_other(&["EVAL", "return 4", "0"]), "");
        assert_eq!(as_other(&["EVAL_RO", "return 5", "0"]), ":5\r\n");
    }

    /// DUMP and RESTORE with each policy: nothing changes unless the whole payload joins.
    #[test]
    fn function_dump_and_restore_policies() {
        let mut db = Db::large();
        let l1 = "#!lua name=lib1\nredis.register_function('f1', function() return 1 end)\nredis.register_function('f3', function() return 3 end)";
        load(&mut db, l1);
        let dump = db.run(&[b"FUNCTION", b"DUMP"]);
        let payload =
            dump[dump.iter().position(|&b| b == b'\n').unwrap() + 1..dump.len() - 2].to_vec();
        let restore = |db: &mut Db, policy: Option<&str>| {
            let mut args: Vec<&[u8]> = vec![b"FUNCTION", b"RESTORE", &payload];
            if let Some(p) = policy {
                args.push(p.as_bytes());
            }
            String::from_utf8(db.run(&args)).unwrap()
        };
        assert_eq!(
            restore(&mut db, None),
            "-ERR Library lib1 already exists\r\n"
        );
        assert_eq!(restore(&mut db, Some("REPLACE")), "+OK\r\n");
        db.cmd("FUNCTION FLUSH");
        load(
            &mut db,
            "#!lua name=lib2\nredis.register_function('f3', function() return 33 end)",
        );
        assert_eq!(
            restore(&mut db, Some("APPEND")),
            "-ERR Function f3 already exists\r\n"
        );
        assert_eq!(
            restore(&mut db, Some("REPLACE")),
            "-ERR Function f3 already exists\r\n"
        );
        assert_eq!(db.cmd("FCALL f3 0"), ":33\r\n");
        assert_eq!(db.cmd("FCALL f1 0"), "-ERR Function not found\r\n");
        assert_eq!(
            restore(&mut db, Some("bogus")),
            "-ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.\r\n"
        );
        assert_eq!(restore(&mut db, Some("FLUSH")), "+OK\r\n");
        assert_eq!(db.cmd("FCALL f3 0"), ":3\r\n");
        assert_eq!(db.cmd("FCALL f1 0"), ":1\r\n");
        assert_eq!(
            eval(&mut db, &["FUNCTION", "RESTORE", "bad_payload"]),
            "-ERR DUMP payload version or checksum are wrong\r\n"
        );
        assert_eq!(db.cmd("FCALL f1 0"), ":1\r\n");
    }

    /// FUNCTION LOAD, DELETE, FLUSH and RESTORE reach the write stream as they were sent (they
    /// touch no key), and the store keeps the libraries: a new server state recovers them
    /// from it; FLUSHALL leaves them.
    #[test]
    fn function_changes_replicate_and_are_kept_in_the_store() {
        let mut db = Db::large();
        db.info.repl.attach();
        let code = lib("kept", "kept", "return 'kept'");
        load(&mut db, &code);
        db.cmd("FUNCTION DELETE kept");
        load(&mut db, &code);
        db.cmd("FLUSHALL");
        let stream = String::from_utf8_lossy(&db.info.repl.pending).into_owned();
        let load_cmd = format!(
            "*4\r\n$8\r\nFUNCTION\r\n$4\r\nLOAD\r\n$7\r\nREPLACE\r\n${}\r\n{code}\r\n",
            code.len()
        );
        assert!(stream.contains(&load_cmd), "{stream:?}");
        assert!(
            stream.contains("*3\r\n$8\r\nFUNCTION\r\n$6\r\nDELETE\r\n$4\r\nkept\r\n"),
            "{stream:?}"
        );
        let mut fresh = crate::lua::Scripts::default();
        crate::functions::recover(&mut db.store, &mut fresh).unwrap();
        let names: Vec<&str> = fresh
            .functions
            .libraries()
            .map(|l| l.name.as_str())
            .collect();
        assert_eq!(names, ["kept"]);
        assert_eq!(db.cmd("DBSIZE"), ":0\r\n");
        db.cmd("FUNCTION FLUSH");
        let mut fresh = crate::lua::Scripts::default();
        crate::functions::recover(&mut db.store, &mut fresh).unwrap();
        assert_eq!(fresh.functions.library_count(), 0);
    }

    /// INFO memory counts the functions and libraries.
    #[test]
    fn info_memory_counts_functions() {
        let mut db = Db::large();
        load(&mut db, "#!lua name=a\nredis.register_function('a1', function() end)\nredis.register_function('a2', function() end)");
        assert_eq!(info_field(&mut db, "memory", "number_of_functions"), "2");
        assert_eq!(info_field(&mut db, "memory", "number_of_libraries"), "1");
        let vm: u64 = info_field(&mut db, "memory", "used_memory_vm_functions")
            .parse()
            .unwrap();
        assert!(vm > 0);
    }

    /// What redis-server 7.0.15 answers to these (checked against it): numbers given to
    /// redis.call in all their digits, redis.sha1hex's argument count, thousands of arguments
    /// through redis.call, cjson's settings, LuaBitOp's -2^31 width.
    #[test]
    fn script_arguments_libraries_and_settings_as_redis_has_them() {
        let mut db = Db::large();
        let cases: &[(&str, &str)] = &[
            ("redis.call('set','n',9007199254740991) redis.call('set','m',0.1) redis.call('set','o',1e20) redis.call('set','p',-1.5e-7) return {redis.call('get','n'), redis.call('get','m'), redis.call('get','o'), redis.call('get','p')}",
             "*4\r\n$16\r\n9007199254740991\r\n$19\r\n0.10000000000000001\r\n$5\r\n1e+20\r\n$23\r\n-1.4999999999999999e-07\r\n"),
            ("return redis.sha1hex(12)", "$40\r\n7b52009b64fd0a2a49e6d8a939753077792b0554\r\n"),
            ("local a = {} for i=1,7999 do a[i] = 1 end return redis.call('lpush', 'l', unpack(a))", ":7999\r\n"),
            ("cjson.encode_max_depth(1) local ok = pcall(cjson.encode, {a={1}}) cjson.encode_max_depth(1000) cjson.decode_max_depth(1) local ok2 = pcall(cjson.decode, '{\"o\":{\"a\":1}}') local ok3 = pcall(cjson.decode, '{\"o\":1}') cjson.decode_max_depth(1000) cjson.encode_invalid_numbers(true) local s = cjson.encode({0/0, 1/0}) cjson.encode_invalid_numbers(false) return {tostring(ok), tostring(ok2), tostring(ok3), s, tostring(cjson.encode_keep_buffer(false))}",
             "*5\r\n$5\r\nfalse\r\n$5\r\nfalse\r\n$4\r\ntrue\r\n$9\r\n[nan,inf]\r\n$5\r\nfalse\r\n"),
            ("return bit.tohex(65535, -2147483648)", "$8\r\n0000FFFF\r\n"),
            ("return bit.tohex(65535, 0)", "$0\r\n\r\n"),
        ];
        let mut diffs = Vec::new();
        for (script, want) in cases {
            let got = eval(&mut db, &["EVAL", script, "0"]);
            if got != *want {
                diffs.push(format!("{script}\n  got:  {got:?}\n  want: {want:?}"));
            }
        }
        assert!(diffs.is_empty(), "{}", diffs.join("\n"));
        let sha = eval(&mut db, &["EVAL", "return redis.sha1hex()", "0"]);
        assert!(
            sha.starts_with("-ERR wrong number of arguments script: "),
            "{sha}"
        );
        // The globals cannot be unprotected: their metatable is not theirs to change, in
        // scripts and in functions.
        for script in [
            "setmetatable(_G, {})",
            "local g = getmetatable(_G) g.__index = {}",
            "redis = function() return 1 end",
            "_G = {}",
        ] {
            let got = eval(&mut db, &["EVAL", script, "0"]);
            assert!(got.contains("Attempt to modify a readonly table"), "{got}");
            let code =
                format!("#!lua name=g\nredis.register_function('g', function() {script} end)");
            assert_eq!(
                eval(&mut db, &["FUNCTION", "LOAD", "REPLACE", &code]),
                "$1\r\ng\r\n"
            );
            let got = eval(&mut db, &["FCALL", "g", "0"]);
            assert!(got.contains("Attempt to modify a readonly table"), "{got}");
        }
        let got = eval(&mut db, &["EVAL", "return loadfile", "0"]);
        assert!(
            got.contains("nonexistent global variable 'loadfile'"),
            "{got}"
        );
    }
}
