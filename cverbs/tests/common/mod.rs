//! What the program tests share: the library linked from this build, Debian's programs
//! run through it, C programs built against the installed headers, and iwarpd.
#![allow(dead_code)] // each test binary uses its own part

use std::path::PathBuf;
use std::process::{Command, Output};

/// True if this machine has what these tests run (Debian's programs, the headers, cc);
/// otherwise prints `SKIPPED` with the fix (or, under `IWARP_RDMA_CORE_REQUIRED`, fails).
pub(crate) fn have_rdma_core() -> bool {
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
pub(crate) fn library() -> PathBuf {
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
pub(crate) fn run(program: &str, args: &[&str]) -> Output {
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

/// Builds `tests/c/NAME.c` against the installed headers, linked to the library.
pub(crate) fn c_program(name: &str) -> PathBuf {
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

/// Runs `tests/c/NAME.c` through the library, embedded or (`device`: an `IWARP_DEVICE`
/// value) through iwarpd; it must exit 0 and print "ok".
pub(crate) fn c_program_passes(name: &str, device: Option<&str>) {
    // 60 s at most: a call that waits forever fails the test instead of holding CI.
    let mut cmd = Command::new("timeout");
    cmd.arg("60").arg(c_program(name));
    cmd.env("LD_LIBRARY_PATH", library());
    match device {
        Some(d) => cmd.env("IWARP_DEVICE", d),
        None => cmd.env_remove("IWARP_DEVICE"),
    };
    let out = cmd.output().unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("ok"),
        "{name}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// perftest's `test` with `args` (and `-R -p PORT -n 200`), server and client on
/// loopback, each wrapped by `via` (through iwarpd, say): both pass their checks and the
/// client prints its results.
pub(crate) fn perftest(test: &str, args: &[&str], via: impl Fn(Command) -> Command) {
    let p = port();
    let args = [&["-R", "-p", &p, "-n", "200"][..], args].concat();
    let client = [&args[..], &["127.0.0.1"]].concat();
    let out = pair(via(debian(test, &args)), via(debian(test, &client)));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("#bytes"), "{test} {args:?}: {text}");
}

/// Debian's rping (wrapped by `via`: through iwarpd, say) against this stack's Rust
/// iwarp-rping with its engine embedded, both ways, `count` pings, the client verifying
/// each.
pub(crate) fn rping_against_iwarp_rping(count: &str, via: impl Fn(Command) -> Command) {
    let rust = tests::binary("examples", "iwarp-rping");
    let rust_side = |args: &[&str]| {
        let mut c = Command::new(&rust);
        c.args(args).env_remove("IWARP_DEVICE");
        c
    };
    let p = port();
    let out = pair(
        via(debian(
            "rping",
            &["-s", "-a", "127.0.0.1", "-p", &p, "-C", count],
        )),
        rust_side(&["-c", "-a", "127.0.0.1", "-p", &p, "-C", count, "-V"]),
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(&format!("{count} pings, {count} verified")),
        "{text}"
    );
    let p = port();
    pair(
        rust_side(&["-s", "-a", "127.0.0.1", "-p", &p, "-C", count]),
        via(debian(
            "rping",
            &["-c", "-a", "127.0.0.1", "-p", &p, "-C", count, "-V"],
        )),
    );
}

/// A free TCP port on loopback.
pub(crate) fn port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port().to_string()
}

/// Runs a server (`server`, started first) and a client against each other; both must
/// exit 0. Returns the client's output.
pub(crate) fn pair(server: Command, client: Command) -> Output {
    both(server, client).1
}

/// [`pair`], returning the server's output and the client's.
pub(crate) fn both(server: Command, client: Command) -> (Output, Output) {
    let (mut server, mut client) = (server, client);
    let line = |c: &Command| {
        let args: Vec<_> = c.get_args().map(|a| a.to_string_lossy()).collect();
        format!("{} {}", c.get_program().to_string_lossy(), args.join(" "))
    };
    let (server_line, client_line) = (line(&server), line(&client));
    // A client that comes before the server listens is turned away (librdmacm: REJECTED,
    // -111; rdma_client: "Connection refused"), as on any RDMA device. perftest's second connection races its server so
    // (the client connects as soon as the first connection's handshake ends, the server
    // only then listens), and Debian's perftest 4.5-0.17 cannot try again (it reuses the
    // identifier it destroyed). The pair is run again from the start, as a user would.
    let mut turned_away = String::new();
    let mut runs = 0;
    let (srv, out) = loop {
        runs += 1;
        let srv = server
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(500));
        let out = client.output().unwrap();
        let said = [&out.stdout[..], &out.stderr[..]].concat();
        let said = String::from_utf8_lossy(&said);
        let refused =
            said.contains("error: -111") || said.contains("rdma_connect: Connection refused");
        if out.status.success() || !refused || runs == 10 {
            break (srv, out);
        }
        turned_away += &format!("(a run turned away, both sides run again: {said})\n");
        // `timeout` passes SIGTERM on to the program it runs.
        let _ = Command::new("kill").arg(srv.id().to_string()).status();
        let _ = srv.wait_with_output();
    };
    let srv = srv.wait_with_output().unwrap();
    let text = |o: &Output, cmd: &str| {
        format!(
            "{cmd}\n{turned_away}{:?}\n{}{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    assert!(
        out.status.success(),
        "client: {}\nserver: {}",
        text(&out, &client_line),
        text(&srv, &server_line)
    );
    assert!(
        srv.status.success(),
        "server: {}\nclient: {}",
        text(&srv, &server_line),
        text(&out, &client_line)
    );
    (srv, out)
}

/// rdma-core's synchronous examples, `rdma_server`/`rdma_client` and
/// `rdma_xserver`/`rdma_xclient` (endpoints made by `rdma_create_ep`, requests taken by
/// `rdma_get_request`, completions waited for on the queues the library made, the
/// messages in global variables), each wrapped by `via`: both sides end with status 0
/// and say nothing on stderr (rdma_xclient exits 0 even when a call fails).
pub(crate) fn rdma_server_and_client(via: impl Fn(Command) -> Command) {
    for (server, client) in [
        ("rdma_server", "rdma_client"),
        ("rdma_xserver", "rdma_xclient"),
    ] {
        let p = port();
        let (srv, cli) = both(
            via(debian(server, &["-p", &p])),
            via(debian(client, &["-s", "127.0.0.1", "-p", &p])),
        );
        for (name, o) in [(server, &srv), (client, &cli)] {
            let said = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            assert!(
                said.contains(&format!("{name}: end 0")) && o.stderr.is_empty(),
                "{name}: {said}"
            );
        }
    }
}

/// A Debian program through the library (the engine in its process), 60 s at most.
pub(crate) fn debian(program: &str, args: &[&str]) -> Command {
    debian_in(None, program, args)
}

/// [`debian`] in network namespace `ns`.
pub(crate) fn debian_in(ns: Option<&str>, program: &str, args: &[&str]) -> Command {
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

/// A running iwarpd on loopback, for programs through it (`IWARP_DEVICE=unix:SOCK`);
/// killed on drop.
pub(crate) struct Iwarpd {
    child: std::process::Child,
    sock: PathBuf,
}

impl Iwarpd {
    /// Starts this build's iwarpd; returns once its control socket is there.
    pub(crate) fn start(name: &str) -> Self {
        Self::start_in(name, None, "127.0.0.1")
    }

    /// Starts it in network namespace `ns` (if given), its service on `addr`.
    pub(crate) fn start_in(name: &str, ns: Option<&str>, addr: &str) -> Self {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let sock = dir.join(format!("{name}-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&sock);
        let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
        let bin = tests::binary("iwarpd", "iwarpd");
        let mut cmd = match ns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        let child = cmd
            .args(["--listen", &format!("{addr}:0"), "--control"])
            .arg(&sock)
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start iwarpd");
        let start = std::time::Instant::now();
        while !sock.exists() {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(20),
                "iwarpd made no control socket"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Self { child, sock }
    }

    /// `IWARP_DEVICE`'s value for programs through it.
    pub(crate) fn device(&self) -> String {
        format!("unix:{}", self.sock.display())
    }

    /// `cmd` through it.
    pub(crate) fn through(&self, mut cmd: Command) -> Command {
        cmd.env("IWARP_DEVICE", self.device());
        cmd
    }
}

impl Drop for Iwarpd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.sock);
    }
}
