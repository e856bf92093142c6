//! Busy-poll mode: `Qp::poll_input` processes input on the caller's thread. The test
//! runs on a current-thread runtime and spins without awaiting, so the connection's
//! driver task cannot run meanwhile: every completion it sees came from `poll_input`.
//! The peer is a hand-run MPA responder on its own thread. `Qp::poll_io` also writes
//! the send queue's requests from the polling thread.

use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use ddp::SegmentRepr;
use mpa::{Framer, MpaConfig, Negotiated};
use offload_engine::tpt::Base;
use offload_engine::{Cq, Engine, EngineConfig, QpInit};
use rdmap::wire::{Opcode, RdmapControl};
use rdmap::{Access, RecvWr, Sge, WcStatus};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

mod common;

const MESSAGES: [&[u8]; 3] = [b"first", b"second message", b"third"];

/// Runs `body` on the socket of a hand-run MPA responder (settings `cfg`) on a runtime of
/// its own, on the calling thread.
fn run_peer<F, Fut>(listener: std::net::TcpListener, cfg: MpaConfig, body: F)
where
    F: FnOnce(TcpStream, Negotiated) -> Fut,
    Fut: Future<Output = ()>,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("peer runtime");
    rt.block_on(async move {
        listener.set_nonblocking(true).expect("nonblocking");
        let listener = TcpListener::from_std(listener).expect("listener");
        let (sock, _, negotiated) = common::fake_responder(listener, cfg).await;
        body(sock, negotiated).await;
    });
}

/// The peer: accepts, runs MPA, waits for `go`, sends the three Sends on queue 0, and
/// keeps the connection open until `done`.
fn peer(listener: std::net::TcpListener, go: mpsc::Receiver<()>, done: mpsc::Receiver<()>) {
    run_peer(
        listener,
        MpaConfig::default(),
        |mut sock, negotiated| async move {
            go.recv().expect("go");
            let mut framer = Framer::from_negotiated(&negotiated);
            let mut out = BytesMut::new();
            for (i, m) in MESSAGES.iter().enumerate() {
                rdmap::testing::send_fpdu(&mut framer, i as u32 + 1, m, &mut out);
            }
            sock.write_all(&out).await.expect("write the Sends");
            let _ = done.recv();
        },
    );
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
            sgl: [Sge {
                stag,
                to: (i * 64) as u64,
                len: 64,
            }]
            .into(),
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

/// Without CRC, a polling application reads the rest of a large RDMA Write straight into
/// the region too, as the driver does (the driver cannot run here). The peer sends a Send
/// and the start of a 32 KiB Write, waits until the Send completed, then sends the rest of
/// the Write and a second Send.
#[tokio::test(flavor = "current_thread")]
async fn poll_input_reads_a_large_write_straight_into_memory() {
    const LEN: usize = 32 * 1024;
    let payload: Vec<u8> = (0..LEN).map(|i| (i * 7 + 1) as u8).collect();
    let listener =
        std::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stag_tx, stag_rx) = mpsc::channel::<u32>();
    let (rest_tx, rest_rx) = mpsc::channel();
    let expected = payload.clone();
    let peer = std::thread::spawn(move || {
        let mut cfg = MpaConfig::default();
        cfg.crc = false;
        run_peer(listener, cfg, |mut sock, negotiated| async move {
            assert!(!negotiated.crc, "CRC off on both sides");
            let stag = rdmap::STag::from(stag_rx.recv().expect("stag"));
            let mut framer = Framer::from_negotiated(&negotiated);
            let mut first = BytesMut::new();
            rdmap::testing::send_fpdu(&mut framer, 1, b"note", &mut first);
            let w = SegmentRepr::Tagged(ddp::TaggedRepr {
                last: true,
                rsvd_ulp: RdmapControl::new(Opcode::RdmaWrite).emit(),
                stag,
                to: 0,
            });
            let mut hbuf = vec![0; w.header_len()];
            w.emit(&mut hbuf);
            let mut write = BytesMut::new();
            framer.encode(&hbuf, &expected, &mut write);
            let cut = first.len() + 2 + hbuf.len() + 1000;
            first.extend_from_slice(&write);
            rdmap::testing::send_fpdu(&mut framer, 2, b"note", &mut first);
            sock.write_all(&first[..cut])
                .await
                .expect("write the start");
            rest_rx.recv().expect("rest");
            sock.write_all(&first[cut..]).await.expect("write the rest");
            let _ = rest_rx.recv();
        });
    });

    let mut cfg = EngineConfig::default();
    cfg.mpa.crc = false;
    let engine = Engine::new(cfg);
    let (pd, cq) = (engine.alloc_pd(), Cq::new(64));
    let (qp, _) = engine
        .connect(addr, QpInit::new(pd, &cq), b"")
        .await
        .expect("connect");
    let tpt = engine.tpt();
    let inbox = tpt
        .alloc_region(pd, 64, Base::ZeroBased, Access::LOCAL_WRITE)
        .expect("inbox");
    let target = tpt
        .alloc_region(
            pd,
            LEN,
            Base::ZeroBased,
            Access::LOCAL_READ | Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )
        .expect("target");
    for i in 0..2 {
        qp.post_recv(RecvWr {
            wr_id: i,
            sgl: [Sge {
                stag: inbox,
                to: i * 32,
                len: 32,
            }]
            .into(),
        })
        .expect("post_recv");
    }
    stag_tx.send(target.into()).expect("stag");

    // Spin without awaiting: only poll_input can move the input along.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut got = Vec::new();
    while got.len() < 2 {
        assert!(Instant::now() < deadline, "completions so far: {got:?}");
        qp.poll_input();
        let before = got.len();
        cq.poll(&mut got, 8).expect("cq");
        if before == 0 && !got.is_empty() {
            rest_tx.send(()).expect("rest");
        }
    }
    let mut placed = vec![0; LEN];
    tpt.read(pd, target, 0, &mut placed).expect("read back");
    assert!(placed == payload, "the Write landed whole");
    let st = qp.stats();
    assert!(
        st.bytes_received_in_place > (LEN - 2000) as u64,
        "the rest of the Write was read straight into the region: {st:?}"
    );
    let _ = rest_tx.send(());
    peer.join().expect("peer thread");
}

/// `poll_io` runs the whole connection on the polling thread: requests in flight (not
/// only a lone one) go out from there as the socket takes them, and complete, with the
/// driver unable to run. The peer counts the octets that reach it.
#[tokio::test(flavor = "current_thread")]
async fn poll_io_writes_every_request_in_flight_without_the_driver() {
    const LEN: usize = 32 * 1024;
    const WRITES: u64 = 4;
    let listener =
        std::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (read_tx, read_rx) = mpsc::channel();
    let peer = std::thread::spawn(move || {
        run_peer(listener, MpaConfig::default(), |mut sock, _| async move {
            use tokio::io::AsyncReadExt;
            let (mut total, mut buf) = (0, vec![0; 64 * 1024]);
            while total < WRITES as usize * LEN {
                match sock.read(&mut buf).await.expect("read") {
                    0 => break,
                    n => total += n,
                }
            }
            read_tx.send(total).expect("report");
            // Open until the test's side has seen its completions.
            let _ = sock.read(&mut buf).await;
        });
    });

    let engine = Engine::new(EngineConfig::default());
    let (pd, cq) = (engine.alloc_pd(), Cq::new(64));
    let (qp, _) = engine
        .connect(addr, QpInit::new(pd, &cq), b"")
        .await
        .expect("connect");
    for wr_id in 0..WRITES {
        qp.post_send(rdmap::SendWr {
            wr_id,
            op: rdmap::SendOp::Write {
                data: rdmap::Payload::Bytes(vec![wr_id as u8; LEN].into()),
                dst: rdmap::RemoteBuf {
                    stag: rdmap::STag::from(0x100),
                    to: 0,
                    len: LEN as u32,
                },
            },
            flags: rdmap::SendFlags::SIGNALED,
        })
        .expect("post_send");
    }

    // Spin without awaiting: only poll_io can write the requests (poll_input leaves
    // requests in flight to the driver, which cannot run here).
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut got = Vec::new();
    while got.len() < WRITES as usize {
        assert!(Instant::now() < deadline, "completions so far: {got:?}");
        qp.poll_io();
        cq.poll(&mut got, 8).expect("cq");
    }
    for (i, wc) in got.iter().enumerate() {
        assert_eq!((wc.wc.wr_id, wc.wc.status), (i as u64, WcStatus::Success));
    }
    let read = read_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the peer read the Writes");
    assert!(
        read >= WRITES as usize * LEN,
        "{read} octets reached the peer"
    );
    drop(qp);
    drop(engine);
    peer.join().expect("peer thread");
}
