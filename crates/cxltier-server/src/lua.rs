//! The Lua interpreter scripts run in, below the handlers: Lua 5.1 with Redis 7.0's libraries
//! (`cjson`, `cmsgpack`, `struct`, `bit`, `math.random` as Redis's rand48), the bound on what a script may allocate,
//! the script cache, and the state of the script running that its hook, its `redis.call` and
//! the busy mode share ([`RunState`], [`BusyPeers`]).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Instant;

use hashbrown::HashMap;
use mlua::{Lua, LuaOptions, StdLib, Table, Value};

/// The library tables a script sees read-only, as Redis protects every table its globals reach.
const LIBRARIES: &[&str] = &[
    "redis", "cjson", "cmsgpack", "struct", "bit", "string", "math", "table",
];

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

    /// The flags a script declared, for EVAL (`body` its text) or EVALSHA (`body` its SHA1):
    /// the cached script's, else those of the text's shebang (Redis's `evalGetCommandFlags`).
    /// `None`: no shebang (or an unknown SHA1, or a shebang in error), so the command is as
    /// the table has it.
    pub fn eval_flags(&self, body: &[u8], by_sha: bool) -> Option<u8> {
        if by_sha && body.len() != 40 || !by_sha && !body.starts_with(b"#!") {
            return None;
        }
        let sha = if by_sha {
            String::from_utf8_lossy(body).to_ascii_lowercase()
        } else {
            sha1hex(body)
        };
        if let Some(cached) = self.engine.as_ref().and_then(|e| e.cache.get(&sha)) {
            return cached.flags;
        }
        if by_sha {
            return None;
        }
        shebang_flags(body).ok().and_then(|(flags, _)| flags)
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
    pub(crate) cache: HashMap<String, CachedScript>,
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

/// `redis.error_reply`'s error, as Redis 7.0's `luaPushErrorBuff` words it: the text up to
/// its first NUL, its first word (after a `-`, added when missing) the error code, or `ERR`
/// when it has one word only, then the rest without its leading and trailing CR and LF.
pub(crate) fn error_reply_text(s: &[u8]) -> Vec<u8> {
    let s = &s[..s.iter().position(|&c| c == 0).unwrap_or(s.len())];
    let s = s.strip_prefix(b"-").unwrap_or(s);
    let (code, msg): (&[u8], &[u8]) = match s.iter().position(|&c| c == b' ') {
        Some(at) => (&s[..at], &s[at + 1..]),
        None => (b"ERR", s),
    };
    let newline = |c: &u8| *c == b'\r' || *c == b'\n';
    let start = msg.iter().position(|c| !newline(c)).unwrap_or(msg.len());
    let end = msg
        .iter()
        .rposition(|c| !newline(c))
        .map_or(start, |e| e + 1);
    let mut text = code.to_vec();
    text.push(b' ');
    text.extend_from_slice(&msg[start..end.max(start)]);
    text
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
            lua.create_function(|lua, args: mlua::Variadic<Value>| {
                let t = lua.create_table()?;
                let text = match (args.len(), args.first()) {
                    (1, Some(Value::String(s))) => error_reply_text(&s.as_bytes()),
                    _ => b"ERR wrong number or type of arguments".to_vec(),
                };
                t.raw_set("err", lua.create_string(&text)?)?;
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
        g.raw_set("cmsgpack", cmsgpack_library(&lua)?)?;
        g.raw_set("struct", struct_library(&lua)?)?;
        // pcall hands the script an error raised by Rust code as its message, a string, as
        // Redis's C functions raise theirs (mlua would hand over a userdata).
        let as_string = lua.create_function(error_value_as_string)?;
        let pcall: mlua::Function = lua
            .load(
                r#"
                local pcall, as_string = ...
                local function fix(ok, ...)
                  if ok then return ok, ... end
                  return false, as_string((...))
                end
                return function(f, ...) return fix(pcall(f, ...)) end
                "#,
            )
            .set_name("=pcall")
            .call((g.get::<Value>("pcall")?, as_string))?;
        g.raw_set("pcall", pcall)?;
        // Redis's Lua parses every chunk as text, so `loadstring` of a precompiled chunk is
        // the parser's error (its message as Lua 5.1 words it), never a function.
        let loadstring: mlua::Function = lua
            .load(
                r#"
                local loadstring, type, byte, find, sub = ...
                local function chunkid(src)
                  src = sub(src, 1, (find(src, '\0', 1, true) or 0) - 1)
                  if byte(src, 1) == 61 then return sub(src, 2, 60) end
                  local len = (find(src, '[\n\r]') or #src + 1) - 1
                  if len > 43 then len = 43 end
                  if len < #src then return '[string "' .. sub(src, 1, len) .. '..."]' end
                  return '[string "' .. src .. '"]'
                end
                return function(s, name)
                  if type(s) == 'string' and byte(s, 1) == 27 then
                    local src = name
                    if type(src) ~= 'string' then src = s end
                    return nil, chunkid(src) .. ":1: unexpected symbol near 'char(27)'"
                  end
                  return loadstring(s, name)
                end
                "#,
            )
            .set_name("=loadstring")
            .call((
                g.get::<Value>("loadstring")?,
                g.get::<Value>("type")?,
                lua.load("return string.byte, string.find, string.sub")
                    .eval::<(Value, Value, Value)>()?,
            ))?;
        g.raw_set("loadstring", loadstring)?;
        // Redis 7.0's global protection: reading a global that does not exist and writing
        // any global are errors. Redis's Lua has read-only tables; here the globals' metatable
        // shows itself to getmetatable as a read-only view, and setmetatable refuses the
        // tables locked (the globals, and the functions' environment).
        let (protect, guarded_setmetatable, lock, guarded_rawset): (
            Table,
            mlua::Function,
            mlua::Function,
            mlua::Function,
        ) = lua
            .load(
                r#"
                local error, tostring, setmetatable, rawset = ...
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
                local function guarded_rawset(t, k, v)
                  -- Raised by the C function in Redis: no position.
                  if locked[t] then error('Attempt to modify a readonly table', 0) end
                  return rawset(t, k, v)
                end
                return protect, guarded, function(t, mt)
                  lock(t)
                  if mt ~= nil then mt.__metatable = view_of(mt) end
                end, guarded_rawset
                "#,
            )
            .set_name("=protect")
            .call((
                g.get::<Value>("error")?,
                g.get::<Value>("tostring")?,
                g.get::<Value>("setmetatable")?,
                g.get::<Value>("rawset")?,
            ))?;
        g.raw_set("setmetatable", guarded_setmetatable)?;
        g.raw_set("rawset", guarded_rawset)?;
        // Redis makes every table the globals reach read-only, the libraries' included
        // (`cjson.encode = f` is refused). Here each library is an empty table over the
        // library, whose assignments are refused and whose metatable is locked; the strings'
        // metatable looks functions up through the read-only `string`, and shows itself only
        // as a read-only view.
        for name in LIBRARIES {
            let library: Table = g.raw_get(*name)?;
            let proxy = lua.create_table()?;
            let meta = lua.create_table()?;
            meta.raw_set("__index", library)?;
            meta.raw_set("__newindex", protect.raw_get::<Value>("__newindex")?)?;
            proxy.set_metatable(Some(meta.clone()))?;
            lock.call::<()>((proxy.clone(), meta))?;
            g.raw_set(*name, proxy)?;
        }
        lua.load(
            "local string, lock = ... local mt = getmetatable('') mt.__index = string lock(mt, mt)",
        )
        .set_name("=protect")
        .call::<()>((g.raw_get::<Value>("string")?, lock.clone()))?;
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

    /// Read `body`'s shebang, compile the rest (text only: Redis refuses precompiled chunks;
    /// the shebang's newline is kept, so that line numbers are the text's) and cache it.
    pub(crate) fn load(&mut self, body: &[u8]) -> Result<String, String> {
        let sha = sha1hex(body);
        if self.cache.contains_key(&sha) {
            return Ok(sha);
        }
        let (flags, skip) = shebang_flags(body).map_err(|e| format!("ERR {e}"))?;
        let func = compile_text(&self.lua, &body[skip..], "@user_script", &self.env)
            .map_err(|text| format!("ERR Error compiling script (new function): {text}"))?;
        self.cache.insert(sha.clone(), CachedScript { func, flags });
        Ok(sha)
    }
}

/// A script of the cache: compiled, and the flags its shebang declared (`None`: it has no
/// shebang, and runs in Redis's compatibility mode, as before Redis 7).
pub(crate) struct CachedScript {
    pub(crate) func: mlua::Function,
    pub(crate) flags: Option<u8>,
}

/// Redis's `evalExtractShebangFlags`: a script that starts `#!lua` may declare
/// `flags=a,b,...` (the functions' flags, [`crate::functions::flags`]); it returns the flags
/// declared (`None` without a shebang) and the shebang's length. Any other engine or option,
/// `name=` included, is an error, worded as Redis words it.
pub(crate) fn shebang_flags(body: &[u8]) -> Result<(Option<u8>, usize), String> {
    if !body.starts_with(b"#!") {
        return Ok((None, 0));
    }
    let Some(len) = body.iter().position(|&c| c == b'\n') else {
        return Err("Invalid script shebang".into());
    };
    let parts = match crate::arg_line::split_args(&body[..len]) {
        Some(parts) if !parts.is_empty() => parts,
        _ => return Err("Invalid engine in script shebang".into()),
    };
    if parts[0] != b"#!lua" {
        return Err(format!(
            "Unexpected engine in script shebang: {}",
            String::from_utf8_lossy(&parts[0])
        ));
    }
    let mut flags = 0;
    for part in &parts[1..] {
        let Some(list) = part.strip_prefix(b"flags=") else {
            return Err(format!(
                "Unknown lua shebang option: {}",
                String::from_utf8_lossy(part)
            ));
        };
        if list.is_empty() {
            continue;
        }
        for name in list.split(|&c| c == b',') {
            let Some((bit, _)) = crate::functions::flags::NAMES
                .iter()
                .find(|(_, n)| n.as_bytes() == name)
            else {
                return Err(format!(
                    "Unexpected flag in script shebang: {}",
                    String::from_utf8_lossy(name)
                ));
            };
            flags |= bit;
        }
    }
    Ok((Some(flags), len))
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

/// lua_struct's largest integer, in bytes (`MAXINTSIZE`).
const STRUCT_MAX_INT_SIZE: usize = 32;
/// lua_struct's default and largest alignment on x86-64 (`MAXALIGN`: a double's).
const STRUCT_MAX_ALIGN: usize = 8;

/// A format's byte order and alignment as lua_struct's `Header` keeps them.
struct StructHeader {
    little: bool,
    align: usize,
}

/// A format being read, option by option.
struct StructFormat<'a> {
    fmt: &'a [u8],
    at: usize,
    func: &'static str,
}

impl StructFormat<'_> {
    /// lua_struct's `getnum`: the digits that follow, or `default` without any.
    fn number(&mut self, default: usize) -> mlua::Result<usize> {
        if !self.fmt.get(self.at).is_some_and(u8::is_ascii_digit) {
            return Ok(default);
        }
        let mut a: i64 = 0;
        while let Some(&d) = self.fmt.get(self.at).filter(|d| d.is_ascii_digit()) {
            let d = i64::from(d - b'0');
            if a > i64::from(i32::MAX) / 10 || a * 10 > i64::from(i32::MAX) - d {
                return Err(mlua::Error::runtime("integral size overflow"));
            }
            a = a * 10 + d;
            self.at += 1;
        }
        Ok(a as usize)
    }

    /// lua_struct's `optsize`: the size of option `opt` (its digits read), 0 for the options
    /// that take no room.
    fn size(&mut self, opt: u8) -> mlua::Result<usize> {
        Ok(match opt {
            b'B' | b'b' | b'x' => 1,
            b'H' | b'h' => 2,
            b'L' | b'l' | b'T' | b'd' => 8,
            b'f' => 4,
            b'c' => self.number(1)?,
            b'i' | b'I' => {
                let size = self.number(4)?;
                if size > STRUCT_MAX_INT_SIZE {
                    return Err(mlua::Error::runtime(format!(
                        "integral size {size} is larger than limit of {STRUCT_MAX_INT_SIZE}"
                    )));
                }
                size
            }
            _ => 0,
        })
    }

    /// lua_struct's `controloptions`: byte order, alignment, spaces; anything else is an
    /// invalid option.
    fn control(&mut self, opt: u8, h: &mut StructHeader) -> mlua::Result<()> {
        match opt {
            b' ' => {}
            b'>' => h.little = false,
            b'<' => h.little = true,
            b'!' => {
                let a = self.number(STRUCT_MAX_ALIGN)?;
                if !a.is_power_of_two() {
                    return Err(mlua::Error::runtime(format!(
                        "alignment {a} is not a power of 2"
                    )));
                }
                h.align = a;
            }
            _ => {
                return Err(mlua::Error::runtime(format!(
                    "bad argument #1 to '{}' (invalid format option '{}')",
                    self.func, opt as char
                )))
            }
        }
        Ok(())
    }
}

/// lua_struct's `gettoalign`: the padding before an option of `size` at `len`.
fn struct_padding(len: usize, h: &StructHeader, opt: u8, size: usize) -> usize {
    if size == 0 || opt == b'c' {
        return 0;
    }
    let size = size.min(h.align);
    (size.wrapping_sub(len & (size - 1))) & (size - 1)
}

/// `struct`: lua_struct as Redis 7.0 loads it (x86-64's sizes: `l`, `L` and `T` of 8 bytes,
/// `i` of 4, native order little-endian, alignment 1 unless `!`). `pack(fmt, ...)`,
/// `unpack(fmt, data [, pos])` (the values, then the position after them) and `size(fmt)`,
/// with its error texts.
pub(crate) fn struct_library(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set(
        "pack",
        c_function(lua, |lua, args| {
            let fmt = lua_check_string(lua, args.front(), 1, "pack")?;
            let fmt = fmt.as_bytes();
            let mut f = StructFormat {
                fmt: &fmt,
                at: 0,
                func: "pack",
            };
            let mut h = StructHeader {
                little: true,
                align: 1,
            };
            let mut out: Vec<u8> = Vec::new();
            let mut arg = 1;
            // lua_struct pushes a nil after its arguments: one argument too few is that nil.
            let mut args: Vec<Value> = args.into_iter().collect();
            args.push(Value::Nil);
            while let Some(&opt) = f.fmt.get(f.at) {
                f.at += 1;
                let mut size = f.size(opt)?;
                let pad = struct_padding(out.len(), &h, opt, size);
                out.resize(out.len() + pad, 0);
                match opt {
                    b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                        let n = lua_check_number(lua, args.get(arg), arg + 1, "pack")?;
                        arg += 1;
                        let mut value = if n < 0.0 { n as i64 as u64 } else { n as u64 };
                        let mut bytes = vec![0u8; size];
                        for i in 0..size {
                            let at = if h.little { i } else { size - 1 - i };
                            bytes[at] = value as u8;
                            value >>= 8;
                        }
                        out.extend_from_slice(&bytes);
                    }
                    b'x' => out.push(0),
                    b'f' => {
                        let n = lua_check_number(lua, args.get(arg), arg + 1, "pack")? as f32;
                        arg += 1;
                        out.extend_from_slice(&if h.little {
                            n.to_le_bytes()
                        } else {
                            n.to_be_bytes()
                        });
                    }
                    b'd' => {
                        let n = lua_check_number(lua, args.get(arg), arg + 1, "pack")?;
                        arg += 1;
                        out.extend_from_slice(&if h.little {
                            n.to_le_bytes()
                        } else {
                            n.to_be_bytes()
                        });
                    }
                    b'c' | b's' => {
                        let s = lua_check_string(lua, args.get(arg), arg + 1, "pack")?;
                        arg += 1;
                        let s = s.as_bytes();
                        if size == 0 {
                            size = s.len();
                        }
                        if s.len() < size {
                            // lua_struct names the argument after the string's.
                            return Err(mlua::Error::runtime(format!(
                                "bad argument #{} to 'pack' (string too short)",
                                arg + 1
                            )));
                        }
                        out.extend_from_slice(&s[..size]);
                        if opt == b's' {
                            out.push(0);
                        }
                    }
                    _ => f.control(opt, &mut h)?,
                }
                if out.len() > SCRIPT_MEMORY_LIMIT {
                    return Err(mlua::Error::runtime("not enough memory"));
                }
            }
            Ok(mlua::MultiValue::from_iter([Value::String(
                lua.create_string(&out)?,
            )]))
        })?,
    )?;
    t.raw_set(
        "unpack",
        c_function(lua, |lua, args| {
            let fmt = lua_check_string(lua, args.front(), 1, "unpack")?;
            let fmt = fmt.as_bytes();
            let data = lua_check_string(lua, args.get(1), 2, "unpack")?;
            let data = data.as_bytes();
            let pos = lua_opt_integer(lua, args.get(2), 3, "unpack")?.unwrap_or(1);
            if pos <= 0 {
                return Err(mlua::Error::runtime(
                    "bad argument #3 to 'unpack' (offset must be 1 or greater)",
                ));
            }
            let mut pos = (pos - 1) as usize;
            let ld = data.len();
            let too_short =
                || mlua::Error::runtime("bad argument #2 to 'unpack' (data string too short)");
            let mut f = StructFormat {
                fmt: &fmt,
                at: 0,
                func: "unpack",
            };
            let mut h = StructHeader {
                little: true,
                align: 1,
            };
            let mut values = mlua::MultiValue::new();
            while let Some(&opt) = f.fmt.get(f.at) {
                f.at += 1;
                let mut size = f.size(opt)?;
                pos = pos.saturating_add(struct_padding(pos, &h, opt, size));
                if size > ld || pos > ld - size {
                    return Err(too_short());
                }
                if values.len() + 2 > MSGPACK_MAX_RESULTS {
                    return Err(mlua::Error::runtime("stack overflow (too many results)"));
                }
                let bytes = |size: usize| -> Vec<u8> {
                    let mut b = data[pos..pos + size].to_vec();
                    if !h.little {
                        b.reverse();
                    }
                    b
                };
                match opt {
                    b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                        // Read as lua_struct does: into 64 bits, the first bytes shifted out
                        // past eight.
                        let l = bytes(size)
                            .iter()
                            .rev()
                            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
                        let v = if opt.is_ascii_lowercase() {
                            let shift = ((size as i64 * 8 - 1) & 63) as u32;
                            let mask = u64::MAX << shift;
                            let l = if l & mask != 0 { l | mask } else { l };
                            l as i64 as f64
                        } else {
                            l as f64
                        };
                        values.push_back(Value::Number(v));
                    }
                    b'x' => {}
                    b'f' => {
                        let b = bytes(4);
                        let v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                        values.push_back(Value::Number(f64::from(v)));
                    }
                    b'd' => {
                        let b = bytes(8);
                        let mut a = [0u8; 8];
                        a.copy_from_slice(&b);
                        values.push_back(Value::Number(f64::from_le_bytes(a)));
                    }
                    b'c' => {
                        if size == 0 {
                            let previous = match values.back() {
                                Some(
                                    v @ (Value::Number(_) | Value::Integer(_) | Value::String(_)),
                                ) => lua.coerce_number(v.clone())?,
                                _ => None,
                            };
                            let Some(n) = previous else {
                                return Err(mlua::Error::runtime(
                                    "format 'c0' needs a previous size",
                                ));
                            };
                            values.pop_back();
                            size = n as usize;
                            if size > ld || pos > ld - size {
                                return Err(too_short());
                            }
                        }
                        values.push_back(Value::String(lua.create_string(&data[pos..pos + size])?));
                    }
                    b's' => {
                        let Some(len) = data[pos..].iter().position(|&c| c == 0) else {
                            return Err(mlua::Error::runtime("unfinished string in data"));
                        };
                        size = len + 1;
                        values.push_back(Value::String(lua.create_string(&data[pos..pos + len])?));
                    }
                    _ => f.control(opt, &mut h)?,
                }
                pos += size;
            }
            values.push_back(Value::Integer(pos as i64 + 1));
            Ok(values)
        })?,
    )?;
    t.raw_set(
        "size",
        c_function(lua, |lua, args| {
            let fmt = lua_check_string(lua, args.front(), 1, "size")?;
            let fmt = fmt.as_bytes();
            let mut f = StructFormat {
                fmt: &fmt,
                at: 0,
                func: "size",
            };
            let mut h = StructHeader {
                little: true,
                align: 1,
            };
            let mut pos: usize = 0;
            while let Some(&opt) = f.fmt.get(f.at) {
                f.at += 1;
                let size = f.size(opt)?;
                pos = pos.saturating_add(struct_padding(pos, &h, opt, size));
                if opt == b's' {
                    return Err(mlua::Error::runtime(
                        "bad argument #1 to 'size' (option 's' has no fixed size)",
                    ));
                }
                if opt == b'c' && size == 0 {
                    return Err(mlua::Error::runtime(
                        "bad argument #1 to 'size' (option 'c0' has no fixed size)",
                    ));
                }
                if !opt.is_ascii_alphanumeric() {
                    f.control(opt, &mut h)?;
                }
                pos = pos.saturating_add(size);
            }
            Ok(mlua::MultiValue::from_iter([Value::Integer(pos as i64)]))
        })?,
    )?;
    Ok(t)
}

/// lua_cmsgpack's nesting limit when packing: a table this deep is packed as nil, so that a
/// table that holds itself ends.
pub(crate) const MSGPACK_PACK_NESTING: usize = 16;

/// Lua 5.1's `LUAI_MAXCSTACK`: the slots a C function may hold on its stack. lua_cmsgpack
/// holds its results there and two slots per array or map it is inside of, so this bounds both
/// what `cmsgpack.unpack` returns at once and how deep its input may nest (about 4000).
const LUA_MAX_C_STACK: usize = 8000;

/// The most values one `cmsgpack.unpack` returns here: a few fewer than lua_cmsgpack's 7999,
/// the slots mlua keeps for itself when it hands a callback's results back.
const MSGPACK_MAX_RESULTS: usize = LUA_MAX_C_STACK - 3;

const MSGPACK_TOO_MANY: &str =
    "stack overflow (too many return values at once; use unpack_one or unpack_limit instead.)";
const MSGPACK_TOO_DEEP: &str = "stack overflow (in function mp_decode_to_lua_array)";

/// `cmsgpack`: lua_cmsgpack 0.4.0 as Redis 7.0 loads it. `pack(...)` packs each value and
/// concatenates them (numbers that are whole and fit in 64 bits as integers, others as float32
/// when that is exact and float64 otherwise; a table whose keys are exactly 1..n as an array,
/// any other as a map; tables [`MSGPACK_PACK_NESTING`] deep, functions and other values as
/// nil); `unpack(s)` returns every value of `s`, `unpack_one(s [, offset])` and
/// `unpack_limit(s, limit [, offset])` return the offset to go on from (-1 at the end) and then
/// the values.
pub(crate) fn cmsgpack_library(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set(
        "pack",
        c_function(lua, |lua, args| {
            if args.is_empty() {
                return Err(mlua::Error::runtime(
                    "bad argument #0 to 'pack' (MessagePack pack needs input.)",
                ));
            }
            // What the packed string may take: the room the interpreter has left for it.
            let room = SCRIPT_MEMORY_LIMIT.saturating_sub(lua.used_memory());
            let mut out = Vec::new();
            for v in args.iter() {
                msgpack_encode(v, 0, room, &mut out)?;
            }
            Ok(mlua::MultiValue::from_iter([Value::String(
                lua.create_string(&out)?,
            )]))
        })?,
    )?;
    t.raw_set(
        "unpack",
        c_function(lua, |lua, args| {
            let s = msgpack_input(lua, &args, "unpack")?;
            msgpack_unpack(lua, &s.as_bytes(), 0, 0, args.len())
        })?,
    )?;
    t.raw_set(
        "unpack_one",
        c_function(lua, |lua, args| {
            let offset = lua_opt_integer(lua, args.get(1), 2, "unpack_one")?.unwrap_or(0);
            let s = msgpack_input(lua, &args, "unpack_one")?;
            msgpack_unpack(lua, &s.as_bytes(), 1, offset, 1)
        })?,
    )?;
    t.raw_set(
        "unpack_limit",
        c_function(lua, |lua, args| {
            let limit = lua_opt_integer(lua, args.get(1), 2, "unpack_limit")?.ok_or_else(|| {
                mlua::Error::runtime(
                    "bad argument #2 to 'unpack_limit' (number expected, got no value)",
                )
            })?;
            let offset = lua_opt_integer(lua, args.get(2), 3, "unpack_limit")?.unwrap_or(0);
            let s = msgpack_input(lua, &args, "unpack_limit")?;
            msgpack_unpack(lua, &s.as_bytes(), limit, offset, 1)
        })?,
    )?;
    t.raw_set("_NAME", "cmsgpack")?;
    t.raw_set("_VERSION", "lua-cmsgpack 0.4.0")?;
    t.raw_set("_COPYRIGHT", "Copyright (C) 2012, Salvatore Sanfilippo")?;
    t.raw_set("_DESCRIPTION", "MessagePack C implementation for Lua")?;
    Ok(t)
}

/// A library function that fails as a C function of Redis's Lua does with `luaL_error`: its
/// message starts with where its caller is (`user_script:N: `; nothing when the caller is not
/// Lua code, `pcall` itself), and the message handler adds no other position. A [`lib_error`]
/// is left as it is, unpositioned, as Lua's own runtime errors (`table index is nil`) are.
fn c_function<F>(lua: &Lua, f: F) -> mlua::Result<mlua::Function>
where
    F: Fn(&Lua, mlua::MultiValue) -> mlua::Result<mlua::MultiValue> + 'static,
{
    lua.create_function(move |lua, args: mlua::MultiValue| {
        f(lua, args).map_err(|e| {
            if is_lib_error(&e) {
                return e;
            }
            let text = match &e {
                mlua::Error::RuntimeError(m) => m.clone(),
                other => other.to_string(),
            };
            let at = lua
                .inspect_stack(1, |d| {
                    let src = d.source().short_src.map(|s| s.to_string());
                    match (src, d.current_line()) {
                        (Some(src), Some(line)) if line > 0 => format!("{src}:{line}: "),
                        _ => String::new(),
                    }
                })
                .unwrap_or_default();
            lib_error(&format!("{at}{text}"))
        })
    })
}

/// What `pcall` gives a script for an error raised by Rust code (a library function, the
/// instruction hook): its message as a string, as Redis's C functions raise them, where mlua
/// would give a userdata.
pub(crate) fn error_value_as_string(lua: &Lua, v: Value) -> mlua::Result<Value> {
    fn innermost(e: &mlua::Error) -> String {
        match e {
            mlua::Error::CallbackError { cause, .. } => innermost(cause),
            mlua::Error::RuntimeError(m) => m.clone(),
            mlua::Error::ExternalError(inner) => inner.to_string(),
            other => other.to_string(),
        }
    }
    Ok(match v {
        Value::Error(e) => Value::String(lua.create_string(innermost(&e))?),
        other => other,
    })
}

/// The type name Lua's argument errors use for `v` ("no value" when absent).
fn lua_arg_type(v: Option<&Value>) -> &'static str {
    match v {
        None => "no value",
        Some(Value::Nil) => "nil",
        Some(Value::Boolean(_)) => "boolean",
        Some(Value::Integer(_) | Value::Number(_)) => "number",
        Some(Value::String(_)) => "string",
        Some(Value::Table(_)) => "table",
        Some(Value::Function(_)) => "function",
        Some(Value::Thread(_)) => "thread",
        Some(Value::LightUserData(_) | Value::UserData(_)) => "userdata",
        Some(_) => "userdata",
    }
}

/// `luaL_checklstring` of the first argument: a string, or a number in its text.
fn msgpack_input(lua: &Lua, args: &mlua::MultiValue, func: &str) -> mlua::Result<mlua::String> {
    lua_check_string(lua, args.front(), 1, func)
}

/// `luaL_checklstring` of argument `n`: a string, or a number in its text.
fn lua_check_string(
    lua: &Lua,
    v: Option<&Value>,
    n: usize,
    func: &str,
) -> mlua::Result<mlua::String> {
    match v {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(v @ (Value::Integer(_) | Value::Number(_))) => lua
            .coerce_string(v.clone())?
            .ok_or_else(|| mlua::Error::runtime("number has no text")),
        other => Err(mlua::Error::runtime(format!(
            "bad argument #{n} to '{func}' (string expected, got {})",
            lua_arg_type(other)
        ))),
    }
}

/// `luaL_checknumber` of argument `n`: a number, or a string that reads as one.
fn lua_check_number(lua: &Lua, v: Option<&Value>, n: usize, func: &str) -> mlua::Result<f64> {
    let number = match v {
        Some(Value::Integer(i)) => Some(*i as f64),
        Some(Value::Number(x)) => Some(*x),
        Some(s @ Value::String(_)) => lua.coerce_number(s.clone())?,
        _ => None,
    };
    number.ok_or_else(|| {
        mlua::Error::runtime(format!(
            "bad argument #{n} to '{func}' (number expected, got {})",
            lua_arg_type(v)
        ))
    })
}

/// `luaL_optinteger`: absent or nil is `None`, a number (or a numeric string) truncated.
fn lua_opt_integer(
    lua: &Lua,
    v: Option<&Value>,
    n: usize,
    func: &str,
) -> mlua::Result<Option<i64>> {
    match v {
        None | Some(Value::Nil) => Ok(None),
        Some(Value::Integer(i)) => Ok(Some(*i)),
        Some(Value::Number(x)) => Ok(Some(*x as i64)),
        Some(s @ Value::String(_)) => match lua.coerce_number(s.clone())? {
            Some(x) => Ok(Some(x as i64)),
            None => Err(mlua::Error::runtime(format!(
                "bad argument #{n} to '{func}' (number expected, got string)"
            ))),
        },
        other => Err(mlua::Error::runtime(format!(
            "bad argument #{n} to '{func}' (number expected, got {})",
            lua_arg_type(other)
        ))),
    }
}

fn msgpack_int(n: i64, out: &mut Vec<u8>) {
    if n >= 0 {
        match n {
            0..=127 => out.push(n as u8),
            128..=0xff => out.extend_from_slice(&[0xcc, n as u8]),
            0x100..=0xffff => {
                out.push(0xcd);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            }
            0x1_0000..=0xffff_ffff => {
                out.push(0xce);
                out.extend_from_slice(&(n as u32).to_be_bytes());
            }
            _ => {
                out.push(0xcf);
                out.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
    } else if n >= -32 {
        out.push(n as i8 as u8);
    } else if n >= -128 {
        out.extend_from_slice(&[0xd0, n as i8 as u8]);
    } else if n >= -32768 {
        out.push(0xd1);
        out.extend_from_slice(&(n as i16).to_be_bytes());
    } else if n >= -2_147_483_648 {
        out.push(0xd2);
        out.extend_from_slice(&(n as i32).to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

/// A header of a string, array or map: the fixed form below `fix`, then 8 (strings only), 16
/// and 32 bits.
fn msgpack_header(len: usize, fix: (u8, usize), wide: [u8; 3], out: &mut Vec<u8>) {
    if len < fix.1 {
        out.push(fix.0 | len as u8);
    } else if len <= 0xff && wide[0] != 0 {
        out.extend_from_slice(&[wide[0], len as u8]);
    } else if len <= 0xffff {
        out.push(wide[1]);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(wide[2]);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    }
}

fn msgpack_number(n: f64, out: &mut Vec<u8>) {
    // A whole number in int64's range is an integer (C's `(int64_t)n == n`).
    if n.is_finite()
        && n.trunc() == n
        && (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&n)
    {
        msgpack_int(n as i64, out);
    } else if (n as f32) as f64 == n {
        out.push(0xca);
        out.extend_from_slice(&(n as f32).to_be_bytes());
    } else {
        out.push(0xcb);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

/// Pack `v` at nesting `level` (a table at [`MSGPACK_PACK_NESTING`] is nil). The output is
/// bounded by `room` (what the interpreter could still hold of it): a table that holds itself
/// many times over would otherwise take the server's time and memory.
fn msgpack_encode(v: &Value, level: usize, room: usize, out: &mut Vec<u8>) -> mlua::Result<()> {
    if out.len() > room {
        return Err(mlua::Error::runtime("not enough memory"));
    }
    match v {
        Value::String(s) => {
            let b = s.as_bytes();
            msgpack_header(b.len(), (0xa0, 32), [0xd9, 0xda, 0xdb], out);
            out.extend_from_slice(&b);
        }
        Value::Boolean(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        Value::Integer(i) => msgpack_int(*i, out),
        Value::Number(n) => msgpack_number(*n, out),
        Value::Table(t) if level < MSGPACK_PACK_NESTING => {
            // An array when the keys are exactly 1..n (positive whole numbers that fit in an
            // int, as many as the largest).
            let (mut count, mut max, mut array) = (0i64, 0i64, true);
            for pair in t.pairs::<Value, Value>() {
                let (k, _) = pair?;
                let n = match k {
                    Value::Integer(i) if i > 0 && i <= i64::from(i32::MAX) => i,
                    Value::Number(n) if n > 0.0 && f64::from(n as i32) == n => n as i64,
                    _ => {
                        array = false;
                        break;
                    }
                };
                max = max.max(n);
                count += 1;
            }
            if array && max == count {
                let len = t.raw_len();
                msgpack_header(len, (0x90, 16), [0, 0xdc, 0xdd], out);
                for i in 1..=len {
                    msgpack_encode(&t.raw_get::<Value>(i)?, level + 1, room, out)?;
                }
            } else {
                let len = t.pairs::<Value, Value>().count();
                msgpack_header(len, (0x80, 16), [0, 0xde, 0xdf], out);
                for pair in t.pairs::<Value, Value>() {
                    let (k, v) = pair?;
                    msgpack_encode(&k, level + 1, room, out)?;
                    msgpack_encode(&v, level + 1, room, out)?;
                }
            }
        }
        _ => out.push(0xc0),
    }
    Ok(())
}

/// Why a value could not be read: lua_cmsgpack's two cursor errors, or a Lua error (a table
/// index that is nil or NaN, the stack's limit, memory).
enum MsgpackError {
    Eof,
    BadFormat,
    Lua(mlua::Error),
}

impl From<mlua::Error> for MsgpackError {
    fn from(e: mlua::Error) -> Self {
        MsgpackError::Lua(e)
    }
}

/// An array or map being filled: its table, the values it still expects, and for a map the
/// key read whose value comes next.
struct MsgpackFrame {
    table: Table,
    left: u64,
    next_index: u64,
    map: bool,
    key: Option<Value>,
}

impl MsgpackFrame {
    /// The Lua stack slots lua_cmsgpack holds for this level while it reads the next value:
    /// the table, and the array's index or the map's key once read.
    fn slots(&self) -> usize {
        if self.map && self.key.is_none() {
            1
        } else {
            2
        }
    }
}

struct MsgpackReader<'a> {
    b: &'a [u8],
    at: usize,
}

impl MsgpackReader<'_> {
    /// Fail with `Eof` unless `n` more bytes are there (lua_cmsgpack checks a value's whole
    /// fixed size before it reads any of it).
    fn need(&self, n: usize) -> Result<(), MsgpackError> {
        if self.b.len() - self.at < n {
            Err(MsgpackError::Eof)
        } else {
            Ok(())
        }
    }

    /// The big-endian unsigned integer of the `n` bytes after the tag, the tag and them read.
    fn header(&mut self, n: usize) -> Result<u64, MsgpackError> {
        self.need(1 + n)?;
        let v = self.b[self.at + 1..self.at + 1 + n]
            .iter()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
        self.at += 1 + n;
        Ok(v)
    }

    fn bytes(&mut self, lua: &Lua, len: usize) -> Result<Value, MsgpackError> {
        self.need(len)?;
        let s = lua.create_string(&self.b[self.at..self.at + len])?;
        self.at += len;
        Ok(Value::String(s))
    }

    /// One top-level value, with `held` Lua stack slots in use outside it (the arguments and
    /// the values read before). Iterative: how deep the input nests is bounded by the Lua
    /// stack's limit as in lua_cmsgpack, not by this thread's stack. Every value takes at least
    /// one byte, so the work is bounded by the input's length whatever lengths it claims.
    fn value(&mut self, lua: &Lua, held: usize) -> Result<Value, MsgpackError> {
        let mut frames: Vec<MsgpackFrame> = Vec::new();
        let mut slots = held;
        loop {
            let &tag = self.b.get(self.at).ok_or(MsgpackError::Eof)?;
            if slots + 1 > LUA_MAX_C_STACK {
                return Err(mlua::Error::runtime(MSGPACK_TOO_MANY).into());
            }
            let num = |x: f64| Some(Value::Number(x));
            // A container opens a frame (None); anything else is a value.
            let mut done = match tag {
                // lua_pushunsigned is lua_pushinteger on 64 bits: past int64 it wraps.
                0xcc..=0xcf => num(self.header(1 << (tag - 0xcc))? as i64 as f64),
                0xd0 => num(f64::from(self.header(1)? as u8 as i8)),
                0xd1 => num(f64::from(self.header(2)? as u16 as i16)),
                0xd2 => num(f64::from(self.header(4)? as u32 as i32)),
                0xd3 => num(self.header(8)? as i64 as f64),
                0xca => num(f64::from(f32::from_bits(self.header(4)? as u32))),
                0xcb => num(f64::from_bits(self.header(8)?)),
                0xc0 | 0xc2 | 0xc3 => {
                    self.at += 1;
                    Some(match tag {
                        0xc0 => Value::Nil,
                        t => Value::Boolean(t == 0xc3),
                    })
                }
                0xd9..=0xdb => {
                    let len = self.header(1 << (tag - 0xd9))? as usize;
                    Some(self.bytes(lua, len)?)
                }
                t if t & 0x80 == 0 => {
                    self.at += 1;
                    num(f64::from(t))
                }
                t if t & 0xe0 == 0xe0 => {
                    self.at += 1;
                    num(f64::from(t as i8))
                }
                t if t & 0xe0 == 0xa0 => {
                    let len = usize::from(t & 0x1f);
                    self.need(1 + len)?;
                    self.at += 1;
                    Some(self.bytes(lua, len)?)
                }
                _ => {
                    let (len, map) = match tag {
                        0xdc => (self.header(2)?, false),
                        0xdd => (self.header(4)?, false),
                        0xde => (self.header(2)?, true),
                        0xdf => (self.header(4)?, true),
                        t if t & 0xf0 == 0x90 || t & 0xf0 == 0x80 => {
                            self.at += 1;
                            (u64::from(t & 0xf), t & 0xf0 == 0x80)
                        }
                        _ => return Err(MsgpackError::BadFormat),
                    };
                    let table = lua.create_table()?;
                    // lua_cmsgpack makes room for an array's index once its table is pushed.
                    if !map && slots + 2 > LUA_MAX_C_STACK {
                        return Err(mlua::Error::runtime(MSGPACK_TOO_DEEP).into());
                    }
                    if len == 0 {
                        Some(Value::Table(table))
                    } else {
                        let frame = MsgpackFrame {
                            table,
                            left: len,
                            next_index: 1,
                            map,
                            key: None,
                        };
                        slots += frame.slots();
                        frames.push(frame);
                        None
                    }
                }
            };
            // Hand each finished value to the array or map around it, closing those it fills.
            while let Some(v) = done.take() {
                let Some(top) = frames.last_mut() else {
                    return Ok(v);
                };
                slots -= top.slots();
                if top.map && top.key.is_none() {
                    top.key = Some(v);
                    slots += top.slots();
                    break;
                }
                let key = match top.key.take() {
                    Some(Value::Nil) => return Err(lib_error("table index is nil").into()),
                    Some(Value::Number(n)) if n.is_nan() => {
                        return Err(lib_error("table index is NaN").into())
                    }
                    Some(k) => k,
                    None => {
                        top.next_index += 1;
                        Value::Number((top.next_index - 1) as f64)
                    }
                };
                top.table.raw_set(key, v)?;
                top.left -= 1;
                if top.left > 0 {
                    slots += top.slots();
                    break;
                }
                let closed = frames.pop().expect("the frame just filled");
                done = Some(Value::Table(closed.table));
            }
        }
    }
}

/// lua_cmsgpack's `mp_unpack_full`: with `limit` and `offset` both 0 every value and nothing
/// else; otherwise at most `limit` values from `offset` on, after the offset to go on from
/// (-1 when the input is all read). `args` is how many arguments the function holds on the
/// Lua stack while it reads.
fn msgpack_unpack(
    lua: &Lua,
    b: &[u8],
    limit: i64,
    offset: i64,
    args: usize,
) -> mlua::Result<mlua::MultiValue> {
    if offset < 0 || limit < 0 {
        // lua_cmsgpack prints the input's length where it means the limit.
        return Err(mlua::Error::runtime(format!(
            "Invalid request to unpack with offset of {} and limit of {}.",
            offset as i32,
            b.len() as i32
        )));
    }
    if offset as u64 > b.len() as u64 {
        return Err(mlua::Error::runtime(format!(
            "Start offset {} greater than input length {}.",
            offset as i32,
            b.len() as i32
        )));
    }
    let all = limit == 0 && offset == 0;
    let limit = if all { i64::from(i32::MAX) } else { limit };
    let mut r = MsgpackReader {
        b,
        at: offset as usize,
    };
    let mut values = mlua::MultiValue::new();
    while r.at < b.len() && (values.len() as i64) < limit {
        if values.len() >= MSGPACK_MAX_RESULTS {
            return Err(mlua::Error::runtime(MSGPACK_TOO_MANY));
        }
        match r.value(lua, args + values.len()) {
            Ok(v) => values.push_back(v),
            Err(MsgpackError::Eof) => return Err(mlua::Error::runtime("Missing bytes in input.")),
            Err(MsgpackError::BadFormat) => {
                return Err(mlua::Error::runtime("Bad data format in input."))
            }
            Err(MsgpackError::Lua(e)) => return Err(e),
        }
    }
    if !all {
        let next = if r.at == b.len() { -1 } else { r.at as i64 };
        values.push_front(Value::Number(next as f64));
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use crate::testdb::*;

    /// Run each script with EVAL and compare its reply with redis-server 7.0.15's (`SHA` in an
    /// expected reply stands for the script's SHA1).
    fn replies_as_redis(cases: &[(&str, &str)]) {
        let mut db = Db::large();
        let mut diffs = Vec::new();
        for (script, want) in cases {
            let got = eval(&mut db, &["EVAL", script, "0"]);
            let want = want.replace("SHA", &super::sha1hex(script.as_bytes()));
            if got != want {
                diffs.push(format!("{script}\n  got:  {got:?}\n  want: {want:?}"));
            }
        }
        assert!(diffs.is_empty(), "{}", diffs.join("\n"));
    }

    const HEX: &str = "local function hex(s) local h = '' for i = 1, #s do h = h .. string.format('%02x', string.byte(s, i)) end return h end ";

    /// What redis-server 7.0.15 packs (checked against it): integers in their smallest form,
    /// float32 when exact, strings, booleans, nil, arrays and maps, values it cannot pack as
    /// nil, and a table holding itself cut at 16 levels.
    #[test]
    fn cmsgpack_packs_as_redis_does() {
        let cases = [
            (
                "return {hex(cmsgpack.pack(0.1)), hex(cmsgpack.pack(-1099511627776)), hex(cmsgpack.pack(1.5, 'ab', true, false, nil, {}, {1,2}, {a=1})), hex(cmsgpack.pack(-1, -32, -33, -128, -129, -32768, -32769, -2147483648, -2147483649, 127, 128, 255, 256, 65535, 65536, 4294967295, 4294967296)), hex(cmsgpack.pack(0/0, 1/0, -1/0, 2^63, -2^63, 2^64, 3.4e38, 1e300, -0.0)), hex(cmsgpack.pack(string.rep('x', 31), string.rep('y', 32))), hex(cmsgpack.pack({[1]=1,[3]=3}, {[1.5]=1}, {[0]=1}, {type}, cjson.null, {[2^31]=1}, {[2147483647]=1}))}",
                "*7\r\n$18\r\ncb3fb999999999999a\r\n$18\r\nd3ffffff0000000000\r\n$38\r\nca3fc00000a26162c3c2c09092010281a16101\r\n$122\r\nffe0d0dfd080d1ff7fd18000d2ffff7fffd280000000d3ffffffff7fffffff7fcc80ccffcd0100cdffffce00010000ceffffffffcf0000000100000000\r\n$114\r\ncbfff8000000000000ca7f800000caff800000ca5f000000d38000000000000000ca5f800000cb47eff933c78cdfadcb7e37e43c8800759c00\r\n$132\r\nbf78787878787878787878787878787878787878787878787878787878787878d9207979797979797979797979797979797979797979797979797979797979797979\r\n$64\r\n820101030381ca3fc000000181000191c0c081ce800000000181ce7fffffff01\r\n",
            ),
            (
                "local t = {} for i = 1, 16 do t[i] = i end local m = {} for i = 1, 16 do m['k' .. i] = 1 end return {hex(cmsgpack.pack(t)):sub(1, 8), hex(cmsgpack.pack(m)):sub(1, 8), #cmsgpack.pack(string.rep('z', 256)), hex(cmsgpack.pack(string.rep('z', 256)):sub(1, 4)), hex(cmsgpack.pack(string.rep('z', 65536)):sub(1,5))}",
                "*5\r\n$8\r\ndc001001\r\n$8\r\nde0010a3\r\n:259\r\n$8\r\nda01007a\r\n$10\r\ndb00010000\r\n",
            ),
            (
                "local t = {} t[1] = t return hex(cmsgpack.pack(t))",
                "$34\r\n91919191919191919191919191919191c0\r\n",
            ),
            // scripting.tcl's "cmsgpack can pack and unpack circular references?".
            (
                "local a = {x=nil,y=5} local b = {x=a} a['x'] = b local re = cmsgpack.unpack(cmsgpack.pack(a)) assert(re.x.x.x.x.x.x.x.x.x.x.x.x.x.x.y == re.y) assert(re.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x) assert(re.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x == nil) return hex(cmsgpack.pack(a))",
                "$146\r\n82a17905a17881a17882a17905a17881a17882a17905a17881a17882a17905a17881a17882a17905a17881a17882a17905a17881a17882a17905a17881a17882a17905a17881a178c0\r\n",
            ),
            (
                "return cmsgpack.pack()",
                "-ERR user_script:1: bad argument #0 to 'pack' (MessagePack pack needs input.) script: SHA, on @user_script:1.\r\n",
            ),
        ];
        let cases: Vec<(String, &str)> = cases
            .iter()
            .map(|(s, w)| (format!("{HEX}{s}"), *w))
            .collect();
        let cases: Vec<(&str, &str)> = cases.iter().map(|(s, w)| (s.as_str(), *w)).collect();
        replies_as_redis(&cases);
    }

    /// A table that holds itself many times over would pack to 10^16 copies: packing stops at
    /// the room the interpreter has left (here a small one) with Lua's "not enough memory".
    #[test]
    fn cmsgpack_pack_stops_at_the_room_left() {
        let lua = mlua::Lua::new();
        let t: mlua::Table = lua
            .load("local t = {} for i = 1, 10 do t[i] = t end return t")
            .eval()
            .unwrap();
        let mut out = Vec::new();
        let e = super::msgpack_encode(&mlua::Value::Table(t), 0, 64 << 10, &mut out).unwrap_err();
        assert!(e.to_string().contains("not enough memory"), "{e}");
        assert!(out.len() <= (64 << 10) + 16, "{}", out.len());
    }

    /// What redis-server 7.0.15 unpacks and how it fails (checked against it), hostile input
    /// included: claimed lengths past the end, unknown types, nil and NaN keys, more values
    /// or deeper nesting than the Lua stack holds.
    #[test]
    fn cmsgpack_unpacks_as_redis_does() {
        replies_as_redis(&[
            ("return {cmsgpack.unpack(cmsgpack.pack(1, 'a', {1, 2, {x = 'y'}}, -5.5, 2^40))}",
             "*5\r\n:1\r\n$1\r\na\r\n*3\r\n:1\r\n:2\r\n*0\r\n:-5\r\n:1099511627776\r\n"),
            ("return {tostring(cmsgpack.unpack('\\207\\255\\255\\255\\255\\255\\255\\255\\255')), tostring(cmsgpack.unpack('\\211\\128\\0\\0\\0\\0\\0\\0\\0')), tostring(cmsgpack.unpack('\\202\\62\\32\\0\\0')), tostring(cmsgpack.unpack('\\203\\63\\185\\153\\153\\153\\153\\153\\154')), cmsgpack.unpack('\\208\\128'), cmsgpack.unpack('\\209\\128\\1'), cmsgpack.unpack('\\210\\128\\0\\0\\1'), cmsgpack.unpack('\\206\\255\\255\\255\\255'), cmsgpack.unpack('\\224'), cmsgpack.unpack('\\205\\1\\0'), cmsgpack.unpack('\\204\\200')}",
             "*11\r\n$2\r\n-1\r\n$20\r\n-9.2233720368548e+18\r\n$7\r\n0.15625\r\n$3\r\n0.1\r\n:-128\r\n:-32767\r\n:-2147483647\r\n:4294967295\r\n:-32\r\n:256\r\n:200\r\n"),
            ("local t = cmsgpack.unpack('\\130\\161a\\1\\161b\\146\\192\\195') return {t.a, t.b[1] == nil, t.b[2]}", "*3\r\n:1\r\n:1\r\n:1\r\n"),
            ("local t = cmsgpack.unpack('\\220\\0\\2\\1\\2') local m = cmsgpack.unpack('\\222\\0\\1\\1\\2') return {#t, m[1]}", "*2\r\n:2\r\n:2\r\n"),
            ("return {cmsgpack.unpack('\\217\\3abc', '\\218\\0\\2de', '\\219\\0\\0\\0\\1f')}", "*1\r\n$3\r\nabc\r\n"),
            ("return {cmsgpack.unpack('\\217\\3abc\\218\\0\\2de\\219\\0\\0\\0\\1f')}", "*3\r\n$3\r\nabc\r\n$2\r\nde\r\n$1\r\nf\r\n"),
            ("return cmsgpack.unpack(123)", ":49\r\n"),
            ("return cmsgpack.unpack('')", "$-1\r\n"),
            ("return {cmsgpack.unpack_one(cmsgpack.pack(1, 2, 3))}", "*2\r\n:1\r\n:1\r\n"),
            ("return {cmsgpack.unpack_one(cmsgpack.pack(1, 2, 3), 2)}", "*2\r\n:-1\r\n:3\r\n"),
            ("return {cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), 2)}", "*3\r\n:2\r\n:1\r\n:2\r\n"),
            ("return {cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), 0, 0)}", "*3\r\n:1\r\n:2\r\n:3\r\n"),
            ("return {cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), 0, 1)}", "*1\r\n:1\r\n"),
            ("return {cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), 0, 3)}", "*1\r\n:-1\r\n"),
            ("return {cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), 5, 1.9)}", "*3\r\n:-1\r\n:2\r\n:3\r\n"),
            ("return {cmsgpack.unpack_one('')}", "*1\r\n:-1\r\n"),
            ("return cmsgpack.unpack_one('\\1\\2', '1')", ":-1\r\n"),
            ("return {cmsgpack._NAME, cmsgpack._VERSION}", "*2\r\n$8\r\ncmsgpack\r\n$18\r\nlua-cmsgpack 0.4.0\r\n"),
            ("return cmsgpack.unpack_one('abc', 4)", "-ERR user_script:1: Start offset 4 greater than input length 3. script: SHA, on @user_script:1.\r\n"),
            ("return cmsgpack.unpack_one('abc', -1)", "-ERR user_script:1: Invalid request to unpack with offset of -1 and limit of 3. script: SHA, on @user_script:1.\r\n"),
            ("return cmsgpack.unpack_limit('abc', -1)", "-ERR user_script:1: Invalid request to unpack with offset of 0 and limit of 3. script: SHA, on @user_script:1.\r\n"),
            ("return cmsgpack.unpack()", "-ERR user_script:1: bad argument #1 to 'unpack' (string expected, got no value) script: SHA, on @user_script:1.\r\n"),
            ("return cmsgpack.unpack_one({})", "-ERR user_script:1: bad argument #1 to 'unpack_one' (string expected, got table) script: SHA, on @user_script:1.\r\n"),
            ("return cmsgpack.unpack_limit('a')", "-ERR user_script:1: bad argument #2 to 'unpack_limit' (number expected, got no value) script: SHA, on @user_script:1.\r\n"),
            ("return cmsgpack.unpack_limit('a', 'x')", "-ERR user_script:1: bad argument #2 to 'unpack_limit' (number expected, got string) script: SHA, on @user_script:1.\r\n"),
            ("return cmsgpack.unpack_one('a', {})", "-ERR user_script:1: bad argument #2 to 'unpack_one' (number expected, got table) script: SHA, on @user_script:1.\r\n"),
            // Truncated and malformed input.
            ("return cmsgpack.unpack('\\205')", "-ERR user_script:1: Missing bytes in input. script: SHA, on @user_script:1.\r\n"),
            ("return cmsgpack.unpack('\\218\\0')", "-ERR user_script:1: Missing bytes in input. script: SHA, on @user_script:1.\r\n"),
            ("return cmsgpack.unpack('\\217\\3ab')", "-ERR user_script:1: Missing bytes in input. script: SHA, on @user_script:1.\r\n"),
            ("return cmsgpack.unpack('\\146\\1')", "-ERR user_script:1: Missing bytes in input. script: SHA, on @user_script:1.\r\n"),
            ("return cmsgpack.unpack('\\129\\1')", "-ERR user_script:1: Missing bytes in input. script: SHA, on @user_script:1.\r\n"),
            ("return cmsgpack.unpack('\\202\\0\\0')", "-ERR user_script:1: Missing bytes in input. script: SHA, on @user_script:1.\r\n"),
            ("return cmsgpack.unpack('\\219\\255\\255\\255\\255ab')", "-ERR user_script:1: Missing bytes in input. script: SHA, on @user_script:1.\r\n"),
            ("return cmsgpack.unpack('\\221\\255\\255\\255\\255')", "-ERR user_script:1: Missing bytes in input. script: SHA, on @user_script:1.\r\n"),
            ("return cmsgpack.unpack('\\193')", "-ERR user_script:1: Bad data format in input. script: SHA, on @user_script:1.\r\n"),
            ("return cmsgpack.unpack('\\196\\1a')", "-ERR user_script:1: Bad data format in input. script: SHA, on @user_script:1.\r\n"),
            ("return cmsgpack.unpack('\\129\\192\\1')", "-ERR table index is nil script: SHA, on @user_script:1.\r\n"),
            ("return cmsgpack.unpack('\\129\\202\\127\\192\\0\\0\\1')", "-ERR table index is NaN script: SHA, on @user_script:1.\r\n"),
            // The Lua stack's limit: values returned at once, and nesting.
            // (Redis returns up to 7999 values at once; this server two fewer.)
            ("return select('#', cmsgpack.unpack(string.rep('\\1', 7997)))", ":7997\r\n"),
            ("return select('#', cmsgpack.unpack(string.rep('\\1', 7997), 'x'))", ":7997\r\n"),
            ("return select('#', cmsgpack.unpack(string.rep('\\1', 7998)))", "-ERR user_script:1: stack overflow (too many return values at once; use unpack_one or unpack_limit instead.) script: SHA, on @user_script:1.\r\n"),
            ("local ok, e = pcall(cmsgpack.unpack, string.rep('\\145', 3999) .. '\\1') return {tostring(ok), type(e)}", "*2\r\n$4\r\ntrue\r\n$5\r\ntable\r\n"),
            ("local ok, e = pcall(cmsgpack.unpack, string.rep('\\145', 4000) .. '\\1') return {tostring(ok), tostring(e)}", "*2\r\n$5\r\nfalse\r\n$51\r\nstack overflow (in function mp_decode_to_lua_array)\r\n"),
            ("local ok, e = pcall(cmsgpack.unpack, string.rep('\\145', 100000) .. '\\1') return {tostring(ok), tostring(e)}", "*2\r\n$5\r\nfalse\r\n$51\r\nstack overflow (in function mp_decode_to_lua_array)\r\n"),
            ("local ok, e = pcall(cmsgpack.unpack, string.rep('\\129\\1', 4000) .. '\\1') return {tostring(ok), type(e)}", "*2\r\n$5\r\nfalse\r\n$6\r\nstring\r\n"),
            ("local ok, e = pcall(cmsgpack.unpack, string.rep('\\129\\1', 7998) .. '\\1') return {tostring(ok), tostring(e)}", "*2\r\n$5\r\nfalse\r\n$88\r\nstack overflow (too many return values at once; use unpack_one or unpack_limit instead.)\r\n"),
            ("local ok, e = pcall(cmsgpack.unpack, string.rep('\\129\\145', 2666) .. '\\1') return {tostring(ok), tostring(e)}", "*2\r\n$5\r\nfalse\r\n$23\r\nMissing bytes in input.\r\n"),
            ("local ok, e = pcall(cmsgpack.unpack, string.rep('\\129\\145', 2667) .. '\\1') return {tostring(ok), tostring(e)}", "*2\r\n$5\r\nfalse\r\n$88\r\nstack overflow (too many return values at once; use unpack_one or unpack_limit instead.)\r\n"),
            ("local ok, e = pcall(cmsgpack.unpack, string.rep('\\145', 3998) .. '\\144') return {tostring(ok), type(e)}", "*2\r\n$4\r\ntrue\r\n$5\r\ntable\r\n"),
            ("local ok, e = pcall(cmsgpack.unpack, string.rep('\\145', 3999) .. '\\144') return {tostring(ok), tostring(e)}", "*2\r\n$5\r\nfalse\r\n$51\r\nstack overflow (in function mp_decode_to_lua_array)\r\n"),
        ]);
    }

    /// The libraries' tables are read-only as Redis makes them (scripting.tcl's "Try trick
    /// readonly table on ..." tests), in scripts and in functions, and still work through.
    #[test]
    fn library_tables_are_read_only_as_in_redis() {
        replies_as_redis(&[
            ("cmsgpack.pack = function() return 1 end", "-ERR user_script:1: Attempt to modify a readonly table script: SHA, on @user_script:1.\r\n"),
            ("rawset(cjson, 'x', 1)", "-ERR Attempt to modify a readonly table script: SHA, on @user_script:1.\r\n"),
            ("getmetatable('').__index.upper = 1", "-ERR user_script:1: Attempt to modify a readonly table script: SHA, on @user_script:1.\r\n"),
            ("getmetatable('').__index = 1", "-ERR user_script:1: Attempt to modify a readonly table script: SHA, on @user_script:1.\r\n"),
            ("local ok, e = pcall(function() bit.lshift = 1 end) return e", "$49\r\nuser_script:1: Attempt to modify a readonly table\r\n"),
            // Precompiled chunks are refused by loadstring too (scripting.tcl's "Binary code
            // loading failed").
            ("return loadstring(string.dump(function() return 1 end))()", "-ERR user_script:1: attempt to call a nil value script: SHA, on @user_script:1.\r\n"),
            ("return {select(2, loadstring('\\27Lua', 'nm'))}", "*1\r\n$50\r\n[string \"nm\"]:1: unexpected symbol near 'char(27)'\r\n"),
            ("return {select(2, loadstring('\\27Lua'))}", "*1\r\n$52\r\n[string \"\x1bLua\"]:1: unexpected symbol near 'char(27)'\r\n"),
            ("return loadstring('return 7')()", ":7\r\n"),
        ]);
    }

    /// `redis.error_reply` words its error as Redis 7.0.15 does (checked against it).
    #[test]
    fn error_reply_as_redis_words_it() {
        replies_as_redis(&[
            ("return redis.error_reply('')", "-ERR \r\n"),
            ("error(redis.error_reply('X\\r\\n+INJECTED'))", "-ERR X  +INJECTED script: SHA, on @user_script:1.\r\n"),
            ("return redis.error_reply('X\\r\\n+INJECTED')", "-ERR X  +INJECTED\r\n"),
            ("error(redis.error_reply('MY_ERR x'))", "-MY_ERR x script: SHA, on @user_script:1.\r\n"),
            ("return redis.error_reply('-E x')", "-E x\r\n"),
            ("return redis.error_reply('-E x\\r\\n')", "-E x\r\n"),
            ("return redis.error_reply(5)", "-ERR wrong number or type of arguments\r\n"),
            ("return redis.error_reply('a', 'b')", "-ERR wrong number or type of arguments\r\n"),
            ("return {string.format('%d', 5), ('ab'):upper(), math.floor(2.5), table.concat({1,2}, ','), #getmetatable('').__index.rep('x', 3)}", "*5\r\n$1\r\n5\r\n$2\r\nAB\r\n:2\r\n$3\r\n1,2\r\n:3\r\n"),
        ]);
        let mut db = Db::large();
        for script in [
            "redis.call = function() return 1 end",
            "cjson.encode = function() return 1 end",
            "cmsgpack.pack = function() return 1 end",
            "bit.lshift = function() return 1 end",
            "string.x = 1",
            "math.random = nil",
            "table.insert = nil",
            "setmetatable(cjson, {})",
            "getmetatable(cjson).__newindex = nil",
            "rawset(_G, 'x', 1)",
        ] {
            let got = eval(&mut db, &["EVAL", script, "0"]);
            assert!(
                got.contains("Attempt to modify a readonly table"),
                "{script}: {got}"
            );
            let code =
                format!("#!lua name=g\nredis.register_function('g', function() {script} end)");
            assert_eq!(
                eval(&mut db, &["FUNCTION", "LOAD", "REPLACE", &code]),
                "$1\r\ng\r\n"
            );
            let got = eval(&mut db, &["FCALL", "g", "0"]);
            assert!(
                got.contains("Attempt to modify a readonly table"),
                "{script}: {got}"
            );
        }
    }

    /// `struct` packs, unpacks and sizes as redis-server 7.0.15's lua_struct does (checked
    /// against it), its errors included.
    #[test]
    fn struct_as_redis_has_it() {
        replies_as_redis(&[
            ("local function hex(s) local h = '' for i = 1, #s do h = h .. string.format('%02x', string.byte(s, i)) end return h end return {hex(struct.pack('>I2<i4bBhHlLTfd', 258, -2, -1, 255, -300, 65535, -5, 7, 9, 1.5, 0.1)), hex(struct.pack('!4bi', 1, 2)), hex(struct.pack('c3sxc0', 'abcdef', 'zz', 'end')), hex(struct.pack('>i16', -1)), hex(struct.pack('<i3', -2)), hex(struct.pack('! b d', 1, 2))}", "*6\r\n$96\r\n0102feffffffffffd4fefffffbffffffffffffff070000000000000009000000000000000000c03f9a9999999999b93f\r\n$16\r\n0100000002000000\r\n$20\r\n6162637a7a0000656e64\r\n$32\r\n0000000000000000ffffffffffffffff\r\n$6\r\nfeffff\r\n$32\r\n01000000000000000000000000000040\r\n"),
            ("return {struct.unpack('>I2<i4bBhH', struct.pack('>I2<i4bBhH', 258, -2, -1, 255, -300, 65535))}", "*7\r\n:258\r\n:-2\r\n:-1\r\n:255\r\n:-300\r\n:65535\r\n:13\r\n"),
            ("return {struct.unpack('lLTfd', struct.pack('lLTfd', -5, 7, 9, 1.5, 0.25))}", "*6\r\n:-5\r\n:7\r\n:9\r\n:1\r\n:0\r\n:37\r\n"),
            ("return {struct.unpack('c3sxc0', struct.pack('c3sxc0', 'abcdef', 'zz', 'end'))}", "-ERR user_script:1: format 'c0' needs a previous size script: SHA, on @user_script:1.\r\n"),
            ("return {struct.unpack('bc0', struct.pack('bc3', 3, 'xyz'))}", "*2\r\n$3\r\nxyz\r\n:5\r\n"),
            ("return {struct.unpack('c1c0', '3abcd')}", "*2\r\n$3\r\nabc\r\n:5\r\n"),
            ("return {struct.unpack('>i16', struct.pack('>i16', -1))}", "*2\r\n:-1\r\n:17\r\n"),
            ("return {struct.unpack('>I9', '\\1\\2\\3\\4\\5\\6\\7\\8\\9')}", "*2\r\n:144964032628459520\r\n:10\r\n"),
            ("return {struct.unpack('>i9', '\\255\\2\\3\\4\\5\\6\\7\\8\\9')}", "*2\r\n:-119\r\n:10\r\n"),
            ("return {struct.unpack('B', 'ab', 2)}", "*2\r\n:98\r\n:3\r\n"),
            ("return {struct.size('!4bi'), struct.size('>i16d'), struct.size('zq'), struct.size('!8bd'), struct.size('c5')}", "*5\r\n:8\r\n:24\r\n:0\r\n:16\r\n:5\r\n"),
            ("return struct.size('s')", "-ERR user_script:1: bad argument #1 to 'size' (option 's' has no fixed size) script: SHA, on @user_script:1.\r\n"),
            ("return struct.size('c0')", "-ERR user_script:1: bad argument #1 to 'size' (option 'c0' has no fixed size) script: SHA, on @user_script:1.\r\n"),
            ("return struct.size('?')", "-ERR user_script:1: bad argument #1 to 'size' (invalid format option '?') script: SHA, on @user_script:1.\r\n"),
            ("return struct.pack('q', 1)", "-ERR user_script:1: bad argument #1 to 'pack' (invalid format option 'q') script: SHA, on @user_script:1.\r\n"),
            ("return struct.pack('i33', 1)", "-ERR user_script:1: integral size 33 is larger than limit of 32 script: SHA, on @user_script:1.\r\n"),
            ("return struct.pack('!3b', 1)", "-ERR user_script:1: alignment 3 is not a power of 2 script: SHA, on @user_script:1.\r\n"),
            ("return struct.pack('i99999999999', 1)", "-ERR user_script:1: integral size overflow script: SHA, on @user_script:1.\r\n"),
            ("return struct.pack('c5', 'ab')", "-ERR user_script:1: bad argument #3 to 'pack' (string too short) script: SHA, on @user_script:1.\r\n"),
            ("return struct.pack('bb', 1)", "-ERR user_script:1: bad argument #3 to 'pack' (number expected, got nil) script: SHA, on @user_script:1.\r\n"),
            ("return struct.pack('b', 'x')", "-ERR user_script:1: bad argument #2 to 'pack' (number expected, got string) script: SHA, on @user_script:1.\r\n"),
            ("return struct.pack('b', '12')", "$1\r\n\x0c\r\n"),
            ("return struct.pack()", "-ERR user_script:1: bad argument #1 to 'pack' (string expected, got no value) script: SHA, on @user_script:1.\r\n"),
            ("return struct.unpack('i', 'ab')", "-ERR user_script:1: bad argument #2 to 'unpack' (data string too short) script: SHA, on @user_script:1.\r\n"),
            ("return struct.unpack('b', 'ab', 0)", "-ERR user_script:1: bad argument #3 to 'unpack' (offset must be 1 or greater) script: SHA, on @user_script:1.\r\n"),
            ("return struct.unpack('s', 'ab')", "-ERR user_script:1: unfinished string in data script: SHA, on @user_script:1.\r\n"),
            ("return struct.unpack('c0', 'ab')", "-ERR user_script:1: format 'c0' needs a previous size script: SHA, on @user_script:1.\r\n"),
            ("return struct.unpack('xc0', 'ab')", "-ERR user_script:1: format 'c0' needs a previous size script: SHA, on @user_script:1.\r\n"),
            ("return struct.unpack('b', 'ab', 'x')", "-ERR user_script:1: bad argument #3 to 'unpack' (number expected, got string) script: SHA, on @user_script:1.\r\n"),
            ("return {struct.unpack('', 'ab', 5)}", "*1\r\n:5\r\n"),
            ("return struct.unpack('b')", "-ERR user_script:1: bad argument #2 to 'unpack' (string expected, got no value) script: SHA, on @user_script:1.\r\n"),
            ("struct.pack = nil", "-ERR user_script:1: Attempt to modify a readonly table script: SHA, on @user_script:1.\r\n"),
        ]);
    }

    /// scripting.tcl's "cmsgpack pack/unpack smoke test": every size of string, array and
    /// map, and a stream of values read one by one.
    #[test]
    fn cmsgpack_round_trips_redis_smoke_test() {
        let script = r#"
            local str_lt_32 = string.rep("x", 30)
            local str_lt_255 = string.rep("x", 250)
            local str_lt_65535 = string.rep("x", 65530)
            local str_long = string.rep("x", 100000)
            local array_big = {}
            for i=1, 100000 do array_big[i] = i end
            local map_big = {}
            for i=1, 100000 do map_big[tostring(i)] = i end
            local some_map = {s1=str_lt_32, s2=str_lt_255, s3=str_lt_65535, s4=str_long, d1=0.1,
                i5=2^40, i10=-3147483648, a1={1, 2, 3}, a3=array_big, m2=map_big, b1=false}
            local decoded = cmsgpack.unpack(cmsgpack.pack(some_map))
            assert(decoded.s4 == str_long and decoded.d1 == 0.1 and decoded.i10 == -3147483648)
            assert(#decoded.a3 == 100000 and decoded.m2['99999'] == 99999 and decoded.b1 == false)
            local offset, decoded_one = cmsgpack.unpack_one(cmsgpack.pack(some_map), 0)
            assert(offset == -1 and decoded_one.s3 == str_lt_65535)
            local encoded_multiple = cmsgpack.pack(str_lt_32, str_lt_255, str_lt_65535, str_long)
            local offset, obj = cmsgpack.unpack_limit(encoded_multiple, 1, 0)
            assert(obj == str_lt_32)
            offset, obj = cmsgpack.unpack_limit(encoded_multiple, 1, offset)
            assert(obj == str_lt_255)
            offset, obj = cmsgpack.unpack_limit(encoded_multiple, 1, offset)
            assert(obj == str_lt_65535)
            offset, obj = cmsgpack.unpack_limit(encoded_multiple, 1, offset)
            assert(obj == str_long)
            assert(offset == -1)
            return 'ok'
        "#;
        replies_as_redis(&[(script, "$2\r\nok\r\n")]);
    }
}
