//! Send with Immediate Data (this stack's negotiated extension, seed 003 §3.6): the four
//! opcodes on the wire, the value in the receive completion, and the agreement rule.

use bytes::Bytes;
use mpa::{Extensions, MpaConfig};

use super::pair::Pair;
use super::*;
use crate::{StreamConfig, TermCode, WcOpcode, WcStatus};

fn send_imm(wr_id: u64, data: &[u8], imm: u32, inv: Option<STag>, flags: SendFlags) -> SendWr {
    SendWr {
        wr_id,
        op: SendOp::Send {
            data: Payload::Bytes(Bytes::copy_from_slice(data)),
            invalidate: inv,
            immediate: Some(imm),
        },
        flags: flags | SendFlags::SIGNALED,
    }
}

/// A pair where A offers `a` and B accepts `b`.
fn pair_with(a: Extensions, b: Extensions, seed: u64) -> Pair {
    Pair::connect(
        mpa_cfg(|c| c.extensions = a),
        mpa_cfg(|c| c.extensions = b),
        StreamConfig::default(),
        seed,
    )
}

#[test]
fn the_first_fpdu_is_byte_exact() {
    let mut p = Pair::new(1);
    p.b.mem.register(stag(1), 0, 64, 0, RW);
    p.b.s.post_recv(recv(1, stag(1), 0, 64)).unwrap();
    p.a.s
        .post_send(send_imm(7, b"hi", 0x1122_3344, None, SendFlags::NONE))
        .unwrap();
    p.drive();
    // ULPDU 24: untagged DDP L=1 (0x41), RDMAP 0x4C, no Invalidate STag, QN 0, MSN 1,
    // MO 0, the value big-endian, then the payload; 2 octets of pad, then the CRC.
    let mut fpdu = vec![
        0x00, 0x18, 0x41, 0x4c, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0x11, 0x22, 0x33,
        0x44, b'h', b'i', 0, 0,
    ];
    fpdu.extend_from_slice(&mpa::crc32c(&fpdu).to_le_bytes());
    assert_eq!(p.a.sent, fpdu);
    let wc = &p.b.completions()[0];
    assert_eq!(
        (wc.opcode, wc.status, wc.byte_len, wc.immediate),
        (WcOpcode::Recv, WcStatus::Success, 2, Some(0x1122_3344))
    );
    assert_eq!(&p.b.mem.bytes(stag(1))[..2], b"hi");
    assert_eq!(p.b.s.stats().octets_received[0xC], 6);
    assert_eq!(p.a.s.extensions(), Extensions::ALL);
}

#[test]
fn all_four_variants_deliver_value_flags_and_payload() {
    // Byte order checked with asymmetric values, the two extremes, and payloads from empty
    // to several segments (MO counts the payload only).
    let imms = [0x0000_0000u32, 0xffff_ffff, 0x0102_0304, 0x8000_0001];
    for seed in 1..12u64 {
        let mut p = Pair::connect(
            MpaConfig::default(),
            MpaConfig::default(),
            StreamConfig {
                mulpdu: 128,
                ..StreamConfig::default()
            },
            seed,
        );
        p.max_chunk = 1 + (seed as usize * 13) % 50;
        p.b.mem.register(stag(1), 0, 4 * 1024, 0, RW);
        for i in 0..4 {
            p.b.s
                .post_recv(recv(100 + i, stag(1), i * 1024, 1024))
                .unwrap();
            p.b.mem.register(stag(10 + i as u32), 0, 8, 0, RW);
        }
        let lens = [0usize, 1, 300, 1024];
        for (i, imm) in imms.iter().enumerate() {
            let inv = (i % 2 == 1).then(|| stag(10 + i as u32));
            let se = if i >= 2 {
                SendFlags::SOLICITED
            } else {
                SendFlags::NONE
            };
            let data = pattern(lens[i], i as u8);
            p.a.s
                .post_send(send_imm(i as u64, &data, *imm, inv, se))
                .unwrap();
        }
        p.drive();
        let wcs = p.b.completions();
        assert_eq!(wcs.len(), 4, "seed {seed}: {wcs:?}");
        for (i, wc) in wcs.iter().enumerate() {
            assert_eq!(wc.wr_id, 100 + i as u64);
            assert_eq!(wc.status, WcStatus::Success);
            assert_eq!(wc.opcode, WcOpcode::Recv);
            assert_eq!(wc.immediate, Some(u64::from(imms[i])), "seed {seed} #{i}");
            assert_eq!(wc.byte_len as usize, lens[i]);
            assert_eq!(wc.solicited, i >= 2);
            let inv = (i % 2 == 1).then(|| stag(10 + i as u32));
            assert_eq!(wc.invalidated, inv);
            if let Some(s) = inv {
                assert!(
                    !p.b.mem.region(s).unwrap().valid,
                    "invalidated before the CQE"
                );
            }
            let at = i * 1024;
            assert_eq!(
                &p.b.mem.bytes(stag(1))[at..at + lens[i]],
                &pattern(lens[i], i as u8)[..]
            );
        }
        let stats = p.b.s.stats();
        // Opcodes 0xC (Send), 0xD (Invalidate), 0xE (SE), 0xF (SE and Invalidate): each
        // segment counts its 4-octet value too; 1024 octets take 10 segments of 106.
        assert_eq!(stats.octets_received[0xC], 4);
        assert_eq!(stats.octets_received[0xD], 1 + 4);
        assert_eq!(stats.octets_received[0xE], 300 + 3 * 4);
        assert_eq!(stats.octets_received[0xF], 1024 + 10 * 4);
        assert!(
            p.a.completions()
                .iter()
                .all(|w| w.is_ok() && w.opcode == WcOpcode::Send)
        );
    }
}

#[test]
fn without_agreement_nothing_is_sent_and_the_request_fails_locally() {
    for (a, b) in [
        (Extensions::NONE, Extensions::ALL),
        (Extensions::ALL, Extensions::NONE),
        (Extensions::READ_V2, Extensions::ALL),
    ] {
        let mut p = pair_with(a, b, 5);
        assert_eq!(
            p.a.s.extensions() & Extensions::SEND_IMMEDIATE,
            Extensions::NONE
        );
        p.b.mem.register(stag(1), 0, 64, 0, RW);
        p.b.s.post_recv(recv(1, stag(1), 0, 64)).unwrap();
        p.a.s
            .post_send(send_imm(1, b"no", 9, None, SendFlags::NONE))
            .unwrap();
        p.a.s.post_send(send(2, b"plain")).unwrap();
        p.drive();
        let sent = p.a.completions();
        assert_eq!(
            sent.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
            [(1, WcStatus::LocalQpOperation), (2, WcStatus::Success)]
        );
        // Only the plain Send went out; the connection carries on.
        let wcs = p.b.completions();
        assert_eq!(wcs.len(), 1);
        assert_eq!((wcs[0].byte_len, wcs[0].immediate), (5, None));
        assert_eq!(p.b.s.stats().octets_received[0xC..], [0; 4]);
        assert_eq!(p.b.term_sent(), None);
    }
}

#[test]
fn invalidating_a_stag_that_may_not_be_invalidated_terminates() {
    let mut p = Pair::new(6);
    p.b.mem.register(stag(1), 0, 64, 0, RW);
    p.b.s.post_recv(recv(1, stag(1), 0, 64)).unwrap();
    // stag(3) does not exist at B.
    p.a.s
        .post_send(send_imm(1, b"x", 5, Some(stag(3)), SendFlags::NONE))
        .unwrap();
    p.drive();
    let term = p.b.term_sent().expect("B terminates");
    // The rule Send with Invalidate follows: an STag that does not exist is a remote
    // operation error 0x09 (a foreign one would be the protection error 0x09).
    assert_eq!(term.code, TermCode::OP_CANNOT_INVALIDATE);
    let wcs = p.b.completions();
    assert_eq!(wcs.len(), 1);
    assert_ne!(
        wcs[0].status,
        WcStatus::Success,
        "the receive does not succeed"
    );
    assert_eq!(p.a.term_received(), Some(term.code));
}

#[test]
fn zero_length_consumes_exactly_one_receive() {
    let mut p = Pair::new(8);
    p.b.mem.register(stag(1), 0, 64, 0x77, RW);
    p.b.s.post_recv(recv(1, stag(1), 0, 32)).unwrap();
    p.b.s.post_recv(recv(2, stag(1), 32, 32)).unwrap();
    p.a.s
        .post_send(send_imm(1, b"", 0xdead_beef, None, SendFlags::NONE))
        .unwrap();
    p.drive();
    let wcs = p.b.completions();
    assert_eq!(wcs.len(), 1);
    assert_eq!((wcs[0].wr_id, wcs[0].byte_len), (1, 0));
    assert_eq!(wcs[0].immediate, Some(0xdead_beef));
    assert!(
        p.b.mem.bytes(stag(1)).iter().all(|&b| b == 0x77),
        "nothing placed"
    );
    // The second receive is still there for the next message.
    p.a.s.post_send(send(2, b"next")).unwrap();
    p.drive();
    assert_eq!(p.b.completions()[0].wr_id, 2);
}
