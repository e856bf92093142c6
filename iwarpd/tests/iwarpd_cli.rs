//! The `iwarpd` command line as a new user meets it, with real processes: output into a
//! pipe nobody reads (`| head -c0`), `iwarpd check HOST` without a port and over IPv6,
//! and a misspelled setting in the config file.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::daemon::{Daemon, IWARPD};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `iwarpd ARGS` with its standard output a pipe whose reader closed before it started
/// (`iwarpd ARGS | head -c0`).
fn into_closed_pipe(args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    Command::new(IWARPD)
        .args(args)
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("run iwarpd")
}

/// A control socket path of this test process.
fn control_path(name: &str) -> String {
    std::env::temp_dir()
        .join(format!("iwarpd-cli-{name}-{}.sock", std::process::id()))
        .to_str()
        .unwrap()
        .to_owned()
}

/// Every mode ends as a Unix tool does when its reader has gone: no panic, and the exit
/// status of what it did (the check passed, the counters were read).
#[test]
fn a_closed_standard_output_ends_every_mode_quietly() {
    let sock = control_path("pipe");
    let d = Daemon::start(&["--control", &sock]);
    let runs: [&[&str]; 7] = [
        &["check", &d.addr, "--count", "2", "--size", "4K"],
        &["stat", "--json", "--control", &sock],
        &["stat", "--control", &sock],
        &["stat", "--qps", "--control", &sock],
        &["--help"],
        &["check", "--help"],
        &["--version"],
    ];
    for args in runs {
        let out = into_closed_pipe(args);
        let err = text(&out.stderr);
        assert!(!err.contains("panicked"), "iwarpd {args:?}: {err}");
        assert_eq!(out.status.code(), Some(0), "iwarpd {args:?}: {err}");
    }
    // A check that fails still says so by its status, with its reader gone.
    let out = into_closed_pipe(&["check", &d.addr, "--size", "1G"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(!text(&out.stderr).contains("panicked"));
}

/// A daemon whose standard output nobody reads serves on: its `listening on` line goes
/// nowhere, and it answers on its control socket until SIGTERM, which it exits 0 for.
#[test]
fn a_daemon_whose_output_nobody_reads_serves_on() {
    let sock = control_path("daemon-pipe");
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut child = Command::new(IWARPD)
        .args(["--listen", "127.0.0.1:0", "--control", &sock])
        .stdout(writer)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let stat = loop {
        let out = Command::new(IWARPD)
            .args(["stat", "--json", "--control", &sock])
            .output()
            .unwrap();
        if out.status.success() || child.try_wait().unwrap().is_some() {
            break out;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "no daemon");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(stat.status.success(), "the daemon is gone");
    assert!(text(&stat.stdout).contains("\"clients\""));
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    let err = text(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(0), "{err}");
}

/// `iwarpd check HOST` uses port 4791, `check HOST:PORT` the port given, and IPv6
/// addresses work in brackets with and without a port.
#[test]
fn check_takes_a_host_without_a_port_and_ipv6() {
    // With a port, over IPv6 (when the host has IPv6 loopback).
    if std::net::TcpListener::bind("[::1]:0").is_ok() {
        let d = Daemon::start_with(&["--listen", "[::1]:0", "--control", "off"]);
        assert!(d.addr.starts_with("[::1]:"), "{}", d.addr);
        let out = Command::new(IWARPD)
            .args(["check", &d.addr, "--count", "2", "--size", "4K"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(
            text(&out.stdout).contains(&format!("connected to {}", d.addr)),
            "{}",
            text(&out.stdout)
        );
    } else {
        eprintln!("SKIPPED: no IPv6 loopback: the check over [::1]:PORT");
    }
    // Without a port: 4791, whatever answers there (a refusal names the address too).
    for (host, want) in [
        ("127.0.0.1", "127.0.0.1:4791"),
        ("[::1]", "[::1]:4791"),
        ("::1", "[::1]:4791"),
    ] {
        let out = Command::new(IWARPD)
            .args(["check", host, "--count", "1", "--connect-timeout", "2"])
            .output()
            .unwrap();
        let all = text(&out.stdout) + &text(&out.stderr);
        assert!(all.contains(want), "check {host}: {all}");
        assert!(!all.contains("cannot resolve"), "check {host}: {all}");
    }
}

/// A misspelled key in the config file is named with its file and line, and with the key
/// it most likely meant.
#[test]
fn a_misspelled_config_key_gets_a_did_you_mean() {
    let path = std::env::temp_dir().join(format!("iwarpd-cli-typo-{}.conf", std::process::id()));
    std::fs::write(
        &path,
        "listen = \"127.0.0.1:0\"\n# the buffer\nbufsize = \"1M\"\n",
    )
    .unwrap();
    let out = Command::new(IWARPD)
        .arg("--config")
        .arg(&path)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let want = format!(
        "{} line 3: unknown setting `bufsize`; did you mean `buffer_size`?",
        path.display()
    );
    assert!(err.contains(&want), "{err}");
}
