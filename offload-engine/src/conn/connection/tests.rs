//! The inline transmit's claim on a real socket pair: while a posting thread writes what
//! it produced with the lock released, nobody else produces or writes, and what it hands
//! back goes out next, in order.

use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use mpa::{Handshake, HandshakeEvent, MpaConfig, Negotiated};
use rdmap::testing::VecMemory;
use rdmap::{Payload, QpNum, SendFlags, SendOp, SendWr, Stream, StreamConfig, Transmit};

use super::{Connection, Home, Next, TX_HIGH_WATER};
use crate::conn::io::{send_now, write_unlocked};
use crate::pcap::Tap;

/// The initiator's settings of an MPA exchange run in memory with default configs.
fn negotiated() -> Negotiated {
    let now = Instant::now();
    let mut hi = Handshake::initiator(MpaConfig::default(), b"", now).expect("initiator");
    let mut hr = Handshake::responder(MpaConfig::default(), now);
    let (mut to_r, mut to_i) = (BytesMut::new(), BytesMut::new());
    for _ in 0..4 {
        let _ = hi.poll_transmit(&mut to_r);
        hr.handle_input(&mut to_r, now);
        while let Some(ev) = hr.poll_event() {
            if let HandshakeEvent::Request(_) = ev {
                hr.accept(b"").expect("accept");
            }
        }
        let _ = hr.poll_transmit(&mut to_i);
        hi.handle_input(&mut to_i, now);
        while let Some(ev) = hi.poll_event() {
            if let HandshakeEvent::Established { negotiated, .. } = ev {
                return negotiated;
            }
        }
    }
    panic!("the handshake did not finish");
}

fn send(wr_id: u64, data: &'static [u8]) -> SendWr {
    SendWr {
        wr_id,
        op: SendOp::Send {
            data: Payload::Bytes(Bytes::from_static(data)),
            invalidate: None,
            immediate: None,
        },
        flags: SendFlags::SIGNALED,
    }
}

/// A connection on one end of a loopback socket pair, and the other end.
fn connected() -> (Connection, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let ours = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (theirs, _) = listener.accept().unwrap();
    ours.set_nonblocking(true).unwrap();
    let home = Home {
        tpt: Arc::default(),
        push: None,
        timeouts: Default::default(),
        totals: Arc::default(),
        busy_poll: Duration::ZERO,
    };
    let stream = Stream::new(StreamConfig::default(), &negotiated());
    let conn = Connection::start(
        QpNum(1),
        (stream, Box::new(VecMemory::new())),
        (Arc::new(ours), Tap::off()),
        BytesMut::new(),
        (home, None),
    );
    (conn, theirs)
}

#[test]
fn while_a_post_writes_outside_the_lock_nobody_else_sends() {
    let (mut st, mut peer) = connected();
    let Ok(Next::Write(mut first)) = st.post_send(send(1, b"first message")) else {
        panic!("a lone small Send on an idle queue pair is written by its poster");
    };
    // The lock is free now (the poster writes without it): everyone else keeps off the wire.
    assert!(matches!(
        st.post_send(send(2, b"second message")),
        Ok(Next::Driver)
    ));
    let mut out = Transmit::new();
    st.step(&mut out, TX_HIGH_WATER, false);
    assert!(out.is_empty(), "the driver produced while the poster wrote");
    assert!(st.tx_backlog());
    assert!(
        st.take_park(&mut out, false).is_none() && st.tx_claimed,
        "nothing to park for, and the claim stays"
    );
    let moved = st.moved();
    assert!(!st.stalled_since(moved), "a claimed write is progress");
    first.write();
    assert!(
        st.inline_written(first),
        "the second Send waits for the driver"
    );
    assert!(!st.tx_claimed && st.unwritten.is_empty());
    assert!(st.moved() > moved && st.stalled_since(st.moved()));
    // The driver's turn sends the second, after the first.
    st.step(&mut out, TX_HIGH_WATER, false);
    assert!(!out.is_empty());
    let sock = st.io.socket().unwrap();
    while !out.is_empty() {
        write_unlocked(|s| send_now(&sock, s), &mut out, None).unwrap();
    }
    let mut got = Vec::new();
    let mut buf = [0; 4096];
    while !got.windows(14).any(|w| w == b"second message") {
        let n = peer.read(&mut buf).unwrap();
        assert!(n > 0, "the connection closed");
        got.extend_from_slice(&buf[..n]);
    }
    let at = |m: &[u8]| got.windows(m.len()).position(|w| w == m).unwrap();
    assert!(at(b"first message") < at(b"second message"));
}

#[test]
fn the_peers_fin_waits_for_a_claimed_write_to_be_accounted() {
    let (mut st, peer) = connected();
    let Ok(Next::Write(mut first)) = st.post_send(send(1, b"last message")) else {
        panic!("a lone small Send on an idle queue pair is written by its poster");
    };
    first.write();
    // The peer reads it and leaves before the poster hands the write back.
    let mut buf = [0; 256];
    let _ = (&peer).read(&mut buf).unwrap();
    peer.shutdown(std::net::Shutdown::Both).unwrap();
    let sock = st.io.socket().unwrap();
    let mut input = st.claim_input().unwrap();
    let read = loop {
        match crate::conn::io::read_unlocked(&sock, &mut input) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            read => break read,
        }
    };
    assert_eq!(st.return_input(input, read).unwrap(), super::Read::Eof);
    let mut out = Transmit::new();
    let now = st.step(&mut out, TX_HIGH_WATER, false);
    let waits = st.waits(now, now, false);
    assert!(
        waits.eof && waits.claimed && !st.is_done(),
        "the driver stays for the claim"
    );
    assert!(
        st.ready.is_empty(),
        "the Send was flushed while its octets were out"
    );
    assert!(st.inline_written(first), "the driver looks again");
    st.step(&mut out, TX_HIGH_WATER, false);
    let sent: Vec<_> = st.ready.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(sent, [(1, rdmap::WcStatus::Success)]);
    assert!(st.is_done());
}
