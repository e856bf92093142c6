//! The analysis result (serialised as-is for `--json`) and its human rendering.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::decode::{DdpInfo, RdmapInfo};
use crate::finding::{Dir, Finding, Severity};
use crate::reassembly::ReassemblyStats;

/// Exit status: no violation, no warning.
pub const EXIT_OK: i32 = 0;
/// Exit status: at least one protocol violation.
pub const EXIT_VIOLATION: i32 = 1;
/// Exit status: bad usage or unreadable file.
pub const EXIT_USAGE: i32 = 2;
/// Exit status: the capture could not be read to its end (cut short, or damaged): as
/// tshark and capinfos, a read error, whatever the part read showed.
pub const EXIT_READ_ERROR: i32 = EXIT_USAGE;
/// Exit status: no violation, but the analysis is incomplete (warnings: data missing from
/// the capture, unframable stream, Terminate seen, partial FPDU at the end).
pub const EXIT_WARNING: i32 = 3;

/// RTR flags of a frame or of the negotiation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct RtrInfo {
    /// Zero-length Send.
    pub send: bool,
    /// Zero-length RDMA Write.
    pub write: bool,
    /// Zero-length RDMA Read.
    pub read: bool,
}

impl RtrInfo {
    /// From mpa's flags.
    pub fn from_flags(f: mpa::RtrFlags) -> Self {
        Self {
            send: f.contains(mpa::RtrFlags::SEND),
            write: f.contains(mpa::RtrFlags::WRITE),
            read: f.contains(mpa::RtrFlags::READ),
        }
    }

    /// Back to mpa's flags.
    pub fn to_flags(self) -> mpa::RtrFlags {
        let bit = |on: bool, flag: mpa::RtrFlags| if on { flag.bits() } else { 0 };
        mpa::RtrFlags::from_bits_truncate(
            bit(self.send, mpa::RtrFlags::SEND)
                | bit(self.write, mpa::RtrFlags::WRITE)
                | bit(self.read, mpa::RtrFlags::READ),
        )
    }
}

/// One MPA Request or Reply frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FrameInfo {
    /// Frame that completed it.
    pub frame: u64,
    /// Rev.
    pub rev: u8,
    /// M bit.
    pub markers: bool,
    /// C bit.
    pub crc: bool,
    /// R bit.
    pub reject: bool,
    /// Reserved flag bits other than 0x08 and this stack's extension bits (must be 0).
    pub res: u8,
    /// 0x08, siw's experimental large-FPDU bit: FPDUs may exceed one TCP segment when
    /// both frames carry it.
    pub large_fpdus: bool,
    /// RFC 6581 enhanced block present.
    pub enhanced: bool,
    /// IRD (enhanced block).
    pub ird: Option<u16>,
    /// ORD (enhanced block).
    pub ord: Option<u16>,
    /// Peer-to-peer flag (enhanced block).
    pub p2p: bool,
    /// RTR flags (enhanced block).
    pub rtr: RtrInfo,
    /// This stack's extensions (bit 0 Send with Immediate Data, bit 1 RDMA Read V2):
    /// offered by a Request, agreed by a Reply (its flag bits and extension block).
    pub extensions: u32,
    /// ULP private data octets (after the enhanced block and a Reply's extension block).
    pub private_data_len: usize,
}

/// The negotiated connection parameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Negotiation {
    /// MPA revision in use (the Reply's).
    pub rev: u8,
    /// CRC in use (Request C or Reply C).
    pub crc: bool,
    /// Markers in Initiator-to-Responder FPDUs (Reply M).
    pub markers_initiator_to_responder: bool,
    /// Markers in Responder-to-Initiator FPDUs (Request M).
    pub markers_responder_to_initiator: bool,
    /// Initiator's IRD/ORD (Request).
    pub initiator_ird_ord: Option<(u16, u16)>,
    /// Responder's IRD/ORD (Reply).
    pub responder_ird_ord: Option<(u16, u16)>,
    /// Peer-to-peer mode (both set P2P).
    pub p2p: bool,
    /// RTR types the Initiator may use.
    pub rtr: RtrInfo,
    /// The Responder rejected the connection.
    pub rejected: bool,
    /// This stack's extensions both frames agreed to (bits as in [`FrameInfo::extensions`]).
    pub extensions: u32,
}

/// One FPDU in the `-v` listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FpduRecord {
    /// Frame that completed it.
    pub frame: u64,
    /// Direction.
    pub dir: Dir,
    /// Stream position (octets since SeqStart).
    pub pos: u64,
    /// Octets on the wire.
    pub wire_len: usize,
    /// ULPDU_Length.
    pub ulpdu_len: usize,
    /// `good`, `bad` or `off`.
    pub crc: &'static str,
    /// The CRC field.
    pub crc_value: u32,
    /// DDP header.
    pub ddp: Option<DdpInfo>,
    /// RDMAP fields.
    pub rdmap: Option<RdmapInfo>,
}

/// Counts per direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct PerDir<T> {
    /// Initiator to Responder.
    pub initiator_to_responder: T,
    /// Responder to Initiator.
    pub responder_to_initiator: T,
}

impl<T> PerDir<T> {
    /// The value for `dir`.
    pub fn get_mut(&mut self, dir: Dir) -> &mut T {
        match dir {
            Dir::InitiatorToResponder => &mut self.initiator_to_responder,
            Dir::ResponderToInitiator => &mut self.responder_to_initiator,
        }
    }
}

/// One iWARP connection (a TCP connection that began with an MPA Request).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConnectionReport {
    /// 1-based connection number.
    pub id: usize,
    /// Initiator address (sender of the Request).
    pub initiator: String,
    /// Responder address.
    pub responder: String,
    /// The Request.
    pub request: FrameInfo,
    /// The Reply, if seen.
    pub reply: Option<FrameInfo>,
    /// Negotiated parameters, once the Reply is seen.
    pub negotiated: Option<Negotiation>,
    /// Number of FPDUs.
    pub fpdus: u64,
    /// FPDUs per direction.
    pub fpdus_per_dir: PerDir<u64>,
    /// FPDUs per RDMAP opcode name.
    pub opcodes: BTreeMap<String, u64>,
    /// TCP reassembly counters per direction.
    pub tcp: PerDir<ReassemblyStats>,
    /// Findings in frame order.
    pub findings: Vec<Finding>,
    /// Every FPDU (only with `-v`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fpdu_list: Vec<FpduRecord>,
}

/// Totals of findings by severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct FindingCounts {
    /// Violations.
    pub violations: u64,
    /// Warnings.
    pub warnings: u64,
    /// Informational findings.
    pub info: u64,
}

/// The analysis of a whole capture.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Frames in the file.
    pub frames: u64,
    /// TCP segments among them.
    pub tcp_segments: u64,
    /// TCP connections seen.
    pub tcp_connections: usize,
    /// FPDUs in all connections.
    pub fpdus: u64,
    /// FPDUs per RDMAP opcode name, all connections.
    pub opcodes: BTreeMap<String, u64>,
    /// iWARP connections.
    pub connections: Vec<ConnectionReport>,
    /// Findings by severity.
    pub finding_counts: FindingCounts,
    /// Why the capture could not be read to its end, if it could not: the analysis
    /// covers the frames before that point only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_error: Option<String>,
    /// The exit status the tool returns (see the `EXIT_*` constants).
    pub exit_code: i32,
}

impl Report {
    /// Fills in the totals from the connections.
    pub fn new(
        frames: u64,
        tcp_segments: u64,
        tcp_connections: usize,
        connections: Vec<ConnectionReport>,
    ) -> Self {
        let mut opcodes = BTreeMap::new();
        let mut counts = FindingCounts::default();
        for c in &connections {
            for (name, n) in &c.opcodes {
                *opcodes.entry(name.clone()).or_insert(0) += n;
            }
            for f in &c.findings {
                match f.severity {
                    Severity::Violation => counts.violations += 1,
                    Severity::Warning => counts.warnings += 1,
                    Severity::Info => counts.info += 1,
                }
            }
        }
        let exit_code = if counts.violations > 0 {
            EXIT_VIOLATION
        } else if counts.warnings > 0 {
            EXIT_WARNING
        } else {
            EXIT_OK
        };
        Self {
            frames,
            tcp_segments,
            tcp_connections,
            fpdus: connections.iter().map(|c| c.fpdus).sum(),
            opcodes,
            connections,
            finding_counts: counts,
            read_error: None,
            exit_code,
        }
    }

    /// The human summary; with `verbose`, every FPDU too.
    pub fn render(&self, verbose: bool) -> String {
        let mut s = String::new();
        for c in &self.connections {
            render_connection(&mut s, c, verbose);
        }
        let _ = writeln!(
            s,
            "Total: {} frames, {} TCP segments in {} TCP connections, {} iWARP connections, \
             {} FPDUs",
            self.frames,
            self.tcp_segments,
            self.tcp_connections,
            self.connections.len(),
            self.fpdus
        );
        let _ = writeln!(s, "  opcodes: {}", opcode_list(&self.opcodes));
        if let Some(e) = &self.read_error {
            let _ = writeln!(s, "  READ ERROR: {e}");
        }
        let c = self.finding_counts;
        let _ = writeln!(
            s,
            "  findings: {} violations, {} warnings, {} info; exit status {}",
            c.violations, c.warnings, c.info, self.exit_code
        );
        s
    }
}

fn opcode_list(opcodes: &BTreeMap<String, u64>) -> String {
    if opcodes.is_empty() {
        return "none".into();
    }
    let mut v: Vec<_> = opcodes.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    v.iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn frame_flags(f: &FrameInfo) -> String {
    let mut s = format!(
        "rev {} M={} C={} R={}",
        f.rev, f.markers as u8, f.crc as u8, f.reject as u8
    );
    if f.large_fpdus {
        s.push_str(" large-FPDUs(siw 0x08)");
    }
    if f.extensions != 0 {
        let _ = write!(
            s,
            " extensions({})",
            mpa::Extensions::from_bits_truncate(f.extensions)
        );
    }
    if f.res != 0 {
        let _ = write!(s, " res={:#x}", f.res);
    }
    if f.enhanced {
        let _ = write!(
            s,
            " IRD={} ORD={} P2P={} RTR(send/write/read)={}/{}/{}",
            f.ird.unwrap_or(0),
            f.ord.unwrap_or(0),
            f.p2p as u8,
            f.rtr.send as u8,
            f.rtr.write as u8,
            f.rtr.read as u8
        );
    }
    let _ = write!(s, " pd_len={}", f.private_data_len);
    s
}

fn on_off(b: bool) -> &'static str {
    if b { "on" } else { "off" }
}

fn render_connection(s: &mut String, c: &ConnectionReport, verbose: bool) {
    let _ = writeln!(
        s,
        "Connection {}: {} (initiator) -> {} (responder)",
        c.id, c.initiator, c.responder
    );
    let _ = writeln!(
        s,
        "  MPA Request frame {}: {}",
        c.request.frame,
        frame_flags(&c.request)
    );
    match &c.reply {
        Some(r) => {
            let _ = writeln!(s, "  MPA Reply   frame {}: {}", r.frame, frame_flags(r));
        }
        None => s.push_str("  MPA Reply: not seen\n"),
    }
    if let Some(n) = &c.negotiated {
        let ird_ord =
            |x: Option<(u16, u16)>| x.map_or_else(|| "-".into(), |(i, o)| format!("{i}/{o}"));
        let _ = writeln!(
            s,
            "  negotiated: rev {}, CRC {}, markers I->R {} R->I {}, IRD/ORD initiator {} \
             responder {}, P2P {}{}{}{}",
            n.rev,
            on_off(n.crc),
            on_off(n.markers_initiator_to_responder),
            on_off(n.markers_responder_to_initiator),
            ird_ord(n.initiator_ird_ord),
            ird_ord(n.responder_ird_ord),
            on_off(n.p2p),
            if n.p2p {
                format!(
                    " (RTR send/write/read {}/{}/{})",
                    n.rtr.send as u8, n.rtr.write as u8, n.rtr.read as u8
                )
            } else {
                String::new()
            },
            if n.rejected { ", REJECTED" } else { "" },
            if n.extensions == 0 {
                String::new()
            } else {
                format!(
                    ", extensions {}",
                    mpa::Extensions::from_bits_truncate(n.extensions)
                )
            }
        );
    }
    let _ = writeln!(
        s,
        "  FPDUs: {} (I->R {}, R->I {})",
        c.fpdus, c.fpdus_per_dir.initiator_to_responder, c.fpdus_per_dir.responder_to_initiator
    );
    let _ = writeln!(s, "  opcodes: {}", opcode_list(&c.opcodes));
    for (arrow, t) in [
        ("I->R", &c.tcp.initiator_to_responder),
        ("R->I", &c.tcp.responder_to_initiator),
    ] {
        if *t != ReassemblyStats::default() {
            let _ = writeln!(
                s,
                "  TCP {arrow}: {} retransmitted segments ({} octets), {} out of order, {} gaps \
                 ({} octets)",
                t.retransmitted_segments,
                t.retransmitted_bytes,
                t.out_of_order_segments,
                t.gaps,
                t.gap_bytes
            );
        }
    }
    if c.findings.is_empty() {
        s.push_str("  findings: none\n");
    } else {
        let _ = writeln!(s, "  findings: {}", c.findings.len());
        for f in &c.findings {
            let _ = writeln!(s, "    {f}");
        }
    }
    if verbose {
        for r in &c.fpdu_list {
            let _ = writeln!(s, "    {}", fpdu_line(r));
        }
    }
}

/// One line of the `-v` listing.
pub fn fpdu_line(r: &FpduRecord) -> String {
    let mut s = format!(
        "frame {:>6} {} pos {:>8} len {:>5} CRC {}",
        r.frame,
        r.dir.arrow(),
        r.pos,
        r.ulpdu_len,
        r.crc
    );
    if let Some(d) = &r.ddp {
        let l = if d.last { "L" } else { "-" };
        if d.tagged {
            let _ = write!(
                s,
                " | DDP T {l} STag {:#010x} TO {:#x}",
                d.stag.unwrap_or(0),
                d.to.unwrap_or(0)
            );
        } else {
            let _ = write!(
                s,
                " | DDP U {l} QN {} MSN {} MO {}",
                d.qn.unwrap_or(0),
                d.msn.unwrap_or(0),
                d.mo.unwrap_or(0)
            );
        }
    }
    if let Some(rd) = &r.rdmap {
        let _ = write!(s, " | {} data {}", rd.opcode_name, rd.data_len);
        if let Some(x) = rd.inval_stag {
            let _ = write!(s, " inval STag {x:#010x}");
        }
        if let Some(v) = rd.immediate {
            let _ = write!(s, " imm {v:#x}");
        }
        match &rd.read_request {
            // Read V2: no sink; the read is named by its MSN.
            Some(rr) if rd.read_v2 => {
                let _ = write!(
                    s,
                    " V2 read #{} size {} src {:#010x}@{:#x}",
                    rr.sink_stag, rr.size, rr.src_stag, rr.src_to
                );
            }
            Some(rr) => {
                let _ = write!(
                    s,
                    " sink {:#010x}@{:#x} size {} src {:#010x}@{:#x}",
                    rr.sink_stag, rr.sink_to, rr.size, rr.src_stag, rr.src_to
                );
            }
            None if rd.read_v2 => s.push_str(" V2"),
            None => {}
        }
        if let Some(t) = &rd.terminate {
            let _ = write!(
                s,
                " layer {} type {} code {:#04x}: {}",
                t.layer, t.etype, t.code, t.description
            );
        }
        if let Some(a) = &rd.atomic {
            let _ = write!(s, " req_id {:#x}", a.req_id);
        }
    }
    s
}
