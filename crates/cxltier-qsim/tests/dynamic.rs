//! Dynamic circuits (mid-circuit measurements, resets, `if(creg==n)`) against Qiskit Aer: the
//! counts of our shots and of AerSimulator's, same number of shots, must pass a chi-square test
//! of homogeneity at p > 1e-4. Both sides have fixed seeds, so the test is deterministic. Run in
//! memory (by branches and by trajectories) and out of core (spilled with O_DIRECT); plus the
//! bookkeeping of branches (shots preserved, deterministic for a seed, copies bounded).
//!
//! Aer comes from PyPI into bench/cache/venv (`scripts/qsim-peers`, which `scripts/test` runs).

mod common;
use common::{run_script, scratch, HEADER};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use cxltier_qsim::{parse, AnySimulation, Method, Options, Precision};
use rand::{Rng, SeedableRng};

const AER_SEED: u64 = 11;
const OUR_SEED: u64 = 5;
/// The significance: a correct simulator fails this with probability 1e-4 per circuit, and
/// with fixed seeds either it does or it does not, every time.
const P_MIN: f64 = 1e-4;

fn teleportation() -> String {
    format!(
        "{HEADER}qreg q[3];\ncreg m0[1];\ncreg m1[1];\ncreg out[1];\n\
         u3(1.1,0.4,-0.7) q[0];\nh q[1];\ncx q[1],q[2];\ncx q[0],q[1];\nh q[0];\n\
         measure q[0] -> m0[0];\nmeasure q[1] -> m1[0];\nif(m1==1) x q[2];\nif(m0==1) z q[2];\n\
         measure q[2] -> out[0];\n"
    )
}

/// A three-qubit bit-flip code: encode, coherent errors, one syndrome round into two
/// ancillas, corrections conditioned on the syndrome, ancillas reset and reused for a second
/// round, decode, measure.
fn repetition_code() -> String {
    let syndrome = "cx d[0],a[0];\ncx d[1],a[0];\ncx d[1],a[1];\ncx d[2],a[1];\n";
    format!(
        "{HEADER}qreg d[3];\nqreg a[2];\ncreg syn[2];\ncreg again[2];\ncreg f[3];\n\
         ry(0.9) d[0];\ncx d[0],d[1];\ncx d[0],d[2];\nrx(0.7) d[1];\nrx(0.4) d[2];\n\
         {syndrome}measure a[0] -> syn[0];\nmeasure a[1] -> syn[1];\n\
         if(syn==1) x d[0];\nif(syn==3) x d[1];\nif(syn==2) x d[2];\nreset a;\n\
         rx(0.5) d[0];\n{syndrome}measure a -> again;\n\
         cx d[0],d[1];\ncx d[0],d[2];\nmeasure d -> f;\n"
    )
}

/// Iterative phase estimation of p(2 pi 0.3) on its eigenstate |1>, three bits, least
/// significant first, each round's phase corrected by the bits already read.
fn phase_estimation() -> String {
    let phi = 2.0 * std::f64::consts::PI * 0.3;
    format!(
        "{HEADER}qreg a[1];\nqreg e[1];\ncreg c[3];\nx e[0];\n\
         h a[0];\ncp({}) a[0],e[0];\nh a[0];\nmeasure a[0] -> c[0];\nreset a[0];\n\
         h a[0];\ncp({}) a[0],e[0];\nif(c==1) p(-pi/2) a[0];\nh a[0];\nmeasure a[0] -> c[1];\nreset a[0];\n\
         h a[0];\ncp({phi}) a[0],e[0];\nif(c==1) p(-pi/4) a[0];\nif(c==2) p(-pi/2) a[0];\n\
         if(c==3) p(-3*pi/4) a[0];\nh a[0];\nmeasure a[0] -> c[2];\n",
        4.0 * phi,
        2.0 * phi
    )
}

/// A random dynamic circuit on `n` qubits: gates, measurements into two registers, resets, and
/// conditions (on gates, measurements and resets) on those registers and on one never measured,
/// ending with measurements.
fn random_dynamic(n: usize, steps: usize, seed: u64) -> String {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut s = format!("{HEADER}qreg q[{n}];\ncreg m[2];\ncreg k[3];\ncreg w[1];\n");
    let regs = [("m", 2u32), ("k", 3), ("w", 1)];
    for _ in 0..steps {
        let q0 = rng.random_range(0..n);
        let q1 = (q0 + rng.random_range(1..n)) % n;
        let a: f64 = rng.random_range(-3.2..3.2);
        let b: f64 = rng.random_range(-3.2..3.2);
        let (reg, width) = regs[rng.random_range(0..2)];
        let bit = rng.random_range(0..width);
        let op = match rng.random_range(0..10) {
            0 => format!("h q[{q0}];"),
            1 => format!("u3({a},{b},0.3) q[{q0}];"),
            2 => format!("ry({a}) q[{q0}];"),
            3 => format!("cx q[{q0}],q[{q1}];"),
            4 => format!("crx({a}) q[{q0}],q[{q1}];"),
            5 | 6 => format!("measure q[{q0}] -> {reg}[{bit}];"),
            7 => format!("reset q[{q0}];"),
            _ => format!("rzz({b}) q[{q0}],q[{q1}];"),
        };
        if rng.random_range(0..3) == 0 {
            let (creg, width) = regs[rng.random_range(0..3)];
            let value = rng.random_range(0..1u32 << width);
            writeln!(s, "if({creg}=={value}) {op}").unwrap();
        } else {
            writeln!(s, "{op}").unwrap();
        }
    }
    for q in 0..n.min(3) {
        writeln!(s, "measure q[{q}] -> k[{q}];").unwrap();
    }
    s
}

fn run(
    text: &str,
    options: &Options,
    shots: u64,
    seed: u64,
) -> (
    BTreeMap<String, u64>,
    cxltier_qsim::DynamicReport,
    &'static str,
) {
    let circuit = parse(text).unwrap();
    assert!(circuit.dynamic.is_some(), "not a dynamic circuit:\n{text}");
    let (sim, counts) =
        AnySimulation::run_shots(&circuit, options, Precision::F64, shots, seed).unwrap();
    let report = sim.report();
    (counts, report.dynamic.clone().unwrap(), report.mode)
}

/// Write each circuit and our counts, run Aer on them, and check every p-value.
fn compare_with_aer(dir: &Path, shots: u64, cases: &[(String, String, BTreeMap<String, u64>)]) {
    let mut paths = Vec::new();
    for (name, text, counts) in cases {
        let path = dir.join(format!("{name}.qasm"));
        std::fs::write(&path, text).unwrap();
        std::fs::write(
            dir.join(format!("{name}.ours.json")),
            serde_json::to_string(counts).unwrap(),
        )
        .unwrap();
        paths.push(path);
    }
    let (shots, seed) = (shots.to_string(), AER_SEED.to_string());
    let args = [shots.as_ref(), seed.as_ref()]
        .into_iter()
        .chain(paths.iter().map(|p| p.as_os_str()));
    let results: serde_json::Value =
        serde_json::from_slice(&run_script("aer_counts.py", args)).unwrap();
    for (name, text, counts) in cases {
        assert_above_significance(&results, name, &format!("ours {counts:?}\n{text}"));
    }
}

/// The chi-square test's p-value for `name` in a script's results ({name: {"p", "dof", "aer"}})
/// is above the significance; `context` goes into the failure's message.
fn assert_above_significance(results: &serde_json::Value, name: &str, context: &str) {
    let r = &results[name];
    let p = r["p"]
        .as_f64()
        .unwrap_or_else(|| panic!("{name}: no p-value in {r}"));
    assert!(
        p > P_MIN,
        "{name}: chi-square p = {p:e} (dof {}), Aer {}: {context}",
        r["dof"],
        r["aer"]
    );
}

#[test]
fn counts_match_aer_in_memory_by_branches_and_by_trajectories() {
    let shots = 4000;
    let dir = scratch("memory");
    let mut circuits = vec![
        ("teleportation".to_string(), teleportation()),
        ("repetition".to_string(), repetition_code()),
        ("ipe".to_string(), phase_estimation()),
    ];
    for (i, n) in (3..=8).enumerate() {
        circuits.push((format!("random{n}"), random_dynamic(n, 30, 100 + i as u64)));
    }
    let mut cases = Vec::new();
    for (name, text) in &circuits {
        for method in [Method::Branches, Method::Trajectories] {
            let options = Options::new().dynamic_method(method);
            let (counts, report, mode) = run(text, &options, shots, OUR_SEED);
            assert_eq!(mode, "memory");
            assert_eq!(counts.values().sum::<u64>(), shots, "{name}");
            let expected = if method == Method::Branches {
                "branches"
            } else {
                "trajectories"
            };
            assert_eq!(report.method, expected);
            cases.push((format!("{name}_{expected}"), text.clone(), counts));
        }
    }
    compare_with_aer(&dir, shots, &cases);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn counts_match_aer_out_of_core() {
    let dir = scratch("ooc");
    // 13 qubits (128 KiB at f64) under a 100 KiB limit: out of core, three qubits beyond it.
    let text = random_dynamic(13, 40, 7);
    let options = |method| {
        Options::new()
            .memory_limit(100 << 10)
            .ssd(dir.clone(), None)
            .dynamic_method(method)
    };
    let shots = 2000;
    let (branched, report, mode) = run(&text, &options(Method::Branches), shots, OUR_SEED);
    assert_eq!(mode, "out_of_core");
    assert_eq!(report.method, "branches", "{report:?}");
    assert!(report.copies_made > 0, "{report:?}");
    // Its 14 mid-circuit measurements could need 10 open copies for 2000 shots: more than are
    // kept on the SSD, so the automatic choice is trajectories.
    let (trajectories, report, mode) = run(&text, &options(Method::Auto), shots, OUR_SEED + 1);
    assert_eq!(mode, "out_of_core");
    assert_eq!(report.method, "trajectories", "{report:?}");
    assert!(
        report.copies_needed as u64 > report.copies_allowed,
        "{report:?}"
    );
    assert_eq!(report.branches, shots);
    // Copies of the state live on the SSD only while the run holds them.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    let cases = [
        ("ooc_branches".to_string(), text.clone(), branched),
        ("ooc_trajectories".to_string(), text.clone(), trajectories),
    ];
    compare_with_aer(&dir, shots, &cases);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn branches_keep_every_shot_and_repeat_for_a_seed() {
    let text = random_dynamic(6, 40, 42);
    let options = Options::new().dynamic_method(Method::Branches);
    for shots in [1, 2, 7, 1000] {
        let (a, report, _) = run(&text, &options, shots, 9);
        assert_eq!(a.values().sum::<u64>(), shots);
        assert!(
            report.branches >= 1 && report.branches <= shots,
            "{report:?}"
        );
        // The branch that runs while its sibling waits has at most half the shots.
        assert!(report.open_copies_max <= report.copies_needed, "{report:?}");
        assert_eq!(report.copies_made, report.branches - 1, "{report:?}");
        let (b, _, _) = run(&text, &options, shots, 9);
        assert_eq!(a, b, "same seed, same counts");
    }
    let (a, _, _) = run(&text, &options, 1000, 9);
    let (b, _, _) = run(&text, &options, 1000, 10);
    assert_ne!(a, b, "another seed, other counts");
}

#[test]
fn conditions_resets_and_unmeasured_registers_are_exact() {
    // Deterministic: q0 reads 1, so q1 flips; q0 is reset and reads 0; w was never measured
    // and reads 0, so if(w==0) applies and if(w==1) does not.
    let text = format!(
        "{HEADER}qreg q[3];\ncreg c[1];\ncreg d[3];\ncreg w[2];\nx q[0];\nmeasure q[0] -> c[0];\n\
         if(c==1) x q[1];\nreset q[0];\nif(w==0) x q[2];\nif(w==1) x q[0];\nmeasure q -> d;\n"
    );
    for method in [Method::Branches, Method::Trajectories] {
        let (counts, report, _) = run(&text, &Options::new().dynamic_method(method), 50, 1);
        assert_eq!(counts, BTreeMap::from([("00 110 1".to_string(), 50)]));
        // The measurement and the reset: two scans per path, one path or fifty.
        assert_eq!(
            report.probability_scans,
            if method == Method::Branches { 2 } else { 100 }
        );
    }
}

#[test]
fn openqasm3_from_qiskit_gives_the_same_shots() {
    let dir = scratch("qasm3");
    let mut circuits = vec![
        ("teleportation".to_string(), teleportation()),
        ("repetition".to_string(), repetition_code()),
        ("ipe".to_string(), phase_estimation()),
    ];
    for n in 3..=8 {
        circuits.push((format!("random{n}"), random_dynamic(n, 30, 300 + n as u64)));
    }
    let paths: Vec<PathBuf> = circuits
        .iter()
        .map(|(name, text)| {
            let path = dir.join(format!("{name}.qasm"));
            std::fs::write(&path, text).unwrap();
            path
        })
        .collect();
    run_script("qasm3_dumps.py", &paths);
    let options = Options::new().dynamic_method(Method::Branches);
    for ((name, text), path) in circuits.iter().zip(&paths) {
        let text3 = std::fs::read_to_string(path.with_extension("qasm3")).unwrap();
        assert!(text3.starts_with("OPENQASM 3"), "{name}: {text3}");
        // The same circuit, the same seed: the same counts, exactly.
        let (ours2, _, _) = run(text, &options, 2000, OUR_SEED);
        let (ours3, _, _) = run(&text3, &options, 2000, OUR_SEED);
        assert_eq!(ours2, ours3, "{name}:\n{text3}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Dynamic circuits as Qiskit users write them, `if_test` on one bit or on a register, half with
/// an `else`, read from `qiskit.qasm3.dumps`; Aer runs the same circuit objects in Qiskit. Our
/// counts, by branches and by trajectories, against Aer's.
#[test]
fn qiskit_if_test_on_bits_with_else_matches_aer() {
    let dir = scratch("ifelse");
    let shots = 4000u64;
    let (shots_arg, seed) = (shots.to_string(), AER_SEED.to_string());
    let build = [
        "build".as_ref(),
        dir.as_os_str(),
        shots_arg.as_ref(),
        seed.as_ref(),
    ];
    run_script("qiskit_if_else.py", build);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let path = e.unwrap().path();
            (path.extension()? == "qasm3").then(|| path.file_stem()?.to_str().map(String::from))?
        })
        .collect();
    names.sort();
    assert_eq!(names.len(), 7, "{names:?}");
    for (method, method_name) in [
        (Method::Branches, "branches"),
        (Method::Trajectories, "trajectories"),
    ] {
        let options = Options::new().dynamic_method(method);
        for name in &names {
            let text = std::fs::read_to_string(dir.join(format!("{name}.qasm3"))).unwrap();
            let (counts, report, _) = run(&text, &options, shots, OUR_SEED);
            assert_eq!(counts.values().sum::<u64>(), shots, "{name}");
            assert_eq!(report.method, method_name, "{name}");
            std::fs::write(
                dir.join(format!("{name}.ours.json")),
                serde_json::to_string(&counts).unwrap(),
            )
            .unwrap();
        }
        let compare = ["compare".as_ref(), dir.as_os_str()];
        let results: serde_json::Value =
            serde_json::from_slice(&run_script("qiskit_if_else.py", compare)).unwrap();
        for name in &names {
            assert_above_significance(&results, name, method_name);
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
