//! `iwarp-rping` between two real processes: what each prints.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const RPING: &str = env!("CARGO_BIN_EXE_iwarp-rping");

fn spawn(args: &[&str]) -> Child {
    Command::new(RPING)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start iwarp-rping")
}

/// Its output once it exits (killed after 60 s).
fn finish(mut child: Child) -> Output {
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

fn port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port().to_string()
}

/// Runs a server and a client of `count` pings at `addr` (the server on `bind`), with
/// `extra` flags on both; their outputs, each checked to be a success.
fn pair(bind: &str, addr: &str, count: &str, extra: &[&str]) -> (Output, Output) {
    let p = port();
    let mut server_args = vec!["-s", "-a", bind, "-p", &p];
    server_args.extend_from_slice(extra);
    let server = spawn(&server_args);
    let mut client_args = vec!["-c", "-a", addr, "-p", &p, "-C", count, "-V"];
    client_args.extend_from_slice(extra);
    let client = {
        // The server needs a moment to listen: retry a refused client.
        let start = Instant::now();
        loop {
            let out = finish(spawn(&client_args));
            let refused = String::from_utf8_lossy(&out.stderr).contains("nothing is listening");
            if !refused || start.elapsed() > Duration::from_secs(20) {
                break out;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let server = finish(server);
    for (out, who) in [(&server, "server"), (&client, "client")] {
        assert!(
            out.status.success(),
            "{who}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    (server, client)
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn one_ping_is_counted_in_the_singular() {
    let (server, client) = pair("127.0.0.1", "127.0.0.1", "1", &[]);
    assert!(
        stdout(&client).contains("iwarp-rping: client done: 1 ping, 1 verified"),
        "{}",
        stdout(&client)
    );
    assert!(
        stdout(&server).contains("iwarp-rping: server done: 1 connection, 1 ping"),
        "{}",
        stdout(&server)
    );
}
