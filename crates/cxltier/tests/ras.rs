//! `cxltier ras` end to end over sysfs recorded in the lab (the live paths, tracefs and injection,
//! are exercised in the lab suite: lab/checks/ras.sh).

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../")
        .join(name)
        .canonicalize()
        .unwrap()
}

fn cxltier(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cxltier"))
        .args(args)
        .output()
        .expect("run cxltier")
}

fn lab_cxl() -> String {
    fixture("cxltier-ras/tests/fixtures/lab-cxl")
        .to_string_lossy()
        .into_owned()
}

#[test]
fn inventory_json_from_the_recorded_lab() {
    let out = cxltier(&["ras", "--sysfs-root", &lab_cxl(), "--json"]);
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["poison_list_read"], false);
    let devices = v["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2);
    let m0 = &devices[0];
    assert_eq!(m0["memdev"], "mem0");
    // A 64-bit identifier: a decimal string (docs/json.md).
    assert_eq!(m0["serial"], 0xc0de_0000u64.to_string());
    assert_eq!(m0["region"], "region0");
    assert_eq!(m0["node"], 1);
    assert_eq!(m0["memory_tier"], 22);
    assert_eq!(m0["node_kind"], "cxl");
    assert_eq!(m0["health"]["poison_list_supported"], true);
    assert!(m0["poison"].is_null(), "not read from a recorded tree");
}

#[test]
fn table_for_people() {
    let out = cxltier(&["ras", "--sysfs-root", &lab_cxl()]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("0xc0de0000") && text.contains("region0"),
        "{text}"
    );
    assert!(text.contains("not read"), "{text}");
}

#[test]
fn bad_input_exits_2_naming_the_problem() {
    let out = cxltier(&["ras", "--sysfs-root", &lab_cxl(), "--memdev", "mem7"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("mem7") && err.contains("mem0, mem1"), "{err}");

    let out = cxltier(&["ras", "--memdev", "banana"]);
    assert_eq!(out.status.code(), Some(2));

    let out = cxltier(&["ras", "--watch", "--count", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--count"));

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let out = cxltier(&[
        "ras",
        "--watch",
        "--quarantine",
        "--quarantine-file",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is a directory"));
    let out = cxltier(&[
        "tierd",
        "--pid",
        "1",
        "--quarantine-file",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is a directory"));

    // A recorded tree without CXL devices is bad input when named explicitly.
    let hmat = fixture("cxltier-topo/tests/fixtures/lab-hmat");
    let out = cxltier(&["ras", "--sysfs-root", hmat.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no CXL memory devices"));
}
