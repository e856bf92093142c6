//! The engine reads one clock, tokio's: its timers run in paused time, so timeouts of
//! seconds are tested in no time at all, and exactly.

use std::net::SocketAddr;
use std::time::Duration;

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
    assert!(matches!(err, ConnectError::Mpa(_)), "{err}");
    assert!(err.to_string().contains("timed out"), "{err}");
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
