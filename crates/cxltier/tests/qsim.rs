//! `cxltier qsim` end to end: JSON shape, in memory against out of core, and bad input.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_cxltier");

fn cxltier(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run cxltier")
}

fn scratch(name: &str) -> PathBuf {
    // Under target/ on the root file system, where O_DIRECT works (not tmpfs).
    let d = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target")
        .join(format!("cli-qsim-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_string_lossy().into_owned()
}

fn ghz(n: usize) -> String {
    let mut s =
        format!("OPENQASM 2.0;\ninclude \"qelib1.inc\";\nqreg q[{n}];\ncreg c[{n}];\nh q[0];\n");
    for q in 1..n {
        s += &format!("cx q[{}],q[{q}];\n", q - 1);
    }
    s += "rz(0.3) q[0];\nmeasure q -> c;\n";
    s
}

fn json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

#[test]
fn json_amplitudes_counts_and_out_of_core_agree() {
    let dir = scratch("ok");
    let n = 16;
    let file = write(&dir, "ghz.qasm", &ghz(n));
    let last = ((1u64 << n) - 1).to_string();
    let mem = json(&cxltier(&[
        "qsim",
        &file,
        "--amplitudes",
        &format!("0,1,{last}"),
        "--shots",
        "200",
        "--json",
    ]));
    assert_eq!(mem["mode"], "memory");
    assert_eq!(mem["qubits"], 16);
    let a0 = mem["amplitudes"]["0"].as_array().unwrap();
    // rz(0.3) on |0> multiplies by e^{-0.15i}, on |1> by e^{+0.15i}.
    let r = std::f64::consts::FRAC_1_SQRT_2;
    assert!((a0[0].as_f64().unwrap() - r * 0.15f64.cos()).abs() < 1e-12);
    assert!((a0[1].as_f64().unwrap() + r * 0.15f64.sin()).abs() < 1e-12);
    assert_eq!(mem["amplitudes"]["1"], serde_json::json!([0.0, 0.0]));
    assert!((mem["probabilities"][&last].as_f64().unwrap() - 0.5).abs() < 1e-12);
    assert!((mem["norm"].as_f64().unwrap() - 1.0).abs() < 1e-12);
    let counts = mem["counts"].as_object().unwrap();
    let total: u64 = counts.values().map(|v| v.as_u64().unwrap()).sum();
    assert_eq!(total, 200);
    assert!(
        counts
            .keys()
            .all(|k| k == &"0".repeat(n) || k == &"1".repeat(n)),
        "{counts:?}"
    );

    // The same circuit with an eighth of the state's memory, spilled to a file.
    let ssd = dir.to_string_lossy().into_owned();
    let ooc = json(&cxltier(&[
        "qsim",
        &file,
        "--memory-limit",
        "128K",
        "--ssd",
        &ssd,
        "--amplitudes",
        &format!("0,1,{last}"),
        "--shots",
        "200",
        "--json",
    ]));
    assert_eq!(ooc["mode"], "out_of_core");
    assert!(ooc["passes"].as_u64().unwrap() >= 1);
    assert!(ooc["placement"]["spilled_chunks"].as_u64().unwrap() > 0);
    let reports = ooc["pass_reports"].as_array().unwrap();
    assert_eq!(reports.len() as u64, ooc["passes"].as_u64().unwrap());
    for p in reports {
        for field in [
            "io_wait_seconds",
            "compute_seconds",
            "bytes_read",
            "bytes_written",
        ] {
            assert!(p[field].is_number(), "{field}");
        }
    }
    for idx in ["0", "1", last.as_str()] {
        for part in 0..2 {
            let x = mem["amplitudes"][idx][part].as_f64().unwrap();
            let y = ooc["amplitudes"][idx][part].as_f64().unwrap();
            assert!((x - y).abs() < 1e-12, "{idx}: {x} vs {y}");
        }
    }
    // f32 agrees to single precision.
    let f32 = json(&cxltier(&[
        "qsim",
        &file,
        "--precision",
        "f32",
        "--amplitudes",
        "0",
        "--json",
    ]));
    assert_eq!(f32["state_bytes"], 8u64 << n);
    assert!((f32["amplitudes"]["0"][0].as_f64().unwrap() - a0[0].as_f64().unwrap()).abs() < 1e-6);
    // Human output names the mode and the passes.
    let out = cxltier(&["qsim", &file, "--memory-limit", "128K", "--ssd", &ssd]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("out of core") && text.contains("passes:"),
        "{text}"
    );
    assert!(std::fs::read_dir(&dir).unwrap().all(|e| !e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .ends_with(".spill")));
    std::fs::remove_dir_all(&dir).unwrap();
}

fn bad(args: &[&str], code: i32, needle: &str) {
    let out = cxltier(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    assert!(err.contains(needle), "{args:?}: {err:?} lacks {needle:?}");
}

#[test]
fn counts_are_keyed_by_the_classical_register() {
    let dir = scratch("creg");
    // q[1] = 1 measured into c[4], q[0] = 0 into c[0]: every shot reads c = 10000.
    let file = write(
        &dir,
        "m.qasm",
        "OPENQASM 2.0;\ninclude \"qelib1.inc\";\nqreg q[3];\ncreg c[5];\nx q[1];\nmeasure q[1] -> c[4];\nmeasure q[0] -> c[0];\n",
    );
    let out = json(&cxltier(&["qsim", &file, "--shots", "10", "--json"]));
    assert_eq!(out["counts"], serde_json::json!({"10000": 10}));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_input_names_the_problem() {
    let dir = scratch("bad");
    let unknown = write(
        &dir,
        "u.qasm",
        "OPENQASM 2.0;\ninclude \"qelib1.inc\";\nqreg q[2];\nh q[0];\nfoo q[1];\n",
    );
    bad(&["qsim", &unknown], 2, "u.qasm:5: unsupported gate \"foo\"");
    let malformed = write(
        &dir,
        "m.qasm",
        "OPENQASM 2.0;\nqreg q[2];\ncx q[0] q[1];\nh q[0];\n",
    );
    bad(&["qsim", &malformed], 2, "m.qasm:3: expected \";\"");
    let ok = write(&dir, "g.qasm", &ghz(14));
    let ssd = dir.to_string_lossy().into_owned();
    bad(&["qsim", &ok, "--memory-limit", "64K"], 2, "give --ssd DIR");
    // 14 qubits = 256 KiB; with 64 KiB of memory about 200 KiB must go to the SSD.
    bad(
        &[
            "qsim",
            &ok,
            "--memory-limit",
            "64K",
            "--ssd",
            &format!("{ssd}:100K"),
        ],
        2,
        "but only 102400 are available",
    );
    bad(
        &["qsim", &ok, "--memory-limit", "4K", "--ssd", &ssd],
        2,
        "too small to run this circuit out of core",
    );
    bad(&["qsim", &ok, "--precision", "f16"], 2, "give f64 or f32");
    bad(&["qsim", &ok, "--amplitudes", "16384"], 2, "out of range");
    bad(&["qsim", &ok, "--amplitudes", "x"], 2, "not an index");
    bad(&["qsim", &ok, "--fuse", "9"], 2, "--fuse 9");
    bad(
        &["qsim", &dir.join("missing.qasm").to_string_lossy()],
        2,
        "cannot read circuit",
    );
    let file = write(&dir, "f.txt", "");
    bad(
        &["qsim", &ok, "--memory-limit", "64K", "--ssd", &file],
        2,
        "is not a directory",
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_failed_write_stops_the_run_with_an_error() {
    let dir = scratch("fail");
    // 22 qubits (64 MiB) under 1 MiB: many passes, so the run is still going when the spill
    // file is made immutable, after which every write to it fails.
    let mut s = String::from("OPENQASM 2.0;\ninclude \"qelib1.inc\";\nqreg q[22];\n");
    for layer in 0..30 {
        for q in 0..22 {
            s += &format!("rx({}) q[{q}];\n", 0.1 * (layer + 1) as f64);
        }
        for q in 0..21 {
            s += &format!("cx q[{q}],q[{}];\n", (q + 1 + layer % 21) % 22);
        }
    }
    let file = write(&dir, "long.qasm", &s);
    let ssd = dir.join("ssd");
    std::fs::create_dir_all(&ssd).unwrap();
    let mut child = Command::new(BIN)
        .args([
            "qsim",
            &file,
            "--memory-limit",
            "1M",
            "--ssd",
            &ssd.to_string_lossy(),
            "--threads",
            "1",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the spill file exists at its full size (preallocated), then freeze it.
    let deadline = Instant::now() + Duration::from_secs(60);
    let spill = loop {
        let found = std::fs::read_dir(&ssd)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| {
                std::fs::metadata(p)
                    .map(|m| m.len() > 60 << 20)
                    .unwrap_or(false)
            });
        if let Some(p) = found {
            break p;
        }
        assert!(Instant::now() < deadline, "no spill file appeared");
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            panic!(
                "the run ended ({status}) before its spill file was seen: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let st = Command::new("chattr")
        .arg("+i")
        .arg(&spill)
        .status()
        .unwrap();
    assert!(st.success(), "chattr +i needs root and ext4/xfs");
    let out = child.wait_with_output().unwrap();
    let _ = Command::new("chattr").arg("-i").arg(&spill).status();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("write of chunk") && err.contains("the pass stopped"),
        "{err}"
    );
    // (The run tried to remove its spill file, which the immutable flag forbade; it goes with
    // the directory.)
    std::fs::remove_dir_all(&dir).unwrap();
}
