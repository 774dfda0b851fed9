"""Reference counts from Qiskit Aer for dynamic circuits, and a chi-square test against ours.

Usage: python aer_counts.py SHOTS SEED FILE.qasm...
For each FILE.qasm, FILE.ours.json holds our counts (a JSON object, key -> count). Aer's
AerSimulator runs the circuit Qiskit reads from FILE.qasm with SHOTS shots and
seed_simulator=SEED; prints one JSON object: {NAME: {"aer": counts, "p": p_value, "dof": k}},
where p is the p-value of a chi-square test of homogeneity between the two samples (outcomes
seen fewer than 10 times in both together are pooled into one category, so that every expected
count is large enough for the chi-square approximation).
"""
import json
import os
import sys

from qiskit import qasm2, transpile
from qiskit_aer import AerSimulator
from scipy.stats import chi2_contingency

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
    keys = sorted(set(aer) | set(ours))
    rows = [[], []]
    rare = [0, 0]
    for k in keys:
        a, o = aer.get(k, 0), ours.get(k, 0)
        if a + o < 10:
            rare[0] += a
            rare[1] += o
        else:
            rows[0].append(a)
            rows[1].append(o)
    if rare[0] + rare[1] > 0:
        rows[0].append(rare[0])
        rows[1].append(rare[1])
    if len(rows[0]) < 2:
        # One outcome in both: the samples agree exactly.
        p, dof = 1.0, 0
    else:
        _, p, dof, _ = chi2_contingency(rows, correction=False)
    out[name] = {"aer": aer, "p": float(p), "dof": int(dof)}
print(json.dumps(out))
