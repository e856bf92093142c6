//! `iwarp-rping` between two real processes: what each prints.

mod common;

use std::process::{Child, Output};
use std::time::{Duration, Instant};

use common::{RPING, port, try_finish};

fn spawn(args: &[&str]) -> Child {
    common::spawn(RPING, args)
}

/// Its output once it exits (killed after 60 s).
fn finish(child: Child) -> Output {
    try_finish(child, Duration::from_secs(60)).unwrap_or_else(|o| o)
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
    common::text(&out.stdout)
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

/// `text` without its ANSI colour codes (the `-d` log colours its fields).
fn plain(text: &[u8]) -> String {
    let text = String::from_utf8_lossy(text);
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // ESC [ ... m
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// rping's traffic is standard iWARP by default, which Wireshark decodes: neither side
/// offers this stack's extensions (Read V2 would make every Read Request "Malformed
/// Packet" in tshark), as each side's log of what its connection agreed says;
/// `--extensions all` on both turns them on.
#[test]
fn the_default_traffic_has_no_extension() {
    for (flags, agreed) in [
        (&[][..], "extensions=none"),
        (&["--extensions", "all"][..], "extensions=send_imm,read_v2"),
    ] {
        let mut extra = vec!["-d"];
        extra.extend_from_slice(flags);
        let (server, client) = pair("127.0.0.1", "127.0.0.1", "2", &extra);
        for (out, who) in [(&server, "server"), (&client, "client")] {
            let log = plain(&out.stderr);
            let line = log
                .lines()
                .find(|l| l.contains("this stack's extensions agreed"))
                .unwrap_or_else(|| panic!("{who}: no line on the extensions in:\n{log}"));
            assert!(line.ends_with(agreed), "{who} with {flags:?}: {line}");
        }
    }
}
