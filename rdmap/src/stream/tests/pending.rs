//! A request naming an STag whose registration is queued (seed 003 §3.4) waits at the
//! head of the send queue, with every request behind it, until the registration is done.

use super::pair::Pair;
use super::*;
use crate::{Payload, WcStatus};

/// A Send whose payload is gathered from `len` octets of region `stag`.
fn send_from(wr_id: u64, stag: STag, len: u32) -> SendWr {
    SendWr {
        wr_id,
        op: SendOp::Send {
            data: Payload::Sgl(vec![Sge { stag, to: 0, len }].into()),
            invalidate: None,
            immediate: None,
        },
        flags: SendFlags::SIGNALED,
    }
}

#[test]
fn a_request_on_a_pending_registration_holds_the_queue_until_it_is_done() {
    let mut p = Pair::new(7);
    p.a.mem.register(stag(2), 0, 16, 0x5a, RW);
    p.a.mem.pending.push(stag(2));
    p.b.mem.register(stag(1), 0, 64, 0, RW);
    for i in 0..2 {
        p.b.s.post_recv(recv(i, stag(1), i * 32, 32)).unwrap();
    }
    p.a.s.post_send(send_from(1, stag(2), 16)).unwrap();
    p.a.s.post_send(send(2, b"behind")).unwrap();
    p.drive();
    assert!(
        p.b.completions().is_empty(),
        "nothing overtakes the held request"
    );
    assert!(p.a.completions().is_empty());
    // The registration is done: the queue goes on, in order.
    p.a.mem.pending.clear();
    p.drive();
    let sent: Vec<_> =
        p.a.completions()
            .iter()
            .map(|w| (w.wr_id, w.status))
            .collect();
    assert_eq!(sent, [(1, WcStatus::Success), (2, WcStatus::Success)]);
    let got: Vec<_> =
        p.b.completions()
            .iter()
            .map(|w| (w.wr_id, w.byte_len))
            .collect();
    assert_eq!(got, [(0, 16), (1, 6)], "in posting order");
    assert_eq!(&p.b.mem.bytes(stag(1))[..16], &[0x5a; 16]);
}

/// A queue held on a pending registration is idle, not stalled: nothing else is under way.
#[test]
fn a_queue_held_on_a_registration_waits_on_it_and_nothing_else() {
    let mut p = Pair::new(8);
    p.a.mem.register(stag(2), 0, 16, 0x5a, RW);
    p.a.mem.pending.push(stag(2));
    p.b.mem.register(stag(1), 0, 64, 0, RW);
    p.b.s.post_recv(recv(0, stag(1), 0, 32)).unwrap();
    assert!(
        !p.a.s.waits_on_registration(&p.a.mem),
        "an empty queue waits on nothing"
    );
    p.a.s.post_send(send_from(1, stag(2), 16)).unwrap();
    p.drive();
    assert!(p.a.s.has_outstanding());
    assert!(p.a.s.waits_on_registration(&p.a.mem));
    p.a.mem.pending.clear();
    assert!(!p.a.s.waits_on_registration(&p.a.mem));
}
