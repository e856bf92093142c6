//! Builds synthetic iWARP connections as TCP segments, with the real `mpa::Framer`,
//! `mpa::wire::frame::FrameRepr` and the ddp/rdmap `Repr`s.
#![allow(dead_code, unreachable_pub)]

use bytes::BytesMut;
use ddp::{STag, TaggedPacket, TaggedRepr, UntaggedPacket, UntaggedRepr};
use iwarp_dump::{Check, Report, Severity, TcpSegment};
use mpa::wire::enhanced::EnhancedRepr;
use mpa::wire::frame::{self, FrameKind, FrameRepr};
use mpa::{Framer, RtrFlags};
use rdmap::wire::{Opcode, RdmapControl, ReadRequestRepr};

/// Initiator to Responder.
pub const I: usize = 0;
/// Responder to Initiator.
pub const R: usize = 1;

/// MPA options of a synthetic connection.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    pub crc: bool,
    /// Markers in I->R (Reply M) and R->I (Request M).
    pub markers: [bool; 2],
    /// Enhanced (Rev 2) blocks: (IRD, ORD, P2P, RTR) of Request and Reply.
    pub enhanced: Option<[(u16, u16, bool, RtrFlags); 2]>,
    /// This stack's extensions: offered by the Request and agreed by the Reply.
    pub extensions: [mpa::Extensions; 2],
}

impl Default for Options {
    fn default() -> Self {
        Self {
            crc: true,
            markers: [false, false],
            enhanced: None,
            extensions: [mpa::Extensions::NONE; 2],
        }
    }
}

/// A connection being written, one segment per call.
#[derive(Debug)]
pub struct Conn {
    pub segments: Vec<TcpSegment>,
    frame: u64,
    seq: [u32; 2],
    framers: [Framer; 2],
}

fn mpa_frame(
    kind: FrameKind,
    markers: bool,
    crc: bool,
    e: Option<(u16, u16, bool, RtrFlags)>,
    extensions: mpa::Extensions,
) -> Vec<u8> {
    let repr = FrameRepr {
        kind,
        markers,
        crc,
        reject: false,
        large_fpdus: false,
        rev: if e.is_some() { 2 } else { 1 },
        enhanced: e.map(|(ird, ord, p2p, rtr)| EnhancedRepr { p2p, rtr, ird, ord }),
        extensions,
        private_data: b"",
    };
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut frame::Packet::new_unchecked(&mut buf[..]));
    buf
}

impl Conn {
    /// SYNs, Request and Reply.
    pub fn new(o: Options) -> Self {
        let mut c = Self {
            segments: Vec::new(),
            frame: 0,
            seq: [1000, 5000],
            framers: [
                Framer::new(o.markers[I], o.crc),
                Framer::new(o.markers[R], o.crc),
            ],
        };
        c.syn(I);
        c.syn(R);
        let e = o.enhanced;
        c.raw(
            I,
            mpa_frame(
                FrameKind::Request,
                o.markers[R],
                o.crc,
                e.map(|x| x[0]),
                o.extensions[I],
            ),
        );
        c.raw(
            R,
            mpa_frame(
                FrameKind::Reply,
                o.markers[I],
                o.crc,
                e.map(|x| x[1]),
                o.extensions[R],
            ),
        );
        c
    }

    fn addrs(dir: usize) -> (std::net::SocketAddr, std::net::SocketAddr) {
        let a = "192.0.2.1:40000".parse().unwrap();
        let b = "192.0.2.2:7174".parse().unwrap();
        if dir == I { (a, b) } else { (b, a) }
    }

    fn syn(&mut self, dir: usize) {
        self.frame += 1;
        let (src, dst) = Self::addrs(dir);
        self.segments.push(TcpSegment {
            frame: self.frame,
            src,
            dst,
            seq: self.seq[dir].wrapping_sub(1),
            syn: true,
            fin: false,
            rst: false,
            payload: Vec::new(),
        });
    }

    /// A segment with these octets at the current sequence number.
    pub fn raw(&mut self, dir: usize, payload: Vec<u8>) {
        let seq = self.seq[dir];
        self.seq[dir] = seq.wrapping_add(payload.len() as u32);
        self.segment_at(dir, seq, payload);
    }

    /// A segment at an explicit sequence number (retransmissions, reordering).
    pub fn segment_at(&mut self, dir: usize, seq: u32, payload: Vec<u8>) {
        self.frame += 1;
        let (src, dst) = Self::addrs(dir);
        self.segments.push(TcpSegment {
            frame: self.frame,
            src,
            dst,
            seq,
            syn: false,
            fin: false,
            rst: false,
            payload,
        });
    }

    /// The FPDU bytes of a ULPDU (advances the framer, sends nothing).
    pub fn encode(&mut self, dir: usize, ulpdu: &[u8]) -> Vec<u8> {
        let mut wire = BytesMut::new();
        self.framers[dir].encode(ulpdu, b"", &mut wire);
        wire.to_vec()
    }

    /// One FPDU in its own segment.
    pub fn fpdu(&mut self, dir: usize, ulpdu: &[u8]) {
        let bytes = self.encode(dir, ulpdu);
        self.raw(dir, bytes);
    }

    /// Current sequence number of a direction.
    pub fn seq(&self, dir: usize) -> u32 {
        self.seq[dir]
    }

    /// Skips octets (they never reach the capture).
    pub fn lose(&mut self, dir: usize, n: usize) {
        self.seq[dir] = self.seq[dir].wrapping_add(n as u32);
    }

    pub fn analyze(&self) -> Report {
        iwarp_dump::analyze_segments(&self.segments, self.frame, true)
    }
}

/// An untagged segment (DDP header + payload).
pub fn untagged(
    op: Opcode,
    qn: u32,
    msn: u32,
    mo: u32,
    last: bool,
    ext: u32,
    payload: &[u8],
) -> Vec<u8> {
    let repr = UntaggedRepr {
        last,
        rsvd_ulp: RdmapControl::new(op).emit(),
        rsvd_ulp_ext: ext,
        qn,
        msn,
        mo,
    };
    let mut buf = vec![0u8; repr.header_len() + payload.len()];
    repr.emit(&mut UntaggedPacket::new_unchecked(&mut buf[..]));
    buf[repr.header_len()..].copy_from_slice(payload);
    buf
}

/// A Send with Immediate Data segment: the 4-octet value, then the payload.
pub fn send_imm(msn: u32, mo: u32, last: bool, imm: u32, payload: &[u8]) -> Vec<u8> {
    let mut data = imm.to_be_bytes().to_vec();
    data.extend_from_slice(payload);
    untagged(Opcode::SendImm, 0, msn, mo, last, 0, &data)
}

/// A Send of one segment.
pub fn send(msn: u32, payload: &[u8]) -> Vec<u8> {
    untagged(Opcode::Send, 0, msn, 0, true, 0, payload)
}

/// A tagged segment.
pub fn tagged(op: Opcode, stag: u32, to: u64, last: bool, payload: &[u8]) -> Vec<u8> {
    let repr = TaggedRepr {
        last,
        rsvd_ulp: RdmapControl::new(op).emit(),
        stag: STag::from_u32(stag),
        to,
    };
    let mut buf = vec![0u8; repr.header_len() + payload.len()];
    repr.emit(&mut TaggedPacket::new_unchecked(&mut buf[..]));
    buf[repr.header_len()..].copy_from_slice(payload);
    buf
}

/// A Read Request (QN 1).
pub fn read_request(msn: u32, sink: u32, size: u32, src: u32) -> Vec<u8> {
    let rr = ReadRequestRepr {
        sink_stag: STag::from_u32(sink),
        sink_to: 0x1000,
        size,
        src_stag: STag::from_u32(src),
        src_to: 0x2000,
    };
    untagged(Opcode::ReadRequest, 1, msn, 0, true, 0, &rr.to_bytes())
}

/// The checks of the findings of a given severity, over all connections.
pub fn checks(report: &Report, severity: Severity) -> Vec<Check> {
    report
        .connections
        .iter()
        .flat_map(|c| c.findings.iter())
        .filter(|f| f.severity == severity)
        .map(|f| f.check)
        .collect()
}

pub fn violations(report: &Report) -> Vec<Check> {
    checks(report, Severity::Violation)
}

impl Conn {
    /// Writes the connection as a classic pcap of Ethernet/IPv4/TCP frames.
    pub fn write_pcap(&self, path: &std::path::Path) {
        use etherparse::PacketBuilder;
        use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
        let file = std::fs::File::create(path).unwrap();
        let mut w = PcapWriter::with_header(file, PcapHeader::default()).unwrap();
        for s in &self.segments {
            let (std::net::SocketAddr::V4(src), std::net::SocketAddr::V4(dst)) = (s.src, s.dst)
            else {
                panic!("IPv4 only");
            };
            let mut tcp = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
                .ipv4(src.ip().octets(), dst.ip().octets(), 64)
                .tcp(src.port(), dst.port(), s.seq, 65535)
                .ack(1);
            if s.syn {
                tcp = tcp.syn();
            }
            let mut frame = Vec::new();
            tcp.write(&mut frame, &s.payload).unwrap();
            let ts = std::time::Duration::from_millis(s.frame);
            w.write_packet(&PcapPacket::new(ts, frame.len() as u32, &frame))
                .unwrap();
        }
    }
}
