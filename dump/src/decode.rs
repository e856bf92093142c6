//! DDP and RDMAP fields of one ULPDU, through the `ddp` and `rdmap` wire views.
//!
//! The views are used directly (not `ddp::SegmentRepr::parse`) so that a segment with a
//! wrong DDP version is still decoded and reported rather than dropped.

use ddp::wire::control::{Control, RSVD_MASK};
use ddp::{TaggedPacket, UntaggedPacket};
use rdmap::wire::{
    AtomicRequestRepr, AtomicResponseRepr, ImmediateRepr, Opcode, READ_V2_FLAG, RdmapControl,
    ReadRequestRepr, ReadV2RequestRepr, SEND_IMM_LEN, TerminatePacket, TerminateRepr, WireError,
};
use serde::Serialize;

/// RDMAP control octet reserved bits.
const RDMAP_RSVD_MASK: u8 = 0x30;

/// The DDP header of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DdpInfo {
    /// T bit.
    pub tagged: bool,
    /// L bit.
    pub last: bool,
    /// DV (must be 1).
    pub version: u8,
    /// The four reserved bits of the control octet (must be 0).
    pub reserved: u8,
    /// Tagged: the STag.
    pub stag: Option<u32>,
    /// Tagged: the tagged offset.
    pub to: Option<u64>,
    /// Untagged: RsvdULP octets 2..6 (the STag to invalidate for Send with Invalidate).
    pub rsvd_ulp_ext: Option<u32>,
    /// Untagged: queue number.
    pub qn: Option<u32>,
    /// Untagged: message sequence number.
    pub msn: Option<u32>,
    /// Untagged: message offset.
    pub mo: Option<u32>,
    /// Octets after the DDP header (the RDMAP header, if any, and the data).
    pub payload_len: usize,
}

/// An RDMA Read Request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ReadRequestInfo {
    /// Data Sink STag.
    pub sink_stag: u32,
    /// Data Sink tagged offset.
    pub sink_to: u64,
    /// RDMA Read message size.
    pub size: u32,
    /// Data Source STag.
    pub src_stag: u32,
    /// Data Source tagged offset.
    pub src_to: u64,
}

/// A Terminate header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TerminateInfo {
    /// Layer (0 RDMAP, 1 DDP, 2 LLP).
    pub layer: u8,
    /// Error type.
    pub etype: u8,
    /// Error code.
    pub code: u8,
    /// Description of the error, e.g. `DDP untagged: invalid MSN - no buffer available`.
    pub description: String,
    /// DDP Segment Length, when M is set.
    pub ddp_seg_len: Option<u16>,
    /// The copied DDP header in hex, when D is set.
    pub ddp_header: Option<String>,
    /// The copied RDMA (Read Request) header in hex, when R is set.
    pub rdma_header: Option<String>,
    /// The reserved bits of the header-control field (must be 0).
    pub reserved: u16,
}

/// An Atomic Request or Response header (RFC 7306).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AtomicInfo {
    /// Request identifier (original one in a response).
    pub req_id: u32,
    /// Request: operation subcode (0 FetchAdd, 2 CmpSwap).
    pub op: Option<u8>,
    /// Request: remote STag.
    pub stag: Option<u32>,
    /// Request: remote tagged offset.
    pub to: Option<u64>,
    /// Response: original remote data value.
    pub orig: Option<u64>,
    /// Request: the 28 reserved bits before the subcode (must be 0).
    pub reserved: u32,
}

/// The RDMAP part of a segment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RdmapInfo {
    /// RV (must be 1).
    pub version: u8,
    /// The two reserved bits of the control octet (must be 0).
    pub reserved: u8,
    /// Opcode value.
    pub opcode: u8,
    /// Opcode name as tshark prints it.
    pub opcode_name: String,
    /// Send with Invalidate: the STag to invalidate.
    pub inval_stag: Option<u32>,
    /// Read Request header (for a Read V2 Request, the sink fields hold the read's
    /// identifier, its MSN, and 0).
    pub read_request: Option<ReadRequestInfo>,
    /// A Read V2 Request or Response (this stack's extension: control octet 0x51/0x52).
    pub read_v2: bool,
    /// Terminate header.
    pub terminate: Option<TerminateInfo>,
    /// Atomic Request/Response header.
    pub atomic: Option<AtomicInfo>,
    /// Immediate Data (8 octets, big-endian), or a Send with Immediate Data's 32-bit value.
    pub immediate: Option<u64>,
    /// Octets of data after the RDMAP header.
    pub data_len: usize,
}

/// Everything decoded from one ULPDU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decoded {
    /// DDP header, unless the ULPDU is too short for it.
    pub ddp: Option<DdpInfo>,
    /// RDMAP fields, when the DDP header is there.
    pub rdmap: Option<RdmapInfo>,
    /// Why decoding stopped early, if it did.
    pub error: Option<String>,
}

/// The opcode names tshark uses (`Unknown (0x8)` style for the rest).
pub fn opcode_name(opcode: u8) -> String {
    let name = match Opcode::from(opcode) {
        Opcode::RdmaWrite => "Write",
        Opcode::ReadRequest => "Read Request",
        Opcode::ReadResponse => "Read Response",
        Opcode::Send => "Send",
        Opcode::SendInvalidate => "Send with Invalidate",
        Opcode::SendSe => "Send with SE",
        Opcode::SendSeInvalidate => "Send with SE and Invalidate",
        Opcode::Terminate => "Terminate",
        Opcode::ImmediateData => "Immediate Data",
        Opcode::ImmediateDataSe => "Immediate Data with SE",
        Opcode::AtomicRequest => "Atomic Request",
        Opcode::AtomicResponse => "Atomic Response",
        // This stack's extension (tshark shows these as unknown opcodes).
        Opcode::SendImm => "Send with Immediate Data",
        Opcode::SendInvalidateImm => "Send with Invalidate and Immediate Data",
        Opcode::SendSeImm => "Send with SE and Immediate Data",
        Opcode::SendSeInvalidateImm => "Send with SE, Invalidate and Immediate Data",
        Opcode::Unknown(v) => return format!("Unknown ({v:#x})"),
    };
    name.to_owned()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Decodes the DDP header and RDMAP fields of a ULPDU. Never panics.
pub fn decode_ulpdu(ulpdu: &[u8]) -> Decoded {
    let Some(&first) = ulpdu.first() else {
        return Decoded {
            ddp: None,
            rdmap: None,
            error: Some("empty ULPDU".into()),
        };
    };
    let control = Control::from_u8(first);
    let (ddp, rsvd_ulp, payload) = if control.tagged() {
        let Ok(p) = TaggedPacket::new_checked(ulpdu) else {
            return truncated("tagged DDP header");
        };
        let payload = p.payload();
        let info = DdpInfo {
            tagged: true,
            last: p.last(),
            version: p.version(),
            reserved: (first & RSVD_MASK) >> 2,
            stag: Some(p.stag().to_u32()),
            to: Some(p.to()),
            rsvd_ulp_ext: None,
            qn: None,
            msn: None,
            mo: None,
            payload_len: payload.len(),
        };
        (info, p.rsvd_ulp(), payload)
    } else {
        let Ok(p) = UntaggedPacket::new_checked(ulpdu) else {
            return truncated("untagged DDP header");
        };
        let payload = p.payload();
        let info = DdpInfo {
            tagged: false,
            last: p.last(),
            version: p.version(),
            reserved: (first & RSVD_MASK) >> 2,
            stag: None,
            to: None,
            rsvd_ulp_ext: Some(p.rsvd_ulp_ext()),
            qn: Some(p.qn()),
            msn: Some(p.msn()),
            mo: Some(p.mo()),
            payload_len: payload.len(),
        };
        (info, p.rsvd_ulp(), payload)
    };
    let (rdmap, error) = decode_rdmap(rsvd_ulp, &ddp, payload);
    Decoded {
        ddp: Some(ddp),
        rdmap: Some(rdmap),
        error,
    }
}

fn truncated(what: &str) -> Decoded {
    Decoded {
        ddp: None,
        rdmap: None,
        error: Some(format!("ULPDU shorter than the {what}")),
    }
}

/// RDMAP fields; only the first segment (MO 0) of an untagged message carries a header.
fn decode_rdmap(octet: u8, ddp: &DdpInfo, payload: &[u8]) -> (RdmapInfo, Option<String>) {
    let control = RdmapControl::parse(octet);
    let opcode = u8::from(control.opcode);
    let mut info = RdmapInfo {
        version: control.version,
        reserved: (octet & RDMAP_RSVD_MASK) >> 4,
        opcode,
        opcode_name: opcode_name(opcode),
        inval_stag: None,
        read_request: None,
        read_v2: false,
        terminate: None,
        atomic: None,
        immediate: None,
        data_len: payload.len(),
    };
    let read_v2 = octet & RDMAP_RSVD_MASK == READ_V2_FLAG;
    let (header_len, error) =
        match decode_rdmap_header(&mut info, control.opcode, read_v2, ddp, payload) {
            Ok(len) => (len, None),
            Err(e) => (0, Some(e)),
        };
    info.data_len = payload.len().saturating_sub(header_len);
    (info, error)
}

/// The RDMAP header (or Send with Immediate Data's value) that a segment of `op` carries
/// after its DDP header, decoded into `info`: how many payload octets it takes, or what is
/// malformed (then it takes none). `read_v2`: the control octet has the Read V2 mark.
fn decode_rdmap_header(
    info: &mut RdmapInfo,
    op: Opcode,
    read_v2: bool,
    ddp: &DdpInfo,
    payload: &[u8],
) -> Result<usize, String> {
    match op {
        op if op.has_send_immediate() => {
            // Every segment starts with the 4-octet immediate value.
            info.inval_stag = ddp.rsvd_ulp_ext.filter(|_| op.invalidates());
            let imm = payload
                .first_chunk::<SEND_IMM_LEN>()
                .ok_or("Send with Immediate Data shorter than its 4-octet value")?;
            info.immediate = Some(u64::from(u32::from_be_bytes(*imm)));
            Ok(SEND_IMM_LEN)
        }
        op if op.invalidates() => {
            info.inval_stag = ddp.rsvd_ulp_ext;
            Ok(0)
        }
        // Read V2 (this stack's extension): the first reserved bit set, no sink. The read's
        // identifier (its MSN) stands in for the sink STag, at offset 0, as its responses
        // carry them.
        Opcode::ReadRequest if read_v2 => {
            let r =
                ReadV2RequestRepr::parse(payload).map_err(malformed("Read V2 Request header"))?;
            info.read_v2 = true;
            info.read_request = Some(ReadRequestInfo {
                sink_stag: ddp.msn.unwrap_or(0),
                sink_to: 0,
                size: r.size,
                src_stag: r.src_stag.to_u32(),
                src_to: r.src_to,
            });
            Ok(payload.len())
        }
        Opcode::ReadResponse if read_v2 => {
            info.read_v2 = true;
            Ok(0)
        }
        Opcode::ReadRequest => {
            let r = ReadRequestRepr::parse(payload).map_err(malformed("Read Request header"))?;
            info.read_request = Some(ReadRequestInfo {
                sink_stag: r.sink_stag.to_u32(),
                sink_to: r.sink_to,
                size: r.size,
                src_stag: r.src_stag.to_u32(),
                src_to: r.src_to,
            });
            Ok(payload.len())
        }
        Opcode::Terminate => {
            let (terminate, len) =
                decode_terminate(payload).map_err(malformed("Terminate header"))?;
            info.terminate = Some(terminate);
            Ok(len)
        }
        Opcode::AtomicRequest => {
            let a =
                AtomicRequestRepr::parse(payload).map_err(malformed("Atomic Request header"))?;
            let word = payload
                .get(..4)
                .map_or(0, |w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
            info.atomic = Some(AtomicInfo {
                req_id: a.req_id,
                op: Some(u8::from(a.op)),
                stag: Some(a.stag.to_u32()),
                to: Some(a.to),
                orig: None,
                reserved: word >> 4,
            });
            Ok(payload.len())
        }
        Opcode::AtomicResponse => {
            let a =
                AtomicResponseRepr::parse(payload).map_err(malformed("Atomic Response header"))?;
            info.atomic = Some(AtomicInfo {
                req_id: a.req_id,
                op: None,
                stag: None,
                to: None,
                orig: Some(a.orig),
                reserved: 0,
            });
            Ok(payload.len())
        }
        op if op.is_immediate() => {
            let i = ImmediateRepr::parse(payload).map_err(malformed("Immediate Data"))?;
            info.immediate = Some(u64::from_be_bytes(i.data));
            Ok(payload.len())
        }
        _ => Ok(0),
    }
}

/// A Terminate header at the start of `payload`, and its length.
fn decode_terminate(payload: &[u8]) -> Result<(TerminateInfo, usize), WireError> {
    let p = TerminatePacket::new_checked(payload)?;
    let (t, len) = (TerminateRepr::parse_packet(&p)?, p.header_len()?);
    let info = TerminateInfo {
        layer: t.code.layer().bits(),
        etype: t.code.etype(),
        code: t.code.code(),
        description: t.code.description().to_owned(),
        ddp_seg_len: t.ddp_seg_len,
        ddp_header: t.ddp_header.map(|h| hex(h.as_bytes())),
        rdma_header: t.rdma_header.map(|h| hex(&h)),
        reserved: u16::from_be_bytes([
            payload.get(2).map_or(0, |b| b & 0x1f),
            payload.get(3).copied().unwrap_or(0),
        ]),
    };
    Ok((info, len))
}

/// The error for a malformed `what`: its name and the wire error.
fn malformed(what: &str) -> impl FnOnce(WireError) -> String + '_ {
    move |e| format!("{what}: {e}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// wire-format.md §5.4: Send, QN 0, MSN 1, MO 0, payload "ABCD".
    const SEND: [u8; 22] = [
        0x41, 0x43, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, //
        0x00, 0x00, 0x00, 0x00, b'A', b'B', b'C', b'D',
    ];
    /// wire-format.md §5.4: RDMA Write, STag 0x12345678, TO 0x1000, 8 octets.
    const WRITE: [u8; 22] = [
        0xc1, 0x40, 0x12, 0x34, 0x56, 0x78, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, //
        0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,
    ];

    #[test]
    fn send_and_write() {
        let d = decode_ulpdu(&SEND);
        let ddp = d.ddp.unwrap();
        assert!(!ddp.tagged && ddp.last);
        assert_eq!((ddp.qn, ddp.msn, ddp.mo), (Some(0), Some(1), Some(0)));
        let r = d.rdmap.unwrap();
        assert_eq!(
            (r.opcode, r.opcode_name.as_str(), r.data_len),
            (3, "Send", 4)
        );
        assert!(d.error.is_none());

        let d = decode_ulpdu(&WRITE);
        let ddp = d.ddp.unwrap();
        assert_eq!(
            (ddp.stag, ddp.to, ddp.payload_len),
            (Some(0x1234_5678), Some(0x1000), 8)
        );
        assert_eq!(d.rdmap.unwrap().opcode_name, "Write");
    }

    #[test]
    fn reserved_and_version_bits_are_kept() {
        let mut w = WRITE;
        w[0] = 0xc1 | 0x04 | 0x02; // a reserved bit and DV 3
        w[1] = 0x40 | 0x10; // an RDMAP reserved bit
        let d = decode_ulpdu(&w);
        let ddp = d.ddp.unwrap();
        assert_eq!((ddp.reserved, ddp.version), (1, 3));
        assert_eq!(d.rdmap.unwrap().reserved, 1);
    }

    #[test]
    fn short_ulpdus_do_not_panic() {
        for n in 0..SEND.len() {
            let d = decode_ulpdu(&SEND[..n]);
            assert_eq!(d.ddp.is_some(), n >= 18, "{n}");
        }
        let mut rr = SEND.to_vec();
        rr[1] = 0x41; // Read Request without its 28-octet header
        assert!(decode_ulpdu(&rr).error.is_some());
    }

    #[test]
    fn names() {
        assert_eq!(opcode_name(6), "Send with SE and Invalidate");
        assert_eq!(opcode_name(0xb), "Atomic Response");
        assert_eq!(opcode_name(0xc), "Send with Immediate Data");
        assert_eq!(opcode_name(0x1c), "Unknown (0x1c)");
    }

    #[test]
    fn send_with_immediate_data() {
        // Send with SE, Invalidate and Immediate Data (0xF), Invalidate STag 0x0102_0304,
        // value 0x8000_0001, payload "ok".
        let mut u = SEND.to_vec();
        u[1] = 0x4f;
        u[2..6].copy_from_slice(&[1, 2, 3, 4]);
        u.truncate(18);
        u.extend_from_slice(&[0x80, 0, 0, 1, b'o', b'k']);
        let d = decode_ulpdu(&u);
        let r = d.rdmap.unwrap();
        assert_eq!(d.error, None);
        assert_eq!(
            (r.immediate, r.inval_stag, r.data_len),
            (Some(0x8000_0001), Some(0x0102_0304), 2)
        );
        u.truncate(21);
        assert!(decode_ulpdu(&u).error.unwrap().contains("4-octet value"));
    }
}
