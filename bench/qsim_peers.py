"""Peers for bench/qsim-vs-peers: generate benchmark circuits, and time Qiskit Aer, qsim and qulacs on them.

  python qsim_peers.py circuit N DEPTH SEED OUT.qasm     write a layered random circuit
  python qsim_peers.py aer FILE.qasm THREADS f64|f32      print seconds Aer spent simulating
  python qsim_peers.py qsim FILE.qasm THREADS             print seconds qsim spent (f32 only)
  python qsim_peers.py qulacs FILE.qasm THREADS           print seconds qulacs spent (f64 only)
  python qsim_peers.py qulacs-state FILE.qasm OUT.npy     write qulacs's final state (a check)
  python qsim_peers.py warm-for N f64|f32                 touch and free the memory `warm_for` says

Every timed run starts with memory that was just freed (`warm_for`: 1 GiB or twice the state's
bytes, whichever is more, touched and freed right before the timer starts: in the peer's own
process after its imports, and just before ours starts). On this VM the hypervisor takes back
memory that stayed free for about two seconds (virtio-balloon free page reporting), and the
first touch of such memory cost about 5 ms per MiB (a 26-qubit f32 state: 2.6 s), which fell on
whichever tool happened to allocate cold memory. Twice the state was not enough: the kernel
hands out its smallest free blocks first, and huge pages came from cold fragments while the
warm memory sat in larger blocks; 1 GiB takes those up too. Real hardware has no such cost.

The circuit: DEPTH layers, each a random single-qubit rotation (u3) on every qubit, then CX on
neighbouring pairs alternating between even and odd offsets. Gate counts are what the QASM holds.
"""
import math
import random
import sys
import time


def warm(nbytes):
    """Touch `nbytes` of memory and give it back, so that the next allocation finds it resident."""
    import numpy as np
    a = np.ones(max(int(nbytes) // 8, 1))
    del a


def state_bytes(n, precision):
    return (1 << n) * (8 if precision == 'f32' else 16)


def warm_for(n, precision):
    """Warm memory for a state of `n` qubits at `precision`."""
    warm(max(1 << 30, 2 * state_bytes(n, precision)))


def circuit(n, depth, seed, out):
    rng = random.Random(seed)
    lines = ['OPENQASM 2.0;', 'include "qelib1.inc";', f'qreg q[{n}];']
    for layer in range(depth):
        for q in range(n):
            a, b, c = (rng.uniform(-math.pi, math.pi) for _ in range(3))
            lines.append(f'u3({a!r},{b!r},{c!r}) q[{q}];')
        for q in range(layer % 2, n - 1, 2):
            lines.append(f'cx q[{q}],q[{q + 1}];')
    with open(out, 'w') as f:
        f.write('\n'.join(lines) + '\n')


def aer(path, threads, precision):
    from qiskit import qasm2, transpile
    from qiskit_aer import AerSimulator
    qc = qasm2.load(path, custom_instructions=qasm2.LEGACY_CUSTOM_INSTRUCTIONS)
    qc.save_expectation_value  # noqa: B018 (Aer's instructions are registered on import)
    sim = AerSimulator(method='statevector', precision='double' if precision == 'f64' else 'single',
                       max_parallel_threads=threads, max_parallel_experiments=1)
    tqc = transpile(qc, sim, optimization_level=0)
    tqc.measure_all()
    warm_for(qc.num_qubits, precision)
    result = sim.run(tqc, shots=1).result()
    # time_taken of the experiment: Aer's own clock around the simulation, without Python.
    print(result.results[0].time_taken)


def qsim(path, threads):
    import cirq
    import qsimcirq
    from qiskit import qasm2
    qc = qasm2.load(path, custom_instructions=qasm2.LEGACY_CUSTOM_INSTRUCTIONS)
    qubits = cirq.LineQubit.range(qc.num_qubits)
    ops = []
    for inst in qc.data:
        name = inst.operation.name
        qs = [qubits[qc.find_bit(q).index] for q in inst.qubits]
        if name == 'u3':
            theta, phi, lam = (float(p) for p in inst.operation.params)
            # Qiskit's U(theta, phi, lambda) as an explicit matrix (cirq has no u3).
            m = [[math.cos(theta / 2), -complex(math.cos(lam), math.sin(lam)) * math.sin(theta / 2)],
                 [complex(math.cos(phi), math.sin(phi)) * math.sin(theta / 2),
                  complex(math.cos(phi + lam), math.sin(phi + lam)) * math.cos(theta / 2)]]
            import numpy as np
            ops.append(cirq.MatrixGate(np.array(m, dtype=np.complex128)).on(*qs))
        elif name == 'cx':
            ops.append(cirq.CNOT(*qs))
        else:
            raise SystemExit(f'qsim peer: gate {name} not handled')
    c = cirq.Circuit(ops, strategy=cirq.InsertStrategy.EARLIEST)
    c.append(cirq.measure(*qubits, key='m'))
    sim = qsimcirq.QSimSimulator(qsim_options=qsimcirq.QSimOptions(cpu_threads=threads, max_fused_gate_size=2))
    sim.run(cirq.Circuit([cirq.H(q) for q in qubits[:2]] + [cirq.measure(qubits[0], key='w')]), repetitions=1)
    warm_for(qc.num_qubits, 'f32')
    start = time.perf_counter()
    sim.run(c, repetitions=1)
    print(time.perf_counter() - start)


def qulacs_circuit(path):
    """The layered circuit (u3 and cx only, as circuit() writes them) as a qulacs circuit."""
    from qiskit import qasm2
    from qulacs import QuantumCircuit
    from qulacs.gate import CNOT, U3
    qc = qasm2.load(path, custom_instructions=qasm2.LEGACY_CUSTOM_INSTRUCTIONS)
    c = QuantumCircuit(qc.num_qubits)
    for inst in qc.data:
        name = inst.operation.name
        qs = [qc.find_bit(q).index for q in inst.qubits]
        if name == 'u3':
            theta, phi, lam = (float(p) for p in inst.operation.params)
            c.add_gate(U3(qs[0], theta, phi, lam))
        elif name == 'cx':
            c.add_gate(CNOT(qs[0], qs[1]))
        else:
            raise SystemExit(f'qulacs peer: gate {name} not handled')
    return qc.num_qubits, c


def qulacs(path, threads):
    # qulacs takes its thread count from OpenMP's environment, read when the library loads.
    import os
    os.environ['OMP_NUM_THREADS'] = str(threads)
    from qulacs import QuantumState
    n, c = qulacs_circuit(path)
    warm_for(n, 'f64')
    state = QuantumState(n)
    start = time.perf_counter()
    state.set_zero_state()
    c.update_quantum_state(state)
    print(time.perf_counter() - start)


def qulacs_state(path, out):
    import numpy as np
    from qulacs import QuantumState
    n, c = qulacs_circuit(path)
    state = QuantumState(n)
    c.update_quantum_state(state)
    np.save(out, state.get_vector())


if __name__ == '__main__':
    cmd = sys.argv[1]
    if cmd == 'circuit':
        circuit(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    elif cmd == 'aer':
        aer(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    elif cmd == 'qsim':
        qsim(sys.argv[2], int(sys.argv[3]))
    elif cmd == 'qulacs':
        qulacs(sys.argv[2], int(sys.argv[3]))
    elif cmd == 'warm-for':
        warm_for(int(sys.argv[2]), sys.argv[3])
    elif cmd == 'qulacs-state':
        qulacs_state(sys.argv[2], sys.argv[3])
    else:
        raise SystemExit(__doc__)
