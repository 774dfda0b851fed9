//! Redis 7.0 functions' libraries, below the handlers: a library is Lua code that starts with a
//! `#!lua name=<library>` line and registers its functions with `redis.register_function`
//! when FUNCTION LOAD runs it. Libraries are kept by name (case-sensitive), their functions
//! found by FCALL case-insensitively, as Redis's dictionaries do. They run in an interpreter of
//! their own (Redis's functions engine), apart from EVAL's.
//!
//! The load runs in Redis's sandbox: the code sees only a `redis` table with
//! `register_function`, `log`, the log levels and the version (anything else, `math` or
//! `redis.call`, is Redis's nonexistent-global error), may assign no global, and stops after
//! [`LOAD_TIMEOUT_MS`]. When the functions run, their globals are the interpreter's (the
//! `redis` API, `string`, `math`, `cjson`, `bit`), still read-only; `register_function`
//! (reached through a table kept from the load) refuses to work outside FUNCTION LOAD.
//!
//! A library is wholly kept or wholly dropped: a load registers into a list of its own, which
//! joins the libraries only once every check passed (name collisions included), and RESTORE
//! builds its libraries apart before it joins them in. [`dump`] and [`parse_dump`] are FUNCTION
//! DUMP's payload, Redis's: each library's code after `RDB_OPCODE_FUNCTION2`, the RDB version
//! and a CRC64, so payloads move between redis-server and cxltier either way.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Instant;

use cxltier_store::{Kind, Store, StoreError};
use hashbrown::HashMap;
use mlua::{HookTriggers, Lua, Table, Value, VmState};

use crate::lua::{is_lib_error, lib_error, Engine};

/// How long a library's code may run while FUNCTION LOAD registers it (Redis's
/// `LOAD_TIMEOUT_MS`); libraries from a master, the RDB or the log are loaded without one.
pub const LOAD_TIMEOUT_MS: u64 = 500;

/// `RDB_OPCODE_FUNCTION2`: a library's code follows (Redis 7.0 GA's record).
pub const OPCODE_FUNCTION2: u8 = 245;
/// `RDB_OPCODE_FUNCTION`: the record of Redis 7.0's release candidates (name, engine,
/// description, code), still read by Redis 7.0.
pub const OPCODE_FUNCTION_RC: u8 = 246;

/// A function's flags, Redis's `SCRIPT_FLAG_*` in the order FUNCTION LIST names them.
pub mod flags {
    pub const NO_WRITES: u8 = 1;
    pub const ALLOW_OOM: u8 = 2;
    pub const ALLOW_STALE: u8 = 4;
    pub const NO_CLUSTER: u8 = 8;
    pub const ALLOW_CROSS_SLOT: u8 = 16;
    pub const NAMES: [(u8, &str); 5] = [
        (NO_WRITES, "no-writes"),
        (ALLOW_OOM, "allow-oom"),
        (ALLOW_STALE, "allow-stale"),
        (NO_CLUSTER, "no-cluster"),
        (ALLOW_CROSS_SLOT, "allow-cross-slot-keys"),
    ];
}

const BAD_NAME: &str = "Library names can only contain letters, numbers, or underscores(_) and must be at least one character long";

/// One registered function.
#[derive(Clone)]
pub struct Function {
    pub name: String,
    pub description: Option<Vec<u8>>,
    pub flags: u8,
    pub(crate) callback: mlua::Function,
}

/// One library: its name, its whole code as given (shebang included: what LIST WITHCODE, DUMP
/// and the RDB carry) and its functions in the order they were registered.
#[derive(Clone)]
pub struct Library {
    pub name: String,
    pub code: Vec<u8>,
    pub functions: Vec<Function>,
}

/// The functions' interpreter and what its loads share.
pub(crate) struct Vm {
    pub(crate) engine: Engine,
    /// The globals every library's code sees (empty; its metatable's `__index` is the library
    /// API while a library loads and the interpreter's globals otherwise, its `__newindex` an
    /// error).
    env: Table,
    env_meta: Table,
    library_api: Table,
    globals: Table,
    /// The functions the library loading now registered; `None` outside a load.
    registering: Rc<RefCell<Option<Vec<Function>>>>,
}

/// The libraries and the interpreter they run in.
#[derive(Default)]
pub struct Functions {
    pub(crate) vm: Option<Vm>,
    libraries: BTreeMap<String, Library>,
    /// Each function's name, lowercased, and its library.
    index: HashMap<String, String>,
}

impl std::fmt::Debug for Functions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Functions")
            .field("libraries", &self.libraries.len())
            .field("functions", &self.index.len())
            .finish()
    }
}

/// A library's shebang line read: its engine and name, and its code from the line's newline
/// on (so that the code's line numbers are the text's).
struct Metadata<'a> {
    engine: Vec<u8>,
    name: Vec<u8>,
    code: &'a [u8],
}

/// Redis's `functionExtractLibMetaData`: the shebang's engine and `name=`, nothing else.
fn metadata(code: &[u8]) -> Result<Metadata<'_>, String> {
    if !code.starts_with(b"#!") {
        return Err("Missing library metadata".into());
    }
    let Some(nl) = code.iter().position(|&c| c == b'\n') else {
        return Err("Invalid library metadata".into());
    };
    let parts = match crate::arg_line::split_args(&code[..nl]) {
        Some(p) if !p.is_empty() => p,
        _ => return Err("Invalid library metadata".into()),
    };
    let engine = parts[0][2..].to_vec();
    let mut name = None;
    for part in &parts[1..] {
        if part.len() >= 5 && part[..5].eq_ignore_ascii_case(b"name=") {
            if name.is_some() {
                return Err(
                    "Invalid metadata value, name argument was given multiple times".into(),
                );
            }
            name = Some(part[5..].to_vec());
            continue;
        }
        return Err(format!(
            "Invalid metadata value given: {}",
            String::from_utf8_lossy(part)
        ));
    }
    let name = name.ok_or("Library name was not given")?;
    Ok(Metadata {
        engine,
        name,
        code: &code[nl..],
    })
}

/// Letters, digits and underscores, at least one (Redis's `functionsVerifyName`).
fn valid_name(name: &[u8]) -> bool {
    !name.is_empty() && name.iter().all(|&c| c.is_ascii_alphanumeric() || c == b'_')
}

impl Vm {
    fn new(rand: Rc<std::cell::Cell<u64>>) -> mlua::Result<Vm> {
        let engine = Engine::new(rand)?;
        let lua = engine.lua.clone();
        let globals = lua.globals();
        let protect = globals
            .metatable()
            .ok_or_else(|| mlua::Error::runtime("the interpreter's globals are unprotected"))?;
        let registering: Rc<RefCell<Option<Vec<Function>>>> = Rc::new(RefCell::new(None));
        // The load's `redis`: register_function, log and the constants, nothing else; like
        // the globals, it errs on a name it lacks and refuses assignments.
        // The globals' `redis` is a read-only view over the library: read through it.
        let redis: Table = globals.raw_get("redis")?;
        let load_redis = lua.create_table()?;
        for name in [
            "log",
            "LOG_DEBUG",
            "LOG_VERBOSE",
            "LOG_NOTICE",
            "LOG_WARNING",
            "REDIS_VERSION",
            "REDIS_VERSION_NUM",
        ] {
            load_redis.raw_set(name, redis.get::<Value>(name)?)?;
        }
        let reg = registering.clone();
        load_redis.raw_set(
            "register_function",
            lua.create_function(move |lua, args: mlua::MultiValue| register(lua, &reg, args))?,
        )?;
        load_redis.set_metatable(Some(protect.clone()))?;
        let library_api = lua.create_table()?;
        library_api.raw_set("redis", load_redis)?;
        library_api.set_metatable(Some(protect.clone()))?;
        let env = lua.create_table()?;
        let env_meta = lua.create_table()?;
        env_meta.raw_set("__index", globals.clone())?;
        env_meta.raw_set("__newindex", protect.raw_get::<Value>("__newindex")?)?;
        env.set_metatable(Some(env_meta.clone()))?;
        engine.lock.call::<()>((env.clone(), env_meta.clone()))?;
        Ok(Vm {
            engine,
            env,
            env_meta,
            library_api,
            globals,
            registering,
        })
    }

    /// Run a library's code (`code`, from its shebang's newline on) to collect the functions
    /// it registers, within `timeout_ms` (0: none).
    fn load(&mut self, code: &[u8], timeout_ms: u64) -> Result<Vec<Function>, String> {
        let lua = self.engine.lua.clone();
        let chunk = crate::lua::compile_text(&lua, code, "@user_function", &self.env)
            .map_err(|text| format!("ERR Error compiling function: {text}"))?;
        let pcall: mlua::Function = self
            .globals
            .raw_get("pcall")
            .map_err(|e| format!("ERR {e}"))?;
        *self.registering.borrow_mut() = Some(Vec::new());
        let _ = self.env_meta.raw_set("__index", self.library_api.clone());
        let started = Instant::now();
        if timeout_ms > 0 {
            let _ = lua.set_hook(
                HookTriggers::new().every_nth_instruction(crate::lua::HOOK_INSTRUCTIONS),
                move |_, _| {
                    if started.elapsed().as_millis() as u64 > timeout_ms {
                        return Err(lib_error("FUNCTION LOAD timeout"));
                    }
                    Ok(VmState::Continue)
                },
            );
        }
        let ran = pcall.call::<(bool, Value)>(chunk);
        lua.remove_hook();
        let _ = self.env_meta.raw_set("__index", self.globals.clone());
        let registered = self.registering.borrow_mut().take().unwrap_or_default();
        let failure = match ran {
            Ok((true, _)) => None,
            Ok((false, e)) => Some(load_error_text(&e)),
            Err(e) => Some(format!("ERR {e}")),
        };
        crate::lua::collect_if_grown(&lua);
        match failure {
            Some(msg) => Err(format!("ERR Error registering functions: {msg}")),
            None => Ok(registered),
        }
    }
}

/// A load's error as Redis words it: `ERR ` and the message (a string error carries its
/// `user_function:N:` position).
fn load_error_text(e: &Value) -> String {
    match e {
        Value::String(s) => format!("ERR {}", s.to_string_lossy()),
        Value::Error(err) if is_lib_error(err) => format!("ERR {}", innermost(err)),
        Value::Error(err) => format!("ERR {}", innermost(err)),
        Value::Table(t) => t
            .raw_get::<String>("err")
            .unwrap_or_else(|_| "ERR unknown error".into()),
        other => format!("ERR {}", other.type_name()),
    }
}

fn innermost(e: &mlua::Error) -> String {
    match e {
        mlua::Error::CallbackError { cause, .. } => innermost(cause),
        mlua::Error::RuntimeError(m) => m.clone(),
        mlua::Error::ExternalError(inner) => inner.to_string(),
        other => other.to_string(),
    }
}

/// `redis.register_function(name, callback)` or `redis.register_function{function_name=,
/// callback=, description=, flags=}`: Redis's checks and errors, in its order.
fn register(
    lua: &Lua,
    registering: &RefCell<Option<Vec<Function>>>,
    args: mlua::MultiValue,
) -> mlua::Result<()> {
    let mut guard = registering.borrow_mut();
    let Some(list) = guard.as_mut() else {
        return Err(lib_error(
            "redis.register_function can only be called on FUNCTION LOAD command",
        ));
    };
    let args: Vec<Value> = args.into_iter().collect();
    let f = match args.as_slice() {
        [Value::Table(t)] => named_args(lua, t)?,
        [_] => return Err(lib_error("calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).")),
        [name, callback] => {
            let Some(name) = text(lua, name) else {
                return Err(lib_error(
                    "first argument to redis.register_function must be a string",
                ));
            };
            let Value::Function(callback) = callback else {
                return Err(lib_error(
                    "second argument to redis.register_function must be a function",
                ));
            };
            Function {
                name: String::from_utf8_lossy(&name).into_owned(),
                description: None,
                flags: 0,
                callback: callback.clone(),
            }
        }
        _ => {
            return Err(lib_error(
                "wrong number of arguments to redis.register_function",
            ))
        }
    };
    if !valid_name(f.name.as_bytes()) {
        return Err(lib_error(BAD_NAME));
    }
    if list.iter().any(|g| g.name == f.name) {
        return Err(lib_error("Function already exists in the library"));
    }
    list.push(f);
    Ok(())
}

/// A string argument as Lua's `lua_isstring` takes one: a string, or a number in its text.
fn text(lua: &Lua, v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::String(s) => Some(s.as_bytes().to_vec()),
        Value::Integer(_) | Value::Number(_) => lua
            .coerce_string(v.clone())
            .ok()
            .flatten()
            .map(|s| s.as_bytes().to_vec()),
        _ => None,
    }
}

fn named_args(lua: &Lua, t: &Table) -> mlua::Result<Function> {
    let (mut name, mut description, mut callback, mut flag_bits) = (None, None, None, 0u8);
    for pair in t.pairs::<Value, Value>() {
        let (k, v) = pair?;
        let Value::String(k) = k else {
            return Err(lib_error(
                "named argument key given to redis.register_function is not a string",
            ));
        };
        let key = k.to_string_lossy();
        if key.eq_ignore_ascii_case("function_name") {
            let Some(s) = text(lua, &v) else {
                return Err(lib_error(
                    "function_name argument given to redis.register_function must be a string",
                ));
            };
            name = Some(String::from_utf8_lossy(&s).into_owned());
        } else if key.eq_ignore_ascii_case("description") {
            let Some(s) = text(lua, &v) else {
                return Err(lib_error(
                    "description argument given to redis.register_function must be a string",
                ));
            };
            description = Some(s);
        } else if key.eq_ignore_ascii_case("callback") {
            let Value::Function(f) = v else {
                return Err(lib_error(
                    "callback argument given to redis.register_function must be a function",
                ));
            };
            callback = Some(f);
        } else if key.eq_ignore_ascii_case("flags") {
            let Value::Table(list) = v else {
                return Err(lib_error("flags argument to redis.register_function must be a table representing function flags"));
            };
            flag_bits = read_flags(&list).ok_or_else(|| lib_error("unknown flag given"))?;
        } else {
            return Err(lib_error(
                "unknown argument given to redis.register_function",
            ));
        }
    }
    let name =
        name.ok_or_else(|| lib_error("redis.register_function must get a function name argument"))?;
    let callback = callback
        .ok_or_else(|| lib_error("redis.register_function must get a callback argument"))?;
    Ok(Function {
        name,
        description,
        flags: flag_bits,
        callback,
    })
}

/// The flags of a `flags={...}` list (from index 1 to the first nil), `None` on an unknown one
/// or one that is no string.
fn read_flags(list: &Table) -> Option<u8> {
    let mut bits = 0;
    for i in 1.. {
        match list.raw_get::<Value>(i).ok()? {
            Value::Nil => break,
            Value::String(s) => {
                let s = s.to_string_lossy();
                let (bit, _) = flags::NAMES
                    .iter()
                    .find(|(_, n)| n.eq_ignore_ascii_case(&s))?;
                bits |= bit;
            }
            // Lua numbers are strings to lua_isstring, and name no flag.
            _ => return None,
        }
    }
    Some(bits)
}

impl Functions {
    /// The interpreter, started on first use.
    pub(crate) fn vm(&mut self, rand: &Rc<std::cell::Cell<u64>>) -> Result<&mut Vm, String> {
        if self.vm.is_none() {
            self.vm =
                Some(Vm::new(rand.clone()).map_err(|e| {
                    format!("ERR the functions' Lua interpreter did not start: {e}")
                })?);
        }
        Ok(self.vm.as_mut().expect("just set"))
    }

    pub fn libraries(&self) -> impl Iterator<Item = &Library> {
        self.libraries.values()
    }

    pub fn library_count(&self) -> usize {
        self.libraries.len()
    }

    pub fn function_count(&self) -> usize {
        self.index.len()
    }

    /// Bytes the functions' interpreter holds (INFO's `used_memory_vm_functions`).
    pub fn used_memory(&self) -> usize {
        self.vm.as_ref().map_or(0, |vm| vm.engine.lua.used_memory())
    }

    /// What the libraries' bookkeeping holds beside the interpreter (INFO's
    /// `used_memory_functions`): their code, names and descriptions.
    pub fn overhead(&self) -> usize {
        self.libraries
            .values()
            .map(|l| {
                l.code.len()
                    + l.name.len()
                    + l.functions
                        .iter()
                        .map(|f| f.name.len() + f.description.as_ref().map_or(0, Vec::len) + 64)
                        .sum::<usize>()
                    + 64
            })
            .sum()
    }

    /// The function FCALL names (case-insensitive) and its library's name.
    pub fn find(&self, name: &[u8]) -> Option<&Function> {
        let lib = self
            .index
            .get(&String::from_utf8_lossy(name).to_ascii_lowercase())?;
        let lib = self.libraries.get(lib)?;
        lib.functions
            .iter()
            .find(|f| f.name.as_bytes().eq_ignore_ascii_case(name))
    }

    fn reindex(&mut self) {
        self.index.clear();
        for lib in self.libraries.values() {
            for f in &lib.functions {
                self.index
                    .insert(f.name.to_ascii_lowercase(), lib.name.clone());
            }
        }
    }

    /// Compile and run `code` into a library (not yet joined).
    fn build(
        &mut self,
        rand: &Rc<std::cell::Cell<u64>>,
        code: &[u8],
        timeout_ms: u64,
    ) -> Result<Library, String> {
        let md = metadata(code).map_err(|e| format!("ERR {e}"))?;
        if !valid_name(&md.name) {
            return Err(format!("ERR {BAD_NAME}"));
        }
        if !md.engine.eq_ignore_ascii_case(b"lua") {
            return Err(format!(
                "ERR Engine '{}' not found",
                String::from_utf8_lossy(&md.engine)
            ));
        }
        let name = String::from_utf8_lossy(&md.name).into_owned();
        let functions = self.vm(rand)?.load(md.code, timeout_ms)?;
        Ok(Library {
            name,
            code: code.to_vec(),
            functions,
        })
    }

    /// FUNCTION LOAD [REPLACE]: the library's name, or Redis's error. Nothing changes unless
    /// it succeeds.
    pub fn load(
        &mut self,
        rand: &Rc<std::cell::Cell<u64>>,
        code: &[u8],
        replace: bool,
        timeout_ms: u64,
    ) -> Result<String, String> {
        if let Ok(md) = metadata(code) {
            let name = String::from_utf8_lossy(&md.name);
            if valid_name(&md.name)
                && md.engine.eq_ignore_ascii_case(b"lua")
                && !replace
                && self.libraries.contains_key(name.as_ref())
            {
                return Err(format!("ERR Library '{name}' already exists"));
            }
        }
        let lib = self.build(rand, code, timeout_ms)?;
        if lib.functions.is_empty() {
            return Err("ERR No functions registered".into());
        }
        for f in &lib.functions {
            if let Some(owner) = self.index.get(&f.name.to_ascii_lowercase()) {
                if *owner != lib.name {
                    return Err(format!("ERR Function {} already exists", f.name));
                }
            }
        }
        let name = lib.name.clone();
        self.libraries.insert(name.clone(), lib);
        self.reindex();
        Ok(name)
    }

    /// The libraries as they are now, for [`Functions::put_back`].
    pub(crate) fn saved(&self) -> BTreeMap<String, Library> {
        self.libraries.clone()
    }

    /// The libraries [`Functions::saved`] returned: a change the store could not keep undone.
    pub(crate) fn put_back(&mut self, libraries: BTreeMap<String, Library>) {
        self.libraries = libraries;
        self.reindex();
    }

    /// FUNCTION DELETE: false when there is no such library.
    pub fn delete(&mut self, name: &[u8]) -> bool {
        let removed = self
            .libraries
            .remove(String::from_utf8_lossy(name).as_ref())
            .is_some();
        self.reindex();
        removed
    }

    /// FUNCTION FLUSH: every library goes; the interpreter stays (as Redis's engine does).
    pub fn flush(&mut self) {
        self.libraries.clear();
        self.index.clear();
        if let Some(vm) = &self.vm {
            crate::lua::collect_if_grown(&vm.engine.lua);
        }
    }

    /// FUNCTION DUMP: Redis's payload of every library.
    pub fn dump(&self) -> Vec<u8> {
        let mut w = crate::rdb::RdbWriter::bare(Vec::new());
        for lib in self.libraries.values() {
            w.value_type(OPCODE_FUNCTION2).expect("writing to memory");
            w.string(&lib.code).expect("writing to memory");
        }
        w.finish_dump().expect("writing to memory")
    }

    /// FUNCTION RESTORE with `policy`: the payload's libraries built apart (each must load),
    /// then joined: FLUSH drops the others first, APPEND refuses a library that exists,
    /// REPLACE replaces it; a function name another library holds is refused. Nothing changes
    /// unless it succeeds.
    pub fn restore(
        &mut self,
        rand: &Rc<std::cell::Cell<u64>>,
        payload: &[u8],
        policy: RestorePolicy,
    ) -> Result<(), String> {
        let codes = parse_dump(payload)?;
        let mut incoming: Vec<Library> = Vec::with_capacity(codes.len());
        for code in &codes {
            let lib = self.build(rand, code, 0)?;
            if lib.functions.is_empty() {
                return Err("ERR No functions registered".into());
            }
            if incoming.iter().any(|l| l.name == lib.name) {
                return Err(format!("ERR Library '{}' already exists", lib.name));
            }
            for f in &lib.functions {
                let taken = incoming.iter().any(|l| {
                    l.functions
                        .iter()
                        .any(|g| g.name.eq_ignore_ascii_case(&f.name))
                });
                if taken {
                    return Err(format!("ERR Function {} already exists", f.name));
                }
            }
            incoming.push(lib);
        }
        let mut next = match policy {
            RestorePolicy::Flush => BTreeMap::new(),
            _ => self.libraries.clone(),
        };
        for lib in &incoming {
            if next.contains_key(&lib.name) {
                if policy == RestorePolicy::Replace {
                    next.remove(&lib.name);
                } else {
                    return Err(format!("ERR Library {} already exists", lib.name));
                }
            }
        }
        for lib in &incoming {
            for f in &lib.functions {
                let taken = next.values().any(|l| {
                    l.functions
                        .iter()
                        .any(|g| g.name.eq_ignore_ascii_case(&f.name))
                });
                if taken {
                    return Err(format!("ERR Function {} already exists", f.name));
                }
            }
        }
        for lib in incoming {
            next.insert(lib.name.clone(), lib);
        }
        self.libraries = next;
        self.reindex();
        Ok(())
    }
}

/// The key (in the server's own database, [`crate::db::META_DB`]) under which the store keeps
/// the libraries: their FUNCTION DUMP payload, written in the batch of the command that changed
/// them, so that a restart (or a crash after the reply, with `--durability always`) keeps what
/// was acknowledged.
const STORE_KEY: &[u8] = b"functions";

/// Write the libraries to the store (no key when there are none).
pub fn persist(store: &mut Store, functions: &Functions) -> Result<(), StoreError> {
    let key = crate::db::store_key(crate::db::META_DB, STORE_KEY);
    if functions.libraries.is_empty() {
        store.delete(&key)?;
        return Ok(());
    }
    store.put(&key, Kind::String, &functions.dump(), None)
}

/// Load the libraries a store keeps into `scripts` (at the server's start).
pub fn recover(store: &mut Store, scripts: &mut crate::lua::Scripts) -> Result<(), String> {
    let key = crate::db::store_key(crate::db::META_DB, STORE_KEY);
    let kept = store
        .get(&key)
        .map_err(|e| format!("reading them: {e}"))?
        .map(|o| o.value.to_vec());
    let Some(payload) = kept else {
        return Ok(());
    };
    let rand = scripts.rand.clone();
    scripts
        .functions
        .restore(&rand, &payload, RestorePolicy::Flush)
}

/// How FUNCTION RESTORE treats the libraries there are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestorePolicy {
    Flush,
    Append,
    Replace,
}

/// The libraries' code in a FUNCTION DUMP payload (or the function records of an RDB), checked
/// as Redis's `verifyDumpPayload` and `functionRestoreCommand` do.
pub fn parse_dump(payload: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let body = crate::rdb::dump::body(payload)
        .map_err(|_| "ERR DUMP payload version or checksum are wrong".to_string())?;
    let mut input = crate::rdb::load::Input::new(body);
    let mut codes = Vec::new();
    while input.remaining() > 0 {
        let kind = input
            .byte()
            .map_err(|_| "ERR can not read data type".to_string())?;
        codes.push(read_record(kind, &mut input)?);
    }
    Ok(codes)
}

/// One library record of RDB type `kind` (its opcode already read): its code.
pub fn read_record(kind: u8, input: &mut crate::rdb::load::Input<'_>) -> Result<Vec<u8>, String> {
    match kind {
        OPCODE_FUNCTION2 => input
            .string()
            .map_err(|_| "ERR Failed loading library payload".to_string()),
        OPCODE_FUNCTION_RC => {
            let fail = |what: &str| format!("ERR Failed loading library {what}");
            let name = input.string().map_err(|_| fail("name"))?;
            let engine = input.string().map_err(|_| fail("engine name"))?;
            let has_desc = input.length().map_err(|_| fail("description indicator"))?;
            if has_desc != 0 {
                input.string().map_err(|_| fail("description"))?;
            }
            let blob = input.string().map_err(|_| fail("blob"))?;
            let mut code = b"#!".to_vec();
            code.extend_from_slice(&engine);
            code.extend_from_slice(b" name=");
            code.extend_from_slice(&name);
            code.push(b'\n');
            code.extend_from_slice(&blob);
            Ok(code)
        }
        _ => Err("ERR given type is not a function".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shebang_metadata_is_read_as_redis_reads_it() {
        let md = metadata(b"#!lua name=\"foo\"\nreturn 1").unwrap();
        assert_eq!(
            (md.engine.as_slice(), md.name.as_slice()),
            (&b"lua"[..], &b"foo"[..])
        );
        assert_eq!(md.code, b"\nreturn 1");
        let err = |code: &[u8]| metadata(code).err().unwrap();
        assert_eq!(err(b"return 1"), "Missing library metadata");
        assert_eq!(err(b"#!lua name=x"), "Invalid library metadata");
        assert_eq!(err(b"#!lua\n"), "Library name was not given");
        assert_eq!(
            err(b"#!lua name=a name=b\n"),
            "Invalid metadata value, name argument was given multiple times"
        );
        assert_eq!(
            err(b"#!lua name=a foo=bar\n"),
            "Invalid metadata value given: foo=bar"
        );
        assert_eq!(err(b"#!lua name=\"a\"b\n"), "Invalid library metadata");
        assert_eq!(metadata(b"#! name=x\n").unwrap().engine, b"");
    }

    #[test]
    fn a_dump_is_redis_payload_and_reads_back() {
        let mut f = Functions::default();
        let rand = Rc::new(std::cell::Cell::new(0));
        // Under 64 bytes: its RDB length is one byte.
        let code = b"#!lua name=l\nredis.register_function('f', function() end)";
        f.load(&rand, code, false, LOAD_TIMEOUT_MS).unwrap();
        let payload = f.dump();
        // Opcode, the code as an RDB string (a one-byte length), version 10, CRC64.
        assert_eq!(payload[0], OPCODE_FUNCTION2);
        assert_eq!(payload[1] as usize, code.len());
        assert_eq!(&payload[2..2 + code.len()], code);
        assert_eq!(&payload[2 + code.len()..4 + code.len()], &[10, 0]);
        assert_eq!(parse_dump(&payload).unwrap(), vec![code.to_vec()]);
        let mut bad = payload.clone();
        bad[3] ^= 1;
        assert_eq!(
            parse_dump(&bad).unwrap_err(),
            "ERR DUMP payload version or checksum are wrong"
        );
        assert_eq!(
            parse_dump(&crate::rdb::dump::seal(&[0, 1, b'x'])).unwrap_err(),
            "ERR given type is not a function"
        );
    }
}
