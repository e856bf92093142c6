//! Connections: TCP reassembly, the MPA Request/Reply, FPDU framing, decoding and checks.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;

use mpa::wire::enhanced::NO_NEGOTIATION;
use mpa::wire::frame::{
    self, FLAG_LARGE_FPDUS, FLAG_READ_V2, FLAG_RES, FLAG_SEND_IMMEDIATE, FrameKind, FrameRepr,
    HEADER_LEN, KEY_REPLY, KEY_REQUEST,
};
use mpa::{Extensions, RtrFlags};

use crate::capture::TcpSegment;
use crate::checks::{CheckConfig, Checker};
use crate::decode::{decode_ulpdu, opcode_name};
use crate::finding::{Check, Dir, Finding, Severity};
use crate::framing::{CrcCheck, FpduFramer, FramerEvent};
use crate::reassembly::{Reassembler, StreamEvent};
use crate::report::{
    ConnectionReport, FpduRecord, FrameInfo, Negotiation, PerDir, Report, RtrInfo,
};

/// What one side's byte stream is doing.
#[derive(Debug)]
enum Phase {
    /// Collecting the MPA Request or Reply.
    Frame(Vec<u8>),
    /// Frame done; the negotiation is not known yet, so the rest waits.
    Waiting(Vec<StreamEvent>),
    /// FPDU mode.
    Framing(FpduFramer),
    /// Nothing more to decode (not MPA, rejected, broken).
    Ignore,
}

#[derive(Debug)]
struct Conn {
    /// Side 0 is the first source address seen.
    addrs: [SocketAddr; 2],
    reasm: [Reassembler; 2],
    phase: [Phase; 2],
    initiator: Option<usize>,
    request: Option<FrameInfo>,
    reply: Option<FrameInfo>,
    negotiated: Option<Negotiation>,
    checker: Option<Checker>,
    fpdus: PerDir<u64>,
    opcodes: BTreeMap<u8, u64>,
    findings: Vec<Finding>,
    list: Vec<FpduRecord>,
}

/// The whole analysis, fed segment by segment (sans-IO).
#[derive(Debug, Default)]
pub struct Analyzer {
    conns: Vec<Conn>,
    index: HashMap<(SocketAddr, SocketAddr), usize>,
    last_frame: u64,
    segments: u64,
    keep_list: bool,
}

impl Analyzer {
    /// An analyzer; with `keep_list` every FPDU is kept for the `-v` listing.
    pub fn new(keep_list: bool) -> Self {
        Self {
            keep_list,
            ..Self::default()
        }
    }

    /// Feeds one TCP segment, in capture order.
    pub fn push(&mut self, seg: &TcpSegment) {
        self.last_frame = self.last_frame.max(seg.frame);
        self.segments += 1;
        let key = if seg.src <= seg.dst {
            (seg.src, seg.dst)
        } else {
            (seg.dst, seg.src)
        };
        let existing = self.index.get(&key).copied();
        let id = match existing {
            Some(id) if !self.conns[id].is_new_syn(seg) => id,
            _ => {
                self.conns.push(Conn::new(seg.src, seg.dst));
                self.index.insert(key, self.conns.len() - 1);
                self.conns.len() - 1
            }
        };
        let keep = self.keep_list;
        let conn = &mut self.conns[id];
        let side = usize::from(conn.addrs[0] != seg.src);
        let mut events = Vec::new();
        conn.reasm[side].push(seg.seq, seg.syn, &seg.payload, seg.frame, &mut events);
        for ev in events {
            conn.stream_event(side, ev, keep);
        }
    }

    /// End of capture: flushes every stream and returns the report.
    pub fn finish(mut self, frames: u64) -> Report {
        let last = self.last_frame.max(frames);
        let keep = self.keep_list;
        let tcp_connections = self.conns.len();
        let mut reports = Vec::new();
        for mut conn in std::mem::take(&mut self.conns) {
            conn.finish(last, keep);
            if let Some(r) = conn.into_report(reports.len() + 1) {
                reports.push(r);
            }
        }
        Report::new(frames, self.segments, tcp_connections, reports)
    }
}

impl Conn {
    fn new(src: SocketAddr, dst: SocketAddr) -> Self {
        Self {
            addrs: [src, dst],
            reasm: [Reassembler::new(), Reassembler::new()],
            phase: [Phase::Frame(Vec::new()), Phase::Frame(Vec::new())],
            initiator: None,
            request: None,
            reply: None,
            negotiated: None,
            checker: None,
            fpdus: PerDir::default(),
            opcodes: BTreeMap::new(),
            findings: Vec::new(),
            list: Vec::new(),
        }
    }

    /// A SYN with a new sequence number on a known address pair: port reuse.
    fn is_new_syn(&self, seg: &TcpSegment) -> bool {
        let side = usize::from(self.addrs[0] != seg.src);
        seg.syn
            && self.reasm[side]
                .base()
                .is_some_and(|b| b != seg.seq.wrapping_add(1))
    }

    fn dir(&self, side: usize) -> Dir {
        match self.initiator {
            Some(i) if i != side => Dir::ResponderToInitiator,
            _ => Dir::InitiatorToResponder,
        }
    }

    fn finding(&mut self, frame: u64, sev: Severity, check: Check, side: usize, msg: String) {
        let dir = self.dir(side);
        self.findings
            .push(Finding::new(frame, sev, check, Some(dir), msg));
    }

    fn stream_event(&mut self, side: usize, ev: StreamEvent, keep: bool) {
        match &mut self.phase[side] {
            Phase::Ignore => {}
            Phase::Waiting(events) => events.push(ev),
            Phase::Framing(framer) => {
                let mut out = Vec::new();
                match ev {
                    StreamEvent::Data { bytes, frame } => framer.push(&bytes, frame, &mut out),
                    StreamEvent::Gap { len, frame, at } => {
                        framer.gap(len, frame, &mut out);
                        self.finding(
                            frame,
                            Severity::Warning,
                            Check::Gap,
                            side,
                            format!("{len} octets missing from the capture at stream offset {at}"),
                        );
                    }
                }
                for e in out {
                    self.framer_event(side, e, keep);
                }
            }
            Phase::Frame(buf) => match ev {
                StreamEvent::Gap { frame, len, .. } => {
                    self.phase[side] = Phase::Ignore;
                    self.finding(
                        frame,
                        Severity::Warning,
                        Check::Gap,
                        side,
                        format!("{len} octets missing before the end of the MPA frame"),
                    );
                }
                StreamEvent::Data { bytes, frame } => {
                    buf.extend_from_slice(&bytes);
                    self.frame_data(side, frame, keep);
                }
            },
        }
    }

    /// Tries to complete the MPA Request/Reply of `side`.
    fn frame_data(&mut self, side: usize, frame: u64, keep: bool) {
        let Phase::Frame(buf) = &self.phase[side] else {
            return;
        };
        let buf = buf.clone();
        let want = match self.initiator {
            None => FrameKind::Request,
            Some(i) if i != side && self.reply.is_none() => FrameKind::Reply,
            Some(_) => return,
        };
        let key = match want {
            FrameKind::Request => &KEY_REQUEST,
            FrameKind::Reply => &KEY_REPLY,
        };
        let n = buf.len().min(key.len());
        if buf.get(..n) != key.get(..n) {
            if want == FrameKind::Reply {
                self.finding(
                    frame,
                    Severity::Violation,
                    Check::MpaFrame,
                    side,
                    "Responder data does not start with an MPA Reply".into(),
                );
            }
            // Not an iWARP connection (or an answer we cannot follow): stop decoding.
            self.phase = [Phase::Ignore, Phase::Ignore];
            return;
        }
        let Some(header) = buf.get(..HEADER_LEN) else {
            return;
        };
        let header = frame::Packet::new_unchecked(header);
        let pd_len = usize::from(header.pd_length());
        // 0x08 is siw's large-FPDU bit, 0x04 and 0x02 this stack's extensions: negotiated,
        // so not reserved-bit violations.
        let res =
            header.flags() & FLAG_RES & !(FLAG_LARGE_FPDUS | FLAG_SEND_IMMEDIATE | FLAG_READ_V2);
        let mut info = FrameInfo {
            frame,
            rev: header.rev(),
            markers: header.markers(),
            crc: header.crc(),
            reject: header.reject(),
            res,
            large_fpdus: header.large_fpdus(),
            enhanced: false,
            ird: None,
            ord: None,
            p2p: false,
            rtr: RtrInfo::default(),
            extensions: 0,
            private_data_len: pd_len,
        };
        let parsed = if pd_len > mpa::MAX_PRIVATE_DATA {
            Err(format!("PD_Length {pd_len} > 512"))
        } else {
            let Some(bytes) = buf.get(..HEADER_LEN + pd_len) else {
                return; // wait for the private data
            };
            FrameRepr::parse(&frame::Packet::new_unchecked(bytes)).map_err(|e| e.to_string())
        };
        if want == FrameKind::Request {
            self.initiator = Some(side);
        }
        let ok = match parsed {
            Ok(repr) => {
                info.enhanced = repr.enhanced.is_some();
                info.ird = repr.enhanced.map(|e| e.ird);
                info.ord = repr.enhanced.map(|e| e.ord);
                info.p2p = repr.enhanced.is_some_and(|e| e.p2p);
                info.rtr = RtrInfo::from_flags(repr.enhanced.map_or(RtrFlags::NONE, |e| e.rtr));
                info.private_data_len = repr.private_data.len();
                info.extensions = repr.extensions.bits();
                true
            }
            Err(e) => {
                let msg = format!("invalid MPA {want:?}: {e}");
                self.finding(frame, Severity::Violation, Check::MpaFrame, side, msg);
                false
            }
        };
        if res != 0 {
            let msg = format!("MPA {want:?} reserved flag bits {res:#x}");
            self.finding(frame, Severity::Violation, Check::Reserved, side, msg);
        }
        match want {
            FrameKind::Request => self.request = Some(info),
            FrameKind::Reply => self.reply = Some(info),
        }
        if !ok {
            self.phase = [Phase::Ignore, Phase::Ignore];
            return;
        }
        let rest = buf.get(HEADER_LEN + pd_len..).unwrap_or_default().to_vec();
        let waiting = if rest.is_empty() {
            Vec::new()
        } else {
            vec![StreamEvent::Data { bytes: rest, frame }]
        };
        self.phase[side] = Phase::Waiting(waiting);
        if want == FrameKind::Reply {
            self.negotiate(frame, keep);
        }
    }

    /// Both frames known: set up framing and checks, then replay what waited.
    fn negotiate(&mut self, frame: u64, keep: bool) {
        let (Some(req), Some(rep), Some(init)) = (&self.request, &self.reply, self.initiator)
        else {
            return;
        };
        let resp = 1 - init;
        let ird_ord = |f: &FrameInfo| f.ird.zip(f.ord);
        let limit = |f: &FrameInfo| f.ird.filter(|&i| i != NO_NEGOTIATION);
        let p2p = req.p2p && rep.p2p;
        let rtr_bits = |r: RtrInfo| r.to_flags().bits();
        let both = rtr_bits(req.rtr) & rtr_bits(rep.rtr);
        let rtr = RtrFlags::from_bits_truncate(if both != 0 { both } else { rtr_bits(req.rtr) });
        let n = Negotiation {
            rev: rep.rev,
            crc: req.crc || rep.crc,
            markers_initiator_to_responder: rep.markers,
            markers_responder_to_initiator: req.markers,
            initiator_ird_ord: ird_ord(req),
            responder_ird_ord: ird_ord(rep),
            p2p,
            rtr: RtrInfo::from_flags(rtr),
            rejected: rep.reject,
            extensions: req.extensions & rep.extensions,
        };
        let mut problems = Vec::new();
        if req.crc && !rep.crc {
            problems.push("Request asks for CRCs (C=1) but the Reply has C=0".to_owned());
        }
        if rep.rev > req.rev {
            problems.push(format!(
                "Reply rev {} above Request rev {}",
                rep.rev, req.rev
            ));
        }
        let config = CheckConfig {
            p2p,
            rtr,
            extensions: Extensions::from_bits_truncate(n.extensions),
            ird: [limit(rep), limit(req)],
        };
        let markers = [rep.markers, req.markers]; // by Dir index
        let crc = n.crc;
        let rejected = n.rejected;
        self.negotiated = Some(n);
        for p in problems {
            self.finding(frame, Severity::Violation, Check::MpaFrame, resp, p);
        }
        if rejected {
            self.finding(
                frame,
                Severity::Info,
                Check::MpaFrame,
                resp,
                "connection rejected by the Responder (R=1)".into(),
            );
            self.phase = [Phase::Ignore, Phase::Ignore];
            return;
        }
        self.checker = Some(Checker::new(config));
        for side in [init, resp] {
            let framer = FpduFramer::new(markers[self.dir(side).index()], crc);
            let old = std::mem::replace(&mut self.phase[side], Phase::Framing(framer));
            if let Phase::Waiting(events) = old {
                for ev in events {
                    self.stream_event(side, ev, keep);
                }
            }
        }
    }

    fn framer_event(&mut self, side: usize, ev: FramerEvent, keep: bool) {
        let dir = self.dir(side);
        let fpdu = match ev {
            FramerEvent::Fpdu(f) => f,
            FramerEvent::Resynced {
                pos,
                skipped,
                frame,
            } => {
                let msg = format!(
                    "framing found again at stream position {pos} on a marker ({skipped} octets skipped)"
                );
                self.finding(frame, Severity::Warning, Check::Framing, side, msg);
                return;
            }
            FramerEvent::Lost { pos, frame } => {
                let msg = format!(
                    "data missing at stream position {pos} without markers: the rest of this \
                     direction cannot be framed"
                );
                self.finding(frame, Severity::Warning, Check::Framing, side, msg);
                return;
            }
        };
        let frame = fpdu.frame;
        let v = |check: Check, msg: String| Finding::violation(frame, check, dir, msg);
        let mut found = Vec::new();
        if let CrcCheck::Bad { expected, received } = fpdu.crc {
            found.push(v(
                Check::Crc,
                format!("bad CRC {received:#010x}, should be {expected:#010x}"),
            ));
        }
        for m in &fpdu.bad_markers {
            found.push(v(
                Check::Marker,
                format!(
                    "marker at stream position {}: FPDUPTR {}, expected {}, reserved {:#x}",
                    m.pos, m.received, m.expected, m.reserved
                ),
            ));
        }
        if !fpdu.pad_zero {
            found.push(v(Check::Reserved, "PAD octets not zero".into()));
        }
        let decoded = decode_ulpdu(&fpdu.ulpdu);
        if let Some(checker) = &mut self.checker {
            checker.check(dir, frame, &decoded, &mut found);
        }
        if let Some(t) = decoded.rdmap.as_ref().and_then(|r| r.terminate.as_ref()) {
            found.push(Finding::new(
                frame,
                Severity::Warning,
                Check::Terminate,
                Some(dir),
                format!(
                    "Terminate: {} (layer {} type {} code {:#04x})",
                    t.description, t.layer, t.etype, t.code
                ),
            ));
        }
        self.findings.extend(found);
        *self.fpdus.get_mut(dir) += 1;
        if let Some(r) = &decoded.rdmap {
            *self.opcodes.entry(r.opcode).or_insert(0) += 1;
        }
        if keep {
            let (crc, crc_value) = match fpdu.crc {
                CrcCheck::NotUsed { received } => ("off", received),
                CrcCheck::Good(v) => ("good", v),
                CrcCheck::Bad { received, .. } => ("bad", received),
            };
            self.list.push(FpduRecord {
                frame,
                dir,
                pos: fpdu.pos,
                wire_len: fpdu.wire_len,
                ulpdu_len: fpdu.ulpdu.len(),
                crc,
                crc_value,
                ddp: decoded.ddp,
                rdmap: decoded.rdmap,
            });
        }
    }

    fn finish(&mut self, last: u64, keep: bool) {
        for side in 0..2 {
            let mut events = Vec::new();
            self.reasm[side].finish(&mut events);
            for ev in events {
                self.stream_event(side, ev, keep);
            }
            let partial = match &self.phase[side] {
                Phase::Framing(f) => f.buffered(),
                Phase::Frame(b) if self.initiator.is_some() => b.len(),
                _ => 0,
            };
            if partial > 0 {
                let msg = format!("{partial} octets of an incomplete frame/FPDU at the end");
                self.finding(last, Severity::Warning, Check::Framing, side, msg);
            }
        }
        if let Some(c) = &self.checker {
            c.finish(last, &mut self.findings);
        }
        self.findings.sort_by_key(|f| f.frame);
    }

    fn into_report(self, id: usize) -> Option<ConnectionReport> {
        let init = self.initiator?;
        let request = self.request?;
        let opcodes = self
            .opcodes
            .iter()
            .map(|(&op, &n)| (opcode_name(op), n))
            .collect();
        Some(ConnectionReport {
            id,
            initiator: self.addrs[init].to_string(),
            responder: self.addrs[1 - init].to_string(),
            request,
            reply: self.reply,
            negotiated: self.negotiated,
            fpdus: self.fpdus.initiator_to_responder + self.fpdus.responder_to_initiator,
            fpdus_per_dir: self.fpdus,
            opcodes,
            tcp: PerDir {
                initiator_to_responder: self.reasm[init].stats(),
                responder_to_initiator: self.reasm[1 - init].stats(),
            },
            findings: self.findings,
            fpdu_list: self.list,
        })
    }
}
