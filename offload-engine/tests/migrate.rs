//! Live migration at the engine's level (seed 003 §3.1): the cases a loop over loopback
//! does not reach by chance. A driver parked with octets it could not write yet, requests
//! posted while a domain is parked, a type 2 window bound to the moving queue pair, the
//! push path after a move, and every refusal.

mod common;

use std::time::Duration;

use common::hosts::{ALL, connect, host, region, write};
use offload_engine::tpt::{Base, MwType, PdId};
use offload_engine::{Engine, EngineConfig, MigrateError};
use rdmap::{Access, Bind, QpState, RemoteBuf, SendFlags, SendOp, SendWr, Sge, WcOpcode, WcStatus};

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(7) ^ seed ^ (i >> 10) as u8)
        .collect()
}

fn read(wr_id: u64, src: RemoteBuf, sink: PdSink) -> SendWr {
    SendWr {
        wr_id,
        op: SendOp::Read {
            src,
            dst: Sge {
                stag: sink.0,
                to: 0,
                len: src.len,
            },
        },
        flags: SendFlags::SIGNALED,
    }
}

#[derive(Copy, Clone)]
struct PdSink(rdmap::STag);

/// The server's driver parks while its socket is full (the client, parked itself, reads
/// nothing): the Read Response octets it could not write move with it and go out first
/// from the new engine. Had they been lost or reordered, the client would see a broken
/// stream, not the pattern.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn octets_not_yet_written_move_with_the_queue_pair() {
    let (c, s, dest) = (host(), host(), Engine::new(EngineConfig::default()));
    let (cqp, sqp) = connect(&c, &s).await;
    const LEN: usize = 32 << 20;
    let data = pattern(LEN, 3);
    let src = region(&s, data.clone());
    let sink = PdSink(
        c.engine
            .tpt()
            .register(c.pd, vec![0; LEN], Base::ZeroBased, ALL)
            .unwrap(),
    );
    cqp.post_send(read(1, src, sink)).unwrap();
    // The Read Response is flowing; then the client stops reading.
    while sqp.stats().fpdus_sent < 10 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let client = c.engine.park_pd(c.pd).await.unwrap();
    // The server fills the socket and keeps octets it cannot write.
    let mut waited = 0;
    while !sqp.tx_backlog() && waited < 2000 {
        tokio::time::sleep(Duration::from_millis(1)).await;
        waited += 1;
    }
    assert!(sqp.tx_backlog(), "the server never backed up");
    let moved = s.engine.migrate_pd(s.pd, &dest).await.unwrap();
    assert_eq!((moved.queue_pairs, moved.memory_entries), (1, 1));
    drop(client);
    let wc = c.cq.next().await.unwrap();
    assert_eq!(wc.wc.status, WcStatus::Success, "{wc:?}");
    let mut back = vec![0; LEN];
    c.engine.tpt().read(c.pd, sink.0, 0, &mut back).unwrap();
    assert!(back == data, "the Read Response arrived intact");
    assert_eq!((cqp.state(), sqp.state()), (QpState::Rts, QpState::Rts));
}

/// Requests posted while the domain is parked wait and run after the move, in order; a
/// type 2 window bound to the queue pair, and its STag, work from the new engine; the
/// push path runs there with the new engine's counters.
#[tokio::test]
async fn posted_while_parked_runs_after_and_windows_follow() {
    let (c, s, dest) = (host(), host(), Engine::new(EngineConfig::default()));
    let (cqp, sqp) = connect(&c, &s).await;
    // A type 2 window over a server region, bound by a work request on the server's
    // queue pair, handed to the client.
    let tpt = s.engine.tpt();
    let mr = tpt
        .register(s.pd, vec![0; 8192], Base::ZeroBased, ALL)
        .unwrap();
    let mw = tpt.alloc_mw(s.pd, MwType::Two).unwrap();
    let win = mw.with_instance(9);
    sqp.post_send(SendWr {
        wr_id: 1,
        op: SendOp::Bind(Bind {
            mw: win,
            mr,
            to: 4096,
            len: 4096,
            access: Access::REMOTE_WRITE | Access::REMOTE_READ,
            one_touch: false,
        }),
        flags: SendFlags::SIGNALED,
    })
    .unwrap();
    assert!(s.cq.next().await.unwrap().wc.is_ok());
    // The client speaks first (the Responder sends only after the first FPDU came).
    cqp.post_send(write(
        1,
        &[1; 8],
        RemoteBuf {
            stag: mr,
            to: 0,
            len: 8,
        },
    ))
    .unwrap();
    assert!(c.cq.next().await.unwrap().wc.is_ok());
    let dst = RemoteBuf {
        stag: win,
        to: 4096,
        len: 4096,
    };

    // Parked: posts queue, nothing moves on the wire.
    let parked = s.engine.park_pd(s.pd).await.unwrap();
    let sent_before = sqp.stats().fpdus_sent;
    let peer = region(&c, vec![0; 4096]);
    for i in 0..8u8 {
        sqp.post_send(write(
            10 + u64::from(i),
            &[i; 512],
            peer.slice(u32::from(i) * 512, 512),
        ))
        .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        sqp.stats().fpdus_sent,
        sent_before,
        "a parked queue pair sends nothing"
    );
    assert!(s.cq.is_empty());
    let moved = parked.move_to(&dest).unwrap();
    assert_eq!((moved.queue_pairs, moved.memory_entries), (1, 2));
    for i in 0..8u64 {
        let wc = s.cq.next().await.unwrap();
        assert_eq!((wc.wc.wr_id, wc.wc.status), (10 + i, WcStatus::Success));
    }
    assert!(s.engine.tpt().is_empty() && dest.tpt().len() == 2);
    assert_eq!((s.engine.qps().len(), dest.qps().len()), (0, 1));

    // The client writes through the window the old engine bound, and reads it back
    // (a Read completes once its response is placed: the Write was placed before).
    cqp.post_send(write(1, &[0xab; 100], dst)).unwrap();
    assert!(c.cq.next().await.unwrap().wc.is_ok());
    let sink = PdSink(
        c.engine
            .tpt()
            .register(c.pd, vec![0; 100], Base::ZeroBased, ALL)
            .unwrap(),
    );
    cqp.post_send(read(2, dst.slice(0, 100), sink)).unwrap();
    assert!(c.cq.next().await.unwrap().wc.is_ok());
    let mut at = vec![0; 100];
    dest.tpt().read(s.pd, mr, 4096, &mut at).unwrap();
    assert_eq!(at, [0xab; 100]);

    // Lone small writes take the push path on the new engine.
    let before = dest.stats().push.executed;
    for _ in 0..20 {
        sqp.post_send(write(2, &[1; 64], peer.slice(0, 64)))
            .unwrap();
        let wc = s.cq.next().await.unwrap();
        assert_eq!(
            (wc.wc.opcode, wc.wc.status),
            (WcOpcode::Write, WcStatus::Success)
        );
    }
    assert!(
        dest.stats().push.executed > before,
        "push path runs on the new engine"
    );
}

/// What is refused, and that a refused or abandoned migration leaves everything running.
#[tokio::test]
async fn refusals_leave_everything_running() {
    let (c, s, dest) = (host(), host(), Engine::new(EngineConfig::default()));
    let (cqp, sqp) = connect(&c, &s).await;
    let buf = region(&s, vec![0; 64]);
    assert_eq!(
        s.engine.migrate_pd(s.pd, &s.engine).await.unwrap_err(),
        MigrateError::SameEngine
    );
    let other = PdId::new(u32::MAX);
    assert_eq!(
        s.engine.migrate_pd(other, &dest).await.unwrap_err(),
        MigrateError::NoSuchPd(other)
    );
    // Parked and abandoned: the queue pair goes on.
    drop(s.engine.park_pd(s.pd).await.unwrap());
    // A second park of a parked domain is refused as busy.
    let parked = s.engine.park_pd(s.pd).await.unwrap();
    assert!(matches!(
        s.engine.park_pd(s.pd).await.unwrap_err(),
        MigrateError::Busy(_)
    ));
    drop(parked);
    cqp.post_send(write(1, &[5; 64], buf)).unwrap();
    assert!(c.cq.next().await.unwrap().wc.is_ok());
    assert_eq!(s.engine.tpt().len(), 1, "nothing moved");
    assert_eq!(sqp.state(), QpState::Rts);
    // A closing queue pair does not move; once it has ended, it does.
    sqp.disconnect();
    sqp.closed().await;
    let moved = s.engine.migrate_pd(s.pd, &dest).await.unwrap();
    assert_eq!((moved.queue_pairs, moved.memory_entries), (1, 1));
}
