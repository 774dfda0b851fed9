//! `cxltier ras` end to end over sysfs recorded in the lab (the live paths, tracefs and injection,
//! are exercised in the lab suite: lab/checks/ras.sh).

mod util;
use util::{assert_refused, cxltier, json_ok, repo, stdout_ok};

fn lab_cxl() -> String {
    repo()
        .join("crates/cxltier-ras/tests/fixtures/lab-cxl")
        .canonicalize()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

#[test]
fn inventory_json_from_the_recorded_lab() {
    let v = json_ok(&["ras", "--sysfs-root", &lab_cxl(), "--json"]);
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
    let text = stdout_ok(&["ras", "--sysfs-root", &lab_cxl()]);
    assert!(
        text.contains("0xc0de0000") && text.contains("region0"),
        "{text}"
    );
    assert!(text.contains("not read"), "{text}");
}

#[test]
fn bad_input_exits_2_naming_the_problem() {
    let lab = lab_cxl();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_str().unwrap();
    // A recorded tree without CXL devices is bad input when named explicitly.
    let hmat = util::topo_fixture("lab-hmat");
    for (args, needles) in [
        (
            &["ras", "--sysfs-root", &lab, "--memdev", "mem7"][..],
            &["mem7", "mem0, mem1"][..],
        ),
        (&["ras", "--memdev", "banana"], &[]),
        (&["ras", "--watch", "--count", "0"], &["--count"]),
        (
            &["ras", "--watch", "--quarantine", "--quarantine-file", dir],
            &["is a directory"],
        ),
        (
            &["tierd", "--pid", "1", "--quarantine-file", dir],
            &["is a directory"],
        ),
        (
            &["ras", "--sysfs-root", hmat.to_str().unwrap()],
            &["no CXL memory devices"],
        ),
    ] {
        assert_refused(args, &cxltier(args), 2, needles);
    }
}
