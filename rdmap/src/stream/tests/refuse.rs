//! Seed 004's per-queue-pair switch that refuses incoming RDMA.

use super::pair::Pair;
use super::*;
use crate::{QpState, TermCode, WcStatus};

/// B refuses incoming RDMA and holds 64 octets of 0x33 at STag 4 with every right.
fn refusing(seed: u64) -> Pair {
    let mut p = Pair::new(seed);
    p.b.mem.register(stag(4), 0, 64, 0x33, RW);
    p.a.mem.register(stag(7), 0, 64, 0, RW);
    p.b.s.set_incoming_rdma(false);
    p
}

fn assert_refused(p: &mut Pair, rdma_header: bool) {
    let term = p.b.term_sent().expect("B terminates");
    assert_eq!(term.code, TermCode::ACCESS_RIGHTS);
    assert_eq!(term.rdma_header.is_some(), rdma_header);
    assert_eq!(p.a.term_received(), Some(TermCode::ACCESS_RIGHTS));
    assert!(
        p.b.mem.bytes(stag(4)).iter().all(|&b| b == 0x33),
        "nothing touched"
    );
    assert_eq!(p.b.state(), QpState::Error);
}

#[test]
fn writes_reads_and_atomics_are_refused_with_nothing_touched() {
    let mut p = refusing(1);
    p.a.s
        .post_send(write(1, b"nope", remote(stag(4), 0, 4)))
        .unwrap();
    p.drive();
    assert_refused(&mut p, false);

    let mut p = refusing(2);
    p.a.s
        .post_send(read(1, remote(stag(4), 0, 8), sge(stag(7), 0, 8)))
        .unwrap();
    p.drive();
    assert_refused(&mut p, true);
    assert_eq!(p.a.completions()[0].status, WcStatus::RemoteAccess);
    assert!(
        p.a.mem.bytes(stag(7)).iter().all(|&b| b == 0),
        "no data came back"
    );

    let mut p = refusing(3);
    p.a.s
        .post_send(SendWr {
            wr_id: 1,
            op: SendOp::FetchAdd {
                dst: remote(stag(4), 0, 8),
                add: 1,
                mask: 0,
                result: sge(stag(7), 0, 8),
            },
            flags: SendFlags::SIGNALED,
        })
        .unwrap();
    p.drive();
    assert_refused(&mut p, false);
}

#[test]
fn sends_zero_length_rdma_and_the_refusers_own_rdma_still_work() {
    let mut p = refusing(4);
    p.b.s.post_recv(recv(1, stag(4), 32, 32)).unwrap();
    p.a.s.post_send(send(1, b"hello")).unwrap();
    p.a.s
        .post_send(write(2, b"", remote(stag(4), 0, 0)))
        .unwrap();
    p.a.s
        .post_send(read(3, remote(stag(4), 0, 0), sge(stag(7), 0, 0)))
        .unwrap();
    p.drive();
    assert!(p.a.completions().iter().all(|w| w.is_ok()));
    assert_eq!(p.b.completions()[0].byte_len, 5);
    // B's own Write and Read towards A are B's, not incoming: they work.
    p.a.mem.region_mut(stag(7)).unwrap().data[..4].copy_from_slice(b"from");
    p.b.s
        .post_send(write(4, b"into a", remote(stag(7), 8, 6)))
        .unwrap();
    p.b.s
        .post_send(read(5, remote(stag(7), 0, 4), sge(stag(4), 0, 4)))
        .unwrap();
    p.drive();
    assert!(p.b.completions().iter().all(|w| w.is_ok()));
    assert_eq!(&p.a.mem.bytes(stag(7))[8..14], b"into a");
    assert_eq!(&p.b.mem.bytes(stag(4))[..4], b"from");
    // Served again: A's Write lands.
    p.b.s.set_incoming_rdma(true);
    p.a.s
        .post_send(write(6, b"ok", remote(stag(4), 60, 2)))
        .unwrap();
    p.drive();
    assert_eq!(&p.b.mem.bytes(stag(4))[60..62], b"ok");
    assert_eq!(p.b.state(), QpState::Rts);
}
