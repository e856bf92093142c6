//! Property test: any workload, over any MPA mode, segment size and chunking, delivers every
//! octet where it belongs and completes every request in order.

use proptest::prelude::*;

use super::pair::Pair;
use super::*;
use crate::{QpState, StreamConfig, WcStatus};

const SLOT: u64 = 8192;

#[derive(Clone, Debug)]
enum Op {
    Send(usize),
    Write(usize),
    Read(usize),
    Immediate,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0usize..6000).prop_map(Op::Send),
        (0usize..8000).prop_map(Op::Write),
        (0usize..8000).prop_map(Op::Read),
        Just(Op::Immediate),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    #[test]
    fn any_workload_round_trips(
        seed in any::<u64>(),
        rev in 1u8..=2,
        crc in (any::<bool>(), any::<bool>()),
        markers in (any::<bool>(), any::<bool>()),
        mulpdu in 128u16..4000,
        max_chunk in 1usize..3000,
        ops in proptest::collection::vec(op(), 1..24),
        snapshot_every in prop_oneof![Just(0usize), 1usize..40],
    ) {
        let ci = mpa_cfg(|c| { c.rev = rev; c.crc = crc.0; c.markers = markers.0; });
        let cr = mpa_cfg(|c| { c.crc = crc.1; c.markers = markers.1; });
        let sc = StreamConfig { mulpdu, ..StreamConfig::default() };
        let mut p = Pair::connect(ci, cr, sc, seed);
        p.max_chunk = max_chunk;
        p.snapshot_every = snapshot_every;
        let n = ops.len() as u64;
        p.b.mem.register(stag(1), 0, (SLOT * n) as usize, 0, RW);
        p.a.mem.register(stag(2), 0, (SLOT * n) as usize, 0, RW);
        // B's source data for Reads.
        let src = pattern((SLOT * n) as usize, 99);
        p.b.mem.region_mut(stag(1)).unwrap().data.copy_from_slice(&src);
        let mut expect_b = src.clone();
        let mut expect_a = vec![0u8; (SLOT * n) as usize];
        let mut recvs = 0;
        for (i, o) in ops.iter().enumerate() {
            let at = i as u64 * SLOT;
            let id = i as u64;
            match *o {
                Op::Send(len) => {
                    let data = pattern(len, i as u8);
                    p.b.s.post_recv(recv(id, stag(1), at, SLOT as u32)).unwrap();
                    recvs += 1;
                    expect_b[at as usize..at as usize + len].copy_from_slice(&data);
                    p.a.s.post_send(send(id, &data)).unwrap();
                }
                Op::Write(len) => {
                    let data = pattern(len, i as u8 ^ 0x80);
                    expect_b[at as usize..at as usize + len].copy_from_slice(&data);
                    p.a.s.post_send(write(id, &data, remote(stag(1), at, len as u32))).unwrap();
                }
                Op::Read(len) => {
                    let (a, b) = (at as usize, at as usize + len);
                    expect_a[a..b].copy_from_slice(&src[a..b]);
                    p.a.s
                        .post_send(read(id, remote(stag(1), at, len as u32), sge(stag(2), at, len as u32)))
                        .unwrap();
                }
                Op::Immediate => {
                    p.b.s.post_recv(recv(id, stag(1), at, 0)).unwrap();
                    recvs += 1;
                    p.a.s
                        .post_send(SendWr { wr_id: id, op: SendOp::Immediate { data: id }, flags: SendFlags::SIGNALED })
                        .unwrap();
                }
            }
        }
        // Reads must see the data as it was before this run's Writes and Sends land in B's
        // slots: each op has its own slot, so they never overlap.
        p.drive();
        let a_ids: Vec<u64> = p.a.completions().iter().map(|w| { assert_eq!(w.status, WcStatus::Success); w.wr_id }).collect();
        prop_assert_eq!(a_ids, (0..n).collect::<Vec<_>>());
        let b_wcs = p.b.completions();
        prop_assert_eq!(b_wcs.len(), recvs);
        prop_assert!(b_wcs.iter().all(|w| w.is_ok()));
        prop_assert!(p.b.mem.bytes(stag(1)) == &expect_b[..], "B's memory");
        prop_assert!(p.a.mem.bytes(stag(2)) == &expect_a[..], "A's memory");
        prop_assert_eq!(p.a.state(), QpState::Rts);
        prop_assert_eq!(p.b.state(), QpState::Rts);
    }
}
