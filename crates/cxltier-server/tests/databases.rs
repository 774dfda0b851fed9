//! Databases of the server over a real socket: SWAPDB kept across a restart, blocking pops per
//! database (and woken by SWAPDB), CLIENT LIST's `db=`, and a store of the format before
//! databases opened as database 0.

mod util;
use util::{swapdb_survives, temp, wait_blocked, Server};

#[test]
fn swapdb_survives_a_restart() {
    let ssd = temp("swap.log");
    let start = || {
        Server::builder()
            .dram("32M")
            .ssd(&ssd, "64M")
            .durability("always")
            .start()
    };
    swapdb_survives(start(), Server::client, |s| {
        s.stop();
        start()
    });
}

/// A blocked pop waits on its own database's key: a push of the same name in another database
/// does not wake it; a push in its database does; and a SWAPDB that brings it a database
/// holding the key wakes it (Redis's scanDatabaseForReadyKeys).
#[test]
fn blocking_pops_wait_in_their_database_and_swapdb_wakes_them() {
    let s = Server::start();
    let (mut a, mut b) = (s.client(), s.client());
    assert_eq!(a.cmd("SELECT 1"), "+OK\r\n");
    a.send_line("BLPOP q 0");
    wait_blocked(&mut b, 1);
    assert_eq!(b.cmd("RPUSH q zero"), ":1\r\n");
    // Still blocked: database 0's q is not its q.
    wait_blocked(&mut b, 1);
    let list = b.cmd("CLIENT LIST");
    assert!(list.contains(" flags=b db=1 "), "{list}");
    assert!(list.contains(" flags=N db=0 "), "{list}");
    b.cmd("SELECT 1");
    assert_eq!(b.cmd("RPUSH q one"), ":1\r\n");
    assert_eq!(a.read_text(), "*2\r\n$1\r\nq\r\n$3\r\none\r\n");
    // Blocked again in database 1; the key appears in database 2, which SWAPDB brings in.
    a.send_line("BRPOP q 0");
    wait_blocked(&mut b, 1);
    b.cmd("SELECT 2");
    assert_eq!(b.cmd("RPUSH q two"), ":1\r\n");
    wait_blocked(&mut b, 1);
    assert_eq!(b.cmd("SWAPDB 1 2"), "+OK\r\n");
    assert_eq!(a.read_text(), "*2\r\n$1\r\nq\r\n$3\r\ntwo\r\n");
    wait_blocked(&mut b, 0);
    // The database 0 list was never touched.
    b.cmd("SELECT 0");
    assert_eq!(b.cmd("LRANGE q 0 -1"), "*1\r\n$4\r\nzero\r\n");
    // SORT ... STORE creating the key a client waits on (in its database) wakes it.
    // (In database 0 it creates another database's key: the client waits on.)
    a.send_line("BLPOP sorted 0");
    wait_blocked(&mut b, 1);
    b.replies(&[
        ("RPUSH src 3 1 2", ":3\r\n"),
        ("SORT src STORE sorted", ":3\r\n"),
    ]);
    wait_blocked(&mut b, 1);
    b.cmd("SELECT 1");
    b.replies(&[
        ("RPUSH src 6 4 5", ":3\r\n"),
        ("SORT src STORE sorted", ":3\r\n"),
    ]);
    assert_eq!(a.read_text(), "*2\r\n$6\r\nsorted\r\n$1\r\n4\r\n");
    b.cmd("SELECT 0");
    // BLMPOP names its key without the database.
    a.cmd("SELECT 0");
    assert_eq!(
        a.cmd("BLMPOP 0 2 nothing q LEFT"),
        "*2\r\n$1\r\nq\r\n*1\r\n$4\r\nzero\r\n"
    );
}

/// A store written by the server before databases existed (the store's fixture) opens with
/// every key in database 0.
#[test]
fn a_store_of_the_format_before_databases_serves_its_keys_in_database_0() {
    let ssd = temp("old.log");
    let head = include_bytes!("../../cxltier-store/tests/fixtures/format1-db0.log-head");
    let mut bytes = head.to_vec();
    bytes.resize(8 << 20, 0);
    std::fs::write(&*ssd, &bytes).unwrap();
    let s = Server::builder()
        .dram("32M")
        .ssd_file(&ssd)
        .durability("always")
        .start();
    let mut c = s.client();
    c.replies(&[
        ("DBSIZE", ":6\r\n"),
        ("GET str", "$5\r\nhello\r\n"),
        ("LRANGE l 0 -1", "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"),
        ("ZSCORE z m2", "$1\r\n2\r\n"),
        ("HGET h f2", "$2\r\nv2\r\n"),
        ("SISMEMBER s x", ":1\r\n"),
    ]);
    let info = c.cmd("INFO keyspace");
    assert!(info.contains("db0:keys=6,expires=1,avg_ttl="), "{info}");
    c.cmd("SELECT 1");
    assert_eq!(c.cmd("DBSIZE"), ":0\r\n");
}
