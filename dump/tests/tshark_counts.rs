//! FPDU counts (total and per opcode) equal tshark's on every real capture.
//!
//! Captures: `/work/shared/lab/siw/captures/*.pcapng` (Linux siw) and
//! `/work/shared/captures/*.pcap` (third party), read in place (override the folders with
//! `IWARP_DUMP_CAPTURES`, colon-separated). tshark's counts are computed at test time with
//! `tshark -r FILE -Y iwarp_ddp_rdmap -T fields -e iwarp_rdma.opcode` (one line per frame,
//! comma-separated when a frame holds several FPDUs). Without tshark the counts written in
//! the lab's `SUMMARY.md` are used instead, and captures it does not describe are skipped;
//! missing folders or files are skipped with a message. `IWARP_DUMP_NO_TSHARK=1` forces
//! the fallback.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use iwarp_dump::decode::opcode_name;

const DEFAULT_DIRS: &str = "/work/shared/lab/siw/captures:/work/shared/captures";

fn captures() -> Vec<PathBuf> {
    let dirs = std::env::var("IWARP_DUMP_CAPTURES").unwrap_or_else(|_| DEFAULT_DIRS.into());
    let mut files = Vec::new();
    for dir in dirs.split(':') {
        let Ok(entries) = std::fs::read_dir(dir) else {
            eprintln!("SKIP: capture folder {dir} is absent");
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if matches!(
                p.extension().and_then(|x| x.to_str()),
                Some("pcap" | "pcapng")
            ) {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}

/// `IWARP_DUMP_NO_TSHARK=1` forces the SUMMARY.md fallback.
fn tshark_available() -> bool {
    std::env::var_os("IWARP_DUMP_NO_TSHARK").is_none()
        && Command::new("tshark")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
}

/// Opcode name -> count, from tshark.
fn tshark_counts(file: &Path) -> BTreeMap<String, u64> {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(file)
        .args([
            "-Y",
            "iwarp_ddp_rdmap",
            "-T",
            "fields",
            "-e",
            "iwarp_rdma.opcode",
        ])
        .args([
            "--disable-heuristic",
            "rpcrdma_iwarp",
            "--disable-heuristic",
            "smb_direct_iwarp",
        ])
        .output()
        .expect("run tshark");
    assert!(out.status.success(), "tshark failed on {}", file.display());
    let mut counts = BTreeMap::new();
    for value in String::from_utf8_lossy(&out.stdout).split(['\n', ',']) {
        let v = value.trim();
        if v.is_empty() {
            continue;
        }
        let op = u8::from_str_radix(v.trim_start_matches("0x"), 16)
            .unwrap_or_else(|_| panic!("tshark opcode {v:?}"));
        *counts.entry(opcode_name(op)).or_insert(0) += 1;
    }
    counts
}

/// Opcode name -> count from SUMMARY.md (`## name` sections with a line
/// `- FPDUs: N in M frames; RDMAP opcodes: Send 40, ReadReq 10, ...`).
fn summary_counts(file: &Path) -> Option<BTreeMap<String, u64>> {
    let summary = std::fs::read_to_string(file.parent()?.join("SUMMARY.md")).ok()?;
    let stem = file.file_stem()?.to_str()?;
    let section = summary
        .split("\n## ")
        .find(|s| s.lines().next() == Some(stem))?;
    let line = section.lines().find(|l| l.starts_with("- FPDUs:"))?;
    let list = line.split("RDMAP opcodes:").nth(1)?;
    let mut counts = BTreeMap::new();
    for item in list.split(',') {
        let mut words = item.split_whitespace();
        let (name, n) = (words.next()?, words.next()?.parse().ok()?);
        let name = match name {
            "ReadReq" => "Read Request",
            "ReadResp" => "Read Response",
            "SendInv" => "Send with Invalidate",
            "SendSE" => "Send with SE",
            "SendSEInv" => "Send with SE and Invalidate",
            "AtomicReq" => "Atomic Request",
            "AtomicResp" => "Atomic Response",
            other => other,
        };
        counts.insert(name.to_owned(), n);
    }
    Some(counts)
}

#[test]
fn fpdu_counts_equal_tshark() {
    let files = captures();
    if files.is_empty() {
        eprintln!("SKIP: no capture found");
        return;
    }
    let tshark = tshark_available();
    if !tshark {
        eprintln!("NOTE: tshark is not installed: comparing with the counts in SUMMARY.md");
    }
    let mut compared = 0;
    for file in &files {
        let expected = if tshark {
            tshark_counts(file)
        } else if let Some(c) = summary_counts(file) {
            c
        } else {
            eprintln!("SKIP: {}: no tshark and not in SUMMARY.md", file.display());
            continue;
        };
        let report = iwarp_dump::analyze_file(file, false).expect("readable capture");
        let total: u64 = expected.values().sum();
        eprintln!(
            "{}: ours {} FPDUs {:?}, {} {} {:?}",
            file.display(),
            report.fpdus,
            report.opcodes,
            if tshark { "tshark" } else { "SUMMARY.md" },
            total,
            expected
        );
        assert_eq!(report.fpdus, total, "{}", file.display());
        assert_eq!(report.opcodes, expected, "{}", file.display());
        let per_conn: u64 = report.connections.iter().map(|c| c.fpdus).sum();
        assert_eq!(per_conn, report.fpdus);
        compared += 1;
    }
    assert!(compared > 0 || !tshark, "no capture compared");
}

#[test]
fn summary_md_parses() {
    let file = Path::new("/work/shared/lab/siw/captures/read-bw.pcapng");
    let Some(c) = summary_counts(file) else {
        eprintln!("SKIP: SUMMARY.md absent");
        return;
    };
    assert_eq!(c.get("Read Response"), Some(&48));
    assert_eq!(c.values().sum::<u64>(), 96);
}

#[test]
fn binary_json_has_integer_fpdus_and_exit_status() {
    let Some(file) = captures().into_iter().next() else {
        eprintln!("SKIP: no capture found");
        return;
    };
    let out = Command::new(env!("CARGO_BIN_EXE_iwarp-dump"))
        .arg(&file)
        .arg("--json")
        .arg("-v")
        .output()
        .expect("run iwarp-dump");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON output");
    let total = json["fpdus"].as_u64().expect("integer fpdus");
    let conns = json["connections"].as_array().expect("connections");
    let sum: u64 = conns
        .iter()
        .map(|c| c["fpdus"].as_u64().expect("integer"))
        .sum();
    assert_eq!(total, sum);
    let listed: usize = conns
        .iter()
        .map(|c| c["fpdu_list"].as_array().map_or(0, Vec::len))
        .sum();
    assert_eq!(listed as u64, total);
    assert_eq!(
        out.status.code(),
        json["exit_code"].as_i64().map(|c| c as i32),
        "exit status"
    );
    let report = iwarp_dump::analyze_file(&file, false).unwrap();
    assert_eq!(report.fpdus, total);

    // Usage errors.
    let status = Command::new(env!("CARGO_BIN_EXE_iwarp-dump"))
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(iwarp_dump::report::EXIT_USAGE));
    let status = Command::new(env!("CARGO_BIN_EXE_iwarp-dump"))
        .arg("/nonexistent/capture.pcap")
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(iwarp_dump::report::EXIT_USAGE));
}
