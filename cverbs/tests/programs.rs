//! Debian's own rdma-core programs, unmodified, through this library (`LD_LIBRARY_PATH`
//! at the shared object `scripts/rdma_core_lib.sh` links from this build).
//!
//! Needs `ibverbs-utils`, `perftest`, `rdmacm-utils`, `libibverbs-dev` and a C compiler
//! (`.ci/run` installs them, and sets `IWARP_RDMA_CORE_REQUIRED`). Without them each test
//! prints `SKIPPED` and what to install, and passes; with that variable set, it fails.

use std::path::PathBuf;
use std::process::{Command, Output};

/// True if this machine has what these tests run (Debian's programs, the headers, cc);
/// otherwise prints `SKIPPED` with the fix (or, under `IWARP_RDMA_CORE_REQUIRED`, fails).
fn have_rdma_core() -> bool {
    let missing: Vec<&str> = ["ibv_devinfo", "rping", "ucmatose", "ib_write_bw", "cc"]
        .into_iter()
        .filter(|p| {
            !Command::new("sh")
                .args(["-c", &format!("command -v {p}")])
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .chain(
            (!std::path::Path::new("/usr/include/infiniband/verbs.h").exists())
                .then_some("verbs.h"),
        )
        .collect();
    if missing.is_empty() {
        return true;
    }
    let fix =
        "apt-get install -y ibverbs-utils perftest rdmacm-utils libibverbs-dev librdmacm-dev gcc";
    assert!(
        std::env::var_os("IWARP_RDMA_CORE_REQUIRED").is_none(),
        "missing {missing:?}: {fix}"
    );
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "SKIPPED: missing {missing:?}: {fix}");
    false
}

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
    if !have_rdma_core() {
        return;
    }
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
    if !have_rdma_core() {
        return;
    }
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

/// A free TCP port on loopback.
fn port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port().to_string()
}

/// Runs a server (`server`, started first) and a client against each other; both must
/// exit 0. Returns the client's output.
fn pair(server: Command, client: Command) -> Output {
    let (mut server, mut client) = (server, client);
    let srv = server
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let out = client.output().unwrap();
    let srv = srv.wait_with_output().unwrap();
    let text = |o: &Output| {
        format!(
            "{:?}\n{}{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    assert!(
        out.status.success(),
        "client: {}\nserver: {}",
        text(&out),
        text(&srv)
    );
    assert!(
        srv.status.success(),
        "server: {}\nclient: {}",
        text(&srv),
        text(&out)
    );
    out
}

/// A Debian program through the library (the engine in its process), 60 s at most.
fn debian(program: &str, args: &[&str]) -> Command {
    debian_in(None, program, args)
}

/// [`debian`] in network namespace `ns`.
fn debian_in(ns: Option<&str>, program: &str, args: &[&str]) -> Command {
    let mut c = Command::new(if ns.is_some() { "ip" } else { "timeout" });
    if let Some(ns) = ns {
        c.args(["netns", "exec", ns, "timeout"]);
    }
    c.args(["60", program])
        .args(args)
        .env("LD_LIBRARY_PATH", library())
        .env_remove("IWARP_DEVICE");
    c
}

/// rping, both sides unmodified through the library (the engine in each process): 100
/// pings of Send, RDMA Read and RDMA Write, the client verifying each (`-V`).
#[test]
fn rping_runs_through_the_library_with_verified_data() {
    if !have_rdma_core() {
        return;
    }
    let p = port();
    pair(
        debian("rping", &["-s", "-a", "127.0.0.1", "-p", &p, "-C", "100"]),
        debian(
            "rping",
            &["-c", "-a", "127.0.0.1", "-p", &p, "-C", "100", "-V"],
        ),
    );
}

/// Debian's rping against this stack's own iwarp-rping, both ways: a C program on one
/// side and a Rust one on the other, data verified.
#[test]
fn rping_and_iwarp_rping_interoperate_both_ways() {
    if !have_rdma_core() {
        return;
    }
    let rust = tests::binary("examples", "iwarp-rping");
    let p = port();
    let mut client = Command::new(&rust);
    client.args(["-c", "-a", "127.0.0.1", "-p", &p, "-C", "100", "-V"]);
    let out = pair(
        debian("rping", &["-s", "-a", "127.0.0.1", "-p", &p, "-C", "100"]),
        client,
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("100 pings, 100 verified"), "{text}");

    let p = port();
    let mut server = Command::new(&rust);
    server.args(["-s", "-a", "127.0.0.1", "-p", &p, "-C", "100"]);
    pair(
        server,
        debian(
            "rping",
            &["-c", "-a", "127.0.0.1", "-p", &p, "-C", "100", "-V"],
        ),
    );
}

/// perftest's six tests (`-R`: through the connection manager, as iWARP requires) and
/// ucmatose, both sides unmodified through the library; each side's own checks pass
/// (exit 0) and the client prints its results.
#[test]
fn perftest_and_ucmatose_run_through_the_library() {
    if !have_rdma_core() {
        return;
    }
    for test in [
        "ib_write_bw",
        "ib_read_bw",
        "ib_send_bw",
        "ib_write_lat",
        "ib_read_lat",
        "ib_send_lat",
    ] {
        let p = port();
        let args = ["-R", "-p", &p, "-n", "200"];
        let client = [&args[..], &["127.0.0.1"]].concat();
        let out = pair(debian(test, &args), debian(test, &client));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("#bytes"), "{test}: {text}");
    }
    let p = port();
    let out = pair(
        debian("ucmatose", &["-p", &p]),
        debian("ucmatose", &["-s", "127.0.0.1", "-p", &p]),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("return status 0"), "{text}");
}

/// Between two hosts (two network namespaces joined by a veth): rping with verified data
/// and ib_write_bw, each side a Debian program through the library.
#[test]
fn rping_and_ib_write_bw_between_two_network_namespaces() {
    if !have_rdma_core() {
        return;
    }
    let Some(net) = tests::netns::two_hosts_or_skip() else {
        return;
    };
    let (a, b) = (net.a(), net.b());
    let server = a.addr().to_string();
    pair(
        debian_in(
            Some(a.name()),
            "rping",
            &["-s", "-a", &server, "-p", "7174", "-C", "100"],
        ),
        debian_in(
            Some(b.name()),
            "rping",
            &["-c", "-a", &server, "-p", "7174", "-C", "100", "-V"],
        ),
    );
    let out = pair(
        debian_in(
            Some(a.name()),
            "ib_write_bw",
            &["-R", "-p", "18515", "-n", "500"],
        ),
        debian_in(
            Some(b.name()),
            "ib_write_bw",
            &["-R", "-p", "18515", "-n", "500", &server],
        ),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("65536      500"), "{text}");
}
