//! `cxltier tierd --nvme` (memory mode): bad settings are refused, naming the problem and the
//! fix, before anything is written or started. The live run is in the lab (lab/checks/tierd.sh).

use std::process::{Command, Output};

fn tierd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cxltier"))
        .arg("tierd")
        .args(args)
        .args(["--pid", &std::process::id().to_string()])
        .output()
        .expect("run cxltier")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn swaps() -> String {
    std::fs::read_to_string("/proc/swaps").unwrap_or_default()
}

#[test]
fn memory_mode_needs_a_dram_budget() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let f = dir.path().join("t.swap:8M");
    let out = tierd(&["--nvme", f.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        stderr(&out).contains("--nvme needs --dram-budget"),
        "{}",
        stderr(&out)
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
    let out = tierd(&["--dram-budget", "4M", "--nvme", &f]);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    let e = stderr(&out);
    assert!(e.contains("on tmpfs") && e.contains("block device"), "{e}");
    assert!(!dir.path().join("t.swap").exists());
    assert_eq!(swaps(), before);
}

#[test]
fn an_existing_file_is_never_overwritten() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let f = dir.path().join("data");
    std::fs::write(&f, b"keep me").unwrap();
    let out = tierd(&[
        "--dram-budget",
        "4M",
        "--nvme",
        &format!("{}:8M", f.display()),
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        stderr(&out).contains("never overwrites"),
        "{}",
        stderr(&out)
    );
    assert_eq!(std::fs::read(&f).unwrap(), b"keep me");
}

#[test]
fn a_new_file_needs_a_size_and_the_stall_goal_a_percentage() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let f = dir.path().join("t.swap");
    let out = tierd(&["--dram-budget", "4M", "--nvme", f.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(stderr(&out).contains(":8G"), "{}", stderr(&out));

    let nvme = format!("{}:8M", f.display());
    for bad in ["0", "100", "nan"] {
        let out = tierd(&[
            "--dram-budget",
            "4M",
            "--nvme",
            &nvme,
            "--max-stall-pct",
            bad,
        ]);
        assert_eq!(out.status.code(), Some(2), "{bad}: {out:?}");
        assert!(stderr(&out).contains("--max-stall-pct"), "{}", stderr(&out));
    }
    let out = tierd(&[
        "--dram-budget",
        "4M",
        "--nvme",
        &nvme,
        "--cxl-budget",
        "lots",
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        stderr(&out).contains("--cxl-budget \"lots\""),
        "{}",
        stderr(&out)
    );
    let page_cluster = std::fs::read_to_string("/proc/sys/vm/page-cluster").ok();
    let zswap = std::fs::read_to_string("/sys/module/zswap/parameters/enabled").ok();
    // Each bad value of the system-wide settings is refused naming its flag (and, for the
    // readahead, the values it takes).
    let refused = [
        ("--swap-readahead", &["6", "fast", "-1"][..], "auto, keep"),
        ("--zswap", &["0", "101", "lots"][..], "--zswap"),
    ];
    for (flag, values, says) in refused {
        for bad in values {
            let out = tierd(&[
                "--dram-budget",
                "4M",
                "--nvme",
                &nvme,
                &format!("{flag}={bad}"),
            ]);
            assert_eq!(out.status.code(), Some(2), "{flag}={bad}: {out:?}");
            assert!(
                stderr(&out).contains(flag) && stderr(&out).contains(says),
                "{}",
                stderr(&out)
            );
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
    let out = tierd(&[
        "--dram-budget",
        "4M",
        "--nvme",
        &nvme,
        "--max-slowdown-pct",
        "10",
        "--progress",
        &spec,
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        stderr(&out).contains("--progress") && stderr(&out).contains("growing counter"),
        "{}",
        stderr(&out)
    );
    std::fs::write(&progress, "12\n").unwrap();
    for bad in ["0", "100", "nan"] {
        let out = tierd(&[
            "--dram-budget",
            "4M",
            "--nvme",
            &nvme,
            "--max-slowdown-pct",
            bad,
            "--progress",
            &spec,
        ]);
        assert_eq!(out.status.code(), Some(2), "{bad}: {out:?}");
        assert!(
            stderr(&out).contains("--max-slowdown-pct"),
            "{}",
            stderr(&out)
        );
    }
    assert!(!f.exists());
}

#[test]
fn memory_mode_flags_need_nvme_and_exclude_the_tuner() {
    let out = tierd(&["--cxl-budget", "4M"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(stderr(&out).contains("--nvme"), "{}", stderr(&out));
    let out = tierd(&["--max-stall-pct", "5"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    // A slowdown goal needs a progress signal, and is one goal or the other.
    let out = tierd(&["--nvme", "/dev/null", "--max-slowdown-pct", "10"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(stderr(&out).contains("--progress"), "{}", stderr(&out));
    let out = tierd(&[
        "--nvme",
        "/dev/null",
        "--max-slowdown-pct",
        "10",
        "--max-stall-pct",
        "5",
        "--progress",
        "file:/x",
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        stderr(&out).contains("cannot be used with"),
        "{}",
        stderr(&out)
    );
    for flag in [&["--swap-readahead", "0"][..], &["--zswap"][..]] {
        let out = tierd(flag);
        assert_eq!(out.status.code(), Some(2), "{flag:?}: {out:?}");
        assert!(stderr(&out).contains("--nvme"), "{}", stderr(&out));
    }
    let out = tierd(&["--nvme", "/dev/null", "--tune", "--progress", "file:/x"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        stderr(&out).contains("cannot be used with"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_cgroup_without_the_memory_controller_is_refused_naming_the_fix() {
    // A directory that reads as a cgroup with this process in it, but has no memory.high: the
    // memory controller is not enabled there. Refused before any swap area or limit is written.
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let cg = dir.path().join("app");
    std::fs::create_dir(&cg).unwrap();
    std::fs::write(dir.path().join("cgroup.procs"), "").unwrap();
    std::fs::write(cg.join("cgroup.procs"), format!("{}\n", std::process::id())).unwrap();
    let swap = dir.path().join("t.swap");
    let before = swaps();
    let out = Command::new(env!("CARGO_BIN_EXE_cxltier"))
        .args(["tierd", "--dry-run", "--dram-budget", "4M", "--cgroup"])
        .arg(&cg)
        .arg("--nvme")
        .arg(format!("{}:8M", swap.display()))
        .output()
        .expect("run cxltier");
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    let e = stderr(&out);
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
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let cg = dir.path().join("app");
    std::fs::create_dir(&cg).unwrap();
    std::fs::write(dir.path().join("cgroup.procs"), "").unwrap();
    std::fs::write(cg.join("cgroup.procs"), format!("{}\n", std::process::id())).unwrap();
    let unlimited = "9223372036854771712\n";
    std::fs::write(cg.join("memory.limit_in_bytes"), unlimited).unwrap();
    std::fs::write(cg.join("memory.memsw.limit_in_bytes"), unlimited).unwrap();
    std::fs::write(cg.join("memory.usage_in_bytes"), "8388608\n").unwrap();
    let oom = "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n";
    std::fs::write(cg.join("memory.oom_control"), oom).unwrap();
    let swap = dir.path().join("t.swap");
    let before = swaps();
    let out = Command::new(env!("CARGO_BIN_EXE_cxltier"))
        .args([
            "tierd",
            "--dry-run",
            "--dram-budget",
            "4M",
            "--duration",
            "1",
        ])
        .arg("--cgroup")
        .arg(&cg)
        .arg("--nvme")
        .arg(format!("{}:8M", swap.display()))
        .output()
        .expect("run cxltier");
    let e = stderr(&out);
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
