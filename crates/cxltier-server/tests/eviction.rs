//! The server as a cache: a store filled past its budget under `allkeys-lru` (every tier full,
//! no `maxmemory` set) evicts instead of refusing writes, and keeps the keys read since.
//!
//! Every test asserts replies and counts.

mod util;
use util::{info_number, Conn, Reply, Server};

fn ok(c: &mut Conn, args: &[&[u8]]) {
    assert_eq!(c.call(args), Reply::Simple("OK".into()), "{:?}", args[0]);
}

/// Write 1 KiB values until the store has been filled several times over, reading the hot keys
/// between writes (a second of the LRU clock apart from the first cold writes); every write
/// succeeds, keys are evicted, and the hot keys stay.
fn fill_past_the_budget(server: &Server, writes: u64) {
    let mut c = server.client();
    ok(
        &mut c,
        &[b"CONFIG", b"SET", b"maxmemory-policy", b"allkeys-lru"],
    );
    ok(&mut c, &[b"CONFIG", b"SET", b"maxmemory-samples", b"10"]);
    let v = vec![b'x'; 1024];
    for h in 0..20u64 {
        ok(&mut c, &[b"SET", format!("hot:{h}").as_bytes(), &v]);
    }
    // The LRU clock counts seconds: the cold keys written in the first one are older than
    // the hot keys read after it.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    for i in 0..writes {
        if i % 100 == 0 {
            for h in 0..20u64 {
                let r = c.call(&[b"GET", format!("hot:{h}").as_bytes()]);
                assert_eq!(r, Reply::Bulk(v.clone()), "hot:{h} after {i} writes");
            }
        }
        ok(&mut c, &[b"SET", format!("key:{i}").as_bytes(), &v]);
    }
    let evicted = info_number(&mut c, "stats", "evicted_keys");
    let keys = match c.call(&[b"DBSIZE"]) {
        Reply::Int(n) => n as u64,
        other => panic!("DBSIZE: {other:?}"),
    };
    assert!(evicted > 0, "nothing evicted");
    assert_eq!(
        keys + evicted,
        writes + 20,
        "each key written is kept or evicted"
    );
    for h in 0..20u64 {
        assert_eq!(
            c.call(&[b"EXISTS", format!("hot:{h}").as_bytes()]),
            Reply::Int(1),
            "hot:{h} was evicted"
        );
    }
}

#[test]
fn a_full_memory_store_under_allkeys_lru_evicts_and_keeps_the_hot_keys() {
    let server = Server::builder().dram("16M").start();
    // 16 MiB holds about 13,000 values of 1 KiB: written three times over.
    fill_past_the_budget(&server, 40_000);
}

#[test]
fn a_full_nvme_tier_under_allkeys_lru_evicts_too() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::builder()
        .dram("8M")
        .ssd(&dir.path().join("nvme"), "32M")
        .start();
    // The log of 32 MiB holds about 23,000 values of 1 KiB (three to a 4 KiB block).
    fill_past_the_budget(&server, 50_000);
}

#[test]
fn noeviction_still_refuses_a_full_store() {
    let server = Server::builder().dram("8M").start();
    let mut c = server.client();
    let v = vec![b'x'; 1024];
    let mut n = 0u64;
    loop {
        match c.call(&[b"SET", format!("key:{n}").as_bytes(), &v]) {
            Reply::Simple(_) => n += 1,
            Reply::Error(e) if e.starts_with("OOM") => break,
            other => panic!("{other:?}"),
        }
        assert!(n < 50_000);
    }
    assert_eq!(info_number(&mut c, "stats", "evicted_keys"), 0);
    assert_eq!(c.call(&[b"DBSIZE"]), Reply::Int(n as i64));
}
