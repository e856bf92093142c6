//! What the daemon tests share: a real `iwarpd` process and readings of what it holds, the
//! tools of this build, and a client that speaks the control protocol by hand ([`raw`]).

#![allow(dead_code, unreachable_pub)]

pub mod raw;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const IWPERF: &str = env!("CARGO_BIN_EXE_iwperf");
pub const RPING: &str = env!("CARGO_BIN_EXE_iwarp-rping");

/// The iwarpd binary of this build, brought up to date once per test run (cargo builds
/// only this package's binaries for its tests; a stale iwarpd would test old code).
pub fn iwarpd_bin() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = Path::new(IWPERF).parent().unwrap().to_owned();
            let mut cmd = Command::new(env!("CARGO"));
            cmd.args(["build", "-q", "-p", "offload-engine", "--bin", "iwarpd"]);
            if dir.ends_with("release") {
                cmd.arg("--release");
            }
            assert!(cmd.status().unwrap().success(), "build iwarpd");
            dir.join("iwarpd")
        })
        .clone()
}

/// A running iwarpd serving local applications at `sock` (open to every user) and the
/// remote-memory target at `addr`; its log (warnings and worse) goes to `log`. Killed on
/// drop.
pub struct Daemon {
    pub child: Child,
    pub sock: PathBuf,
    pub addr: std::net::SocketAddr,
    pub log: PathBuf,
}

impl Daemon {
    /// An iwarpd named `name` with `extra` arguments; `nofile`: its open-file limit.
    pub fn start(name: &str, extra: &[&str], nofile: Option<u32>) -> Self {
        let tag = format!("{}-{name}", std::process::id());
        let sock = std::env::temp_dir().join(format!("iwarpd-{tag}.sock"));
        let log = std::env::temp_dir().join(format!("iwarpd-{tag}.log"));
        let mut cmd = Command::new("sh");
        let limit = nofile.map_or_else(String::new, |n| format!("ulimit -n {n} && "));
        cmd.args(["-c", &format!("{limit}exec \"$0\" \"$@\"")])
            .arg(iwarpd_bin())
            .args(["--listen", "127.0.0.1:0", "--control"])
            .arg(&sock)
            .args(extra)
            .env("RUST_LOG", "warn")
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
            .and_then(|a| a.split_whitespace().next())
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("iwarpd said {line:?}"));
        let start = Instant::now();
        while !sock.exists() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "no control socket"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // Other users attach too (the honest applications run as nobody).
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
        Self {
            child,
            sock,
            addr,
            log,
        }
    }

    pub fn sock(&self) -> &str {
        self.sock.to_str().unwrap()
    }

    /// What the daemon holds now.
    pub fn held(&self) -> Held {
        Held::of(self.child.id())
    }

    /// Lines the daemon has logged so far.
    pub fn log_lines(&self) -> usize {
        std::fs::read_to_string(&self.log).map_or(0, |s| s.lines().count())
    }

    /// Waits (at most 20 s) until what the daemon holds is back to `base`: as many
    /// descriptors and memory files, and at most `slack` more resident memory.
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

impl Drop for Daemon {
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

/// `bin` with `args`, output captured.
pub fn spawn(bin: &str, args: &[&str]) -> Child {
    Command::new(bin)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {bin}: {e}"))
}

/// `bin` with `args` as the user nobody (uid and gid 65534), output captured.
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

/// Waits for `child`, killing it past `limit`; its output either way.
pub fn finish(mut child: Child, limit: Duration) -> Result<Output, Output> {
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

/// What a tool printed, for a failure message.
pub fn shown(out: &Output) -> String {
    format!(
        "{}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A free TCP port on loopback.
pub fn port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port().to_string()
}

/// True if this process may run tools as another user (the tests that need it say
/// SKIPPED otherwise).
pub fn can_switch_user() -> bool {
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|u| u.split_whitespace().next() == Some("0"))
        })
        .unwrap_or(false);
    let exe_reachable = |p: &str| {
        // nobody must be able to reach the tools through every directory above them.
        Path::new(p).ancestors().skip(1).all(|d| {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::metadata(d).is_ok_and(|m| m.permissions().mode() & 0o001 != 0)
        })
    };
    root && Path::new("/usr/bin/setpriv").exists() && exe_reachable(IWPERF)
}
