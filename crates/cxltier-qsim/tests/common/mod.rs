//! What the tests against Qiskit and Aer share: the repository, the Python environment with
//! Qiskit and Aer (`scripts/qsim-peers`) and the scripts run in it ([`run_script`]), scratch
//! directories where O_DIRECT works, the state vectors the scripts write ([`complex_file`],
//! [`max_diff`]) and circuits several tests run ([`qft`], [`ghz`]).

// Each test binary uses the part it needs.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Python with Qiskit and Aer.
pub fn python() -> PathBuf {
    let py = repo().join("bench/cache/venv/bin/python");
    assert!(
        py.exists(),
        "Qiskit Aer is not installed: run scripts/qsim-peers (it installs qiskit and qiskit-aer into bench/cache/venv)"
    );
    py
}

/// A new directory `target/qsim-NAME-PID`: on the root file system (not tmpfs), where O_DIRECT
/// works.
pub fn scratch(name: &str) -> PathBuf {
    let d = repo()
        .join("target")
        .join(format!("qsim-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The header of an OpenQASM 2.0 file with Qiskit's gate library.
pub const HEADER: &str = "OPENQASM 2.0;\ninclude \"qelib1.inc\";\n";

/// `tests/SCRIPT ARGS` run by the Python with Qiskit and Aer, which must succeed: its stdout.
pub fn run_script<A: AsRef<OsStr>>(script: &str, args: impl IntoIterator<Item = A>) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../cxltier-qsim/tests")
        .join(script);
    let out = Command::new(python())
        .arg(&path)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The little-endian complex128 values in the file at `path`.
pub fn complex_file(path: &Path) -> Vec<[f64; 2]> {
    std::fs::read(path)
        .unwrap()
        .chunks(16)
        .map(|c| {
            [
                f64::from_le_bytes(c[..8].try_into().unwrap()),
                f64::from_le_bytes(c[8..].try_into().unwrap()),
            ]
        })
        .collect()
}

/// The largest difference between the real or imaginary parts of two state vectors of the same
/// length.
pub fn max_diff(a: &[[f64; 2]], b: &[[f64; 2]]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x[0] - y[0]).abs().max((x[1] - y[1]).abs()))
        .fold(0.0, f64::max)
}

/// The textbook QFT on `n` qubits with the final swaps, on a non-trivial input (x on every third
/// qubit).
pub fn qft(n: usize) -> String {
    let mut s = format!("{HEADER}qreg q[{n}];\n");
    for q in (0..n).step_by(3) {
        writeln!(s, "x q[{q}];").unwrap();
    }
    for j in (0..n).rev() {
        writeln!(s, "h q[{j}];").unwrap();
        for k in (0..j).rev() {
            writeln!(s, "cp(pi/{}) q[{k}],q[{j}];", 1u64 << (j - k)).unwrap();
        }
    }
    for q in 0..n / 2 {
        writeln!(s, "swap q[{q}],q[{}];", n - 1 - q).unwrap();
    }
    s
}

/// A GHZ state on `n` qubits.
pub fn ghz(n: usize) -> String {
    let mut s = format!("{HEADER}qreg q[{n}];\nh q[0];\n");
    for q in 1..n {
        writeln!(s, "cx q[{}],q[{q}];", q - 1).unwrap();
    }
    s
}
