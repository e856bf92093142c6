//! Live migration (seed 003 §3.1): a protection domain with its memory and a connected
//! queue pair moves between two devices of one process, ten times, while the peer runs a
//! continuous, verified Write/Read/Send loop against it and the migrating side answers
//! every message. Zero errors, zero reconnects, every byte verified.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use common::{ALL, Host, connect, pattern};
use verbs::{
    Access, Device, DeviceConfig, MigrateError, QpState, RecvWr, RemoteBuf, WcOpcode, WcStatus,
};

/// Sizes the peer cycles through: one segment (the push path), several segments, and
/// large messages that are under way when a driver parks (read straight into memory and
/// sent in place).
const SIZES: [usize; 4] = [64, 5000, 300 << 10, 1];
/// The server's receive slots, kept posted.
const SLOTS: usize = 4;
const SLOT: usize = 64;

/// The message number `n` as a Send payload: its number and a pattern derived from it.
fn message(n: u64) -> Vec<u8> {
    let mut m = n.to_be_bytes().to_vec();
    m.extend(pattern(SLOT - 8, n as u8));
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_domain_migrates_ten_times_under_a_verified_loop() {
    let peer = Host::new(DeviceConfig::default());
    let (a, b) = (
        Device::open(DeviceConfig::default()).expect("open the device"),
        Device::open(DeviceConfig::default()).expect("open the device"),
    );
    let server = Host {
        pd: a.alloc_pd().unwrap(),
        cq: a.create_cq(256),
        device: a.clone(),
    };
    // What the peer writes into and reads back from, advertised before any migration.
    let target = server.pd.alloc_mr(2 << 20, ALL).unwrap();
    let inbox = server
        .pd
        .alloc_mr(SLOTS * SLOT, Access::LOCAL_WRITE)
        .unwrap();
    let (c, s) = connect(&peer, &server, b"", &target.remote().encode()).await;
    let advert = RemoteBuf::decode(&c.peer_data).unwrap();
    let post = |slot: usize| {
        s.qp.post_recv(RecvWr {
            wr_id: slot as u64,
            sgl: inbox.local(slot * SLOT..(slot + 1) * SLOT).into(),
        })
        .unwrap();
    };
    (0..SLOTS).for_each(post);
    let peer_inbox = c.pd().alloc_mr(SLOT, Access::LOCAL_WRITE).unwrap();
    let readback = c.pd().alloc_mr(2 << 20, Access::LOCAL_WRITE).unwrap();
    let entries = a.stats().memory_entries;
    assert_eq!((a.stats().queue_pairs, b.stats().queue_pairs), (1, 0));

    let done = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicU64::new(0));
    // The peer's final count, for the server to stop at.
    let total = Arc::new(AtomicU64::new(u64::MAX));
    // The peer: Write, Read back and compare, Send the number, wait for the answer.
    let peer_loop = {
        let (done, rounds, qp) = (done.clone(), rounds.clone(), c.qp.clone());
        tokio::spawn(async move {
            let (mut n, mut after) = (0u64, 0);
            // Until the moves are over, then twenty rounds more.
            while after < 20 {
                after += u32::from(done.load(Ordering::Relaxed));
                let len = SIZES[n as usize % SIZES.len()];
                let at = (n as usize * 4096) % (1 << 20);
                let data = pattern(len, n as u8);
                let dst = advert.slice(at as u32, len as u32);
                let wc = qp.write(Bytes::from(data.clone()), dst).await.unwrap();
                assert_eq!(wc.status, WcStatus::Success);
                qp.read(dst, readback.local(..len)).await.unwrap();
                assert!(readback.read(..len).unwrap() == data, "Read {n} differs");
                let (answer, sent) =
                    tokio::join!(qp.recv(&peer_inbox), qp.send(Bytes::from(message(n))));
                sent.unwrap();
                let answer = answer.unwrap();
                assert_eq!(answer.opcode, WcOpcode::Recv);
                assert_eq!(peer_inbox.read(..SLOT).unwrap(), message(n + 1_000_000));
                n += 1;
                rounds.store(n, Ordering::Relaxed);
            }
            n
        })
    };
    // The migrating side: every message checked in order, answered, its slot reposted
    // before the answer goes (so the peer's next Send always finds a buffer).
    let server_loop = {
        let (qp, cq) = (s.qp.clone(), server.cq.clone());
        let (inbox, total) = (inbox.clone(), total.clone());
        tokio::spawn(async move {
            let mut n = 0u64;
            while n < total.load(Ordering::Relaxed) {
                let Ok(wc) = tokio::time::timeout(Duration::from_millis(50), cq.next()).await
                else {
                    continue;
                };
                let wc = wc.unwrap().wc;
                assert_eq!((wc.status, wc.opcode), (WcStatus::Success, WcOpcode::Recv));
                let slot = wc.wr_id as usize;
                let got = inbox.read(slot * SLOT..(slot + 1) * SLOT).unwrap();
                assert!(
                    got == message(n),
                    "message {n} lost, duplicated or reordered"
                );
                qp.post_recv(RecvWr {
                    wr_id: slot as u64,
                    sgl: inbox.local(slot * SLOT..(slot + 1) * SLOT).into(),
                })
                .unwrap();
                qp.send(Bytes::from(message(n + 1_000_000))).await.unwrap();
                n += 1;
            }
            n
        })
    };

    // Ten moves, each while the loop is running.
    for i in 0..10 {
        let at = rounds.load(Ordering::Relaxed);
        while rounds.load(Ordering::Relaxed) < at + 3 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let (from, to) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let moved = server.pd.migrate(to).await.unwrap();
        assert_eq!(
            (moved.queue_pairs, moved.memory_entries),
            (1, entries as usize)
        );
        assert!(server.pd.device().same_device(to));
        assert_eq!((from.stats().queue_pairs, to.stats().queue_pairs), (0, 1));
        assert_eq!(
            (from.stats().memory_entries, to.stats().memory_entries),
            (0, entries),
            "the memory moved with the domain"
        );
    }
    done.store(true, Ordering::Relaxed);
    let sent = peer_loop.await.unwrap();
    total.store(sent, Ordering::Relaxed);
    let answered = server_loop.await.unwrap();
    assert_eq!(sent, answered, "every message answered once");
    assert!(sent >= 30, "three rounds between moves: {sent} rounds");

    // Nobody noticed: one connection each, no Terminate, still connected, same queue pair.
    assert_eq!(s.qp.state(), QpState::Rts);
    assert_eq!(c.qp.state(), QpState::Rts);
    let (cs, ss) = (c.qp.stats(), s.qp.stats());
    assert_eq!(
        (cs.traffic.terminates_sent, cs.traffic.terminates_received),
        (0, 0)
    );
    assert_eq!(
        (ss.traffic.terminates_sent, ss.traffic.terminates_received),
        (0, 0)
    );
    assert_eq!(peer.device.stats().connections, 1);
    assert_eq!(a.stats().connections + b.stats().connections, 1);

    // Back where it started after an even number of moves; it still closes cleanly.
    assert!(server.pd.device().same_device(&a));
    assert_eq!(
        server.pd.migrate(&a).await.unwrap_err(),
        MigrateError::SameDevice
    );
    s.qp.disconnect();
    assert_eq!(s.qp.closed().await, verbs::QpEnd::Closed);
    assert_eq!(c.qp.closed().await, verbs::QpEnd::Closed);
}
