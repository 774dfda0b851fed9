//! The lab suite: boots each QEMU topology once (`lab/run`), runs its check script from
//! `lab/checks/` inside the guest, adds the checks made on the host from the guest's data, and fails
//! listing every failed or missing check. Needs what `scripts/lab-deps` installs and network access
//! on the first run (see lab/README.md). Run with `cargo test -p cxltier-lab -- --nocapture`.

use cxltier_lab::{boot, host, ras, record_failure, Report};
use std::sync::Mutex;
use std::time::Duration;

/// At most two guests at a time, in two lanes: the `cxl` boot (the longest, about 5 minutes) in
/// one, the `hmat`, RAS and cgroup v1 boots one after the other in the other (run the suite with
/// `--test-threads=2`; with 1 every boot waits for the one before). A TCG guest with two vCPUs
/// used 0.85 of the host's two cores on average (sampled every 5 s through a RAS boot,
/// 2026-11-25): most of its time is spent waiting (DAMON intervals, reports, the device's
/// events), so two side by side share the machine without a third. Nothing the guests check
/// judges time, and the checks that wait for events (tierd's hot set, the RAS records) wait for
/// them, not for a fixed pause.
static SECOND_LANE: Mutex<()> = Mutex::new(());

/// A hang guard: a boot (build, boot, checks, power-off) still running after this is killed. The
/// `cxl` guest's checks take minutes (QEMU emulates each access to CXL memory, and tierd's checks
/// wait for a workload whose hot set moves), and far more on a busy machine: with four other
/// builds and two CPU hogs beside it, a `cxl` boot took 871 s (2026-11-25), close to the 900 s
/// this used to be. How long a boot takes is not what the suite judges.
const BOOT_TIMEOUT: Duration = Duration::from_secs(2400);

/// Checks both check scripts run inside the guest (lab/checks/lib.sh).
const GUEST_COMMON: &[&str] = &[
    "cxltier-runs",
    "kernel-6.12",
    "node1-cpuless",
    "node1-has-memory",
    "weighted-interleave-sysfs",
    "topo-runs",
    "topo-json-runs",
    "apply-dry-run-unchanged",
    "apply-dry-run-prints",
    "apply-changes-table",
    "apply-prints-old-and-new",
    "apply-unknown-node",
    "apply-unknown-node-unchanged",
    "apply-zero-weight",
    "apply-zero-weight-unchanged",
    "run-weights-runs",
    "run-interleave-runs",
    "run-bind-node1-runs",
    "show-pid-runs",
    "touch-bad-size",
    "run-bind-unknown-node",
];

/// Checks made on the host for both topologies (cxltier_lab::host::common).
const HOST_COMMON: &[&str] = &[
    "topo-json-parses",
    "topo-json-nodes",
    "topo-agrees-with-numactl",
    "topo-json-weighted-interleave",
    "weights-3-1-places-75-percent-on-node0",
    "interleave-places-50-percent-on-node0",
    "bind-1-places-all-on-node1",
    "show-pid-sees-node1",
];

/// `cxltier tierd` on both topologies: lab/checks/tierd.sh in the guest, cxltier_lab::tierd on the
/// host.
const TIERD: &[&str] = &[
    "tierd-runs",
    "tierd-says-source-and-system-wide",
    "tierd-stop-leaves-target-running",
    "tierd-damon-removed",
    "tierd-workload-exits-cleanly",
    "tierd-dry-run-moves-nothing",
    "tierd-rate-runs",
    "tierd-huge-pages-keep-the-budget",
    "tierd-huge-workload-intact",
    "tierd-target-exit-handled",
    "tierd-no-such-pid",
    "tierd-bad-budget",
    "tierd-idle-page-unsupported",
    "tierd-bad-access-source",
    "tierd-hot-set-reaches-node0",
    "tierd-within-rate-limit",
    "tierd-keeps-dram-budget",
    "tierd-untargeted-untouched",
    "tierd-show-reflects-moves",
    "tierd-soft-dirty-sees-writes",
    "tierd-workload-intact",
    // lab/checks/tierd.sh check_tierd_tune, and cxltier_lab::tierd::tune_checks
    "tierd-tune-runs",
    "tierd-sweep-runs",
    "tierd-tune-leaves-target-running",
    "tierd-tune-pid-policy-named",
    "tierd-tune-bad-progress",
    // cxltier_lab::tierd::tune_checks (how close the tuner comes to the sweep's best is measured
    // by bench/tierd-tuner-vs-sweep, not judged here)
    "tierd-tuner-converges-on-a-measured-split",
    "tierd-sweep-measures-every-split-and-names-the-fastest",
];

const HMAT: &[&str] = &[
    // lab/checks/hmat.sh
    "hmat-sysfs-node0",
    "hmat-sysfs-node1",
    "plan-live-profile",
    "apply-plan-dry-run",
    // lab/checks/tierd.sh check_tierd_cgroup
    "tierd-cgroup-follows-members",
    "tierd-metrics-served",
    "tierd-needs-root",
    // lab/checks/tierd.sh check_tierd_memory (the scratch disk is on this topology only)
    "tierd-memory-dry-run-changes-nothing",
    "tierd-memory-pages-out-to-nvme",
    "tierd-memory-swap-gone-after-stop",
    "tierd-memory-target-still-running",
    "tierd-memory-readahead-restored",
    "tierd-memory-sla-reads-pressure",
    "tierd-memory-workload-intact",
    "tierd-memory-zswap",
    "tierd-memory-zswap-workload-intact",
    "tierd-memory-damos-pageout",
    "tierd-memory-damos-workload-intact",
    "tierd-memory-slowdown-goal",
    "tierd-memory-slowdown-workload-intact",
    "tierd-memory-in-chunks",
    "tierd-memory-three-tiers",
    "tierd-memory-in-chunks-workload-intact",
    "tierd-memory-full-nvme-stops-offloading",
    "tierd-memory-full-nvme-workload-intact",
    "tierd-memory-cgroup-dry-run",
    "tierd-memory-cgroup-limits",
    "tierd-memory-cgroup-pressure-and-refaults",
    "tierd-memory-cgroup-workload-intact",
    "tierd-memory-swap-file",
    "tierd-memory-swap-file-workload-intact",
    "tierd-memory-needs-budget",
    // cxltier_lab::host::hmat
    "topo-json-hmat-node0",
    "topo-json-hmat-node1",
    "topo-json-node1-memory-only",
    "topo-json-node1-in-slower-tier",
    // lab/checks/hmat.sh: no CXL here
    "ras-no-cxl-devices",
    "ras-watch-no-cxl-devices",
];

const CXL: &[&str] = &[
    // lab/checks/cxl.sh
    "cxl-region0",
    "dax-target-node1",
    "memory-tiers-split",
    "plan-falls-back-without-figures",
    "apply-plan-needs-figures",
    // lab/checks/store.sh
    "store-serve-starts",
    "store-ycsb-load",
    "store-ycsb-reads-correct-data",
    "store-cxl-arena-on-node1",
    "store-dram-arena-on-node0",
    "store-objects-in-cxl",
    "store-show-sees-node1",
    // lab/checks/probe.sh (emulator timings: behaviour only)
    "probe-nodes-0-1-completes",
    "probe-json-reports-node1",
    "probe-node1-pages-on-node1",
    "probe-node1-is-cxl",
    "probe-profile-accepted-by-plan",
    "probe-profile-two-tiers",
    "probe-profile-accepted-by-topo",
    "probe-interleaved-completes",
    "probe-weights-restored",
    "probe-interleaved-3-to-1",
    "probe-loaded-latency-plot",
    "probe-buffer-too-big",
    // lab/checks/tierd.sh check_tierd_weights, and cxltier_lab::tierd::weights_checks
    "tierd-continuous-runs",
    "tierd-weights-said-on-stderr",
    "tierd-weights-restored",
    "tierd-weights-target-left-running",
    "tierd-weights-dry-run",
    "tierd-weights-follow-tuned-split",
    "tierd-new-pages-follow-weights",
    // lab/checks/qsim.sh
    "qsim-interleave-completes",
    "qsim-chunks-3-to-1",
    "qsim-ghz-amplitudes",
    "qsim-chunks-on-cxl",
    "qsim-unknown-node",
    // cxltier_lab::host::cxl
    "topo-json-node1-cxl",
    "topo-json-cxl-memdev",
    "topo-json-cxl-region",
    "topo-json-node1-in-slower-tier",
];

fn run_topology(topology: &str, specific: &[&str], host_checks: fn(&mut Report)) {
    // The `cxl` boot has the first lane to itself.
    let _guard = (topology != "cxl").then(|| {
        SECOND_LANE
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    });
    let mut report = boot(topology, &format!("{topology}.sh"), BOOT_TIMEOUT);
    host::common(&mut report);
    host_checks(&mut report);
    cxltier_lab::tierd::checks(&mut report);
    println!("{}", report.summary());
    let expected: Vec<&str> = GUEST_COMMON
        .iter()
        .chain(HOST_COMMON)
        .chain(TIERD)
        .chain(specific)
        .copied()
        .collect();
    if let Err(problems) = report.verdict(&expected) {
        record_failure(&format!("topology_{topology}"), &problems);
        panic!("{problems}");
    }
}

#[test]
fn topology_hmat() {
    run_topology("hmat", HMAT, |report| {
        host::hmat(report);
        cxltier_lab::tierd::tune_checks(report);
    });
}

#[test]
fn topology_cxl() {
    run_topology("cxl", CXL, |report| {
        host::cxl(report);
        cxltier_lab::tierd::tune_checks(report);
        cxltier_lab::tierd::weights_checks(report);
    });
}

/// Checks lab/checks/memcg-v1.sh runs inside the guest on bookworm's 6.1 kernel.
const MEMCG_V1: &[&str] = &[
    "cxltier-runs",
    "kernel-6.1",
    "memcg-v1-mounted",
    "memcg-v1-target-charged",
    "memcg-v1-tierd-names-what-is-missing",
    "memcg-v1-limits-on-a-real-kernel",
    "memcg-v1-reclaimed-into-swap",
    "memcg-v1-limits-written-back",
    "memcg-v1-target-still-running",
    "memcg-v1-workload-intact",
];

/// Topology `hmat` on bookworm's 6.1 kernel (`LAB_KERNEL=6.1`), the last Debian kernel with the
/// cgroup v1 memory controller: tierd's cgroup v1 limits set, seen and written back by the real
/// kernel (cxltier-tierd's `memcg::tests::v1_limits_on_a_real_kernel`, built statically and run
/// in the guest), and tierd's refusal on a kernel without DAMON or idle-page tracking. In the
/// second lane, after the hmat and RAS boots (it takes about a minute): its name sorts after
/// theirs and after `topology_cxl`, so that the `cxl` boot, the longest, starts first.
#[test]
fn topology_hmat_on_kernel_6_1_cgroup_v1() {
    let _guard = SECOND_LANE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let tests = match cxltier_lab::static_unit_tests("cxltier-tierd") {
        Ok(path) => path,
        Err(e) => {
            record_failure("topology_hmat_on_kernel_6_1_cgroup_v1", &e);
            panic!("{e}");
        }
    };
    // lab/checks/ and the test binary, as the guest's /lab.
    let files = cxltier_lab::repo_root().join("lab/cache/run/memcg-v1-files");
    let _ = std::fs::remove_dir_all(&files);
    std::fs::create_dir_all(&files).expect("lab/cache/run is writable");
    for entry in std::fs::read_dir(cxltier_lab::repo_root().join("lab/checks")).expect("lab/checks")
    {
        let entry = entry.expect("lab/checks is readable");
        std::fs::copy(entry.path(), files.join(entry.file_name())).expect("copy a check script");
    }
    std::fs::copy(&tests, files.join("tierd-tests")).expect("copy the test binary");
    let mut report = cxltier_lab::boot_with(
        "hmat",
        "memcg-v1.sh",
        BOOT_TIMEOUT,
        &files,
        &[("LAB_KERNEL", "6.1")],
    );
    report.topology = "hmat on 6.1 (cgroup v1)".into();
    println!("{}", report.summary());
    if let Err(problems) = report.verdict(MEMCG_V1) {
        record_failure("topology_hmat_on_kernel_6_1_cgroup_v1", &problems);
        panic!("{problems}");
    }
}

/// Checks lab/checks/ras.sh runs inside the guest of the RAS boot.
const RAS_GUEST: &[&str] = &[
    "ras-inventory-runs",
    "ras-inventory-says-system-wide",
    "ras-instance-removed",
    "ras-inventory-sees-masked-internal-errors",
    "ras-table-runs",
    "ras-watch-dry-run-unchanged",
    "ras-store-loaded",
    "ras-victim-page-on-cxl",
    "ras-watch-runs",
    "ras-watch-says-system-wide",
    "ras-watch-instance-removed",
    "ras-watch-aer-masks-restored",
    "ras-victim-survives-soft-offline",
    "ras-store-restores-poisoned-keys",
    "ras-store-reads-correct-data-after-poison",
    "ras-tierd-moves-page-off-quarantined-frame",
    "ras-tierd-reports-quarantined-node",
    "ras-tierd-quarantine-target-survives",
    "ras-unknown-memdev",
    "ras-bad-memdev-name",
    "ras-zero-duration",
    "ras-watch-needs-root",
    "ras-poison-needs-root",
    "ras-inventory-without-root",
    "ras-watch-no-tracefs",
];

/// Topology `cxl` once more, with a QMP socket: the host injects every CXL error type QEMU offers
/// while `cxltier ras --watch --json` runs in the guest, and each must be reported with the right
/// type and device (cxltier_lab::ras).
#[test]
fn ras_injection_cxl() {
    let _guard = SECOND_LANE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    // QEMU sometimes aborts on its own assertion while the kernel recovers from the injected
    // fatal error (docs/ras.md): the run is made again, said out loud.
    let (mut report, injections) = cxltier_lab::boot_again_on_emulator_abort(
        "the injection run",
        || ras::boot_and_inject(BOOT_TIMEOUT),
        |(report, _)| &report.stderr,
    );
    let table = ras::host_checks(&mut report, &injections);
    println!("{}", report.summary());
    println!("injected -> reported by `cxltier ras --watch --json`:");
    for (what, how, result) in &table {
        println!("  {what} | {how} | {result}");
    }
    println!("records streamed:");
    for line in report.data("ras-watch").unwrap_or_default().lines() {
        println!("  {line}");
    }
    if report.checks.iter().any(|c| !c.pass) {
        for (block, title) in [
            ("ras-watch-err", "the watch's standard error"),
            ("ras-serve-err", "the server's standard error"),
            ("ras-dmesg", "the guest kernel's CXL and AER messages"),
        ] {
            println!("{title}:");
            for line in report.data(block).unwrap_or_default().lines() {
                println!("  {line}");
            }
        }
    }
    let host = ras::host_check_names();
    let expected: Vec<&str> = RAS_GUEST
        .iter()
        .copied()
        .chain(host.iter().map(String::as_str))
        .collect();
    if let Err(problems) = report.verdict(&expected) {
        record_failure("ras_injection_cxl", &problems);
        panic!("{problems}");
    }
}
