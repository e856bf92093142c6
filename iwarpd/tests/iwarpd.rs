//! The `iwarpd` binary end to end on loopback: the daemon prints its address, `iwarpd
//! check` exercises it, SIGTERM shuts it down with exit 0, and failures name their cause.

use std::io::Read;
use std::net::TcpListener;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::daemon::{Daemon, IWARPD};

fn check(args: &[&str]) -> Output {
    Command::new(IWARPD)
        .arg("check")
        .args(args)
        .output()
        .expect("run iwarpd check")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn check_passes_against_the_daemon_and_sigterm_exits_zero() {
    let mut d = Daemon::start(&["--buffer-size", "2M", "--recv-size", "16K"]);
    let out = check(&[&d.addr, "--size", "256K", "--count", "32"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("remote buffer stag"), "{stdout}");
    assert!(
        stdout.contains("len 2097152"),
        "the daemon's buffer_size: {stdout}"
    );
    assert!(
        stdout.contains("RDMA Write + Read-back: 32 x 262144 octets verified"),
        "{stdout}"
    );
    // Sends are capped at the daemon's receive size.
    assert!(
        stdout.contains("Send + echo: 32 x 16384 octets verified"),
        "{stdout}"
    );
    assert!(stdout.trim_end().ends_with("check passed"), "{stdout}");
    d.wait_log("connection ended");

    d.signal("-TERM");
    let st = d.wait(Duration::from_secs(20));
    assert_eq!(st.code(), Some(0), "exit status; log:\n{}", d.log());
    let log = d.log();
    assert!(log.contains("signal=\"SIGTERM\""), "{log}");
    assert!(log.contains("shutdown complete"), "{log}");
    assert!(
        log.contains("messages=32"),
        "the daemon echoed 32 Sends: {log}"
    );
}

#[test]
fn max_qps_rejects_and_sigint_with_a_connection_open_disconnects_it() {
    let mut d = Daemon::start(&["--max-qps", "1"]);
    let addr = d.addr.clone();
    // A check long enough to still run when the signal arrives.
    let client =
        std::thread::spawn(move || check(&[&addr, "--size", "64K", "--count", "10000000"]));
    d.wait_log("connection accepted");
    // A second connection is one too many.
    let out = check(&[&d.addr, "--count", "1"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("rejected the connection: \"iwarpd: too many connections (max_qps)\""),
        "{err}"
    );
    d.signal("-INT");
    let st = d.wait(Duration::from_secs(20));
    assert_eq!(st.code(), Some(0), "log:\n{}", d.log());
    let log = d.log();
    assert!(log.contains("open_qps=1"), "{log}");
    // How it ended depends on the client's traffic at that moment (a graceful close, or
    // the peer hanging up mid-stream); either way the connection was ended and reported.
    assert!(log.contains("connection ended"), "{log}");
    let out = client.join().unwrap();
    assert_eq!(out.status.code(), Some(1), "the check saw the disconnect");
    let err = text(&out.stderr);
    assert!(err.contains("check FAILED"), "{err}");
    assert!(
        err.contains("the queue pair ended"),
        "names the cause: {err}"
    );
}

#[test]
fn check_failures_exit_1_naming_the_cause() {
    // Nothing listens on a port that was just free.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = check(&[&format!("127.0.0.1:{port}"), "--count", "1"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("cannot connect to 127.0.0.1:"), "{err}");

    // A TCP server that never speaks MPA.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    let out = check(&[&addr, "--connect-timeout", "1"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains(
            "no MPA Reply within 1 s: the peer accepted the TCP connection and sent nothing"
        ),
        "{err}"
    );
    drop(silent);

    // A transfer larger than the daemon's buffer.
    let d = Daemon::start(&["--buffer-size", "64K"]);
    let out = check(&[&d.addr, "--size", "1M"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("larger than the daemon's buffer (65536 octets)"),
        "{err}"
    );
}

#[test]
fn config_errors_exit_2_naming_the_line() {
    let path = std::env::temp_dir().join(format!("iwarpd-test-{}.conf", std::process::id()));
    std::fs::write(&path, "# test\nbuffer_size = 12Q\n").unwrap();
    let out = Command::new(IWARPD)
        .args(["--listen", "127.0.0.1:0", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("line 2: `buffer_size = 12Q`"), "{err}");

    let out = Command::new(IWARPD).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no listen address"));

    let out = Command::new(IWARPD)
        .args(["--nonsense", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("unknown setting `nonsense`"), "{err}");
    assert!(err.contains("--nonsense"), "clap names the flag: {err}");
}

#[test]
fn a_config_file_configures_the_daemon() {
    let path = std::env::temp_dir().join(format!("iwarpd-cfg-{}.conf", std::process::id()));
    std::fs::write(
        &path,
        "listen = \"127.0.0.1:1\"  # overridden by the flag\nbuffer_size = \"128K\"\ncrc = false\n",
    )
    .unwrap();
    let d = Daemon::start(&["--config", path.to_str().unwrap()]);
    let _ = std::fs::remove_file(&path);
    let out = check(&[&d.addr, "--count", "4", "--crc", "false"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("len 131072"), "{stdout}");
    assert!(
        stdout.contains("4 x 131072 octets verified"),
        "--size defaults to the whole buffer when smaller than 1M: {stdout}"
    );
    assert!(d.log().contains("crc=false"), "{}", d.log());
}

/// A client speaking MPA by hand over a blocking socket: returns the socket after the
/// handshake and a framer for its FPDUs.
fn raw_client(addr: &str) -> (std::net::TcpStream, mpa::Framer) {
    use std::io::Write;
    let mut sock = std::net::TcpStream::connect(addr).expect("connect");
    let now = Instant::now();
    let mut hs = mpa::Handshake::initiator(mpa::MpaConfig::default(), b"", now).unwrap();
    let mut rx = bytes::BytesMut::new();
    loop {
        let mut out = bytes::BytesMut::new();
        while hs.poll_transmit(&mut out) {}
        sock.write_all(&out).unwrap();
        if let Some(ev) = hs.poll_event() {
            let mpa::HandshakeEvent::Established { negotiated, .. } = ev else {
                panic!("handshake: {ev:?}");
            };
            assert!(
                rx.is_empty(),
                "the daemon sent nothing before our first FPDU"
            );
            return (
                sock,
                mpa::Framer::new(negotiated.markers_tx, negotiated.crc),
            );
        }
        let mut buf = [0u8; 512];
        let n = sock.read(&mut buf).unwrap();
        assert!(n > 0, "the daemon closed during MPA");
        rx.extend_from_slice(&buf[..n]);
        hs.handle_input(&mut rx, now);
    }
}

/// A client that sends and never reads its echoes: the daemon neither drops echoes nor
/// logs a line per echo; it disconnects that client once more echoes wait than it has
/// credits, says why in one line, and goes on serving others.
#[test]
fn a_client_that_never_reads_its_echoes_is_disconnected_with_the_reason() {
    use std::io::Write;
    let d = Daemon::start(&["--recv-depth", "16", "--stall-timeout", "0"]);
    let (mut sock, mut framer) = raw_client(&d.addr);
    let payload = vec![0x5a; 32 * 1024];
    let mut msn = 1;
    // Until the daemon hangs up (write error), or far more than any socket buffer holds;
    // in bursts within the 16 credits, paced so the daemon reposts its receives.
    while msn < 20_000 {
        let mut fpdu = bytes::BytesMut::new();
        rdmap::testing::send_fpdu(&mut framer, msn, &payload, &mut fpdu);
        if sock.write_all(&fpdu).is_err() {
            break;
        }
        if msn % 8 == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
        msn += 1;
    }
    d.wait_log("reads its echoes");
    let log = d.log();
    assert_eq!(log.matches("reads its echoes").count(), 1, "{log}");
    assert!(!log.contains("cannot post"), "{log}");
    let out = check(&[&d.addr, "--count", "10"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// A client that completes the handshake and says nothing more is dropped after the
/// daemon's idle timeout; one address cannot hold more than its share of connections.
#[test]
fn idle_clients_time_out_and_one_address_gets_its_share_only() {
    let d = Daemon::start(&["--idle-timeout", "1", "--max-qps-per-address", "1"]);
    let (mut sock, _) = raw_client(&d.addr);
    // While the silent client holds its place, a second from the same address is refused.
    let out = check(&[&d.addr, "--count", "1"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("max_qps_per_address"), "{err}");
    // Then the silent one is dropped: EOF within a few seconds.
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let start = Instant::now();
    let mut buf = [0u8; 64];
    let n = sock.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "the daemon closed the idle connection");
    assert!(start.elapsed() < Duration::from_secs(10));
    d.wait_log("timed out");
    // And the address is free again.
    let out = check(&[&d.addr, "--count", "1"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// A client killed with SIGKILL in the middle of its traffic: the daemon ends that
/// connection with a named reason and serves the next client.
#[test]
fn a_client_killed_with_sigkill_is_cleaned_up() {
    let d = Daemon::start(&[]);
    let mut client = Command::new(IWARPD)
        .args(["check", &d.addr, "--size", "64K", "--count", "10000000"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    d.wait_log("connection accepted");
    std::thread::sleep(Duration::from_millis(300));
    client.kill().unwrap(); // SIGKILL
    client.wait().unwrap();
    d.wait_log("connection ended");
    let log = d.log();
    assert!(
        log.contains("the TCP connection was lost") || log.contains("closed gracefully"),
        "{log}"
    );
    let out = check(&[&d.addr, "--count", "10"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// Refused handshakes are an operator's business: each is logged at WARN (the daemon's
/// default level is info), but a flood gets a few lines per 10 s and then a count of the
/// ones left out, not a line each.
#[test]
fn refused_handshakes_are_warned_a_few_at_a_time() {
    use std::io::Write;
    let d = Daemon::start(&[]);
    for _ in 0..30 {
        let mut s = std::net::TcpStream::connect(&d.addr).unwrap();
        let _ = s.write_all(&[0x5a; 40]);
        // The daemon closes it: wait for that, so the refusals come one after another.
        let _ = s.read(&mut [0u8; 16]);
    }
    // (The count of those left out comes with the first line of the next 10 s: LogLimit's
    // own test shows it on the paused clock.)
    d.wait_log("MPA request refused");
    let log = d.log();
    let lines = log.matches("MPA request refused").count();
    assert!((1..=5).contains(&lines), "{lines} lines:\n{log}");
    assert!(log.contains("WARN"), "{log}");
    let out = check(&[&d.addr, "--count", "1"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// A message as large as the daemon's buffer has one place there: the line says so, not
/// "rotating over 1 slots".
#[test]
fn check_counts_one_slot_in_the_singular() {
    let d = Daemon::start(&["--buffer-size", "256K"]);
    let out = check(&[&d.addr, "--size", "256K", "--count", "2"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.contains("all in one slot of the remote buffer"),
        "{stdout}"
    );
}
