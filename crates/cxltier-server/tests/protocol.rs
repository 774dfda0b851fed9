//! The server speaking Redis's protocol over a real socket: the command table behind
//! `COMMAND`, arity errors and NOAUTH; RESP3 (`HELLO 3`) and the shapes of its replies; `CLIENT`.
//!
//! Replies are decoded by `cxltier_resp` into their exact RESP2/RESP3 types, so that every type
//! the server sends is checked (no client library in between that would hide a wrong type).

mod util;
use std::process::Command;
use util::{bulk, info_field, info_number, over_nvme, Reply as V, ReplyExt, Server};

/// COMMAND and its subcommands describe the table the server dispatches from: every command it
/// knows, with Redis's arity, flags and key positions.
#[test]
fn command_replies_come_from_the_command_table() {
    let s = Server::start();
    let mut c = s.client();
    let V::Int(count) = c.call(&["COMMAND", "COUNT"]) else {
        panic!("COMMAND COUNT")
    };
    let all = c.call(&["COMMAND"]);
    assert_eq!(all.items().len() as i64, count);
    let list = c.call(&["COMMAND", "LIST"]);
    // As in Redis, the list names the commands COMMAND COUNT counts and, as `parent|sub`, the
    // subcommands of the container commands.
    let names: Vec<String> = list.items().iter().map(V::text).collect();
    let top: Vec<&String> = names.iter().filter(|n| !n.contains('|')).collect();
    assert_eq!(top.len() as i64, count);
    for sub in names.iter().filter(|n| n.contains('|')) {
        let parent = sub.split('|').next().unwrap().to_string();
        assert!(top.contains(&&parent), "{sub}");
    }
    assert!(names.contains(&"client|list".to_string()));
    // Every listed command is known: an arity error, never "unknown command".
    for name in top {
        let name = name.clone();
        // These close the connection, answer once per argument, or make it a replica (the
        // snapshot and the write stream follow).
        let skip = [
            "shutdown",
            "quit",
            "psync",
            "subscribe",
            "psubscribe",
            "unsubscribe",
            "punsubscribe",
            "ssubscribe",
            "sunsubscribe",
        ];
        if skip.contains(&name.as_str()) {
            continue;
        }
        let mut args: Vec<&str> = vec![&name];
        args.extend(["x"; 40]);
        let r = c.call(&args);
        if let V::Error(e) = &r {
            assert!(!e.contains("unknown command"), "{name}: {e}");
        }
    }
    // Redis's COMMAND INFO of GET: arity 2, read-only and fast, one key at 1.
    let info = c.call(&["COMMAND", "INFO", "get", "nosuchcommand"]);
    let get = info.items()[0].items();
    assert_eq!(get[0], bulk("get"));
    assert_eq!(get[1], V::Int(2));
    let flags: Vec<String> = get[2].items().iter().map(V::text).collect();
    assert!(flags.contains(&"readonly".to_string()) && flags.contains(&"fast".to_string()));
    assert_eq!(&get[3..6], &[V::Int(1), V::Int(1), V::Int(1)]);
    // An unknown name: Redis's null (`$-1` in RESP2).
    assert_eq!(info.items()[1], V::NullBulk);
    let mset = c.call(&["COMMAND", "INFO", "MSET"]);
    assert_eq!(&mset.items()[0].items()[1..2], &[V::Int(-3)]);
    assert_eq!(
        &mset.items()[0].items()[3..6],
        &[V::Int(1), V::Int(-1), V::Int(2)]
    );
    // The key extraction the server begins NVMe reads with.
    assert_eq!(
        c.call(&["COMMAND", "GETKEYS", "MSET", "a", "1", "b", "2"]),
        V::Array(vec![bulk("a"), bulk("b")])
    );
    assert!(
        matches!(c.call(&["COMMAND", "GETKEYS", "PING", "x"]), V::Error(e) if e.contains("no key"))
    );
    let docs = c.call(&["COMMAND", "DOCS", "get"]);
    let V::Array(pairs) = docs else {
        panic!("COMMAND DOCS in RESP2 is a flat array: {docs:?}")
    };
    assert_eq!(pairs[0], bulk("get"));
    assert_eq!(
        c.call(&["COMMAND", "LIST", "FILTERBY", "PATTERN", "hget*"]),
        V::Array(vec![bulk("hget"), bulk("hgetall")])
    );
    // Arity from the table, names in any case.
    assert_eq!(
        c.call(&["GET"]),
        V::Error("ERR wrong number of arguments for 'get' command".into())
    );
    assert_eq!(
        c.call(&["hset", "h", "f"]),
        V::Error("ERR wrong number of arguments for 'hset' command".into())
    );
    assert_eq!(c.call(&["sEt", "k", "v"]), V::Simple("OK".into()));
    assert_eq!(c.call(&["get", "k"]), bulk("v"));
}

/// With a password configured, NOAUTH comes from the table's no_auth flag: AUTH, HELLO and
/// QUIT run before AUTH, nothing else; an unknown command is said to be unknown first, as Redis
/// does; a wrong password is refused, the right one lets every command through.
#[test]
fn noauth_comes_from_the_table() {
    let s = Server::builder().requirepass("pw").start();
    let mut c = s.client();
    c.replies_starting(&[
        ("GET k", "-NOAUTH"),
        ("COMMAND COUNT", "-NOAUTH"),
        ("AUTH wrong", "-WRONGPASS"),
    ]);
    assert!(matches!(c.call(&["NOPE"]), V::Error(e) if e.contains("unknown command")));
    c.replies(&[
        ("AUTH pw", "+OK\r\n"),
        ("GET k", "$-1\r\n"),
        ("SET k v", "+OK\r\n"),
    ]);
}

/// redis-py 8 and other RESP3 clients open with `HELLO 3`: the server answers Redis's map and
/// every reply after it takes RESP3's shapes; `HELLO 2` goes back.
#[test]
fn hello_3_speaks_resp3() {
    let s = Server::start();
    let mut c = s.client();
    assert_eq!(c.call(&["HSET", "h", "f", "v"]), V::Int(1));
    let hello = c.call(&["HELLO", "3", "SETNAME", "py"]);
    assert_eq!(hello.get("server"), Some(&bulk("redis")));
    assert_eq!(hello.get("version"), Some(&bulk("7.0.15")));
    assert_eq!(hello.get("proto"), Some(&V::Int(3)));
    assert_eq!(hello.get("mode"), Some(&bulk("standalone")));
    assert_eq!(hello.get("role"), Some(&bulk("master")));
    assert_eq!(hello.get("modules"), Some(&V::Array(vec![])));
    let V::Int(id) = hello.get("id").unwrap().clone() else {
        panic!("id")
    };
    assert_eq!(c.call(&["CLIENT", "ID"]), V::Int(id));
    assert_eq!(c.call(&["CLIENT", "GETNAME"]), bulk("py"));
    assert_eq!(
        c.call(&["HGETALL", "h"]),
        V::Map(vec![(bulk("f"), bulk("v"))])
    );
    assert_eq!(c.call(&["GET", "nothing"]), V::Null);
    assert_eq!(
        c.call(&["MGET", "nothing", "h"]),
        V::Array(vec![V::Null, V::Null])
    );
    let cfg = c.call(&["CONFIG", "GET", "maxclients"]);
    assert!(matches!(cfg.get("maxclients"), Some(V::Bulk(_))), "{cfg:?}");
    let V::Verbatim(fmt, info) = c.call(&["INFO", "server"]) else {
        panic!("INFO in RESP3 is a verbatim string")
    };
    assert_eq!(fmt, "txt");
    assert!(String::from_utf8_lossy(&info).contains("redis_mode:standalone"));
    let info = c.call(&["COMMAND", "INFO", "get"]);
    let flags = &info.items()[0].items()[2];
    assert!(matches!(flags, V::Set(_)), "{flags:?}");
    assert!(matches!(c.call(&["HELLO", "4"]), V::Error(e) if e.starts_with("NOPROTO")));
    assert!(matches!(c.call(&["HELLO", "2"]), V::Array(_)));
    assert_eq!(c.call(&["GET", "nothing"]), V::NullBulk);
}

/// redis-cli's RESP3 mode (-3) reads the maps it is sent.
#[test]
fn redis_cli_in_resp3_mode() {
    let s = Server::start();
    let port = s.addr.rsplit(':').next().unwrap().to_string();
    let cli = |args: &[&str]| {
        let out = Command::new("redis-cli")
            .args(["-3", "--no-raw", "-p", &port])
            .args(args)
            .output()
            .expect("redis-cli is not installed: run scripts/peers (scripts/test does)");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(cli(&["hset", "h", "a", "1"]), "(integer) 1");
    assert_eq!(cli(&["hgetall", "h"]), "1# \"a\" => \"1\"");
    assert_eq!(cli(&["get", "missing"]), "(nil)");
}

/// CLIENT LIST shows every connection with its name; CLIENT KILL closes another; CLIENT REPLY
/// OFF/SKIP/ON drop exactly the replies Redis drops.
#[test]
fn client_list_kill_and_reply() {
    let s = Server::start();
    let mut a = s.client();
    let mut b = s.client();
    assert_eq!(
        a.call(&["CLIENT", "SETNAME", "alpha"]),
        V::Simple("OK".into())
    );
    assert_eq!(
        b.call(&["CLIENT", "SETNAME", "beta"]),
        V::Simple("OK".into())
    );
    let V::Int(b_id) = b.call(&["CLIENT", "ID"]) else {
        panic!()
    };
    let list = a.call(&["CLIENT", "LIST"]).text();
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines.len(), 2, "{list}");
    assert!(lines.iter().any(|l| l.contains(" name=alpha ")), "{list}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&format!("id={b_id} ")) && l.contains(" name=beta ")),
        "{list}"
    );
    let info = b.call(&["CLIENT", "INFO"]).text();
    assert!(info.starts_with(&format!("id={b_id} ")) && info.contains("cmd=client"));
    // REPLY: OFF silences until ON; SKIP silences itself and the next command only. Each
    // silenced command still runs.
    a.send(&["CLIENT", "REPLY", "OFF"]);
    a.send(&["SET", "off", "1"]);
    a.send(&["CLIENT", "REPLY", "ON"]);
    assert_eq!(a.read(), V::Simple("OK".into()));
    a.send(&["CLIENT", "REPLY", "SKIP"]);
    a.send(&["SET", "skipped", "2"]);
    assert_eq!(
        a.call(&["MGET", "off", "skipped"]),
        V::Array(vec![bulk("1"), bulk("2")])
    );
    // KILL ID closes b: its socket reaches end of file.
    assert_eq!(
        a.call(&["CLIENT", "KILL", "ID", &b_id.to_string()]),
        V::Int(1)
    );
    assert_eq!(b.read_to_close(), b"");
    let list = a.call(&["CLIENT", "LIST"]).text();
    assert_eq!(list.lines().count(), 1, "{list}");
    // SKIPME yes by default: a client's own filter does not kill it.
    assert_eq!(a.call(&["CLIENT", "KILL", "USER", "default"]), V::Int(0));
    assert_eq!(a.call(&["PING"]), V::Simple("PONG".into()));
}

/// CONFIG SET changes what the server does (maxclients, requirepass) or stores Redis's knobs
/// (OBJECT ENCODING answers by them); the harness commands of Redis's test suite answer.
#[test]
fn config_set_object_and_server_commands() {
    let s = Server::start();
    let mut c = s.client();
    // What the test suite's setup sends.
    assert_eq!(c.call(&["FUNCTION", "FLUSH"]), V::Simple("OK".into()));
    assert_eq!(c.call(&["EVAL", "return 1", "0"]), V::Int(1));
    assert_eq!(c.call(&["DEBUG", "SLEEP", "0"]), V::Simple("OK".into()));
    assert_eq!(c.call(&["WAIT", "0", "0"]), V::Int(0));
    assert_eq!(c.call(&["TIME"]).items().len(), 2);
    assert_eq!(c.call(&["HSET", "h", "f", "v"]), V::Int(1));
    assert_eq!(c.call(&["OBJECT", "ENCODING", "h"]), bulk("listpack"));
    assert_eq!(
        c.call(&["CONFIG", "SET", "hash-max-ziplist-entries", "0"]),
        V::Simple("OK".into())
    );
    assert_eq!(c.call(&["OBJECT", "ENCODING", "h"]), bulk("hashtable"));
    assert_eq!(
        c.call(&["CONFIG", "GET", "hash-max-listpack-entries"]),
        V::Array(vec![bulk("hash-max-listpack-entries"), bulk("0")])
    );
    assert!(
        matches!(c.call(&["CONFIG", "SET", "nope", "1"]), V::Error(e) if e.contains("Unknown option"))
    );
    // maxclients: a connection past the new limit is told so and closed.
    assert_eq!(
        c.call(&["CONFIG", "SET", "maxclients", "1"]),
        V::Simple("OK".into())
    );
    let mut extra = s.client();
    assert!(matches!(extra.read(), V::Error(e) if e.contains("max number of clients")));
    assert_eq!(
        c.call(&["CONFIG", "SET", "maxclients", "100", "requirepass", "pw"]),
        V::Simple("OK".into())
    );
    // The password set holds for new connections; this one stays authenticated.
    let mut late = s.client();
    assert!(matches!(late.call(&["GET", "k"]), V::Error(e) if e.starts_with("NOAUTH")));
    assert_eq!(late.call(&["AUTH", "pw"]), V::Simple("OK".into()));
    assert_eq!(c.call(&["PING"]), V::Simple("PONG".into()));
    // RESET logs the connection out again.
    assert_eq!(c.call(&["RESET"]), V::Simple("RESET".into()));
    assert!(matches!(c.call(&["GET", "k"]), V::Error(e) if e.starts_with("NOAUTH")));
}

/// MULTI/EXEC over the wire as redis-py's default pipeline sends it (one write), WATCH across
/// two connections, and a transaction whose keys live on NVMe: it runs once all its reads are
/// at hand, with the right values, while another client is served.
#[test]
fn transactions() {
    let (_ssd, s) = over_nvme("8M", "64M");
    let mut a = s.client();
    let mut b = s.client();
    // Pipelined in one go.
    for cmd in [
        &["MULTI"][..],
        &["SET", "x", "1"],
        &["INCR", "x"],
        &["GET", "x"],
        &["EXEC"],
    ] {
        a.send(cmd);
    }
    assert_eq!(a.read(), V::Simple("OK".into()));
    for _ in 0..3 {
        assert_eq!(a.read(), V::Simple("QUEUED".into()));
    }
    assert_eq!(
        a.read(),
        V::Array(vec![V::Simple("OK".into()), V::Int(2), bulk("2")])
    );
    assert_eq!(a.call(&["WATCH", "x"]), V::Simple("OK".into()));
    assert_eq!(b.call(&["SET", "x", "9"]), V::Simple("OK".into()));
    a.call(&["MULTI"]);
    a.call(&["SET", "x", "10"]);
    assert_eq!(a.call(&["EXEC"]), V::NullArray);
    assert_eq!(a.call(&["GET", "x"]), bulk("9"));
    a.call(&["MULTI"]);
    assert!(matches!(a.call(&["GET"]), V::Error(_)));
    assert!(matches!(a.call(&["EXEC"]), V::Error(e) if e.starts_with("EXECABORT")));

    // Enough 1 KB values that the first ones are only on NVMe.
    let value = |i: usize| format!("{i:0>1000}");
    for i in 0..12_000 {
        b.send(&["SET", &format!("k{i}"), &value(i)]);
    }
    for _ in 0..12_000 {
        assert_eq!(b.read(), V::Simple("OK".into()));
    }
    let on_nvme = info_number(&mut a, "tiers", "tier_nvme_objects");
    assert!(
        on_nvme > 100,
        "nothing went to NVMe: {on_nvme} objects there"
    );
    a.send(&["MULTI"]);
    for i in 0..20 {
        a.send(&["GET", &format!("k{i}")]);
    }
    a.send(&["MGET", "k20", "k21"]);
    a.send(&["EXEC"]);
    b.send(&["PING"]);
    assert_eq!(b.read(), V::Simple("PONG".into()));
    assert_eq!(a.read(), V::Simple("OK".into()));
    for _ in 0..21 {
        assert_eq!(a.read(), V::Simple("QUEUED".into()));
    }
    let mut want: Vec<V> = (0..20).map(|i| bulk(&value(i))).collect();
    want.push(V::Array(vec![bulk(&value(20)), bulk(&value(21))]));
    assert_eq!(a.read(), V::Array(want));
    drop(s);
}

/// Pub/sub across connections: a RESP2 subscriber gets arrays, a RESP3 one pushes; PSUBSCRIBE
/// patterns; a subscriber that never reads is closed at the pubsub output limit (32 MB), its
/// messages dropped, and the server goes on.
#[test]
fn pubsub_across_connections_with_bounded_subscribers() {
    let s = Server::builder().max_object("1M").start();
    let mut pubc = s.client();
    let mut sub2 = s.client();
    let mut sub3 = s.client();
    assert_eq!(
        sub2.call(&["SUBSCRIBE", "news"]),
        V::Array(vec![bulk("subscribe"), bulk("news"), V::Int(1)])
    );
    assert!(matches!(sub2.call(&["GET", "k"]), V::Error(e) if e.contains("only (P|S)SUBSCRIBE")));
    assert!(matches!(sub3.call(&["HELLO", "3"]), V::Map(_)));
    assert_eq!(
        sub3.call(&["PSUBSCRIBE", "n*"]),
        V::Push(vec![bulk("psubscribe"), bulk("n*"), V::Int(1)])
    );
    assert_eq!(pubc.call(&["PUBLISH", "news", "hello"]), V::Int(2));
    assert_eq!(
        sub2.read(),
        V::Array(vec![bulk("message"), bulk("news"), bulk("hello")])
    );
    assert_eq!(
        sub3.read(),
        V::Push(vec![
            bulk("pmessage"),
            bulk("n*"),
            bulk("news"),
            bulk("hello")
        ])
    );
    // RESP3 subscribers may run other commands.
    assert_eq!(sub3.call(&["SET", "k", "v"]), V::Simple("OK".into()));
    assert_eq!(
        pubc.call(&["PUBSUB", "NUMSUB", "news"]),
        V::Array(vec![bulk("news"), V::Int(1)])
    );
    assert_eq!(pubc.call(&["PUBSUB", "NUMPAT"]), V::Int(1));

    // sub2 stops reading: 64 messages of 1 MB are twice the hard limit.
    let big = "m".repeat(1 << 20);
    let mut reached = Vec::new();
    for _ in 0..64 {
        let V::Int(n) = pubc.call(&["PUBLISH", "news", &big]) else {
            panic!("PUBLISH")
        };
        reached.push(n);
    }
    // sub3 (pattern) reads what it gets meanwhile? No: it too is not reading, and is closed
    // too; after both are gone, a message reaches nobody.
    assert_eq!(reached.last(), Some(&0), "{reached:?}");
    let closed = info_number(
        &mut pubc,
        "stats",
        "client_output_buffer_limit_disconnections",
    );
    assert_eq!(closed, 2);
    assert_eq!(
        pubc.call(&["PUBSUB", "NUMSUB", "news"]),
        V::Array(vec![bulk("news"), V::Int(0)])
    );
    assert_eq!(pubc.call(&["PING"]), V::Simple("PONG".into()));
}

/// Commands of different clients run in the order they arrived, as in Redis: a PUNSUBSCRIBE
/// sent (not yet answered) before another client's PUBLISH takes effect first. (Redis's pubsub
/// test; the loop used to serve the clients of one turn in a hash map's order.)
#[test]
fn commands_of_different_clients_run_in_arrival_order() {
    let s = Server::builder().max_object("1M").start();
    let mut pubc = s.client();
    for round in 0..50 {
        let mut sub = s.client();
        sub.send(&["PSUBSCRIBE", "chan1.*", "chan2.*", "chan3.*"]);
        for i in 1..=3 {
            assert_eq!(sub.read().items()[2], V::Int(i));
        }
        // Sent, not read: the next client's command arrives after it.
        sub.send(&["PUNSUBSCRIBE"]);
        assert_eq!(
            pubc.call(&["PUBLISH", "chan1.hi", "hello"]),
            V::Int(0),
            "round {round}: the PUBLISH overtook the PUNSUBSCRIBE sent before it"
        );
    }
}

/// INFO as tools read it: Redis's fields, hits and misses counted as Redis does, used_memory
/// within maxmemory; and `redis-cli --stat`, which reads them, prints a sane row.
#[test]
fn info_fields_and_redis_cli_stat() {
    let s = Server::builder().dram("16M").start();
    let mut c = s.client();
    assert_eq!(info_field(&mut c, "server", "redis_version"), "7.0.15");
    assert_eq!(info_field(&mut c, "replication", "role"), "master");
    assert_eq!(info_field(&mut c, "clients", "blocked_clients"), "0");
    assert_eq!(
        info_field(&mut c, "memory", "maxmemory"),
        (16u64 << 20).to_string()
    );
    assert_eq!(info_field(&mut c, "memory", "maxmemory_human"), "16.00M");
    info_field(&mut c, "stats", "instantaneous_ops_per_sec");
    // Writes of new keys are no misses; reads count.
    for i in 0..200 {
        c.call(&["HSET", &format!("h{i}"), "f", &"x".repeat(2000)]);
    }
    assert_eq!(info_field(&mut c, "stats", "keyspace_misses"), "0");
    c.call(&["GET", "nothing"]);
    c.call(&["HGET", "h1", "f"]);
    assert_eq!(info_field(&mut c, "stats", "keyspace_misses"), "1");
    assert_eq!(info_field(&mut c, "stats", "keyspace_hits"), "1");
    let used: u64 = info_field(&mut c, "memory", "used_memory").parse().unwrap();
    let max: u64 = info_field(&mut c, "memory", "maxmemory").parse().unwrap();
    assert!(
        used > 0 && used <= max,
        "used_memory {used}, maxmemory {max}"
    );
    assert_eq!(
        info_field(&mut c, "keyspace", "db0"),
        "keys=200,expires=0,avg_ttl=0"
    );

    let port = s.addr.rsplit(':').next().unwrap().to_string();
    // --stat prints a row per interval until killed: `timeout` only ends it (a hang guard);
    // stdbuf makes it write each row as it goes.
    let out = Command::new("timeout")
        .args([
            "3",
            "stdbuf",
            "-oL",
            "redis-cli",
            "-p",
            &port,
            "--stat",
            "-i",
            "0.2",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let row = text
        .lines()
        .find(|l| l.starts_with("200 "))
        .unwrap_or_else(|| panic!("no row of 200 keys from redis-cli --stat:\n{text}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    // keys, mem, clients, blocked, requests...
    assert!(cols[1].ends_with('M') || cols[1].ends_with('K'), "{row}");
    assert_eq!(cols[3], "0", "{row}");
}
