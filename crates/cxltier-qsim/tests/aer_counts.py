"""Reference counts from Qiskit Aer for dynamic circuits, and a chi-square test against ours.

Usage: python aer_counts.py SHOTS SEED FILE.qasm...
For each FILE.qasm, FILE.ours.json holds our counts (a JSON object, key -> count). Aer's
AerSimulator runs the circuit Qiskit reads from FILE.qasm with SHOTS shots and
seed_simulator=SEED; prints one JSON object: {NAME: {"aer": counts, "p": p_value, "dof": k}},
where p is the p-value of a chi-square test of homogeneity between the two samples (outcomes
seen fewer than 10 times in both together are pooled into one category: chi_square.py).
"""
import json
import os
import sys

from qiskit import qasm2, transpile
from qiskit_aer import AerSimulator

from chi_square import homogeneity

shots = int(sys.argv[1])
seed = int(sys.argv[2])
sim = AerSimulator(method="statevector", precision="double")
out = {}
for path in sys.argv[3:]:
    name = os.path.splitext(os.path.basename(path))[0]
    qc = qasm2.load(path, custom_instructions=qasm2.LEGACY_CUSTOM_INSTRUCTIONS)
    result = sim.run(transpile(qc, sim, optimization_level=0), shots=shots, seed_simulator=seed).result()
    aer = result.get_counts()
    with open(os.path.splitext(path)[0] + ".ours.json") as f:
        ours = json.load(f)
    p, dof = homogeneity(aer, ours)
    out[name] = {"aer": aer, "p": float(p), "dof": int(dof)}
print(json.dumps(out))
