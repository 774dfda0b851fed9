"""Reference state vectors from Qiskit Aer's statevector simulator, for the simulator's tests.

Usage: python aer_statevector.py OUT_DIR FILE.qasm...
Writes OUT_DIR/NAME.bin for each FILE: the final state as little-endian complex128, basis state
i at position i (qubit 0 the least significant bit). Measurements are removed first: the tests
compare the unitary part.
"""
import os
import sys

import numpy as np
from qiskit import qasm2, transpile
from qiskit_aer import AerSimulator

out_dir = sys.argv[1]
sim = AerSimulator(method="statevector", precision="double")
for path in sys.argv[2:]:
    qc = qasm2.load(path, custom_instructions=qasm2.LEGACY_CUSTOM_INSTRUCTIONS)
    qc.remove_final_measurements()
    qc.save_statevector()
    result = sim.run(transpile(qc, sim, optimization_level=0)).result()
    state = np.asarray(result.get_statevector(), dtype=np.complex128)
    name = os.path.splitext(os.path.basename(path))[0]
    state.astype("<c16").tofile(os.path.join(out_dir, name + ".bin"))
