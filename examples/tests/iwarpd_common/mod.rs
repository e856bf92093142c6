//! Real processes for the tests of iwarpd's tools: the iwarpd and iwarp-dump binaries
//! of this build, a daemon serving the built-in service and local applications, and the
//! example programs attached to it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The rping example of this package.
pub(crate) const RPING: &str = env!("CARGO_BIN_EXE_iwarp-rping");
/// The qp-hold example of this package.
pub(crate) const QP_HOLD: &str = env!("CARGO_BIN_EXE_qp-hold");

/// Binary `bin` of package `package` of this build, brought up to date once per test run
/// (cargo builds only this package's binaries for its tests; a stale one would test old
/// code).
pub(crate) fn workspace_bin(package: &str, bin: &str) -> PathBuf {
    static BUILT: Mutex<Vec<(String, PathBuf)>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap();
    if let Some((_, p)) = built.iter().find(|(b, _)| b == bin) {
        return p.clone();
    }
    let dir = Path::new(RPING).parent().unwrap().to_owned();
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
pub(crate) fn iwarpd_bin() -> PathBuf {
    workspace_bin("offload-engine", "iwarpd")
}

/// A file or socket path of this test process.
pub(crate) fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("iwarpd-tools-{}-{name}", std::process::id()))
}

/// A running iwarpd: its built-in service's address, its control socket, its log; killed
/// on drop.
pub(crate) struct Iwarpd {
    pub(crate) child: Child,
    pub(crate) addr: String,
    pub(crate) sock: PathBuf,
    log: Arc<Mutex<String>>,
}

impl Iwarpd {
    /// One listening on a free loopback port with a control socket of its own, and
    /// `extra` flags; returns once it serves both.
    pub(crate) fn start(name: &str, extra: &[&str]) -> Self {
        let sock = temp_path(&format!("{name}.sock"));
        let mut child = Command::new(iwarpd_bin())
            .args(["--listen", "127.0.0.1:0", "--control"])
            .arg(&sock)
            .args(extra)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start iwarpd");
        let log = Arc::new(Mutex::new(String::new()));
        let mut pipe = child.stderr.take().unwrap();
        let sink = log.clone();
        std::thread::spawn(move || {
            let mut buf = [0; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("first stdout line: {line:?}"))
            .to_owned();
        let start = Instant::now();
        while !sock.exists() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "no control socket"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Self {
            child,
            addr,
            sock,
            log,
        }
    }

    /// The control socket, as text.
    pub(crate) fn sock(&self) -> &str {
        self.sock.to_str().unwrap()
    }

    /// What it logged so far.
    pub(crate) fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// SIGTERM, then its exit status (at most 20 s).
    pub(crate) fn stop(&mut self) -> std::process::ExitStatus {
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
}

impl Drop for Iwarpd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `bin ARGS`, its output captured.
pub(crate) fn spawn(bin: &str, args: &[&str]) -> Child {
    Command::new(bin)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {bin}: {e}"))
}

/// Waits for `child` (at most `limit`) and returns its output.
pub(crate) fn finish(mut child: Child, limit: Duration) -> Output {
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "did not finish within {limit:?}: stdout {} stderr {}",
                text(&out.stdout),
                text(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Asserts `out` is a success, showing its output if not.
pub(crate) fn ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}\nstdout: {}\nstderr: {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
}

pub(crate) fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A free loopback port.
pub(crate) fn port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port().to_string()
}

/// `iwarpd ARGS`, which must succeed; its standard output.
pub(crate) fn iwarpd(args: &[&str]) -> String {
    let out = Command::new(iwarpd_bin()).args(args).output().unwrap();
    ok(&out, &format!("iwarpd {args:?}"));
    text(&out.stdout)
}

/// An rping pair, `count` verified pings: the server embedded in its process, the client
/// a local application of the daemon at `sock` (so the daemon holds one side of it only).
pub(crate) fn rping_through(sock: &str, count: &str) {
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
