//! Busy-poll mode: `Qp::poll_input` processes input on the caller's thread. The test
//! runs on a current-thread runtime and spins without awaiting, so the connection's
//! driver task cannot run meanwhile: every completion it sees came from `poll_input`.
//! The peer is a hand-run MPA responder on its own thread that sends three Sends.

use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use ddp::{SegmentRepr, UntaggedRepr};
use mpa::Framer;
use offload_engine::tpt::Base;
use offload_engine::{Cq, Engine, EngineConfig, QpInit};
use rdmap::wire::{Opcode, RdmapControl};
use rdmap::{Access, RecvWr, Sge, WcStatus};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

mod common;

const MESSAGES: [&[u8]; 3] = [b"first", b"second message", b"third"];

/// The peer: accepts, runs MPA, waits for `go`, sends the three Sends on queue 0, and
/// keeps the connection open until `done`.
fn peer(listener: std::net::TcpListener, go: mpsc::Receiver<()>, done: mpsc::Receiver<()>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("peer runtime");
    rt.block_on(async move {
        listener.set_nonblocking(true).expect("nonblocking");
        let listener = TcpListener::from_std(listener).expect("listener");
        let (mut sock, _, negotiated) = common::fake_responder(listener).await;
        go.recv().expect("go");
        let mut framer = Framer::from_negotiated(&negotiated);
        let mut out = BytesMut::new();
        for (i, m) in MESSAGES.iter().enumerate() {
            let header = SegmentRepr::Untagged(UntaggedRepr {
                last: true,
                rsvd_ulp: RdmapControl::new(Opcode::Send).emit(),
                rsvd_ulp_ext: 0,
                qn: 0,
                msn: i as u32 + 1,
                mo: 0,
            });
            let mut hbuf = vec![0; header.header_len()];
            header.emit(&mut hbuf);
            framer.encode(&hbuf, m, &mut out);
        }
        sock.write_all(&out).await.expect("write the Sends");
        let _ = done.recv();
    });
}

#[tokio::test(flavor = "current_thread")]
async fn poll_input_completes_receives_without_the_driver() {
    let listener =
        std::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (go_tx, go_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    let peer = std::thread::spawn(move || peer(listener, go_rx, done_rx));

    let engine = Engine::new(EngineConfig::default());
    let (pd, cq) = (engine.alloc_pd(), Cq::new(64));
    let (qp, _) = engine
        .connect(addr, QpInit::new(pd, &cq), b"")
        .await
        .expect("connect");
    let stag = engine
        .tpt()
        .register(
            pd,
            vec![0; 3 * 64],
            Base::ZeroBased,
            Access::LOCAL_WRITE | Access::LOCAL_READ,
        )
        .expect("register");
    for i in 0..MESSAGES.len() {
        qp.post_recv(RecvWr {
            wr_id: i as u64,
            sgl: vec![Sge {
                stag,
                to: (i * 64) as u64,
                len: 64,
            }],
        })
        .expect("post_recv");
    }
    go_tx.send(()).expect("go");

    // Spin without awaiting: only poll_input can move the input along.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (mut got, mut polled) = (Vec::new(), 0);
    while got.len() < MESSAGES.len() {
        assert!(Instant::now() < deadline, "completions so far: {got:?}");
        if qp.poll_input() {
            polled += 1;
        }
        cq.poll(&mut got, 8).expect("cq");
    }
    assert!(polled > 0);
    for (i, wc) in got.iter().enumerate() {
        assert_eq!(wc.wc.status, WcStatus::Success, "{wc:?}");
        assert_eq!(
            (wc.wc.wr_id, wc.wc.byte_len as usize),
            (i as u64, MESSAGES[i].len())
        );
        let mut placed = vec![0; MESSAGES[i].len()];
        engine
            .tpt()
            .read(pd, stag, (i * 64) as u64, &mut placed)
            .expect("read back");
        assert_eq!(placed, MESSAGES[i]);
    }
    let _ = done_tx.send(());
    peer.join().expect("peer thread");
}
