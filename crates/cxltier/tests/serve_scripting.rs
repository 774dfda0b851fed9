//! Lua scripting in `cxltier serve` where the process is what is looked at: a busy script
//! stopped by SHUTDOWN NOSAVE, by SIGTERM, reached by redis-cli, and the memory a script at the
//! interpreter's cap gives back to the system (the process's RSS). What a socket alone shows
//! (the lock scripts compared with redis-server's, SCRIPT KILL from a new connection) is tested
//! in the server crate's `tests/scripting.rs`.

mod common;
use common::{run_until_busy, serve, wait_busy, Conn, ServerChild, GUARD};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

type Server = ServerChild;

#[test]
fn a_busy_script_answers_busy_and_stops_at_script_kill() {
    let ours = serve(&[]);
    let mut admin = Conn::connect(&ours.addr);
    let mut other = Conn::connect(&ours.addr);
    let mut runner = Conn::connect(&ours.addr);
    assert_eq!(
        admin.call_text(&["CONFIG", "SET", "busy-reply-threshold", "50"]),
        "+OK\r\n"
    );
    admin.call_text(&["SET", "k", "1"]);
    // Not busy: nothing to kill.
    assert!(admin.call_text(&["SCRIPT", "KILL"]).starts_with("-NOTBUSY"));
    runner.send(&["EVAL", "while true do end", "0"]);
    wait_busy(&ours.addr);
    let busy = other.call_text(&["GET", "k"]);
    assert!(
        busy.starts_with("-BUSY Redis is busy running a script."),
        "{busy}"
    );
    assert_eq!(other.call_text(&["MULTI"]), "+OK\r\n");
    assert!(other.call_text(&["INCR", "k"]).starts_with("-BUSY"));
    assert_eq!(admin.call_text(&["SCRIPT", "KILL"]), "+OK\r\n");
    let mut killed = Vec::new();
    runner.read_raw(&mut killed).unwrap();
    let killed = String::from_utf8(killed).unwrap();
    assert!(
        killed.starts_with("-ERR Script killed by user with SCRIPT KILL..."),
        "{killed}"
    );
    // The transaction a BUSY reply touched aborts; the server serves again.
    assert!(other.call_text(&["EXEC"]).starts_with("-EXECABORT"));
    assert_eq!(other.call_text(&["GET", "k"]), "$1\r\n1\r\n");
    // A script that wrote cannot be killed.
    runner.send(&[
        "EVAL",
        "redis.call('set', 'w', '1') local t = redis.call('time') while true do end",
        "0",
    ]);
    wait_busy(&ours.addr);
    assert!(admin
        .call_text(&["SCRIPT", "KILL"])
        .starts_with("-UNKILLABLE"));
    // SHUTDOWN NOSAVE stops it and the server.
    admin.send(&["SHUTDOWN", "NOSAVE"]);
    let mut server = ours;
    let t = Instant::now();
    while server.child.try_wait().unwrap().is_none() {
        assert!(
            t.elapsed() < GUARD,
            "SHUTDOWN NOSAVE did not stop a busy server"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Send `signal` (a name `kill` knows: TERM, INT) to the server.
fn signal(server: &Server, signal: &str) {
    let ok = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(server.child.id().to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{signal} failed");
}

/// Wait for the server to exit (within the guard); its exit status.
fn exit_of(server: &mut Server, what: &str) -> std::process::ExitStatus {
    let t = Instant::now();
    loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            return status;
        }
        assert!(t.elapsed() < GUARD, "{what}: the server did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigterm_stops_a_busy_script_that_has_not_written_and_the_server_keeps_its_data() {
    let dir = tempfile::tempdir().unwrap();
    let ssd = format!("{}:64M", dir.path().join("store.log").display());
    let mut ours = serve(&["--ssd", &ssd, "--durability", "always"]);
    let mut admin = Conn::connect(&ours.addr);
    assert_eq!(admin.call_text(&["SET", "kept", "before"]), "+OK\r\n");
    let mut runner = run_until_busy(&ours.addr, &mut admin, "while true do end");
    signal(&ours, "TERM");
    let status = exit_of(&mut ours, "SIGTERM during a busy script");
    assert!(status.success(), "{status:?}");
    // The script's caller was told why before the server closed.
    let mut killed = Vec::new();
    runner.read_raw(&mut killed).unwrap();
    let killed = String::from_utf8(killed).unwrap();
    assert!(killed.contains("stop signal"), "{killed}");
    drop(ours);
    let again = serve(&["--ssd", &ssd]);
    let mut c = Conn::connect(&again.addr);
    assert_eq!(c.call_text(&["GET", "kept"]), "$6\r\nbefore\r\n");
}

#[test]
fn sigterm_lets_a_script_that_has_written_finish_and_a_second_one_stops_it() {
    let mut ours = serve(&[]);
    let mut admin = Conn::connect(&ours.addr);
    let _runner = run_until_busy(
        &ours.addr,
        &mut admin,
        "redis.call('set', 'w', '1') while true do end",
    );
    signal(&ours, "TERM");
    // Scripts are atomic: the server goes on answering BUSY until the script ends...
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        ours.child.try_wait().unwrap().is_none(),
        "one SIGTERM stopped a script that had written"
    );
    let mut late = Conn::connect(&ours.addr);
    assert!(late.call_text(&["PING"]).starts_with("-BUSY"));
    assert!(late
        .call_text(&["SCRIPT", "KILL"])
        .starts_with("-UNKILLABLE"));
    // ... or a second signal stops it.
    signal(&ours, "INT");
    let status = exit_of(&mut ours, "a second signal during a script that wrote");
    assert!(status.success(), "{status:?}");
}

/// The defect as a user met it, with the real redis-cli: `redis-cli EVAL 'while true do end' 0`
/// in the background, then `redis-cli PING` and `redis-cli SCRIPT KILL` from new connections.
#[test]
fn redis_cli_reaches_a_server_running_a_busy_script() {
    let ours = serve(&[]);
    let port = ours.port.to_string();
    let cli = |args: &[&str]| -> String {
        let out = Command::new("timeout")
            .arg("20")
            .arg("redis-cli")
            .args(["-p", &port])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "redis-cli {args:?} did not answer within 20 s: {out:?}"
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(
        cli(&["CONFIG", "SET", "busy-reply-threshold", "100"]),
        "OK\n"
    );
    let script = Command::new("redis-cli")
        .args(["-p", &port, "EVAL", "while true do end", "0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // PING from new connections until the script has begun: then BUSY.
    let t = Instant::now();
    loop {
        let reply = cli(&["PING"]);
        if reply.starts_with("BUSY Redis is busy running a script.") {
            break;
        }
        assert_eq!(reply, "PONG\n");
        assert!(t.elapsed() < GUARD, "the script never made the server busy");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(cli(&["SCRIPT", "KILL"]), "OK\n");
    let out = script.wait_with_output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("Script killed by user"));
    assert_eq!(cli(&["PING"]), "PONG\n");
}

/// A script that allocates until it reaches the interpreter's cap fails, and leaves scripting
/// working (Lua 5.1 collects nothing when an allocation fails: its garbage used to fill the heap
/// so that every later script failed to compile) and the memory given back to the system: the server process's own RSS, so it runs as a process.
#[test]
fn a_script_at_the_memory_cap_leaves_scripting_working_and_gives_its_memory_back() {
    let ours = serve(&[]);
    let mut c = Conn::connect(&ours.addr);
    // A MiB more each turn: the cap is reached in a few hundred turns, however slow the build.
    let bomb = "local t = {} local s = string.rep('x', 1048576) \
                for i = 1, 100000 do t[i] = s .. i end return #t";
    let failed = c.call_text(&["EVAL", bomb, "0"]);
    assert!(failed.starts_with("-ERR not enough memory"), "{failed}");
    assert_eq!(c.call_text(&["EVAL", "return 1", "0"]), ":1\r\n");
    assert_eq!(c.call_text(&["EVAL", bomb, "0"]), failed);
    assert_eq!(c.call_text(&["EVAL", "return 2", "0"]), ":2\r\n");
    let info = c.call_text(&["INFO", "memory"]);
    let field = |name: &str| -> u64 {
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .unwrap_or_else(|| panic!("no {name} in {info}"))
            .trim()
            .parse()
            .unwrap()
    };
    // The scripts held 256 MiB at the cap; after them the interpreter and the process are back
    // to their size before (tens of MiB at most), far from it.
    assert!(field("used_memory_vm_eval") < 16 << 20, "{info}");
    assert!(field("used_memory_rss") < 128 << 20, "{info}");
}

/// A library FUNCTION LOAD acknowledged is on the store's log (`--durability always`): a kill
/// -9 right after the reply keeps it, and the restarted server runs its functions.
#[test]
fn function_libraries_survive_kill_9() {
    let ssd = cxltier_store::testing::temp_file("cxltier-fn-", "functions.log");
    let ssd_arg = format!("{}:64M", ssd.display());
    let args = ["--dram", "32M", "--ssd", &ssd_arg, "--durability", "always"];
    let first = serve(&args);
    let mut c = first.client();
    let code =
        "#!lua name=kept\nredis.register_function('echo', function(keys, args) return args[1] end)";
    assert_eq!(c.call_text(&["FUNCTION", "LOAD", code]), "$4\r\nkept\r\n");
    first.kill9();
    let second = serve(&args);
    let mut c = second.client();
    assert_eq!(c.call_text(&["FCALL", "echo", "0", "x"]), "$1\r\nx\r\n");
    assert_eq!(c.call_text(&["DBSIZE"]), ":0\r\n");
}
