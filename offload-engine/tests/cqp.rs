//! Registration through the control queue (seed 003 §3.4): the STag comes back before
//! the registration is done, a work request naming it waits for it (and the ones behind
//! it wait too), other queue pairs do not, a withdrawn registration fails the waiting
//! requests with a local protection error, registrations finish in submission order, and
//! the peer cannot reach a pending region.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::hosts::{ALL, Host, connect, host, host_with, region, write};
use offload_engine::tpt::Base;
use offload_engine::{EngineConfig, Qp, QpEnd};
use rdmap::{Payload, RemoteBuf, STag, SendFlags, SendOp, SendWr, Sge, WcStatus};
use shm::Region;

/// The control queue's injected latency.
const DELAY: Duration = Duration::from_millis(200);

fn delayed(delay: Duration) -> Host {
    let mut cfg = EngineConfig::default();
    cfg.registration_delay = delay;
    host_with(cfg)
}

fn write_sgl(wr_id: u64, src: STag, len: u32, dst: RemoteBuf) -> SendWr {
    SendWr {
        wr_id,
        op: SendOp::Write {
            data: Payload::Sgl(
                [Sge {
                    stag: src,
                    to: 0,
                    len,
                }]
                .into(),
            ),
            dst,
        },
        flags: SendFlags::SIGNALED,
    }
}

/// What the peer holds at `src`, read by `c` over `cqp` (a Read completes after the
/// Writes before it on that connection were placed).
async fn read_back(c: &Host, cqp: &Qp, src: RemoteBuf) -> Vec<u8> {
    let sink = c
        .engine
        .tpt()
        .register(c.pd, vec![0; src.len as usize], Base::ZeroBased, ALL)
        .unwrap();
    cqp.post_send(SendWr {
        wr_id: 99,
        op: SendOp::Read {
            src,
            dst: Sge {
                stag: sink,
                to: 0,
                len: src.len,
            },
        },
        flags: SendFlags::SIGNALED,
    })
    .unwrap();
    assert!(c.cq.next().await.unwrap().wc.is_ok());
    let mut back = vec![0; src.len as usize];
    c.engine.tpt().read(c.pd, sink, 0, &mut back).unwrap();
    back
}

/// Items 41, 42 and 43 of the seed's test list: the STag comes back at once, a Write
/// from it posted straight away completes after the registration and carries the right
/// octets, the Write posted behind it completes after it, and another queue pair's
/// traffic meanwhile goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_from_a_pending_region_waits_for_it_and_others_do_not() {
    let (c, s) = (host(), delayed(DELAY));
    let (cqp, sqp) = connect(&c, &s).await;
    let (cqp2, sqp2) = connect(&c, &s).await;
    for qp in [&cqp, &cqp2] {
        qp.post_send(write(0, &[0], region(&s, vec![0; 1])))
            .unwrap();
        assert!(c.cq.next().await.unwrap().wc.is_ok());
    }
    let dst = region(&c, vec![0; 8192]);

    let data = Arc::new(Region::alloc(4096).unwrap());
    data.write_at(0, &[0x42; 4096]).unwrap();
    let t0 = Instant::now();
    let stag = s
        .engine
        .register_queued(s.pd, data.clone(), Base::ZeroBased, ALL)
        .unwrap();
    assert!(
        t0.elapsed() < DELAY,
        "the STag comes back before the work is done"
    );
    assert!(s.engine.tpt().is_pending(stag));
    sqp.post_send(write_sgl(1, stag, 4096, dst.slice(0, 4096)))
        .unwrap();
    sqp.post_send(write(2, &[7; 16], dst.slice(4096, 16)))
        .unwrap();
    // Another queue pair of the domain carries on meanwhile.
    for i in 0..20 {
        sqp2.post_send(write(100 + i, &[9; 64], dst.slice(6000, 64)))
            .unwrap();
        let wc = s.cq.next().await.unwrap();
        assert_eq!((wc.wc.wr_id, wc.wc.status), (100 + i, WcStatus::Success));
    }
    assert!(t0.elapsed() < DELAY, "the other queue pair did not wait");
    let first = s.cq.next().await.unwrap();
    assert!(t0.elapsed() >= DELAY, "it waited for the registration");
    assert!(!s.engine.tpt().is_pending(stag));
    assert_eq!((first.wc.wr_id, first.wc.status), (1, WcStatus::Success));
    let second = s.cq.next().await.unwrap();
    assert_eq!((second.wc.wr_id, second.wc.status), (2, WcStatus::Success));
    assert_eq!(read_back(&s, &sqp, dst.slice(0, 4096)).await, [0x42; 4096]);
    assert_eq!(read_back(&s, &sqp, dst.slice(4096, 16)).await, [7; 16]);
    assert!(s.engine.registered(stag).await);
    drop(sqp2);
}

/// Item 44: a registration withdrawn (deregistered) before it is done fails, and the
/// request waiting on it completes with a local protection error; the ones behind it are
/// flushed as the queue pair ends, as for any local protection failure.
#[tokio::test]
async fn a_withdrawn_registration_fails_the_requests_waiting_on_it() {
    let (c, s) = (host(), delayed(DELAY));
    let (cqp, sqp) = connect(&c, &s).await;
    cqp.post_send(write(0, &[0], region(&s, vec![0; 1])))
        .unwrap();
    assert!(c.cq.next().await.unwrap().wc.is_ok());
    let dst = region(&c, vec![0; 64]);
    let storage = Arc::new(Region::alloc(64).unwrap());
    let stag = s
        .engine
        .register_queued(s.pd, storage, Base::ZeroBased, ALL)
        .unwrap();
    sqp.post_send(write_sgl(1, stag, 64, dst)).unwrap();
    sqp.post_send(write(2, &[1; 8], dst)).unwrap();
    s.engine.tpt().deregister(stag).unwrap();
    assert!(!s.engine.registered(stag).await, "the registration failed");
    let wc = s.cq.next().await.unwrap();
    assert_eq!((wc.wc.wr_id, wc.wc.status), (1, WcStatus::LocalProtection));
    let wc = s.cq.next().await.unwrap();
    assert_eq!((wc.wc.wr_id, wc.wc.status), (2, WcStatus::Flushed));
    assert!(matches!(sqp.closed().await, QpEnd::Terminated(_)));
}

/// Item 45: registrations finish in the order they were queued; and the peer's Write to a
/// pending region is a Write to an invalid STag: DDP Terminate `11 00`, nothing placed.
#[tokio::test]
async fn registrations_finish_in_order_and_the_peer_cannot_reach_a_pending_one() {
    let (c, s) = (host(), delayed(DELAY / 4));
    let (cqp, sqp) = connect(&c, &s).await;
    let storage: Vec<_> = (0..5)
        .map(|_| Arc::new(Region::alloc(4096).unwrap()))
        .collect();
    let stags: Vec<STag> = storage
        .iter()
        .map(|m| {
            s.engine
                .register_queued(s.pd, m.clone(), Base::ZeroBased, ALL)
                .unwrap()
        })
        .collect();
    // The peer writes into the last one before it is done.
    let early = RemoteBuf {
        stag: stags[4],
        to: 0,
        len: 8,
    };
    cqp.post_send(write(1, &[0xee; 8], early)).unwrap();
    for (i, &stag) in stags.iter().enumerate() {
        assert!(s.engine.registered(stag).await);
        for later in &stags[i + 1..] {
            assert!(s.engine.tpt().is_pending(*later), "finished out of order");
        }
    }
    match sqp.closed().await {
        QpEnd::Terminated(code) => assert_eq!(code.to_wire(), [0x11, 0x00], "{code}"),
        other => panic!("{other:?}"),
    }
    let mut back = [0; 8];
    storage[4].read_at(0, &mut back).unwrap();
    assert_eq!(back, [0; 8], "nothing placed");
}
