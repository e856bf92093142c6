//! How every binary of this crate ends when its output is not read: a closed standard
//! output (`tool | head -1` after its line) ends it quietly with status 141, as SIGPIPE
//! ends a C tool, never with a panic; and a failure is a sentence (`tool: ...`), never a
//! `Debug` dump of the error.

use std::process::{Command, Output, Stdio};

/// Every binary, with arguments that make it print to standard output at once.
const TOOLS: [(&str, &str, &[&str]); 8] = [
    (
        env!("CARGO_BIN_EXE_iwperf"),
        "iwperf",
        &["write_bw", "-p", "0"],
    ),
    (
        env!("CARGO_BIN_EXE_iwarp-rping"),
        "iwarp-rping",
        &["-s", "-p", "0"],
    ),
    (env!("CARGO_BIN_EXE_iwarp-devinfo"), "iwarp-devinfo", &[]),
    (
        env!("CARGO_BIN_EXE_demo"),
        "demo",
        &["--total", "1M", "--pings", "10"],
    ),
    (env!("CARGO_BIN_EXE_kv"), "kv", &[]),
    (env!("CARGO_BIN_EXE_split"), "split", &["-n", "20"]),
    (
        env!("CARGO_BIN_EXE_iwbench"),
        "iwbench",
        &["--smoke", "--only", "qps"],
    ),
    (
        env!("CARGO_BIN_EXE_qp-hold"),
        "qp-hold",
        &["--listen", "127.0.0.1:0", "-n", "1"],
    ),
];

/// Runs `bin` with its standard output a pipe whose reader is already closed.
fn into_a_closed_pipe(bin: &str, args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("run the tool")
}

#[test]
fn a_closed_standard_output_ends_every_tool_quietly() {
    for (bin, name, args) in TOOLS {
        let out = into_a_closed_pipe(bin, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{name}: {err}");
        assert_eq!(out.status.code(), Some(141), "{name}: {err}");
        assert!(!err.contains("Broken pipe"), "{name} ends quietly: {err}");
    }
}

/// With `IWARP_DEVICE` naming a daemon that is not there, every tool fails with status 1
/// and says so in words, naming the socket: no `Error: Unreachable("...")`.
#[test]
fn a_failure_is_a_sentence_not_a_debug_dump() {
    const SOCK: &str = "/nonexistent/iwarpd.sock";
    for (bin, name, args) in TOOLS {
        let out = Command::new(bin)
            .args(args)
            .env("IWARP_DEVICE", format!("unix:{SOCK}"))
            .stdin(Stdio::null())
            .output()
            .expect("run the tool");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {err}");
        assert!(err.contains(SOCK), "{name} names the socket: {err}");
        for debug in ["Error: ", "Unreachable(", "Io(", "Mpa(", "Custom {"] {
            assert!(
                !err.contains(debug),
                "{name}: a Debug form ({debug}): {err}"
            );
        }
        assert!(
            err.starts_with(&format!("{name}: ")) || err.starts_with("demo failed: "),
            "{name}: {err}"
        );
    }
}
