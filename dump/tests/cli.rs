//! The `iwarp-dump` program as a user runs it, on a pcap file written for the test.

mod common;

use std::io::Read;
use std::process::{Command, Stdio};

use common::*;

/// A capture whose `-v` listing is far longer than a pipe holds.
fn long_capture(path: &std::path::Path) {
    let mut c = Conn::new(Options::default());
    for msn in 1..=3000 {
        c.fpdu(I, &send(msn, b"a message of some length"));
    }
    c.write_pcap(path);
}

#[test]
fn a_reader_that_stops_early_ends_it_quietly() {
    let path = std::env::temp_dir().join(format!("iwarp-dump-cli-{}.pcap", std::process::id()));
    long_capture(&path);
    let mut child = Command::new(env!("CARGO_BIN_EXE_iwarp-dump"))
        .arg(&path)
        .arg("-v")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Like `| head -c 100`: read a little, then close the pipe.
    let mut head = [0u8; 100];
    child.stdout.take().unwrap().read_exact(&mut head).unwrap();
    let out = child.wait_with_output().unwrap();
    let _ = std::fs::remove_file(&path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "stderr: {stderr}");
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
}

#[test]
fn the_whole_report_when_it_is_read() {
    let path = std::env::temp_dir().join(format!("iwarp-dump-cli-all-{}.pcap", std::process::id()));
    long_capture(&path);
    let out = Command::new(env!("CARGO_BIN_EXE_iwarp-dump"))
        .arg(&path)
        .arg("-v")
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("3000"), "{}", &text[..text.len().min(2000)]);
}

#[test]
fn usage_errors_name_the_flag_and_help_and_version_exit_zero() {
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_iwarp-dump"))
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&["x.pcap", "--bogus"]);
    assert_eq!(out.status.code(), Some(iwarp_dump::report::EXIT_USAGE));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--bogus"));
    let out = run(&["a.pcap", "b.pcap"]);
    assert_eq!(out.status.code(), Some(iwarp_dump::report::EXIT_USAGE));
    let out = run(&["--version"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("iwarp-dump "));
    let out = run(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Exit status: 0 clean"));
}

/// A capture cut short (a writer stopped in the middle of a packet) is analyzed as far as
/// it reads, and said to be cut short, as tshark and capinfos say it: on stderr, in the
/// report, and by exit status 2, never "findings: none" with status 0.
#[test]
fn a_capture_cut_short_is_a_read_error() {
    let path = std::env::temp_dir().join(format!("iwarp-dump-cut-{}.pcap", std::process::id()));
    long_capture(&path);
    let whole = std::fs::read(&path).unwrap();
    std::fs::write(&path, &whole[..whole.len() - 5]).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_iwarp-dump"))
        .arg(&path)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(iwarp_dump::report::EXIT_READ_ERROR),
        "{stderr}\n{stdout}"
    );
    assert!(
        stderr.contains("appears to have been cut short in the middle of a packet"),
        "{stderr}"
    );
    assert!(stdout.contains("READ ERROR"), "{stdout}");
    assert!(
        stdout.contains("Total: "),
        "what was read is reported: {stdout}"
    );
}
