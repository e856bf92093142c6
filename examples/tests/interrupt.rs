//! Ctrl-C (SIGINT) in the middle of an iwperf run, between two real processes: the
//! interrupted side prints what it measured so far, says it was interrupted and exits
//! with status 130; its peer says the peer ended the test early or exited (not "TCP
//! connection lost" or "Flushed").

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// More iterations than any run reaches before the interrupt.
const FOREVER: &str = "1000000000";

/// An `iwperf` process whose standard output lines arrive on a channel.
struct Iwperf {
    child: Child,
    lines: mpsc::Receiver<String>,
    all: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Iwperf {
    fn start(args: &[&str]) -> Self {
        // A client started right after its server keeps trying while it is not
        // listening yet (the server ignores the flag).
        let mut child = Command::new(env!("CARGO_BIN_EXE_iwperf"))
            .args(args)
            .args(["--connect-wait", "10"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start iwperf");
        let out = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        let all = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let keep = all.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                keep.lock().unwrap().push(line.clone());
                let _ = tx.send(line);
            }
        });
        Self { child, lines, all }
    }

    /// Waits until the result table's header is out: the test runs.
    fn wait_for_the_table(&self) {
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(30))
                .expect("the table's header");
            if line.contains("#bytes") {
                return;
            }
        }
    }

    fn interrupt(&self) {
        let ok = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill -INT");
    }

    /// Its exit status, standard output and standard error, within 30 s.
    fn finish(mut self) -> (Option<i32>, String, String) {
        for _ in 0..300 {
            if self.child.try_wait().expect("wait").is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let out = self.child.wait_with_output().expect("output");
        // The reader thread has the rest of standard output once the pipe closed.
        std::thread::sleep(Duration::from_millis(100));
        let stdout = self.all.lock().unwrap().join("\n");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code(), stdout, stderr)
    }
}

fn free_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port().to_string()
}

/// Starts `test` (with its flags) on both sides, waits until the client's table is
/// out and a moment more, interrupts the server or the client; both sides' ends.
fn interrupted(test: &[&str], interrupt_server: bool) -> [(Option<i32>, String, String); 2] {
    let port = free_port();
    let mut args = test.to_vec();
    args.extend(["-n", FOREVER, "-p", &port]);
    let server = Iwperf::start(&args);
    args.push("127.0.0.1");
    let client = Iwperf::start(&args);
    client.wait_for_the_table();
    // Let it measure for a moment (a latency line needs a few samples), then Ctrl-C.
    std::thread::sleep(Duration::from_secs(1));
    if interrupt_server {
        server.interrupt();
    } else {
        client.interrupt();
    }
    [server.finish(), client.finish()]
}

/// The interrupted side: status 130, a result line, and the words.
fn check_interrupted(who: &str, (status, stdout, stderr): &(Option<i32>, String, String)) {
    assert_eq!(*status, Some(130), "{who}: {stderr}");
    assert!(
        stderr.contains("iwperf: interrupted: the line above is what was measured before it"),
        "{who}: {stderr}"
    );
    let row = stdout
        .lines()
        .skip_while(|l| !l.contains("#bytes"))
        .nth(1)
        .unwrap_or_else(|| panic!("{who}: no result line in {stdout}"));
    let iters: u64 = row.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(iters < FOREVER.parse().unwrap(), "{who}: {row}");
}

/// The peer of an interrupted side: status 1, and it names the peer's leaving.
fn check_peer_left(who: &str, (status, _, stderr): &(Option<i32>, String, String)) {
    assert_eq!(*status, Some(1), "{who}: {stderr}");
    assert!(
        stderr.contains("the peer ended the test early or exited")
            || stderr.contains("the peer exited"),
        "{who}: {stderr}"
    );
    for raw in ["Flushed", "the TCP connection was lost", "Qp::closed"] {
        assert!(!stderr.contains(raw), "{who}: {raw} in {stderr}");
    }
}

/// The client of write_bw measures: interrupted, it ends its run and sends its report
/// as at the end of a run; the server prints it and says the client ended early.
#[test]
fn an_interrupted_write_bw_client_reports_what_it_measured() {
    let [server, client] = interrupted(&["write_bw", "-s", "4096"], false);
    check_interrupted("client", &client);
    let (status, stdout, stderr) = &server;
    assert_eq!(*status, Some(0), "server: {stderr}");
    assert!(stdout.contains("#bytes"), "server: {stdout}");
    assert!(
        stderr.contains("iwperf: the client ended the test early: "),
        "server: {stderr}"
    );
}

/// write_bw's server measures nothing: interrupted, it says so; its client names the
/// peer's leaving.
#[test]
fn an_interrupted_write_bw_server_is_named_by_its_client() {
    let [server, client] = interrupted(&["write_bw", "-s", "4096"], true);
    let (status, _, stderr) = &server;
    assert_eq!(*status, Some(130), "server: {stderr}");
    assert!(
        stderr.contains("iwperf: interrupted before a result: nothing measured here"),
        "server: {stderr}"
    );
    check_peer_left("client", &client);
}

/// send_bw's server measures its receives: interrupted, it prints them.
#[test]
fn an_interrupted_send_bw_server_prints_its_receives() {
    let [server, client] = interrupted(&["send_bw", "-s", "4096"], true);
    check_interrupted("server", &server);
    check_peer_left("client", &client);
}

/// A latency test stops between two messages; the peer names the leaving.
#[test]
fn an_interrupted_send_lat_client_prints_its_latencies() {
    let [server, client] = interrupted(&["send_lat"], false);
    check_interrupted("client", &client);
    check_peer_left("server", &server);
}
