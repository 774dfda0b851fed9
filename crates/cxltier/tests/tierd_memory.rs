//! `cxltier tierd --nvme` (memory mode): bad settings are refused, naming the problem and the
//! fix, before anything is written or started. The live run is in the lab (lab/checks/tierd.sh).

mod util;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use util::{assert_refused, stderr, BIN};

fn tierd(args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("tierd")
        .args(args)
        .args(["--pid", &std::process::id().to_string()])
        .output()
        .expect("run cxltier")
}

/// `cxltier tierd ARGS`, which must end with exit `code` and a message holding every one of
/// `needles`: its stderr.
fn refused(args: &[&str], code: i32, needles: &[&str]) -> String {
    assert_refused(args, &tierd(args), code, needles)
}

/// A 4M DRAM budget and the swap file `nvme`, then `extra`.
fn budgeted<'a>(nvme: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    [&["--dram-budget", "4M", "--nvme", nvme][..], extra].concat()
}

/// A directory that reads as a cgroup `app` (below a parent) with this process in it: the
/// scratch directory and the cgroup's path.
fn cgroup_with_this_process() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let cg = dir.path().join("app");
    std::fs::create_dir(&cg).unwrap();
    std::fs::write(dir.path().join("cgroup.procs"), "").unwrap();
    std::fs::write(cg.join("cgroup.procs"), format!("{}\n", std::process::id())).unwrap();
    (dir, cg)
}

/// `tierd --dry-run` with a 4M DRAM budget, `extra`, the cgroup `cg` and an 8M swap file `swap`.
fn dry_run_args(cg: &Path, swap: &Path, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["tierd", "--dry-run", "--dram-budget", "4M"]
        .iter()
        .chain(extra)
        .map(|a| a.to_string())
        .collect();
    args.extend([
        "--cgroup".to_string(),
        cg.display().to_string(),
        "--nvme".to_string(),
        format!("{}:8M", swap.display()),
    ]);
    args
}

/// [`dry_run_args`] run, which must end with exit `code`: its stderr.
fn dry_run(cg: &Path, swap: &Path, extra: &[&str], code: i32) -> String {
    let args = dry_run_args(cg, swap, extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_refused(&args, &util::cxltier(&args), code, &[])
}

fn swaps() -> String {
    std::fs::read_to_string("/proc/swaps").unwrap_or_default()
}

#[test]
fn memory_mode_needs_a_dram_budget() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let f = dir.path().join("t.swap:8M");
    refused(
        &["--nvme", f.to_str().unwrap()],
        2,
        &["--nvme needs --dram-budget"],
    );
}

#[test]
fn a_swap_file_on_tmpfs_is_refused_as_unsupported() {
    let shm = std::path::Path::new("/dev/shm");
    if !shm.is_dir() {
        return;
    }
    let dir = tempfile::tempdir_in(shm).unwrap();
    let f = format!("{}/t.swap:8M", dir.path().display());
    let before = swaps();
    let e = refused(&["--dram-budget", "4M", "--nvme", &f], 4, &[]);
    assert!(e.contains("on tmpfs") && e.contains("block device"), "{e}");
    assert!(!dir.path().join("t.swap").exists());
    assert_eq!(swaps(), before);
}

#[test]
fn an_existing_file_is_never_overwritten() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let f = dir.path().join("data");
    std::fs::write(&f, b"keep me").unwrap();
    let nvme = format!("{}:8M", f.display());
    refused(&budgeted(&nvme, &[]), 2, &["never overwrites"]);
    assert_eq!(std::fs::read(&f).unwrap(), b"keep me");
}

#[test]
fn a_new_file_needs_a_size_and_the_stall_goal_a_percentage() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let f = dir.path().join("t.swap");
    refused(&budgeted(f.to_str().unwrap(), &[]), 2, &[":8G"]);

    let nvme = format!("{}:8M", f.display());
    for bad in ["0", "100", "nan"] {
        refused(
            &budgeted(&nvme, &["--max-stall-pct", bad]),
            2,
            &["--max-stall-pct"],
        );
    }
    refused(
        &budgeted(&nvme, &["--cxl-budget", "lots"]),
        2,
        &["--cxl-budget \"lots\""],
    );
    let page_cluster = std::fs::read_to_string("/proc/sys/vm/page-cluster").ok();
    let zswap = std::fs::read_to_string("/sys/module/zswap/parameters/enabled").ok();
    // Each bad value of the system-wide settings is refused naming its flag (and, for the
    // readahead, the values it takes).
    let settings = [
        ("--swap-readahead", &["6", "fast", "-1"][..], "auto, keep"),
        ("--zswap", &["0", "101", "lots"][..], "--zswap"),
    ];
    for (flag, values, says) in settings {
        for bad in values {
            let setting = format!("{flag}={bad}");
            refused(&budgeted(&nvme, &[&setting]), 2, &[flag, says]);
        }
    }
    assert_eq!(
        std::fs::read_to_string("/proc/sys/vm/page-cluster").ok(),
        page_cluster,
        "nothing written"
    );
    assert_eq!(
        std::fs::read_to_string("/sys/module/zswap/parameters/enabled").ok(),
        zswap,
        "nothing written"
    );
    // A slowdown goal: a percentage, and a progress signal that can be read now.
    let progress = dir.path().join("progress");
    let spec = format!("file:{}", progress.display());
    let slowdown = |pct| budgeted(&nvme, &["--max-slowdown-pct", pct, "--progress", &spec]);
    refused(&slowdown("10"), 2, &["--progress", "growing counter"]);
    std::fs::write(&progress, "12\n").unwrap();
    for bad in ["0", "100", "nan"] {
        refused(&slowdown(bad), 2, &["--max-slowdown-pct"]);
    }
    assert!(!f.exists());
}

#[test]
fn memory_mode_flags_need_nvme_and_exclude_the_tuner() {
    refused(&["--cxl-budget", "4M"], 2, &["--nvme"]);
    refused(&["--max-stall-pct", "5"], 2, &[]);
    // A slowdown goal needs a progress signal, and is one goal or the other.
    refused(
        &["--nvme", "/dev/null", "--max-slowdown-pct", "10"],
        2,
        &["--progress"],
    );
    refused(
        &[
            "--nvme",
            "/dev/null",
            "--max-slowdown-pct",
            "10",
            "--max-stall-pct",
            "5",
            "--progress",
            "file:/x",
        ],
        2,
        &["cannot be used with"],
    );
    for flag in [&["--swap-readahead", "0"][..], &["--zswap"][..]] {
        refused(flag, 2, &["--nvme"]);
    }
    refused(
        &["--nvme", "/dev/null", "--tune", "--progress", "file:/x"],
        2,
        &["cannot be used with"],
    );
}

#[test]
fn a_cgroup_without_the_memory_controller_is_refused_naming_the_fix() {
    // A directory that reads as a cgroup with this process in it, but has no memory.high: the
    // memory controller is not enabled there. Refused before any swap area or limit is written.
    let (dir, cg) = cgroup_with_this_process();
    let swap = dir.path().join("t.swap");
    let before = swaps();
    let e = dry_run(&cg, &swap, &[], 4);
    assert!(
        e.contains("memory.high") && e.contains("echo +memory >") && e.contains("subtree_control"),
        "{e}"
    );
    assert!(!swap.exists());
    assert_eq!(swaps(), before);
}

#[test]
fn a_cgroup_v1_memory_cgroup_is_planned_with_v1_limits_and_a_dry_run_writes_nothing() {
    // A directory laid out as a cgroup v1 memory cgroup (memory.limit_in_bytes, no memory.high)
    // holding this process. The lab's kernel has no cgroup v1 memory controller to mount
    // (CONFIG_MEMCG_V1 off), so the files are the kernel's layout, not the kernel: the plan is
    // checked here, the writes and their restoring in the library's unit tests.
    let (dir, cg) = cgroup_with_this_process();
    let unlimited = "9223372036854771712\n";
    std::fs::write(cg.join("memory.limit_in_bytes"), unlimited).unwrap();
    std::fs::write(cg.join("memory.memsw.limit_in_bytes"), unlimited).unwrap();
    std::fs::write(cg.join("memory.usage_in_bytes"), "8388608\n").unwrap();
    let oom = "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n";
    std::fs::write(cg.join("memory.oom_control"), oom).unwrap();
    let swap = dir.path().join("t.swap");
    let before = swaps();
    let args = dry_run_args(&cg, &swap, &["--duration", "1"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let e = stderr(&util::cxltier(&args));
    assert!(
        e.contains("cgroup v1") && e.contains("memory.limit_in_bytes") && e.contains("OOM killer"),
        "{e}"
    );
    // Whatever else this host allows (DAMON may be another tool's), nothing was written.
    assert_eq!(
        std::fs::read_to_string(cg.join("memory.limit_in_bytes")).unwrap(),
        unlimited
    );
    assert_eq!(
        std::fs::read_to_string(cg.join("memory.oom_control")).unwrap(),
        oom
    );
    assert!(!swap.exists());
    assert_eq!(swaps(), before);
}
