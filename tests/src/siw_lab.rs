//! The siw lab (`../shared/lab/siw`, see its README) as the opt-in interop tests drive
//! it: Linux siw in qemu inside the network namespace `iwlab`, started with
//! `run-lab.sh serve` and stopped on every path; our servers and `iwarpd` in that
//! namespace. Shared by `tests/siw.rs` (this stack's tools) and `tests/siw_c_programs.rs`
//! (Debian's programs through the C library).

use std::io::{BufRead as _, BufReader};
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// vm1, where siw runs.
pub const VM1: &str = "10.231.0.11";
/// The host's side of the lab's bridge, in the netns.
pub const HOST: &str = "10.231.0.1";
/// The lab's network namespace.
pub const NETNS: &str = "iwlab";
/// The lab's cache when `LAB_CACHE` is unset (the lab's own default may be read-only).
pub const DEFAULT_CACHE: &str = "/var/tmp/siw-lab-cache";
/// The longest the lab may take to build and boot vm1.
pub const BOOT_LIMIT: Duration = Duration::from_secs(600);
/// The longest one `iwarp-rping` run may take.
pub const RUN_LIMIT: Duration = Duration::from_secs(120);

/// One lab at a time: they share the netns and the addresses.
pub static LAB_LOCK: Mutex<()> = Mutex::new(());

/// Fails the test, saying how to enable the lab, unless `IWARP_SIW_LAB=1` (the tests are
/// `#[ignore]`d, so this runs only when they were asked for).
pub fn require_lab() {
    assert_eq!(
        std::env::var("IWARP_SIW_LAB").as_deref(),
        Ok("1"),
        "the siw lab tests need IWARP_SIW_LAB=1 and root (they boot Linux siw in qemu): \
         sudo IWARP_SIW_LAB=1 cargo test -p tests --test siw -- --ignored --test-threads=1"
    );
}

/// The lab's script: `IWARP_SIW_LAB_SCRIPT`, else `../shared/lab/siw/run-lab.sh` beside
/// the repository, else where the development machines keep it.
pub fn lab_script() -> String {
    if let Ok(script) = std::env::var("IWARP_SIW_LAB_SCRIPT") {
        return script;
    }
    let beside =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/lab/siw/run-lab.sh");
    if beside.exists() {
        return beside.display().to_string();
    }
    "/work/shared/lab/siw/run-lab.sh".to_owned()
}

/// `run-lab.sh ARGS`, with the cache and captures where the tests keep them.
pub fn lab_command(args: &[&str]) -> Command {
    let mut cmd = Command::new(lab_script());
    cmd.args(args);
    for (var, default) in [
        ("LAB_CACHE", DEFAULT_CACHE),
        ("LAB_CAPTURES", "/var/tmp/siw-lab-captures"),
    ] {
        if std::env::var_os(var).is_none() {
            cmd.env(var, default);
        }
    }
    cmd
}

/// A running `run-lab.sh serve`; dropping it stops the lab.
#[derive(Debug)]
pub struct Lab {
    child: Child,
    /// Lines of the lab's stderr, as they come.
    lines: mpsc::Receiver<String>,
}

impl Lab {
    /// Starts `run-lab.sh serve SECS PARAMS CMD` and waits until vm1 serves.
    pub fn serve(secs: u32, params: &str, cmd: Option<&str>) -> Self {
        let secs = secs.to_string();
        let mut args = vec!["serve", secs.as_str(), params];
        args.extend(cmd);
        let mut child = lab_command(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("start run-lab.sh serve");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("  lab| {line}");
                // After the test stopped listening, keep draining so the lab never blocks
                // on a full pipe.
                let _ = tx.send(line);
            }
        });
        let lab = Self { child, lines };
        lab.wait_for("is serving", BOOT_LIMIT);
        lab
    }

    /// Waits (at most `limit`) for a line of the lab's with `needle`.
    pub fn wait_for(&self, needle: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return,
                Ok(_) => {}
                Err(e) => panic!("the lab never printed {needle:?} ({e:?})"),
            }
        }
    }
}

impl Lab {
    /// Waits (at most `limit`) for the lab to end by itself (vm1 powered off) and returns
    /// vm1's console log.
    pub fn wait_vm_exit(&mut self, limit: Duration) -> Option<String> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let cache = std::env::var("LAB_CACHE").unwrap_or_else(|_| DEFAULT_CACHE.to_owned());
        let log = std::fs::read(PathBuf::from(cache).join("run/vm1/console.log")).ok()?;
        Some(String::from_utf8_lossy(&log).into_owned())
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let pgid = self.child.id().to_string();
        // SIGTERM to the lab's own process group: run-lab.sh's EXIT trap stops the VM
        // and removes the netns.
        let _ = Command::new("kill")
            .args(["-TERM", "--", &format!("-{pgid}")])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{pgid}")])
                .status();
            let _ = self.child.wait();
        }
        let _ = lab_command(&["net-down"]).status();
    }
}

/// A server of ours in the lab's netns, killed (by its pid) if the test fails before it
/// finished.
#[derive(Debug)]
pub struct Server(Option<Child>);

impl Server {
    /// Waits for the server to end; prints and returns its output.
    pub fn wait(mut self) -> Output {
        let child = self.0.take().expect("waited once");
        let out = child.wait_with_output().expect("wait for our server");
        println!("{}", String::from_utf8_lossy(&out.stdout));
        eprintln!("{}", String::from_utf8_lossy(&out.stderr));
        out
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Our `iwarpd` in the lab's netns, serving local applications on a socket file, with
/// `flags` (its CRC and MPA settings are what its clients' connections use); killed on
/// drop.
#[derive(Debug)]
pub struct Daemon {
    child: Child,
    /// Its control socket, for `--daemon` or `IWARP_DEVICE=unix:`.
    pub sock: String,
}

impl Daemon {
    /// Starts iwarpd with `flags`, serving on the host's lab address; returns once it
    /// listens.
    pub fn start(flags: &[&str]) -> Self {
        let sock = format!("/tmp/iwarpd-siw-{}.sock", std::process::id());
        let mut child = Command::new("ip")
            .args(["netns", "exec", NETNS])
            .arg(crate::binary("iwarpd", "iwarpd"))
            .args(["--listen", &format!("{HOST}:0"), "--control", &sock])
            .args(flags)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start iwarpd");
        let mut line = String::new();
        let _ = BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line);
        assert!(
            line.starts_with("listening on"),
            "iwarpd did not start: {line:?}"
        );
        Self { child, sock }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Starts `cmd` (a command in the lab's netns) as a server, its output piped.
    pub fn spawn(mut cmd: Command) -> Self {
        let child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the server");
        Self(Some(child))
    }
}

/// `timeout LIMIT ip netns exec iwlab PROGRAM`: a program in the lab's netns, for at
/// most `limit`.
pub fn in_netns(program: &std::ffi::OsStr, limit: Duration) -> Command {
    let mut cmd = Command::new("timeout");
    cmd.arg(limit.as_secs().to_string())
        .args(["ip", "netns", "exec", NETNS])
        .arg(program);
    cmd
}

/// Runs `cmd` to its end, printing its command line and output; returns the output.
pub fn run(mut cmd: Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    println!("$ {cmd:?}");
    println!("{}", String::from_utf8_lossy(&out.stdout));
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    out
}
