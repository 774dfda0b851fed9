//! Lua scripting as Redis 7.0 does it: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT, over a
//! Lua 5.1 interpreter (`mlua`, built from source). A script's `redis.call` goes through
//! [`crate::dispatch::execute`] like a client's command (the table's arity and flags, OOM),
//! after the checks Redis makes for scripts (`noscript` commands, writes from a read-only
//! script). Scripts are atomic: the loop runs nothing else while one runs. A script that runs
//! past `busy-reply-threshold` (`lua-time-limit`) ms lets the server answer the other
//! connections in a restricted mode ([`BusyPeers`]): BUSY to everything but `SCRIPT KILL`,
//! `SHUTDOWN NOSAVE` and the few commands Redis allows then.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Instant;

use cxltier_store::StoreError;
use hashbrown::HashMap;
use mlua::{HookTriggers, Lua, LuaOptions, StdLib, Table, Value, VmState};

use crate::context::{self, Ctx, Effect, Session};
use crate::resp::reply;
use crate::table::{self, flag};

/// Instructions between two looks at the clock (Redis's hook runs every 100000 too).
const HOOK_INSTRUCTIONS: u32 = 100_000;
/// How deep a script's reply (nested tables) may go, and cjson's nesting limit: a table that
/// holds itself would otherwise never end.
const MAX_NESTING: usize = 1000;

pub(crate) const BUSY: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";
const NOTBUSY: &str = "NOTBUSY No scripts in execution right now.";
const UNKILLABLE: &str = "UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.";
const KILLED: &str = "Script killed by user with SCRIPT KILL...";
const KILLED_BY_SIGNAL: &str =
    "Script killed: the server received a stop signal (SIGTERM or SIGINT) and is shutting down";
const NOSCRIPT: &str = "NOSCRIPT No matching script. Please use EVAL.";
const NO_FUNCTIONS: &str = "ERR Redis 7.0 functions (FUNCTION LOAD, FCALL, FCALL_RO) are not supported by cxltier serve: load the code with SCRIPT LOAD and run it with EVALSHA, or send it with EVAL";

/// The state of the script running now, shared by its instruction hook, its `redis.call` and
/// the restricted serving of other connections.
#[derive(Debug)]
pub struct RunState {
    started: Instant,
    /// `busy-reply-threshold` when the script started, in ms.
    limit_ms: u64,
    /// Past the threshold: other connections are being answered BUSY.
    pub busy: bool,
    /// A command of the script wrote: SCRIPT KILL may no longer stop it.
    pub wrote: bool,
    /// SCRIPT KILL (or SHUTDOWN NOSAVE) asked it to stop.
    pub kill: bool,
    /// SHUTDOWN NOSAVE or a stop signal came while it ran: the server stops once it has ended.
    pub shutdown: bool,
    /// What its caller is told when it is stopped.
    kill_message: &'static str,
    /// The script's line of its last redis.call (for the error's "on @user_script:N").
    call_line: Option<usize>,
}

impl RunState {
    /// Stop the script because the server was told to stop (SIGTERM, SIGINT).
    pub fn kill_by_signal(&mut self) {
        self.kill = true;
        self.kill_message = KILLED_BY_SIGNAL;
    }
}

/// What serves the other connections while a script runs. The server sets one before it runs
/// a command that may run a script; the script's instruction hook calls [`BusyPeers::tick`]
/// every 100000 instructions, which looks for a stop signal and, once the script is busy, reads
/// the other connections' commands and answers each with [`busy_command`].
pub trait BusyPeers {
    fn tick(&mut self, run: &mut RunState);
}

/// What a command of another connection gets while a script is busy.
#[derive(Debug, PartialEq, Eq)]
pub enum BusyOutcome {
    /// Answered; the connection goes on.
    Answered,
    /// QUIT: close it after the reply.
    Close,
}

/// Answer `args` of another connection while the script is busy, as Redis does then: only the
/// commands the table flags `ALLOW_BUSY` run — `SCRIPT KILL` stops a script that has not
/// written, `SHUTDOWN NOSAVE` stops it and the server, `AUTH` and `HELLO` authenticate (so that
/// a new client of a server with a password can reach SCRIPT KILL), the transaction's
/// bookkeeping and QUIT go on, a replica's `REPLCONF ACK` is taken silently — and everything
/// else is refused with BUSY (inside MULTI that aborts the transaction at EXEC, as Redis's
/// `flagTransaction` does; an EXEC now discards it with EXECABORT). Before AUTH, a server with
/// a password answers NOAUTH first, as always.
pub fn busy_command(
    run: &mut RunState,
    session: &mut Session,
    requirepass: Option<&str>,
    args: &[&[u8]],
    out: &mut Vec<u8>,
) -> BusyOutcome {
    let Some(&name) = args.first() else {
        return BusyOutcome::Answered;
    };
    let upper = |i: usize| args.get(i).map(|a| a.to_ascii_uppercase());
    let Some(cmd) = table::lookup(name) else {
        context::unknown_command(out, args);
        session.flag_transaction();
        return BusyOutcome::Answered;
    };
    if !cmd.arity_ok(args.len()) {
        context::arity(out, name);
        session.flag_transaction();
        return BusyOutcome::Answered;
    }
    if requirepass.is_some() && !session.authed && !cmd.has(flag::NO_AUTH) {
        reply::error(out, "NOAUTH Authentication required.");
        session.flag_transaction();
        return BusyOutcome::Answered;
    }
    let allowed = cmd.has(flag::ALLOW_BUSY)
        || (matches!(cmd.name, "SCRIPT" | "FUNCTION")
            && args.len() == 2
            && upper(1).as_deref() == Some(b"KILL"));
    if !allowed
        || (session.multi.is_some() && !matches!(cmd.name, "EXEC" | "DISCARD" | "MULTI" | "QUIT"))
    {
        if cmd.name == "EXEC" && session.multi.is_some() {
            session.multi = None;
            session.multi_failed = false;
            reply::error(
                out,
                &format!("EXECABORT Transaction discarded because of: {BUSY}"),
            );
            return BusyOutcome::Answered;
        }
        if session.multi.is_some() {
            session.multi_failed = true;
        }
        reply::error(out, BUSY);
        return BusyOutcome::Answered;
    }
    match cmd.name {
        "SCRIPT" => {
            if run.wrote {
                reply::error(out, UNKILLABLE);
            } else {
                run.kill = true;
                reply::ok(out);
            }
        }
        "FUNCTION" => reply::error(out, NOTBUSY),
        "SHUTDOWN" if upper(1).as_deref() == Some(b"NOSAVE") => {
            run.kill = true;
            run.shutdown = true;
        }
        "QUIT" => {
            reply::ok(out);
            return BusyOutcome::Close;
        }
        "AUTH" if args.len() <= 3 => {
            let n = args.len();
            match crate::connection::check_password(
                requirepass,
                session,
                (n == 3).then(|| args[1]),
                args[n - 1],
            ) {
                Ok(()) => reply::ok(out),
                Err(msg) => reply::error(out, msg),
            }
        }
        "HELLO" => {
            if let Err(msg) = crate::connection::hello_in(session, requirepass, args, out) {
                reply::error(out, &msg);
            }
        }
        // A replica's acknowledgement has no reply; the loop reads the next ones after the
        // script (an ACK is only a position, the latest one counts).
        "REPLCONF" if upper(1).as_deref() == Some(b"ACK") => {}
        "MULTI" if session.multi.is_none() => {
            session.multi = Some(Vec::new());
            session.multi_failed = false;
            reply::ok(out);
        }
        "MULTI" => reply::error(out, "ERR MULTI calls can not be nested"),
        "DISCARD" | "EXEC" if session.multi.is_none() => {
            reply::error(out, &format!("ERR {} without MULTI", cmd.name))
        }
        "DISCARD" => {
            session.multi = None;
            session.multi_failed = false;
            reply::ok(out);
        }
        // EXEC is no ALLOW_BUSY command: refused above while the transaction is open.
        // SHUTDOWN without NOSAVE, WATCH, UNWATCH, RESET and the rest of the ALLOW_BUSY
        // commands touch the server's state, which the script holds: they wait for its end.
        _ => {
            if session.multi.is_some() {
                session.multi_failed = true;
            }
            reply::error(out, BUSY);
        }
    }
    BusyOutcome::Answered
}

/// The interpreter and the scripts it has compiled (SCRIPT LOAD, EVAL), by SHA1.
pub struct Scripts {
    engine: Option<Engine>,
    /// `math.random`'s state: Redis's rand48 is one per process, never reseeded but by
    /// `math.randomseed` (SCRIPT FLUSH keeps it), starting at rand.c's 0x1234ABCD330E.
    rand: Rc<Cell<u64>>,
    /// Set by the server while it can serve other connections during a script.
    pub peers: Option<Rc<RefCell<dyn BusyPeers>>>,
}

impl Default for Scripts {
    fn default() -> Self {
        Scripts {
            engine: None,
            rand: Rc::new(Cell::new(0x1234_ABCD_330E)),
            peers: None,
        }
    }
}

impl Scripts {
    /// Bytes the Lua interpreter holds now (INFO's `used_memory_vm_eval`); 0 before the first
    /// script.
    pub fn used_memory(&self) -> usize {
        self.engine.as_ref().map_or(0, |e| e.lua.used_memory())
    }

    /// Scripts compiled and cached (INFO's `number_of_cached_scripts`).
    pub fn cached(&self) -> usize {
        self.engine.as_ref().map_or(0, |e| e.cache.len())
    }
}

impl std::fmt::Debug for Scripts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scripts")
            .field("cached", &self.engine.as_ref().map_or(0, |e| e.cache.len()))
            .finish()
    }
}

/// One Lua interpreter with Redis's libraries and the `redis` table.
struct Engine {
    lua: Lua,
    cache: HashMap<String, mlua::Function>,
    /// Where the running script's `redis.call` finds the command runner (set per run).
    dispatch: Table,
    run: Rc<RefCell<Option<RunState>>>,
}

/// An error raised by a function of the `redis` table: Redis raises those without the
/// `user_script:N:` position that Lua's library functions (cjson, bit) add.
#[derive(Debug)]
struct RedisLibError(String);

impl std::fmt::Display for RedisLibError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RedisLibError {}

fn lib_error(msg: &str) -> mlua::Error {
    mlua::Error::external(RedisLibError(msg.to_string()))
}

/// Whether `e` (or what caused it) is a [`RedisLibError`].
fn is_lib_error(e: &mlua::Error) -> bool {
    match e {
        mlua::Error::CallbackError { cause, .. } => is_lib_error(cause),
        mlua::Error::ExternalError(inner) => inner.downcast_ref::<RedisLibError>().is_some(),
        _ => false,
    }
}

/// The lowercase hex SHA1 of `body` (a script's name).
pub fn sha1hex(body: &[u8]) -> String {
    sha1_smol::Sha1::from(body).digest().to_string()
}

/// Redis's rand48 (`redisLrand48`), so that `math.random` gives Redis's numbers.
fn lrand48(state: &Cell<u64>) -> i64 {
    let x = state.get().wrapping_mul(0x5DEE_CE66D).wrapping_add(0xB) & ((1 << 48) - 1);
    state.set(x);
    (x >> 17) as i64
}

fn srand48(state: &Cell<u64>, seed: i32) {
    state.set(((seed as u32 as u64) << 16) | 0x330E);
}

/// The most memory the Lua interpreter may hold, its scripts' data included.
pub(crate) const SCRIPT_MEMORY_LIMIT: usize = 256 << 20;

/// A script that leaves the interpreter's heap above this is followed by a full collection:
/// a few milliseconds per hundred megabytes, paid only by the scripts that grew it so.
const COLLECT_ABOVE: usize = 32 << 20;

/// Collect the interpreter's garbage whole when its heap has grown past [`COLLECT_ABOVE`].
/// The cap is lifted while it runs: a collection allocates too (Lua 5.1 shrinks its string
/// table in it), and at the cap that allocation would fail and abandon the collection.
fn collect_if_grown(lua: &Lua) {
    if lua.used_memory() <= COLLECT_ABOVE {
        return;
    }
    let _ = lua.set_memory_limit(0);
    // Twice: the first cycle runs finalizers whose objects the second one frees.
    let _ = lua.gc_collect();
    let _ = lua.gc_collect();
    let _ = lua.set_memory_limit(SCRIPT_MEMORY_LIMIT);
    // The allocator keeps what Lua freed for reuse; an idle server would hold it resident.
    cxltier_sys::heap::release_free_memory();
}

impl Engine {
    fn new(rand: Rc<Cell<u64>>) -> mlua::Result<Engine> {
        // Redis loads base, table, string, math (and debug for its own use); no io, os,
        // package or coroutine.
        let lua = Lua::new_with(
            StdLib::TABLE | StdLib::STRING | StdLib::MATH,
            LuaOptions::default(),
        )?;
        // Bytes from a client build the script: what it may allocate is bounded, so that one
        // EVAL cannot take the server's memory (Redis sets no bound; its process would be
        // killed). Past it the script fails with Lua's "not enough memory" and the server
        // goes on.
        lua.set_memory_limit(SCRIPT_MEMORY_LIMIT)?;
        let g = lua.globals();
        for name in ["dofile", "loadfile", "print"] {
            g.raw_set(name, Value::Nil)?;
        }
        let math: Table = g.get("math")?;
        let r = rand.clone();
        math.raw_set(
            "random",
            lua.create_function(move |_, args: mlua::Variadic<f64>| {
                let x = (lrand48(&r) % i32::MAX as i64) as f64 / i32::MAX as f64;
                match args.len() {
                    0 => Ok(x),
                    // luaL_checkint: truncated to an int.
                    1 => {
                        let m = args[0] as i32 as f64;
                        if m < 1.0 {
                            return Err(mlua::Error::runtime(
                                "bad argument #1 to 'random' (interval is empty)",
                            ));
                        }
                        Ok((x * m).floor() + 1.0)
                    }
                    2 => {
                        let (l, u) = (args[0] as i32 as f64, args[1] as i32 as f64);
                        if l > u {
                            return Err(mlua::Error::runtime(
                                "bad argument #2 to 'random' (interval is empty)",
                            ));
                        }
                        Ok((x * (u - l + 1.0)).floor() + l)
                    }
                    _ => Err(mlua::Error::runtime("wrong number of arguments")),
                }
            })?,
        )?;
        let r = rand.clone();
        math.raw_set(
            "randomseed",
            lua.create_function(move |_, seed: f64| {
                srand48(&r, seed as i64 as i32);
                Ok(())
            })?,
        )?;
        let redis = lua.create_table()?;
        redis.raw_set("REDIS_VERSION", context::REDIS_VERSION)?;
        redis.raw_set("REDIS_VERSION_NUM", 0x07_00_0f)?;
        for (name, level) in [
            ("LOG_DEBUG", 0),
            ("LOG_VERBOSE", 1),
            ("LOG_NOTICE", 2),
            ("LOG_WARNING", 3),
        ] {
            redis.raw_set(name, level)?;
        }
        for (name, v) in [
            ("REPL_NONE", 0),
            ("REPL_AOF", 1),
            ("REPL_SLAVE", 2),
            ("REPL_REPLICA", 2),
            ("REPL_ALL", 3),
        ] {
            redis.raw_set(name, v)?;
        }
        redis.raw_set(
            "sha1hex",
            lua.create_function(|_, s: mlua::String| Ok(sha1hex(&s.as_bytes())))?,
        )?;
        redis.raw_set(
            "error_reply",
            lua.create_function(|lua, s: mlua::String| {
                let t = lua.create_table()?;
                let b = s.as_bytes();
                // Redis 7.0 adds the leading '-' when missing and strips it in the reply.
                let b = b.strip_prefix(b"-").unwrap_or(&b);
                t.raw_set("err", lua.create_string(b)?)?;
                Ok(t)
            })?,
        )?;
        redis.raw_set(
            "status_reply",
            lua.create_function(|lua, s: mlua::String| {
                let t = lua.create_table()?;
                t.raw_set("ok", s)?;
                Ok(t)
            })?,
        )?;
        // The server has no log file of Redis's kind: a script's lines are checked and
        // dropped (the level must be valid, as in Redis).
        redis.raw_set(
            "log",
            lua.create_function(|_, args: mlua::Variadic<Value>| {
                if args.len() < 2 {
                    return Err(lib_error("redis.log() requires two arguments or more."));
                }
                match &args[0] {
                    Value::Integer(l) if (0..=3).contains(l) => Ok(()),
                    Value::Number(l) if (0.0..=3.0).contains(l) => Ok(()),
                    Value::Integer(_) | Value::Number(_) => Err(lib_error("Invalid debug level.")),
                    _ => Err(lib_error("First argument must be a number (log level).")),
                }
            })?,
        )?;
        // Script effects are replicated as the commands run (Redis 7's only mode): these are
        // accepted for the scripts written for older Redis.
        redis.raw_set("replicate_commands", lua.create_function(|_, ()| Ok(true))?)?;
        redis.raw_set(
            "set_repl",
            lua.create_function(|_, flags: i64| {
                if !(0..=3).contains(&flags) {
                    return Err(lib_error("Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE."));
                }
                Ok(())
            })?,
        )?;
        redis.raw_set("breakpoint", lua.create_function(|_, ()| Ok(false))?)?;
        redis.raw_set(
            "debug",
            lua.create_function(|_, _: mlua::Variadic<Value>| Ok(()))?,
        )?;
        let dispatch = lua.create_table()?;
        // redis.call raises the error table a failed command gives; redis.pcall returns it.
        // Both call the runner the running script installed (`dispatch.run`).
        let wrappers: Table = lua
            .load(
                r#"
                local dispatch, error, type = ...
                local function call(...)
                  local r = dispatch.run(...)
                  if type(r) == 'table' and r.err ~= nil then
                    dispatch.raised = r.err
                    error(r.err, 0)
                  end
                  return r
                end
                local function pcall_(...)
                  return dispatch.run(...)
                end
                local function setresp(v) return dispatch.setresp(v) end
                return {call = call, pcall = pcall_, setresp = setresp}
                "#,
            )
            .set_name("=redis")
            .call((
                dispatch.clone(),
                g.get::<Value>("error")?,
                g.get::<Value>("type")?,
            ))?;
        for name in ["call", "pcall", "setresp"] {
            redis.raw_set(name, wrappers.raw_get::<Value>(name)?)?;
        }
        g.raw_set("redis", redis)?;
        g.raw_set("bit", bit_library(&lua)?)?;
        g.raw_set("cjson", cjson_library(&lua)?)?;
        // Redis 7.0's global protection: reading a global that does not exist and writing
        // any global are errors.
        let protect: Table = lua
            .load(
                r#"
                local error, tostring = ...
                return {
                  __newindex = function() error('Attempt to modify a readonly table', 2) end,
                  __index = function(_, k)
                    error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
                  end,
                }
                "#,
            )
            .set_name("=protect")
            .call((g.get::<Value>("error")?, g.get::<Value>("tostring")?))?;
        g.set_metatable(Some(protect))?;
        Ok(Engine {
            lua,
            cache: HashMap::new(),
            dispatch,
            run: Rc::new(RefCell::new(None)),
        })
    }

    /// Compile `body` (text only: Redis refuses precompiled chunks) and cache it.
    fn load(&mut self, body: &[u8]) -> Result<String, String> {
        let sha = sha1hex(body);
        if self.cache.contains_key(&sha) {
            return Ok(sha);
        }
        let f = self
            .lua
            .load(body)
            .set_name("@user_script")
            .set_mode(mlua::ChunkMode::Text)
            .into_function()
            .map_err(|e| {
                let text = match &e {
                    mlua::Error::SyntaxError { message, .. } => message.clone(),
                    other => other.to_string(),
                };
                format!("ERR Error compiling script (new function): {text}")
            })?;
        self.cache.insert(sha.clone(), f);
        Ok(sha)
    }
}

fn engine(scripts: &mut Scripts) -> Result<&mut Engine, String> {
    if scripts.engine.is_none() {
        scripts.engine = Some(
            Engine::new(scripts.rand.clone())
                .map_err(|e| format!("ERR the Lua interpreter did not start: {e}"))?,
        );
    }
    Ok(scripts.engine.as_mut().expect("just set"))
}

/// `bit`: LuaBitOp's functions on 32-bit integers.
fn bit_library(lua: &Lua) -> mlua::Result<Table> {
    fn tobit(n: f64) -> i32 {
        // LuaBitOp adds 2^52+2^51 and keeps the low 32 bits: round half to even, then wrap.
        let r = n.round_ties_even();
        (r.rem_euclid(4_294_967_296.0) as u64 as u32) as i32
    }
    let t = lua.create_table()?;
    t.raw_set("tobit", lua.create_function(|_, n: f64| Ok(tobit(n)))?)?;
    t.raw_set("bnot", lua.create_function(|_, n: f64| Ok(!tobit(n)))?)?;
    let fold = |f: fn(i32, i32) -> i32| {
        move |_: &Lua, args: mlua::Variadic<f64>| {
            let mut it = args.iter();
            let first = it.next().ok_or_else(|| {
                mlua::Error::runtime("bad argument #1 (number expected, got no value)")
            })?;
            Ok(it.fold(tobit(*first), |a, &b| f(a, tobit(b))))
        }
    };
    t.raw_set("band", lua.create_function(fold(|a, b| a & b))?)?;
    t.raw_set("bor", lua.create_function(fold(|a, b| a | b))?)?;
    t.raw_set("bxor", lua.create_function(fold(|a, b| a ^ b))?)?;
    let shift = |f: fn(i32, u32) -> i32| {
        move |_: &Lua, (x, n): (f64, f64)| Ok(f(tobit(x), tobit(n) as u32 & 31))
    };
    t.raw_set(
        "lshift",
        lua.create_function(shift(|x, n| ((x as u32) << n) as i32))?,
    )?;
    t.raw_set(
        "rshift",
        lua.create_function(shift(|x, n| ((x as u32) >> n) as i32))?,
    )?;
    t.raw_set("arshift", lua.create_function(shift(|x, n| x >> n))?)?;
    t.raw_set(
        "rol",
        lua.create_function(shift(|x, n| (x as u32).rotate_left(n) as i32))?,
    )?;
    t.raw_set(
        "ror",
        lua.create_function(shift(|x, n| (x as u32).rotate_right(n) as i32))?,
    )?;
    t.raw_set(
        "bswap",
        lua.create_function(|_, x: f64| Ok(tobit(x).swap_bytes()))?,
    )?;
    t.raw_set(
        "tohex",
        lua.create_function(|_, (x, n): (f64, Option<f64>)| {
            let mut n = n.map_or(8, tobit);
            let upper = n < 0;
            if upper {
                n = -n;
            }
            let n = n.clamp(1, 8) as usize;
            let v = tobit(x) as u32;
            let s = if upper {
                format!("{v:08X}")
            } else {
                format!("{v:08x}")
            };
            Ok(s[8 - n..].to_string())
        })?,
    )?;
    Ok(t)
}

/// `cjson.encode` / `cjson.decode` as lua-cjson does them (numbers as `%.14g`, `/` escaped,
/// a table with keys 1..n an array, `cjson.null` for JSON's null), nesting up to 1000.
fn cjson_library(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    let null = Value::LightUserData(mlua::LightUserData(std::ptr::null_mut()));
    t.raw_set("null", null.clone())?;
    t.raw_set(
        "encode",
        lua.create_function(|lua, v: Value| {
            let mut out = Vec::new();
            json_encode(lua, &v, 0, &mut out)?;
            lua.create_string(&out)
        })?,
    )?;
    t.raw_set(
        "decode",
        lua.create_function(move |lua, s: mlua::String| {
            let b = s.as_bytes();
            let mut p = JsonParser {
                b: &b,
                at: 0,
                null: null.clone(),
            };
            p.ws();
            let v = p.value(lua, 0)?;
            p.ws();
            if p.at != b.len() {
                return Err(p.err("the end of the JSON text"));
            }
            Ok(v)
        })?,
    )?;
    Ok(t)
}

fn lua_number_text(lua: &Lua, n: f64) -> mlua::Result<String> {
    Ok(lua
        .coerce_string(Value::Number(n))?
        .map(|s| s.to_string_lossy())
        .unwrap_or_default())
}

fn json_encode(lua: &Lua, v: &Value, depth: usize, out: &mut Vec<u8>) -> mlua::Result<()> {
    match v {
        Value::Nil => out.extend_from_slice(b"null"),
        Value::LightUserData(u) if u.0.is_null() => out.extend_from_slice(b"null"),
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Integer(i) => out.extend_from_slice(i.to_string().as_bytes()),
        Value::Number(n) => {
            if !n.is_finite() {
                return Err(mlua::Error::runtime(
                    "Cannot serialise number: must not be NaN or Inf",
                ));
            }
            out.extend_from_slice(lua_number_text(lua, *n)?.as_bytes());
        }
        Value::String(s) => json_string(&s.as_bytes(), out),
        Value::Table(t) => {
            if depth >= MAX_NESTING {
                return Err(mlua::Error::runtime(format!(
                    "Cannot serialise, excessive nesting ({})",
                    depth + 1
                )));
            }
            // An array when every key is a positive integer (lua-cjson's rule, without its
            // sparse-array ratio: holes become null).
            let mut max = 0usize;
            let mut count = 0usize;
            let mut array = true;
            for pair in t.pairs::<Value, Value>() {
                let (k, _) = pair?;
                count += 1;
                match k {
                    Value::Integer(i) if i >= 1 => max = max.max(i as usize),
                    Value::Number(n) if n >= 1.0 && n.fract() == 0.0 => max = max.max(n as usize),
                    _ => array = false,
                }
            }
            if array && count > 0 && max <= count.saturating_mul(2).max(10) {
                out.push(b'[');
                for i in 1..=max {
                    if i > 1 {
                        out.push(b',');
                    }
                    json_encode(lua, &t.raw_get::<Value>(i)?, depth + 1, out)?;
                }
                out.push(b']');
            } else if array && count > 0 {
                return Err(mlua::Error::runtime(
                    "Cannot serialise table: excessively sparse array",
                ));
            } else {
                out.push(b'{');
                let mut first = true;
                for pair in t.pairs::<Value, Value>() {
                    let (k, v) = pair?;
                    let key = match &k {
                        Value::String(s) => s.as_bytes().to_vec(),
                        Value::Integer(i) => i.to_string().into_bytes(),
                        Value::Number(n) => lua_number_text(lua, *n)?.into_bytes(),
                        _ => {
                            return Err(mlua::Error::runtime(
                                "Cannot serialise table: table key must be a number or string",
                            ))
                        }
                    };
                    if !first {
                        out.push(b',');
                    }
                    first = false;
                    json_string(&key, out);
                    out.push(b':');
                    json_encode(lua, &v, depth + 1, out)?;
                }
                out.push(b'}');
            }
        }
        other => {
            return Err(mlua::Error::runtime(format!(
                "Cannot serialise {}: type not supported",
                other.type_name()
            )))
        }
    }
    Ok(())
}

fn json_string(s: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &c in s {
        match c {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'/' => out.extend_from_slice(b"\\/"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            8 => out.extend_from_slice(b"\\b"),
            12 => out.extend_from_slice(b"\\f"),
            c if c < 0x20 || c == 0x7f => out.extend_from_slice(format!("\\u{c:04x}").as_bytes()),
            c => out.push(c),
        }
    }
    out.push(b'"');
}

struct JsonParser<'a> {
    b: &'a [u8],
    at: usize,
    null: Value,
}

impl JsonParser<'_> {
    fn err(&self, expected: &str) -> mlua::Error {
        let found = if self.at >= self.b.len() {
            "T_END"
        } else {
            "invalid token"
        };
        mlua::Error::runtime(format!(
            "Expected {expected} but found {found} at character {}",
            self.at + 1
        ))
    }
    fn ws(&mut self) {
        while self.at < self.b.len() && matches!(self.b[self.at], b' ' | b'\t' | b'\n' | b'\r') {
            self.at += 1;
        }
    }
    fn lit(&mut self, word: &[u8], v: Value) -> mlua::Result<Value> {
        if self.b[self.at..].starts_with(word) {
            self.at += word.len();
            Ok(v)
        } else {
            Err(self.err("value"))
        }
    }
    /// One value; `depth` is bounded by [`MAX_NESTING`], so the recursion is too.
    fn value(&mut self, lua: &Lua, depth: usize) -> mlua::Result<Value> {
        if depth >= MAX_NESTING {
            return Err(mlua::Error::runtime(format!(
                "Found too many nested data structures ({}) at character {}",
                depth + 1,
                self.at + 1
            )));
        }
        match self.b.get(self.at) {
            None => Err(self.err("value")),
            Some(b'n') => self.lit(b"null", self.null.clone()),
            Some(b't') => self.lit(b"true", Value::Boolean(true)),
            Some(b'f') => self.lit(b"false", Value::Boolean(false)),
            Some(b'"') => Ok(Value::String(lua.create_string(self.string()?)?)),
            Some(b'[') => {
                self.at += 1;
                let t = lua.create_table()?;
                self.ws();
                if self.b.get(self.at) == Some(&b']') {
                    self.at += 1;
                    return Ok(Value::Table(t));
                }
                let mut i = 1;
                loop {
                    self.ws();
                    let v = self.value(lua, depth + 1)?;
                    t.raw_set(i, v)?;
                    i += 1;
                    self.ws();
                    match self.b.get(self.at) {
                        Some(b',') => self.at += 1,
                        Some(b']') => {
                            self.at += 1;
                            return Ok(Value::Table(t));
                        }
                        _ => return Err(self.err("comma or array end")),
                    }
                }
            }
            Some(b'{') => {
                self.at += 1;
                let t = lua.create_table()?;
                self.ws();
                if self.b.get(self.at) == Some(&b'}') {
                    self.at += 1;
                    return Ok(Value::Table(t));
                }
                loop {
                    self.ws();
                    if self.b.get(self.at) != Some(&b'"') {
                        return Err(self.err("object key string"));
                    }
                    let k = self.string()?;
                    self.ws();
                    if self.b.get(self.at) != Some(&b':') {
                        return Err(self.err("colon"));
                    }
                    self.at += 1;
                    self.ws();
                    let v = self.value(lua, depth + 1)?;
                    t.raw_set(lua.create_string(k)?, v)?;
                    self.ws();
                    match self.b.get(self.at) {
                        Some(b',') => self.at += 1,
                        Some(b'}') => {
                            self.at += 1;
                            return Ok(Value::Table(t));
                        }
                        _ => return Err(self.err("comma or object end")),
                    }
                }
            }
            Some(_) => {
                let start = self.at;
                while self.at < self.b.len()
                    && matches!(
                        self.b[self.at],
                        b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'
                    )
                {
                    self.at += 1;
                }
                std::str::from_utf8(&self.b[start..self.at])
                    .ok()
                    .and_then(|s| s.parse::<f64>().ok())
                    .map(Value::Number)
                    .ok_or_else(|| {
                        self.at = start;
                        self.err("value")
                    })
            }
        }
    }
    fn string(&mut self) -> mlua::Result<Vec<u8>> {
        self.at += 1;
        let mut s = Vec::new();
        loop {
            let Some(&c) = self.b.get(self.at) else {
                return Err(self.err("string end"));
            };
            self.at += 1;
            match c {
                b'"' => return Ok(s),
                b'\\' => {
                    let Some(&e) = self.b.get(self.at) else {
                        return Err(self.err("escape"));
                    };
                    self.at += 1;
                    match e {
                        b'"' | b'\\' | b'/' => s.push(e),
                        b'b' => s.push(8),
                        b'f' => s.push(12),
                        b'n' => s.push(b'\n'),
                        b'r' => s.push(b'\r'),
                        b't' => s.push(b'\t'),
                        b'u' => {
                            let hex = |p: &Self, at: usize| {
                                p.b.get(at..at + 4)
                                    .and_then(|h| std::str::from_utf8(h).ok())
                                    .and_then(|h| u32::from_str_radix(h, 16).ok())
                            };
                            let Some(mut cp) = hex(self, self.at) else {
                                return Err(self.err("unicode escape"));
                            };
                            self.at += 4;
                            if (0xD800..0xDC00).contains(&cp)
                                && self.b.get(self.at..self.at + 2) == Some(b"\\u")
                            {
                                if let Some(lo) = hex(self, self.at + 2) {
                                    if (0xDC00..0xE000).contains(&lo) {
                                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                                        self.at += 6;
                                    }
                                }
                            }
                            let ch = char::from_u32(cp).unwrap_or('\u{FFFD}');
                            let mut buf = [0u8; 4];
                            s.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                        }
                        _ => return Err(self.err("escape")),
                    }
                }
                c => s.push(c),
            }
        }
    }
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
            reply::array(ctx.out, SCRIPT_HELP.len());
            for line in SCRIPT_HELP {
                reply::simple(ctx.out, line);
            }
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
                let e = crate::dispatch::execute(
                    ctx.store,
                    ctx.info,
                    &mut script_session,
                    &argv,
                    &mut out,
                );
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

    use crate::dispatch::execute;
    use crate::testdb::*;

    /// A script that allocates without bound (a client's bytes) stops at the interpreter's
    /// memory limit with an error, and the server serves the next script.
    #[test]
    fn a_script_that_grows_without_bound_fails_at_the_memory_limit() {
        let mut db = Db::large();
        let script: &[u8] =
            b"local t = {} local s = string.rep('x', 1048576) for i = 1, 100000 do t[i] = s .. i end return 1";
        let mut out = Vec::new();
        execute(
            &mut db.store,
            &mut db.info,
            &mut db.session,
            &[b"EVAL", script, b"0"],
            &mut out,
        );
        let reply = String::from_utf8_lossy(&out).into_owned();
        assert!(
            reply.starts_with('-') && reply.contains("memory"),
            "{reply}"
        );
        let mut out = Vec::new();
        execute(
            &mut db.store,
            &mut db.info,
            &mut db.session,
            &[b"EVAL", b"return 7", b"0"],
            &mut out,
        );
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
                    crate::scripting::sha1hex(args[1].as_bytes()),
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
        let mut out = Vec::new();
        execute(
            &mut db.store,
            &mut db.info,
            &mut db.session,
            &words,
            &mut out,
        );
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
        let sha = crate::scripting::sha1hex(b"return 'loaded'");
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
        assert_eq!(
            db.cmd("SCRIPT FLUSH bogus"),
            "-ERR SCRIPT FLUSH only support SYNC|ASYNC option\r\n"
        );
        assert_eq!(
            db.cmd("SCRIPT NOPE"),
            "-ERR unknown subcommand 'NOPE'. Try SCRIPT HELP.\r\n"
        );
        // EVAL caches what it ran; a write inside commits like the command's own.
        let set = "return redis.call('set',KEYS[1],ARGV[1])";
        assert_eq!(eval(&mut db, &["EVAL", set, "1", "k", "v"]), "+OK\r\n");
        assert_eq!(db.cmd("GET k"), "$1\r\nv\r\n");
        assert_eq!(
            eval(
                &mut db,
                &[
                    "SCRIPT",
                    "EXISTS",
                    &crate::scripting::sha1hex(set.as_bytes())
                ]
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
