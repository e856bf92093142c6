//! Every fatal error: the exact Terminate, memory untouched, both sides flushed and in
//! Error. Offending traffic comes from a real stream whose ULPDUs are rewritten in flight
//! (framing and CRC are redone), or whose raw octets are flipped.

use mpa::MpaConfig;

use super::pair::Pair;
use super::*;
use crate::{QpState, StreamConfig, TermCode, WcStatus};

/// The fixture: B has a target region `stag(4)` (64 octets at 0x1000, remote read/write),
/// a read-only region `stag(5)`, a receive region `stag(1)` with two receives posted; A has
/// a receive posted. Returns B's memory checksum before the offending traffic.
fn fixture(p: &mut Pair) -> u64 {
    p.b.mem.register(stag(4), 0x1000, 64, 0x33, RW);
    p.b.mem.register(
        stag(5),
        0,
        64,
        0x55,
        Access::REMOTE_READ | Access::LOCAL_READ,
    );
    p.b.mem.register(stag(1), 0, 128, 0, RW);
    p.b.s.post_recv(recv(901, stag(1), 0, 64)).unwrap();
    p.b.s.post_recv(recv(902, stag(1), 64, 64)).unwrap();
    p.a.mem.register(stag(7), 0x2000, 4096, 0, RW);
    p.a.s.post_recv(recv(801, stag(7), 0x2000, 64)).unwrap();
    p.b.mem.checksum()
}

/// The common verdict: B sent exactly one Terminate with `wire` as its first two Terminate
/// Control octets and `hdrct` as its third; A received it; B's memory is unchanged; both
/// sides are in Error with every receive flushed.
fn assert_terminated(
    p: &mut Pair,
    before: u64,
    wire: [u8; 2],
    hdrct: u8,
) -> (crate::wire::TerminateRepr, Vec<crate::Completion>) {
    let sent = p.b.term_sent().expect("B sent a Terminate");
    assert_eq!(sent.code.to_wire(), wire, "Terminate code: {:?}", sent.code);
    let mut buf = vec![0u8; sent.buffer_len()];
    sent.emit(&mut buf);
    assert_eq!(buf[2], hdrct, "M/D/R bits of {:?}", sent.code);
    // On the wire, B's last FPDU is that Terminate: untagged, QN 2, MSN 1, MO 0, L=1.
    let mut out = bytes::BytesMut::from(&p.b.sent[..]);
    let mut deframer = mpa::Deframer::from_negotiated(&p.na);
    let ulpdu = std::iter::from_fn(|| deframer.decode(&mut out).unwrap())
        .last()
        .unwrap();
    assert_eq!(
        &ulpdu[..18],
        &[0x41, 0x47, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0]
    );
    assert_eq!(&ulpdu[18..], &buf[..]);
    assert_eq!(
        p.a.term_received(),
        Some(sent.code),
        "A received B's Terminate"
    );
    assert_eq!(p.b.mem.checksum(), before, "B's memory must not be written");
    assert_eq!(p.b.state(), QpState::Error);
    assert_eq!(p.a.state(), QpState::Error);
    let b_recv: Vec<_> =
        p.b.completions()
            .into_iter()
            .filter(|w| w.wr_id >= 900)
            .collect();
    assert!(
        b_recv.iter().all(|w| w.status == WcStatus::Flushed),
        "{b_recv:?}"
    );
    let a_wcs = p.a.completions();
    let a_recv: Vec<_> = a_wcs.iter().filter(|w| w.wr_id == 801).collect();
    assert_eq!(a_recv.len(), 1);
    assert_eq!(a_recv[0].status, WcStatus::Flushed);
    // B transmits nothing after its Terminate.
    let total = p.b.sent.len();
    p.b.s.post_send(send(5, b"late")).unwrap();
    p.drive();
    assert_eq!(p.b.sent.len(), total);
    (sent, a_wcs)
}

/// The Terminate FPDU B sent, with markers off: the first FPDU of its output.
fn first_fpdu(p: &Pair) -> &[u8] {
    let len = u16::from_be_bytes([p.b.sent[0], p.b.sent[1]]) as usize;
    &p.b.sent[..2 + len + mpa::pad_len(len) + 4]
}

#[test]
fn bad_crc_sends_the_mpa_crc_terminate() {
    let mut p = Pair::new(31);
    let before = fixture(&mut p);
    p.raw_tamper = Some(Box::new(|pos, bytes| {
        assert_eq!(pos, 0);
        bytes[20] ^= 0x01; // inside the payload of the first FPDU
    }));
    p.a.s
        .post_send(write(1, &[7; 16], remote(stag(4), 0x1000, 16)))
        .unwrap();
    p.drive();
    assert_terminated(&mut p, before, [0x20, 0x02], 0x00);
    // wire-format.md §5.5, "MPA CRC error", byte for byte.
    assert_eq!(
        first_fpdu(&p),
        &[
            0x00, 0x16, 0x41, 0x47, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0x20, 0x02,
            0x00, 0x00, 0x7f, 0xe4, 0x25, 0x85
        ][..]
    );
}

#[test]
fn flipped_octet_without_crc_is_not_an_mpa_error() {
    let c = mpa_cfg(|c| {
        c.crc = false;
    });
    let mut p = Pair::connect(c.clone(), c, StreamConfig::default(), 32);
    fixture(&mut p);
    p.raw_tamper = Some(Box::new(|pos, bytes| {
        assert_eq!(pos, 0);
        bytes[20] ^= 0x01;
    }));
    p.a.s
        .post_send(write(1, &[7; 16], remote(stag(4), 0x1000, 16)))
        .unwrap();
    p.drive();
    assert!(p.b.term_sent().is_none());
    assert_eq!(
        p.b.mem.bytes(stag(4))[..16],
        [7, 7, 7, 7, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7]
    );
}

#[test]
fn bad_marker_sends_the_mpa_marker_terminate() {
    // Markers from A to B; A's FPDU spans the marker at 512, whose FPDUPTR we move by 4 and
    // whose CRC we then recompute, so only the marker check can catch it.
    let cr = mpa_cfg(|c| {
        c.markers = true;
    });
    let mut p = Pair::connect(MpaConfig::default(), cr, StreamConfig::default(), 33);
    let before = fixture(&mut p);
    p.b.mem.register(stag(6), 0, 2048, 0, RW);
    let before = before ^ p.b.mem.checksum() ^ before;
    p.raw_tamper = Some(Box::new(|pos, bytes| {
        assert_eq!(pos, 0);
        {
            // Marker at 0 (FPDUPTR 0), header at 4, marker at 512 pointing back 508.
            assert_eq!(&bytes[512..516], &[0, 0, 0x01, 0xfc]);
            bytes[515] = 0xf8;
            let len = u16::from_be_bytes([bytes[4], bytes[5]]) as usize;
            let end = 4 + 2 + len + mpa::pad_len(len) + 4 + 4;
            let crc = mpa::crc32c(&bytes[..end - 4]);
            bytes[end - 4..end].copy_from_slice(&crc.to_le_bytes());
        }
    }));
    p.a.s
        .post_send(write(1, &[9; 600], remote(stag(6), 0, 600)))
        .unwrap();
    p.drive();
    assert_terminated(&mut p, before, [0x20, 0x03], 0x00);
}

#[test]
fn write_to_unknown_stag_is_ddp_invalid_stag() {
    let mut p = Pair::new(34);
    let before = fixture(&mut p);
    p.a.s
        .post_send(write(1, &[1; 8], remote(stag(77), 0x1000, 8)))
        .unwrap();
    p.drive();
    let (t, _) = assert_terminated(&mut p, before, [0x11, 0x00], 0xc0);
    // The copied header is the Write's tagged header.
    let h = t.ddp_header.expect("DDP header copied");
    assert_eq!(h.as_bytes()[..6], [0xc1, 0x40, 0x00, 0x00, 0x4d, 0x5a]);
    assert_eq!(t.ddp_seg_len, Some(22));
}

#[test]
fn write_with_stale_instance_is_ddp_invalid_stag() {
    let mut p = Pair::new(35);
    let before = fixture(&mut p);
    let stale = stag(4).with_instance(0x5b);
    p.a.s
        .post_send(write(1, &[1; 8], remote(stale, 0x1000, 8)))
        .unwrap();
    p.drive();
    assert_terminated(&mut p, before, [0x11, 0x00], 0xc0);
}

#[test]
fn write_one_byte_past_the_end_is_ddp_bounds() {
    let mut p = Pair::new(36);
    let before = fixture(&mut p);
    // 64 octets at 0x1000: [0x1001, 0x1041) is one past the end.
    p.a.s
        .post_send(write(1, &[1; 64], remote(stag(4), 0x1001, 64)))
        .unwrap();
    p.drive();
    assert_terminated(&mut p, before, [0x11, 0x01], 0xc0);
}

#[test]
fn write_without_remote_write_right_is_rdmap_access_violation() {
    let mut p = Pair::new(37);
    let before = fixture(&mut p);
    p.a.s
        .post_send(write(1, &[1; 8], remote(stag(5), 0, 8)))
        .unwrap();
    p.drive();
    assert_terminated(&mut p, before, [0x01, 0x02], 0xc0);
}

#[test]
fn write_of_another_pd_is_ddp_not_associated() {
    let mut p = Pair::new(38);
    let before = fixture(&mut p);
    p.b.mem.region_mut(stag(4)).unwrap().associated = false;
    p.a.s
        .post_send(write(1, &[1; 8], remote(stag(4), 0x1000, 8)))
        .unwrap();
    p.drive();
    assert_terminated(&mut p, before, [0x11, 0x02], 0xc0);
}

#[test]
fn send_without_posted_receive_matches_the_reference_terminate() {
    // wire-format.md §5.5 "Invalid MSN - no buffer": the fifth Send (MSN 5, 82 octets of
    // payload, ULPDU 100) finds no buffer.
    let mut p = Pair::new(39);
    p.b.mem.register(stag(1), 0, 4096, 0, RW);
    for i in 0..4 {
        p.b.s.post_recv(recv(i, stag(1), i * 100, 100)).unwrap();
    }
    p.a.mem.register(stag(7), 0, 64, 0, RW);
    p.a.s.post_recv(recv(801, stag(7), 0, 64)).unwrap();
    for i in 0..5 {
        p.a.s.post_send(send(i, &[i as u8; 82])).unwrap();
    }
    let before = p.b.mem.checksum();
    p.drive();
    assert_eq!(p.b.completions().len(), 4);
    let before = before ^ before ^ p.b.mem.checksum();
    p.b.s.post_recv(recv(901, stag(1), 0, 64)).unwrap_or(());
    assert_terminated(&mut p, before, [0x12, 0x02], 0xc0);
    assert_eq!(
        first_fpdu(&p),
        &[
            0x00, 0x2a, 0x41, 0x47, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0x12, 0x02,
            0xc0, 0x00, 0x00, 0x64, 0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0,
            0x71, 0x0d, 0x5e, 0x50
        ][..]
    );
}

#[test]
fn send_longer_than_the_buffer_is_ddp_too_long() {
    let mut p = Pair::new(40);
    let before = fixture(&mut p);
    p.a.s.post_send(send(1, &[3; 65])).unwrap();
    p.drive();
    let wcs = p.b.completions();
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        got,
        vec![(901, WcStatus::LocalLength), (902, WcStatus::Flushed)]
    );
    assert_terminated(&mut p, before, [0x12, 0x05], 0xc0);
}

#[test]
fn msn_out_of_range_is_ddp_msn_range() {
    let mut p = Pair::new(41);
    let before = fixture(&mut p);
    p.tamper_ulpdus(|_, u| u[13] = 7); // MSN 1 -> 7
    p.a.s.post_send(send(1, b"x")).unwrap();
    p.drive();
    assert_terminated(&mut p, before, [0x12, 0x03], 0xc0);
}

/// A ULPDU too short to hold any DDP header (0 octets, the zero-length FPDU, and 13, one
/// short of a tagged header) is DDP Local Catastrophic, with no header copied: there is
/// no header to say whether the segment was tagged or untagged, so neither the tagged nor
/// the untagged codes apply, and MPA framed it correctly (a zero ULPDU_Length is valid
/// MPA), so no MPA code applies either.
#[test]
fn a_ulpdu_shorter_than_any_ddp_header_is_ddp_local_catastrophic() {
    for len in [0usize, 1, 13] {
        let mut p = Pair::new(41 + len as u64);
        let before = fixture(&mut p);
        p.tamper_ulpdus(move |_, u| u.truncate(len));
        p.a.s.post_send(send(1, b"x")).unwrap();
        p.drive();
        assert_terminated(&mut p, before, [0x10, 0x00], 0x00);
    }
}

#[test]
fn invalid_queue_number_is_ddp_invalid_qn() {
    let mut p = Pair::new(42);
    let before = fixture(&mut p);
    p.tamper_ulpdus(|_, u| u[9] = 4);
    p.a.s.post_send(send(1, b"x")).unwrap();
    p.drive();
    assert_terminated(&mut p, before, [0x12, 0x01], 0xc0);
}

#[test]
fn unknown_opcode_is_rdmap_unexpected_opcode() {
    // 0xC..=0xF are the Send with Immediate Data extension: unexpected on a connection
    // that did not agree to it, as any unassigned opcode is.
    for (i, opcode) in [0x4cu8, 0x4d, 0x4e, 0x4f].into_iter().enumerate() {
        let off = mpa_cfg(|c| c.extensions = mpa::Extensions::NONE);
        let mut p = Pair::connect(off, MpaConfig::default(), StreamConfig::default(), 43);
        let before = fixture(&mut p);
        p.tamper_ulpdus(move |_, u| u[1] = opcode);
        p.a.s.post_send(send(i as u64, b"12345678")).unwrap();
        p.drive();
        assert_terminated(&mut p, before, [0x02, 0x06], 0xc0);
    }
}

#[test]
fn a_send_with_immediate_too_short_for_its_value_is_rdmap_unspecified() {
    // Agreed, but the segment holds 3 of the 4 octets of the value.
    let mut p = Pair::new(43);
    let before = fixture(&mut p);
    p.tamper_ulpdus(|_, u| u[1] = 0x4c);
    p.a.s.post_send(send(1, b"xyz")).unwrap();
    p.drive();
    assert_terminated(&mut p, before, [0x02, 0xff], 0xc0);
}

#[test]
fn wrong_versions_are_reported_per_layer() {
    for (patch, wire) in [
        ((0usize, 0x42u8), [0x12, 0x06]), // untagged DV 2
        ((1, 0x83), [0x02, 0x05]),        // RDMAP RV 2
    ] {
        let mut p = Pair::new(44);
        let before = fixture(&mut p);
        p.tamper_ulpdus(move |_, u| u[patch.0] = patch.1);
        p.a.s.post_send(send(1, b"x")).unwrap();
        p.drive();
        assert_terminated(&mut p, before, wire, 0xc0);
    }
    let mut p = Pair::new(45);
    let before = fixture(&mut p);
    p.tamper_ulpdus(|_, u| u[0] = 0xc2); // tagged DV 2
    p.a.s
        .post_send(write(1, &[1; 8], remote(stag(4), 0x1000, 8)))
        .unwrap();
    p.drive();
    assert_terminated(&mut p, before, [0x11, 0x04], 0xc0);
}

#[test]
fn read_request_for_a_bad_source_matches_the_reference_terminate() {
    // wire-format.md §5.5 "Invalid STag on a Read Request": M, D and R set, the Read
    // Request header copied. A standard (V1) Read: Read V2 is not agreed.
    let v1 = mpa_cfg(|c| c.extensions = mpa::Extensions::NONE);
    let mut p = Pair::connect(v1, MpaConfig::default(), StreamConfig::default(), 46);
    let before = fixture(&mut p);
    p.a.mem
        .register(STag::from_u32(0x1122_3344), 0x2000, 0x100, 0, RW);
    p.a.s
        .post_send(read(
            1,
            remote(STag::from_u32(0xdead_beef), 0x3000, 0x100),
            sge(STag::from_u32(0x1122_3344), 0x2000, 0x100),
        ))
        .unwrap();
    p.drive();
    let (_, a_wcs) = assert_terminated(&mut p, before, [0x01, 0x00], 0xe0);
    assert_eq!(
        first_fpdu(&p),
        &[
            0x00, 0x46, 0x41, 0x47, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0x01, 0x00,
            0xe0, 0x00, 0x00, 0x2e, 0x41, 0x41, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0,
            0x11, 0x22, 0x33, 0x44, 0, 0, 0, 0, 0, 0, 0x20, 0, 0, 0, 0x01, 0, 0xde, 0xad, 0xbe,
            0xef, 0, 0, 0, 0, 0, 0, 0x30, 0, 0xf0, 0xa0, 0xfd, 0x60
        ][..]
    );
    // A's Read reports the peer's verdict.
    let wc = a_wcs.iter().find(|w| w.wr_id == 1).unwrap();
    assert_eq!(wc.status, WcStatus::RemoteAccess);
}

#[test]
fn read_past_the_source_end_is_rdmap_bounds() {
    let mut p = Pair::new(47);
    let before = fixture(&mut p);
    p.a.s
        .post_send(read(
            1,
            remote(stag(4), 0x1001, 64),
            sge(stag(7), 0x2000, 64),
        ))
        .unwrap();
    p.drive();
    assert_terminated(&mut p, before, [0x01, 0x01], 0xe0);
    assert!(
        p.a.mem.bytes(stag(7)).iter().all(|&b| b == 0),
        "nothing placed at A"
    );
}

#[test]
fn misaligned_atomic_is_remote_operation_7_and_untouched() {
    let mut p = Pair::new(48);
    let before = fixture(&mut p);
    p.a.s
        .post_send(SendWr {
            wr_id: 1,
            op: SendOp::FetchAdd {
                dst: remote(stag(4), 0x1004, 8),
                add: 1,
                mask: 0,
                result: sge(stag(7), 0x2000, 8),
            },
            flags: SendFlags::SIGNALED,
        })
        .unwrap();
    p.drive();
    assert_terminated(&mut p, before, [0x02, 0x07], 0xc0);
}

#[test]
fn immediate_data_of_the_wrong_length_is_rejected() {
    let mut p = Pair::new(49);
    let before = fixture(&mut p);
    p.tamper_ulpdus(|_, u| u.push(0)); // 9 octets of Immediate Data
    p.a.s
        .post_send(SendWr {
            wr_id: 1,
            op: SendOp::Immediate { data: 1 },
            flags: SendFlags::SIGNALED,
        })
        .unwrap();
    p.drive();
    assert_terminated(&mut p, before, TermCode::OP_UNSPECIFIED.to_wire(), 0xc0);
}

#[test]
fn send_with_invalidate_of_a_foreign_stag_is_cannot_invalidate() {
    let mut p = Pair::new(50);
    let before = fixture(&mut p);
    p.b.mem.register(stag(8), 0, 8, 0, RW);
    p.b.mem.region_mut(stag(8)).unwrap().associated = false;
    let before = before ^ before ^ p.b.mem.checksum();
    p.a.s
        .post_send(SendWr {
            wr_id: 1,
            op: SendOp::Send {
                data: Payload::Bytes(Bytes::from_static(b"")),
                invalidate: Some(stag(8)),
                immediate: None,
            },
            flags: SendFlags::SIGNALED,
        })
        .unwrap();
    p.drive();
    assert_terminated(&mut p, before, [0x01, 0x09], 0xc0);
    assert!(p.b.mem.region(stag(8)).unwrap().valid);
}

#[test]
fn peer_to_peer_without_the_rtr_is_no_matching_rtr() {
    let c = mpa_cfg(|c| {
        c.p2p = true;
    });
    let mut p = Pair::connect(c.clone(), c, StreamConfig::default(), 51);
    let before = fixture(&mut p);
    // Replace the RTR (a zero-length Write) with a Send.
    p.tamper_ulpdus(|i, u| {
        if i == 0 {
            *u = vec![
                0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, b'x',
            ];
        }
    });
    p.drive();
    assert_terminated(&mut p, before, [0x20, 0x07], 0x00);
}

#[test]
fn truncated_and_garbage_ulpdus_never_panic() {
    for seed in 0..200u64 {
        let mut p = Pair::new(seed + 1000);
        fixture(&mut p);
        let mut rng = crate::testing::XorShift::new(seed);
        let len = rng.range(0, 80);
        let garbage: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        p.tamper_ulpdus(move |_, u| *u = garbage.clone());
        p.a.s.post_send(send(1, b"x")).unwrap();
        p.drive();
        // Whatever it was, B either accepted it as valid or terminated cleanly.
        if let Some(t) = p.b.term_sent() {
            assert_eq!(p.a.term_received(), Some(t.code));
        }
    }
}

#[test]
fn negotiation_failure_after_fpdu_mode_sends_the_mpa_terminate() {
    // RFC 6581 §9.1: an Initiator that cannot meet the Reply's IRD/ORD sends TERM 20 06 as
    // its first FPDU.
    let mut p = Pair::new(52);
    let before = fixture(&mut p);
    let mut failed = crate::Stream::failed(
        StreamConfig::default(),
        &p.na,
        TermCode::llp(mpa::MpaError::InsufficientIrd.code()),
    );
    std::mem::swap(&mut p.a.s, &mut failed);
    p.a.s.post_recv(recv(801, stag(7), 0x2000, 64)).unwrap();
    p.drive();
    let len = u16::from_be_bytes([p.a.sent[0], p.a.sent[1]]) as usize;
    assert_eq!(
        &p.a.sent[2..2 + len],
        &[
            0x41, 0x47, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0x20, 0x06, 0, 0
        ]
    );
    assert_eq!(p.b.term_received().map(|c| c.to_wire()), Some([0x20, 0x06]));
    assert_eq!(p.b.state(), QpState::Error);
    assert_eq!(p.b.mem.checksum(), before);
    assert!(
        p.b.completions()
            .iter()
            .all(|w| w.status == WcStatus::Flushed)
    );
}

#[test]
fn read_requests_beyond_the_ird_are_remote_operation_7() {
    let mut p = Pair::new(53);
    // B runs with IRD 1 while A believes it may have 16 Reads outstanding.
    let mut nb = p.nb.clone();
    nb.ird = 1;
    p.b.s = crate::Stream::new(StreamConfig::default(), &nb);
    let before = fixture(&mut p);
    p.b.mem.register(stag(6), 0, 200_000, 0x66, RW);
    p.a.mem.register(stag(8), 0, 400_000, 0, RW);
    let before = before ^ before ^ p.b.mem.checksum();
    p.a.s
        .post_send(read(
            1,
            remote(stag(6), 0, 200_000),
            sge(stag(8), 0, 200_000),
        ))
        .unwrap();
    p.a.s
        .post_send(read(
            2,
            remote(stag(6), 0, 200_000),
            sge(stag(8), 200_000, 200_000),
        ))
        .unwrap();
    p.drive();
    assert_terminated(&mut p, before, [0x02, 0x07], 0xc0);
}

/// B Reads 4000 octets from A (three segments at the default MULPDU); A's Read Responses
/// are rewritten in flight by `tamper(segment index, ulpdu)`. Returns B's memory checksum
/// before the Read, with the sink `stag(8)` (4096 octets of 0x11 at 0x9000) included.
fn hostile_read_response(p: &mut Pair, tamper: impl Fn(usize, &mut Vec<u8>) + 'static) -> u64 {
    p.b.mem.register(stag(8), 0x9000, 4096, 0x11, RW);
    fixture(p);
    let mut segment = 0;
    p.tamper_ulpdus(move |_, u| {
        // Tagged (T bit) Read Response (RDMAP opcode 0x2).
        if u[0] & 0x80 != 0 && u[1] & 0x0f == 0x2 {
            tamper(segment, u);
            segment += 1;
        }
    });
    // A (the Initiator) speaks first, so that B may send.
    p.a.s.post_send(send(3, b"go")).unwrap();
    p.drive();
    let before = p.b.mem.checksum();
    p.b.s
        .post_send(read(
            950,
            remote(stag(7), 0x2000, 4000),
            sge(stag(8), 0x9000, 4000),
        ))
        .unwrap();
    p.drive();
    before
}

/// Adds `delta` to the tagged offset (octets 6..14) of a tagged ULPDU.
fn shift_to(u: &mut [u8], delta: i64) {
    let to = u64::from_be_bytes(u[6..14].try_into().unwrap());
    u[6..14].copy_from_slice(&to.wrapping_add_signed(delta).to_be_bytes());
}

#[test]
fn a_read_response_with_a_hole_is_ddp_bounds_and_never_completes() {
    let mut p = Pair::new(61);
    let before = hostile_read_response(&mut p, |i, u| {
        if i == 0 {
            shift_to(u, 8);
        }
    });
    let t = assert_terminated_by_b(&mut p, before);
    assert_eq!(t.ddp_seg_len.map(|l| l > 1000), Some(true), "{t:?}");
}

#[test]
fn an_overlapping_read_response_is_ddp_bounds_and_never_completes() {
    let mut p = Pair::new(62);
    p.b.mem.register(stag(8), 0x9000, 4096, 0x11, RW);
    let mut expected = p.b.mem.bytes(stag(8)).to_vec();
    hostile_read_response(&mut p, |i, u| {
        if i == 1 {
            shift_to(u, -10);
        }
    });
    // The first segment was placed (A's zeros over B's 0x11); the second, which overlaps
    // it by 10 octets, placed nothing.
    let first =
        p.b.mem
            .bytes(stag(8))
            .iter()
            .take_while(|&&b| b == 0)
            .count();
    assert!(
        first > 1000 && first < 2000,
        "first segment: {first} octets"
    );
    expected[..first].fill(0);
    assert_eq!(p.b.mem.bytes(stag(8)), &expected[..]);
    let sent = p.b.term_sent().expect("B sent a Terminate");
    assert_eq!(sent.code.to_wire(), [0x11, 0x01]);
    assert_read_failed(&mut p);
}

#[test]
fn a_read_response_past_the_sink_is_ddp_bounds() {
    let mut p = Pair::new(63);
    let before = hostile_read_response(&mut p, |i, u| {
        if i == 0 {
            // Far beyond the sink, where a u64 sum would wrap.
            u[6..14].copy_from_slice(&(u64::MAX - 4).to_be_bytes());
        }
    });
    let t = assert_terminated_by_b(&mut p, before);
    assert_eq!(t.code.to_wire(), [0x11, 0x03], "TO wrap: {t:?}");
}

/// B sent a DDP tagged Terminate for the Read Response, placed nothing, and its Read
/// completed in error (flushed), not successfully.
fn assert_terminated_by_b(p: &mut Pair, before: u64) -> crate::wire::TerminateRepr {
    let sent = p.b.term_sent().expect("B sent a Terminate");
    assert_eq!(sent.code.to_wire()[0], 0x11, "DDP tagged: {:?}", sent.code);
    assert_eq!(p.b.mem.checksum(), before, "nothing placed at B");
    assert_eq!(p.a.term_received(), Some(sent.code));
    assert_read_failed(p);
    sent
}

fn assert_read_failed(p: &mut Pair) {
    let read: Vec<_> =
        p.b.completions()
            .into_iter()
            .filter(|w| w.wr_id == 950)
            .collect();
    assert_eq!(read.len(), 1, "{read:?}");
    assert_ne!(read[0].status, WcStatus::Success, "{read:?}");
    assert_eq!(p.b.state(), QpState::Error);
}
