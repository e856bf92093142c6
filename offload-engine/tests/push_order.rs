//! The inline push path keeps the wire in posting order. The peer is a plain TCP socket
//! that runs the MPA responder by hand and then reads slowly, so the socket keeps filling
//! up: posts onto an idle queue are written by the posting thread and often only in part,
//! the rest is left to the driver, and later posts queue behind it. The peer deframes
//! everything it read and checks that every RDMA Write arrived whole and in order.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ddp::SegmentRepr;
use mpa::Deframer;
use offload_engine::{Cq, Engine, EngineConfig, QpInit};
use rdmap::{Payload, RemoteBuf, STag, SendFlags, SendOp, SendWr};
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

mod common;

/// Writes posted, and the size of each (below the push path's payload limit).
const WRITES: usize = 300;
const LEN: usize = 8 * 1024;
/// The STag and base the peer "advertises"; nothing checks them on its side.
const STAG: u32 = 0x0012_3400;
const BASE: u64 = 0x7000_0000;

fn message(i: usize) -> Bytes {
    (0..LEN)
        .map(|k| (k as u8) ^ (i as u8).wrapping_mul(31))
        .collect::<Vec<u8>>()
        .into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushed_and_driven_octets_keep_their_order() {
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("bind");
    // Small buffers on both ends, so the socket is full most of the time.
    socket2::SockRef::from(&listener)
        .set_recv_buffer_size(4096)
        .expect("SO_RCVBUF");
    let addr = listener.local_addr().expect("addr");
    let peer = tokio::spawn(common::fake_responder(listener, mpa::MpaConfig::default()));

    let mut cfg = EngineConfig::default();
    cfg.socket.send_buffer = Some(4096);
    let engine = Engine::new(cfg);
    let (pd, cq) = (engine.alloc_pd(), Cq::new(1024));
    let (qp, _) = engine
        .connect(addr, QpInit::new(pd, &cq), b"")
        .await
        .expect("connect");
    let (mut sock, mut rx, negotiated) = peer.await.expect("peer");

    // The peer reads slowly: 2 KiB at a time with pauses, until it has everything.
    let reader = tokio::spawn(async move {
        let mut de = Deframer::from_negotiated(&negotiated);
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while got.len() < WRITES * LEN {
            assert!(
                Instant::now() < deadline,
                "only {} octets arrived",
                got.len()
            );
            let mut chunk = [0u8; 2048];
            let n = sock.read(&mut chunk).await.expect("read");
            assert!(n > 0, "the engine closed early");
            rx.extend_from_slice(&chunk[..n]);
            while let Some(ulpdu) = de.decode(&mut rx).expect("a well-formed FPDU") {
                let (SegmentRepr::Tagged(t), payload) =
                    SegmentRepr::parse(&ulpdu).expect("a DDP segment")
                else {
                    panic!("an untagged segment");
                };
                // In order: each segment lands right after the previous one.
                assert_eq!(t.stag, STag::from_u32(STAG));
                assert_eq!(t.to, BASE + got.len() as u64, "segment out of order");
                got.extend_from_slice(payload);
            }
            if got.len() % (64 * 1024) < 2048 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        got
    });

    // Posts: some onto an idle queue (after waiting for every completion), some behind
    // work in flight.
    let mut pending = 0;
    for i in 0..WRITES {
        if i % 3 == 0 {
            while pending > 0 {
                let wc = cq.next().await.expect("cq");
                assert!(wc.wc.is_ok(), "{wc:?}");
                pending -= 1;
            }
        }
        qp.post_send(SendWr {
            wr_id: i as u64,
            op: SendOp::Write {
                data: Payload::Bytes(message(i)),
                dst: RemoteBuf {
                    stag: STag::from_u32(STAG),
                    to: BASE + (i * LEN) as u64,
                    len: LEN as u32,
                },
            },
            flags: SendFlags::SIGNALED,
        })
        .expect("post");
        pending += 1;
    }
    let got = reader.await.expect("reader");
    for (i, m) in got.chunks(LEN).enumerate() {
        assert_eq!(m, &message(i)[..], "Write {i} arrived changed");
    }
}

/// The push path itself: a small Send posted onto an idle queue is on the wire when
/// `post_send` returns, written by the posting thread. The runtime has one thread and the
/// test never yields to it between the post and the read, so the driver task cannot have
/// run: without the push path the peer reads nothing.
#[tokio::test(flavor = "current_thread")]
async fn a_small_send_on_an_idle_queue_leaves_on_the_posting_thread() {
    let (_engine, qp, _cq, sock, mut rx, negotiated) = idle_pair(None).await;
    sock.set_nonblocking(false).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    qp.post_send(SendWr {
        wr_id: 1,
        op: SendOp::Send {
            data: Payload::Bytes(Bytes::from_static(b"pushed")),
            invalidate: None,
            immediate: None,
        },
        flags: SendFlags::SIGNALED,
    })
    .unwrap();
    // No await from here on: only the posting thread can have written.
    let mut deframer = Deframer::from_negotiated(&negotiated);
    let mut buf = [0u8; 256];
    let ulpdu = loop {
        if let Some(u) = deframer.decode(&mut rx).unwrap() {
            break u;
        }
        let n = std::io::Read::read(&mut &sock, &mut buf)
            .expect("the Send is on the wire before the driver could run");
        assert!(n > 0, "the engine closed the connection");
        rx.extend_from_slice(&buf[..n]);
    };
    assert_eq!(&ulpdu[18..], b"pushed");
}

/// A busy-polling application sends what its driver would: a lone Send too large to go
/// out with its post (4 MiB, many turns of output) reaches the peer while the
/// application only calls `poll_input`, on a one-thread runtime it never yields to, so
/// the driver task cannot run. (Before, the driver, woken from the application's thread,
/// waited for the application's loop to give the runtime a turn: 80 µs per message in
/// `iwperf send_lat -s 65536`, whose loop yields every 64 polls.)
#[tokio::test(flavor = "current_thread")]
async fn a_polling_application_sends_its_large_lone_request_itself() {
    polled_lone_send(None).await;
}

/// The same with small socket buffers on a two-thread runtime: the socket takes only
/// part of each turn's output, what it did not take is the driver's to write, and the
/// polls produce more once it has: the polling thread and the driver share the output,
/// and the Send still arrives whole and in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polling_application_writes_what_the_socket_did_not_take() {
    polled_lone_send(Some(16 << 10)).await;
}

async fn polled_lone_send(buffers: Option<usize>) {
    const LEN: usize = 4 << 20;
    let (_engine, qp, cq, sock, mut rx, negotiated) = idle_pair(buffers).await;
    let data: Bytes = (0..LEN)
        .map(|i| (i % 251) as u8)
        .collect::<Vec<u8>>()
        .into();
    qp.post_send(SendWr {
        wr_id: 7,
        op: SendOp::Send {
            data: Payload::Bytes(data.clone()),
            invalidate: None,
            immediate: None,
        },
        flags: SendFlags::SIGNALED,
    })
    .unwrap();
    // No await from here on: only this thread can write.
    let mut deframer = Deframer::from_negotiated(&negotiated);
    let mut buf = vec![0u8; 64 << 10];
    let mut got = Vec::with_capacity(LEN);
    let mut completed = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.len() < LEN || completed == 0 {
        assert!(
            Instant::now() < deadline,
            "{} of {LEN} octets and {completed} completions without the driver",
            got.len()
        );
        qp.poll_input();
        match std::io::Read::read(&mut &sock, &mut buf) {
            Ok(0) => panic!("the engine closed the connection"),
            Ok(n) => rx.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("read: {e}"),
        }
        while let Some(u) = deframer.decode(&mut rx).unwrap() {
            got.extend_from_slice(&u[18..]);
        }
        completed += cq
            .poll_with(1, |w| assert_eq!((w.wc.wr_id, w.wc.is_ok()), (7, true)))
            .unwrap();
    }
    assert!(got == data, "the Send arrived changed");
}

/// A queue pair connected to a hand-driven MPA responder (both ends' socket buffers
/// `buffers` octets if given), its driver settled into waiting: the engine, the queue
/// pair, its CQ, the peer's socket (non-blocking), what the peer read past the handshake,
/// and what was negotiated.
async fn idle_pair(
    buffers: Option<usize>,
) -> (
    Engine,
    offload_engine::Qp,
    Cq,
    std::net::TcpStream,
    bytes::BytesMut,
    mpa::Negotiated,
) {
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("bind");
    let mut cfg = EngineConfig::default();
    if let Some(b) = buffers {
        socket2::SockRef::from(&listener)
            .set_recv_buffer_size(b)
            .expect("SO_RCVBUF");
        cfg.socket.send_buffer = Some(b);
    }
    let addr = listener.local_addr().unwrap();
    let peer =
        tokio::spawn(
            async move { common::fake_responder(listener, mpa::MpaConfig::default()).await },
        );
    let engine = Engine::new(cfg);
    let cq = Cq::new(16);
    let (qp, _) = engine
        .connect(addr, QpInit::new(engine.alloc_pd(), &cq), b"")
        .await
        .expect("connect");
    let (sock, rx, negotiated) = peer.await.unwrap();
    // Let the driver settle into waiting; the caller then keeps it from running.
    tokio::task::yield_now().await;
    (engine, qp, cq, sock.into_std().unwrap(), rx, negotiated)
}
