//! Redis 7.0 functions against a real redis-server 7.0: FUNCTION DUMP of one RESTOREd by the
//! other, both ways (libraries, flags, descriptions and what FCALL answers compared), the same
//! replies to the same loads, calls and errors, a redis-server replica that gets the libraries
//! in its snapshot and follows FUNCTION LOAD / DELETE / FLUSH in the stream, and libraries kept
//! across a restart of the server on its store.
//!
//! redis-server is installed by scripts/peers (scripts/test runs it first); without it the test
//! fails with that instruction.

mod util;
use cxltier_store::testing::temp_file;
use util::{need, redis, wait_until, Conn, Reply as V, ReplyExt, Server};

const LIB1: &str = "#!lua name=lib1\n\
    local function add1(a) return a + 1 end\n\
    redis.register_function('inc', function(keys, args) return add1(tonumber(args[1])) end)\n\
    redis.register_function{function_name='get', callback=function(keys) return redis.call('get', keys[1]) end, flags={'no-writes', 'allow-stale'}, description='reads a key'}\n\
    redis.register_function{function_name='set', callback=function(keys, args) return redis.call('set', keys[1], args[1]) end, flags={'allow-oom'}}";

const LIB2: &str = "#!lua name=lib2\nredis.register_function{function_name='hello', callback=function() return 'hello' end, flags={'no-writes'}}";

/// FUNCTION LIST WITHCODE as comparable text: the libraries sorted by name, each with its
/// functions sorted by name (Redis lists both in its dictionaries' order).
fn listing(c: &mut Conn) -> Vec<String> {
    let V::Array(libs) = c.call(&["FUNCTION", "LIST", "WITHCODE"]) else {
        panic!("FUNCTION LIST did not answer an array");
    };
    let mut out: Vec<String> = libs
        .into_iter()
        .map(|lib| {
            let V::Array(fields) = lib else {
                panic!("{lib:?}")
            };
            let mut parts = Vec::new();
            for pair in fields.chunks(2) {
                let name = pair[0].text();
                match &pair[1] {
                    V::Array(functions) if name == "functions" => {
                        let mut fs: Vec<String> =
                            functions.iter().map(|f| format!("{f:?}")).collect();
                        fs.sort();
                        parts.push(format!("functions={fs:?}"));
                    }
                    v => parts.push(format!("{name}={v:?}")),
                }
            }
            parts.join(" ")
        })
        .collect();
    out.sort();
    out
}

fn calls(c: &mut Conn) -> Vec<V> {
    vec![
        c.call(&["FCALL", "inc", "0", "41"]),
        c.call(&["FCALL", "SET", "1", "k", "v"]),
        c.call(&["FCALL_RO", "get", "1", "k"]),
        c.call(&["FCALL_RO", "set", "1", "k", "v"]),
        c.call(&["FCALL", "hello", "0"]),
        c.call(&["FCALL", "nosuch", "0"]),
    ]
}

#[test]
fn function_dump_and_restore_move_libraries_between_redis_and_cxltier_both_ways() {
    let theirs = redis();
    let ours = Server::start();
    let mut r = theirs.client();
    let mut c = ours.client();
    assert_eq!(
        c.call(&["FUNCTION", "LOAD", LIB1]),
        r.call(&["FUNCTION", "LOAD", LIB1])
    );
    // One library's payload under each policy, with it loaded: as Redis words each outcome.
    let V::Bulk(one) = r.call(&["FUNCTION", "DUMP"]) else {
        panic!("DUMP")
    };
    for policy in [&b"APPEND"[..], b"REPLACE", b"FLUSH", b"BOGUS"] {
        assert_eq!(
            c.call_bytes(&[b"FUNCTION", b"RESTORE", &one, policy]),
            r.call_bytes(&[b"FUNCTION", b"RESTORE", &one, policy]),
            "RESTORE {}",
            String::from_utf8_lossy(policy)
        );
    }
    assert_eq!(
        c.call(&["FUNCTION", "LOAD", LIB2]),
        r.call(&["FUNCTION", "LOAD", LIB2])
    );
    // redis-server's payload (its code LZF-compressed, as its RDB strings are) into cxltier.
    let V::Bulk(theirs_dump) = r.call(&["FUNCTION", "DUMP"]) else {
        panic!("DUMP")
    };
    assert_eq!(c.call(&["FUNCTION", "FLUSH"]), V::Simple("OK".into()));
    assert_eq!(
        c.call_bytes(&[b"FUNCTION", b"RESTORE", &theirs_dump]),
        V::Simple("OK".into())
    );
    assert_eq!(listing(&mut c), listing(&mut r));
    assert_eq!(calls(&mut c), calls(&mut r));
    // cxltier's payload into redis-server.
    let V::Bulk(ours_dump) = c.call(&["FUNCTION", "DUMP"]) else {
        panic!("DUMP")
    };
    assert_eq!(r.call(&["FUNCTION", "FLUSH"]), V::Simple("OK".into()));
    assert_eq!(
        r.call_bytes(&[b"FUNCTION", b"RESTORE", &ours_dump]),
        V::Simple("OK".into())
    );
    assert_eq!(listing(&mut r), listing(&mut c));
    assert_eq!(calls(&mut r), calls(&mut c));
    // A damaged payload: refused whole by both, the libraries kept.
    let mut bad = ours_dump.clone();
    bad[5] ^= 0x40;
    assert_eq!(
        c.call_bytes(&[b"FUNCTION", b"RESTORE", &bad]),
        r.call_bytes(&[b"FUNCTION", b"RESTORE", &bad])
    );
    assert_eq!(listing(&mut c), listing(&mut r));
}

/// Loads, calls and errors: the same replies, byte for byte.
#[test]
fn loads_calls_and_errors_answer_as_redis_server_does() {
    let theirs = redis();
    let ours = Server::start();
    let mut r = theirs.client();
    let mut c = ours.client();
    let cases: &[&[&str]] = &[
        &["FUNCTION", "LOAD", LIB1],
        &["FUNCTION", "LOAD", LIB1],
        &["FUNCTION", "LOAD", "REPLACE", LIB1],
        &["FUNCTION", "LOAD", "bogus", LIB1],
        &["FUNCTION", "LOAD", "#!lua name=x\nredis.register_function('inc', function() return 1 end)"],
        &["FUNCTION", "LOAD", "#!lua name=x\nreturn 1"],
        &["FUNCTION", "LOAD", "#!lua name=x\nredis.call('ping')"],
        &["FUNCTION", "LOAD", "#!lua name=x\nmath.random()"],
        &["FUNCTION", "LOAD", "#!lua name=x\nx = 1"],
        &["FUNCTION", "LOAD", "#!lua name=x\nredis.register_function('a b', function() end)"],
        &["FUNCTION", "LOAD", "#!lua name=x\nredis.register_function{function_name='f', callback=function() end, flags={'bogus'}}"],
        &["FUNCTION", "LOAD", "#!lua name=x\nredis.register_function{function_name='f'}"],
        &["FUNCTION", "LOAD", "#!lua name=x\nredis.register_function{callback=function() end}"],
        &["FUNCTION", "LOAD", "#!lua name=x\n bad code"],
        &["FUNCTION", "LOAD", "#!js name=x\n"],
        &["FUNCTION", "LOAD", "#!lua\n"],
        &["FUNCTION", "LOAD", "no shebang"],
        &["FUNCTION", "LOAD", "#!lua name=err\nredis.register_function('boom', function() error('boom') end)\nredis.register_function('bad', function() local x = redis.call('nosuch') return x end)\nredis.register_function('ro', function() local x = redis.call('del', 'k') return x end)"],
        &["FUNCTION", "LOAD", "#!lua name=one\nredis.register_function{function_name='only', callback=function() return 1 end, flags={'allow-cross-slot-keys', 'no-writes', 'no-cluster'}, description='the one'}"],
        &["FCALL", "boom", "0"],
        &["FCALL", "bad", "0"],
        &["FCALL", "inc", "x"],
        &["FCALL", "inc", "-1"],
        &["FCALL", "inc", "2", "a"],
        &["FCALL", "inc", "0", "1"],
        &["FCALL_RO", "ro", "0"],
        &["FCALL", "get", "1", "k"],
        &["FUNCTION", "LIST", "LIBRARYNAME", "o*"],
        &["FUNCTION", "LIST", "WITHCODE", "LIBRARYNAME", "O*"],
        &["FUNCTION", "LIST", "WITHCODE", "WITHCODE"],
        &["FUNCTION", "LIST", "LIBRARYNAME"],
        &["FUNCTION", "DELETE", "nosuch"],
        &["FUNCTION", "DELETE", "err"],
        &["FUNCTION", "STATS"],
        &["FUNCTION", "KILL"],
        &["FUNCTION", "FLUSH", "bogus"],
        &["FUNCTION", "FLUSH", "SYNC", "x"],
        &["FUNCTION", "RESTORE", "x", "y", "z"],
        &["FUNCTION", "RESTORE", "not a payload"],
        &["FUNCTION", "NOPE"],
        &["FUNCTION", "HELP"],
        &["FUNCTION", "FLUSH", "ASYNC"],
        &["FUNCTION", "LIST"],
    ];
    for case in cases {
        assert_eq!(c.call(case), r.call(case), "{case:?}");
    }
}

/// A redis-server replica of the server gets its libraries with the snapshot, then FUNCTION
/// LOAD, DELETE, FLUSH and RESTORE through the stream, and runs the functions.
#[test]
fn a_redis_replica_gets_the_libraries_and_their_changes() {
    need("redis-server");
    let s = Server::start();
    let mut c = s.client();
    assert_eq!(
        c.call(&["FUNCTION", "LOAD", LIB1]),
        V::Bulk(b"lib1".to_vec())
    );
    let dir = temp_file("cxltier-fn-", "redis");
    std::fs::create_dir_all(&*dir).unwrap();
    let (_replica, mut r) = util::redis_replica(&s.port(), &dir);
    assert_eq!(listing(&mut r), listing(&mut c), "after the snapshot");
    assert_eq!(r.call(&["FCALL_RO", "get", "1", "k"]), V::NullBulk);
    // The stream: each change to the libraries, and a function's writes.
    c.call(&["FUNCTION", "LOAD", LIB2]);
    c.call(&["FCALL", "set", "1", "k", "from-function"]);
    let in_sync = |c: &mut Conn, r: &mut Conn, what: &str| {
        let want = listing(c);
        wait_until(what, || listing(r) == want);
    };
    in_sync(&mut c, &mut r, "the replica has lib2");
    wait_until("the function's write reached the replica", || {
        r.call(&["GET", "k"]) == V::Bulk(b"from-function".to_vec())
    });
    c.call(&["FUNCTION", "DELETE", "lib1"]);
    in_sync(&mut c, &mut r, "the replica dropped lib1");
    let V::Bulk(dump) = c.call(&["FUNCTION", "DUMP"]) else {
        panic!("DUMP")
    };
    c.call(&["FUNCTION", "FLUSH"]);
    in_sync(&mut c, &mut r, "the replica flushed");
    assert!(listing(&mut r).is_empty());
    c.call_bytes(&[b"FUNCTION", b"RESTORE", &dump]);
    in_sync(&mut c, &mut r, "the replica restored");
    assert_eq!(r.call(&["FCALL", "hello", "0"]), V::Bulk(b"hello".to_vec()));
}

/// The libraries are kept in the store: a restart on the same store has them, FLUSHALL leaves
/// them, FUNCTION FLUSH removes them for good.
#[test]
fn libraries_survive_a_restart_and_flushall() {
    let ssd = temp_file("cxltier-fn-", "nvme");
    let start = || {
        Server::builder()
            .dram("16M")
            .ssd(&ssd, "64M")
            .durability("always")
            .start()
    };
    let s = start();
    let mut c = s.client();
    assert_eq!(
        c.call(&["FUNCTION", "LOAD", LIB1]),
        V::Bulk(b"lib1".to_vec())
    );
    assert_eq!(
        c.call(&["FUNCTION", "LOAD", LIB2]),
        V::Bulk(b"lib2".to_vec())
    );
    assert_eq!(c.call(&["FLUSHALL"]), V::Simple("OK".into()));
    assert_eq!(
        c.call(&["FUNCTION", "DELETE", "lib2"]),
        V::Simple("OK".into())
    );
    let before = listing(&mut c);
    drop(c);
    s.stop();
    let s = start();
    let mut c = s.client();
    assert_eq!(listing(&mut c), before);
    assert_eq!(c.call(&["FCALL", "inc", "0", "1"]), V::Int(2));
    assert_eq!(
        c.call(&["FCALL", "hello", "0"]),
        V::Error("ERR Function not found".into())
    );
    // The store's copy is no key of any database.
    assert_eq!(c.call(&["DBSIZE"]), V::Int(0));
    assert_eq!(c.call(&["FUNCTION", "FLUSH"]), V::Simple("OK".into()));
    drop(c);
    s.stop();
    let s = start();
    let mut c = s.client();
    assert!(listing(&mut c).is_empty());
}
