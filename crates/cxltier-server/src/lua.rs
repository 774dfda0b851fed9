//! The Lua interpreter scripts run in, below the handlers: Lua 5.1 with Redis 7.0's libraries
//! (`cjson`, `bit`, `math.random` as Redis's rand48), the bound on what a script may allocate,
//! the script cache, and the state of the script running that its hook, its `redis.call` and
//! the busy mode share ([`RunState`], [`BusyPeers`]).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Instant;

use hashbrown::HashMap;
use mlua::{Lua, LuaOptions, StdLib, Table, Value};

/// Instructions between two looks at the clock (Redis's hook runs every 100000 too).
pub(crate) const HOOK_INSTRUCTIONS: u32 = 100_000;

/// How deep a script's reply (nested tables) may go, and cjson's nesting limit: a table that
/// holds itself would otherwise never end.
pub(crate) const MAX_NESTING: usize = 1000;

pub(crate) const KILLED: &str = "Script killed by user with SCRIPT KILL...";

pub(crate) const KILLED_BY_SIGNAL: &str =
    "Script killed: the server received a stop signal (SIGTERM or SIGINT) and is shutting down";

/// The state of the script running now, shared by its instruction hook, its `redis.call` and
/// the restricted serving of other connections.
#[derive(Debug)]
pub struct RunState {
    pub(crate) started: Instant,
    /// `busy-reply-threshold` when the script started, in ms.
    pub(crate) limit_ms: u64,
    /// Past the threshold: other connections are being answered BUSY.
    pub busy: bool,
    /// A command of the script wrote: SCRIPT KILL may no longer stop it.
    pub wrote: bool,
    /// SCRIPT KILL (or SHUTDOWN NOSAVE) asked it to stop.
    pub kill: bool,
    /// SHUTDOWN NOSAVE or a stop signal came while it ran: the server stops once it has ended.
    pub shutdown: bool,
    /// What its caller is told when it is stopped.
    pub(crate) kill_message: &'static str,
    /// The script's line of its last redis.call (for the error's "on @user_script:N").
    pub(crate) call_line: Option<usize>,
    /// The function running, when FCALL runs one (FUNCTION KILL stops it, SCRIPT KILL does not).
    pub function: Option<FunctionRun>,
}

/// What FUNCTION STATS tells of the function running: its name, the command that runs it, and
/// the libraries and functions there are (which cannot change while it runs).
#[derive(Debug, Clone)]
pub struct FunctionRun {
    pub name: String,
    pub command: Vec<Vec<u8>>,
    pub libraries: usize,
    pub functions: usize,
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
/// the other connections' commands and answers each with [`crate::dispatch::busy_command`].
pub trait BusyPeers {
    fn tick(&mut self, run: &mut RunState);
}

/// The interpreter and the scripts it has compiled (SCRIPT LOAD, EVAL), by SHA1.
pub struct Scripts {
    pub(crate) engine: Option<Engine>,
    /// `math.random`'s state: Redis's rand48 is one per process, never reseeded but by
    /// `math.randomseed` (SCRIPT FLUSH keeps it), starting at rand.c's 0x1234ABCD330E.
    pub(crate) rand: Rc<Cell<u64>>,
    /// Set by the server while it can serve other connections during a script.
    pub peers: Option<Rc<RefCell<dyn BusyPeers>>>,
    /// Redis 7.0 functions: the libraries FUNCTION LOAD loaded and their interpreter.
    pub functions: crate::functions::Functions,
}

impl Default for Scripts {
    fn default() -> Self {
        Scripts {
            engine: None,
            rand: Rc::new(Cell::new(0x1234_ABCD_330E)),
            peers: None,
            functions: crate::functions::Functions::default(),
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
pub(crate) struct Engine {
    pub(crate) lua: Lua,
    pub(crate) cache: HashMap<String, mlua::Function>,
    /// Where the running script's `redis.call` finds the command runner (set per run).
    pub(crate) dispatch: Table,
    pub(crate) run: Rc<RefCell<Option<RunState>>>,
    /// `lock(t, mt)`: setmetatable refuses `t` from now on, and getmetatable shows `mt` (the
    /// metatable `t` was given) only as a read-only view.
    pub(crate) lock: mlua::Function,
    /// The globals EVAL's scripts see (read-only, over the interpreter's).
    env: Table,
}

/// An error raised by a function of the `redis` table: Redis raises those without the
/// `user_script:N:` position that Lua's library functions (cjson, bit) add.
#[derive(Debug)]
pub(crate) struct RedisLibError(String);

impl std::fmt::Display for RedisLibError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RedisLibError {}

pub(crate) fn lib_error(msg: &str) -> mlua::Error {
    mlua::Error::external(RedisLibError(msg.to_string()))
}

/// Whether `e` (or what caused it) is a [`RedisLibError`].
pub(crate) fn is_lib_error(e: &mlua::Error) -> bool {
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
pub(crate) fn lrand48(state: &Cell<u64>) -> i64 {
    let x = state.get().wrapping_mul(0x5DEE_CE66D).wrapping_add(0xB) & ((1 << 48) - 1);
    state.set(x);
    (x >> 17) as i64
}

pub(crate) fn srand48(state: &Cell<u64>, seed: i32) {
    state.set(((seed as u32 as u64) << 16) | 0x330E);
}

/// The most memory the Lua interpreter may hold, its scripts' data included.
pub(crate) const SCRIPT_MEMORY_LIMIT: usize = 256 << 20;

/// A script that leaves the interpreter's heap above this is followed by a full collection:
/// a few milliseconds per hundred megabytes, paid only by the scripts that grew it so.
pub(crate) const COLLECT_ABOVE: usize = 32 << 20;

/// Collect the interpreter's garbage whole when its heap has grown past [`COLLECT_ABOVE`].
/// The cap is lifted while it runs: a collection allocates too (Lua 5.1 shrinks its string
/// table in it), and at the cap that allocation would fail and abandon the collection.
pub(crate) fn collect_if_grown(lua: &Lua) {
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

/// Compile `code` as a text chunk named `name` (Redis refuses precompiled chunks) that sees
/// `env` as its globals; the error is the compiler's message alone, for the caller to word.
pub(crate) fn compile_text(
    lua: &Lua,
    code: &[u8],
    name: &str,
    env: &Table,
) -> Result<mlua::Function, String> {
    lua.load(code)
        .set_name(name)
        .set_mode(mlua::ChunkMode::Text)
        .set_environment(env.clone())
        .into_function()
        .map_err(|e| match e {
            mlua::Error::SyntaxError { message, .. } => message,
            other => other.to_string(),
        })
}

impl Engine {
    pub(crate) fn new(rand: Rc<Cell<u64>>) -> mlua::Result<Engine> {
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
        redis.raw_set("REDIS_VERSION", crate::version::REDIS_VERSION)?;
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
            lua.create_function(|lua, args: mlua::Variadic<Value>| {
                if args.len() != 1 {
                    return Err(lib_error("wrong number of arguments"));
                }
                // lua_tolstring: a string, or a number in its text; anything else hashes as
                // nothing (Redis hashes the NULL it gets as no bytes).
                let text = match &args[0] {
                    Value::String(s) => s.as_bytes().to_vec(),
                    v @ (Value::Integer(_) | Value::Number(_)) => lua
                        .coerce_string(v.clone())?
                        .map(|s| s.as_bytes().to_vec())
                        .unwrap_or_default(),
                    _ => Vec::new(),
                };
                Ok(sha1hex(&text))
            })?,
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
                local select = select
                -- The arguments go to the runner in one table: a C function given thousands
                -- of them (unpack of a large table) would have no stack left to work in.
                local function call(...)
                  local r = dispatch.run(select('#', ...), {...})
                  if type(r) == 'table' and r.err ~= nil then
                    dispatch.raised = r.err
                    error(r.err, 0)
                  end
                  return r
                end
                local function pcall_(...)
                  return dispatch.run(select('#', ...), {...})
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
        // any global are errors. Redis's Lua has read-only tables; here the globals' metatable
        // shows itself to getmetatable as a read-only view, and setmetatable refuses the
        // tables locked (the globals, and the functions' environment).
        let (protect, guarded_setmetatable, lock): (Table, mlua::Function, mlua::Function) = lua
            .load(
                r#"
                local error, tostring, setmetatable = ...
                local function readonly() error('Attempt to modify a readonly table', 2) end
                local protect = {
                  __newindex = readonly,
                  __index = function(_, k)
                    error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
                  end,
                }
                local locked = setmetatable({}, {__mode = 'k'})
                local function lock(t) locked[t] = true end
                local function view_of(mt)
                  local view = setmetatable({}, {__index = mt, __newindex = readonly})
                  lock(view)
                  return view
                end
                protect.__metatable = view_of(protect)
                local function guarded(t, mt)
                  if locked[t] then error('Attempt to modify a readonly table', 2) end
                  return setmetatable(t, mt)
                end
                return protect, guarded, function(t, mt)
                  lock(t)
                  if mt ~= nil then mt.__metatable = view_of(mt) end
                end
                "#,
            )
            .set_name("=protect")
            .call((
                g.get::<Value>("error")?,
                g.get::<Value>("tostring")?,
                g.get::<Value>("setmetatable")?,
            ))?;
        g.raw_set("setmetatable", guarded_setmetatable)?;
        g.set_metatable(Some(protect.clone()))?;
        lock.call::<()>((g.clone(), Value::Nil))?;
        // What a script's code sees as its globals: an empty table over the globals, so that
        // assigning a global that exists (`redis = ...`, `_G = {}`) is refused too.
        let env = lua.create_table()?;
        let env_meta = lua.create_table()?;
        env_meta.raw_set("__index", g.clone())?;
        env_meta.raw_set("__newindex", protect.raw_get::<Value>("__newindex")?)?;
        env.set_metatable(Some(env_meta.clone()))?;
        lock.call::<()>((env.clone(), env_meta))?;
        Ok(Engine {
            lua,
            cache: HashMap::new(),
            dispatch,
            run: Rc::new(RefCell::new(None)),
            lock,
            env,
        })
    }

    /// Compile `body` (text only: Redis refuses precompiled chunks) and cache it.
    pub(crate) fn load(&mut self, body: &[u8]) -> Result<String, String> {
        let sha = sha1hex(body);
        if self.cache.contains_key(&sha) {
            return Ok(sha);
        }
        let f = compile_text(&self.lua, body, "@user_script", &self.env)
            .map_err(|text| format!("ERR Error compiling script (new function): {text}"))?;
        self.cache.insert(sha.clone(), f);
        Ok(sha)
    }
}

pub(crate) fn engine(scripts: &mut Scripts) -> Result<&mut Engine, String> {
    if scripts.engine.is_none() {
        scripts.engine = Some(
            Engine::new(scripts.rand.clone())
                .map_err(|e| format!("ERR the Lua interpreter did not start: {e}"))?,
        );
    }
    Ok(scripts.engine.as_mut().expect("just set"))
}

/// `bit`: LuaBitOp's functions on 32-bit integers.
pub(crate) fn bit_library(lua: &Lua) -> mlua::Result<Table> {
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
            // In 64 bits: the negation of -2^31 (upper case, all eight digits) cannot overflow,
            // as Redis 7.0.15's fix of LuaBitOp has it.
            let mut n = n.map_or(8, |v| i64::from(tobit(v)));
            let upper = n < 0;
            if upper {
                n = -n;
            }
            let n = n.min(8) as usize;
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

/// lua-cjson's settings a script may change (`cjson.encode_max_depth` and its kin); they hold
/// for the interpreter's life, as lua-cjson's one configuration does in Redis.
struct JsonConfig {
    encode_max_depth: Cell<usize>,
    decode_max_depth: Cell<usize>,
    /// lua-cjson's `encode_invalid_numbers`: 0 refuses NaN and Inf, 1 writes them (`nan`,
    /// `inf`), 2 writes them as `null`.
    invalid_numbers: Cell<u8>,
    keep_buffer: Cell<bool>,
}

/// A depth setting as lua-cjson's `json_integer_option` takes it (1 up), held to
/// [`MAX_NESTING`] here: encoding and decoding recurse once per level.
fn depth_option(v: Option<Value>, setting: &Cell<usize>) -> mlua::Result<usize> {
    match v {
        None | Some(Value::Nil) => {}
        Some(Value::Integer(n)) if n >= 1 => setting.set((n as usize).min(MAX_NESTING)),
        Some(Value::Number(n)) if n >= 1.0 => setting.set((n as usize).min(MAX_NESTING)),
        Some(_) => {
            return Err(mlua::Error::runtime(
                "bad argument #1 (expected integer between 1 and 2147483647)",
            ))
        }
    }
    Ok(setting.get())
}

/// `cjson.encode` / `cjson.decode` as lua-cjson does them (numbers as `%.14g`, `/` escaped,
/// a table with keys 1..n an array, `cjson.null` for JSON's null), nesting up to 1000 (or the
/// depth a script set lower with `encode_max_depth` / `decode_max_depth`), and the settings
/// `encode_invalid_numbers` and `encode_keep_buffer` (which changes nothing here: no buffer is
/// kept between calls).
pub(crate) fn cjson_library(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    let cfg = Rc::new(JsonConfig {
        encode_max_depth: Cell::new(MAX_NESTING),
        decode_max_depth: Cell::new(MAX_NESTING),
        invalid_numbers: Cell::new(0),
        keep_buffer: Cell::new(true),
    });
    let null = Value::LightUserData(mlua::LightUserData(std::ptr::null_mut()));
    t.raw_set("null", null.clone())?;
    let c = cfg.clone();
    t.raw_set(
        "encode",
        lua.create_function(move |lua, v: Value| {
            let mut out = Vec::new();
            json_encode(lua, &v, 0, &c, &mut out)?;
            lua.create_string(&out)
        })?,
    )?;
    let c = cfg.clone();
    t.raw_set(
        "decode",
        lua.create_function(move |lua, s: mlua::String| {
            let b = s.as_bytes();
            let mut p = JsonParser {
                b: &b,
                at: 0,
                null: null.clone(),
                max_depth: c.decode_max_depth.get(),
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
    let c = cfg.clone();
    t.raw_set(
        "encode_max_depth",
        lua.create_function(move |_, v: Option<Value>| depth_option(v, &c.encode_max_depth))?,
    )?;
    let c = cfg.clone();
    t.raw_set(
        "decode_max_depth",
        lua.create_function(move |_, v: Option<Value>| depth_option(v, &c.decode_max_depth))?,
    )?;
    let c = cfg.clone();
    t.raw_set(
        "encode_invalid_numbers",
        lua.create_function(move |lua, v: Option<Value>| {
            match v {
                None | Some(Value::Nil) => {}
                Some(Value::Boolean(b)) => c.invalid_numbers.set(b as u8),
                Some(Value::String(s)) => match s.as_bytes().as_ref() {
                    b"off" => c.invalid_numbers.set(0),
                    b"on" => c.invalid_numbers.set(1),
                    b"null" => c.invalid_numbers.set(2),
                    _ => return Err(mlua::Error::runtime("bad argument #1 (invalid option)")),
                },
                Some(_) => return Err(mlua::Error::runtime("bad argument #1 (invalid option)")),
            }
            Ok(match c.invalid_numbers.get() {
                2 => Value::String(lua.create_string("null")?),
                n => Value::Boolean(n == 1),
            })
        })?,
    )?;
    let c = cfg;
    t.raw_set(
        "encode_keep_buffer",
        lua.create_function(move |_, v: Option<bool>| {
            if let Some(b) = v {
                c.keep_buffer.set(b);
            }
            Ok(c.keep_buffer.get())
        })?,
    )?;
    Ok(t)
}

pub(crate) fn lua_number_text(lua: &Lua, n: f64) -> mlua::Result<String> {
    Ok(lua
        .coerce_string(Value::Number(n))?
        .map(|s| s.to_string_lossy())
        .unwrap_or_default())
}

fn json_encode(
    lua: &Lua,
    v: &Value,
    depth: usize,
    cfg: &JsonConfig,
    out: &mut Vec<u8>,
) -> mlua::Result<()> {
    match v {
        Value::Nil => out.extend_from_slice(b"null"),
        Value::LightUserData(u) if u.0.is_null() => out.extend_from_slice(b"null"),
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Integer(i) => out.extend_from_slice(i.to_string().as_bytes()),
        Value::Number(n) => match (n.is_finite(), cfg.invalid_numbers.get()) {
            (false, 0) => {
                return Err(mlua::Error::runtime(
                    "Cannot serialise number: must not be NaN or Inf",
                ))
            }
            (false, 2) => out.extend_from_slice(b"null"),
            (false, _) if n.is_nan() => out.extend_from_slice(b"nan"),
            _ => out.extend_from_slice(lua_number_text(lua, *n)?.as_bytes()),
        },
        Value::String(s) => json_string(&s.as_bytes(), out),
        Value::Table(t) => {
            if depth + 1 > cfg.encode_max_depth.get() {
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
                    json_encode(lua, &t.raw_get::<Value>(i)?, depth + 1, cfg, out)?;
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
                    json_encode(lua, &v, depth + 1, cfg, out)?;
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

pub(crate) fn json_string(s: &[u8], out: &mut Vec<u8>) {
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

pub(crate) struct JsonParser<'a> {
    b: &'a [u8],
    at: usize,
    null: Value,
    /// Arrays and objects may nest this deep (at most [`MAX_NESTING`]).
    max_depth: usize,
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
    /// Whether `byte` is next, skipped if so.
    fn eat(&mut self, byte: u8) -> bool {
        let next = self.b.get(self.at) == Some(&byte);
        self.at += usize::from(next);
        next
    }
    /// After an array's element or an object's member: a comma, more to come (false), or
    /// `close`, the end (true); else the error expecting `what`.
    fn comma_or_close(&mut self, close: u8, what: &str) -> mlua::Result<bool> {
        self.ws();
        if self.eat(b',') {
            Ok(false)
        } else if self.eat(close) {
            Ok(true)
        } else {
            Err(self.err(what))
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
        let opens = matches!(self.b.get(self.at), Some(b'[' | b'{'));
        if opens && depth + 1 > self.max_depth.min(MAX_NESTING) {
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
                if self.eat(b']') {
                    return Ok(Value::Table(t));
                }
                let mut i = 1;
                loop {
                    self.ws();
                    let v = self.value(lua, depth + 1)?;
                    t.raw_set(i, v)?;
                    i += 1;
                    if self.comma_or_close(b']', "comma or array end")? {
                        return Ok(Value::Table(t));
                    }
                }
            }
            Some(b'{') => {
                self.at += 1;
                let t = lua.create_table()?;
                self.ws();
                if self.eat(b'}') {
                    return Ok(Value::Table(t));
                }
                loop {
                    self.ws();
                    if self.b.get(self.at) != Some(&b'"') {
                        return Err(self.err("object key string"));
                    }
                    let k = self.string()?;
                    self.ws();
                    if !self.eat(b':') {
                        return Err(self.err("colon"));
                    }
                    self.ws();
                    let v = self.value(lua, depth + 1)?;
                    t.raw_set(lua.create_string(k)?, v)?;
                    if self.comma_or_close(b'}', "comma or object end")? {
                        return Ok(Value::Table(t));
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
