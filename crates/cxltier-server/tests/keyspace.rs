//! The server answering the string and keyspace commands over a real socket as Redis 7.0
//! does: the string commands in RESP2 and RESP3, SCAN's guarantee while another client inserts
//! and deletes (with most values on NVMe), KEYS, RANDOMKEY, RENAME, COPY, the EXPIRE flags.
//!
//! Replies are decoded by `cxltier_resp` into their exact RESP2/RESP3 types, so that every type
//! the server sends is checked.

mod util;
use util::{bulk, over_nvme, Conn, Reply as V, ReplyExt, Server};

fn int(n: i64) -> V {
    V::Int(n)
}

fn err(c: &mut Conn, args: &[&str]) -> String {
    match c.call(args) {
        V::Error(e) => e,
        other => panic!("{args:?} answered {other:?}, not an error"),
    }
}

#[test]
fn string_commands_in_resp2_and_resp3() {
    let s = Server::builder().dram("32M").start();
    let mut c = s.client();
    assert_eq!(c.call(&["APPEND", "s", "foo"]), int(3));
    assert_eq!(c.call(&["APPEND", "s", "bar"]), int(6));
    assert_eq!(c.call(&["GETRANGE", "s", "-3", "-1"]), bulk("bar"));
    assert_eq!(c.call(&["SETRANGE", "s", "8", "!"]), int(9));
    assert_eq!(c.call(&["GET", "s"]), V::Bulk(b"foobar\0\0!".to_vec()));
    assert_eq!(c.call(&["STRLEN", "s"]), int(9));
    assert_eq!(
        c.call(&["GETSET", "s", "x"]),
        V::Bulk(b"foobar\0\0!".to_vec())
    );
    assert_eq!(c.call(&["GETEX", "s", "PX", "100000"]), bulk("x"));
    assert!(matches!(c.call(&["PTTL", "s"]), V::Int(t) if t > 0 && t <= 100_000));
    assert_eq!(c.call(&["SETNX", "s", "y"]), int(0));
    assert_eq!(c.call(&["MSETNX", "a", "1", "b", "2"]), int(1));
    assert_eq!(c.call(&["INCRBYFLOAT", "a", "0.5"]), bulk("1.5"));
    assert_eq!(c.call(&["SETBIT", "bits", "9", "1"]), int(0));
    assert_eq!(c.call(&["GETBIT", "bits", "9"]), int(1));
    assert_eq!(c.call(&["BITCOUNT", "bits"]), int(1));
    assert_eq!(c.call(&["BITPOS", "bits", "1"]), int(9));
    assert_eq!(c.call(&["GETDEL", "s"]), bulk("x"));
    assert_eq!(c.call(&["GETDEL", "s"]), V::NullBulk);
    assert_eq!(
        err(&mut c, &["SETBIT", "bits", "-1", "1"]),
        "ERR bit offset is not an integer or out of range"
    );
    assert_eq!(
        err(&mut c, &["SETRANGE", "s", "536870912", "x"]),
        "ERR string exceeds maximum allowed size (proto-max-bulk-len)"
    );
    // RESP3: a missing value is the null type.
    c.call(&["HELLO", "3"]);
    assert_eq!(c.call(&["GETDEL", "s"]), V::Null);
    assert_eq!(c.call(&["GETEX", "s"]), V::Null);
    assert_eq!(c.call(&["GETSET", "s", "v"]), V::Null);
    // The arity and flags come from the table.
    let info = c.call(&["COMMAND", "INFO", "getex", "msetnx", "scan"]);
    let getex = &info.items()[0].items();
    assert_eq!(getex[1], int(-2));
    let msetnx = &info.items()[1].items();
    assert_eq!(
        (&msetnx[3], &msetnx[4], &msetnx[5]),
        (&int(1), &int(-1), &int(2))
    );
}

#[test]
fn values_over_max_object_name_the_limit() {
    let s = Server::builder().dram("32M").max_object("1M").start();
    let mut c = s.client();
    let e = err(&mut c, &["SETRANGE", "k", "2000000", "x"]);
    assert!(e.contains("--max-object"), "{e}");
    assert_eq!(c.call(&["EXISTS", "k"]), int(0));
    c.call(&["SET", "k", "v"]);
    let e = err(&mut c, &["SETBIT", "k", "16000000", "1"]);
    assert!(e.contains("--max-object"), "{e}");
    assert_eq!(c.call(&["GET", "k"]), bulk("v"));
}

/// A whole SCAN, COUNT `count`, while `between` runs after each call; the keys returned.
fn scan_all(c: &mut Conn, count: &str, mut between: impl FnMut()) -> Vec<String> {
    let mut cursor = "0".to_string();
    let mut keys = Vec::new();
    loop {
        let r = c.call(&["SCAN", &cursor, "COUNT", count]);
        let [next, found] = r.items() else {
            panic!("{r:?}")
        };
        keys.extend(found.items().iter().map(V::text));
        cursor = next.text();
        if cursor == "0" {
            return keys;
        }
        between();
    }
}

/// Redis's guarantee, with most values on NVMe and another client inserting and deleting
/// between calls: every key present for the whole scan is returned, and none twice.
#[test]
fn scan_returns_every_key_present_throughout_with_values_on_nvme() {
    let (_ssd, s) = over_nvme("8M", "64M");
    let mut c = s.client();
    let mut other = s.client();
    let value = "v".repeat(4000);
    const N: usize = 3000;
    for i in 0..N {
        c.send(&["SET", &format!("key:{i:05}"), &value]);
    }
    for _ in 0..N {
        assert_eq!(c.read(), V::Simple("OK".into()));
    }
    assert_eq!(c.call(&["DBSIZE"]), int(N as i64));
    let mut step = 0usize;
    let keys = scan_all(&mut c, "97", || {
        // Delete an existing key, insert a new one before and after it.
        let victim = format!("key:{:05}", (step * 37) % N);
        other.call(&["DEL", &victim]);
        other.call(&["SET", &format!("key:{:05}x", step), "new"]);
        other.call(&["SET", &format!("a{step}"), "new"]);
        step += 1;
    });
    let deleted: std::collections::HashSet<String> = (0..step)
        .map(|s| format!("key:{:05}", (s * 37) % N))
        .collect();
    let unique: std::collections::HashSet<&String> = keys.iter().collect();
    assert_eq!(unique.len(), keys.len(), "a key was returned twice");
    for i in 0..N {
        let k = format!("key:{i:05}");
        assert!(
            deleted.contains(&k) || unique.contains(&k),
            "{k} was missed"
        );
    }
    // MATCH and TYPE filter what a call returns.
    c.call(&["HSET", "h", "f", "v"]);
    let r = c.call(&[
        "SCAN", "0", "MATCH", "h*", "TYPE", "hash", "COUNT", "100000",
    ]);
    assert_eq!(r.items()[1], V::Array(vec![bulk("h")]));
    let keys = c.call(&["KEYS", "key:0000?"]);
    assert!(!keys.items().is_empty() && keys.items().len() <= 10);
    assert!(matches!(c.call(&["RANDOMKEY"]), V::Bulk(_)));
}

#[test]
fn rename_copy_and_the_expire_family() {
    let s = Server::builder().dram("32M").start();
    let mut c = s.client();
    c.call(&["SET", "k", "v"]);
    assert_eq!(c.call(&["EXPIRE", "k", "100", "XX"]), int(0));
    assert_eq!(c.call(&["EXPIRE", "k", "100", "NX"]), int(1));
    assert_eq!(c.call(&["EXPIRE", "k", "50", "GT"]), int(0));
    assert_eq!(c.call(&["PEXPIRE", "k", "50000", "LT"]), int(1));
    assert!(matches!(c.call(&["EXPIRETIME", "k"]), V::Int(t) if t > 1_700_000_000));
    assert_eq!(
        err(&mut c, &["EXPIRE", "k", "1", "NX", "GT"]),
        "ERR NX and XX, GT or LT options at the same time are not compatible"
    );
    assert_eq!(c.call(&["RENAME", "k", "k2"]), V::Simple("OK".into()));
    assert!(matches!(c.call(&["TTL", "k2"]), V::Int(t) if t > 0 && t <= 50));
    assert_eq!(c.call(&["RENAMENX", "k2", "k2"]), int(0));
    assert_eq!(c.call(&["COPY", "k2", "k3"]), int(1));
    assert_eq!(c.call(&["COPY", "k2", "k3"]), int(0));
    assert_eq!(c.call(&["TOUCH", "k2", "k3", "k2", "nope"]), int(3));
    assert_eq!(c.call(&["EXISTS", "k2", "k2", "nope"]), int(2));
    assert_eq!(c.call(&["UNLINK", "k2", "k3"]), int(2));
    assert_eq!(err(&mut c, &["RENAME", "k2", "x"]), "ERR no such key");
    assert_eq!(c.call(&["PEXPIRETIME", "k2"]), int(-2));
}
