//! IPv6 end to end with real processes: every tool that takes an address runs over
//! `::1`, and the servers' default listener (`[::]`) takes IPv6 and IPv4 clients alike.
//! (Through iwarpd: `daemon.rs`.) On a host without IPv6 each test prints `SKIPPED`.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Output};
use std::time::{Duration, Instant};

use common::{IWPERF, QP_HOLD, RPING, spawn};

const SPLIT: &str = env!("CARGO_BIN_EXE_split");

/// A free port on both loopbacks, or `None` (and a SKIPPED line) without IPv6.
fn port() -> Option<String> {
    let Ok(v6) = std::net::TcpListener::bind("[::1]:0") else {
        println!("SKIPPED: this host has no IPv6 loopback");
        return None;
    };
    Some(v6.local_addr().ok()?.port().to_string())
}

/// A server process, killed if the test ends (or fails) before it exits by itself.
struct Server(Option<Child>);

impl Server {
    fn start(bin: &str, args: &[&str]) -> Self {
        Self(Some(spawn(bin, args)))
    }

    /// Its output once it exits (see [`succeeds`]).
    fn succeeds(mut self, what: &str) -> Output {
        succeeds(self.0.take().expect("running"), what)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Its output once it exits (killed after 60 s); it must have succeeded.
fn succeeds(child: Child, what: &str) -> Output {
    let out = common::try_finish(child, Duration::from_secs(60)).unwrap_or_else(|o| o);
    common::ok(&out, what);
    out
}

fn stdout(out: &Output) -> String {
    common::text(&out.stdout)
}

/// An iwperf server with no address takes a client at `::1` and one at `127.0.0.1`,
/// and names each by its own address family.
#[test]
fn iwperf_serves_ipv6_and_ipv4_clients() {
    for client in ["::1", "127.0.0.1"] {
        let Some(p) = port() else { return };
        let common = ["write_bw", "-s", "4096", "-n", "100", "-p", &p];
        let server = Server::start(IWPERF, &common);
        let mut args = common.to_vec();
        args.extend(["--connect-wait", "10", client]);
        let c = succeeds(spawn(IWPERF, &args), client);
        let s = server.succeeds("the server");
        assert!(stdout(&s).contains("listening on [::]:"), "{}", stdout(&s));
        let peer = if client == "::1" {
            "peer [::1]:"
        } else {
            "peer 127.0.0.1:"
        };
        assert!(stdout(&s).contains(peer), "{client}: {}", stdout(&s));
        assert!(stdout(&c).contains(" 4096       100 "), "{}", stdout(&c));
    }
}

/// iwarp-rping's server with no address takes an rping client at `::1`.
#[test]
fn rping_runs_over_ipv6() {
    let Some(p) = port() else { return };
    let server = Server::start(RPING, &["-s", "-p", &p]);
    let client = {
        let start = Instant::now();
        loop {
            let c = spawn(RPING, &["-c", "-a", "::1", "-p", &p, "-C", "3", "-V"]);
            let out = c.wait_with_output().expect("output");
            let refused = String::from_utf8_lossy(&out.stderr).contains("nothing is listening");
            if !refused || start.elapsed() > Duration::from_secs(20) {
                break out;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    assert!(client.status.success(), "{client:?}");
    assert!(stdout(&client).contains("client done: 3 pings, 3 verified"));
    let s = server.succeeds("rping server");
    assert!(stdout(&s).contains("listening on [::]:"), "{}", stdout(&s));
}

/// split's two sides on two "hosts" (here `[::1]`), as `--serve ADDR` and `HOST:PORT`.
#[test]
fn split_runs_over_ipv6() {
    let Some(p) = port() else { return };
    let serve = format!("[::]:{p}");
    let server = Server::start(SPLIT, &["--serve", &serve, "-n", "100"]);
    std::thread::sleep(Duration::from_millis(300));
    let peer = format!("[::1]:{p}");
    let c = succeeds(spawn(SPLIT, &[&peer, "-n", "100"]), "split client");
    server.succeeds("split server");
    assert!(
        stdout(&c).contains("every message verified"),
        "{}",
        stdout(&c)
    );
}

/// qp-hold accepts and connects its queue pairs over `[::1]`.
#[test]
fn qp_hold_runs_over_ipv6() {
    let Some(_) = port() else { return };
    let mut server = spawn(QP_HOLD, &["--listen", "[::1]:0", "-n", "3"]);
    let mut lines = BufReader::new(server.stdout.take().expect("stdout")).lines();
    let first = lines.next().expect("a line").expect("text");
    let addr = first
        .strip_prefix("listening ")
        .unwrap_or_else(|| panic!("{first}"));
    assert!(addr.starts_with("[::1]:"), "{first}");
    let mut client = spawn(QP_HOLD, &["--connect", addr, "-n", "3"]);
    let mut out = BufReader::new(client.stdout.take().expect("stdout")).lines();
    let ready = out.next().expect("a line").expect("text");
    assert_eq!(ready, "ready 3");
    // Both hold until their standard input closes.
    for c in [&mut client, &mut server] {
        drop(c.stdin.take());
    }
    for (c, what) in [(client, "client"), (server, "server")] {
        succeeds(c, what);
    }
}
