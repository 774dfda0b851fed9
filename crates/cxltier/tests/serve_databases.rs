//! Databases of `cxltier serve` as a process: SWAPDB kept across a kill -9, redis-cli -n and
//! `--databases`, and a store that holds more databases than asked for. (SWAPDB kept across a
//! restart, blocking pops per database and a store of the format before databases are the
//! server crate's tests.)

mod common;
use common::{serve, swapdb_survives, try_serve, ServerChild as Server};
use std::path::Path;
use std::process::Command;

use cxltier_store::testing::{temp_file, TempFile};

fn ssd_args(ssd: &Path, durability: &str) -> Vec<String> {
    vec![
        "--dram".into(),
        "32M".into(),
        "--ssd".into(),
        format!("{}:64M", ssd.display()),
        "--durability".into(),
        durability.into(),
    ]
}

fn start_on(ssd: &TempFile, durability: &str) -> Server {
    let args = ssd_args(ssd, durability);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    serve(&args)
}

/// With `--durability always` the SWAPDB's reply leaves only once the map is on disk: a kill
/// -9 right after it keeps the swap.
#[test]
fn swapdb_survives_kill_9_with_durability_always() {
    let ssd = temp_file("cxltier-db-", "swap.log");
    let restart = |s: Server| {
        s.kill9();
        start_on(&ssd, "always")
    };
    swapdb_survives(start_on(&ssd, "always"), Server::client, restart);
}

/// redis-cli -n picks a database as it does with redis-server; --databases and CONFIG GET
/// databases agree; SELECT past them is refused.
#[test]
fn redis_cli_n_and_the_databases_option() {
    let s = serve(&["--databases", "4"]);
    let port = s.port.to_string();
    let cli = |args: &[&str]| -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &port])
            .args(args)
            .output()
            .expect("redis-cli (scripts/install-redis)");
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(cli(&["-n", "3", "SET", "k", "three"]), "OK\n");
    assert_eq!(cli(&["-n", "3", "GET", "k"]), "three\n");
    assert_eq!(cli(&["GET", "k"]), "\n");
    assert_eq!(cli(&["CONFIG", "GET", "databases"]), "databases\n4\n");
    let mut c = s.client();
    assert_eq!(c.cmd("SELECT 4"), "-ERR DB index is out of range\r\n");
    assert!(c
        .cmd("INFO keyspace")
        .contains("db3:keys=1,expires=0,avg_ttl=0\r\n"));
    let err = try_serve(&["--databases", "0"]).err().unwrap();
    assert!(err.contains("--databases 0"), "{err}");
}

/// A store holds its databases: restarting it with fewer `--databases` than hold keys is
/// refused with what to do, and with enough it starts.
#[test]
fn a_store_refuses_fewer_databases_than_hold_keys() {
    let ssd = temp_file("cxltier-db-", "fewer.log");
    let s = start_on(&ssd, "always");
    let mut c = s.client();
    c.cmd("SELECT 9");
    assert_eq!(c.cmd("SET k v"), "+OK\r\n");
    drop(c);
    s.stop();
    let mut args = ssd_args(&ssd, "always");
    args.extend(["--databases".into(), "4".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let err = try_serve(&args).err().unwrap();
    assert!(
        err.contains("holds 1 keys in database 9") && err.contains("--databases 10"),
        "{err}"
    );
    let mut args = ssd_args(&ssd, "always");
    args.extend(["--databases".into(), "10".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let s = serve(&args);
    let mut c = s.client();
    c.cmd("SELECT 9");
    assert_eq!(c.cmd("GET k"), "$1\r\nv\r\n");
}
