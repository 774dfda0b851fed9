"""The state vector over MPI ranks against Qiskit Aer (bench/qsim-mpi-vs-aer)."""
import json
import os
import subprocess
import sys
import time

import numpy as np

from qsim_circuits import ising, layered, qft

BIN = os.environ.get("CXLTIER", "target/release/cxltier")
HERE = os.path.dirname(os.path.abspath(__file__))
AER = os.path.join(HERE, "..", "crates", "cxltier-qsim", "tests", "aer_statevector.py")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_btl_vader_single_copy_mechanism="none")
CACHE = "bench/cache/mpi-vs-aer"
SPILL = os.path.join(CACHE, "spill")
os.makedirs(SPILL, exist_ok=True)
qubits = [int(q) for a in sys.argv[1:] for q in a.split()]


def ours(ranks, path, indices, extra):
    cmd = [BIN, "qsim", path, "--amplitudes", ",".join(map(str, indices)), "--json", "--threads", "1"] + extra
    if ranks > 1:
        cmd = ["mpirun", "--oversubscribe", "-np", str(ranks)] + cmd
    t = time.monotonic()
    out = subprocess.run(cmd, env=ENV, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: {out.stderr}")
    return json.loads(out.stdout), time.monotonic() - t


print(f"{'circuit':8} {'qubits':>6} {'ranks':>5} {'mode':12} {'max |ours - Aer|':>16} {'exchanges':>9} {'wall s':>7}")
worst = 0.0
for n in qubits:
    for name, make in [("qft", qft), ("ising", lambda q: ising(q, 4)), ("random", lambda q: layered(q, 8, q, toffoli=True))]:
        path = os.path.join(CACHE, f"{name}{n}.qasm")
        with open(path, "w") as f:
            f.write("\n".join(make(n)) + "\n")
        subprocess.run([sys.executable, AER, CACHE, path], check=True)
        aer = np.fromfile(os.path.join(CACHE, f"{name}{n}.bin"), dtype="<c16")
        stride = (1 << n) // 256
        spread = {i * stride + (i * 7919) % stride for i in range(256)}
        top = set(np.argsort(-np.abs(aer))[:32].tolist())
        indices = sorted(spread | top)
        for ranks in (1, 2, 4, 8):
            part = (16 << n) // ranks
            for mode, extra in [("memory", []), ("out_of_core", ["--memory-limit", str(max(part // 4, 128 << 10)), "--ssd", SPILL])]:
                doc, wall = ours(ranks, path, indices, extra)
                assert doc["mode"] == mode, (doc["mode"], mode)
                got = doc["amplitudes"]
                diff = max(abs(complex(*got[str(i)]) - aer[i]) for i in indices)
                worst = max(worst, diff)
                ex = doc.get("distribution", {}).get("exchanges", 0)
                print(f"{name:8} {n:>6} {ranks:>5} {mode:12} {diff:>16.2e} {ex:>9} {wall:>7.2f}", flush=True)
        os.unlink(os.path.join(CACHE, f"{name}{n}.bin"))
print(f"worst difference from Aer: {worst:.2e} (target: 1e-9 or less): {'met' if worst <= 1e-9 else 'NOT met'}")
sys.exit(0 if worst <= 1e-9 else 1)
