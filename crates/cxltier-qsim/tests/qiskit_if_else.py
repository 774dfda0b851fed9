"""Dynamic circuits written with Qiskit's `if_test` (one-bit conditions, `else` branches), as
Qiskit users write them, for the simulator's tests.

Usage:
  python qiskit_if_else.py build DIR SHOTS SEED
      writes DIR/NAME.qasm3 (`qiskit.qasm3.dumps`) and DIR/NAME.aer.json (AerSimulator's
      counts, SHOTS shots, seed_simulator=SEED) for each circuit;
  python qiskit_if_else.py compare DIR
      reads DIR/NAME.ours.json beside each NAME.aer.json and prints one JSON object:
      {NAME: {"aer": counts, "p": p_value, "dof": k}} (chi_square.py).
"""
import glob
import json
import os
import random
import sys

from chi_square import homogeneity


def teleportation():
    from qiskit import ClassicalRegister, QuantumCircuit, QuantumRegister

    q = QuantumRegister(3, "q")
    m = ClassicalRegister(2, "m")
    out = ClassicalRegister(1, "out")
    qc = QuantumCircuit(q, m, out)
    qc.ry(0.7, 0)
    qc.rz(0.3, 0)
    qc.h(1)
    qc.cx(1, 2)
    qc.cx(0, 1)
    qc.h(0)
    qc.measure(0, m[0])
    qc.measure(1, m[1])
    with qc.if_test((m[1], 1)):
        qc.x(2)
    with qc.if_test((m[0], 1)):
        qc.z(2)
    qc.measure(2, out[0])
    return qc


def if_else_bits():
    from qiskit import QuantumCircuit

    qc = QuantumCircuit(2, 2)
    qc.h(0)
    qc.measure(0, 0)
    with qc.if_test((qc.clbits[0], 1)):
        qc.x(1)
    with qc.if_test((qc.cregs[0], 2)):
        qc.x(1)
    with qc.if_test((qc.clbits[0], 0)) as else_:
        qc.h(1)
    with else_:
        qc.rx(0.4, 1)
    qc.measure(1, 1)
    return qc


def register_else():
    from qiskit import QuantumCircuit

    qc = QuantumCircuit(3, 3)
    qc.h(0)
    qc.h(1)
    qc.measure([0, 1], [0, 1])
    with qc.if_test((qc.cregs[0], 3)) as else_:
        qc.x(2)
    with else_:
        qc.ry(1.1, 2)
        qc.reset(0)
    qc.measure([0, 2], [0, 2])
    return qc


def random_circuit(n, steps, seed):
    """Random gates, mid-circuit measurements into random bits, resets, and `if_test`s on a
    bit or on the whole register, half of them with an `else`."""
    from qiskit import QuantumCircuit

    rng = random.Random(seed)
    qc = QuantumCircuit(n, n)
    measured = False

    def gate(qc):
        kind = rng.randrange(4)
        a = rng.randrange(n)
        if kind == 0:
            qc.h(a)
        elif kind == 1:
            qc.ry(rng.uniform(0, 3.1), a)
        elif kind == 2:
            qc.rz(rng.uniform(0, 3.1), a)
        else:
            b = (a + 1 + rng.randrange(n - 1)) % n
            qc.cx(a, b)

    for _ in range(steps):
        r = rng.random()
        if r < 0.55 or not measured:
            gate(qc)
            if rng.random() < 0.3:
                qc.measure(rng.randrange(n), rng.randrange(n))
                measured = True
        elif r < 0.65:
            qc.reset(rng.randrange(n))
        else:
            if rng.random() < 0.6:
                cond = (qc.clbits[rng.randrange(n)], rng.randrange(2))
            else:
                cond = (qc.cregs[0], rng.randrange(2**n))
            if rng.random() < 0.5:
                with qc.if_test(cond):
                    gate(qc)
            else:
                with qc.if_test(cond) as else_:
                    gate(qc)
                with else_:
                    gate(qc)
    qc.measure(range(n), range(n))
    return qc


def circuits():
    yield "teleportation_bits", teleportation()
    yield "if_else_bits", if_else_bits()
    yield "register_else", register_else()
    for n in range(3, 7):
        yield f"random_if_else{n}", random_circuit(n, 30, 700 + n)


def build(directory, shots, seed):
    from qiskit import qasm3, transpile
    from qiskit_aer import AerSimulator

    sim = AerSimulator(method="statevector", precision="double")
    for name, qc in circuits():
        with open(os.path.join(directory, name + ".qasm3"), "w") as f:
            f.write(qasm3.dumps(qc))
        result = sim.run(
            transpile(qc, sim, optimization_level=0), shots=shots, seed_simulator=seed
        ).result()
        with open(os.path.join(directory, name + ".aer.json"), "w") as f:
            json.dump(result.get_counts(), f)


def compare(directory):
    out = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.aer.json"))):
        name = os.path.basename(path)[: -len(".aer.json")]
        with open(path) as f:
            aer = json.load(f)
        with open(os.path.join(directory, name + ".ours.json")) as f:
            ours = json.load(f)
        p, dof = homogeneity(aer, ours)
        out[name] = {"aer": aer, "p": p, "dof": dof}
    print(json.dumps(out))


if __name__ == "__main__":
    if sys.argv[1] == "build":
        build(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif sys.argv[1] == "compare":
        compare(sys.argv[2])
    else:
        sys.exit(f"unknown mode {sys.argv[1]!r}: build or compare")
