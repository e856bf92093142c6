//! The engine reads one clock, tokio's: its timers run in paused time, so timeouts of
//! seconds are tested in no time at all, and exactly.

use std::net::SocketAddr;
use std::time::Duration;

use offload_engine::tpt::PdId;
use offload_engine::{ConnectError, Cq, Engine, EngineConfig, QpEnd, QpInit};
use tokio::net::TcpListener;
use tokio::time::Instant;

mod common;

async fn listener() -> (TcpListener, SocketAddr) {
    let l = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("bind");
    let addr = l.local_addr().expect("addr");
    (l, addr)
}

/// A peer that accepts TCP and never says a word of MPA: the Initiator gives up after
/// its MPA timeout, measured on the paused clock.
#[tokio::test(start_paused = true)]
async fn a_silent_responder_times_out_after_exactly_the_mpa_timeout() {
    let (l, addr) = listener().await;
    let silent = tokio::spawn(async move { l.accept().await.expect("accept").0 });
    let mut cfg = EngineConfig::default();
    cfg.mpa.timeout = Duration::from_secs(7);
    let engine = Engine::new(cfg);
    let cq = Cq::new(4);
    let start = Instant::now();
    let err = engine
        .connect(addr, QpInit::new(engine.alloc_pd(), &cq), b"")
        .await
        .expect_err("nobody answers");
    let waited = start.elapsed();
    assert!(matches!(err, ConnectError::NoFrame(_)), "{err}");
    assert!(
        err.to_string().starts_with("no MPA Reply within 7 s"),
        "{err}"
    );
    assert!(
        waited >= Duration::from_secs(7) && waited < Duration::from_secs(8),
        "gave up after {waited:?} of the paused clock"
    );
    drop(silent.await);
}

/// A graceful close the peer never answers (it keeps the connection open and silent):
/// the queue pair ends after the linger, on the paused clock.
#[tokio::test(start_paused = true)]
async fn a_close_the_peer_never_answers_ends_after_the_linger() {
    let (l, addr) = listener().await;
    let peer =
        tokio::spawn(async move { common::fake_responder(l, mpa::MpaConfig::default()).await.0 });
    let engine = Engine::new(EngineConfig::default());
    let cq = Cq::new(4);
    let (qp, _) = engine
        .connect(addr, QpInit::new(engine.alloc_pd(), &cq), b"")
        .await
        .expect("connect");
    let sock = peer.await.expect("peer");
    let start = Instant::now();
    qp.disconnect();
    let end = qp.closed().await;
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_secs(2) && waited < Duration::from_secs(3),
        "ended after {waited:?} of the paused clock ({end})"
    );
    assert_ne!(end, QpEnd::ConnectionLost, "{end}");
    drop(sock);
}

/// An engine with these liveness limits, connected to a hand-run peer that says nothing
/// after the handshake unless the test makes it.
async fn connected_to_silent_peer(
    idle: Option<Duration>,
    stall: Option<Duration>,
) -> (Engine, PdId, offload_engine::Qp, Cq, tokio::net::TcpStream) {
    let (l, addr) = listener().await;
    let peer =
        tokio::spawn(async move { common::fake_responder(l, mpa::MpaConfig::default()).await.0 });
    let mut cfg = EngineConfig::default();
    cfg.timeouts.idle = idle;
    cfg.timeouts.stall = stall;
    let engine = Engine::new(cfg);
    let cq = Cq::new(16);
    let pd = engine.alloc_pd();
    let (qp, _) = engine
        .connect(addr, QpInit::new(pd, &cq), b"")
        .await
        .expect("connect");
    let sock = peer.await.expect("peer");
    (engine, pd, qp, cq, sock)
}

/// How long (on the paused clock) until the queue pair ends, and how; fails if it is
/// still up after a day.
async fn time_to_end(qp: &offload_engine::Qp) -> (Duration, QpEnd) {
    let start = Instant::now();
    let end = tokio::time::timeout(Duration::from_secs(24 * 3600), qp.closed())
        .await
        .expect("the queue pair never timed out");
    (start.elapsed(), end)
}

/// A peer that completes the handshake and then says nothing: with an idle limit, the
/// connection ends after exactly that long; without one (an application's default), it
/// stays up.
#[tokio::test(start_paused = true)]
async fn a_silent_peer_is_dropped_after_the_idle_timeout_only_when_one_is_set() {
    let (_e, _pd, qp, _cq, sock) =
        connected_to_silent_peer(Some(Duration::from_secs(30)), None).await;
    let (waited, end) = time_to_end(&qp).await;
    assert_eq!(end, QpEnd::TimedOut);
    assert!(
        waited >= Duration::from_secs(30) && waited < Duration::from_secs(31),
        "{waited:?}"
    );
    drop(sock);

    let (_e, _pd, qp, _cq, sock) =
        connected_to_silent_peer(None, Some(Duration::from_secs(5))).await;
    let quiet = tokio::time::timeout(Duration::from_secs(24 * 3600), qp.closed()).await;
    assert!(quiet.is_err(), "an idle connection ended: {quiet:?}");
    assert_eq!(qp.state(), rdmap::QpState::Rts);
    drop(sock);
}

/// A peer that starts an FPDU (its header announces 1,000 octets) and stops after a few:
/// the stall limit ends the queue pair; more octets arriving in time keep it alive.
#[tokio::test(start_paused = true)]
async fn a_partial_fpdu_that_stalls_ends_the_queue_pair_after_the_stall_timeout() {
    use tokio::io::AsyncWriteExt;
    let stall = Duration::from_secs(5);
    let (_e, _pd, qp, _cq, mut sock) = connected_to_silent_peer(None, Some(stall)).await;
    let start = Instant::now();
    // MPA length 1000, then the first octets of a DDP header.
    sock.write_all(&[0x03, 0xe8, 0x41, 0x43, 0x00, 0x00])
        .await
        .unwrap();
    // Three more octets, each within the limit: progress, so no timeout yet.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_secs(4)).await;
        sock.write_all(&[0]).await.unwrap();
    }
    let (_, end) = time_to_end(&qp).await;
    let waited = start.elapsed();
    assert_eq!(end, QpEnd::TimedOut);
    assert!(
        waited >= Duration::from_secs(12) + stall && waited < Duration::from_secs(13) + stall,
        "ended {waited:?} after the first octet"
    );
}

/// A Read the peer never answers is outstanding work: the stall limit ends the queue pair
/// and the Read completes, flushed, instead of hanging for ever.
#[tokio::test(start_paused = true)]
async fn a_read_the_peer_never_answers_is_flushed_after_the_stall_timeout() {
    use offload_engine::tpt::Base;
    use rdmap::{Access, RemoteBuf, STag, SendFlags, SendOp, SendWr, Sge, WcStatus};
    let (engine, pd, qp, cq, sock) = connected_to_silent_peer(
        Some(Duration::from_secs(3600)),
        Some(Duration::from_secs(5)),
    )
    .await;
    let sink = engine
        .tpt()
        .register(pd, vec![0; 64], Base::ZeroBased, Access::LOCAL_WRITE)
        .unwrap();
    qp.post_send(SendWr {
        wr_id: 7,
        op: SendOp::Read {
            src: RemoteBuf {
                stag: STag::new(9, 0),
                to: 0,
                len: 64,
            },
            dst: Sge {
                stag: sink,
                to: 0,
                len: 64,
            },
        },
        flags: SendFlags::SIGNALED,
    })
    .unwrap();
    let (waited, end) = time_to_end(&qp).await;
    assert_eq!(end, QpEnd::TimedOut);
    assert!(
        waited >= Duration::from_secs(5) && waited < Duration::from_secs(6),
        "{waited:?}"
    );
    let wc = cq.next().await.unwrap();
    assert_eq!((wc.wc.wr_id, wc.wc.status), (7, WcStatus::Flushed));
    drop(sock);
}

/// A TCP connection from `from` that never sends its MPA Request.
async fn silent_client(from: [u8; 4], to: SocketAddr) -> tokio::net::TcpStream {
    let s = tokio::net::TcpSocket::new_v4().unwrap();
    s.bind(SocketAddr::from((from, 0))).unwrap();
    s.connect(to).await.unwrap()
}

/// An engine listening on loopback with at most `total` handshakes in progress, `per_address`
/// from one address.
async fn limited_listener(
    total: usize,
    per_address: usize,
) -> (Engine, offload_engine::Listener, SocketAddr) {
    let mut cfg = EngineConfig::default();
    cfg.max_pending_handshakes = total;
    cfg.max_pending_per_address = per_address;
    let server = Engine::new(cfg);
    let listener = server
        .listen(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let addr = listener.local_addr();
    (server, listener, addr)
}

/// True if the listener closed the connection at once (EOF without a word).
async fn closed_at_once(sock: &mut tokio::net::TcpStream) -> bool {
    use tokio::io::AsyncReadExt;
    let mut b = [0u8; 1];
    matches!(
        tokio::time::timeout(Duration::from_millis(500), sock.read(&mut b)).await,
        Ok(Ok(0) | Err(_))
    )
}

/// Silent clients cannot take every handshake place: a listener holds at most
/// `max_pending_per_address` of them from one address and `max_pending_handshakes` in
/// all, closes the rest at once, and takes honest clients again once the silent ones
/// timed out.
#[tokio::test(start_paused = true)]
async fn handshakes_in_progress_are_bounded_per_address_and_in_total() {
    let (server, listener, addr) = limited_listener(3, 2).await;
    let mut a1 = silent_client([127, 0, 0, 1], addr).await;
    let a2 = silent_client([127, 0, 0, 1], addr).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    let mut a3 = silent_client([127, 0, 0, 1], addr).await;
    assert!(closed_at_once(&mut a3).await, "a third from one address");
    assert!(
        !closed_at_once(&mut a1).await,
        "the first waits for its Request"
    );
    let b1 = silent_client([127, 0, 0, 2], addr).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    let mut c1 = silent_client([127, 0, 0, 3], addr).await;
    assert!(closed_at_once(&mut c1).await, "a fourth in all");
    // The silent ones time out (5 s, the Responder's MPA limit); then an honest client
    // gets in.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let client = Engine::new(EngineConfig::default());
    let cq = Cq::new(4);
    let accept = tokio::spawn(async move {
        let inc = listener.accept().await.unwrap();
        let pd = server.alloc_pd();
        let cq = Cq::new(4);
        inc.accept(QpInit::new(pd, &cq), b"").await.map(|_| ())
    });
    client
        .connect(addr, QpInit::new(client.alloc_pd(), &cq), b"")
        .await
        .expect("an honest client after the silent ones left");
    accept.await.unwrap().unwrap();
    drop((a1, a2, b1));
}

/// A client that sends a whole, valid MPA Request (revision 1, CRC, no private data) and
/// then waits.
async fn requesting_client(to: SocketAddr) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let mut s = tokio::net::TcpStream::connect(to).await.unwrap();
    let mut request = b"MPA ID Req Frame".to_vec();
    request.extend_from_slice(&[0x40, 0x01, 0x00, 0x00]);
    s.write_all(&request).await.unwrap();
    s
}

/// An application that listens and never accepts cannot be made to hold connections
/// without bound: 64 complete Requests wait in the listener's queue, the next ones keep
/// their handshake places while they wait for room (so a client beyond
/// `max_pending_handshakes` is closed at once), and after 5 s of waiting those are closed.
#[tokio::test(start_paused = true)]
async fn requests_the_application_does_not_take_are_bounded_and_time_out() {
    let (_server, listener, addr) = limited_listener(3, 3).await;
    let mut clients = Vec::new();
    for _ in 0..64 + 3 {
        clients.push(requesting_client(addr).await);
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let mut one_more = requesting_client(addr).await;
    assert!(
        closed_at_once(&mut one_more).await,
        "no place left: 64 queued, 3 waiting for room"
    );
    tokio::time::sleep(Duration::from_secs(6)).await;
    let mut closed = 0;
    for c in &mut clients {
        closed += usize::from(closed_at_once(c).await);
    }
    assert_eq!(closed, 3, "the three that waited for room were closed");
    // Their places are free again.
    let mut next = requesting_client(addr).await;
    assert!(!closed_at_once(&mut next).await, "a place again");
    drop(listener);
}

/// The Initiator's first FPDU, here the RTR of peer-to-peer mode, leaves exactly
/// `first_fpdu_delay` after the peer's MPA Reply (Linux siw's window, see
/// `EngineConfig::first_fpdu_delay`), measured by the peer on the paused clock.
#[tokio::test(start_paused = true)]
async fn the_first_fpdu_leaves_the_first_fpdu_delay_after_the_reply() {
    use tokio::io::AsyncReadExt;
    let (l, addr) = listener().await;
    let mut mpa = mpa::MpaConfig::default();
    mpa.p2p = true;
    let responder = mpa.clone();
    let peer = tokio::spawn(async move {
        let (mut sock, mut rx, _) = common::fake_responder(l, responder).await;
        let replied = Instant::now();
        while rx.is_empty() {
            assert!(sock.read_buf(&mut rx).await.expect("read") > 0, "closed");
        }
        (replied.elapsed(), sock)
    });
    let mut cfg = EngineConfig::default();
    cfg.mpa = mpa;
    cfg.first_fpdu_delay = Duration::from_millis(50);
    let engine = Engine::new(cfg);
    let cq = Cq::new(4);
    let (_qp, _) = engine
        .connect(addr, QpInit::new(engine.alloc_pd(), &cq), b"")
        .await
        .expect("connect");
    let (waited, _sock) = peer.await.expect("peer");
    assert!(
        waited >= Duration::from_millis(50) && waited < Duration::from_millis(51),
        "the RTR came {waited:?} after the Reply"
    );
}

/// An application that polled its input itself (`poll_input`) and then stops
/// (`stop_polling`, as iwarpd's servant does before it sleeps) has the driver read the
/// next message at once. The driver leaves reading to a poller for a millisecond after
/// its last poll; without `stop_polling` that message waits out the millisecond, which on
/// the paused clock shows as exactly the time that passed.
#[tokio::test(start_paused = true)]
async fn a_poller_that_stops_hands_reading_back_to_the_driver_at_once() {
    for stop in [true, false] {
        let (l, addr) = listener().await;
        let (go, mut sends) = tokio::sync::mpsc::unbounded_channel::<&'static [u8]>();
        let peer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt as _;
            let (mut sock, _, negotiated) =
                common::fake_responder(l, mpa::MpaConfig::default()).await;
            let mut framer = mpa::Framer::from_negotiated(&negotiated);
            let mut msn = 0;
            while let Some(m) = sends.recv().await {
                msn += 1;
                let mut out = bytes::BytesMut::new();
                rdmap::testing::send_fpdu(&mut framer, msn, m, &mut out);
                sock.write_all(&out).await.expect("write a Send");
            }
            sock
        });
        let engine = Engine::new(EngineConfig::default());
        let (pd, cq) = (engine.alloc_pd(), Cq::new(8));
        let (qp, _) = engine
            .connect(addr, QpInit::new(pd, &cq), b"")
            .await
            .expect("connect");
        let stag = engine
            .tpt()
            .register(
                pd,
                vec![0; 192],
                offload_engine::tpt::Base::ZeroBased,
                rdmap::Access::LOCAL_WRITE,
            )
            .expect("register");
        for i in 0..3u64 {
            qp.post_recv(rdmap::RecvWr {
                wr_id: i,
                sgl: [rdmap::Sge {
                    stag,
                    to: i * 64,
                    len: 64,
                }]
                .into(),
            })
            .expect("post_recv");
        }
        // The driver reads a first message; then a poll (nothing there), and a message
        // the driver reads: at that turn it sees the poll and leaves reading to the poller.
        go.send(b"zero").expect("peer");
        assert_eq!(cq.next().await.expect("cq").wc.wr_id, 0);
        assert!(!qp.poll_input());
        go.send(b"first").expect("peer");
        assert_eq!(cq.next().await.expect("cq").wc.wr_id, 1);
        if stop {
            qp.stop_polling();
        }
        let at = Instant::now();
        go.send(b"second").expect("peer");
        assert_eq!(cq.next().await.expect("cq").wc.wr_id, 2);
        let waited = at.elapsed();
        if stop {
            assert_eq!(waited, Duration::ZERO, "read at once after stop_polling");
        } else {
            assert!(
                waited >= Duration::from_millis(1),
                "without stop_polling the driver waits out the poller's millisecond \
                 ({waited:?}): the case above proves nothing if this does not hold"
            );
        }
        drop(go);
        drop(peer.await);
    }
}
