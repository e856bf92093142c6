//! RDMA Read V2 (this stack's negotiated extension, seed 003 §3.3): no sink on the wire,
//! responses matched to the oldest read by its identifier, and V1 when not agreed.

use mpa::Extensions;

use super::pair::Pair;
use super::*;
use crate::{StreamConfig, TermCode, WcStatus};

fn pair_with(a: Extensions, b: Extensions, mulpdu: u16, seed: u64) -> Pair {
    Pair::connect(
        mpa_cfg(|c| c.extensions = a),
        mpa_cfg(|c| c.extensions = b),
        StreamConfig {
            mulpdu,
            ..StreamConfig::default()
        },
        seed,
    )
}

/// B holds `src` at STag 2, TO 0x10_0000; A has a local-write-only sink at STag 3.
fn fixture(p: &mut Pair, src: &[u8]) {
    p.b.mem.register(stag(2), 0x10_0000, src.len(), 0, RW);
    p.b.mem
        .region_mut(stag(2))
        .unwrap()
        .data
        .copy_from_slice(src);
    p.a.mem
        .register(stag(3), 0x2000, src.len() + 256, 0xaa, Access::LOCAL_WRITE);
}

/// The ULPDUs in `wire` (one side's output), in order.
fn ulpdus(wire: &[u8], n: &mpa::Negotiated) -> Vec<Vec<u8>> {
    let mut out = bytes::BytesMut::from(wire);
    let mut d = mpa::Deframer::from_negotiated(n);
    std::iter::from_fn(|| d.decode(&mut out).unwrap().map(|u| u.to_vec())).collect()
}

#[test]
fn the_request_names_no_sink_and_the_responses_name_the_read() {
    let mut p = pair_with(Extensions::ALL, Extensions::ALL, 1024, 1);
    let src = pattern(3000, 5);
    fixture(&mut p, &src);
    p.a.s
        .post_send(read(
            1,
            remote(stag(2), 0x10_0000, 3000),
            sge(stag(3), 0x2010, 3000),
        ))
        .unwrap();
    p.drive();
    let wc = &p.a.completions()[0];
    assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 3000));
    assert_eq!(&p.a.mem.bytes(stag(3))[16..3016], &src[..]);
    // The request: control 0x51 (Read Request with the V2 mark), QN 1, MSN 1, then size,
    // source STag and TO; no sink STag anywhere.
    let req = &ulpdus(&p.a.sent, &p.na)[0];
    assert_eq!(
        &req[..],
        &[
            0x41, 0x51, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, // DDP
            0, 0, 0x0b, 0xb8, // 3000 octets
            0x00, 0x00, 0x02, 0x5a, // SrcSTag
            0, 0, 0, 0, 0, 0x10, 0, 0, // SrcTO
        ]
    );
    // The responses: tagged, control 0x52, STag = the request's MSN (1), TO from 0.
    let resp = ulpdus(&p.b.sent, &p.nb);
    assert_eq!(resp.len(), 3, "3000 octets in segments of 1010");
    for (i, r) in resp.iter().enumerate() {
        let last = if i == 2 { 0xc1 } else { 0x81 };
        let to = (i as u64 * 1010).to_be_bytes();
        let mut head = vec![last, 0x52, 0, 0, 0, 1];
        head.extend_from_slice(&to);
        assert_eq!(&r[..14], &head[..], "segment {i}");
    }
}

#[test]
fn several_outstanding_reads_land_byte_exactly_under_random_chunking() {
    for seed in 1..12u64 {
        let mut p = pair_with(
            Extensions::ALL,
            Extensions::ALL,
            128 + (seed as u16 * 131) % 1400,
            seed,
        );
        p.max_chunk = 1 + (seed as usize * 17) % 300;
        let src = pattern(40_000, seed as u8);
        fixture(&mut p, &src);
        // Four reads of different parts into different places, and one of zero octets.
        let parts = [
            (0u64, 10_000u32),
            (10_000, 1),
            (10_001, 29_999),
            (7, 0),
            (5, 100),
        ];
        let mut at = 0u64;
        for (i, (off, len)) in parts.iter().enumerate() {
            p.a.s
                .post_send(read(
                    i as u64,
                    remote(stag(2), 0x10_0000 + off, *len),
                    sge(stag(3), 0x2000 + at, *len),
                ))
                .unwrap();
            at += u64::from(*len);
        }
        p.drive();
        let wcs = p.a.completions();
        assert_eq!(wcs.len(), parts.len());
        assert!(wcs.iter().all(|w| w.is_ok()), "seed {seed}: {wcs:?}");
        let mut at = 0usize;
        for (off, len) in parts {
            let (off, len) = (off as usize, len as usize);
            assert_eq!(
                &p.a.mem.bytes(stag(3))[at..at + len],
                &src[off..off + len],
                "seed {seed}"
            );
            at += len;
        }
        assert_eq!(p.b.state(), crate::QpState::Rts);
    }
}

#[test]
fn without_agreement_reads_are_v1() {
    for (a, b) in [
        (Extensions::NONE, Extensions::ALL),
        (Extensions::ALL, Extensions::NONE),
        (Extensions::SEND_IMMEDIATE, Extensions::ALL),
    ] {
        let mut p = pair_with(a, b, 1024, 3);
        let src = pattern(100, 1);
        fixture(&mut p, &src);
        p.a.s
            .post_send(read(
                1,
                remote(stag(2), 0x10_0000, 100),
                sge(stag(3), 0x2000, 100),
            ))
            .unwrap();
        p.drive();
        assert!(p.a.completions()[0].is_ok());
        let req = &ulpdus(&p.a.sent, &p.na)[0];
        // Control 0x41, and the 28-octet header that starts with the sink STag.
        assert_eq!((req[1], req.len()), (0x41, 18 + 28));
        assert_eq!(&req[18..22], &stag(3).to_u32().to_be_bytes());
        let resp = &ulpdus(&p.b.sent, &p.nb)[0];
        assert_eq!(resp[1], 0x42);
    }
}

#[test]
fn a_bad_source_is_refused_with_nothing_sent() {
    let mut p = Pair::new(4);
    fixture(&mut p, &pattern(64, 2));
    p.a.s
        .post_send(read(
            1,
            remote(STag::from_u32(0xdead_beef), 0, 64),
            sge(stag(3), 0x2000, 64),
        ))
        .unwrap();
    p.drive();
    let term = p.b.term_sent().expect("B terminates");
    assert_eq!(term.code, TermCode::INVALID_STAG);
    assert!(
        ulpdus(&p.b.sent, &p.nb).iter().all(|u| u[1] & 0x0f != 0x2),
        "no Read Response"
    );
    assert_eq!(p.a.completions()[0].status, WcStatus::RemoteAccess);
    assert!(p.a.mem.bytes(stag(3)).iter().all(|&b| b == 0xaa));
}

/// A's view of B's responses rewritten by `f`: A must terminate and place nothing.
fn tampered_response(f: impl FnMut(usize, &mut Vec<u8>) + 'static, code: TermCode) {
    // Tamper with what B sends: swap roles, so B is the requester here.
    let mut p = Pair::new(5);
    p.a.mem.register(stag(2), 0x10_0000, 64, 0x11, RW);
    p.b.mem.register(stag(3), 0, 64, 0xaa, Access::LOCAL_WRITE);
    p.b.mem.register(stag(1), 0, 64, 0, RW);
    p.b.s.post_recv(recv(1, stag(1), 0, 64)).unwrap();
    // B may send only after A's first FPDU.
    p.a.s.post_send(send(9, b"go")).unwrap();
    p.drive();
    p.tamper_ulpdus(f);
    p.b.s
        .post_send(read(1, remote(stag(2), 0x10_0000, 64), sge(stag(3), 0, 64)))
        .unwrap();
    p.drive();
    let term = p.b.term_sent().expect("the requester terminates");
    assert_eq!(term.code, code);
    assert!(
        p.b.mem.bytes(stag(3)).iter().all(|&b| b == 0xaa),
        "nothing placed"
    );
}

#[test]
fn a_response_for_another_read_or_in_the_wrong_form_terminates() {
    // The read's identifier is the request's MSN on QN 1 (1); 2 names no outstanding read.
    tampered_response(
        |_, u| u[5] = 2,
        TermCode::from_ddp(ddp::DdpError::InvalidStag),
    );
    // A V1 Read Response (the mark cleared) to a V2 request.
    tampered_response(|_, u| u[1] &= !0x10, TermCode::UNEXPECTED_OPCODE);
    // An offset past the read: a bounds violation.
    tampered_response(
        |_, u| u[13] = 8,
        TermCode::from_ddp(ddp::DdpError::BaseBounds),
    );
}

fn read_sgl(wr_id: u64, src: RemoteBuf, dst: &[Sge]) -> SendWr {
    SendWr {
        wr_id,
        op: SendOp::ReadSgl {
            src,
            dst: dst.iter().copied().collect(),
        },
        flags: SendFlags::SIGNALED,
    }
}

#[test]
fn a_read_v2_fills_a_scatter_list_in_order() {
    for seed in 1..8u64 {
        let mut p = pair_with(
            Extensions::ALL,
            Extensions::ALL,
            200 + seed as u16 * 50,
            seed,
        );
        p.max_chunk = 1 + seed as usize * 37;
        let src = pattern(5000, 9);
        fixture(&mut p, &src);
        p.a.mem
            .register(stag(5), 0, 4096, 0xbb, Access::LOCAL_WRITE);
        // 1000 octets at STag 3 +100, 3000 at STag 5 +96, 1000 back at STag 3 +2000.
        let dst = [
            sge(stag(3), 0x2000 + 100, 1000),
            sge(stag(5), 96, 3000),
            sge(stag(3), 0x2000 + 2000, 1000),
        ];
        p.a.s
            .post_send(read_sgl(1, remote(stag(2), 0x10_0000, 5000), &dst))
            .unwrap();
        p.drive();
        let wc = &p.a.completions()[0];
        assert_eq!(
            (wc.status, wc.byte_len),
            (WcStatus::Success, 5000),
            "seed {seed}"
        );
        let a = p.a.mem.bytes(stag(3)).to_vec();
        assert_eq!(&a[100..1100], &src[..1000]);
        assert_eq!(&p.a.mem.bytes(stag(5))[96..3096], &src[1000..4000]);
        assert_eq!(&a[2000..3000], &src[4000..]);
        assert!(a[1100..2000].iter().all(|&b| b == 0xaa), "nothing between");
    }
}

#[test]
fn a_scatter_list_read_needs_read_v2_and_room() {
    let mut p = pair_with(Extensions::SEND_IMMEDIATE, Extensions::ALL, 1024, 1);
    fixture(&mut p, &pattern(64, 1));
    let dst = [sge(stag(3), 0x2000, 64)];
    p.a.s
        .post_send(read_sgl(1, remote(stag(2), 0x10_0000, 64), &dst))
        .unwrap();
    p.drive();
    assert_eq!(p.a.completions()[0].status, WcStatus::LocalQpOperation);
    assert!(p.b.completions().is_empty() && p.b.term_sent().is_none());
    let mut p = Pair::new(2);
    fixture(&mut p, &pattern(64, 1));
    let short = [sge(stag(3), 0x2000, 10), sge(stag(3), 0x2010, 10)];
    p.a.s
        .post_send(read_sgl(1, remote(stag(2), 0x10_0000, 64), &short))
        .unwrap();
    p.drive();
    assert_eq!(p.a.completions()[0].status, WcStatus::LocalLength);
}
