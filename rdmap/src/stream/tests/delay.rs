//! The Delay request (seed 004): later requests of the same send queue wait for its time,
//! told to the stream with `handle_timeout` (paused, explicit time).

use std::time::{Duration, Instant};

use super::pair::Pair;
use super::*;
use crate::{QpState, WcOpcode, WcStatus};

fn delay(wr_id: u64, duration: Duration) -> SendWr {
    SendWr {
        wr_id,
        op: SendOp::Delay { duration },
        flags: SendFlags::SIGNALED,
    }
}

#[test]
fn requests_behind_a_delay_wait_for_its_time() {
    let mut p = Pair::new(1);
    p.b.mem.register(stag(1), 0, 64, 0, RW);
    for i in 0..3 {
        p.b.s.post_recv(recv(i, stag(1), i * 8, 8)).unwrap();
    }
    p.a.s.post_send(send(1, b"before")).unwrap();
    p.a.s.post_send(delay(2, Duration::from_millis(5))).unwrap();
    p.a.s.post_send(send(3, b"after")).unwrap();
    p.drive();
    // Only the first Send went out; the Delay has not started (no time told yet).
    assert_eq!(p.b.completions().len(), 1);
    assert_eq!(p.a.s.poll_timeout(), None);
    let t0 = Instant::now();
    p.a.s.handle_timeout(t0);
    assert_eq!(p.a.s.poll_timeout(), Some(t0 + Duration::from_millis(5)));
    p.a.s.handle_timeout(t0 + Duration::from_millis(4));
    p.drive();
    assert!(p.b.completions().is_empty(), "still held");
    let sent: Vec<_> = p.a.completions().iter().map(|w| w.wr_id).collect();
    assert_eq!(sent, [1]);
    // Its time has come: it completes, and the Send behind it goes.
    p.a.s.handle_timeout(t0 + Duration::from_millis(5));
    p.drive();
    let wcs = p.a.completions();
    assert_eq!(
        wcs.iter()
            .map(|w| (w.wr_id, w.opcode, w.status))
            .collect::<Vec<_>>(),
        [
            (2, WcOpcode::Delay, WcStatus::Success),
            (3, WcOpcode::Send, WcStatus::Success)
        ]
    );
    assert_eq!(p.b.completions()[0].byte_len, 5);
    assert_eq!(p.a.s.poll_timeout(), None);
    // B's side was never held: it can send while A waits.
    assert_eq!(p.b.state(), QpState::Rts);
}

#[test]
fn a_delay_too_long_for_the_clock_never_ends_and_never_panics() {
    // Through iwarpd the duration comes from a client's ring: any 64-bit count of
    // nanoseconds, and Duration::MAX from an embedded caller.
    for duration in [Duration::MAX, Duration::from_nanos(u64::MAX)] {
        let mut p = Pair::new(3);
        p.a.s.post_send(delay(1, duration)).unwrap();
        p.drive();
        let t0 = Instant::now();
        p.a.s.handle_timeout(t0);
        p.a.s.handle_timeout(t0 + Duration::from_secs(3600));
        assert!(p.a.completions().is_empty());
        assert_eq!(p.a.state(), QpState::Rts);
    }
}

#[test]
fn a_pending_delay_is_flushed_with_the_queue() {
    let mut p = Pair::new(2);
    p.a.s
        .post_send(delay(1, Duration::from_secs(3600)))
        .unwrap();
    p.a.s.post_send(send(2, b"x")).unwrap();
    p.drive();
    p.a.s.handle_timeout(Instant::now());
    assert!(p.a.s.poll_timeout().is_some());
    p.a.s.terminate(crate::TermCode::OP_UNSPECIFIED);
    p.drive();
    let wcs = p.a.completions();
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Flushed), (2, WcStatus::Flushed)]
    );
    assert_eq!(p.a.s.poll_timeout(), None);
}
