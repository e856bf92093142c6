//! perftest's flags between two real `iwperf` processes, with perftest's meaning:
//! `-q N` counts every queue pair's iterations, `-o N` sets the outstanding Reads.

mod common;

use std::process::{Child, Command, Output};
use std::time::Duration;

use common::{IWPERF, port, try_finish};

/// iwperf with `args`; a client started right after its server keeps trying while it is
/// not listening yet (the server ignores the flag).
fn spawn(args: &[String]) -> Child {
    let mut a: Vec<&str> = args.iter().map(String::as_str).collect();
    a.extend(["--connect-wait", "10"]);
    common::spawn(IWPERF, &a)
}

/// Its output once it exits (killed after 60 s).
fn finish(child: Child) -> Output {
    try_finish(child, Duration::from_secs(60)).unwrap_or_else(|o| o)
}

/// Runs `server` and `client` flags (the test first) against each other; both must
/// succeed. Their standard outputs.
fn pair(server: &str, client: &str) -> (String, String) {
    let p = port();
    let args = |flags: &str, peer: Option<&str>| -> Vec<String> {
        let mut a: Vec<String> = flags.split_whitespace().map(String::from).collect();
        a.extend(["-p".to_owned(), p.clone()]);
        a.extend(peer.map(String::from));
        a
    };
    let srv = spawn(&args(server, None));
    std::thread::sleep(Duration::from_millis(300));
    let cli = finish(spawn(&args(client, Some("127.0.0.1"))));
    let srv = finish(srv);
    for (out, who) in [(&srv, "server"), (&cli, "client")] {
        assert!(
            out.status.success(),
            "{who}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = |o: &Output| String::from_utf8_lossy(&o.stdout).into_owned();
    (text(&srv), text(&cli))
}

/// perftest prints the iterations of all the queue pairs (`-n` times `-q`).
#[test]
fn several_queue_pairs_report_the_iterations_of_all_of_them() {
    let (server, client) = pair(
        "write_bw -q 2 -s 4096 -n 50 --json",
        "write_bw -q 2 -s 4096 -n 50 --json",
    );
    for (out, who) in [(&server, "server"), (&client, "client")] {
        assert!(out.contains("\"iterations\":100"), "{who}: {out}");
    }
}

/// `-o N`: N Reads outstanding (the ORD offered), shown in the banner as perftest's
/// "Outstand reads"; on a test without Reads or Atomics it is a usage error.
#[test]
fn outs_sets_the_outstanding_reads() {
    let (_, client) = pair("read_bw -s 4096 -n 100", "read_bw -s 4096 -n 100 -o 4");
    assert!(client.contains("Outstand reads: 4"), "{client}");
    assert!(client.contains(" 4096       100 "), "{client}");
    let out = Command::new(IWPERF)
        .args(["write_bw", "-o", "4"])
        .output()
        .expect("run iwperf");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("-o (outstanding reads)"));
}
