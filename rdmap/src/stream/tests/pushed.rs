//! Another writer of the stream (the push path that skips the daemon): Sends and Writes
//! it frames at the stream's transmit point, between the stream's own messages, arrive
//! at the peer in order and are placed, with and without markers, over re-chunked pipes.

use bytes::BytesMut;
use mpa::Framer;

use super::pair::Pair;
use super::*;
use crate::StreamConfig;
use crate::pushed::{PushedOp, frame_pushed};

/// Frames `op` of `payload` as the other writer, after A's stream went quiet, and moves
/// A's stream past it.
fn push(p: &mut Pair, op: PushedOp, payload: &[u8]) {
    assert!(
        p.a.s.tx_quiet(),
        "the other writer writes only when the stream is quiet: {:?}",
        p.a.s
    );
    let (msn, pos) = p.a.s.tx_point();
    let framing = p.a.s.framing();
    let mut framer = Framer::at(framing.markers_tx, framing.crc, pos);
    let msn = msn + u32::from(op.is_send());
    let mut out = BytesMut::new();
    frame_pushed(op, msn, payload, p.a.s.mulpdu(), &mut framer, &mut out).expect("fits");
    p.inject_a(&out);
    p.a.s.set_tx_point(msn, framer.position());
}

#[test]
fn pushed_messages_interleave_with_the_streams_own() {
    for (markers, seed) in [(false, 1), (true, 2), (false, 3), (true, 4)] {
        let cfg = mpa_cfg(|c| c.markers = markers);
        let mut p = Pair::connect(cfg.clone(), cfg, StreamConfig::default(), seed);
        assert_eq!(p.a.s.framing().markers_tx, markers);
        p.b.mem.register(stag(1), 0, 64 * 1024, 0, RW);
        p.b.mem.register(stag(2), 0, 4096, 0, RW);
        for i in 0..40u32 {
            p.b.s
                .post_recv(recv(u64::from(i), stag(1), u64::from(i) * 1024, 1024))
                .unwrap();
        }
        let mut sends = Vec::new();
        for round in 0..10u32 {
            // The stream's own: a Send and a Write longer than one FPDU.
            let own = pattern(20 + round as usize, round as u8);
            p.a.s.post_send(send(u64::from(round), &own)).unwrap();
            sends.push(own);
            let big = pattern(3000, 0x40 + round as u8);
            p.a.s
                .post_send(write(
                    100 + u64::from(round),
                    &big,
                    remote(stag(2), 0, 3000),
                ))
                .unwrap();
            p.drive();
            assert_eq!(p.b.mem.bytes(stag(2))[..3000], big[..]);
            // The other writer's: a Send, then a Write into the same region.
            let pushed = pattern(7 + round as usize, 0x80 + round as u8);
            push(
                &mut p,
                PushedOp::Send {
                    solicited: round % 2 == 0,
                },
                &pushed,
            );
            sends.push(pushed);
            let small = pattern(33, 0xc0 + round as u8);
            let op = PushedOp::Write {
                stag: stag(2),
                to: 100,
            };
            push(&mut p, op, &small);
            p.drive();
            assert_eq!(p.b.mem.bytes(stag(2))[100..133], small[..]);
        }
        assert_eq!(p.b.term_received(), None);
        assert_eq!(p.b.term_sent().map(|t| t.code), None, "markers {markers}");
        let got = p.b.completions();
        assert_eq!(got.len(), sends.len(), "every Send completed at B once");
        for (i, (wc, want)) in got.iter().zip(&sends).enumerate() {
            assert!(wc.is_ok(), "{wc:?}");
            assert_eq!(wc.wr_id, i as u64, "in order");
            let at = i * 1024;
            assert_eq!(&p.b.mem.bytes(stag(1))[at..at + want.len()], &want[..]);
        }
    }
}
