//! What the socket tests of the CLI share: `cxltier serve` processes on ports of their own
//! ([`serve`], [`try_serve`], [`cxltier_serve`]), and, from the server crate's harness, the
//! process launcher ([`ServerChild`], [`redis`]), the client and the reply assertions.

// Each test binary uses the part it needs.
#![allow(dead_code)]

// The server's own test harness: its clients, reply assertions, in-process servers and server
// processes, shared so that the process-level tests here keep no copy of them.
#[path = "../../../cxltier-server/tests/util/mod.rs"]
mod server_util;
#[allow(unused_imports)]
pub use server_util::*;

/// `cxltier serve ARGS` (the test binary's own build), with its stderr kept; the password of a
/// `--requirepass` among them is used to ask who answers.
pub fn try_serve(args: &[&str]) -> Result<ServerChild, String> {
    let password = args
        .iter()
        .position(|a| *a == "--requirepass")
        .map(|i| args[i + 1]);
    ServerChild::try_start_logged("cxltier serve", password, |port| {
        cxltier_serve(env!("CARGO_BIN_EXE_cxltier"), port, args)
    })
}

/// [`try_serve`], failing the test when the server does not start.
pub fn serve(args: &[&str]) -> ServerChild {
    try_serve(args).unwrap_or_else(|e| panic!("cxltier serve {args:?} did not start: {e}"))
}

/// `cxltier serve` (the binary `bin`) on `port` with `args`, following a quarantine file that
/// does not exist unless `args` name one: one the host may have must not reach a test.
pub fn cxltier_serve(bin: &str, port: u16, args: &[&str]) -> std::process::Command {
    let mut c = std::process::Command::new(bin);
    c.args(["serve", "--bind", &format!("127.0.0.1:{port}")]);
    if !args.contains(&"--quarantine-file") {
        let none = std::env::temp_dir().join(format!("cxltier-test-no-quarantine-{port}.jsonl"));
        c.arg("--quarantine-file").arg(none);
    }
    c.args(args);
    c
}
