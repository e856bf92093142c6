//! `iwperf --run_infinitely`: two processes print a line every interval until one is
//! interrupted (SIGINT, as Ctrl-C sends), then both end cleanly with exit status 0.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// An `iwperf` process whose result lines arrive on a channel.
struct Iwperf {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Iwperf {
    fn start(args: &[&str]) -> Self {
        // A client started right after its server keeps trying while it is not
        // listening yet (the server ignores the flag).
        let mut child = Command::new(env!("CARGO_BIN_EXE_iwperf"))
            .args(args)
            .args(["--connect-wait", "10"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start iwperf");
        let out = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Self { child, lines }
    }

    /// Waits for `n` result lines (`--output bandwidth`: one number each).
    fn results(&self, n: usize) -> Vec<f64> {
        let mut got = Vec::new();
        while got.len() < n {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(20))
                .expect("a result line every interval");
            if let Ok(v) = line.trim().parse::<f64>() {
                got.push(v);
            }
        }
        got
    }

    fn interrupt(&self) {
        let ok = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill -INT");
    }

    /// Its exit status, within 20 s.
    fn wait(mut self) -> Option<i32> {
        for _ in 0..200 {
            if let Some(st) = self.child.try_wait().expect("wait") {
                return st.code();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        panic!("iwperf did not end within 20 s of the interrupt");
    }
}

fn free_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port().to_string()
}

/// Runs `test` (with its flags) both ways, waits for two lines from the client (and from
/// the server where it measures too: `send_bw`'s receiver, either side of `-b`),
/// interrupts the client (or the server), and checks both end with exit status 0.
fn runs_until_interrupted(test: &[&str], interrupt_server: bool) {
    let server_measures = test.contains(&"send_bw") || test.contains(&"-b");
    let port = free_port();
    let mut args = test.to_vec();
    args.extend([
        "--run_infinitely",
        "-D",
        "1",
        "--output",
        "bandwidth",
        "-p",
        &port,
    ]);
    let server = Iwperf::start(&args);
    std::thread::sleep(Duration::from_millis(300));
    args.push("127.0.0.1");
    let client = Iwperf::start(&args);
    let lines = client.results(2);
    assert!(lines.iter().all(|&bw| bw > 0.0), "{test:?}: {lines:?}");
    if server_measures {
        let lines = server.results(2);
        assert!(
            lines.iter().all(|&bw| bw > 0.0),
            "{test:?} server: {lines:?}"
        );
    }
    if interrupt_server {
        server.interrupt();
    } else {
        client.interrupt();
    }
    assert_eq!(client.wait(), Some(0), "{test:?}: the client's exit status");
    assert_eq!(server.wait(), Some(0), "{test:?}: the server's exit status");
}

#[test]
fn write_bw_runs_until_the_client_is_interrupted() {
    runs_until_interrupted(&["write_bw", "-s", "4096"], false);
}

#[test]
fn send_bw_runs_until_the_client_is_interrupted() {
    runs_until_interrupted(&["send_bw", "-s", "4096"], false);
}

/// Both sides run in `-b`: the server's interrupt ends the client's run too.
#[test]
fn bidirectional_read_bw_ends_from_either_side() {
    runs_until_interrupted(&["read_bw", "-b", "-s", "4096"], true);
    runs_until_interrupted(&["write_bw", "-b", "-s", "4096"], false);
}
