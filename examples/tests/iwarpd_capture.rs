//! `iwarpd --pcap` with both of its services capturing at once: the built-in service's
//! connections (`iwarpd check`) and a local application's (iwarp-rping through the
//! daemon, on the local service's shard engines) all go to one file through one writer,
//! and tshark, capinfos and iwarp-dump read the whole file.

mod common;

use std::process::Command;

use common::*;

/// `capinfos -c FILE`'s packet count, or `None` without capinfos.
fn capinfos_packets(file: &str) -> Option<u64> {
    let out = Command::new("capinfos")
        .args(["-c", "-M", file])
        .output()
        .ok()?;
    let err = text(&out.stderr);
    assert!(out.status.success(), "capinfos: {err}");
    assert!(!err.contains("appears"), "capinfos: {err}");
    let n = text(&out.stdout)
        .lines()
        .find_map(|l| {
            l.strip_prefix("Number of packets:")
                .map(|n| n.trim().to_owned())
        })
        .expect("capinfos prints the number of packets");
    Some(n.parse().unwrap_or_else(|_| panic!("packets: {n}")))
}

/// `tshark -r FILE`'s frame count (every frame decoded, no read error), or `None`
/// without tshark.
fn tshark_frames(file: &str) -> Option<u64> {
    let out = Command::new("tshark")
        .args(["-r", file, "-T", "fields", "-e", "frame.number"])
        .output()
        .ok()?;
    let err = text(&out.stderr);
    assert!(out.status.success(), "tshark: {err}");
    assert!(!err.contains("appears"), "tshark: {err}");
    Some(text(&out.stdout).lines().count() as u64)
}

#[test]
fn both_services_capture_to_one_whole_file() {
    let pcap = temp_path("both.pcapng");
    let file = pcap.to_str().unwrap();
    let mut d = Iwarpd::start("capture", &["--pcap", file, "--local-threads", "2"]);
    // The built-in service, then a local application, then the built-in service again:
    // either order used to lose or corrupt the other's packets.
    iwarpd(&["check", &d.addr, "--count", "8", "--size", "64K"]);
    rping_through(d.sock(), "10");
    iwarpd(&["check", &d.addr, "--count", "8", "--size", "64K"]);
    let st = d.stop();
    assert!(st.success(), "iwarpd: {st}; log:\n{}", d.log());

    let dump = Command::new(workspace_bin("iwarp-dump", "iwarp-dump"))
        .args([file, "--json"])
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&dump.stdout)
        .unwrap_or_else(|e| panic!("iwarp-dump --json: {e}: {}", text(&dump.stderr)));
    assert!(
        report.get("read_error").is_none(),
        "iwarp-dump read the whole file: {}",
        text(&dump.stderr)
    );
    assert_ne!(dump.status.code(), Some(2), "{}", text(&dump.stderr));
    // Two checks on the built-in service and the rping client's connection.
    let conns = report["connections"].as_array().expect("connections");
    assert_eq!(conns.len(), 3, "{}", text(&dump.stdout));
    let mut ports = conns
        .iter()
        .map(|c| c["responder"].as_str().unwrap().to_owned())
        .collect::<Vec<_>>();
    ports.sort();
    assert_eq!(
        ports.iter().filter(|p| **p == d.addr).count(),
        2,
        "both checks reached the built-in service: {ports:?}"
    );
    for c in conns {
        assert!(c["fpdus"].as_u64().unwrap() > 10, "traffic in {c}");
    }
    let frames = report["frames"].as_u64().unwrap();
    match (capinfos_packets(file), tshark_frames(file)) {
        (Some(c), Some(t)) => {
            assert_eq!(c, frames, "capinfos and iwarp-dump count the same frames");
            assert_eq!(t, frames, "tshark and iwarp-dump count the same frames");
        }
        _ => eprintln!("SKIPPED: tshark/capinfos not installed: iwarp-dump alone read the file"),
    }
    let _ = std::fs::remove_file(&pcap);
}
