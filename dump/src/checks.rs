//! Stateful checks across the FPDUs of one connection (what Wireshark does not check).
//!
//! * MSN sequence per untagged queue (QN 0..3 start at 1, +1 per message) and MO
//!   continuity within a message; TO and STag continuity within a tagged message.
//! * Read Request / Read Response pairing (responses in request order, STag, TO, length)
//!   and Atomic Request / Response pairing; outstanding requests against the peer's IRD.
//! * Peer-to-peer RTR: the Initiator's first FPDU is a zero-length RTR of a negotiated
//!   type, and the Responder sends nothing before it.
//! * Use of an STag after a Send with Invalidate invalidated it.
//! * Reserved bits, DDP/RDMAP versions, queue number versus opcode.

use std::collections::{HashSet, VecDeque};

use mpa::{Extensions, RtrFlags};
use rdmap::wire::Opcode;

use crate::decode::{DdpInfo, Decoded, RdmapInfo};
use crate::finding::{Check, Dir, Finding, Severity};

/// Number of untagged queues RDMAP uses (QN 0..3).
const QUEUES: usize = 4;

/// What the checks need from the MPA negotiation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CheckConfig {
    /// Peer-to-peer mode (both sides set P2P): an RTR is required.
    pub p2p: bool,
    /// RTR types the Initiator may use.
    pub rtr: RtrFlags,
    /// For requests sent in each direction (indexed by [`Dir::index`]): the IRD the
    /// receiving side advertised, if known.
    pub ird: [Option<u16>; 2],
    /// This stack's extensions both MPA frames agreed to: their opcodes are violations
    /// anywhere else.
    pub extensions: Extensions,
}

#[derive(Debug, Clone, Copy)]
enum Request {
    Read {
        sink_stag: u32,
        sink_to: u64,
        size: u32,
        received: u64,
        frame: u64,
    },
    Atomic {
        req_id: u32,
        frame: u64,
    },
}

#[derive(Debug, Clone)]
struct Side {
    /// Next MSN expected per queue for a new message.
    next_msn: [u32; QUEUES],
    /// Untagged message in progress per queue: MSN and next MO.
    current: [Option<(u32, u64)>; QUEUES],
    /// Tagged message in progress: opcode, STag, next TO.
    tagged: Option<(u8, u32, u64)>,
    /// Read/Atomic requests sent by this side, not yet answered.
    outstanding: VecDeque<Request>,
    /// STags at the peer invalidated by Sends with Invalidate from this side.
    invalidated: HashSet<u32>,
    /// Whether this side has sent an FPDU.
    sent_any: bool,
}

impl Default for Side {
    fn default() -> Self {
        Self {
            next_msn: [1; QUEUES],
            current: [None; QUEUES],
            tagged: None,
            outstanding: VecDeque::new(),
            invalidated: HashSet::new(),
            sent_any: false,
        }
    }
}

/// The checker of one connection.
#[derive(Debug, Clone)]
pub struct Checker {
    config: CheckConfig,
    sides: [Side; 2],
}

impl Checker {
    /// A checker for a connection negotiated as `config`.
    pub fn new(config: CheckConfig) -> Self {
        Self {
            config,
            sides: [Side::default(), Side::default()],
        }
    }

    /// Checks one decoded FPDU sent in `dir`, seen in `frame`.
    pub fn check(&mut self, dir: Dir, frame: u64, decoded: &Decoded, out: &mut Vec<Finding>) {
        let mut v = |check: Check, message: String| {
            out.push(Finding::violation(frame, check, dir, message));
        };
        if let Some(e) = &decoded.error {
            v(Check::Malformed, e.clone());
        }
        let (Some(ddp), Some(rd)) = (&decoded.ddp, &decoded.rdmap) else {
            return;
        };
        let op = Opcode::from(rd.opcode);
        header_bits(ddp, rd, op, self.config.extensions, &mut v);
        if op.has_send_immediate() && !self.config.extensions.contains(Extensions::SEND_IMMEDIATE) {
            v(
                Check::QueueOpcode,
                format!(
                    "{} on a connection whose MPA exchange did not agree to Send with \
                     Immediate Data",
                    rd.opcode_name
                ),
            );
        }
        self.rtr(dir, ddp, rd, op, &mut v);
        if ddp.tagged {
            self.tagged(dir, ddp, op, &mut v);
        } else {
            self.untagged(dir, ddp, rd, op, frame, &mut v);
        }
    }

    /// End of capture: requests never answered.
    pub fn finish(&self, frame: u64, out: &mut Vec<Finding>) {
        for dir in [Dir::InitiatorToResponder, Dir::ResponderToInitiator] {
            let pending = &self.sides[dir.index()].outstanding;
            if let Some(first) = pending.front() {
                let since = match first {
                    Request::Read { frame, .. } | Request::Atomic { frame, .. } => *frame,
                };
                out.push(Finding::new(
                    frame,
                    Severity::Info,
                    Check::Unanswered,
                    Some(dir),
                    format!(
                        "{} Read/Atomic request(s) unanswered at the end of the capture \
                         (oldest in frame {since})",
                        pending.len()
                    ),
                ));
            }
        }
    }

    fn rtr(
        &mut self,
        dir: Dir,
        ddp: &DdpInfo,
        rd: &RdmapInfo,
        op: Opcode,
        v: &mut impl FnMut(Check, String),
    ) {
        let initiator_started = self.sides[0].sent_any;
        self.sides[dir.index()].sent_any = true;
        if !self.config.p2p || initiator_started {
            return;
        }
        if dir == Dir::ResponderToInitiator {
            v(
                Check::Rtr,
                format!(
                    "Responder sent {} before the Initiator's RTR",
                    rd.opcode_name
                ),
            );
            return;
        }
        let rtr = match op {
            Opcode::RdmaWrite if ddp.payload_len == 0 && ddp.last => Some(RtrFlags::WRITE),
            Opcode::Send if rd.data_len == 0 && ddp.last => Some(RtrFlags::SEND),
            Opcode::ReadRequest if rd.read_request.is_some_and(|r| r.size == 0) => {
                Some(RtrFlags::READ)
            }
            _ => None,
        };
        match rtr {
            None => v(
                Check::Rtr,
                format!(
                    "first FPDU of the Initiator is {} of {} octets, not a zero-length RTR",
                    rd.opcode_name, ddp.payload_len
                ),
            ),
            Some(t) if !self.config.rtr.contains(t) => v(
                Check::Rtr,
                format!(
                    "RTR is a zero-length {} but the negotiated RTR types are {:#x}",
                    rd.opcode_name,
                    self.config.rtr.bits()
                ),
            ),
            Some(_) => {}
        }
    }

    fn tagged(&mut self, dir: Dir, ddp: &DdpInfo, op: Opcode, v: &mut impl FnMut(Check, String)) {
        let (stag, to) = (ddp.stag.unwrap_or(0), ddp.to.unwrap_or(0));
        let side = &mut self.sides[dir.index()];
        if let Some((cur_op, cur_stag, next_to)) = side.tagged
            && (cur_op, cur_stag, next_to) != (u8::from(op), stag, to)
        {
            v(
                Check::Offset,
                format!(
                    "tagged message continues with STag {stag:#x} TO {to:#x}, \
                         expected STag {cur_stag:#x} TO {next_to:#x}"
                ),
            );
        }
        side.tagged = if ddp.last {
            None
        } else {
            Some((u8::from(op), stag, to.wrapping_add(ddp.payload_len as u64)))
        };
        if side.invalidated.contains(&stag) {
            v(
                Check::InvalidatedStag,
                format!("{op:?} uses STag {stag:#x} after it was invalidated"),
            );
        }
        if op != Opcode::ReadResponse {
            return;
        }
        let requests = &mut self.sides[dir.reverse().index()].outstanding;
        match requests.front_mut() {
            None => v(
                Check::Pairing,
                "Read Response without an outstanding Read Request".into(),
            ),
            Some(Request::Atomic { frame: f, .. }) => v(
                Check::Pairing,
                format!("Read Response while the Atomic Request of frame {f} is due"),
            ),
            Some(Request::Read {
                sink_stag,
                sink_to,
                size,
                received,
                frame: req_frame,
            }) => {
                let want_to = sink_to.wrapping_add(*received);
                if stag != *sink_stag || to != want_to {
                    v(
                        Check::Pairing,
                        format!(
                            "Read Response to STag {stag:#x} TO {to:#x}, the Read Request of \
                             frame {req_frame} expects STag {sink_stag:#x} TO {want_to:#x}"
                        ),
                    );
                }
                *received += ddp.payload_len as u64;
                if ddp.last {
                    if *received != u64::from(*size) {
                        v(
                            Check::Pairing,
                            format!(
                                "Read Response of {received} octets for the Read Request of \
                                 {size} octets in frame {req_frame}"
                            ),
                        );
                    }
                    requests.pop_front();
                } else if *received > u64::from(*size) {
                    v(
                        Check::Pairing,
                        format!(
                            "Read Response already {received} octets, more than the {size} \
                             requested in frame {req_frame}"
                        ),
                    );
                }
            }
        }
    }

    fn untagged(
        &mut self,
        dir: Dir,
        ddp: &DdpInfo,
        rd: &RdmapInfo,
        op: Opcode,
        frame: u64,
        v: &mut impl FnMut(Check, String),
    ) {
        let (qn, msn, mo) = (
            ddp.qn.unwrap_or(0),
            ddp.msn.unwrap_or(0),
            u64::from(ddp.mo.unwrap_or(0)),
        );
        let ird = self.config.ird[dir.index()];
        let side = &mut self.sides[dir.index()];
        if let Some(q) = usize::try_from(qn).ok().filter(|&q| q < QUEUES) {
            let (want_msn, want_mo) = side.current[q].unwrap_or((side.next_msn[q], 0));
            if msn != want_msn {
                v(
                    Check::Msn,
                    format!("QN {qn}: MSN {msn}, expected {want_msn}"),
                );
            } else if mo != want_mo {
                v(
                    Check::Offset,
                    format!("QN {qn} MSN {msn}: MO {mo}, expected {want_mo}"),
                );
            }
            if ddp.last {
                side.current[q] = None;
                side.next_msn[q] = msn.wrapping_add(1);
            } else {
                // A Send with Immediate Data's 4-octet value is not part of MO.
                side.current[q] = Some((msn, mo + rd.data_len as u64));
            }
        }
        if op.invalidates()
            && mo == 0
            && let Some(s) = rd.inval_stag
        {
            side.invalidated.insert(s);
        }
        let new_request = match (op, &rd.read_request, &rd.atomic) {
            (Opcode::ReadRequest, Some(r), _) => {
                if side.invalidated.contains(&r.src_stag) {
                    v(
                        Check::InvalidatedStag,
                        format!(
                            "Read Request reads STag {:#x} after it was invalidated",
                            r.src_stag
                        ),
                    );
                }
                Some(Request::Read {
                    sink_stag: r.sink_stag,
                    sink_to: r.sink_to,
                    size: r.size,
                    received: 0,
                    frame,
                })
            }
            (Opcode::AtomicRequest, _, Some(a)) => {
                if let Some(s) = a.stag.filter(|s| side.invalidated.contains(s)) {
                    v(
                        Check::InvalidatedStag,
                        format!("Atomic Request on STag {s:#x} after it was invalidated"),
                    );
                }
                Some(Request::Atomic {
                    req_id: a.req_id,
                    frame,
                })
            }
            _ => None,
        };
        if let Some(request) = new_request {
            if let Some(limit) = ird.filter(|&l| side.outstanding.len() >= usize::from(l)) {
                v(
                    Check::Ird,
                    format!(
                        "{} outstanding Read/Atomic requests exceed the peer's IRD {limit}",
                        side.outstanding.len() + 1
                    ),
                );
            }
            side.outstanding.push_back(request);
        }
        if let (Opcode::AtomicResponse, Some(a)) = (op, &rd.atomic) {
            let requests = &mut self.sides[dir.reverse().index()].outstanding;
            match requests.front() {
                Some(Request::Atomic { req_id, .. }) if *req_id == a.req_id => {
                    requests.pop_front();
                }
                Some(Request::Atomic { req_id, frame: f }) => v(
                    Check::Pairing,
                    format!(
                        "Atomic Response for request {:#x}, the request due (frame {f}) is \
                         {req_id:#x}",
                        a.req_id
                    ),
                ),
                Some(Request::Read { frame: f, .. }) => v(
                    Check::Pairing,
                    format!("Atomic Response while the Read Request of frame {f} is due"),
                ),
                None => v(
                    Check::Pairing,
                    "Atomic Response without an outstanding Atomic Request".into(),
                ),
            }
        }
    }
}

/// Versions, reserved bits, and the queue/opcode/tagged combination of one segment.
fn header_bits(
    ddp: &DdpInfo,
    rd: &RdmapInfo,
    op: Opcode,
    extensions: Extensions,
    v: &mut impl FnMut(Check, String),
) {
    if ddp.version != ddp::DDP_VERSION {
        v(Check::Version, format!("DDP version {}", ddp.version));
    }
    if rd.version != rdmap::wire::RDMAP_VERSION {
        v(Check::Version, format!("RDMAP version {}", rd.version));
    }
    if ddp.reserved != 0 {
        v(
            Check::Reserved,
            format!("DDP reserved bits {:#x}", ddp.reserved),
        );
    }
    if rd.read_v2 && !extensions.contains(Extensions::READ_V2) {
        v(
            Check::Reserved,
            format!(
                "Read V2 {} (RDMAP reserved bit 0x10) on a connection whose MPA exchange did \
                 not agree to Read V2",
                rd.opcode_name
            ),
        );
    } else if rd.reserved != 0 && !rd.read_v2 {
        v(
            Check::Reserved,
            format!("RDMAP reserved bits {:#x}", rd.reserved),
        );
    }
    if let Some(ext) = ddp.rsvd_ulp_ext.filter(|&x| x != 0 && !op.invalidates()) {
        v(
            Check::Reserved,
            format!("{} with RsvdULP {ext:#010x} (must be 0)", rd.opcode_name),
        );
    }
    if let Some(t) = rd.terminate.as_ref().filter(|t| t.reserved != 0) {
        v(
            Check::Reserved,
            format!("Terminate reserved bits {:#x}", t.reserved),
        );
    }
    if let Some(a) = rd.atomic.filter(|a| a.reserved != 0) {
        v(
            Check::Reserved,
            format!("Atomic Request reserved bits {:#x}", a.reserved),
        );
    }
    if !op.is_known() {
        v(
            Check::QueueOpcode,
            format!("unknown opcode {:#x}", rd.opcode),
        );
        return;
    }
    if op.is_tagged() != ddp.tagged {
        let kind = if ddp.tagged { "tagged" } else { "untagged" };
        v(
            Check::QueueOpcode,
            format!("{} in a {kind} DDP segment", rd.opcode_name),
        );
    }
    if let (Some(qn), Some(want)) = (ddp.qn, op.queue()) {
        if qn != want {
            v(
                Check::QueueOpcode,
                format!("{} on QN {qn}, must be QN {want}", rd.opcode_name),
            );
        }
    } else if let Some(qn) = ddp.qn.filter(|&q| q as usize >= QUEUES) {
        v(Check::QueueOpcode, format!("QN {qn} is not an RDMAP queue"));
    }
}
