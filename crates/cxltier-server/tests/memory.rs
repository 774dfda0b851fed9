//! The server with DRAM alone at its memory limit: the space deletes free is taken by
//! values of other sizes, as Redis (jemalloc) would take it.
//!
//! Every test asserts replies and counts; waits have generous limits that only guard against a
//! hang.

mod util;
use util::{Conn, Reply, Server};

fn call(c: &mut Conn, args: &[&[u8]]) -> Reply {
    c.call(args)
}

fn is_oom(r: &Reply) -> bool {
    matches!(r, Reply::Error(e) if e.starts_with("OOM"))
}

/// The reported case: `--dram 16M`, 1 KiB values written until SET answers OOM, two of them
/// deleted, and then a 5-byte SET was refused with OOM too. It is taken now, and so is a 1 KiB
/// value in the other freed slot; every other value still reads back.
#[test]
fn a_5_byte_set_fits_after_two_1k_keys_are_deleted_at_the_dram_limit() {
    let server = Server::builder().dram("16M").start();
    let mut c = server.client();
    let v = vec![b'x'; 1024];
    let key = |i: u64| format!("key:{i}").into_bytes();
    let mut n = 0u64;
    loop {
        match call(&mut c, &[b"SET", &key(n), &v]) {
            Reply::Simple(ok) if ok == "OK" => n += 1,
            r if is_oom(&r) => break,
            other => panic!("SET key:{n}: {other:?}"),
        }
        assert!(
            n < 100_000,
            "16 MiB took {n} values of 1 KiB without an OOM"
        );
    }
    assert!(n > 10_000, "only {n} values of 1 KiB in 16 MiB");
    assert!(is_oom(&call(&mut c, &[b"SET", b"k", b"abcde"])));
    assert_eq!(call(&mut c, &[b"DEL", &key(0), &key(1)]), Reply::Int(2));
    assert_eq!(
        call(&mut c, &[b"SET", b"k", b"abcde"]),
        Reply::Simple("OK".into())
    );
    assert_eq!(
        call(&mut c, &[b"GET", b"k"]),
        Reply::Bulk(b"abcde".to_vec())
    );
    // Two freed 1 KiB slots empty no page: the value took one of them, and INFO says so.
    let tiers = match call(&mut c, &[b"INFO", b"tiers"]) {
        Reply::Bulk(b) => String::from_utf8(b).unwrap(),
        other => panic!("INFO tiers: {other:?}"),
    };
    assert!(tiers.contains("\r\nspare_slot_writes:1\r\n"), "{tiers}");
    assert_eq!(
        call(&mut c, &[b"SET", &key(0), &v]),
        Reply::Simple("OK".into())
    );
    for i in 2..n {
        assert_eq!(
            call(&mut c, &[b"STRLEN", &key(i)]),
            Reply::Int(1024),
            "key:{i}"
        );
    }
}
