"""Qiskit's side of the simulator's compatibility tests.

Usage:
  python qiskit_reference.py gates OUT_DIR NAME:QUBITS:P1,P2...
      Writes OUT_DIR/NAME.bin: the unitary Qiskit gives gate NAME with those parameters, as
      little-endian complex128, row-major, qubit 0 the least significant bit of an index. qelib1's
      gates and the others Qiskit's reader has built in are read as OpenQASM by
      QuantumCircuit.from_qasm_str (what a script gets from a file); the rest are Qiskit's
      standard gate classes of that name (qasm2.dumps writes a definition of each).
  python qiskit_reference.py export OUT_DIR SEED CIRCUITS QUBITS GATES
      Writes OUT_DIR/export<i>.qasm and .bin for i < CIRCUITS: a random circuit over every standard
      gate of Qiskit (plus multi-controlled X and a gate of its own, which qasm2.dumps writes as
      definitions, and a delay, which it declares opaque), run through qiskit.transpile with no
      basis given and qasm2.dumps. The .bin is Aer's state vector of the transpiled circuit,
      little-endian complex128, basis state i at position i (qubit 0 the least significant bit).
"""
import os
import sys

import numpy as np
from qiskit import QuantumCircuit, qasm2, transpile
from qiskit.circuit import Delay
from qiskit.circuit.library import C3XGate, C4XGate, get_standard_gate_name_mapping
from qiskit.quantum_info import Operator
from qiskit_aer import AerSimulator


def gates(out_dir, specs):
    standard = get_standard_gate_name_mapping()
    legacy = {c.name for c in qasm2.LEGACY_CUSTOM_INSTRUCTIONS} | {"U", "CX"}
    for spec in specs:
        name, qubits, params = spec.split(":")
        qubits = int(qubits)
        params = [float(p) for p in params.split(",") if p]
        if name in legacy:
            args = "(" + ",".join(repr(p) for p in params) + ")" if params else ""
            on = ",".join(f"q[{i}]" for i in range(qubits))
            # Qiskit's reader needs delay declared, as qasm2.dumps does.
            declare = "opaque delay(param0) q0;\n" if name == "delay" else ""
            qc = QuantumCircuit.from_qasm_str(
                f'OPENQASM 2.0;\ninclude "qelib1.inc";\n{declare}qreg q[{qubits}];\n'
                f"{name}{args} {on};\n"
            )
        else:
            qc = QuantumCircuit(qubits)
            qc.append(standard[name].base_class(*params), range(qubits))
        matrix = np.asarray(Operator(qc).data, dtype=np.complex128)
        matrix.astype("<c16").tofile(os.path.join(out_dir, name + ".bin"))


def own_gate():
    """A gate that is none of Qiskit's: qasm2.dumps writes its definition."""
    sub = QuantumCircuit(2, name="mix")
    sub.rzz(0.7, 0, 1)
    sub.ry(0.35, 1)
    sub.cx(1, 0)
    return sub.to_gate()


def export(out_dir, seed, circuits, qubits, count):
    rng = np.random.default_rng(seed)
    skip = {"measure", "reset", "delay", "barrier", "global_phase"}
    pool = [g for n, g in sorted(get_standard_gate_name_mapping().items()) if n not in skip]
    # An idle too: qasm2.dumps declares it `opaque delay`.
    pool += [C3XGate(), C4XGate(), own_gate(), Delay(100)]
    sim = AerSimulator(method="statevector", precision="double")

    def statevector(circuit):
        run = circuit.copy()
        run.save_statevector()
        result = sim.run(transpile(run, sim, optimization_level=0)).result()
        return np.asarray(result.get_statevector(), dtype=np.complex128)

    for i in range(circuits):
        qc = QuantumCircuit(qubits)
        # Every gate at least once, then random ones.
        order = list(range(len(pool))) + list(rng.integers(0, len(pool), count))
        for k in order:
            gate = pool[k]
            if gate.params and gate.name not in ("mix", "delay"):
                gate = gate.base_class(*rng.uniform(-3.2, 3.2, len(gate.params)))
            on = rng.choice(qubits, gate.num_qubits, replace=False)
            qc.append(gate, [int(q) for q in on])
        # Basis gates left open: the transpiler keeps what it can and decomposes nothing to a basis.
        done = transpile(qc, optimization_level=0, seed_transpiler=seed)
        text = qasm2.dumps(done)
        # OpenQASM 2 cannot carry a global phase; a circuit with one would not be the file.
        assert abs(done.global_phase) < 1e-12, done.global_phase
        # The reference is Aer's state of the transpiled circuit, not of the file read back:
        # a `gate` block cannot carry the phase of Qiskit's definition (ecr's is -pi/4), which the
        # simulator restores (docs/qsim.md); and Qiskit 2.6.2's reader misreads a gate defined
        # after `opaque delay` as a delay.
        state = statevector(done)
        base = os.path.join(out_dir, f"export{i}")
        with open(base + ".qasm", "w") as f:
            f.write(text)
        state.astype("<c16").tofile(base + ".bin")


if __name__ == "__main__":
    if sys.argv[1] == "gates":
        gates(sys.argv[2], sys.argv[3:])
    elif sys.argv[1] == "export":
        export(sys.argv[2], *(int(a) for a in sys.argv[3:7]))
    else:
        sys.exit(f"unknown mode {sys.argv[1]!r}: give gates or export")
