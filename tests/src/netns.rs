//! Two hosts on one machine: a pair of Linux network namespaces joined by a veth pair.
//!
//! ```text
//!   namespace iwarp-PID-N-a              namespace iwarp-PID-N-b
//!   lo up, 10.199.X.1/24 on iwPIDnNa ─── veth ─── iwPIDnNb 10.199.X.2/24, lo up
//! ```
//!
//! [`TwoHosts::new`] builds it with the `ip` command (iproute2) and [`Drop`] removes it.
//! It needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN); where it cannot work it returns a
//! [`NetnsError`] saying why, and [`two_hosts_or_skip`] turns that into a `SKIPPED:` line
//! so the test returns instead of failing. Set `IWARP_NETNS_REQUIRED=1` to make a skip a
//! failure instead.
//!
//! Code runs "on a host" through [`Host::spawn`]: a new thread enters the namespace with
//! `setns(2)` (network namespaces are per thread), builds a current-thread tokio runtime
//! and runs the async closure there, so every socket it opens lives in that namespace.
//! Results come back through [`HostTask::join`]; threads talk to each other through
//! channels (tokio's channels work across runtimes).
//!
//! Names carry the process id and a per-process counter, so concurrent tests and
//! concurrent test binaries never clash; namespaces left by a process that died (its pid
//! is gone) are removed the next time a pair is built.

use std::fmt;
use std::fs::File;
use std::future::Future;
use std::io::Write as _;
use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sched::{CloneFlags, setns};

/// Prefix of every namespace this harness creates.
const PREFIX: &str = "iwarp-";
/// How long the veth link may take to come up.
const LINK_UP: Duration = Duration::from_secs(5);

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Why the two hosts cannot be built here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetnsError(String);

impl fmt::Display for NetnsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NetnsError {}

/// One host: a network namespace with one veth end and an IPv4 address.
#[derive(Clone, Debug)]
pub struct Host {
    ns: String,
    ifname: String,
    addr: Ipv4Addr,
}

impl Host {
    /// The namespace name (under /run/netns).
    pub fn name(&self) -> &str {
        &self.ns
    }

    /// The host's address on the veth link.
    pub fn addr(&self) -> Ipv4Addr {
        self.addr
    }

    /// The name of the host's veth interface.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// Runs `f` on a new thread inside this host's namespace, on a current-thread tokio
    /// runtime. The future need not be `Send`; only the closure and the result cross
    /// threads.
    pub fn spawn<F, Fut, T>(&self, f: F) -> HostTask<T>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = T> + 'static,
        T: Send + 'static,
    {
        let ns = self.ns.clone();
        let path = format!("/run/netns/{ns}");
        let handle = std::thread::Builder::new()
            .name(format!("host {ns}"))
            .spawn(move || {
                let file = File::open(&path)
                    .unwrap_or_else(|e| panic!("cannot open {path}: {e} (was the pair dropped?)"));
                setns(&file, CloneFlags::CLONE_NEWNET)
                    .unwrap_or_else(|e| panic!("setns({path}) failed: {e}"));
                drop(file);
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a current-thread tokio runtime")
                    .block_on(f())
            })
            .expect("spawn a host thread");
        HostTask {
            handle,
            host: self.ns.clone(),
        }
    }

    /// Runs `f` in this host's namespace and waits for its result.
    pub fn run<F, Fut, T>(&self, f: F) -> T
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = T> + 'static,
        T: Send + 'static,
    {
        self.spawn(f).join()
    }
}

/// Code running on a host; [`join`](Self::join) waits for its result.
#[derive(Debug)]
pub struct HostTask<T> {
    handle: JoinHandle<T>,
    host: String,
}

impl<T> HostTask<T> {
    /// Waits for the result. A panic on the host is re-raised here, so a failed assertion
    /// inside a host fails the test with its own message.
    pub fn join(self) -> T {
        match self.handle.join() {
            Ok(t) => t,
            Err(panic) => {
                let _ = writeln!(std::io::stderr(), "the code on host {} panicked", self.host);
                std::panic::resume_unwind(panic)
            }
        }
    }

    /// True once the code has returned (or panicked).
    pub fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }
}

/// Two hosts joined by a veth pair; removed on drop.
#[derive(Debug)]
pub struct TwoHosts {
    a: Host,
    b: Host,
    /// Namespaces created so far, deleted on drop (also after a failed setup).
    created: Vec<String>,
}

impl TwoHosts {
    /// Creates the namespaces, the veth pair, the addresses (10.199.X.1/24 and
    /// 10.199.X.2/24) and brings the links (and lo) up.
    pub fn new() -> Result<Self, NetnsError> {
        let euid = nix::unistd::geteuid();
        if !euid.is_root() {
            return Err(NetnsError(format!(
                "network namespaces need root and this runs as uid {euid}; run the tests as \
                 root (CI does)"
            )));
        }
        match Command::new("ip").arg("-V").output() {
            Ok(out) if out.status.success() => {}
            Ok(out) => {
                return Err(NetnsError(format!(
                    "`ip -V` failed ({}): install iproute2 (apt-get install -y iproute2)",
                    out.status
                )));
            }
            Err(e) => {
                return Err(NetnsError(format!(
                    "the `ip` command (iproute2) cannot be run ({e}): apt-get install -y iproute2"
                )));
            }
        }
        remove_stale();
        let pid = std::process::id();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        // X only makes the hosts' addresses easy to tell apart in logs: each pair lives in
        // its own namespaces, so equal subnets of two pairs never meet.
        let x = (pid.wrapping_mul(7).wrapping_add(n) % 254 + 1) as u8;
        let host = |side: char, last: u8| Host {
            ns: format!("{PREFIX}{pid}-{n}-{side}"),
            ifname: format!("iw{pid}n{n}{side}"),
            addr: Ipv4Addr::new(10, 199, x, last),
        };
        let mut pair = Self {
            a: host('a', 1),
            b: host('b', 2),
            created: Vec::new(),
        };
        for ns in [pair.a.ns.clone(), pair.b.ns.clone()] {
            ip(&["netns", "add", &ns]).map_err(|e| {
                NetnsError(format!(
                    "cannot create a network namespace ({e}); this needs root with \
                     CAP_SYS_ADMIN, outside a container that forbids it"
                ))
            })?;
            pair.created.push(ns);
        }
        let (a, b) = (&pair.a, &pair.b);
        ip(&[
            "link", "add", &a.ifname, "netns", &a.ns, "type", "veth", "peer", "name", &b.ifname,
            "netns", &b.ns,
        ])
        .map_err(|e| NetnsError(format!("cannot create a veth pair ({e})")))?;
        for h in [a, b] {
            let cidr = format!("{}/24", h.addr);
            for args in [
                &["-n", &h.ns, "link", "set", "lo", "up"][..],
                &["-n", &h.ns, "addr", "add", &cidr, "dev", &h.ifname],
                &["-n", &h.ns, "link", "set", &h.ifname, "up"],
            ] {
                ip(args).map_err(|e| NetnsError(format!("cannot configure {} ({e})", h.ns)))?;
            }
        }
        for h in [a, b] {
            wait_link_up(h)?;
        }
        Ok(pair)
    }

    /// The first host (10.199.X.1).
    pub fn a(&self) -> &Host {
        &self.a
    }

    /// The second host (10.199.X.2).
    pub fn b(&self) -> &Host {
        &self.b
    }
}

impl Drop for TwoHosts {
    fn drop(&mut self) {
        // Deleting a namespace destroys its veth end, and with it the peer end.
        for ns in self.created.drain(..).rev() {
            if let Err(e) = ip(&["netns", "del", &ns]) {
                let _ = writeln!(std::io::stderr(), "netns: cannot delete {ns}: {e}");
            }
        }
    }
}

/// Two hosts, or `None` after printing `SKIPPED: <reason>` straight to stderr (past the
/// test harness's capture) when this machine cannot make them. With
/// `IWARP_NETNS_REQUIRED` set, a setup failure panics instead.
pub fn two_hosts_or_skip() -> Option<TwoHosts> {
    match TwoHosts::new() {
        Ok(h) => Some(h),
        Err(e) if std::env::var_os("IWARP_NETNS_REQUIRED").is_some() => {
            panic!("two network namespaces are required (IWARP_NETNS_REQUIRED) but: {e}")
        }
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "SKIPPED: {e}");
            None
        }
    }
}

/// Runs `ip ARGS`; the error carries its stderr.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Waits until the host's veth end reports carrier (both ends up).
fn wait_link_up(h: &Host) -> Result<(), NetnsError> {
    let start = Instant::now();
    loop {
        let out = Command::new("ip")
            .args(["-n", &h.ns, "link", "show", &h.ifname])
            .output()
            .map_err(|e| NetnsError(format!("ip link show: {e}")))?;
        let text = String::from_utf8_lossy(&out.stdout);
        if text.contains("LOWER_UP") && text.contains("state UP") {
            return Ok(());
        }
        if start.elapsed() > LINK_UP {
            return Err(NetnsError(format!(
                "the veth link of {} did not come up within {LINK_UP:?}: {}",
                h.ns,
                text.trim()
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Deletes namespaces of this harness whose creating process no longer exists.
fn remove_stale() {
    let Ok(dir) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = ip(&["netns", "del", &name]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_get_their_own_addresses_and_names() {
        let Some(net) = two_hosts_or_skip() else {
            return;
        };
        let (a, b) = (net.a().clone(), net.b().clone());
        assert_ne!(a.name(), b.name());
        assert_eq!(a.addr().octets()[..3], b.addr().octets()[..3]);
        assert_eq!((a.addr().octets()[3], b.addr().octets()[3]), (1, 2));
        assert!(std::path::Path::new(&format!("/run/netns/{}", a.name())).exists());
        // Code on host a sees its veth address, and reaches b's over the link.
        let (a_addr, b_addr) = (a.addr(), b.addr());
        let got = a.run(move || async move {
            let l = tokio::net::TcpListener::bind((b_addr, 0)).await;
            assert!(l.is_err(), "b's address is not local to a");
            let l = tokio::net::TcpListener::bind((a_addr, 0)).await.unwrap();
            l.local_addr().unwrap().ip()
        });
        assert_eq!(got, std::net::IpAddr::V4(net.a().addr()));
        let name = net.a().name().to_owned();
        drop(net);
        assert!(
            !std::path::Path::new(&format!("/run/netns/{name}")).exists(),
            "removed on drop"
        );
    }
}
