//! Every `rdmap::wire` parser on the same arbitrary octets.
//!
//! Each header that parses is emitted into a buffer of its `buffer_len()`, parsed again
//! and must be equal. Where the header has no reserved bits the emitted octets must equal
//! the input; where it has some, they must equal the input with those bits cleared.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmap::TermCode;
use rdmap::wire::{
    ATOMIC_REQUEST_LEN, ATOMIC_RESPONSE_LEN, AtomicRequestRepr, AtomicResponseRepr,
    CopiedDdpHeader, IMMEDIATE_LEN, ImmediateRepr, Opcode, READ_REQUEST_LEN, READ_V2_REQUEST_LEN,
    RdmapControl, ReadRequestRepr, ReadV2RequestRepr, TERMINATE_MAX_LEN, TerminatePacket,
    TerminateRepr, WireError,
};

fuzz_target!(|data: &[u8]| {
    read_request(data);
    read_v2_request(data);
    atomic_request(data);
    atomic_response(data);
    immediate(data);
    terminate(data);
    control(data);
    term_code_and_copies(data);
});

fn read_request(data: &[u8]) {
    let r = ReadRequestRepr::parse(data);
    assert_eq!(r.is_ok(), data.len() >= READ_REQUEST_LEN, "{r:?}");
    let Ok(repr) = r else { return };
    let mut buf = vec![0xa5; ReadRequestRepr::buffer_len()];
    repr.emit(&mut buf);
    assert_eq!(&buf[..], &data[..READ_REQUEST_LEN]);
    assert_eq!(repr.to_bytes()[..], buf[..]);
    assert_eq!(ReadRequestRepr::parse(&buf), Ok(repr));
    // Advancing by what was "sent" (the Terminate copy) keeps STags and never panics.
    let sent = repr.size.wrapping_mul(0x9e37_79b9) >> 7;
    let adv = repr.advanced(sent);
    assert_eq!(
        (adv.sink_stag, adv.src_stag),
        (repr.sink_stag, repr.src_stag)
    );
    assert!(adv.size <= repr.size);
}

fn read_v2_request(data: &[u8]) {
    let r = ReadV2RequestRepr::parse(data);
    assert_eq!(r.is_ok(), data.len() == READ_V2_REQUEST_LEN, "{r:?}");
    let Ok(repr) = r else { return };
    let mut buf = [0xa5; READ_V2_REQUEST_LEN];
    repr.emit(&mut buf);
    assert_eq!(&buf[..], data);
    let plan = repr.to_read_request(7);
    assert_eq!(
        (plan.size, plan.src_stag, plan.src_to),
        (repr.size, repr.src_stag, repr.src_to)
    );
}

fn atomic_request(data: &[u8]) {
    let r = AtomicRequestRepr::parse(data);
    assert_eq!(r.is_ok(), data.len() >= ATOMIC_REQUEST_LEN, "{r:?}");
    let Ok(repr) = r else { return };
    let mut buf = vec![0xa5; AtomicRequestRepr::buffer_len()];
    repr.emit(&mut buf);
    // Octets 0-2 and the high nibble of octet 3 are reserved: written as zero.
    let mut want = data[..ATOMIC_REQUEST_LEN].to_vec();
    want[..3].fill(0);
    want[3] &= 0x0f;
    assert_eq!(buf, want);
    assert_eq!(AtomicRequestRepr::parse(&buf), Ok(repr));
}

fn atomic_response(data: &[u8]) {
    let r = AtomicResponseRepr::parse(data);
    assert_eq!(r.is_ok(), data.len() >= ATOMIC_RESPONSE_LEN, "{r:?}");
    let Ok(repr) = r else { return };
    let mut buf = vec![0xa5; AtomicResponseRepr::buffer_len()];
    repr.emit(&mut buf);
    assert_eq!(&buf[..], &data[..ATOMIC_RESPONSE_LEN]);
    assert_eq!(AtomicResponseRepr::parse(&buf), Ok(repr));
}

fn immediate(data: &[u8]) {
    let r = ImmediateRepr::parse(data);
    match data.len() {
        IMMEDIATE_LEN => {}
        n if n < IMMEDIATE_LEN => assert_eq!(r, Err(WireError::Truncated)),
        _ => assert_eq!(r, Err(WireError::Malformed)),
    }
    let Ok(repr) = r else { return };
    let mut buf = vec![0xa5; ImmediateRepr::buffer_len()];
    repr.emit(&mut buf);
    assert_eq!(&buf[..], data);
    assert_eq!(ImmediateRepr::parse(&buf), Ok(repr));
}

fn terminate(data: &[u8]) {
    let packet = TerminatePacket::new_checked(data);
    let r = TerminateRepr::parse(data);
    if let Ok(repr) = r {
        let end = packet.as_ref().ok().map(|p| p.header_len());
        assert_eq!(end, Some(Ok(repr.buffer_len())), "header length");
        assert!(repr.buffer_len() <= TERMINATE_MAX_LEN);
        assert!(
            data[repr.buffer_len()..].iter().all(|&b| b == 0),
            "trailing octets"
        );
        round_trip_terminate(&repr);
    }
    // parse_packet ignores trailing octets: it succeeds whenever the view is valid, and
    // agrees with parse when parse succeeds.
    if let Ok(p) = &packet {
        let loose = TerminateRepr::parse_packet(p).expect("checked view must parse");
        if let Ok(strict) = r {
            assert_eq!(strict, loose);
        }
        round_trip_terminate(&loose);
        // Getters never panic on a checked view.
        let _ = (p.code(), p.m(), p.d(), p.r(), p.ddp_seg_len());
        let _ = (p.ddp_header(), p.rdma_header());
    } else {
        assert!(r.is_err());
    }
}

fn round_trip_terminate(repr: &TerminateRepr) {
    let mut buf = vec![0xa5; repr.buffer_len()];
    repr.emit(&mut buf);
    assert_eq!(
        TerminateRepr::parse(&buf),
        Ok(*repr),
        "Terminate round trip"
    );
    let _ = repr.to_string();
}

fn control(data: &[u8]) {
    let Some(&octet) = data.first() else { return };
    let c = RdmapControl::parse(octet);
    // Bits 0x30 are reserved: dropped on parse, sent as zero.
    assert_eq!(c.emit(), octet & !0x30);
    assert_eq!(RdmapControl::parse(c.emit()), c);
    assert_eq!(c.is_valid_version(), octet >> 6 == 1);
    for v in [octet, octet & 0x0f] {
        assert_eq!(u8::from(Opcode::from(v)), v, "opcode {v:#x}");
    }
    let op = c.opcode;
    let _ = (
        op.is_tagged(),
        op.queue(),
        op.is_send(),
        op.solicited(),
        op.to_string(),
    );
    if op.is_known() {
        assert_eq!(op.queue().is_none(), op.is_tagged(), "{op:?}");
    }
}

/// Terminate codes from the first two octets, and the Terminate built for the rest as a
/// received segment (the path the stream takes for every peer error).
fn term_code_and_copies(data: &[u8]) {
    let [a, b, ulpdu @ ..] = data else { return };
    let code = TermCode::from_wire([*a, *b]);
    assert_eq!(code.to_wire(), [*a, *b]);
    assert_eq!(TermCode::from_wire(code.to_wire()), code);
    let _ = (
        code.name(),
        code.description(),
        code.layer(),
        code.etype(),
        code.code(),
    );
    let t = TerminateRepr::for_segment(code, ulpdu);
    round_trip_terminate(&t);
    if let Some(h) = CopiedDdpHeader::from_ulpdu(ulpdu) {
        assert_eq!(h.as_bytes(), &ulpdu[..h.len()]);
        assert_eq!(h.len(), if h.is_tagged() { 14 } else { 18 });
        let _ = h.rdmap_control();
    }
    if let Some(h) = &t.ddp_header {
        assert!(code.copies_ddp_header());
        assert_eq!(h.as_bytes(), &ulpdu[..h.len()]);
        assert_eq!(t.ddp_seg_len, u16::try_from(ulpdu.len()).ok());
    }
}
