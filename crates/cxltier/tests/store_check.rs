//! `cxltier store check` and the start-up checks of `cxltier serve` on a damaged log: exit codes,
//! what is printed, and that nothing is written.

mod util;
use cxltier_store::testing::{temp_file, TempFile};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;
use util::{cxltier, damage, BIN};

fn temp(name: &str) -> TempFile {
    temp_file("cxltier-store-check-", name)
}

/// A log of 2,000 keys with a marked value in the middle of its first segment.
fn write_log(path: &std::path::Path) {
    util::write_marked_log(path, 2000, 1000);
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn check_exits_0_on_a_clean_log_1_on_a_damaged_one_2_on_a_bad_path() {
    let p = temp("nvme.log");
    write_log(&p);
    let path = p.to_str().unwrap();
    let out = cxltier(&["store", "check", path]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("keys: 2000"),
        "{}",
        text(&out.stdout)
    );
    assert!(text(&out.stdout).contains("damage: none"));

    damage(&p);
    let before = std::fs::read(&*p).unwrap();
    let out = cxltier(&["store", "check", path]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("1 range(s)"), "{stdout}");
    assert!(stdout.contains("--recover-anyway"), "{stdout}");
    let out = cxltier(&["store", "check", "--json", path]);
    assert_eq!(out.status.code(), Some(1));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["start_refused"], true);
    assert_eq!(j["damaged"].as_array().unwrap().len(), 1);
    assert_eq!(j["damaged"][0]["kind"], "records");
    assert!(j["keys_possibly_stale"].as_u64().unwrap() >= 1000, "{j}");
    assert!(
        std::fs::read(&*p).unwrap() == before,
        "check wrote to the file"
    );

    let missing = p.with_file_name("missing.log");
    let out = cxltier(&["store", "check", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let dir = p.parent().unwrap().to_str().unwrap().to_string();
    assert_eq!(cxltier(&["store", "check", &dir]).status.code(), Some(2));
}

/// The address in serve's "listening on ADDR;" line.
fn listening_addr(stderr: &str) -> String {
    let (_, rest) = stderr
        .split_once("listening on ")
        .unwrap_or_else(|| panic!("no \"listening on\" line: {stderr}"));
    let addr = rest.split(';').next().unwrap().to_string();
    assert!(
        !addr.ends_with(":0"),
        "the port the kernel picked is not said: {addr}"
    );
    addr
}

fn info_recovery(addr: &str) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c.write_all(b"*2\r\n$4\r\nINFO\r\n$8\r\nrecovery\r\n")
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    // A bulk string: read until its end (the section ends with an empty line).
    while !got.ends_with(b"\r\n\r\n\r\n") {
        let n = loop {
            match c.read(&mut buf) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                r => break r.unwrap(),
            }
        };
        assert!(n > 0, "the server closed the connection");
        got.extend_from_slice(&buf[..n]);
    }
    text(&got)
}

#[test]
fn serve_refuses_a_damaged_log_and_starts_with_the_override() {
    let p = temp("nvme.log");
    write_log(&p);
    damage(&p);
    let before = std::fs::read(&*p).unwrap();
    let ssd = p.to_str().unwrap().to_string();
    let quarantine = p.with_file_name("quarantine");
    let quarantine = quarantine.to_str().unwrap();
    // Port 0: the kernel picks one no other test holds, and the server says which.
    let args = [
        "serve",
        "--bind",
        "127.0.0.1:0",
        "--dram",
        "16M",
        "--ssd",
        &ssd,
        "--quarantine-file",
        quarantine,
    ];
    let out = cxltier(&args);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("is damaged") && stderr.contains("segment "),
        "{stderr}"
    );
    assert!(stderr.contains("--recover-anyway"), "{stderr}");
    assert!(
        std::fs::read(&*p).unwrap() == before,
        "a refused start wrote to the file"
    );

    let mut child = Command::new(BIN)
        .args(args)
        .arg("--recover-anyway")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let listening = line.contains("listening on");
        seen.push(line);
        if listening {
            break;
        }
    }
    let all = seen.join("\n");
    assert!(all.contains("recovery: damaged: segment "), "{all}");
    assert!(all.contains("1 range(s)"), "{all}");
    let addr = listening_addr(&all);
    let info = info_recovery(&addr);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(info.contains("recovery_damaged_ranges:1\r\n"), "{info}");
    assert!(info.contains("recovery_keys_recovered:1999\r\n"), "{info}");
    assert!(
        !info.contains("recovery_keys_possibly_stale:0\r\n"),
        "{info}"
    );
}

#[test]
fn serve_refuses_an_object_limit_no_tier_can_hold() {
    let p = temp("nvme.log");
    let quarantine = p.with_file_name("quarantine");
    let mut child = Command::new(BIN)
        .args([
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--dram",
            "32M",
            "--max-object",
            "1G",
            "--quarantine-file",
            quarantine.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A hang guard: a server that accepted the limits would listen until killed.
    let mut waited = 0;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if waited >= 300 {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
        waited += 1;
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = status.unwrap_or_else(|| panic!("the server started with these limits: {stderr}"));
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--max-object") && stderr.contains("512M"),
        "{stderr}"
    );
}
