//! Correctness against Qiskit Aer's statevector simulator: random, QFT, GHZ and Grover circuits,
//! run by this simulator in memory and out of core (spilled to a file with O_DIRECT), must give
//! Aer's amplitudes within 1e-10 at f64.
//!
//! Aer comes from PyPI into bench/cache/venv (`scripts/qsim-peers`, which `scripts/test` runs).

mod common;
use common::{complex_file, ghz, max_diff, qft, run_script, scratch, HEADER};
use std::fmt::Write as _;
use std::path::Path;

use cxltier_qsim::{parse, Options, Simulation};
use rand::{Rng, SeedableRng};

fn random_circuit(n: usize, gates: usize, seed: u64) -> String {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut s = format!("{HEADER}gate mix(a) x, y {{ rzz(a) x, y; ry(a/2) y; cx y, x; }}\nqreg q[{n}];\ncreg c[{n}];\n");
    let one = [
        "h", "x", "y", "z", "s", "sdg", "t", "tdg", "sx", "sxdg", "id",
    ];
    let one_p = ["rx", "ry", "rz", "p", "u1"];
    let two = ["cx", "cy", "cz", "ch", "swap", "csx"];
    let two_p = ["crx", "cry", "crz", "cp", "cu1", "rxx", "rzz", "mix"];
    for _ in 0..gates {
        let mut qs: Vec<usize> = Vec::new();
        while qs.len() < 3 {
            let q = rng.random_range(0..n);
            if !qs.contains(&q) {
                qs.push(q);
            }
        }
        let a: f64 = rng.random_range(-3.2..3.2);
        let b: f64 = rng.random_range(-3.2..3.2);
        let c: f64 = rng.random_range(-3.2..3.2);
        let (q0, q1, q2) = (qs[0], qs[1], qs[2]);
        match rng.random_range(0..9) {
            0 | 1 => writeln!(s, "{} q[{q0}];", one[rng.random_range(0..one.len())]),
            2 => writeln!(
                s,
                "{}({a}) q[{q0}];",
                one_p[rng.random_range(0..one_p.len())]
            ),
            3 => writeln!(s, "u3({a},{b},{c}) q[{q0}];"),
            4 => writeln!(s, "u2({a},{b}) q[{q0}];"),
            5 => writeln!(
                s,
                "{} q[{q0}],q[{q1}];",
                two[rng.random_range(0..two.len())]
            ),
            6 => writeln!(
                s,
                "{}({a}) q[{q0}],q[{q1}];",
                two_p[rng.random_range(0..two_p.len())]
            ),
            7 => writeln!(s, "cu3({a},{b},{c}) q[{q0}],q[{q1}];"),
            _ => writeln!(
                s,
                "{} q[{q0}],q[{q1}],q[{q2}];",
                if rng.random_bool(0.5) { "ccx" } else { "cswap" }
            ),
        }
        .unwrap();
    }
    s.push_str("measure q -> c;\n");
    s
}

/// Grover search over `d` data qubits for `marked`, with a Toffoli V-chain on `d - 2` ancillas
/// for the multi-controlled Z.
fn grover(d: usize, marked: usize, iterations: usize) -> String {
    let anc = d - 2;
    let n = d + anc;
    let mut s = format!("{HEADER}qreg q[{d}];\nqreg a[{anc}];\nh q;\n");
    let mcz = |s: &mut String| {
        // Z on q[d-1] controlled by q[0..d-1]: compute the AND of q[0..d-2] into the ancillas.
        writeln!(s, "ccx q[0],q[1],a[0];").unwrap();
        for i in 2..d - 1 {
            writeln!(s, "ccx q[{i}],a[{}],a[{}];", i - 2, i - 1).unwrap();
        }
        writeln!(s, "cz a[{}],q[{}];", anc - 1, d - 1).unwrap();
        for i in (2..d - 1).rev() {
            writeln!(s, "ccx q[{i}],a[{}],a[{}];", i - 2, i - 1).unwrap();
        }
        writeln!(s, "ccx q[0],q[1],a[0];").unwrap();
    };
    for _ in 0..iterations {
        for q in 0..d {
            if (marked >> q) & 1 == 0 {
                writeln!(s, "x q[{q}];").unwrap();
            }
        }
        mcz(&mut s);
        for q in 0..d {
            if (marked >> q) & 1 == 0 {
                writeln!(s, "x q[{q}];").unwrap();
            }
        }
        s.push_str("h q;\nx q;\n");
        mcz(&mut s);
        s.push_str("x q;\nh q;\n");
    }
    let _ = n;
    s
}

fn aer(dir: &Path, circuits: &[(String, String)]) -> Vec<Vec<[f64; 2]>> {
    let mut paths = Vec::new();
    for (name, text) in circuits {
        let p = dir.join(format!("{name}.qasm"));
        std::fs::write(&p, text).unwrap();
        paths.push(p);
    }
    run_script(
        "aer_statevector.py",
        [dir.as_os_str()]
            .into_iter()
            .chain(paths.iter().map(|p| p.as_os_str())),
    );
    circuits
        .iter()
        .map(|(name, _)| complex_file(&dir.join(format!("{name}.bin"))))
        .collect()
}

/// `circuit` run at f64 on two threads under a memory limit of `limit` bytes, spilled to `dir`.
fn run_spilled(circuit: &cxltier_qsim::Circuit, limit: u64, dir: &Path) -> Simulation<f64> {
    let options = Options::new()
        .threads(2)
        .memory_limit(limit)
        .ssd(dir.to_path_buf(), None);
    Simulation::<f64>::run(circuit, &options).unwrap()
}

#[test]
fn matches_qiskit_aer_in_memory_and_out_of_core() {
    let dir = scratch("aer");
    let circuits = vec![
        ("random13".to_string(), random_circuit(13, 400, 1)),
        ("random14".to_string(), random_circuit(14, 300, 2)),
        ("qft13".to_string(), qft(13)),
        ("ghz16".to_string(), ghz(16)),
        ("grover8".to_string(), grover(8, 0b1011_0011, 5)),
    ];
    let reference = aer(&dir, &circuits);
    for ((name, text), want) in circuits.iter().zip(&reference) {
        let circuit = parse(text).unwrap();
        let state_bytes = (16u64) << circuit.num_qubits;
        // The smallest limit that runs out of core: three buffers of 2^(8 + widest gate) amplitudes.
        let widest = circuit.gates.iter().map(|g| g.qubits.len()).max().unwrap();
        let minimum = 3 * (16u64 << (8 + widest));
        // In memory, with and without fusion; then out of core with an eighth of the state's
        // memory and spilled to a file.
        for (label, options) in [
            ("memory", Options::new().threads(2)),
            ("memory-unfused", Options::new().threads(2).fuse(1)),
            ("memory-fused-4", Options::new().threads(2).fuse(4)),
            // Cache-blocked sweeps (with relabelled qubits) at this size: groups of 16 KiB.
            (
                "memory-swept",
                Options::new().threads(2).cache_bytes(16 << 10),
            ),
            (
                "memory-swept-fused-3",
                Options::new().threads(2).fuse(3).cache_bytes(16 << 10),
            ),
            (
                "out-of-core",
                Options::new()
                    .threads(2)
                    .memory_limit((state_bytes / 8).max(minimum))
                    .ssd(dir.clone(), None),
            ),
            (
                "out-of-core-swept",
                Options::new()
                    .threads(2)
                    .memory_limit((state_bytes / 8).max(minimum))
                    .ssd(dir.clone(), None)
                    .cache_bytes(16 << 10),
            ),
        ] {
            let mut sim = Simulation::<f64>::run(&circuit, &options).unwrap();
            if label.starts_with("out-of-core") {
                assert_eq!(sim.report().mode, "out_of_core", "{name}");
                assert!(sim.report().placement.spilled_chunks > 0, "{name}");
            }
            if label.starts_with("memory-swept") {
                let r = sim.report();
                assert!(
                    r.passes < r.fused_gates,
                    "{name} {label}: {} sweeps",
                    r.passes
                );
            }
            let got = sim.statevector().unwrap();
            let d = max_diff(&got, want);
            assert!(d < 1e-10, "{name} {label}: max difference {d:e} from Aer");
            assert!((sim.norm().unwrap() - 1.0).abs() < 1e-10);
        }
        // f32 is checked against Aer with single-precision tolerance.
        for options in [
            Options::new().threads(2),
            Options::new().threads(2).cache_bytes(8 << 10),
        ] {
            let mut sim = Simulation::<f32>::run(&circuit, &options).unwrap();
            let d = max_diff(&sim.statevector().unwrap(), want);
            assert!(d < 1e-4, "{name} f32: max difference {d:e} from Aer");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn three_more_qubits_than_fit_run_out_of_core_and_match_the_in_memory_run() {
    let dir = scratch("beyond");
    // 1 MiB holds the 16-qubit state; run 19 qubits under that limit.
    let limit = 1 << 20;
    let n = 19;
    let circuit = parse(&random_circuit(n, 120, 7)).unwrap();
    assert!((16u64 << n) > 4 * limit);
    let mut spilled = run_spilled(&circuit, limit, &dir);
    let report = spilled.report().clone();
    assert_eq!(report.mode, "out_of_core");
    assert!(report.passes >= 1 && report.passes <= report.gates);
    assert!(report.passes <= report.passes_without_relabelling.unwrap());
    let total: u64 = report.pass_reports.iter().map(|p| p.io.bytes_written).sum();
    assert!(total >= report.placement.spilled_chunks as u64 * report.placement.chunk_bytes as u64);
    let mut memory = Simulation::<f64>::run(&circuit, &Options::new().threads(2)).unwrap();
    let d = max_diff(
        &spilled.statevector().unwrap(),
        &memory.statevector().unwrap(),
    );
    assert!(d < 1e-12, "spilled vs in-memory: {d:e}");
    // Amplitude look-ups and sampling agree between the two layouts.
    let idx = [0u64, 1, 12345, (1 << n) - 1];
    let (a, b) = (
        spilled.amplitudes(&idx).unwrap(),
        memory.amplitudes(&idx).unwrap(),
    );
    assert!(max_diff(&a, &b) < 1e-12, "{a:?} {b:?}");
    drop(spilled);
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert!(left.is_empty(), "spill files are removed");
    // Sampling out of core: a GHZ state gives only all-zeros and all-ones, about half each.
    let circuit = parse(&ghz(n)).unwrap();
    let mut spilled = run_spilled(&circuit, limit, &dir);
    let q: Vec<usize> = (0..n).collect();
    let counts = spilled.sample(1000, &q, 3).unwrap();
    let zeros = counts.get(&"0".repeat(n)).copied().unwrap_or(0);
    let ones = counts.get(&"1".repeat(n)).copied().unwrap_or(0);
    assert_eq!(
        zeros + ones,
        1000,
        "only two outcomes: {:?}",
        counts.keys().take(4).collect::<Vec<_>>()
    );
    assert!((400..600).contains(&zeros), "{zeros} of 1000");
    drop(spilled);
    std::fs::remove_dir_all(&dir).unwrap();
}
