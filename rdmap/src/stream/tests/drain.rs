//! Seed 001's option 1: a local failure drains the send queue and nothing else.

use super::pair::Pair;
use super::*;
use crate::{QpState, WcOpcode, WcStatus};

fn bad_invalidate(wr_id: u64) -> SendWr {
    SendWr {
        wr_id,
        op: SendOp::LocalInvalidate { stag: stag(99) },
        flags: SendFlags::SIGNALED,
    }
}

#[test]
fn a_local_failure_drains_the_send_queue_until_resumed() {
    let mut p = Pair::new(1);
    p.b.mem.register(stag(1), 0, 64, 0, RW);
    for i in 0..3 {
        p.b.s.post_recv(recv(i, stag(1), i * 16, 16)).unwrap();
    }
    p.a.mem.register(stag(7), 0, 64, 0x77, RW);
    p.a.s.set_drain_on_local_failure(true);
    p.a.s.post_send(send(1, b"first")).unwrap();
    p.a.s.post_send(bad_invalidate(2)).unwrap();
    p.a.s.post_send(send(3, b"queued behind")).unwrap();
    p.drive();
    assert!(p.a.s.send_queue_drained());
    p.a.s.post_send(send(4, b"posted later")).unwrap();
    p.drive();
    let wcs = p.a.completions();
    assert_eq!(
        wcs.iter()
            .map(|w| (w.wr_id, w.opcode, w.status))
            .collect::<Vec<_>>(),
        [
            (1, WcOpcode::Send, WcStatus::Success),
            (2, WcOpcode::LocalInvalidate, WcStatus::LocalProtection),
            (3, WcOpcode::Send, WcStatus::Flushed),
            (4, WcOpcode::Send, WcStatus::Flushed),
        ]
    );
    // The peer saw only the first Send, no Terminate; both sides still run, and the
    // peer's Read of A's memory is still answered.
    assert_eq!(p.b.completions().len(), 1);
    assert_eq!((p.a.term_received(), p.b.term_received()), (None, None));
    assert_eq!((p.a.state(), p.b.state()), (QpState::Rts, QpState::Rts));
    p.b.s
        .post_send(read(10, remote(stag(7), 0, 8), sge(stag(1), 48, 8)))
        .unwrap();
    p.drive();
    assert!(p.b.completions()[0].is_ok());
    assert_eq!(&p.b.mem.bytes(stag(1))[48..56], &[0x77; 8]);
    // Resumed: requests run again.
    p.a.s.resume_send_queue();
    p.a.s.post_send(send(5, b"again")).unwrap();
    p.drive();
    assert_eq!(p.a.completions()[0].status, WcStatus::Success);
    assert_eq!(p.b.completions()[0].byte_len, 5);
}

#[test]
fn by_default_a_local_failure_ends_the_stream() {
    let mut p = Pair::new(2);
    p.a.s.post_send(bad_invalidate(1)).unwrap();
    p.a.s.post_send(send(2, b"x")).unwrap();
    p.drive();
    assert!(p.a.term_sent().is_some());
    assert_eq!(p.a.state(), QpState::Error);
    let wcs = p.a.completions();
    assert_eq!(
        wcs.iter().map(|w| w.status).collect::<Vec<_>>(),
        [WcStatus::LocalProtection, WcStatus::Flushed]
    );
}

#[test]
fn a_responder_drains_too_before_the_first_fpdu() {
    // B (the MPA Responder) may not send yet, but runs local requests at its head: a
    // failing one drains its send queue there as well, with no Terminate.
    let mut p = Pair::new(3);
    p.b.s.set_drain_on_local_failure(true);
    p.b.s.post_send(bad_invalidate(1)).unwrap();
    p.b.s.post_send(send(2, b"held")).unwrap();
    p.drive();
    assert_eq!(
        p.b.completions()
            .iter()
            .map(|w| w.status)
            .collect::<Vec<_>>(),
        [WcStatus::LocalProtection, WcStatus::Flushed]
    );
    assert_eq!((p.b.state(), p.b.term_sent()), (QpState::Rts, None));
    assert!(p.b.s.send_queue_drained());
}

/// A request posted to a drained send queue completes as flushed after the Read that was
/// under way before it: send completions keep posting order (iwarpd matches them to the
/// client's requests by that order).
#[test]
fn a_request_posted_while_drained_completes_after_the_read_before_it() {
    let mut p = Pair::new(4);
    p.a.mem.register(stag(1), 0, 64, 0, RW);
    p.b.mem.register(stag(7), 0, 64, 0x77, RW);
    p.a.s.set_drain_on_local_failure(true);
    p.a.s
        .post_send(read(1, remote(stag(7), 0, 8), sge(stag(1), 0, 8)))
        .unwrap();
    p.a.s.post_send(bad_invalidate(2)).unwrap();
    // A sends the Read and fails the invalidate (its queue is drained), and the Read's
    // response has not come back yet.
    let mut out = crate::Transmit::new();
    assert!(p.a.s.poll_transmit(&mut p.a.mem, &mut out, 64 << 10) > 0);
    assert!(p.a.s.send_queue_drained());
    p.a.s.post_send(send(3, b"late")).unwrap();
    assert!(
        p.a.completions().is_empty(),
        "nothing completes ahead of the Read under way"
    );
    let n = out.len();
    let mut wire = bytes::BytesMut::from(&out.take(n)[..]);
    p.a.s.handle_written(n);
    p.b.s.handle_input(&mut wire, &mut p.b.mem);
    p.drive();
    let wcs = p.a.completions();
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [
            (1, WcStatus::Success),
            (2, WcStatus::LocalProtection),
            (3, WcStatus::Flushed),
        ]
    );
}
