//! `iwarp-dump`: a capture analyzer for iWARP (MPA, DDP, RDMAP over TCP).
//!
//! ```text
//!   pcap / pcapng ─▶ capture   (pcap-file, etherparse: Ethernet, SLL, SLL2, null/loopback)
//!   TCP segments  ─▶ reassembly (per direction: retransmissions, out of order, gaps)
//!   byte streams  ─▶ analyzer  (MPA Request/Reply via mpa::wire::frame, negotiation)
//!                 ─▶ framing   (FPDUs: ULPDU_Length, markers, PAD, CRC32c; goes on after
//!                               a bad CRC, resynchronises on markers after a gap)
//!   ULPDUs        ─▶ decode    (ddp / rdmap wire views: DDP, RDMAP, Read Request,
//!                               Terminate, Atomic, Immediate)
//!                 ─▶ checks    (MSN, MO/TO, Read/Atomic pairing, IRD, RTR, invalidated
//!                               STags, reserved bits, queue vs opcode)
//!                 ─▶ report    (human summary, `-v` listing, `--json`, exit status)
//! ```
//!
//! Everything here is sans-IO except [`analyze_file`], which reads the file.
//!
//! # Exit status of the binary
//!
//! | code | meaning |
//! |---|---|
//! | 0 ([`report::EXIT_OK`]) | no violation, no warning |
//! | 1 ([`report::EXIT_VIOLATION`]) | at least one protocol violation |
//! | 2 ([`report::EXIT_USAGE`], [`report::EXIT_READ_ERROR`]) | bad arguments, or a capture that cannot be read to its end (cut short, damaged): what was read is reported, and why it stopped |
//! | 3 ([`report::EXIT_WARNING`]) | no violation, but warnings: data missing from the capture, a stream that cannot be framed, a Terminate message, a partial FPDU at the end |
#![forbid(unsafe_code)]

pub mod analyzer;
pub mod capture;
pub mod checks;
pub mod damage;
pub mod decode;
pub mod finding;
pub mod framing;
pub mod reassembly;
pub mod report;

pub use analyzer::Analyzer;
pub use capture::{Capture, CaptureError, TcpSegment, read_capture};
pub use finding::{Check, Dir, Finding, Severity};
pub use report::Report;

/// Analyzes a capture held in memory; `verbose` keeps the per-FPDU listing. A capture
/// that cannot be read to its end is analyzed as far as it was read, and the report says
/// why it stopped ([`Report::read_error`], exit status [`report::EXIT_READ_ERROR`]).
pub fn analyze_bytes(bytes: &[u8], verbose: bool) -> Result<Report, CaptureError> {
    let capture = read_capture(bytes)?;
    let mut report = analyze_segments(&capture.segments, capture.frames, verbose);
    if let Some(damage) = capture.damage {
        report.read_error = Some(damage.to_string());
        report.exit_code = report::EXIT_READ_ERROR;
    }
    Ok(report)
}

/// Analyzes TCP segments (capture order); `frames` is the number of frames in the file.
pub fn analyze_segments(segments: &[TcpSegment], frames: u64, verbose: bool) -> Report {
    let mut analyzer = Analyzer::new(verbose);
    for s in segments {
        analyzer.push(s);
    }
    analyzer.finish(frames)
}

/// Reads and analyzes a capture file.
pub fn analyze_file(path: &std::path::Path, verbose: bool) -> Result<Report, CaptureError> {
    let bytes =
        std::fs::read(path).map_err(|e| CaptureError::new(format!("{}: {e}", path.display())))?;
    analyze_bytes(&bytes, verbose)
}
