//! Live migration between processes at the engine's level (seed 003 §3.1): a domain is
//! exported, crosses as octets and duplicated descriptors (as `SCM_RIGHTS` passes them),
//! and another engine imports it, while the peer is in the middle of a large Read. The
//! two-process version, with real `iwarpd` processes, is in `iwarpd_handover.rs`.

mod common;

use std::os::fd::OwnedFd;
use std::time::Duration;

use common::hosts::{ALL, connect, host, write};
use offload_engine::tpt::Base;
use offload_engine::{Completions, Cq, Engine, EngineConfig, ImportQueues, MigrateError, QpEnd};
use rdmap::{
    Payload, QpState, RecvWr, RemoteBuf, SendFlags, SendOp, SendWr, Sge, WcOpcode, WcStatus,
};

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13) ^ seed ^ (i >> 9) as u8)
        .collect()
}

fn send(wr_id: u64, data: &[u8]) -> SendWr {
    SendWr {
        wr_id,
        op: SendOp::Send {
            data: Payload::Bytes(data.to_vec().into()),
            invalidate: None,
            immediate: None,
        },
        flags: SendFlags::SIGNALED,
    }
}

/// What the other process would receive: the image and its own copies of the descriptors.
fn cross(export: &offload_engine::ExportedPd) -> (Vec<u8>, Vec<OwnedFd>) {
    let fds = export
        .files()
        .iter()
        .map(|fd| fd.try_clone_to_owned().unwrap())
        .collect();
    (export.image().to_vec(), fds)
}

/// The server's domain leaves its engine while the client's 16 MiB Read is being answered
/// and the socket is full (the client parked itself): the Response octets not yet written,
/// the two receives posted and the region (the same pages, under the same STag) go to the
/// other engine, which finishes the Read and places the client's Sends and Writes. The old
/// queue pair ends as moved away, with nothing flushed and no FIN.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_domain_crosses_in_the_middle_of_a_read() {
    let (c, s) = (host(), host());
    let dest = Engine::new(EngineConfig::default());
    let (cqp, sqp) = connect(&c, &s).await;
    const LEN: usize = 16 << 20;
    let data = pattern(LEN, 5);
    let tpt = s.engine.tpt();
    let region = tpt.alloc_region(s.pd, LEN, Base::ZeroBased, ALL).unwrap();
    tpt.write(s.pd, region, 0, &data).unwrap();
    let rx = tpt
        .alloc_region(s.pd, 2 * 4096, Base::ZeroBased, ALL)
        .unwrap();
    for i in 0..2u64 {
        sqp.post_recv(RecvWr {
            wr_id: 100 + i,
            sgl: [Sge {
                stag: rx,
                to: i * 4096,
                len: 4096,
            }]
            .into(),
        })
        .unwrap();
    }
    let sink = c
        .engine
        .tpt()
        .alloc_region(c.pd, LEN, Base::ZeroBased, ALL)
        .unwrap();
    let src = RemoteBuf {
        stag: region,
        to: 0,
        len: LEN as u32,
    };
    cqp.post_send(SendWr {
        wr_id: 1,
        op: SendOp::Read {
            src,
            dst: Sge {
                stag: sink,
                to: 0,
                len: LEN as u32,
            },
        },
        flags: SendFlags::SIGNALED,
    })
    .unwrap();
    while sqp.stats().fpdus_sent < 10 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let client = c.engine.park_pd(c.pd).await.unwrap();
    let mut waited = 0;
    while !sqp.tx_backlog() && waited < 2000 {
        tokio::time::sleep(Duration::from_millis(1)).await;
        waited += 1;
    }
    assert!(sqp.tx_backlog(), "the server never backed up");

    let export = s.engine.export_pd(s.pd).await.unwrap();
    assert_eq!(export.queue_pairs(), &[sqp.num()]);
    let (image, fds) = cross(&export);
    assert_eq!(fds.len(), 2 + 1, "two memory files, one socket");
    let moved = export.commit();
    assert_eq!((moved.queue_pairs, moved.memory_entries), (1, 2));
    assert_eq!(sqp.closed().await, QpEnd::MovedAway);

    let cq = Cq::new(64);
    let (pd, qps) = dest
        .import_pd(&image, fds, |_| ImportQueues {
            completions: Completions::queue(&cq),
            srq: None,
        })
        .unwrap();
    assert_eq!(qps.len(), 1);
    assert_eq!(qps[0].was, sqp.num());
    let nqp = qps[0].qp.clone();
    drop(client);

    let wc = c.cq.next().await.unwrap();
    assert_eq!(
        (wc.wc.wr_id, wc.wc.status),
        (1, WcStatus::Success),
        "{wc:?}"
    );
    let mut back = vec![0; LEN];
    c.engine.tpt().read(c.pd, sink, 0, &mut back).unwrap();
    assert!(back == data, "the Read Response arrived intact");

    // The peer goes on with the same STags: a Write lands in the moved region, two Sends
    // in the receives posted before the move.
    let dst = RemoteBuf {
        stag: region,
        to: 4096,
        len: 8,
    };
    cqp.post_send(write(2, b"after!!!", dst)).unwrap();
    cqp.post_send(send(3, b"first")).unwrap();
    cqp.post_send(send(4, b"second")).unwrap();
    for want in 2..=4 {
        let wc = c.cq.next().await.unwrap();
        assert_eq!((wc.wc.wr_id, wc.wc.status), (want, WcStatus::Success));
    }
    for (i, want) in [&b"first"[..], b"second"].iter().enumerate() {
        let wc = cq.next().await.unwrap();
        assert_eq!(wc.wc.opcode, WcOpcode::Recv);
        assert_eq!(wc.wc.wr_id, 100 + i as u64);
        let mut got = vec![0; want.len()];
        dest.tpt().read(pd, rx, i as u64 * 4096, &mut got).unwrap();
        assert_eq!(&got, want);
    }
    let mut got = [0; 8];
    dest.tpt().read(pd, region, 4096, &mut got).unwrap();
    assert_eq!(&got, b"after!!!");
    assert_eq!((cqp.state(), nqp.state()), (QpState::Rts, QpState::Rts));
    assert_eq!(s.engine.qps().len(), 0, "the old engine let it go");
    // The counters follow: gone from the old engine (with the traffic it had there), live
    // in the new one.
    let (old, new) = (s.engine.stats(), dest.stats());
    assert_eq!((old.queue_pairs, old.connections_closed), (0, 1));
    assert!(old.traffic.fpdus_sent > 0, "{old:?}");
    assert_eq!((new.queue_pairs, new.connections), (1, 0));

    // And it closes cleanly from its new home.
    nqp.disconnect();
    assert_eq!(nqp.closed().await, QpEnd::Closed);
    assert_eq!(cqp.closed().await, QpEnd::Closed);
}

/// Memory the application handed over has no memory file: the export is refused and
/// nothing changes. An export dropped without commit leaves everything running where it
/// was; a foreign image or a wrong number of descriptors is refused by the importer.
#[tokio::test]
async fn refusals_leave_everything_running() {
    let (c, s) = (host(), host());
    let (cqp, sqp) = connect(&c, &s).await;
    let adopted = s
        .engine
        .tpt()
        .register(s.pd, vec![0; 4096], Base::ZeroBased, ALL)
        .unwrap();
    let e = s.engine.export_pd(s.pd).await.unwrap_err();
    assert!(matches!(e, MigrateError::CannotCross(_)), "{e}");
    assert!(e.to_string().contains("memory file"), "{e}");
    s.engine.tpt().deregister(adopted).unwrap();

    let filed = s
        .engine
        .tpt()
        .alloc_region(s.pd, 4096, Base::ZeroBased, ALL)
        .unwrap();
    let export = s.engine.export_pd(s.pd).await.unwrap();
    let (image, fds) = cross(&export);
    drop(export);
    let dst = RemoteBuf {
        stag: filed,
        to: 0,
        len: 4,
    };
    cqp.post_send(write(1, b"here", dst)).unwrap();
    assert!(c.cq.next().await.unwrap().wc.is_ok());
    // A send-side completion means the socket took the octets: wait for the placement.
    let mut got = [0; 4];
    for _ in 0..2000 {
        s.engine.tpt().read(s.pd, filed, 0, &mut got).unwrap();
        if &got == b"here" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(&got, b"here");
    assert_eq!(sqp.state(), QpState::Rts);

    let dest = Engine::new(EngineConfig::default());
    let queues = |_| ImportQueues {
        completions: Completions::queue(&Cq::new(4)),
        srq: None,
    };
    let e = dest.import_pd(b"iWPDimg0", Vec::new(), queues).unwrap_err();
    assert!(e.to_string().contains("same image format"), "{e}");
    let e = dest
        .import_pd(&image, fds.into_iter().take(1).collect(), queues)
        .unwrap_err();
    assert!(e.to_string().contains("1 descriptors came"), "{e}");
    assert_eq!(dest.qps().len(), 0);
}
