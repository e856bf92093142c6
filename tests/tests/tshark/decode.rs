//! Runs tshark on a capture and collects what its iWARP dissectors made of every frame
//! (see shared/reference/wireshark-interop.md: field names, the CRC verdict text, the
//! expert items of 4.0.17).

use std::path::Path;
use std::process::Command;

/// Decode options for every structural check: two passes (reassembly final), heuristics
/// first on TCP (MPA is heuristic only), and the SMB Direct / RPC-over-RDMA heuristics off
/// (they misparse arbitrary Send payloads as their protocols).
const OPTS: [&str; 7] = [
    "-o",
    "tcp.try_heuristic_first:TRUE",
    "--disable-heuristic",
    "rpcrdma_iwarp",
    "--disable-heuristic",
    "smb_direct_iwarp",
    "-2",
];

/// The fields read per frame, in this order.
const FIELDS: [&str; 14] = [
    "frame.number",
    "tcp.srcport",
    "tcp.len",
    "frame.protocols",
    "tcp.reassembled_in",
    "iwarp_mpa.key.req",
    "iwarp_mpa.key.rep",
    "iwarp_mpa.rev",
    "iwarp_mpa.ulpdulength",
    "iwarp_rdma.opcode",
    "_ws.expert.severity",
    "_ws.expert.message",
    "_ws.malformed",
    "iwarp_rdma.term_layer",
];

/// Expert severity "warning" in `_ws.expert.severity` (PI_WARN).
pub(crate) const SEVERITY_WARN: u32 = 0x0060_0000;

/// One frame as tshark decoded it.
#[derive(Debug, Default)]
pub(crate) struct Frame {
    pub(crate) number: u32,
    pub(crate) src_port: u16,
    pub(crate) tcp_len: usize,
    /// `iwarp_mpa` is among the frame's protocols.
    pub(crate) mpa: bool,
    /// Part of a PDU that tshark reassembled into a later frame.
    pub(crate) reassembled_in: bool,
    pub(crate) request: bool,
    pub(crate) reply: bool,
    pub(crate) rev: Option<u8>,
    /// ULPDU_Length of each FPDU decoded in this frame.
    pub(crate) ulpdus: Vec<u16>,
    /// RDMAP opcode of each of those FPDUs.
    pub(crate) opcodes: Vec<u8>,
    /// Expert items: severities and messages.
    pub(crate) severities: Vec<u32>,
    pub(crate) messages: String,
    pub(crate) malformed: bool,
    /// Terminate Control, Layer (0x0 RDMAP, 0x1 DDP, 0x2 MPA), when a Terminate.
    pub(crate) term_layer: Option<u8>,
}

impl Frame {
    /// TCP payload that tshark did not decode as MPA and did not put into a reassembled PDU.
    pub(crate) fn undecoded(&self) -> bool {
        self.tcp_len > 0 && !self.mpa && !self.reassembled_in
    }
}

/// Everything the checks need from one capture.
#[derive(Debug, Default)]
pub(crate) struct Decoded {
    pub(crate) frames: Vec<Frame>,
    /// `CRC check: 0x... (Good CRC32)` labels.
    pub(crate) good_crc: usize,
    /// `CRC check: 0x... (Bad CRC32, should be 0x...)` labels.
    pub(crate) bad_crc: Vec<String>,
    /// `CRC: 0x...` fields without a check (CRC not negotiated).
    pub(crate) unchecked_crc: usize,
    /// RDMAP opcode labels tshark does not know (`OpCode: Unknown (0x8)`).
    pub(crate) unknown_opcodes: Vec<String>,
    /// IWARP_MPA lines of a one-pass `-z expert,warn` (Request warnings live only there).
    pub(crate) mpa_expert: Vec<String>,
}

impl Decoded {
    /// Frames carrying TCP payload.
    pub(crate) fn data_frames(&self) -> impl Iterator<Item = &Frame> {
        self.frames.iter().filter(|f| f.tcp_len > 0)
    }

    /// Opcodes of every decoded FPDU sent from `port`, in capture order.
    pub(crate) fn opcodes_from(&self, port: u16) -> Vec<u8> {
        self.frames
            .iter()
            .filter(|f| f.src_port == port)
            .flat_map(|f| f.opcodes.iter().copied())
            .collect()
    }

    /// Number of FPDUs decoded.
    pub(crate) fn fpdus(&self) -> usize {
        self.frames.iter().map(|f| f.ulpdus.len()).sum()
    }
}

/// `tshark --version`'s first line, or `None` when tshark cannot be run.
pub(crate) fn version() -> Option<String> {
    let out = Command::new("tshark").arg("--version").output().ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .map(str::to_owned)
}

fn tshark(file: &Path, args: &[&str]) -> String {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(file)
        .args(args)
        .output()
        .expect("tshark runs");
    assert!(
        out.status.success(),
        "tshark {args:?} on {} failed: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("tshark prints UTF-8")
}

fn list<T: std::str::FromStr>(s: &str, parse: impl Fn(&str) -> Option<T>) -> Vec<T> {
    s.split(',')
        .filter(|v| !v.is_empty())
        .filter_map(parse)
        .collect()
}

fn hex_u8(v: &str) -> Option<u8> {
    u8::from_str_radix(v.trim_start_matches("0x"), 16).ok()
}

/// Decodes `file` with tshark three ways: per-frame fields (two-pass), the PDML of every
/// FPDU for the CRC and opcode labels (two-pass), and a one-pass expert summary.
pub(crate) fn decode(file: &Path) -> Decoded {
    let mut args: Vec<&str> = OPTS.to_vec();
    args.extend(["-T", "fields", "-E", "separator=|", "-E", "occurrence=a"]);
    args.extend(["-E", "aggregator=,"]);
    for f in FIELDS {
        args.extend(["-e", f]);
    }
    let mut d = Decoded::default();
    for line in tshark(file, &args).lines() {
        let c: Vec<&str> = line.split('|').collect();
        assert_eq!(c.len(), FIELDS.len(), "tshark fields line: {line}");
        d.frames.push(Frame {
            number: c[0].parse().unwrap_or(0),
            src_port: c[1].parse().unwrap_or(0),
            tcp_len: c[2].parse().unwrap_or(0),
            mpa: c[3].split(':').any(|p| p == "iwarp_mpa"),
            reassembled_in: !c[4].is_empty(),
            request: !c[5].is_empty(),
            reply: !c[6].is_empty(),
            rev: c[7].parse().ok(),
            ulpdus: list(c[8], |v| v.parse().ok()),
            opcodes: list(c[9], hex_u8),
            severities: list(c[10], |v| v.parse().ok()),
            messages: c[11].to_owned(),
            malformed: !c[12].is_empty(),
            term_layer: c[13].split(',').next().and_then(hex_u8),
        });
    }
    let mut args: Vec<&str> = OPTS.to_vec();
    args.extend(["-Y", "iwarp_mpa.fpdu", "-T", "pdml"]);
    for line in tshark(file, &args).lines() {
        let Some(show) = line.split("showname=\"").nth(1) else {
            continue;
        };
        let show = show.split('"').next().unwrap_or_default();
        if show.starts_with("CRC check: ") {
            if show.ends_with("(Good CRC32)") {
                d.good_crc += 1;
            } else {
                d.bad_crc.push(show.to_owned());
            }
        } else if show.starts_with("CRC: ") {
            d.unchecked_crc += 1;
        } else if show.contains("OpCode: Unknown") {
            d.unknown_opcodes.push(show.to_owned());
        }
    }
    let args = [
        "-o",
        "tcp.try_heuristic_first:TRUE",
        "--disable-heuristic",
        "rpcrdma_iwarp",
        "--disable-heuristic",
        "smb_direct_iwarp",
        "-q",
        "-z",
        "expert,warn",
    ];
    d.mpa_expert = tshark(file, &args)
        .lines()
        .filter(|l| l.contains("IWARP_MPA"))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    d
}
