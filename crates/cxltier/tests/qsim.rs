//! `cxltier qsim` end to end: JSON shape, in memory against out of core, and bad input.

mod util;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use util::{assert_refused, cxltier, fails, repo, BIN};

/// A scratch directory of one test, removed when the test passes.
struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // A failed test leaves its files to look at.
        if !std::thread::panicking() {
            std::fs::remove_dir_all(&self.0).unwrap();
        }
    }
}

fn scratch(name: &str) -> Scratch {
    // Under target/ on the root file system, where O_DIRECT works (not tmpfs).
    let d = repo()
        .join("target")
        .join(format!("cli-qsim-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    Scratch(d)
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
    util::json_of("cxltier qsim", out)
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
}

fn qiskit_python() -> PathBuf {
    let py = repo().join("bench/cache/venv/bin/python");
    assert!(
        py.exists(),
        "Qiskit Aer is not installed: run scripts/qsim-peers (it installs qiskit and qiskit-aer into bench/cache/venv)"
    );
    py
}

#[test]
fn counts_with_several_registers_are_keyed_as_qiskits_get_counts() {
    let dir = scratch("cregs");
    // Outcomes are certain, so the counts are exact: a = 10, b unmeasured (0), c = 101. Qiskit
    // keys them "c b a": the last declared register first, separated by spaces.
    let file = write(
        &dir,
        "regs.qasm",
        "OPENQASM 2.0;\ninclude \"qelib1.inc\";\nqreg q[4];\ncreg a[2];\ncreg b[1];\ncreg c[3];\n\
         x q[0];\nx q[3];\ncx q[0],q[2];\nmeasure q[0] -> a[1];\nmeasure q[1] -> a[0];\n\
         measure q[2] -> c[0];\nmeasure q[3] -> c[2];\n",
    );
    let ours = json(&cxltier(&["qsim", &file, "--shots", "64", "--json"]));
    let aer = Command::new(qiskit_python())
        .args([
            "-c",
            "import json, sys\n\
             from qiskit import QuantumCircuit\n\
             from qiskit_aer import AerSimulator\n\
             qc = QuantumCircuit.from_qasm_file(sys.argv[1])\n\
             print(json.dumps(AerSimulator().run(qc, shots=64, seed_simulator=1).result().get_counts()))",
            &file,
        ])
        .output()
        .unwrap();
    let aer: Value = serde_json::from_str(&util::assert_ok("Aer", &aer)).unwrap();
    assert_eq!(aer, serde_json::json!({"101 0 10": 64}), "Aer's own keys");
    assert_eq!(ours["counts"], aer);
    // The table shows the same keys.
    let text = util::stdout(&cxltier(&["qsim", &file, "--shots", "64"]));
    assert!(text.contains("101 0 10"), "{text}");
}

#[test]
fn a_missing_header_is_read_with_a_warning_on_stderr() {
    let dir = scratch("header");
    let file = write(
        &dir,
        "nohead.qasm",
        "include \"qelib1.inc\";\nqreg q[2];\ncreg c[2];\nx q[1];\nmeasure q -> c;\n",
    );
    let out = cxltier(&["qsim", &file, "--shots", "8", "--json"]);
    // stdout is still one JSON document; the warning, naming the fix, is on stderr.
    let doc = json(&out);
    assert_eq!(doc["counts"], serde_json::json!({"10": 8}));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warning")
            && err.contains("nohead.qasm")
            && err.contains("add `OPENQASM 2.0;`"),
        "{err}"
    );
}

#[test]
fn bad_input_names_the_problem() {
    let dir = scratch("bad");
    let unknown = write(
        &dir,
        "u.qasm",
        "OPENQASM 2.0;\ninclude \"qelib1.inc\";\nqreg q[2];\nh q[0];\nfoo q[1];\n",
    );
    let malformed = write(
        &dir,
        "m.qasm",
        "OPENQASM 2.0;\nqreg q[2];\ncx q[0] q[1];\nh q[0];\n",
    );
    let ok = write(&dir, "g.qasm", &ghz(14));
    let ssd = dir.to_string_lossy().into_owned();
    let ssd_100k = format!("{ssd}:100K");
    let missing = dir.join("missing.qasm").to_string_lossy().into_owned();
    let file = write(&dir, "f.txt", "");
    let (unknown, malformed, ok, ssd, missing, file) = (
        unknown.as_str(),
        malformed.as_str(),
        ok.as_str(),
        ssd.as_str(),
        missing.as_str(),
        file.as_str(),
    );
    for (args, needle) in [
        (&[unknown][..], "u.qasm:5: unsupported gate \"foo\""),
        (&[malformed], "m.qasm:3: expected \";\""),
        (&[ok, "--memory-limit", "64K"], "give --ssd DIR"),
        // 14 qubits = 256 KiB; with 64 KiB of memory about 200 KiB must go to the SSD.
        (
            &[ok, "--memory-limit", "64K", "--ssd", &ssd_100k],
            "but only 102400 are available",
        ),
        (
            &[ok, "--memory-limit", "4K", "--ssd", ssd],
            "too small to run this circuit out of core",
        ),
        (&[ok, "--precision", "f16"], "give f64 or f32"),
        (&[ok, "--amplitudes", "16384"], "out of range"),
        (&[ok, "--amplitudes", "x"], "not an index"),
        (&[ok, "--fuse", "9"], "--fuse 9"),
        (&[missing], "cannot read circuit"),
        (
            &[ok, "--memory-limit", "64K", "--ssd", file],
            "is not a directory",
        ),
    ] {
        fails(&[&["qsim"][..], args].concat(), 2, needle);
    }
}

#[test]
fn a_failed_write_stops_the_run_with_an_error() {
    let dir = scratch("fail");
    // 22 qubits (64 MiB) under 1 MiB: many passes, so the run is still going when the spill
    // file is made immutable, after which every write to it fails.
    let file = write(&dir, "long.qasm", &long_circuit());
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
    // Wait until the spill file is open at its full size (preallocated; it has no name, so it
    // is found among the child's descriptors), then freeze it through a descriptor of our own.
    let spill = wait_for_spill(&mut child, &ssd, 60 << 20);
    let immutable = rustix::fs::IFlags::IMMUTABLE;
    let flags = rustix::fs::ioctl_getflags(&spill).unwrap();
    rustix::fs::ioctl_setflags(&spill, flags | immutable)
        .expect("FS_IOC_SETFLAGS needs root and ext4/xfs");
    let out = child.wait_with_output().unwrap();
    rustix::fs::ioctl_setflags(&spill, flags).unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("write of chunk") && err.contains("the pass stopped"),
        "{err}"
    );
    drop(spill);
    assert_eq!(std::fs::read_dir(&ssd).unwrap().count(), 0);
}

/// The spill file `child` has open in `ssd` once it is at least `len` bytes (it is unlinked as
/// soon as it is open, so it is found among the child's descriptors), opened again through
/// `/proc`.
fn wait_for_spill(child: &mut std::process::Child, ssd: &Path, len: u64) -> std::fs::File {
    let fds = PathBuf::from(format!("/proc/{}/fd", child.id()));
    let ssd = ssd.canonicalize().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let found = std::fs::read_dir(&fds).into_iter().flatten().find_map(|e| {
            let fd = e.ok()?.path();
            let target = std::fs::read_link(&fd).ok()?;
            if !target.starts_with(&ssd) {
                return None;
            }
            let file = std::fs::File::open(&fd).ok()?;
            (file.metadata().ok()?.len() >= len).then_some(file)
        });
        if let Some(f) = found {
            return f;
        }
        assert!(Instant::now() < deadline, "no spill file was opened");
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the run ended ({status}) before its spill file was seen");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A circuit on 22 qubits (64 MiB at f64) long enough to run for seconds under a 1 MiB limit.
fn long_circuit() -> String {
    let mut s = String::from("OPENQASM 2.0;\ninclude \"qelib1.inc\";\nqreg q[22];\n");
    for layer in 0..30 {
        for q in 0..22 {
            s += &format!("rx({}) q[{q}];\n", 0.1 * (layer + 1) as f64);
        }
        for q in 0..21 {
            s += &format!("cx q[{q}],q[{}];\n", (q + 1 + layer % 21) % 22);
        }
    }
    s
}

#[test]
fn sigint_and_sigterm_leave_no_spill_file_behind() {
    use std::os::unix::process::ExitStatusExt;
    let dir = scratch("signal");
    let file = write(&dir, "long.qasm", &long_circuit());
    for (name, number) in [("TERM", 15), ("INT", 2)] {
        let ssd = dir.join(format!("ssd-{name}"));
        std::fs::create_dir_all(&ssd).unwrap();
        // A test run started in the background of a script inherits SIGINT ignored (POSIX
        // shells ignore it in asynchronous commands), and so would the run: coreutils' env puts
        // the default action back before it execs, as a terminal's foreground job has it.
        let mut child = Command::new("env")
            .arg("--default-signal=INT,TERM")
            .arg(BIN)
            .args(["qsim", &file, "--memory-limit", "1M", "--threads", "1"])
            .arg("--ssd")
            .arg(&ssd)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // The run is under way: its 64 MiB spill file is open and preallocated.
        let spill = wait_for_spill(&mut child, &ssd, 60 << 20);
        drop(spill);
        let kill = Command::new("kill")
            .args([format!("-{name}"), child.id().to_string()])
            .status()
            .unwrap();
        assert!(kill.success());
        let status = child.wait().unwrap();
        // Ended by the signal, as shells expect (they show 128 + its number: 143, 130).
        assert_eq!(status.signal(), Some(number), "SIG{name}: {status}");
        let left: Vec<_> = std::fs::read_dir(&ssd).unwrap().collect();
        assert!(left.is_empty(), "SIG{name} left {left:?}");
    }
}

#[test]
fn hostile_circuits_and_states_beyond_memory_are_refused_with_exit_2() {
    let dir = scratch("hostile");
    let head = "OPENQASM 2.0;\ninclude \"qelib1.inc\";\n";
    let cases = [
        ("qreg q[1e300];\n", ":3: ", "at most 63"),
        // The size as it was written, not as it saturated a 64-bit integer.
        ("qreg q[1e300];\n", ":3: ", "register \"q\" of 1e300 qubits"),
        (
            "qreg q[99999999999999999999999];\n",
            ":3: ",
            "of 99999999999999999999999 qubits",
        ),
        ("qreg q[1000000000000];\n", ":3: ", "at most 63"),
        ("qreg q[1];\nrz(1/0) q[0];\n", ":4: ", "division by zero"),
        (
            "qreg q[1];\nrz(ln(0)) q[0];\n",
            ":4: ",
            "not a finite number",
        ),
    ];
    for (i, (body, line, needle)) in cases.iter().enumerate() {
        let f = write(&dir, &format!("h{i}.qasm"), &format!("{head}{body}"));
        let args = ["qsim", &f];
        assert_refused(
            args,
            &cxltier(&args),
            2,
            &[&format!("h{i}.qasm{line}"), needle],
        );
    }
    let deep = format!(
        "{head}qreg q[1];\nrz({}1{}) q[0];\n",
        "(".repeat(20_000),
        ")".repeat(20_000)
    );
    let f = write(&dir, "deep.qasm", &deep);
    fails(&["qsim", &f], 2, "nested more than 256");
    // 40 qubits: 16 TiB at f64, beyond this machine's memory; refused before allocating, with
    // the ways out.
    let big = write(&dir, "big.qasm", &format!("{head}qreg q[40];\nh q[0];\n"));
    let args = ["qsim", &big];
    assert_refused(
        args,
        &cxltier(&args),
        2,
        &[
            "needs 17592186044416 bytes at f64",
            "--memory-limit SIZE",
            "--precision f32",
        ],
    );
    // A billion billion shots: 16 bytes each for sampling, refused before the run.
    let one = write(&dir, "one.qasm", &format!("{head}qreg q[1];\nh q[0];\n"));
    fails(
        &["qsim", &one, "--shots", "1000000000000000000"],
        2,
        "ask for fewer shots",
    );
    let ssd = dir.join("ssd");
    std::fs::create_dir_all(&ssd).unwrap();
    fails(
        &[
            "qsim",
            &big,
            "--memory-limit",
            "15T",
            "--ssd",
            &ssd.to_string_lossy(),
        ],
        2,
        "--memory-limit 16492674416640 is more than",
    );
}

#[test]
fn a_dynamic_circuit_needs_shots_and_reports_its_method() {
    let dir = scratch("dynamic");
    // q0 reads 1 and q1 flips under the condition; q0 is reset: every shot reads d = 010, c = 1.
    let file = write(
        &dir,
        "d.qasm",
        "OPENQASM 2.0;\ninclude \"qelib1.inc\";\nqreg q[3];\ncreg c[1];\ncreg d[3];\nx q[0];\n\
         measure q[0] -> c[0];\nif(c==1) x q[1];\nreset q[0];\nmeasure q -> d;\n",
    );
    fails(
        &["qsim", &file],
        2,
        "d.qasm:8: this line makes the circuit dynamic",
    );
    fails(&["qsim", &file], 2, "give --shots N");
    fails(
        &["qsim", &file, "--shots", "5", "--amplitudes", "0"],
        2,
        "drop --amplitudes",
    );
    fails(
        &["qsim", &file, "--shots", "5", "--dynamic-method", "tree"],
        2,
        "--dynamic-method tree: \"tree\" is not a method: give auto, branches or trajectories",
    );
    for method in ["branches", "trajectories"] {
        let out = json(&cxltier(&[
            "qsim",
            &file,
            "--shots",
            "20",
            "--dynamic-method",
            method,
            "--json",
        ]));
        assert_eq!(out["counts"], serde_json::json!({"010 1": 20}));
        assert_eq!(out["dynamic"]["method"], method);
        assert_eq!(out["dynamic"]["shots"], 20);
    }
    let out = json(&cxltier(&["qsim", &file, "--shots", "20", "--json"]));
    assert_eq!(out["dynamic"]["method"], "branches");
    assert_eq!(out["dynamic"]["branches"], 1);
}

/// `--bench-kernels` reports the machine's FMA rate and streaming bandwidth and, for every gate
/// width from 1 to 6 qubits on two layouts, a time per amplitude set against the larger of the
/// two bounds; a run says the widest gate the measured costs fused to (`--fuse-rule cost`, with
/// `--fuse auto` and under a narrower cap), `--fuse-rule greedy` fuses to the width asked, and
/// the default (`--fuse-rule auto`) fuses a short run greedily to 2 qubits and says so; bad
/// sizes, widths and rules are refused with the range.
#[test]
fn kernel_benchmark_and_measured_fusion_width() {
    let v = json(&cxltier(&[
        "qsim",
        "--bench-kernels",
        "--bench-qubits",
        "14",
        "--precision",
        "f32",
        "--threads",
        "1",
        "--json",
    ]));
    assert!(v["fma_per_second"].as_f64().unwrap() > 1e8, "{v}");
    assert!(v["stream_bytes_per_second"].as_f64().unwrap() > 1e7, "{v}");
    let kernels = v["kernels"].as_array().unwrap();
    assert_eq!(kernels.len(), 12, "{v}");
    for (i, k) in kernels.iter().enumerate() {
        assert_eq!(k["k"].as_u64().unwrap() as usize, i / 2 + 1, "{k}");
        let ns = k["ns_per_amplitude"].as_f64().unwrap();
        let fma = k["fma_bound_ns"].as_f64().unwrap();
        let mem = k["memory_bound_ns"].as_f64().unwrap();
        assert!(ns > 0.0 && fma > 0.0 && mem > 0.0, "{k}");
        assert_eq!(k["bound_ns"].as_f64().unwrap(), fma.max(mem), "{k}");
    }
    // Twice the qubits, twice the arithmetic bound.
    let fma = |i: usize| kernels[i]["fma_bound_ns"].as_f64().unwrap();
    assert!((fma(2) / fma(0) - 2.0).abs() < 1e-9);
    fails(
        &["qsim", "--bench-kernels", "--bench-qubits", "40"],
        2,
        "give 10 to 34",
    );

    let dir = scratch("fusewidth");
    let file = write(&dir, "ghz.qasm", &ghz(12));
    for args in [&["--fuse", "auto"][..], &[]] {
        let v = json(&cxltier(
            &[&["qsim", &file, "--json", "--fuse-rule", "cost"][..], args].concat(),
        ));
        let width = v["fuse_width"].as_u64().unwrap();
        assert!((1..=5).contains(&width), "{args:?}: {v}");
        assert_eq!(v["fuse_rule"], "cost", "{args:?}: {v}");
    }
    let v = json(&cxltier(&[
        "qsim",
        &file,
        "--json",
        "--fuse",
        "2",
        "--fuse-rule",
        "cost",
    ]));
    assert!(v["fuse_width"].as_u64().unwrap() <= 2, "{v}");
    // 12 qubits, 12 gates: far below 2^31 gate-amplitudes, so the default does not time the
    // kernels and fuses greedily to 2 qubits (under --fuse auto or 5; to 1 under --fuse 1).
    for (args, width) in [
        (&[][..], 2),
        (&["--fuse", "5"][..], 2),
        (&["--fuse", "1"][..], 1),
    ] {
        let v = json(&cxltier(&[&["qsim", &file, "--json"][..], args].concat()));
        assert_eq!(v["fuse_rule"], "greedy", "{args:?}: {v}");
        assert_eq!(v["fuse_width"].as_u64().unwrap(), width, "{args:?}: {v}");
    }
    let text = String::from_utf8_lossy(&cxltier(&["qsim", &file]).stdout).into_owned();
    assert!(
        text.contains("after fusion up to 2 qubits, greedy rule"),
        "{text}"
    );
    let v = json(&cxltier(&[
        "qsim",
        &file,
        "--json",
        "--fuse",
        "3",
        "--fuse-rule",
        "greedy",
    ]));
    assert_eq!(v["fuse_width"].as_u64().unwrap(), 3, "{v}");
    fails(
        &["qsim", &file, "--fuse-rule", "fast"],
        2,
        "--fuse-rule fast: give auto (cost for long runs, greedy up to 2 qubits for short ones), \
         cost (merge where the wider gate is cheaper",
    );
    for wrong in ["0", "6", "wide"] {
        fails(
            &["qsim", &file, "--fuse", wrong],
            2,
            &format!("--fuse {wrong}: give 1 (no fusion) to 5 qubits, or auto"),
        );
    }
}

/// `--plan-cluster` prices a run over ranks without running it: the plan's figures, time
/// split by kind, and a refusal naming the fix for every malformed or missing field.
#[test]
fn the_cluster_model_prices_a_run_and_refuses_bad_specs() {
    let dir = scratch("plan-cluster");
    let mut qft = String::from("OPENQASM 2.0;\ninclude \"qelib1.inc\";\nqreg q[16];\n");
    for j in (0..16).rev() {
        qft += &format!("h q[{j}];\n");
        for k in (0..j).rev() {
            qft += &format!("cp(pi/{}) q[{k}],q[{j}];\n", 1u64 << (j - k));
        }
    }
    let file = write(&dir, "qft16.qasm", &qft);
    let spec = "ranks=8,nodes=2,cores=8,network=12.5G,latency=2us";
    let doc = json(&cxltier(&["qsim", &file, "--plan-cluster", spec, "--json"]));
    assert_eq!(doc["command"], "qsim --plan-cluster");
    assert_eq!(doc["ranks"], 8);
    assert_eq!(doc["part_bytes"], (1u64 << 13) * 16);
    assert_eq!(doc["mode"], "in_memory");
    assert_eq!(doc["threads_per_rank"], 2.0);
    let (planned, naive) = (
        doc["exchanges"].as_u64().unwrap(),
        doc["naive_exchanges"].as_u64().unwrap(),
    );
    assert!(planned >= 1 && planned < naive, "{planned} against {naive}");
    let total = doc["total_seconds"].as_f64().unwrap();
    let parts =
        doc["compute_seconds"].as_f64().unwrap() + doc["exchange_seconds"].as_f64().unwrap();
    assert!(total > 0.0 && (total - parts).abs() < 1e-12, "{doc}");
    // Out of core per rank: passes and NVMe bytes.
    let ooc = json(&cxltier(&[
        "qsim",
        &file,
        "--plan-cluster",
        &format!("{spec},memory=64K,ssd=2G"),
        "--json",
    ]));
    assert_eq!(ooc["mode"], "out_of_core");
    assert!(ooc["passes"].as_u64().unwrap() >= 1);
    assert!(ooc["io_bytes_per_rank"].as_u64().unwrap() > 0);
    // A part beyond its DRAM spills to CXL memory, streamed at the CXL bandwidth given. The
    // two plans come from two runs, each of which times this machine's kernels: the streaming
    // rates are given (`stream=`, and a CXL rate slow enough that its cost dwarfs any spread of
    // those timings on a loaded machine), so the comparison below cannot turn on them.
    let plain = json(&cxltier(&[
        "qsim",
        &file,
        "--plan-cluster",
        &format!("{spec},stream=10G"),
        "--json",
    ]));
    let tiered = json(&cxltier(&[
        "qsim",
        &file,
        "--plan-cluster",
        &format!("{spec},stream=10G,memory=64K,cxl=1M,cxl-stream=1M"),
        "--json",
    ]));
    assert_eq!(tiered["mode"], "in_memory");
    assert_eq!(tiered["dram_bytes_per_rank"], 64 << 10);
    assert_eq!(tiered["cxl_bytes_per_rank"], (128 << 10) - (64 << 10));
    // (Every gate here runs inside the exchanges, which stream the part: the whole run is
    // slower, not only its batches.)
    assert!(
        tiered["total_seconds"].as_f64() > plain["total_seconds"].as_f64(),
        "{tiered} against {plain}"
    );
    // The table for people.
    let out = cxltier(&["qsim", &file, "--plan-cluster", spec]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("exchanges") && text.contains("naive"),
        "{text}"
    );
    for (spec, needle) in [
        ("ranks=3,network=1G", "power of two"),
        ("ranks=8", "network=RATE"),
        ("nodes=2", "ranks=R"),
        ("ranks=8,nodes=3,network=1G", "dividing"),
        ("ranks=8,network=fast", "bytes per second"),
        ("ranks=8,network=1G,latency=soon", "a time such as"),
        ("ranks=8,network=1G,colour=red", "unknown key \"colour\""),
        ("ranks=8,network", "not key=value"),
        ("ranks=0,network=1G", "1 or more"),
        ("ranks=2,network=1G,memory=64K", "ssd=RATE"),
        ("ranks=2,network=1G,memory=64K,cxl=1M", "cxl-stream=RATE"),
        ("ranks=2,network=1G,cxl=1M", "memory=SIZE"),
    ] {
        fails(&["qsim", &file, "--plan-cluster", spec], 2, needle);
    }
    // A sweep: a row per rank count, and the curve as SVG.
    let svg = dir.join("sweep.svg");
    let out = cxltier(&[
        "qsim",
        &file,
        "--plan-cluster",
        "ranks=1..8,network=12.5G",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(table.lines().count(), 5, "a header and 4 rows: {table}");
    assert!(table.contains("speed-up"), "{table}");
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
    for (spec, needle) in [
        ("ranks=3..8,network=1G", "powers of two"),
        ("ranks=8..2,network=1G", "A at most B"),
        ("ranks=2..8,nodes=2,network=1G", "drop nodes="),
    ] {
        fails(&["qsim", &file, "--plan-cluster", spec], 2, needle);
    }
    fails(
        &[
            "qsim",
            &file,
            "--plan-cluster",
            "ranks=2,network=1G",
            "--plot",
            "x.svg",
        ],
        2,
        "--plot draws a sweep",
    );
    fails(
        &[
            "qsim",
            &file,
            "--plan-cluster",
            "ranks=2,network=1G",
            "--fuse-rule",
            "widest",
        ],
        2,
        "--fuse-rule widest: give auto",
    );
    let dynamic = write(
        &dir,
        "dyn.qasm",
        "OPENQASM 2.0;\ninclude \"qelib1.inc\";\nqreg q[2];\ncreg c[1];\nh q[0];\nmeasure q[0] -> c[0];\nif(c==1) x q[1];\n",
    );
    fails(
        &["qsim", &dynamic, "--plan-cluster", "ranks=2,network=1G"],
        2,
        "dynamic",
    );
    // Without MPI ranks, --bench-network says how to run it.
    fails(&["qsim", "--bench-network"], 2, "mpirun -np 2");
}

#[test]
fn the_gate_cap_is_an_option_and_limits_below_what_runs_are_refused() {
    let dir = scratch("cap");
    let head = "OPENQASM 2.0;\ninclude \"qelib1.inc\";\nqreg q[2];\n";
    let eleven = write(&dir, "e.qasm", &format!("{head}{}", "h q[0];\n".repeat(11)));
    fails(&["qsim", &eleven, "--max-gates", "10"], 2, "e.qasm:14: ");
    fails(
        &["qsim", &eleven, "--max-gates", "10"],
        2,
        "limit of 10 gates",
    );
    let out = cxltier(&["qsim", &eleven, "--max-gates", "11", "--json"]);
    assert_eq!(json(&out)["gates"], 11);
    for v in ["0", "x", "1.5", "18446744073709551616"] {
        fails(
            &["qsim", &eleven, "--max-gates", v],
            2,
            &format!("--max-gates {v}: give"),
        );
    }
    fails(&["qsim", &eleven, "--max-gates", "0"], 2, "at least 1");
    // Less memory than one chunk of the state's array (4 KiB) cannot hold anything.
    for v in ["1K", "4095"] {
        fails(
            &["qsim", &eleven, "--memory-limit", v],
            2,
            "--memory-limit ",
        );
        fails(
            &["qsim", &eleven, "--memory-limit", v],
            2,
            "at least 4096 bytes",
        );
    }
    let out = cxltier(&["qsim", &eleven, "--memory-limit", "4K", "--json"]);
    assert_eq!(json(&out)["mode"], "memory");
}

#[test]
fn a_circuit_far_past_the_gate_cap_is_refused_without_reading_it_all() {
    use std::io::Write as _;
    // Through a pipe, so that what the command read is what could be written before it closed
    // its end: a file is read as it is parsed, and refused soon after the cap, not held whole.
    let line = b"cx q[0],q[1];\n";
    let offered: usize = 32 << 20;
    let mut child = Command::new(BIN)
        .args(["qsim", "/dev/stdin", "--threads", "1"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run cxltier");
    let mut stdin = child.stdin.take().unwrap();
    let block: Vec<u8> = line.repeat(4096);
    let mut written = 0;
    let head = b"OPENQASM 2.0;\ninclude \"qelib1.inc\";\nqreg q[2];\n";
    stdin.write_all(head).unwrap();
    while written < offered {
        // A write the pipe took in part goes on where it stopped: every line whole.
        match stdin.write(&block[written % block.len()..]) {
            Ok(n) => written += n,
            // The command has closed the pipe: it stopped reading.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => break,
            Err(e) => panic!("writing the circuit: {e}"),
        }
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("/dev/stdin:1000004: "), "{err}");
    assert!(err.contains("limit of 1000000 gates"), "{err}");
    // The gates up to the cap, and the buffers of the pipe and the reader.
    let kept = 1_000_000 * line.len();
    assert!(
        written < kept + (2 << 20),
        "{written} bytes taken to keep {kept}"
    );
}
