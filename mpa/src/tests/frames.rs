//! Handshake against raw frames: §5.3 frames byte for byte, §5.7 negatives, leftovers.

use std::time::Instant;

use bytes::BytesMut;

use super::handshake::{cfg, established};
use super::util::hex;
use crate::wire::enhanced::NO_NEGOTIATION;
use crate::{Deframer, Handshake, HandshakeEvent, MpaConfig, MpaError, Role, RtrFlags};

/// Feeds `bytes` to a fresh Responder one octet at a time; returns the event.
fn responder_gets(bytes: &[u8]) -> Option<HandshakeEvent> {
    let now = Instant::now();
    let mut h = Handshake::responder(cfg(), now);
    let mut rx = BytesMut::new();
    for b in bytes {
        rx.extend_from_slice(&[*b]);
        h.handle_input(&mut rx, now);
        if let Some(ev) = h.poll_event() {
            return Some(ev);
        }
    }
    None
}

fn is_invalid(ev: Option<HandshakeEvent>) -> bool {
    matches!(
        ev,
        Some(HandshakeEvent::Failed {
            error: MpaError::InvalidFrame(_),
            negotiated: None
        })
    )
}

#[test]
fn malformed_frames() {
    let v1_hello =
        hex("4d 50 41 20 49 44 20 52 65 71 20 46 72 61 6d 65 40 01 00 05 68 65 6c 6c 6f");
    assert!(matches!(
        responder_gets(&v1_hello),
        Some(HandshakeEvent::Request(_))
    ));
    // PD_Length 513: rejected as soon as the 20-octet header is there.
    let mut pd513 = v1_hello[..20].to_vec();
    pd513[18..20].copy_from_slice(&513u16.to_be_bytes());
    assert!(is_invalid(responder_gets(&pd513)));
    // Rev 3 and Rev 0.
    for rev in [0, 3] {
        let mut bad = v1_hello.clone();
        bad[17] = rev;
        assert!(is_invalid(responder_gets(&bad)), "rev {rev}");
    }
    // A Reply key at the Responder, a garbage key.
    let mut rep = v1_hello.clone();
    rep[9] = b'p';
    assert!(is_invalid(responder_gets(&rep)));
    let mut garbage = v1_hello.clone();
    garbage[0] = b'X';
    let not_mpa = |ev: Option<HandshakeEvent>| match ev {
        Some(HandshakeEvent::Failed {
            error: e @ MpaError::NotMpa { .. },
            negotiated: None,
        }) => Some((e.code(), e.to_string())),
        _ => None,
    };
    let (code, text) = not_mpa(responder_gets(&garbage)).expect("not an MPA peer");
    assert_eq!(code, 4, "an invalid frame, on the wire");
    assert!(text.contains("it sent: \"XPA ID Req Frame\""), "{text}");
    // A web server's answer, as an Initiator sees it: printable, the rest as dots.
    let http = b"HTTP/1.1 400 Bad\r\n\r\nmore of the answer";
    let mut hs = Handshake::initiator(cfg(), b"", Instant::now()).unwrap();
    let mut out = BytesMut::new();
    while hs.poll_transmit(&mut out) {}
    hs.handle_input(&mut BytesMut::from(&http[..]), Instant::now());
    let (_, text) = not_mpa(hs.poll_event()).expect("not an MPA peer");
    assert!(text.contains("\"HTTP/1.1 400 Bad\""), "{text}");
    assert!(text.contains("not an iWARP MPA endpoint"), "{text}");
    // Res bits set (siw uses 0x08): accepted.
    let mut res = v1_hello;
    res[16] |= 0x0f;
    assert!(
        matches!(responder_gets(&res), Some(HandshakeEvent::Request(p)) if &p.private_data[..] == b"hello")
    );
    // S=1 Rev 2 with PD_Length 2.
    let short = hex("4d 50 41 20 49 44 20 52 65 71 20 46 72 61 6d 65 50 02 00 02 00 00");
    assert!(is_invalid(responder_gets(&short)));
}

#[test]
fn initiator_initiator() {
    let now = Instant::now();
    let mut a = Handshake::initiator(cfg(), b"", now).unwrap();
    let mut b = Handshake::initiator(cfg(), b"", now).unwrap();
    let (mut ab, mut ba) = (BytesMut::new(), BytesMut::new());
    assert!(a.poll_transmit(&mut ab) && b.poll_transmit(&mut ba));
    a.handle_input(&mut ba, now);
    b.handle_input(&mut ab, now);
    for h in [&mut a, &mut b] {
        match h.poll_event() {
            Some(HandshakeEvent::Failed {
                error,
                negotiated: None,
            }) => {
                assert!(
                    matches!(error, MpaError::InvalidFrame(why) if why.contains("Initiator/Initiator"))
                );
                assert_eq!(error.code(), 4);
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn reply_with_following_fpdu_bytes_leaves_them() {
    let reply = hex("4d 50 41 20 49 44 20 52 65 70 20 46 72 61 6d 65 50 02 00 04 80 10 80 10");
    let fpdu = hex("00 0e c1 40 00 00 00 01 00 00 00 00 00 00 00 00 eb d3 4c 5f");
    let mut both = reply;
    both.extend_from_slice(&fpdu);
    let init_cfg = MpaConfig { p2p: true, ..cfg() };
    // In one chunk, and split at every point.
    for cut in 0..=both.len() {
        let now = Instant::now();
        let mut h = Handshake::initiator(init_cfg.clone(), b"", now).unwrap();
        let mut rx = BytesMut::from(&both[..cut]);
        h.handle_input(&mut rx, now);
        rx.extend_from_slice(&both[cut..]);
        h.handle_input(&mut rx, now);
        assert_eq!(&rx[..], &fpdu[..], "cut {cut}");
        let (n, _) = established(&[h.poll_event().unwrap()]);
        assert_eq!(n.rtr, RtrFlags::WRITE);
        // The leftover goes straight to the Deframer.
        let mut d = Deframer::from_negotiated(&n);
        assert_eq!(d.decode(&mut rx).unwrap().unwrap(), &fpdu[2..16]);
    }
}

#[test]
fn responder_rejects_data_before_reply() {
    let mut req = hex("4d 50 41 20 49 44 20 52 65 71 20 46 72 61 6d 65 40 01 00 00");
    req.extend_from_slice(&[0, 0x0e]);
    let now = Instant::now();
    // In the same chunk as the Request.
    let mut h = Handshake::responder(cfg(), now);
    let mut rx = BytesMut::from(&req[..]);
    h.handle_input(&mut rx, now);
    assert!(is_invalid(h.poll_event()));
    assert_eq!(rx.len(), 2, "the extra octets are not consumed");
    // In a later chunk, before accept().
    let mut h = Handshake::responder(cfg(), now);
    let mut rx = BytesMut::from(&req[..20]);
    h.handle_input(&mut rx, now);
    assert!(matches!(h.poll_event(), Some(HandshakeEvent::Request(_))));
    rx.extend_from_slice(&req[20..]);
    h.handle_input(&mut rx, now);
    assert!(is_invalid(h.poll_event()));
    assert_eq!(h.accept(b""), Err(MpaError::LocalCatastrophic));
}

#[test]
fn accept_without_request() {
    let mut h = Handshake::responder(cfg(), Instant::now());
    assert_eq!(h.accept(b""), Err(MpaError::LocalCatastrophic));
    assert_eq!(h.reject(b""), Err(MpaError::LocalCatastrophic));
    let mut i = Handshake::initiator(cfg(), b"", Instant::now()).unwrap();
    assert_eq!(i.accept(b""), Err(MpaError::LocalCatastrophic));
    assert_eq!(i.role(), Role::Initiator);
}

/// Runs one side and returns the frame it sends.
fn frame_of_initiator(c: MpaConfig, pd: &[u8]) -> Vec<u8> {
    let mut h = Handshake::initiator(c, pd, Instant::now()).unwrap();
    let mut out = BytesMut::new();
    assert!(h.poll_transmit(&mut out));
    assert!(!h.poll_transmit(&mut out), "sent once");
    out.to_vec()
}

fn reply_to(request: &[u8], c: MpaConfig, accept: bool) -> Vec<u8> {
    let now = Instant::now();
    let mut h = Handshake::responder(c, now);
    let mut rx = BytesMut::from(request);
    h.handle_input(&mut rx, now);
    assert!(matches!(h.poll_event(), Some(HandshakeEvent::Request(_))));
    if accept { h.accept(b"") } else { h.reject(b"") }.unwrap();
    let mut out = BytesMut::new();
    assert!(h.poll_transmit(&mut out));
    assert!(h.is_done());
    out.to_vec()
}

#[test]
fn frames_match_section_5_3() {
    let req_key = "4d 50 41 20 49 44 20 52 65 71 20 46 72 61 6d 65";
    let rep_key = "4d 50 41 20 49 44 20 52 65 70 20 46 72 61 6d 65";
    let v1 = MpaConfig { rev: 1, ..cfg() };
    let v1_hello = frame_of_initiator(v1.clone(), b"hello");
    assert_eq!(
        v1_hello,
        hex(&format!("{req_key} 40 01 00 05 68 65 6c 6c 6f"))
    );
    assert_eq!(
        frame_of_initiator(
            MpaConfig {
                markers: true,
                ..v1
            },
            b""
        ),
        hex(&format!("{req_key} c0 01 00 00"))
    );
    assert_eq!(
        reply_to(&v1_hello, cfg(), false),
        hex(&format!("{rep_key} 60 01 00 00"))
    );
    let v2_req = frame_of_initiator(MpaConfig { p2p: true, ..cfg() }, b"hello");
    assert_eq!(
        v2_req,
        hex(&format!("{req_key} 50 02 00 09 80 10 c0 10 68 65 6c 6c 6f"))
    );
    assert_eq!(
        reply_to(
            &v2_req,
            MpaConfig {
                rtr: RtrFlags::WRITE,
                ..cfg()
            },
            true
        ),
        hex(&format!("{rep_key} 50 02 00 04 80 10 80 10"))
    );
    assert_eq!(
        frame_of_initiator(
            MpaConfig {
                ird: 4,
                ord: 4,
                ..cfg()
            },
            b""
        ),
        hex(&format!("{req_key} 50 02 00 04 00 04 00 04"))
    );
    assert_eq!(
        frame_of_initiator(
            MpaConfig {
                ird: NO_NEGOTIATION,
                ord: NO_NEGOTIATION,
                ..cfg()
            },
            b""
        ),
        hex(&format!("{req_key} 50 02 00 04 3f ff 3f ff"))
    );
    // siw's default Request (flags 0x10, C=0, IRD/ORD 1/1) gets a Rev 2 Reply with the block.
    let siw = hex(&format!("{req_key} 10 02 00 04 00 01 00 01"));
    let reply = reply_to(
        &siw,
        MpaConfig {
            crc: false,
            ..cfg()
        },
        true,
    );
    assert_eq!(reply, hex(&format!("{rep_key} 10 02 00 04 00 10 00 01")));
}
