use cxltier_profile::{builtin_names, Mix, Profile, TierKind, DEFAULT_BUILTIN};

fn mix(s: &str) -> Mix {
    s.parse().unwrap()
}

#[test]
fn builtin_xeon6_has_the_published_table() {
    let p = Profile::load("xeon6-6900p-8xcz122").unwrap();
    assert_eq!(p.tiers.len(), 2);
    let (dram, cxl) = (&p.tiers[0], &p.tiers[1]);
    assert_eq!((dram.kind, cxl.kind), (TierKind::Dram, TierKind::Cxl));
    for (m, d, c) in [
        ("R", 556.0, 205.0),
        ("3:1", 486.0, 214.0),
        ("2:1", 474.0, 208.0),
        ("2:1nt", 466.0, 189.0),
        ("1:1", 446.0, 214.0),
    ] {
        assert_eq!(dram.peak_bandwidth(mix(m)), d, "{m}");
        assert_eq!(cxl.peak_bandwidth(mix(m)), c, "{m}");
    }
    assert_eq!(dram.capacity_bytes, 768 << 30);
    assert!(builtin_names().contains(&DEFAULT_BUILTIN));
}

#[test]
fn unlisted_mixes_interpolate_by_read_fraction() {
    let p = Profile::load(DEFAULT_BUILTIN).unwrap();
    let dram = &p.tiers[0];
    // 5:1 lies between R (1.0) and 3:1 (0.75) at read fraction 0.833.
    let bw = dram.peak_bandwidth(mix("5:1"));
    assert!(bw > 486.0 && bw < 556.0, "{bw}");
    // Write-heavier than anything listed is held at the outermost figure.
    assert_eq!(dram.peak_bandwidth(mix("1:3")), 446.0);
    // Non-temporal mixes interpolate among non-temporal figures and R.
    let nt = dram.peak_bandwidth(mix("3:1nt"));
    assert!(nt > 466.0 && nt < 556.0, "{nt}");
}

fn err(text: &str) -> String {
    Profile::parse(text, "bad.toml").unwrap_err().to_string()
}

const GOOD: &str = r#"format = 1
name = "t"
[[tier]]
name = "dram"
kind = "dram"
capacity_gib = 64
idle_latency_ns = 100
[tier.bandwidth_gbps]
"R" = 100
"#;

#[test]
fn minimal_profile_loads() {
    let p = Profile::parse(GOOD, "good.toml").unwrap();
    assert_eq!(p.tiers[0].peak_bandwidth(mix("1:1")), 100.0);
}

#[test]
fn syntax_errors_name_file_and_line() {
    let e = err("format = 1\nname = \"t\"\n[[tier]\n");
    assert!(e.starts_with("bad.toml:3:"), "{e}");
}

#[test]
fn semantic_errors_name_the_line() {
    let cases = [
        (GOOD.replace("\"R\" = 100", "\"R\" = -5"), 9, "positive"),
        (GOOD.replace("\"R\" = 100", "\"3:x\" = 5"), 9, "invalid mix"),
        (GOOD.replace("\"R\" = 100", "\"2:1\" = 5"), 8, "read-only"),
        (
            GOOD.replace("kind = \"dram\"", "kind = \"sram\""),
            5,
            "unknown tier kind",
        ),
        (
            GOOD.replace("format = 1", "format = 7"),
            1,
            "unsupported profile format",
        ),
        (
            GOOD.replace("idle_latency_ns = 100", "idle_latency_ns = 0"),
            7,
            "idle_latency_ns",
        ),
        (GOOD.replace("capacity_gib = 64\n", ""), 3, "capacity_gib"),
        (
            GOOD.replace("kind = \"dram\"", "kind = \"dram\"\nspeed = 3"),
            6,
            "unknown field",
        ),
        (format!("{GOOD}\"R \" = 100\n"), 10, "given twice"),
    ];
    for (text, line, needle) in cases {
        let e = err(&text);
        assert!(
            e.starts_with(&format!("bad.toml:{line}:")),
            "want line {line} for {needle:?}: {e}"
        );
        assert!(e.contains(needle), "want {needle:?}: {e}");
    }
}

#[test]
fn inconsistent_profiles_are_rejected() {
    let second_tier = &GOOD[GOOD.find("[[tier]]").unwrap()..];
    let e = err(&format!("{GOOD}{second_tier}"));
    assert!(
        e.contains("defined twice") && e.starts_with("bad.toml:11:"),
        "{e}"
    );

    let loaded =
        format!("{GOOD}[[tier.loaded_latency]]\nmix = \"R\"\npoints = [[10, 90], [50, 150]]\n");
    let e = err(&loaded);
    assert!(
        e.contains("below the tier's idle latency") && e.starts_with("bad.toml:12:"),
        "{e}"
    );

    let loaded =
        format!("{GOOD}[[tier.loaded_latency]]\nmix = \"R\"\npoints = [[10, 120], [500, 150]]\n");
    assert!(err(&loaded).contains("exceeds the tier's peak"));

    let loaded =
        format!("{GOOD}[[tier.loaded_latency]]\nmix = \"R\"\npoints = [[50, 120], [10, 150]]\n");
    assert!(err(&loaded).contains("rising bandwidth"));

    let nodes = GOOD.replace("kind = \"dram\"", "kind = \"dram\"\nnodes = [0]")
        + "[[tier]]\nname = \"cxl\"\nkind = \"cxl\"\nnodes = [0]\ncapacity_gib = 1\nidle_latency_ns = 200\n[tier.bandwidth_gbps]\n\"R\" = 10\n";
    assert!(err(&nodes).contains("node 0 is listed in both"));
}

#[test]
fn unknown_profile_lists_builtins() {
    let e = Profile::load("no-such-profile").unwrap_err().to_string();
    assert!(e.contains("xeon6-6900p-8xcz122"), "{e}");
}

#[test]
fn tiers_are_sorted_fastest_first() {
    let text = GOOD.replace("idle_latency_ns = 100", "idle_latency_ns = 300").replace("name = \"dram\"", "name = \"slow\"")
        + "[[tier]]\nname = \"fast\"\nkind = \"dram\"\ncapacity_gib = 1\nidle_latency_ns = 90\n[tier.bandwidth_gbps]\n\"R\" = 10\n";
    let p = Profile::parse(&text, "x").unwrap();
    assert_eq!(p.tiers[0].name, "fast");
}
