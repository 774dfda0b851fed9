//! The operator's introspection commands side by side with redis-server: COMMAND's
//! descriptions and key flags, CONFIG GET *'s parameter names, DEBUG DIGEST's digests of the
//! same data.

mod util;
use util::{redis_server, Reply as V, Server, ServerChild};

/// redis-server with DEBUG allowed (Redis 7.0 refuses it by default).
fn redis() -> ServerChild {
    ServerChild::start("redis-server", None, |port| {
        let mut c = redis_server(port);
        c.args(["--enable-debug-command", "yes"]);
        c
    })
}

fn names_of(r: V) -> Vec<String> {
    let text = |r: &V| match r {
        V::Bulk(b) => String::from_utf8(b.clone()).unwrap(),
        other => panic!("a bulk string, not {other:?}"),
    };
    let mut names: Vec<String> = match r {
        V::Array(items) => items.chunks(2).map(|kv| text(&kv[0])).collect(),
        V::Map(pairs) => pairs.iter().map(|(k, _)| text(k)).collect(),
        other => panic!("CONFIG GET answers pairs, not {other:?}"),
    };
    names.sort();
    names
}

#[test]
fn config_get_star_names_every_parameter_redis_server_has() {
    let redis = redis();
    let server = Server::start();
    let theirs = names_of(redis.client().call(&["CONFIG", "GET", "*"]));
    let ours = names_of(server.client().call(&["CONFIG", "GET", "*"]));
    assert!(theirs.len() > 150, "redis-server listed {}", theirs.len());
    assert_eq!(ours, theirs);
    // Hidden parameters answer only by name, on both.
    for c in [redis.client(), server.client()].iter_mut() {
        assert_eq!(
            names_of(c.call(&["CONFIG", "GET", "key-load-delay"])),
            ["key-load-delay"]
        );
    }
}

#[test]
fn config_set_checks_values_as_redis_server_does() {
    let redis = redis();
    let server = Server::start();
    let (mut theirs, mut ours) = (redis.client(), server.client());
    for line in [
        "CONFIG SET daemonize yes",
        "CONFIG SET dir /tmp",
        "CONFIG SET maxmemory 10000001 maxmemory 10000002",
        "CONFIG SET maxmemory 10000001 maxmemory-clients 200% client-query-buffer-limit invalid",
        "CONFIG SET hz nope",
        "CONFIG SET hz -1",
        "CONFIG SET activerehashing maybe",
        "CONFIG SET loglevel loud",
        "CONFIG SET shutdown-on-sigterm save nosave",
        "CONFIG SET maxmemory-policy nope",
        "CONFIG SET save 1",
        "CONFIG SET tcp-keepalive 100",
        "CONFIG GET tcp-keepalive",
        "CONFIG SET repl-backlog-size 2mb",
        "CONFIG GET repl-backlog-size",
        "CONFIG SET maxmemory-clients 10%",
        "CONFIG GET maxmemory-clients",
        "CONFIG GET slaveof",
        "CONFIG SET",
        "CONFIG SET hz",
    ] {
        assert_eq!(ours.cmd(line), theirs.cmd(line), "{line}");
    }
    // Values of several words.
    for args in [
        ["CONFIG", "SET", "shutdown-on-sigint", "NOSAVE now"],
        ["CONFIG", "SET", "shutdown-on-sigterm", "save nosave"],
        ["CONFIG", "SET", "save", "100 10 20 1"],
        ["CONFIG", "SET", "save", "100 10 20"],
        ["CONFIG", "SET", "oom-score-adj-values", "0 200 3000"],
    ] {
        assert_eq!(ours.call_text(&args), theirs.call_text(&args), "{args:?}");
    }
    for line in ["CONFIG GET shutdown-on-sigint", "CONFIG GET save"] {
        assert_eq!(ours.cmd(line), theirs.cmd(line), "{line}");
    }
}

#[test]
fn command_describes_commands_as_redis_server_does() {
    let redis = redis();
    let server = Server::start();
    let (mut theirs, mut ours) = (redis.client(), server.client());
    // Commands without subcommands (whose order Redis leaves to a hash table).
    for name in [
        "get",
        "set",
        "mset",
        "sort",
        "sort_ro",
        "lmove",
        "blpop",
        "zunionstore",
        "eval",
        "georadius",
        "georadius_ro",
        "bitfield",
        "lcs",
        "memory|usage",
        "object|encoding",
        "config|get",
        "client|list",
        "getex",
        "xadd-not-a-command",
    ] {
        assert_eq!(
            ours.cmd(&format!("COMMAND INFO {name}")),
            theirs.cmd(&format!("COMMAND INFO {name}")),
            "COMMAND INFO {name}"
        );
        assert_eq!(
            ours.cmd(&format!("COMMAND DOCS {name}")),
            theirs.cmd(&format!("COMMAND DOCS {name}")),
            "COMMAND DOCS {name}"
        );
    }
    for line in [
        "COMMAND GETKEYSANDFLAGS set k1 v1",
        "COMMAND GETKEYSANDFLAGS set k1 v1 GET",
        "COMMAND GETKEYSANDFLAGS mset k1 v1 k2 v2",
        "COMMAND GETKEYSANDFLAGS LMOVE k1 k2 left right",
        "COMMAND GETKEYSANDFLAGS sort k1 store k2",
        "COMMAND GETKEYSANDFLAGS sort k1 limit 0 1 by store get store",
        "COMMAND GETKEYSANDFLAGS bitfield b get u8 0",
        "COMMAND GETKEYSANDFLAGS bitfield b set u8 0 1",
        "COMMAND GETKEYSANDFLAGS georadius g 1 2 3 km store d",
        "COMMAND GETKEYSANDFLAGS zunionstore d 2 a b",
        "COMMAND GETKEYSANDFLAGS eval s 2 a b c",
        "COMMAND GETKEYSANDFLAGS memory usage k",
        "COMMAND GETKEYS eval s 0",
        "COMMAND GETKEYS eval s x",
        "COMMAND GETKEYS zunionstore d 3 a b",
        "COMMAND GETKEYS ping",
        "COMMAND GETKEYS get",
        "COMMAND GETKEYS nope a",
        "COMMAND GETKEYS xread count 1 streams a b 0 0",
        "COMMAND GETKEYS xreadgroup group g c streams a 0",
        "COMMAND GETKEYS xgroup create x g $",
        "COMMAND GETKEYSANDFLAGS xadd x * f v",
        "COMMAND GETKEYS config get x",
        "COMMAND INFO get|key",
        "COMMAND LIST FILTERBY PATTERN config|reset*",
        "COMMAND LIST FILTERBY ACLCAT nope",
        "COMMAND LIST FILTERBY nope x",
    ] {
        assert_eq!(ours.cmd(line), theirs.cmd(line), "{line}");
    }
}

#[test]
fn debug_digests_are_redis_server_s() {
    let redis = redis();
    let server = Server::start();
    let (mut theirs, mut ours) = (redis.client(), server.client());
    let big_hash: Vec<String> = (0..300).map(|i| format!("f{i} v{i}")).collect();
    let script = [
        "DEBUG DIGEST".to_string(),
        "SET s hello".into(),
        "SET n 12345".into(),
        "RPUSH l a b c 1 2".into(),
        "SADD st x y 7".into(),
        "SADD big 1 2 3 4 5 a".into(),
        "ZADD z 1.5 m 2 n -0.25 o 1e100 p".into(),
        "HSET h f v g w".into(),
        format!("HSET bh {}", big_hash.join(" ")),
        "SET e v EX 1000".into(),
        "XADD x 1-1 a 1 b 2".into(),
        "XADD x 2-5 c 3".into(),
        // Groups are no part of a stream's digest.
        "XGROUP CREATE x g 0".into(),
        "XADD empty MAXLEN 0 1-1 f v".into(),
        "DEBUG DIGEST".into(),
        "DEBUG DIGEST-VALUE s n l st big z h bh e x empty missing".into(),
        "SELECT 3".into(),
        "SET other 1".into(),
        "DEBUG DIGEST".into(),
    ];
    for line in &script {
        assert_eq!(ours.cmd(line), theirs.cmd(line), "{line}");
    }
}
