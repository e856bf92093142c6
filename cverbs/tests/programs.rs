//! Debian's own rdma-core programs, unmodified, through this library (`LD_LIBRARY_PATH`
//! at the shared object `scripts/rdma_core_lib.sh` links from this build).
//!
//! Needs `ibverbs-utils`, `perftest` and `rdmacm-utils` (`.ci/run` installs them).

use std::path::PathBuf;
use std::process::{Command, Output};

/// The directory with libibverbs.so.1 and its other names, linked once per test binary.
fn library() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        // This build's static library: beside this test in target/<profile>/deps, the
        // newest libcverbs-*.a (cargo copies it up to target/<profile> only on a build).
        let exe = std::env::current_exe().unwrap();
        let archive = std::fs::read_dir(exe.parent().unwrap())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.starts_with("libcverbs-") && name.ends_with(".a")
            })
            .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
            .expect("the static library beside this test")
            .path();
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rdma-core");
        let link = Command::new(root.join("scripts/rdma_core_lib.sh"))
            .arg("--link-only")
            .arg(&archive)
            .arg(&out)
            .output()
            .unwrap();
        assert!(
            link.status.success(),
            "linking the library failed: {}",
            String::from_utf8_lossy(&link.stderr)
        );
        out
    })
    .clone()
}

/// Runs Debian's `program` with `args` through the library (10 s at most).
fn run(program: &str, args: &[&str]) -> Output {
    let out = Command::new("timeout")
        .arg("10")
        .arg(program)
        .args(args)
        .env("LD_LIBRARY_PATH", library())
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
    let err = String::from_utf8_lossy(&out.stderr);
    // Loaded: every symbol and version it asks for is there.
    assert!(
        !err.contains("symbol lookup error") && !err.contains("not found (required by"),
        "{program} did not load: {err}"
    );
    out
}

#[test]
fn ibv_devinfo_and_ibv_devices_see_the_iwarp_device() {
    let out = run("ibv_devinfo", &["-v"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for want in [
        "hca_id:\tiwarp0",
        "transport:\t\t\tiWARP (1)",
        "phys_port_cnt:\t\t\t1",
        "state:\t\t\tPORT_ACTIVE (4)",
        "link_layer:\t\tEthernet",
        "GID[  0]:\t\t0000:0000:0000:0000:0000:ffff:",
    ] {
        assert!(text.contains(want), "no {want:?} in:\n{text}");
    }
    let out = run("ibv_devices", &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("iwarp0"), "{text}");
}

/// Every program the issue names loads and starts; what it asks for that the library
/// does not carry out yet ends it with an error naming the call, not a crash.
#[test]
fn the_target_programs_load_and_name_what_is_not_supported() {
    for (program, args) in [
        ("ib_write_bw", &["-R"][..]),
        ("ib_read_bw", &["-R"]),
        ("ib_send_bw", &["-R"]),
        ("ib_write_lat", &["-R"]),
        ("ib_read_lat", &["-R"]),
        ("ib_send_lat", &["-R"]),
        ("rping", &["-s", "-a", "127.0.0.1", "-v", "-C", "1"]),
        ("ucmatose", &[]),
    ] {
        let out = run(program, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.code().is_some_and(|c| c != 0 && c != 124),
            "{program} should fail cleanly, not hang or die: {:?} {err}",
            out.status
        );
        assert!(
            err.contains("iwarp verbs: rdma_create_event_channel is not supported"),
            "{program}: {err}"
        );
    }
}

/// Builds `tests/c/NAME.c` against the installed headers, linked to the library.
fn c_program(name: &str) -> PathBuf {
    let lib = library();
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    let exe = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let cc = Command::new("cc")
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(&lib)
        .arg("-l:libibverbs.so.1")
        .output()
        .expect("run cc (install gcc)");
    assert!(
        cc.status.success(),
        "compiling {name}.c failed (install libibverbs-dev): {}",
        String::from_utf8_lossy(&cc.stderr)
    );
    exe
}

/// Protection domains and regions on malloc'ed memory, from C, embedded; and misuse
/// (freed twice, in the wrong order, never ours) refused, not a crash.
#[test]
fn a_c_program_registers_its_own_memory_and_misuse_is_refused() {
    let exe = c_program("objects");
    let out = Command::new(&exe)
        .env("LD_LIBRARY_PATH", library())
        .env_remove("IWARP_DEVICE")
        .output()
        .unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("ok"),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
