//! Busy polling (`SocketOptions::busy_poll`): a responder whose application does nothing
//! (perftest's `read_lat` server) answers Reads that arrive within the window after its
//! last response from its driver's busy poll, not after a runtime wake-up. Two engines
//! over loopback; the requester spins on its input, one Read at a time, as `read_lat`.

use std::net::SocketAddr;
use std::time::Duration;

use offload_engine::tpt::Base;
use offload_engine::{Cq, Engine, EngineConfig, QpInit, SocketOptions, Wc};
use rdmap::{Access, RemoteBuf, SendFlags, SendOp, SendWr, Sge, WcStatus};

const READS: u64 = 500;

/// The responder's count of busy-polled reads after `READS` Reads, one at a time, with
/// its busy-poll window `window`.
async fn busy_polled_reads(window: Duration) -> u64 {
    let mut cfg = EngineConfig::default();
    cfg.socket.busy_poll = window;
    let (server, client) = (Engine::new(cfg.clone()), Engine::new(cfg));
    let listener = server
        .listen(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("listen");
    let addr = listener.local_addr();
    let (spd, scq) = (server.alloc_pd(), Cq::new(16));
    let (cpd, ccq) = (client.alloc_pd(), Cq::new(16));
    let accept = tokio::spawn(async move {
        let inc = listener.accept().await.expect("incoming");
        inc.accept(QpInit::new(spd, &scq), b"")
            .await
            .expect("accept")
    });
    let (qp, _) = client
        .connect(addr, QpInit::new(cpd, &ccq), b"")
        .await
        .expect("connect");
    let _server_qp = accept.await.expect("accepted");
    let src = server
        .tpt()
        .register(spd, vec![7; 64], Base::ZeroBased, Access::REMOTE_READ)
        .expect("source");
    let dst = client
        .tpt()
        .register(cpd, vec![0; 64], Base::ZeroBased, Access::LOCAL_WRITE)
        .expect("destination");
    let mut got: Vec<Wc> = Vec::with_capacity(1);
    for i in 0..READS {
        qp.post_send(SendWr {
            wr_id: i,
            op: SendOp::Read {
                src: RemoteBuf {
                    stag: src,
                    to: 0,
                    len: 8,
                },
                dst: Sge {
                    stag: dst,
                    to: 0,
                    len: 8,
                },
            },
            flags: SendFlags::SIGNALED,
        })
        .expect("post the Read");
        // As read_lat's client: spin on the input and the completion queue.
        loop {
            qp.poll_input();
            if ccq.poll(&mut got, 1).expect("poll") > 0 {
                break;
            }
            tokio::task::yield_now().await;
        }
        let wc = got.pop().expect("a completion");
        assert_eq!((wc.wc.wr_id, wc.wc.status), (i, WcStatus::Success));
    }
    server.stats().busy_polled_reads
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_responder_finds_the_next_read_by_busy_polling() {
    let polled = busy_polled_reads(SocketOptions::BUSY_POLL).await;
    eprintln!("{polled} of {READS} Read Requests found by busy polling");
    assert!(polled > 0, "no Read Request was found by busy polling");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_busy_polling_off_the_driver_never_polls() {
    assert_eq!(busy_polled_reads(Duration::ZERO).await, 0);
}
