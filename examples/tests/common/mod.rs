//! What the tests of this package share: the binaries of this build, a real `iwarpd`
//! process ([`Iwarpd`]) and readings of what it holds ([`Held`]), processes run as another
//! user, and a client that speaks the control protocol by hand ([`raw`]).

#![allow(dead_code, unreachable_pub)]

pub mod raw;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub const IWPERF: &str = env!("CARGO_BIN_EXE_iwperf");
pub const RPING: &str = env!("CARGO_BIN_EXE_iwarp-rping");
pub const KV: &str = env!("CARGO_BIN_EXE_kv");
pub const QP_HOLD: &str = env!("CARGO_BIN_EXE_qp-hold");
pub const DEMO: &str = env!("CARGO_BIN_EXE_demo");
/// iwperf's flag for a client started right after its server: keep trying while the
/// server is not listening yet.
pub const CONNECT_WAIT: &str = "--connect-wait";

/// Binary `bin` of package `package` of this build, brought up to date once per test run
/// (cargo builds only this package's binaries for its tests; a stale one would test old
/// code).
pub fn workspace_bin(package: &str, bin: &str) -> PathBuf {
    static BUILT: Mutex<Vec<(String, PathBuf)>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap();
    if let Some((_, p)) = built.iter().find(|(b, _)| b == bin) {
        return p.clone();
    }
    let dir = Path::new(IWPERF).parent().unwrap().to_owned();
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "-q", "-p", package, "--bin", bin]);
    if dir.ends_with("release") {
        cmd.arg("--release");
    }
    assert!(cmd.status().unwrap().success(), "build {bin}");
    let path = dir.join(bin);
    built.push((bin.to_owned(), path.clone()));
    path
}

/// The iwarpd binary of this build.
pub fn iwarpd_bin() -> PathBuf {
    workspace_bin("iwarpd", "iwarpd")
}

/// A file or socket path of this test process.
pub fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("iwarpd-{}-{name}", std::process::id()))
}

/// How to start an [`Iwarpd`]: [`Iwarpd::with`], then the options, then
/// [`start`](Self::start).
pub struct Start<'a> {
    name: &'a str,
    ns: Option<&'a str>,
    addr: &'a str,
    args: Vec<&'a str>,
    nofile: Option<u32>,
    log: &'a str,
}

impl<'a> Start<'a> {
    /// Inside network namespace `ns` (its control socket is a file, reachable from every
    /// namespace).
    pub fn ns(mut self, ns: &'a str) -> Self {
        self.ns = Some(ns);
        self
    }

    /// Its built-in service listens on `addr` (a free port of it).
    pub fn addr(mut self, addr: &'a str) -> Self {
        self.addr = addr;
        self
    }

    /// More arguments.
    pub fn args(mut self, args: &[&'a str]) -> Self {
        self.args.extend_from_slice(args);
        self
    }

    /// Its open-file limit, soft and hard.
    pub fn nofile(mut self, n: u32) -> Self {
        self.nofile = Some(n);
        self
    }

    /// Its log filter (`warn` unless said).
    pub fn log(mut self, filter: &'a str) -> Self {
        self.log = filter;
        self
    }

    /// Starts it; returns once it serves both its built-in service and local
    /// applications, its control socket open to every user.
    pub fn start(self) -> Iwarpd {
        let sock = temp_path(&format!("{}.sock", self.name));
        let log = temp_path(&format!("{}.log", self.name));
        let limit = self
            .nofile
            .map_or_else(String::new, |n| format!("ulimit -n {n} && "));
        let mut cmd = match self.ns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]);
                c
            }
            None => Command::new("env"),
        };
        cmd.args(["sh", "-c", &format!("{limit}exec \"$0\" \"$@\"")])
            .arg(iwarpd_bin())
            .args(["--listen", &format!("{}:0", self.addr), "--control"])
            .arg(&sock)
            .args(&self.args)
            .env("RUST_LOG", self.log)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap());
        let mut child = cmd.spawn().expect("start iwarpd");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| {
                panic!(
                    "iwarpd's first line: {line:?}; its log: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            })
            .to_owned();
        let start = Instant::now();
        while !sock.exists() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "no control socket"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // Applications of other users attach too (some tests run them as nobody).
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
        Iwarpd {
            child,
            sock,
            addr,
            log,
        }
    }
}

/// A running iwarpd serving local applications at `sock` and its built-in remote-memory
/// target at `addr`; what it logs goes to a file. Killed on drop.
pub struct Iwarpd {
    pub child: Child,
    pub sock: PathBuf,
    /// Its built-in service's address, as it printed it.
    pub addr: String,
    log: PathBuf,
}

impl Iwarpd {
    /// An iwarpd named `name` (its files' names), to be started.
    pub fn with(name: &str) -> Start<'_> {
        Start {
            name,
            ns: None,
            addr: "127.0.0.1",
            args: Vec::new(),
            nofile: None,
            log: "warn",
        }
    }

    /// One on loopback with `extra` arguments.
    pub fn start(name: &str, extra: &[&str]) -> Self {
        Self::with(name).args(extra).start()
    }

    /// One listening on `addr` with `extra` arguments, inside network namespace `ns` if
    /// one is given.
    pub fn start_on(ns: Option<&str>, addr: &str, name: &str, extra: &[&str]) -> Self {
        let start = Self::with(name).addr(addr).args(extra);
        match ns {
            Some(ns) => start.ns(ns).start(),
            None => start.start(),
        }
    }

    /// The control socket, as text.
    pub fn sock(&self) -> &str {
        self.sock.to_str().unwrap()
    }

    /// Its built-in service's address.
    pub fn socket_addr(&self) -> std::net::SocketAddr {
        self.addr.parse().expect("an address")
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Lines it logged so far.
    pub fn log_lines(&self) -> usize {
        self.log().lines().count()
    }

    /// SIGTERM, then its exit status (at most 20 s).
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -TERM");
        let start = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "iwarpd did not exit; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The names of its threads.
    pub fn threads(&self) -> Vec<String> {
        let dir = format!("/proc/{}/task", self.child.id());
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .map(|n| n.trim().to_owned())
            .collect();
        names.sort();
        names
    }

    /// Shared-memory regions it has mapped now (its clients' regions).
    pub fn mapped_regions(&self) -> usize {
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", self.child.id())).unwrap();
        maps.lines().filter(|l| l.contains("iwarp-region")).count()
    }

    /// What it holds now.
    pub fn held(&self) -> Held {
        Held::of(self.child.id())
    }

    /// Waits (at most 20 s) until what it holds is back to `base`: as many descriptors
    /// and memory files, and at most `slack` more resident memory.
    pub fn settles(&self, base: &Held, slack: u64, what: &str) {
        let start = Instant::now();
        loop {
            let now = self.held();
            if now.fds <= base.fds && now.memfds <= base.memfds && now.rss <= base.rss + slack {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "{what}: iwarpd holds {now:?}, against {base:?} before (plus {} KiB of \
                 memory allowed)",
                slack >> 10
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Iwarpd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// What a process holds, from `/proc`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Held {
    /// Open descriptors.
    pub fds: usize,
    /// Of those, memory files.
    pub memfds: usize,
    /// Resident memory, its peak so far, and its address space, in octets.
    pub rss: u64,
    pub peak: u64,
    pub vm: u64,
}

impl Held {
    pub fn of(pid: u32) -> Self {
        let mut h = Self::default();
        if let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
            for fd in dir.flatten() {
                h.fds += 1;
                let target = std::fs::read_link(fd.path()).unwrap_or_default();
                h.memfds += usize::from(target.to_string_lossy().starts_with("/memfd:"));
            }
        }
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let kib = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .map_or(0, |k| k << 10)
        };
        h.rss = kib("VmRSS:");
        h.peak = kib("VmHWM:");
        h.vm = kib("VmSize:");
        h
    }
}

/// `bin`, run inside network namespace `ns` if one is given.
pub fn command(ns: Option<&str>, bin: &str) -> Command {
    match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, bin]);
            c
        }
        None => Command::new(bin),
    }
}

/// `bin ARGS` in network namespace `ns` (if given), output captured.
pub fn spawn_in(ns: Option<&str>, bin: &str, args: &[&str]) -> Child {
    command(ns, bin)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {bin}: {e}"))
}

/// `bin ARGS`, output captured.
pub fn spawn(bin: &str, args: &[&str]) -> Child {
    spawn_in(None, bin, args)
}

/// `bin ARGS` as the user nobody (uid and gid 65534), output captured.
pub fn spawn_as_nobody(bin: &str, args: &[&str]) -> Child {
    Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            bin,
        ])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {bin} as nobody: {e}"))
}

/// Waits for `child`, killing it past `limit`; its output, `Err` if it was killed.
pub fn try_finish(mut child: Child, limit: Duration) -> Result<Output, Output> {
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return Ok(child.wait_with_output().unwrap());
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            return Err(child.wait_with_output().unwrap());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for `child` (at most `limit`, else the test fails) and returns its output.
pub fn finish(child: Child, limit: Duration) -> Output {
    try_finish(child, limit)
        .unwrap_or_else(|out| panic!("did not finish within {limit:?}: {}", shown(&out)))
}

/// Asserts `out` is a success, showing its output if not.
pub fn ok(out: &Output, what: &str) {
    assert!(out.status.success(), "{what}: {}", shown(out));
}

/// What a process printed, for a failure message.
pub fn shown(out: &Output) -> String {
    format!(
        "{}\nstdout: {}\nstderr: {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    )
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A free TCP port on loopback.
pub fn port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port().to_string()
}

/// `iwarpd ARGS`, which must succeed; its standard output.
pub fn iwarpd(args: &[&str]) -> String {
    let out = Command::new(iwarpd_bin()).args(args).output().unwrap();
    ok(&out, &format!("iwarpd {args:?}"));
    text(&out.stdout)
}

/// An rping pair, `count` verified pings: the server embedded in its process, the client
/// a local application of the daemon at `sock` (so the daemon holds one side of it only).
pub fn rping_through(sock: &str, count: &str) {
    let p = port();
    let mut server = spawn(RPING, &["-s", "-a", "127.0.0.1", "-p", &p]);
    std::thread::sleep(Duration::from_millis(300));
    let client = spawn(
        RPING,
        &[
            "-c",
            "-a",
            "127.0.0.1",
            "-p",
            &p,
            "--daemon",
            sock,
            "-C",
            count,
            "-V",
        ],
    );
    ok(&finish(client, Duration::from_secs(60)), "rping client");
    let _ = server.kill();
    let _ = server.wait();
}

/// True if this process runs as root (the tests that run tools as another user say
/// SKIPPED otherwise) and user nobody can reach this build's tools.
pub fn can_switch_user() -> bool {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    // nobody must be able to reach the tools through every directory above them.
    let reachable = Path::new(IWPERF)
        .ancestors()
        .skip(1)
        .all(|d| std::fs::metadata(d).is_ok_and(|m| m.permissions().mode() & 0o001 != 0));
    root && Path::new("/usr/bin/setpriv").exists() && reachable
}
