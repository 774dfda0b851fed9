"""Rewrite OpenQASM 2 files as Qiskit writes them in OpenQASM 3, for the simulator's tests.

Usage: python qasm3_dumps.py FILE.qasm...
For each FILE.qasm, writes FILE.qasm3: `qiskit.qasm3.dumps` of the circuit Qiskit reads from it.
"""
import os
import sys

from qiskit import qasm2, qasm3

for path in sys.argv[1:]:
    qc = qasm2.load(path, custom_instructions=qasm2.LEGACY_CUSTOM_INSTRUCTIONS)
    with open(os.path.splitext(path)[0] + ".qasm3", "w") as f:
        f.write(qasm3.dumps(qc))
