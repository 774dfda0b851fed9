//! The OpenQASM 2.0 parser on arbitrary text. A program it accepts must be one the simulator can
//! run: every gate on distinct qubits inside the registers, with a square matrix of the right
//! size, every measurement inside the registers. Small circuits (at most 10 qubits and 64 gates)
//! are also simulated, single-threaded, and their norm must stay 1 when every gate is unitary.
#![no_main]

use cxltier_qsim::{parse, Options, Simulation};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(circuit) = parse(src) else {
        return;
    };
    let n = circuit.num_qubits;
    for g in &circuit.gates {
        let k = g.qubits.len();
        assert!(k >= 1, "gate {} on no qubits", g.name);
        assert_eq!(g.matrix.qubits(), k, "gate {} on {k} qubits", g.name);
        assert_eq!(
            g.matrix.entries().len(),
            1 << (2 * k),
            "gate {} matrix size",
            g.name
        );
        for (i, &q) in g.qubits.iter().enumerate() {
            assert!(q < n, "gate {} on qubit {q} of {n}", g.name);
            assert!(
                !g.qubits[..i].contains(&q),
                "gate {} repeats qubit {q}",
                g.name
            );
        }
    }
    for &(q, c) in &circuit.measurements {
        assert!(
            q < n && c < circuit.num_clbits,
            "measure {q} -> {c} outside the registers"
        );
    }
    if (1..=10).contains(&n) && circuit.gates.len() <= 64 {
        let unitary = circuit.gates.iter().all(|g| g.matrix.is_unitary(1e-9));
        let mut sim = Simulation::<f64>::run(&circuit, &Options::new().threads(1))
            .expect("a circuit of at most 10 qubits runs in memory");
        let norm = sim.norm().expect("the norm of an in-memory state");
        if unitary {
            assert!((norm - 1.0).abs() < 1e-6, "norm {norm} after unitary gates");
        }
    }
});
