"""Time Qiskit Aer's AerSimulator (statevector, f64) on a dynamic circuit.

Usage: python aer_time.py FILE.qasm SHOTS [branching]
With `branching`, Aer's shot branching (shot_branching_enable) is on; by default it is off, as
Aer ships. Prints the wall time of the run and Aer's own time_taken.
"""
import sys, time
from qiskit import qasm2, transpile
from qiskit_aer import AerSimulator
path, shots = sys.argv[1], int(sys.argv[2])
branching = len(sys.argv) > 3 and sys.argv[3] == "branching"
qc = qasm2.load(path, custom_instructions=qasm2.LEGACY_CUSTOM_INSTRUCTIONS)
sim = AerSimulator(method="statevector", precision="double", shot_branching_enable=branching)
t = transpile(qc, sim, optimization_level=0)
t0 = time.time()
r = sim.run(t, shots=shots, seed_simulator=1).result()
wall = time.time() - t0
print(f"{path} shots={shots} shot_branching={branching} wall={wall:.2f}s aer_time_taken={r.time_taken:.2f}s outcomes={len(r.get_counts())}")
