//! What the tests against Qiskit and Aer share: the repository, the Python environment with
//! Qiskit and Aer (`scripts/qsim-peers`), scratch directories where O_DIRECT works.

// Each test binary uses the part it needs.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

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
