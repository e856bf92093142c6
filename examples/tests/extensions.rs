//! `iwperf send_lat --imm` between two real processes: this stack's Send with Immediate
//! Data when both agree, and a plain-words refusal when the peer turned it off.

mod common;

use std::process::{Child, Output};
use std::time::Duration;

use common::{IWPERF, port, try_finish};

/// iwperf with `args`; a client started right after its server keeps trying while it is
/// not listening yet (the server ignores the flag).
fn spawn<S: AsRef<str>>(args: &[S]) -> Child {
    let mut a: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    a.extend(["--connect-wait", "10"]);
    common::spawn(IWPERF, &a)
}

/// Its output once it exits (killed after 60 s).
fn finish(child: Child) -> Output {
    try_finish(child, Duration::from_secs(60)).unwrap_or_else(|o| o)
}

/// Runs a server with `server` flags and a client with `client` flags; their outputs.
fn pair(server: &[&str], client: &[&str]) -> (Output, Output) {
    let p = port();
    let args = |extra: &[&str], peer: Option<&str>| {
        let common = ["send_lat", "-s", "8", "-n", "2000", "--timeout", "10", "-p"];
        let mut a: Vec<String> = common.iter().map(|s| s.to_string()).collect();
        a.push(p.clone());
        a.extend(extra.iter().chain(&peer).map(|s| s.to_string()));
        a
    };
    let srv = spawn(&args(server, None));
    std::thread::sleep(Duration::from_millis(300));
    let cli = finish(spawn(&args(client, Some("127.0.0.1"))));
    (finish(srv), cli)
}

#[test]
fn send_lat_with_immediate_data_runs_when_both_agree() {
    let (s, c) = pair(&["--imm"], &["--imm"]);
    for (out, who) in [(&s, "server"), (&c, "client")] {
        assert!(
            out.status.success(),
            "{who}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let table = String::from_utf8_lossy(&c.stdout);
    assert!(table.contains(" 8       2000"), "{table}");
}

#[test]
fn imm_against_a_peer_without_the_extension_is_refused_in_plain_words() {
    let (_s, c) = pair(&["--extensions", "none", "--imm"], &["--imm"]);
    assert!(!c.status.success());
    let err = String::from_utf8_lossy(&c.stderr);
    assert!(
        err.contains("--imm needs Send with Immediate Data, which the peer did not agree to"),
        "{err}"
    );
    // A bad list names the known ones.
    let out = finish(spawn(&["send_lat", "--extensions", "imm"]));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`imm`") && err.contains("send_imm"), "{err}");
}
