//! A hand-run MPA peer for tests that need a socket the engine does not drive.
#![allow(dead_code)]

pub(crate) mod hosts;

use bytes::BytesMut;
use mpa::{Handshake, HandshakeEvent, MpaConfig, Negotiated};
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Accepts one connection and runs the MPA responder (settings `cfg`) on it; returns the
/// socket, the octets read past the Request, and the negotiated settings.
pub(crate) async fn fake_responder(
    listener: TcpListener,
    cfg: MpaConfig,
) -> (TcpStream, BytesMut, Negotiated) {
    let (mut sock, _) = listener.accept().await.expect("accept");
    let mut hs = Handshake::responder(cfg, Instant::now());
    let mut rx = BytesMut::new();
    loop {
        let mut out = BytesMut::new();
        while hs.poll_transmit(&mut out) {}
        sock.write_all(&out).await.expect("write MPA Reply");
        while let Some(ev) = hs.poll_event() {
            match ev {
                HandshakeEvent::Request(_) => hs.accept(b"").expect("accept the Request"),
                HandshakeEvent::Established { negotiated, .. } => {
                    let mut out = BytesMut::new();
                    while hs.poll_transmit(&mut out) {}
                    sock.write_all(&out).await.expect("write MPA Reply");
                    return (sock, rx, negotiated);
                }
                other => panic!("responder handshake: {other:?}"),
            }
        }
        let n = sock.read_buf(&mut rx).await.expect("read the Request");
        assert!(n > 0, "the initiator closed during MPA");
        hs.handle_input(&mut rx, Instant::now());
    }
}
