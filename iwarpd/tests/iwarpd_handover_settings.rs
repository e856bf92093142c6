//! An upgrade keeps the daemon's settings: a successor started with nothing but
//! `--take-over` runs with the settings of the daemon it took over from (CRC, buffer
//! size, receive size, metrics endpoint, control socket, handover socket, capture file),
//! says what it took, and keeps what it was given itself, saying what differs. Three
//! real iwarpd processes, one after the other.

mod common;

use std::process::Command;
use std::time::Duration;

use common::daemon::{Daemon, IWARPD};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `iwarpd check ADDR` (4 rounds of 64 KiB), which must pass; its output.
fn check(addr: &str) -> String {
    let out = Command::new(IWARPD)
        .args(["check", addr, "--count", "4", "--size", "64K"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

/// The status line and body of `GET /metrics` at `addr`.
fn scrape(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("the metrics endpoint");
    write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// (sections, packets) of a pcapng file; every block must parse, to the end.
fn pcapng_blocks(path: &std::path::Path) -> (usize, usize) {
    use pcap_file::pcapng::{Block, PcapNgReader};
    let data = std::fs::read(path).unwrap();
    let mut reader = PcapNgReader::new(&data[..]).expect("a pcapng file");
    let (mut sections, mut packets) = (1, 0);
    while let Some(block) = reader.next_block() {
        match block.expect("every block of the capture reads") {
            Block::SectionHeader(_) => sections += 1,
            Block::EnhancedPacket(_) => packets += 1,
            _ => {}
        }
    }
    (sections, packets)
}

#[test]
fn a_successor_without_flags_runs_with_the_settings_of_the_daemon_before() {
    let dir = std::env::temp_dir().join(format!("iwarpd-settings-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let handover = dir.join("handover.sock").to_str().unwrap().to_owned();
    let pcap = dir.join("capture.pcapng");
    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let metrics = format!("127.0.0.1:{metrics_port}");
    let mut first = Daemon::start(&[
        "--crc",
        "false",
        "--buffer-size",
        "1M",
        "--recv-size",
        "16K",
        "--metrics",
        &metrics,
        "--control",
        "off",
        "--handover",
        &handover,
        "--pcap",
        pcap.to_str().unwrap(),
    ]);
    assert!(check(&first.addr).contains("len 1048576"));

    // Started with nothing but where to take over from.
    let mut second = Daemon::start_with(&["--take-over", &handover]);
    assert!(
        first.wait(Duration::from_secs(20)).success(),
        "{}",
        first.log()
    );
    second.wait_log("iwarpd listening");
    let log = second.log();
    for taken in [
        "crc = false: taken over from the daemon before (this daemon's own setting would be true",
        "buffer_size = 1048576: taken over",
        "recv_size = 16384: taken over",
        &format!("metrics = {metrics}: taken over"),
        "control = off: taken over",
        &format!("handover = {handover}: taken over"),
        "pcap = ",
    ] {
        assert!(
            log.contains(taken),
            "`{taken}` in the successor's log:\n{log}"
        );
    }
    assert!(
        log.contains("crc=false") && log.contains("buffer_size=1048576"),
        "{log}"
    );
    assert!(
        !log.contains("serving local applications"),
        "control = off was taken over: no control socket of its own:\n{log}"
    );
    let out = check(&second.addr);
    assert!(out.contains("len 1048576"), "{out}");
    assert!(
        out.contains("Send + echo: 4 x 16384 octets verified"),
        "{out}"
    );
    // The metrics endpoint moved to the successor, on the same address.
    second.wait_log(&format!("http://{metrics}/metrics"));
    let scraped = scrape(&metrics);
    assert!(
        scraped.starts_with("HTTP/1.1 200") && scraped.contains("iwarpd_connections_total"),
        "{scraped}"
    );

    // It offers the handover where the daemon before did; a third daemon given its own
    // CRC and buffer size keeps them, and says so.
    let mut third = Daemon::start_with(&[
        "--take-over",
        &handover,
        "--crc",
        "true",
        "--buffer-size",
        "2M",
    ]);
    assert!(
        second.wait(Duration::from_secs(20)).success(),
        "{}",
        second.log()
    );
    third.wait_log("iwarpd listening");
    let log = third.log();
    assert!(
        log.contains("crc = true: given by --crc, where the daemon before ran with false"),
        "{log}"
    );
    assert!(
        log.contains("buffer_size = 2097152: given by --buffer-size, where the daemon before ran with 1048576"),
        "{log}"
    );
    assert!(log.contains("recv_size = 16384: taken over"), "{log}");
    let out = check(&third.addr);
    assert!(out.contains("len 2097152"), "{out}");
    third.signal("-TERM");
    assert!(third.wait(Duration::from_secs(20)).success());

    // One capture across the three, each daemon's part whole, in a section of its own.
    let (sections, packets) = pcapng_blocks(&pcap);
    assert_eq!(sections, 3, "one section per daemon");
    assert!(packets > 3 * 20, "the three checks' packets: {packets}");
    if let Ok(out) = Command::new("capinfos").arg(&pcap).output() {
        assert!(out.status.success(), "capinfos: {}", text(&out.stderr));
    }
    let _ = std::fs::remove_dir_all(&dir);
}
