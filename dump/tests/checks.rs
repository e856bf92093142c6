//! Every stateful check, on byte streams crafted with the real `mpa::Framer` and the
//! ddp/rdmap `Repr`s, plus TCP reassembly through the whole analyzer.

mod common;

use common::*;
use iwarp_dump::report::{EXIT_OK, EXIT_VIOLATION, EXIT_WARNING};
use iwarp_dump::{Check, Severity};
use mpa::RtrFlags;
use rdmap::TermCode;
use rdmap::wire::{AtomicRequestRepr, AtomicResponseRepr, Opcode, TerminateRepr};

/// Send, Read Request answered by a two-segment Read Response, Write, Send back.
fn clean(o: Options) -> Conn {
    let mut c = Conn::new(o);
    c.fpdu(I, &send(1, b"hello"));
    c.fpdu(I, &read_request(1, 0xaa01, 10, 0xbb02));
    c.fpdu(
        R,
        &tagged(Opcode::ReadResponse, 0xaa01, 0x1000, false, &[1; 6]),
    );
    c.fpdu(
        R,
        &tagged(Opcode::ReadResponse, 0xaa01, 0x1006, true, &[2; 4]),
    );
    c.fpdu(I, &tagged(Opcode::RdmaWrite, 0xcc03, 0, true, &[3; 700]));
    c.fpdu(R, &send(1, b"done"));
    c
}

#[test]
fn clean_connection_has_no_findings() {
    for markers in [[false, false], [true, false], [true, true]] {
        for crc in [false, true] {
            let r = clean(Options {
                crc,
                markers,
                enhanced: None,
                ..Options::default()
            })
            .analyze();
            assert_eq!(r.fpdus, 6, "markers {markers:?} crc {crc}");
            let c = &r.connections[0];
            assert_eq!(c.fpdus_per_dir.initiator_to_responder, 3);
            assert_eq!(c.opcodes["Read Response"], 2);
            assert!(c.findings.is_empty(), "{:#?}", c.findings);
            assert_eq!(r.exit_code, EXIT_OK);
            let n = c.negotiated.as_ref().unwrap();
            assert_eq!((n.crc, n.markers_initiator_to_responder), (crc, markers[0]));
        }
    }
}

#[test]
fn msn_gap() {
    let mut c = Conn::new(Options::default());
    c.fpdu(I, &send(1, b"a"));
    c.fpdu(I, &send(3, b"b"));
    let r = c.analyze();
    assert_eq!(violations(&r), vec![Check::Msn]);
    assert_eq!(r.connections[0].findings[0].frame, 6);
    assert_eq!(r.exit_code, EXIT_VIOLATION);
    // Each queue counts on its own: a Read Request on QN 1 starts at MSN 1 too.
    let mut c = Conn::new(Options::default());
    c.fpdu(I, &send(1, b"a"));
    c.fpdu(I, &read_request(2, 1, 0, 2));
    assert_eq!(violations(&c.analyze()), vec![Check::Msn]);
}

#[test]
fn mo_and_to_continuity() {
    let mut c = Conn::new(Options::default());
    c.fpdu(I, &untagged(Opcode::Send, 0, 1, 0, false, 0, &[0; 5]));
    c.fpdu(I, &untagged(Opcode::Send, 0, 1, 10, true, 0, &[0; 5]));
    assert_eq!(violations(&c.analyze()), vec![Check::Offset]);

    let mut c = Conn::new(Options::default());
    c.fpdu(I, &untagged(Opcode::Send, 0, 1, 0, false, 0, &[0; 5]));
    c.fpdu(I, &untagged(Opcode::Send, 0, 1, 5, true, 0, &[0; 5]));
    c.fpdu(I, &tagged(Opcode::RdmaWrite, 7, 100, false, &[0; 8]));
    c.fpdu(I, &tagged(Opcode::RdmaWrite, 7, 100, true, &[0; 8])); // TO should be 108
    assert_eq!(violations(&c.analyze()), vec![Check::Offset]);
}

#[test]
fn read_response_pairing() {
    // Without a request.
    let mut c = Conn::new(Options::default());
    c.fpdu(R, &tagged(Opcode::ReadResponse, 1, 0x1000, true, &[0; 4]));
    assert_eq!(violations(&c.analyze()), vec![Check::Pairing]);
    // Wrong STag, then short.
    let mut c = Conn::new(Options::default());
    c.fpdu(I, &read_request(1, 0xaa, 16, 0xbb));
    c.fpdu(
        R,
        &tagged(Opcode::ReadResponse, 0xab, 0x1000, true, &[0; 8]),
    );
    assert_eq!(
        violations(&c.analyze()),
        vec![Check::Pairing, Check::Pairing]
    );
    // In order: the second response must go to the second request.
    let mut c = Conn::new(Options::default());
    c.fpdu(I, &read_request(1, 0xaa, 4, 0xbb));
    c.fpdu(I, &read_request(2, 0xcc, 4, 0xdd));
    c.fpdu(
        R,
        &tagged(Opcode::ReadResponse, 0xcc, 0x1000, true, &[0; 4]),
    );
    c.fpdu(
        R,
        &tagged(Opcode::ReadResponse, 0xaa, 0x1000, true, &[0; 4]),
    );
    assert_eq!(
        violations(&c.analyze()),
        vec![Check::Pairing, Check::Pairing]
    );
    // Unanswered at the end: information only.
    let mut c = Conn::new(Options::default());
    c.fpdu(I, &read_request(1, 0xaa, 4, 0xbb));
    let r = c.analyze();
    assert_eq!(checks(&r, Severity::Info), vec![Check::Unanswered]);
    assert_eq!(r.exit_code, EXIT_OK);
}

#[test]
fn atomic_pairing() {
    let atomic = |msn, id| {
        let a = AtomicRequestRepr::fetch_add(id, ddp::STag::from_u32(9), 0x40, 1);
        let mut b = [0u8; 52];
        a.emit(&mut b);
        untagged(Opcode::AtomicRequest, 1, msn, 0, true, 0, &b)
    };
    let response = |msn, id| {
        let mut b = [0u8; 12];
        AtomicResponseRepr {
            req_id: id,
            orig: 5,
        }
        .emit(&mut b);
        untagged(Opcode::AtomicResponse, 3, msn, 0, true, 0, &b)
    };
    let mut c = Conn::new(Options::default());
    c.fpdu(I, &atomic(1, 0x11));
    c.fpdu(R, &response(1, 0x11));
    c.fpdu(I, &atomic(2, 0x22));
    c.fpdu(R, &response(2, 0x23));
    let r = c.analyze();
    assert_eq!(r.connections[0].opcodes["Atomic Request"], 2);
    assert_eq!(violations(&r), vec![Check::Pairing]);
}

fn enhanced(ird: [u16; 2], p2p: bool, rtr: [RtrFlags; 2]) -> Options {
    Options {
        enhanced: Some([(ird[0], ird[0], p2p, rtr[0]), (ird[1], ird[1], p2p, rtr[1])]),
        ..Options::default()
    }
}

#[test]
fn ird_limit() {
    let none = [RtrFlags::NONE; 2];
    // The Responder's IRD is 1: a second outstanding Read Request is one too many.
    let mut c = Conn::new(enhanced([8, 1], false, none));
    c.fpdu(I, &read_request(1, 1, 4, 2));
    c.fpdu(I, &read_request(2, 3, 4, 4));
    let r = c.analyze();
    assert_eq!(violations(&r), vec![Check::Ird]);
    assert_eq!(
        r.connections[0]
            .negotiated
            .as_ref()
            .unwrap()
            .responder_ird_ord,
        Some((1, 1))
    );
    // Answered in between: fine.
    let mut c = Conn::new(enhanced([8, 1], false, none));
    c.fpdu(I, &read_request(1, 1, 4, 2));
    c.fpdu(R, &tagged(Opcode::ReadResponse, 1, 0x1000, true, &[0; 4]));
    c.fpdu(I, &read_request(2, 3, 4, 4));
    c.fpdu(R, &tagged(Opcode::ReadResponse, 3, 0x1000, true, &[0; 4]));
    assert!(violations(&c.analyze()).is_empty());
}

#[test]
fn rtr_placement() {
    let write = [RtrFlags::WRITE | RtrFlags::READ, RtrFlags::WRITE];
    // A zero-length Write RTR first: fine.
    let mut c = Conn::new(enhanced([1, 1], true, write));
    c.fpdu(I, &tagged(Opcode::RdmaWrite, 0, 0, true, b""));
    c.fpdu(R, &send(1, b"x"));
    let r = c.analyze();
    assert!(violations(&r).is_empty(), "{:?}", r.connections[0].findings);
    assert!(r.connections[0].negotiated.as_ref().unwrap().p2p);
    // The Initiator starts with data.
    let mut c = Conn::new(enhanced([1, 1], true, write));
    c.fpdu(I, &send(1, b"data"));
    assert_eq!(violations(&c.analyze()), vec![Check::Rtr]);
    // A zero-length Send RTR when only Write was negotiated.
    let mut c = Conn::new(enhanced([1, 1], true, write));
    c.fpdu(I, &send(1, b""));
    assert_eq!(violations(&c.analyze()), vec![Check::Rtr]);
    // The Responder sends before the RTR.
    let mut c = Conn::new(enhanced([1, 1], true, write));
    c.fpdu(R, &send(1, b"early"));
    c.fpdu(I, &tagged(Opcode::RdmaWrite, 0, 0, true, b""));
    assert_eq!(violations(&c.analyze()), vec![Check::Rtr]);
    // Not peer-to-peer: no RTR needed.
    let mut c = Conn::new(enhanced([1, 1], false, [RtrFlags::NONE; 2]));
    c.fpdu(I, &send(1, b"data"));
    assert!(violations(&c.analyze()).is_empty());
}

#[test]
fn stag_used_after_invalidation() {
    let mut c = Conn::new(Options::default());
    c.fpdu(I, &tagged(Opcode::RdmaWrite, 0x4242, 0, true, &[1; 4]));
    c.fpdu(
        I,
        &untagged(Opcode::SendInvalidate, 0, 1, 0, true, 0x4242, b"inv"),
    );
    c.fpdu(I, &tagged(Opcode::RdmaWrite, 0x4243, 0, true, &[1; 4]));
    assert!(violations(&c.analyze()).is_empty());
    c.fpdu(I, &tagged(Opcode::RdmaWrite, 0x4242, 0, true, &[1; 4]));
    let r = c.analyze();
    assert_eq!(violations(&r), vec![Check::InvalidatedStag]);
    let last = r.connections[0].fpdu_list.last().unwrap();
    assert_eq!(r.connections[0].findings[0].frame, last.frame);
    // Reading from it is a use too.
    c.fpdu(I, &read_request(1, 1, 4, 0x4242));
    assert_eq!(violations(&c.analyze()).len(), 2);
}

#[test]
fn reserved_bits() {
    let mut c = Conn::new(Options::default());
    let mut s = send(1, b"x");
    s[0] |= 0x08; // DDP reserved
    c.fpdu(I, &s);
    c.fpdu(I, &untagged(Opcode::Send, 0, 2, 0, true, 0x1234, b"y")); // RsvdULP
    let mut w = tagged(Opcode::RdmaWrite, 1, 0, true, b"z");
    w[1] |= 0x20; // RDMAP reserved
    c.fpdu(I, &w);
    assert_eq!(violations(&c.analyze()), vec![Check::Reserved; 3]);
}

#[test]
fn queue_versus_opcode() {
    let mut c = Conn::new(Options::default());
    c.fpdu(I, &untagged(Opcode::Send, 1, 1, 0, true, 0, b"x")); // Send on QN 1
    c.fpdu(I, &untagged(Opcode::RdmaWrite, 0, 1, 0, true, 0, b"x")); // Write untagged
    // 0xD, an extension opcode, on a connection that did not agree to it.
    c.fpdu(
        I,
        &untagged(Opcode::from(0xd), 0, 2, 0, true, 0, b"\0\0\0\x01x"),
    );
    assert_eq!(violations(&c.analyze()), vec![Check::QueueOpcode; 3]);
}

#[test]
fn terminate_is_decoded_and_warned() {
    let mut c = Conn::new(Options::default());
    let code = TermCode::from_wire([0x12, 0x02]);
    let t = TerminateRepr::for_segment(code, &send(7, b"x"));
    let mut b = vec![0u8; t.buffer_len()];
    t.emit(&mut b);
    c.fpdu(R, &untagged(Opcode::Terminate, 2, 1, 0, true, 0, &b));
    let r = c.analyze();
    assert_eq!(checks(&r, Severity::Warning), vec![Check::Terminate]);
    assert_eq!(r.exit_code, EXIT_WARNING);
    let rd = r.connections[0].fpdu_list[0].rdmap.as_ref().unwrap();
    let term = rd.terminate.as_ref().unwrap();
    assert_eq!((term.layer, term.etype, term.code), (1, 2, 2));
    assert_eq!(term.description, code.description());
    assert!(term.ddp_header.as_ref().unwrap().starts_with("4143"));
}

#[test]
fn bad_crc_is_reported_and_decoding_goes_on() {
    let mut c = Conn::new(Options::default());
    let mut bytes = c.encode(I, &send(1, b"abcdef"));
    bytes[20] ^= 1;
    c.raw(I, bytes);
    c.fpdu(I, &send(2, b"next"));
    let r = c.analyze();
    assert_eq!(r.fpdus, 2);
    assert_eq!(violations(&r), vec![Check::Crc]);
    assert_eq!(r.connections[0].fpdu_list[0].crc, "bad");
    assert_eq!(r.connections[0].fpdu_list[1].crc, "good");
}

#[test]
fn reassembly_out_of_order_and_retransmission() {
    let mut c = Conn::new(Options::default());
    let a = c.encode(I, &send(1, b"first"));
    let b = c.encode(I, &send(2, b"second"));
    let (sa, sb) = (c.seq(I), c.seq(I).wrapping_add(a.len() as u32));
    c.segment_at(I, sb, b.clone()); // ahead of a hole
    c.segment_at(I, sa, a.clone()); // fills it
    c.segment_at(I, sa, a.clone()); // retransmission
    c.lose(I, a.len() + b.len());
    c.fpdu(I, &send(3, b"third"));
    let r = c.analyze();
    assert_eq!(r.fpdus, 3);
    assert!(
        r.connections[0].findings.is_empty(),
        "{:?}",
        r.connections[0].findings
    );
    let t = r.connections[0].tcp.initiator_to_responder;
    assert_eq!(
        (t.out_of_order_segments, t.retransmitted_segments, t.gaps),
        (1, 1, 0)
    );
    // The FPDU completed by the late segment is reported in that segment's frame.
    assert_eq!(r.connections[0].fpdu_list[0].frame, 6);
}

#[test]
fn gap_without_markers_cannot_be_framed() {
    let mut c = Conn::new(Options::default());
    c.fpdu(I, &send(1, b"one"));
    let lost = c.encode(I, &send(2, b"two"));
    c.lose(I, lost.len());
    c.fpdu(I, &send(3, b"three"));
    c.fpdu(R, &send(1, b"back"));
    let r = c.analyze();
    assert_eq!(r.fpdus, 2); // one before the gap, and the other direction
    let w = checks(&r, Severity::Warning);
    assert!(
        w.contains(&Check::Gap) && w.contains(&Check::Framing),
        "{w:?}"
    );
    assert_eq!(r.exit_code, EXIT_WARNING);
}

#[test]
fn gap_with_markers_resynchronises() {
    let mut c = Conn::new(Options {
        markers: [true, true],
        ..Options::default()
    });
    let mut msn = 1;
    for _ in 0..3 {
        c.fpdu(I, &send(msn, &[7; 300]));
        msn += 1;
    }
    // Lose two FPDUs (about 650 octets, so a marker falls behind the hole).
    for _ in 0..2 {
        let lost = c.encode(I, &send(msn, &[7; 300]));
        c.lose(I, lost.len());
        msn += 1;
    }
    for _ in 0..4 {
        c.fpdu(I, &send(msn, &[7; 300]));
        msn += 1;
    }
    let r = c.analyze();
    let w = checks(&r, Severity::Warning);
    assert!(
        w.contains(&Check::Gap) && w.contains(&Check::Framing),
        "{w:?}"
    );
    // Framing came back: some FPDUs after the gap were decoded, all with good CRCs. The
    // MSN jump across the gap is reported as such.
    assert!(r.fpdus > 3, "{}", r.fpdus);
    let found_again = r.connections[0]
        .findings
        .iter()
        .any(|f| f.check == Check::Framing && f.message.contains("found again"));
    assert!(found_again, "{:#?}", r.connections[0].findings);
    assert!(r.connections[0].fpdu_list.iter().all(|f| f.crc == "good"));
    assert!(violations(&r).iter().all(|&v| v == Check::Msn));
}

#[test]
fn garbage_after_the_handshake_never_panics() {
    let mut state = 0x1234_5678_u64;
    let mut rand = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        (state >> 33) as u32
    };
    for round in 0..200 {
        let markers = [round % 2 == 0, round % 3 == 0];
        let mut c = Conn::new(Options {
            crc: round % 5 != 0,
            markers,
            enhanced: None,
            ..Options::default()
        });
        for _ in 0..20 {
            let dir = (rand() % 2) as usize;
            let mut ulpdu = match rand() % 4 {
                0 => send(rand() % 4, &[0; 9]),
                1 => read_request(rand() % 3, rand(), rand() % 64, rand()),
                2 => tagged(
                    Opcode::ReadResponse,
                    rand() % 3,
                    0x1000,
                    rand() % 2 == 0,
                    &[1; 3],
                ),
                _ => (0..rand() % 40).map(|_| rand() as u8).collect(),
            };
            if let Some(b) = ulpdu.get_mut((rand() % 64) as usize) {
                *b = rand() as u8;
            }
            let mut bytes = c.encode(dir, &ulpdu);
            if rand() % 4 == 0 {
                let at = (rand() as usize) % bytes.len();
                bytes[at] = rand() as u8; // may break framing itself
            }
            match rand() % 8 {
                0 => c.lose(dir, bytes.len()),
                _ => c.raw(dir, bytes),
            }
        }
        let r = c.analyze();
        assert_eq!(r.fpdus, r.connections.iter().map(|c| c.fpdus).sum::<u64>());
        let _ = r.render(true);
    }
}

/// siw's large-FPDU bit (0x08 of the MPA flags octet) is named in the report and is no
/// violation (this stack sets it with `large_fpdus`); the other reserved bits still are.
#[test]
fn the_large_fpdu_bit_is_named_and_other_reserved_bits_shown() {
    let mut c = clean(Options::default());
    // Segments 0 and 1 are the SYNs, 2 the Request, 3 the Reply; octet 16 holds the flags.
    c.segments[2].payload[16] |= 0x08;
    c.segments[3].payload[16] |= 0x08 | 0x01;
    let r = c.analyze();
    assert_eq!(
        violations(&r),
        vec![Check::Reserved],
        "only the Reply's 0x01"
    );
    let text = r.render(false);
    assert_eq!(text.matches("large-FPDUs(siw 0x08)").count(), 2, "{text}");
    assert_eq!(text.matches("res=0x1").count(), 1, "{text}");
}

/// This stack's extension negotiated in the MPA frames: Send with Immediate Data decodes
/// (value, MO without the value's octets) with no finding; on a connection that did not
/// agree, the same FPDUs are violations.
#[test]
fn send_with_immediate_is_checked_against_the_negotiation() {
    let traffic = |c: &mut Conn| {
        c.fpdu(I, &send_imm(1, 0, false, 0x0102_0304, &[7; 100]));
        c.fpdu(I, &send_imm(1, 100, true, 0x0102_0304, &[8; 20]));
        c.fpdu(I, &send(2, b"plain"));
    };
    let agreed = Options {
        extensions: [mpa::Extensions::ALL; 2],
        ..Options::default()
    };
    let mut c = Conn::new(agreed);
    traffic(&mut c);
    let r = c.analyze();
    let conn = &r.connections[0];
    assert!(conn.findings.is_empty(), "{:#?}", conn.findings);
    assert_eq!(conn.opcodes["Send with Immediate Data"], 2);
    assert_eq!(conn.negotiated.as_ref().unwrap().extensions, 3);
    let text = r.render(true);
    assert!(text.contains("extensions send_imm,read_v2"), "{text}");
    assert!(text.contains("imm 0x1020304"), "{text}");
    assert_eq!(r.exit_code, EXIT_OK);

    // Offered but not agreed (a standard Responder): both Sends with Immediate Data are
    // violations, and the offer bits themselves are not.
    let offered = Options {
        extensions: [mpa::Extensions::ALL, mpa::Extensions::NONE],
        ..Options::default()
    };
    let mut c = Conn::new(offered);
    traffic(&mut c);
    let r = c.analyze();
    assert_eq!(violations(&r), vec![Check::QueueOpcode, Check::QueueOpcode]);
    assert!(
        r.connections[0].findings[0]
            .message
            .contains("did not agree to Send with Immediate Data")
    );
    assert_eq!(r.exit_code, EXIT_VIOLATION);
}

/// Read V2 (control octets 0x51/0x52): paired by the read's identifier when both frames
/// agreed; a reserved-bit violation anywhere else.
#[test]
fn read_v2_is_paired_when_agreed_and_flagged_otherwise() {
    let traffic = |c: &mut Conn| {
        // 10 octets from STag 0xbb02 at TO 0x40; no sink.
        let mut hdr = vec![0, 0, 0, 10, 0, 0, 0xbb, 0x02];
        hdr.extend_from_slice(&0x40u64.to_be_bytes());
        let mut req = untagged(Opcode::ReadRequest, 1, 1, 0, true, 0, &hdr);
        req[1] |= 0x10;
        c.fpdu(I, &req);
        for (to, last, data) in [(0u64, false, &[1u8; 6][..]), (6, true, &[2; 4][..])] {
            let mut resp = tagged(Opcode::ReadResponse, 1, to, last, data);
            resp[1] |= 0x10;
            c.fpdu(R, &resp);
        }
    };
    let mut c = Conn::new(Options {
        extensions: [mpa::Extensions::ALL; 2],
        ..Options::default()
    });
    traffic(&mut c);
    let r = c.analyze();
    assert!(
        r.connections[0].findings.is_empty(),
        "{:#?}",
        r.connections[0].findings
    );
    let text = r.render(true);
    assert!(
        text.contains("V2 read #1 size 10 src 0x0000bb02@0x40"),
        "{text}"
    );
    // Not agreed: three reserved-bit violations.
    let mut c = Conn::new(Options::default());
    traffic(&mut c);
    assert_eq!(violations(&c.analyze()), vec![Check::Reserved; 3]);
    // Agreed, but the second response names another read: a pairing violation.
    let mut c = Conn::new(Options {
        extensions: [mpa::Extensions::ALL; 2],
        ..Options::default()
    });
    let mut hdr = vec![0, 0, 0, 10, 0, 0, 0xbb, 0x02];
    hdr.extend_from_slice(&0x40u64.to_be_bytes());
    let mut req = untagged(Opcode::ReadRequest, 1, 1, 0, true, 0, &hdr);
    req[1] |= 0x10;
    c.fpdu(I, &req);
    let mut resp = tagged(Opcode::ReadResponse, 7, 0, true, &[1; 10]);
    resp[1] |= 0x10;
    c.fpdu(R, &resp);
    assert!(!violations(&c.analyze()).is_empty());
}
