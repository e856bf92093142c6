//! What every tool answers on its command line before doing anything: `--version`, and
//! a usage error (exit status 2, naming the flag or the problem) for a bad flag or a
//! missing test. (`iwarpd` and `iwarp-dump` are tested in their own crates.)

use std::process::Command;

fn run(bin: &str, args: &[&str]) -> std::process::Output {
    Command::new(bin).args(args).output().expect("run the tool")
}

#[test]
fn every_tool_answers_version() {
    for (bin, name) in [
        (env!("CARGO_BIN_EXE_iwperf"), "iwperf"),
        (env!("CARGO_BIN_EXE_iwarp-rping"), "iwarp-rping"),
        (env!("CARGO_BIN_EXE_iwbench"), "iwbench"),
        (env!("CARGO_BIN_EXE_demo"), "demo"),
        (env!("CARGO_BIN_EXE_iwarp-devinfo"), "iwarp-devinfo"),
        (env!("CARGO_BIN_EXE_kv"), "kv"),
        (env!("CARGO_BIN_EXE_split"), "split"),
        (env!("CARGO_BIN_EXE_qp-hold"), "qp-hold"),
    ] {
        let out = run(bin, &["--version"]);
        assert!(out.status.success(), "{name}: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(text.trim(), format!("{name} {}", env!("CARGO_PKG_VERSION")));
        let out = run(bin, &["--bogus-flag"]);
        assert_eq!(out.status.code(), Some(2), "{name}: {out:?}");
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(text.contains("--bogus-flag"), "{name}: {text}");
    }
}

#[test]
fn iwperf_without_a_test_is_a_usage_error() {
    let out = run(env!("CARGO_BIN_EXE_iwperf"), &[]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("no test given") && text.contains("write_bw"),
        "{text}"
    );
    let out = run(env!("CARGO_BIN_EXE_iwperf"), &["write_bw", "--bogus"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--bogus"));
}

/// `iwarp-devinfo -v` lays the embedded device out as `ibv_devinfo -v` does; a daemon
/// that is not there exits 1 naming the socket; a bad flag is a usage error.
#[test]
fn devinfo_prints_the_device_as_ibv_devinfo_does() {
    let bin = env!("CARGO_BIN_EXE_iwarp-devinfo");
    let out = run(bin, &["-v"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    for line in [
        "hca_id:\tiwarp0",
        "transport:\t\t\tiWARP (1)",
        "backend:\t\t\tembedded",
        "max_qp_wr:\t\t\t256",
        "max_qp_rd_atom:\t\t\t16",
        "mpa_crc:\t\t\ton",
        "state:\t\t\tPORT_ACTIVE (4)",
    ] {
        assert!(text.contains(line), "{line:?} in:\n{text}");
    }
    assert!(!run(bin, &[]).stdout.is_empty());
    let out = run(bin, &["--daemon", "/nonexistent/iwarpd.sock"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/iwarpd.sock"));
    assert_eq!(run(bin, &["--bogus"]).status.code(), Some(2));
}

/// A client with nothing listening at the server's address ends with status 1 and says
/// so in words, after perftest's short retry (no long wait announced); `localhost` is
/// resolved.
#[test]
fn nothing_listening_is_named_and_ends_the_client() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port().to_string()
    };
    let out = run(
        env!("CARGO_BIN_EXE_iwperf"),
        &["write_bw", "-p", &port, "localhost"],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("nothing is listening at 127.0.0.1:{port}"))
            && err.contains("start the server first"),
        "{err}"
    );
    assert!(!err.contains("retrying"), "{err}");
    // A longer --connect-wait is announced, then ends the same way.
    let out = run(
        env!("CARGO_BIN_EXE_iwperf"),
        &["write_bw", "-p", &port, "--connect-wait", "3", "localhost"],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("retrying for up to 3 s") && err.contains("nothing is listening"),
        "{err}"
    );
    let out = run(
        env!("CARGO_BIN_EXE_iwarp-rping"),
        &["-c", "-a", "localhost", "-p", &port, "-C", "1"],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "connecting to 127.0.0.1:{port}: nothing is listening"
        )),
        "{err}"
    );
}

/// Every tool that makes connections takes the same `--extensions LIST` (iwarp-rping's
/// default is none, the others' all): a wrong name is a usage error naming the known
/// ones, and `none` runs.
#[test]
fn every_tool_takes_extensions() {
    let tools: [(&str, &[&str]); 6] = [
        (env!("CARGO_BIN_EXE_iwperf"), &["write_bw"]),
        (env!("CARGO_BIN_EXE_iwarp-rping"), &["-s"]),
        (env!("CARGO_BIN_EXE_demo"), &[]),
        (env!("CARGO_BIN_EXE_kv"), &[]),
        (env!("CARGO_BIN_EXE_split"), &[]),
        (env!("CARGO_BIN_EXE_qp-hold"), &["--connect", "127.0.0.1:9"]),
    ];
    for (bin, args) in tools {
        let mut bad = args.to_vec();
        bad.extend(["--extensions", "imm"]);
        let out = run(bin, &bad);
        assert_eq!(out.status.code(), Some(2), "{bin}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("`imm`") && err.contains("send_imm"),
            "{bin}: {err}"
        );
    }
    for (bin, args) in [
        (
            env!("CARGO_BIN_EXE_demo"),
            &["--total", "1M", "--pings", "10"][..],
        ),
        (env!("CARGO_BIN_EXE_kv"), &[][..]),
        (env!("CARGO_BIN_EXE_split"), &["-n", "50"][..]),
        (
            env!("CARGO_BIN_EXE_qp-hold"),
            &["--connect", "127.0.0.1:9", "-n", "0"][..],
        ),
    ] {
        let mut none = args.to_vec();
        none.extend(["--extensions", "none"]);
        let out = run(bin, &none);
        assert!(out.status.success(), "{bin}: {out:?}");
    }
}
