//! Every operation end to end, under random chunking and segment sizes.

use bytes::Bytes;
use mpa::{MpaConfig, RtrFlags};

use super::pair::Pair;
use super::*;
use crate::{Event, QpState, StreamConfig, WcOpcode, WcStatus};

fn cfg_mulpdu(m: u16) -> StreamConfig {
    StreamConfig {
        mulpdu: m,
        ..StreamConfig::default()
    }
}

#[test]
fn send_variants_deliver_in_order_with_flags() {
    for seed in 1..20u64 {
        let mut p = Pair::new(seed);
        p.max_chunk = 1 + (seed as usize * 7) % 64;
        p.b.mem.register(stag(1), 0x1000, 4096, 0, RW);
        p.b.mem.register(stag(9), 0, 64, 0, RW);
        for i in 0..4 {
            p.b.s
                .post_recv(recv(100 + i, stag(1), 0x1000 + i * 1024, 1024))
                .unwrap();
        }
        let msgs: Vec<Vec<u8>> = (0..4).map(|i| pattern(10 + i * 300, i as u8)).collect();
        let ops = [
            (None, SendFlags::SIGNALED),
            (None, SendFlags::SIGNALED | SendFlags::SOLICITED),
            (Some(stag(9)), SendFlags::SIGNALED),
            (None, SendFlags::SIGNALED | SendFlags::SOLICITED),
        ];
        for (i, (inv, flags)) in ops.iter().enumerate() {
            let inv = if i == 3 { None } else { *inv };
            p.a.s
                .post_send(SendWr {
                    wr_id: i as u64,
                    op: SendOp::Send {
                        data: Payload::Bytes(Bytes::from(msgs[i].clone())),
                        invalidate: inv,
                        immediate: None,
                    },
                    flags: *flags,
                })
                .unwrap();
        }
        p.drive();
        let wcs = p.b.completions();
        assert_eq!(wcs.len(), 4, "seed {seed}: {wcs:?}");
        for (i, wc) in wcs.iter().enumerate() {
            assert_eq!(wc.wr_id, 100 + i as u64);
            assert_eq!(wc.status, WcStatus::Success);
            assert_eq!(wc.opcode, WcOpcode::Recv);
            assert_eq!(wc.byte_len as usize, msgs[i].len());
            assert_eq!(wc.solicited, i == 1 || i == 3);
            assert_eq!(wc.invalidated, (i == 2).then_some(stag(9)));
            let at = i * 1024;
            assert_eq!(
                &p.b.mem.bytes(stag(1))[at..at + msgs[i].len()],
                &msgs[i][..]
            );
        }
        assert!(
            !p.b.mem.region(stag(9)).unwrap().valid,
            "Send with Invalidate invalidated"
        );
        let sent = p.a.completions();
        assert_eq!(
            sent.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
            vec![0, 1, 2, 3]
        );
        assert!(sent.iter().all(|w| w.is_ok() && w.opcode == WcOpcode::Send));
    }
}

#[test]
fn send_with_solicited_and_invalidate_uses_opcode_6() {
    let mut p = Pair::new(3);
    p.b.mem.register(stag(1), 0, 64, 0, RW);
    p.b.mem.register(stag(2), 0, 64, 0, RW);
    p.b.s.post_recv(recv(1, stag(1), 0, 64)).unwrap();
    p.a.s
        .post_send(SendWr {
            wr_id: 7,
            op: SendOp::Send {
                data: Payload::Bytes(Bytes::from_static(b"\xbe\xef")),
                invalidate: Some(stag(2)),
                immediate: None,
            },
            flags: SendFlags::SIGNALED | SendFlags::SOLICITED,
        })
        .unwrap();
    p.drive();
    // The FPDU on the wire: DDP 0x41, RDMAP 0x46, Invalidate STag in octets 2..6.
    assert_eq!(&p.a.sent[2..8], &[0x41, 0x46, 0x00, 0x00, 0x02, 0x5a]);
    let wc = &p.b.completions()[0];
    assert!(wc.solicited);
    assert_eq!(wc.invalidated, Some(stag(2)));
}

#[test]
fn rdma_write_multi_segment_lands_exactly() {
    for (seed, mulpdu) in [(1u64, 128u16), (2, 200), (3, 1442), (4, 9000), (5, 64768)] {
        let mut p = Pair::connect(
            MpaConfig::default(),
            MpaConfig::default(),
            cfg_mulpdu(mulpdu),
            seed,
        );
        p.b.mem.register(stag(4), 0x7000_0000, 100_000, 0xee, RW);
        let data = pattern(70_001, 9);
        p.a.s
            .post_send(write(1, &data, remote(stag(4), 0x7000_0010, 70_001)))
            .unwrap();
        p.a.s
            .post_send(write(2, &[], remote(stag(4), 0, 0)))
            .unwrap();
        p.drive();
        let mem = p.b.mem.bytes(stag(4));
        assert!(mem[..16].iter().all(|&b| b == 0xee));
        assert_eq!(&mem[16..16 + data.len()], &data[..]);
        assert!(mem[16 + data.len()..].iter().all(|&b| b == 0xee));
        let wcs = p.a.completions();
        assert_eq!(wcs.len(), 2);
        assert!(wcs.iter().all(|w| w.is_ok() && w.opcode == WcOpcode::Write));
        assert_eq!(wcs[0].byte_len, 70_001);
        // One-touch hook: the last segment of the non-empty Write was reported once.
        assert_eq!(p.b.mem.placed, vec![stag(4)]);
        assert!(
            p.b.completions().is_empty(),
            "RDMA Write completes nothing at the sink"
        );
        let segs = p.a.s.stats().fpdus_sent;
        let max = u64::from(mulpdu) - 14;
        assert_eq!(
            segs,
            70_001u64.div_ceil(max) + 1,
            "segmentation at MULPDU {mulpdu}"
        );
    }
}

#[test]
fn rdma_read_multi_segment_and_zero_length() {
    for seed in 1..10u64 {
        let mut p = Pair::connect(
            MpaConfig::default(),
            MpaConfig::default(),
            cfg_mulpdu(128 + (seed as u16 * 97) % 1400),
            seed,
        );
        let src = pattern(50_000, 3);
        p.b.mem.register(stag(2), 0x10_0000, src.len(), 0, RW);
        p.b.mem
            .region_mut(stag(2))
            .unwrap()
            .data
            .copy_from_slice(&src);
        p.a.mem.register(stag(3), 0x2000, 60_000, 0xaa, RW);
        p.a.s
            .post_send(read(
                1,
                remote(stag(2), 0x10_0000, 50_000),
                sge(stag(3), 0x2010, 50_000),
            ))
            .unwrap();
        p.a.s
            .post_send(read(
                2,
                remote(STag::from_u32(0xdead_beef), 7, 0),
                sge(stag(3), 0x2000, 0),
            ))
            .unwrap();
        p.drive();
        let wcs = p.a.completions();
        assert_eq!(
            wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
            vec![(1, WcStatus::Success), (2, WcStatus::Success)]
        );
        assert_eq!(wcs[0].byte_len, 50_000);
        assert_eq!(&p.a.mem.bytes(stag(3))[16..50_016], &src[..]);
        assert!(p.a.mem.bytes(stag(3))[..16].iter().all(|&b| b == 0xaa));
        assert_eq!(p.b.state(), QpState::Rts);
    }
}

#[test]
fn reads_beyond_ord_wait_and_complete_in_order() {
    let ci = mpa_cfg(|c| {
        c.ord = 2;
    });
    let mut p = Pair::connect(ci, MpaConfig::default(), StreamConfig::default(), 11);
    assert_eq!(p.a.s.ird_ord().1, 2);
    p.b.mem.register(stag(2), 0, 4096, 0x11, RW);
    p.a.mem.register(stag(3), 0, 4096, 0, RW);
    for i in 0..8u64 {
        p.a.s
            .post_send(read(
                i,
                remote(stag(2), i * 100, 100),
                sge(stag(3), i * 100, 100),
            ))
            .unwrap();
        p.a.s.post_send(send(100 + i, b"x")).unwrap();
    }
    p.b.mem.register(stag(1), 0, 64, 0, RW);
    for i in 0..8 {
        p.b.s.post_recv(recv(i, stag(1), 0, 64)).unwrap();
    }
    p.drive();
    let ids: Vec<u64> = p.a.completions().iter().map(|w| w.wr_id).collect();
    let want: Vec<u64> = (0..8).flat_map(|i| [i, 100 + i]).collect();
    assert_eq!(ids, want, "send-queue completions are in posting order");
    assert!(p.a.mem.bytes(stag(3))[..800].iter().all(|&b| b == 0x11));
}

#[test]
fn fence_waits_for_outstanding_reads() {
    let mut p = Pair::new(5);
    p.b.mem.register(stag(2), 0, 64, 0x42, RW);
    p.a.mem.register(stag(3), 0, 64, 0, RW);
    p.b.mem.register(stag(1), 0, 64, 0, RW);
    p.b.s.post_recv(recv(1, stag(1), 0, 64)).unwrap();
    p.a.s
        .post_send(read(1, remote(stag(2), 0, 64), sge(stag(3), 0, 64)))
        .unwrap();
    let mut fenced = send(2, b"after the read");
    fenced.flags = SendFlags::SIGNALED | SendFlags::FENCE;
    p.a.s.post_send(fenced).unwrap();
    // Before any response arrives, only the Read Request may leave.
    let mut out = crate::Transmit::new();
    let _ = p.a.s.poll_transmit(&mut p.a.mem, &mut out, usize::MAX);
    assert_eq!(
        p.a.s.stats().fpdus_sent,
        1,
        "the fenced Send waits for the Read"
    );
    let n = out.len();
    p.a.s.handle_written(n);
    let out = out.take(n);
    p.b.inbox.extend_from_slice(&out);
    p.b.s.handle_input(&mut p.b.inbox, &mut p.b.mem);
    p.drive();
    assert_eq!(p.b.completions().len(), 1);
    assert_eq!(
        p.a.completions()
            .iter()
            .map(|w| w.wr_id)
            .collect::<Vec<_>>(),
        vec![1, 2]
    );
}

#[test]
fn atomics_fetch_add_and_cmp_swap() {
    let mut p = Pair::new(8);
    p.b.mem.register(stag(5), 0x100, 64, 0, RW);
    p.b.mem.region_mut(stag(5)).unwrap().data[8..16].copy_from_slice(&5u64.to_le_bytes());
    p.a.mem.register(stag(6), 0, 64, 0, RW);
    let fa = SendWr {
        wr_id: 1,
        op: SendOp::FetchAdd {
            dst: remote(stag(5), 0x108, 8),
            add: 10,
            mask: 0,
            result: sge(stag(6), 0, 8),
        },
        flags: SendFlags::SIGNALED,
    };
    let cs = |wr_id, compare, swap| SendWr {
        wr_id,
        op: SendOp::CmpSwap {
            dst: remote(stag(5), 0x108, 8),
            compare,
            compare_mask: u64::MAX,
            swap,
            swap_mask: u64::MAX,
            result: sge(stag(6), 8 * wr_id, 8),
        },
        flags: SendFlags::SIGNALED,
    };
    p.a.s.post_send(fa).unwrap();
    p.a.s.post_send(cs(2, 15, 99)).unwrap();
    p.a.s.post_send(cs(3, 15, 7)).unwrap();
    p.drive();
    let wcs = p.a.completions();
    let got: Vec<_> = wcs
        .iter()
        .map(|w| (w.wr_id, w.opcode, w.atomic_orig))
        .collect();
    assert_eq!(
        got,
        vec![
            (1, WcOpcode::FetchAdd, Some(5)),
            (2, WcOpcode::CmpSwap, Some(15)),
            (3, WcOpcode::CmpSwap, Some(99)),
        ]
    );
    let target = u64::from_le_bytes(p.b.mem.bytes(stag(5))[8..16].try_into().unwrap());
    assert_eq!(target, 99, "the failed compare left 99 in place");
    let res = p.a.mem.bytes(stag(6));
    assert_eq!(u64::from_le_bytes(res[0..8].try_into().unwrap()), 5);
    assert_eq!(u64::from_le_bytes(res[16..24].try_into().unwrap()), 15);
    assert_eq!(u64::from_le_bytes(res[24..32].try_into().unwrap()), 99);
}

#[test]
fn immediate_data_consumes_a_receive() {
    let mut p = Pair::new(9);
    p.b.mem.register(stag(1), 0, 64, 0, RW);
    p.b.s.post_recv(recv(1, stag(1), 0, 64)).unwrap();
    p.b.s.post_recv(recv(2, stag(1), 0, 64)).unwrap();
    for (id, flags) in [
        (1, SendFlags::SIGNALED),
        (2, SendFlags::SIGNALED | SendFlags::SOLICITED),
    ] {
        p.a.s
            .post_send(SendWr {
                wr_id: id,
                op: SendOp::Immediate {
                    data: 0x0102_0304_0506_0708,
                },
                flags,
            })
            .unwrap();
    }
    p.drive();
    // First FPDU is byte-exact with wire-format.md §5.4 "Immediate Data".
    assert_eq!(
        &p.a.sent[..32],
        &[
            0x00, 0x1a, 0x41, 0x48, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 2, 3, 4, 5,
            6, 7, 8, 0x06, 0xc2, 0x28, 0x05
        ]
    );
    let wcs = p.b.completions();
    assert_eq!(wcs.len(), 2);
    assert!(
        wcs.iter()
            .all(|w| w.opcode == WcOpcode::RecvImmediate
                && w.immediate == Some(0x0102_0304_0506_0708))
    );
    assert_eq!((wcs[0].solicited, wcs[1].solicited), (false, true));
    assert!(
        p.b.mem.bytes(stag(1)).iter().all(|&b| b == 0),
        "nothing is placed"
    );
}

#[test]
fn scatter_gather_lists_both_ways() {
    let mut p = Pair::new(12);
    p.a.mem.register(stag(1), 0, 1000, 0, RW);
    let src = pattern(1000, 1);
    p.a.mem
        .region_mut(stag(1))
        .unwrap()
        .data
        .copy_from_slice(&src);
    p.b.mem.register(stag(2), 0, 1000, 0, RW);
    p.b.s
        .post_recv(RecvWr {
            wr_id: 1,
            sgl: [
                sge(stag(2), 900, 100),
                sge(stag(2), 0, 400),
                sge(stag(2), 500, 400),
            ]
            .into(),
        })
        .unwrap();
    p.a.s
        .post_send(SendWr {
            wr_id: 1,
            op: SendOp::Send {
                data: Payload::Sgl([sge(stag(1), 0, 300), sge(stag(1), 600, 400)].into()),
                invalidate: None,
                immediate: None,
            },
            flags: SendFlags::SIGNALED,
        })
        .unwrap();
    p.drive();
    let msg: Vec<u8> = src[..300].iter().chain(&src[600..]).copied().collect();
    let m = p.b.mem.bytes(stag(2));
    let placed: Vec<u8> = m[900..]
        .iter()
        .chain(&m[..400])
        .chain(&m[500..700])
        .copied()
        .collect();
    assert_eq!(placed, msg);
    assert_eq!(p.b.completions()[0].byte_len, 700);
}

#[test]
fn unsignaled_requests_complete_silently_but_keep_order() {
    let mut p = Pair::new(13);
    p.b.mem.register(stag(4), 0, 64, 0, RW);
    let mut w = write(1, b"abc", remote(stag(4), 0, 3));
    w.flags = SendFlags::NONE;
    p.a.s.post_send(w).unwrap();
    p.a.s
        .post_send(write(2, b"def", remote(stag(4), 3, 3)))
        .unwrap();
    p.drive();
    let wcs = p.a.completions();
    assert_eq!(wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![2]);
    assert_eq!(&p.b.mem.bytes(stag(4))[..6], b"abcdef");
}

#[test]
fn responder_sends_nothing_before_the_first_fpdu() {
    let mut p = Pair::new(14);
    p.a.mem.register(stag(1), 0, 64, 0, RW);
    p.b.s
        .post_send(write(1, b"early", remote(stag(1), 0, 5)))
        .unwrap();
    p.drive();
    assert!(p.b.sent.is_empty(), "RFC 5044 §7.1.2 rule 4");
    p.a.s
        .post_send(write(2, b"", remote(stag(9), 0, 0)))
        .unwrap();
    p.drive();
    assert!(p.b.events.contains(&Event::Ready));
    assert_eq!(&p.a.mem.bytes(stag(1))[..5], b"early");
}

#[test]
fn peer_to_peer_each_rtr_type() {
    // (initiator offers, responder accepts, the RTR ULPDU expected on the wire)
    let write_rtr: &[u8] = &[0xc1, 0x40, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0];
    let read_rtr: &[u8] = &[
        0x41, 0x41, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    let send_rtr: &[u8] = &[0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0];
    for (offer, accept, want) in [
        (
            RtrFlags::WRITE | RtrFlags::READ,
            RtrFlags::WRITE | RtrFlags::READ,
            write_rtr,
        ),
        (RtrFlags::READ, RtrFlags::READ, read_rtr),
        (RtrFlags::SEND, RtrFlags::SEND, send_rtr),
    ] {
        let ci = mpa_cfg(|c| {
            c.p2p = true;
            c.rtr = offer;
        });
        let cr = mpa_cfg(|c| {
            c.p2p = true;
            c.rtr = accept;
        });
        let mut p = Pair::connect(ci, cr, StreamConfig::default(), 21);
        p.b.mem.register(stag(1), 0, 64, 0, RW);
        p.b.s.post_recv(recv(1, stag(1), 0, 64)).unwrap();
        p.a.s.post_send(send(1, b"hi")).unwrap();
        p.drive();
        let len = u16::from_be_bytes([p.a.sent[0], p.a.sent[1]]) as usize;
        assert_eq!(&p.a.sent[2..2 + len], want, "RTR for {offer:?}");
        let wcs = p.b.completions();
        assert_eq!(wcs.len(), 1, "{offer:?}");
        assert_eq!(wcs[0].byte_len, 2);
        assert_eq!(p.a.completions().len(), 1);
        assert_eq!(p.b.state(), QpState::Rts);
        assert_eq!(p.a.state(), QpState::Rts);
    }
}

#[test]
fn mixed_workload_over_every_mpa_mode() {
    for rev in [1u8, 2] {
        for (crc_i, crc_r) in [(false, false), (true, false), (false, true)] {
            for (mk_i, mk_r) in [(false, false), (true, false), (false, true), (true, true)] {
                let ci = mpa_cfg(|c| {
                    c.rev = rev;
                    c.crc = crc_i;
                    c.markers = mk_i;
                });
                let cr = mpa_cfg(|c| {
                    c.crc = crc_r;
                    c.markers = mk_r;
                });
                let seed = u64::from(rev) * 100
                    + u64::from(crc_i) * 10
                    + u64::from(mk_i) * 3
                    + u64::from(mk_r);
                let mut p = Pair::connect(ci, cr, cfg_mulpdu(600), seed);
                assert_eq!(p.na.crc, crc_i || crc_r);
                assert_eq!((p.na.markers_tx, p.na.markers_rx), (mk_r, mk_i));
                mixed_workload(&mut p);
            }
        }
    }
}

fn mixed_workload(p: &mut Pair) {
    p.b.mem.register(stag(1), 0, 8192, 0, RW);
    p.b.mem.register(stag(2), 0x4000, 8192, 0, RW);
    p.a.mem.register(stag(3), 0, 8192, 0, RW);
    let data = pattern(3000, 77);
    for i in 0..3 {
        p.b.s.post_recv(recv(i, stag(1), i * 2048, 2048)).unwrap();
    }
    p.a.s
        .post_send(write(1, &data, remote(stag(2), 0x4000, 3000)))
        .unwrap();
    p.a.s.post_send(send(2, &data[..1500])).unwrap();
    p.a.s
        .post_send(read(
            3,
            remote(stag(2), 0x4000, 3000),
            sge(stag(3), 100, 3000),
        ))
        .unwrap();
    p.a.s.post_send(send(4, &data[..2048])).unwrap();
    p.b.s
        .post_send(write(5, &data[..999], remote(stag(3), 4000, 999)))
        .unwrap();
    p.drive();
    assert_eq!(p.a.completions().iter().filter(|w| w.is_ok()).count(), 4);
    assert_eq!(p.b.completions().iter().filter(|w| w.is_ok()).count(), 3);
    assert_eq!(&p.a.mem.bytes(stag(3))[100..3100], &data[..]);
    assert_eq!(&p.a.mem.bytes(stag(3))[4000..4999], &data[..999]);
    assert_eq!(&p.b.mem.bytes(stag(1))[2048..2048 + 2048], &data[..2048]);
    assert_eq!(p.a.state(), QpState::Rts);
    assert_eq!(p.b.state(), QpState::Rts);
}

#[test]
fn graceful_close_drains_then_peer_close_flushes_receives() {
    let mut p = Pair::new(15);
    p.b.mem.register(stag(1), 0, 64, 0, RW);
    p.b.s.post_recv(recv(1, stag(1), 0, 64)).unwrap();
    p.b.s.post_recv(recv(2, stag(1), 0, 64)).unwrap();
    p.a.s.post_send(send(1, b"bye")).unwrap();
    p.a.s.close(std::time::Instant::now());
    assert!(p.a.s.post_send(send(2, b"late")).is_err());
    p.drive();
    assert!(p.a.events.contains(&Event::Drained));
    p.b.s.handle_eof(&mut bytes::BytesMut::new());
    p.b.events.extend(std::iter::from_fn(|| p.b.s.poll_event()));
    let wcs = p.b.completions();
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::Success), (2, WcStatus::Flushed)]
    );
    assert_eq!(
        p.b.state(),
        QpState::Error,
        "B did not close: the connection was lost"
    );
    p.a.s.handle_eof(&mut bytes::BytesMut::new());
    assert_eq!(
        p.a.state(),
        QpState::Idle,
        "A closed and drained: a clean end"
    );
}

#[test]
fn close_that_the_peer_never_finishes_times_out() {
    let mut p = Pair::new(16);
    p.a.mem.register(stag(1), 0, 64, 0, RW);
    p.a.s.post_recv(recv(1, stag(1), 0, 64)).unwrap();
    let t0 = std::time::Instant::now();
    p.a.s.close(t0);
    let deadline = p.a.s.poll_timeout().expect("a close deadline");
    assert_eq!(deadline, t0 + StreamConfig::default().close_timeout);
    p.a.s
        .handle_timeout(deadline - std::time::Duration::from_millis(1));
    assert_eq!(
        p.a.state(),
        QpState::Closing,
        "spurious early timeout is a no-op"
    );
    p.a.s.handle_timeout(deadline);
    p.a.events.extend(std::iter::from_fn(|| p.a.s.poll_event()));
    assert_eq!(p.a.state(), QpState::Error);
    let wcs = p.a.completions();
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].status, WcStatus::Flushed);
    assert_eq!(p.a.s.poll_timeout(), None);
}

#[test]
fn large_payloads_are_chained_by_reference() {
    let mut p = Pair::new(17);
    p.b.mem.register(stag(4), 0, 8192, 0, RW);
    let data = Bytes::from(pattern(4000, 5));
    p.a.s
        .post_send(SendWr {
            wr_id: 1,
            op: SendOp::Write {
                data: Payload::Bytes(data.clone()),
                dst: remote(stag(4), 0, 4000),
            },
            flags: SendFlags::SIGNALED,
        })
        .unwrap();
    let mut out = crate::Transmit::new();
    let n = p.a.s.poll_transmit(&mut p.a.mem, &mut out, usize::MAX);
    // Three segments of 1440 octets (MULPDU 1454 - 14): header, payload, trailer each.
    let mut wire = Vec::new();
    out.write_with(|slices| {
        let payload_chunks: Vec<_> = slices.iter().filter(|s| s.len() >= 512).collect();
        assert_eq!(payload_chunks.len(), 3);
        for (i, s) in payload_chunks.iter().enumerate() {
            let at = data.as_ptr().wrapping_add(i * 1440);
            assert_eq!(
                s.as_ptr(),
                at,
                "segment {i} points into the application's Bytes"
            );
        }
        slices.iter().for_each(|s| wire.extend_from_slice(s));
        Ok(wire.len())
    })
    .unwrap();
    assert!(out.is_empty());
    p.a.s.handle_written(n);
    p.b.inbox.extend_from_slice(&wire);
    p.b.s.handle_input(&mut p.b.inbox, &mut p.b.mem);
    assert_eq!(&p.b.mem.bytes(stag(4))[..4000], &data[..]);
}

#[test]
fn local_invalidate_and_fast_register_run_in_send_queue_order() {
    let mut p = Pair::new(18);
    p.a.mem.register(stag(3), 0, 64, 0, RW);
    let old = stag(3);
    let new = old.with_instance(0x77);
    let local = |wr_id, op| SendWr {
        wr_id,
        op,
        flags: SendFlags::SIGNALED,
    };
    p.a.s
        .post_send(local(1, SendOp::LocalInvalidate { stag: old }))
        .unwrap();
    p.a.s
        .post_send(local(
            2,
            SendOp::FastRegister(crate::FastReg {
                stag: new,
                to: 0x9000,
                len: 32,
                access: RW,
            }),
        ))
        .unwrap();
    p.drive();
    let wcs = p.a.completions();
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.opcode, w.status)).collect();
    assert_eq!(
        got,
        vec![
            (1, WcOpcode::LocalInvalidate, WcStatus::Success),
            (2, WcOpcode::FastRegister, WcStatus::Success),
        ]
    );
    // The peer reaches the region under the new STag and offsets, and not the old ones.
    p.b.s
        .post_send(write(3, b"fast", remote(new, 0x9000, 4)))
        .unwrap();
    p.a.s
        .post_send(write(4, b"", remote(stag(9), 0, 0)))
        .unwrap(); // lets B transmit
    p.drive();
    assert_eq!(&p.a.mem.bytes(new)[..4], b"fast");
    p.b.s
        .post_send(write(5, b"old", remote(old, 0, 3)))
        .unwrap();
    p.drive();
    assert_eq!(p.b.term_received().map(|c| c.to_wire()), Some([0x11, 0x00]));
}

#[test]
fn shared_receive_queue_feeds_a_stream_without_its_own_receives() {
    let mut p = Pair::new(19);
    p.b.mem.register(stag(1), 0, 256, 0, RW);
    for i in 0..3 {
        p.b.srq.push_back(recv(50 + i, stag(1), i * 64, 64));
    }
    p.b.s.post_recv(recv(7, stag(1), 192, 64)).unwrap();
    for i in 0..3u8 {
        p.a.s.post_send(send(u64::from(i), &[i; 10])).unwrap();
    }
    p.drive();
    let ids: Vec<u64> = p.b.completions().iter().map(|w| w.wr_id).collect();
    assert_eq!(
        ids,
        vec![7, 50, 51],
        "own receives first, then the shared queue"
    );
    assert_eq!(p.b.srq.len(), 1);
}

/// A stream that reports every send reports the unsignaled ones too, in posting order,
/// each completion carrying its request's flags; by default they stay quiet.
#[test]
fn every_send_is_reported_when_asked_with_its_flags() {
    let mut p = Pair::new(31);
    p.b.mem.register(stag(1), 0, 64, 0, RW);
    for i in 0..4 {
        p.b.s.post_recv(recv(i, stag(1), i * 16, 16)).unwrap();
    }
    let quiet = |wr_id, data: &'static [u8]| SendWr {
        flags: SendFlags::NONE,
        ..send(wr_id, data)
    };
    p.a.s.post_send(quiet(1, b"a")).unwrap();
    p.a.s.post_send(send(2, b"b")).unwrap();
    p.drive();
    let ids: Vec<_> = p.a.completions().iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, [2], "by default an unsignaled success reports nothing");
    p.a.s.set_complete_every_send(true);
    p.a.s.post_send(quiet(3, b"c")).unwrap();
    p.a.s.post_send(send(4, b"d")).unwrap();
    p.drive();
    let got: Vec<_> =
        p.a.completions()
            .iter()
            .map(|w| (w.wr_id, w.flags.contains(SendFlags::SIGNALED)))
            .collect();
    assert_eq!(got, [(3, false), (4, true)]);
}
