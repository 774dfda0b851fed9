//! What the CLI's integration tests share: the `cxltier` runner ([`cxltier`], [`json_ok`],
//! [`stdout_ok`]), assertions on how a run ended ([`assert_ok`], [`assert_refused`], [`fails`]),
//! the repository's recorded sysfs trees and JSON schemas ([`topo_fixture`], [`sysfs_copy`],
//! [`assert_conforms`]), a store log with a value to damage ([`write_marked_log`], [`damage`]),
//! and a launcher under which `mbind` is not permitted ([`build_no_mbind`]).

// Each test binary uses the part it needs.
#![allow(dead_code)]

use serde_json::Value;
use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The test binary's own build of `cxltier`.
pub const BIN: &str = env!("CARGO_BIN_EXE_cxltier");

/// `cxltier ARGS`, run to its end.
pub fn cxltier(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run cxltier")
}

/// A run's stdout, as text.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A run's stderr, as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts that the run `what` succeeded (failing with its stderr) and printed UTF-8; its stdout.
pub fn assert_ok(what: impl Debug, out: &Output) -> String {
    assert!(out.status.success(), "{what:?}: {}", stderr(out));
    String::from_utf8(out.stdout.clone())
        .unwrap_or_else(|e| panic!("{what:?}: stdout is not UTF-8: {e}"))
}

/// `cxltier ARGS`, which must succeed: its stdout.
pub fn stdout_ok(args: &[&str]) -> String {
    assert_ok(args, &cxltier(args))
}

/// The one JSON document a successful run `what` printed on stdout.
pub fn json_of(what: impl Debug, out: &Output) -> Value {
    assert_ok(&what, out);
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{what:?}: not one JSON document ({e}): {}", stdout(out)))
}

/// `cxltier ARGS`, which must succeed and print one JSON document: the document.
pub fn json_ok(args: &[&str]) -> Value {
    json_of(args, &cxltier(args))
}

/// Asserts that the run `what` ended with exit `code` and that its stderr holds every one of
/// `needles`; its stderr.
pub fn assert_refused(what: impl Debug, out: &Output, code: i32, needles: &[&str]) -> String {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(code), "{what:?}: {err}");
    for needle in needles {
        assert!(err.contains(needle), "{what:?}: want {needle:?} in {err}");
    }
    err
}

/// `cxltier ARGS`, which must end with exit `code` and a message containing `needle`: its stderr.
pub fn fails(args: &[&str], code: i32, needle: &str) -> String {
    assert_refused(args, &cxltier(args), code, &[needle])
}

/// The sum of the object `v`'s values (counts or bytes per node, counts per outcome).
pub fn sum_values(v: &Value) -> u64 {
    v.as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .values()
        .map(|n| n.as_u64().unwrap())
        .sum()
}

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The recorded sysfs tree `name` of cxltier-topo's tests.
pub fn topo_fixture(name: &str) -> PathBuf {
    repo()
        .join("crates/cxltier-topo/tests/fixtures")
        .join(name)
        .canonicalize()
        .unwrap()
}

/// A copy of the recorded tree `fixture`'s `sys` in a scratch directory (removed on drop), with
/// `files` (paths relative to the directory, and their text) written over it.
pub fn sysfs_copy(fixture: &str, files: &[(&str, &str)]) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let status = Command::new("cp")
        .arg("-a")
        .arg(topo_fixture(fixture).join("sys"))
        .arg(tmp.path())
        .status()
        .unwrap();
    assert!(status.success());
    for (rel, text) in files {
        let p = tmp.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    tmp
}

/// The schema `docs/json/NAME`.
pub fn schema(name: &str) -> Value {
    let path = repo().join("docs/json").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The ways `doc` breaks the schema `name`, one line each (empty when it conforms).
pub fn violations(name: &str, doc: &Value) -> Vec<String> {
    let validator = jsonschema::validator_for(&schema(name))
        .unwrap_or_else(|e| panic!("docs/json/{name} is not a usable schema: {e}"));
    validator
        .iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

/// Asserts that `doc` conforms to the schema `docs/json/NAME`.
pub fn assert_conforms(name: &str, doc: &Value) {
    let errors = violations(name, doc);
    assert!(
        errors.is_empty(),
        "output does not conform to docs/json/{name}:\n  {}\n{doc:#}",
        errors.join("\n  ")
    );
}

/// The value [`write_marked_log`] marks, which [`damage`] finds.
const MARK: &[u8] = b"MARKED-VALUE-0123456789";

/// A store log at `path` of `keys` keys of database 0 (as the server keeps them), the one at
/// index `marked` holding a marked value.
pub fn write_marked_log(path: &Path, keys: u32, marked: u32) {
    use cxltier_store::{Durability, Kind, SsdSpec, StoreBuilder};
    let mut s = StoreBuilder::new()
        .dram(16 << 20)
        .ssd(SsdSpec {
            path: path.to_path_buf(),
            capacity: Some(16 << 20),
        })
        .durability(Durability::EverySec)
        .build()
        .unwrap();
    for i in 0..keys {
        let v = if i == marked {
            MARK.to_vec()
        } else {
            vec![i as u8; 500]
        };
        let key = cxltier_store::db_key(0, format!("k{i}").as_bytes());
        s.put(&key, Kind::String, &v, None).unwrap();
    }
    s.close().unwrap();
}

/// Flips the first 16 bytes of the marked value in the log at `path`.
pub fn damage(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    let at = bytes.windows(12).position(|w| w == &MARK[..12]).unwrap();
    for b in &mut bytes[at..at + 16] {
        *b ^= 0xff;
    }
    std::fs::write(path, &bytes).unwrap();
}

/// A launcher that makes `mbind` fail with EPERM (a seccomp filter, as a restrictive container
/// runtime installs), then runs its arguments: the missing privilege, whoever runs the test.
const NO_MBIND_C: &str = r#"
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv) {
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mbind, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = { sizeof filter / sizeof filter[0], filter };
    if (argc < 2) return 125;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
        perror("seccomp");
        return 125;
    }
    execv(argv[1], argv + 1);
    perror("execv");
    return 126;
}
"#;

/// The launcher under which `mbind` fails with EPERM, built in `dir`; `None` (and a note on
/// stderr) where there is no C compiler. It exits 125 where seccomp filters are not available.
pub fn build_no_mbind(dir: &Path) -> Option<PathBuf> {
    let src = dir.join("no-mbind.c");
    let bin = dir.join("no-mbind");
    std::fs::write(&src, NO_MBIND_C).unwrap();
    let built = Command::new("cc")
        .arg("-O1")
        .arg("-o")
        .arg(&bin)
        .arg(&src)
        .status()
        .is_ok_and(|s| s.success());
    if !built {
        eprintln!("skipped: no C compiler to build the seccomp launcher");
    }
    built.then_some(bin)
}

/// `cxltier ARGS` under the launcher `no_mbind`; `None` (and a note on stderr) where seccomp
/// filters are not available.
pub fn without_mbind(no_mbind: &Path, args: &[&str]) -> Option<Output> {
    let out = Command::new(no_mbind).arg(BIN).args(args).output().unwrap();
    if out.status.code() == Some(125) {
        eprintln!(
            "skipped: seccomp filters are not available here: {}",
            stderr(&out)
        );
        return None;
    }
    Some(out)
}
