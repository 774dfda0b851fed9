//! The simulator reads what Qiskit writes: every built-in gate against the unitary Qiskit gives
//! it, and random circuits over every standard gate of Qiskit, run through `qiskit.transpile`
//! and `qasm2.dumps`, against Aer's state vector.
//!
//! Qiskit and Aer come from PyPI into bench/cache/venv (`scripts/qsim-peers`, which
//! `scripts/test` runs).

mod common;
use common::{complex_file, max_diff, run_script, scratch};
use std::collections::BTreeSet;

use cxltier_qsim::qasm::{standard_matrix, EXTRA_GATES, STANDARD_GATES};
use cxltier_qsim::{parse, Options, Simulation};

/// Run tests/qiskit_reference.py with `args`.
fn reference(args: &[String]) {
    run_script("qiskit_reference.py", args);
}

#[test]
fn every_built_in_gate_is_qiskits_unitary_with_its_phase() {
    let dir = scratch("gates");
    let all: Vec<(&str, usize, usize)> =
        STANDARD_GATES.iter().chain(EXTRA_GATES).copied().collect();
    // Parameters that are no special angle, different for each position.
    // Qiskit reads `u0(n)` and `delay(n)` as an idle of n time steps, which must be whole.
    let params = |name: &str, n: usize| -> Vec<f64> {
        if name == "u0" || name == "delay" {
            return vec![3.0];
        }
        (0..n).map(|i| 0.37 + 0.91 * i as f64).collect()
    };
    let specs: Vec<String> = all
        .iter()
        .map(|&(name, np, nq)| {
            let p: Vec<String> = params(name, np).iter().map(f64::to_string).collect();
            format!("{name}:{nq}:{}", p.join(","))
        })
        .collect();
    let mut args = vec!["gates".to_string(), dir.to_string_lossy().into_owned()];
    args.extend(specs);
    reference(&args);
    let mut wrong = Vec::new();
    for &(name, np, _) in &all {
        let ours = standard_matrix(name, &params(name, np)).unwrap();
        let ours: Vec<[f64; 2]> = ours.entries().iter().map(|z| [z.re, z.im]).collect();
        let qiskit = complex_file(&dir.join(format!("{name}.bin")));
        let d = max_diff(&ours, &qiskit);
        if d >= 1e-12 {
            wrong.push(format!("{name}: max difference {d:e}"));
        }
    }
    assert!(wrong.is_empty(), "not Qiskit's unitaries: {wrong:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn qiskit_transpiled_and_dumped_circuits_match_aer() {
    let dir = scratch("export");
    let circuits = 4;
    // 9 qubits, every standard gate once and 150 more, seed 22.
    reference(&[
        "export".into(),
        dir.to_string_lossy().into_owned(),
        "22".into(),
        circuits.to_string(),
        "9".into(),
        "150".into(),
    ]);
    let mut used = BTreeSet::new();
    for i in 0..circuits {
        let text = std::fs::read_to_string(dir.join(format!("export{i}.qasm"))).unwrap();
        for line in text.lines() {
            let word = line.split([' ', '(']).next().unwrap_or("");
            let word = if word == "gate" {
                line.split([' ', '(']).nth(1).unwrap_or("")
            } else {
                word
            };
            used.insert(word.to_string());
        }
        let circuit = parse(&text).unwrap_or_else(|e| panic!("export{i}.qasm: {e}\n{text}"));
        assert!(circuit.warnings.is_empty(), "{:?}", circuit.warnings);
        let want = complex_file(&dir.join(format!("export{i}.bin")));
        for options in [
            Options::new().threads(2),
            Options::new().threads(2).fuse(1),
            Options::new().threads(2).fuse(4),
        ] {
            let mut sim = Simulation::<f64>::run(&circuit, &options).unwrap();
            let d = max_diff(&sim.statevector().unwrap(), &want);
            assert!(
                d < 1e-9,
                "export{i}.qasm: max difference {d:e} from Aer\n{text}"
            );
        }
    }
    // What qasm2.dumps writes for Qiskit's gates reached the parser: the qelib1 gates Qiskit
    // uses by name and the definitions it writes for the others.
    for name in [
        "rccx",
        "c3sqrtx",
        "rcccx",
        "rxx",
        "rzz",
        "ryy",
        "rzx",
        "ecr",
        "cu",
        "cu1",
        "cu3",
        "csx",
        "dcx",
        "iswap",
        "sx",
        "sxdg",
        "p",
        "cp",
        "crx",
        "cry",
        "crz",
        "ch",
        "cswap",
        "u",
        "u1",
        "u2",
        "u3",
        "r",
        "cs",
        "csdg",
        "ccz",
        "xx_plus_yy",
        "xx_minus_yy",
        "mix",
    ] {
        assert!(
            used.contains(name),
            "no {name} in the exported circuits: {used:?}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
