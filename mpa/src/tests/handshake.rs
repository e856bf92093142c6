//! Handshake behaviour: pairs under random chunking, §5.3 frames, §5.7 negatives.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use super::pair::{Pair, Policy};
use super::util::hex;
use crate::wire::enhanced::NO_NEGOTIATION;
use crate::wire::frame::{self, FrameKind, FrameRepr};
use crate::{
    Deframer, Extensions, Framer, Handshake, HandshakeEvent, MpaConfig, MpaError, Negotiated, Role,
    RtrFlags,
};

/// The defaults without this stack's extensions: what a standard peer sends (the
/// literal frames of wire-format.md §5.3). The extension tests turn them on.
pub(crate) fn cfg() -> MpaConfig {
    MpaConfig {
        extensions: Extensions::NONE,
        ..MpaConfig::default()
    }
}

/// Runs the pair under several seeds and chunk sizes; every run must give the same events
/// and leave the same bytes. Returns the events of one run.
fn run(
    init: MpaConfig,
    init_pd: &[u8],
    resp: MpaConfig,
    policy: Policy,
) -> (Vec<HandshakeEvent>, Vec<HandshakeEvent>) {
    let mut first = None;
    for (seed, max_chunk) in [(1, 1), (2, 3), (3, 7), (4, 20), (5, 64), (6, 1000)] {
        let mut p = Pair::new(init.clone(), init_pd, resp.clone(), seed, max_chunk);
        p.policy = policy.clone();
        p.drive();
        if !matches!(p.outcome(), (_, Some(HandshakeEvent::Failed { .. }))) {
            assert!(
                p.init_rx.is_empty() && p.resp_rx.is_empty(),
                "bytes left over"
            );
        }
        let got = (p.init_events, p.resp_events);
        match &first {
            None => first = Some(got),
            Some(f) => assert_eq!(
                f, &got,
                "chunking changed the outcome (max chunk {max_chunk})"
            ),
        }
    }
    first.unwrap_or_default()
}

pub(crate) fn established(events: &[HandshakeEvent]) -> (Negotiated, Bytes) {
    match events.last() {
        Some(HandshakeEvent::Established {
            negotiated,
            private_data,
        }) => (negotiated.clone(), private_data.clone()),
        other => panic!("not established: {other:?}"),
    }
}

fn both_established(init: MpaConfig, resp: MpaConfig) -> (Negotiated, Negotiated) {
    let (i, r) = run(init, b"", resp, Policy::Accept(Vec::new()));
    (established(&i).0, established(&r).0)
}

#[test]
fn rev2_default_with_private_data() {
    let (i, r) = run(
        cfg(),
        b"from initiator",
        cfg(),
        Policy::Accept(b"from responder".to_vec()),
    );
    let HandshakeEvent::Request(peer) = &r[0] else {
        panic!("{r:?}")
    };
    assert_eq!(
        (peer.rev, peer.enhanced, peer.ird, peer.ord),
        (2, true, Some(16), Some(16))
    );
    assert_eq!(&peer.private_data[..], b"from initiator");
    let (ni, pdi) = established(&i);
    let (nr, pdr) = established(&r);
    assert_eq!(&pdi[..], b"from responder");
    assert_eq!(&pdr[..], b"from initiator");
    for (n, role) in [(&ni, Role::Initiator), (&nr, Role::Responder)] {
        assert_eq!(n.role, role);
        assert_eq!(
            (n.rev, n.crc, n.markers_tx, n.markers_rx, n.p2p),
            (2, true, false, false, false)
        );
        assert_eq!((n.ird, n.ord, n.peer_ird, n.peer_ord), (16, 16, 16, 16));
        assert!(n.rtr.is_empty());
    }
}

#[test]
fn rev1_initiator_gets_rev1_reply() {
    let (ni, nr) = both_established(MpaConfig { rev: 1, ..cfg() }, cfg());
    for n in [&ni, &nr] {
        assert_eq!(n.rev, 1);
        assert_eq!((n.peer_ird, n.peer_ord), (NO_NEGOTIATION, NO_NEGOTIATION));
        assert_eq!((n.ird, n.ord), (16, 16));
    }
}

#[test]
fn rev2_request_to_rfc5044_responder_fails() {
    let (i, r) = run(
        cfg(),
        b"",
        MpaConfig { rev: 1, ..cfg() },
        Policy::Accept(Vec::new()),
    );
    assert!(
        i.is_empty(),
        "the Initiator hears nothing and times out later: {i:?}"
    );
    assert!(matches!(
        r[..],
        [HandshakeEvent::Failed {
            error: MpaError::InvalidFrame(_),
            negotiated: None
        }]
    ));
    // Retrying with Rev 1 works (RFC 6581 §10).
    let (ni, _) = both_established(MpaConfig { rev: 1, ..cfg() }, MpaConfig { rev: 1, ..cfg() });
    assert_eq!(ni.rev, 1);
}

#[test]
fn crc_on_if_either_side_asks() {
    for (a, b) in [(true, true), (true, false), (false, true), (false, false)] {
        for rev in [1, 2] {
            let (ni, nr) = both_established(
                MpaConfig {
                    crc: a,
                    rev,
                    ..cfg()
                },
                MpaConfig {
                    crc: b,
                    rev,
                    ..cfg()
                },
            );
            assert_eq!(ni.crc, a || b, "C {a}/{b}");
            assert_eq!(nr.crc, a || b, "C {a}/{b}");
        }
    }
}

#[test]
fn markers_per_direction() {
    for (a, b) in [(true, false), (false, true), (true, true), (false, false)] {
        let (ni, nr) = both_established(
            MpaConfig {
                markers: a,
                ..cfg()
            },
            MpaConfig {
                markers: b,
                ..cfg()
            },
        );
        // M in the Request: Responder -> Initiator carries markers.
        assert_eq!((ni.markers_rx, nr.markers_tx), (a, a));
        // M in the Reply: Initiator -> Responder carries markers.
        assert_eq!((ni.markers_tx, nr.markers_rx), (b, b));
    }
}

fn p2p(offer: RtrFlags, accept: RtrFlags) -> (Vec<HandshakeEvent>, Vec<HandshakeEvent>) {
    run(
        MpaConfig {
            p2p: true,
            rtr: offer,
            ..cfg()
        },
        b"",
        MpaConfig {
            rtr: accept,
            ..cfg()
        },
        Policy::Accept(Vec::new()),
    )
}

#[test]
fn p2p_each_rtr_type() {
    for t in [RtrFlags::WRITE, RtrFlags::READ, RtrFlags::SEND] {
        let (i, r) = p2p(t, RtrFlags::ALL);
        let (ni, nr) = (established(&i).0, established(&r).0);
        assert!(ni.p2p && nr.p2p);
        assert_eq!((ni.rtr, nr.rtr), (t, t));
    }
    // Preferences: Write, then Read, then Send.
    let (i, _) = p2p(RtrFlags::ALL, RtrFlags::ALL);
    assert_eq!(established(&i).0.rtr, RtrFlags::WRITE);
    let (i, r) = p2p(RtrFlags::ALL, RtrFlags::READ | RtrFlags::SEND);
    assert_eq!(
        (established(&i).0.rtr, established(&r).0.rtr),
        (RtrFlags::READ, RtrFlags::READ)
    );
    // Client-server: no RTR.
    let (i, _) = run(cfg(), b"", cfg(), Policy::Accept(Vec::new()));
    assert!(!established(&i).0.p2p);
}

#[test]
fn p2p_no_matching_rtr() {
    // The Initiator can only send Send; the Responder refuses Send and answers Write.
    let (i, r) = p2p(RtrFlags::SEND, RtrFlags::WRITE | RtrFlags::READ);
    assert_eq!(established(&r).0.rtr, RtrFlags::WRITE);
    match i.last() {
        Some(HandshakeEvent::Failed {
            error: MpaError::NoMatchingRtr,
            negotiated: Some(n),
        }) => {
            assert!(n.p2p && n.rtr.is_empty());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(MpaError::NoMatchingRtr.code(), 7);
}

#[test]
fn reject_with_private_data() {
    let (i, r) = run(
        cfg(),
        b"hi",
        MpaConfig {
            ird: 3,
            ord: 5,
            ..cfg()
        },
        Policy::Reject(b"go away".to_vec()),
    );
    assert!(matches!(r[..], [HandshakeEvent::Request(_)]));
    match i.last() {
        Some(HandshakeEvent::Rejected { private_data, peer }) => {
            assert_eq!(&private_data[..], b"go away");
            assert_eq!((peer.ird, peer.ord), (Some(3), Some(5)));
        }
        other => panic!("{other:?}"),
    }
    // Rev 1: reject without the block.
    let (i, _) = run(
        MpaConfig { rev: 1, ..cfg() },
        b"",
        cfg(),
        Policy::Reject(Vec::new()),
    );
    assert!(
        matches!(i.last(), Some(HandshakeEvent::Rejected { peer, .. }) if peer.ird.is_none() && peer.rev == 1)
    );
}

#[test]
fn ird_ord_negotiation() {
    let (ni, nr) = both_established(
        MpaConfig {
            ird: 4,
            ord: 8,
            ..cfg()
        },
        MpaConfig {
            ird: 2,
            ord: 16,
            ..cfg()
        },
    );
    // Responder: ORD = min(16, 4); IRD stays 2, its limit, though the Initiator asks 8.
    assert_eq!((nr.ird, nr.ord, nr.peer_ird, nr.peer_ord), (2, 4, 4, 8));
    // Initiator: ORD lowered to the responder IRD, IRD >= responder ORD.
    assert_eq!((ni.ird, ni.ord, ni.peer_ird, ni.peer_ord), (4, 2, 2, 4));
    assert!(ni.ord <= nr.ird && nr.ord <= ni.ird);

    // 0x3FFF: no negotiation, values unchanged and echoed.
    let (ni, nr) = both_established(
        MpaConfig {
            ird: NO_NEGOTIATION,
            ord: NO_NEGOTIATION,
            ..cfg()
        },
        MpaConfig {
            ird: 7,
            ord: 9,
            ..cfg()
        },
    );
    assert_eq!((nr.ird, nr.ord), (7, 9));
    assert_eq!(
        (ni.ird, ni.ord, ni.peer_ird, ni.peer_ord),
        (
            NO_NEGOTIATION,
            NO_NEGOTIATION,
            NO_NEGOTIATION,
            NO_NEGOTIATION
        )
    );

    // Read RTR with IRD 0: the Responder raises its IRD to 1.
    let (ni, nr) = both_established(
        MpaConfig {
            ird: 0,
            ord: 0,
            p2p: true,
            rtr: RtrFlags::READ,
            ..cfg()
        },
        MpaConfig {
            ird: 0,
            ord: 0,
            ..cfg()
        },
    );
    assert_eq!((nr.ird, ni.peer_ird, ni.rtr), (1, 1, RtrFlags::READ));
}

/// A Reply frame as bytes.
fn reply_bytes(repr: &FrameRepr<'_>) -> Vec<u8> {
    let mut v = vec![0; repr.buffer_len()];
    repr.emit(&mut frame::Packet::new_unchecked(&mut v[..]));
    v
}

fn initiator_gets(init_cfg: MpaConfig, bytes: &[u8]) -> (Handshake, BytesMut) {
    let now = Instant::now();
    let mut h = Handshake::initiator(init_cfg, b"", now).unwrap();
    let mut out = BytesMut::new();
    assert!(h.poll_transmit(&mut out));
    let mut rx = BytesMut::from(bytes);
    h.handle_input(&mut rx, now);
    (h, rx)
}

/// One Request and one Reply by hand: the flags octet of each and both sides' outcome.
fn large_fpdus_exchange(init: bool, resp: bool) -> (u8, u8, bool, bool) {
    let now = Instant::now();
    let mut i = Handshake::initiator(
        MpaConfig {
            large_fpdus: init,
            ..cfg()
        },
        b"",
        now,
    )
    .unwrap();
    let mut r = Handshake::responder(
        MpaConfig {
            large_fpdus: resp,
            ..cfg()
        },
        now,
    );
    let mut req = BytesMut::new();
    assert!(i.poll_transmit(&mut req));
    let req_flags = req[16];
    r.handle_input(&mut req, now);
    assert!(matches!(
        r.poll_event(),
        Some(HandshakeEvent::Request { .. })
    ));
    r.accept(b"").unwrap();
    let mut rep = BytesMut::new();
    assert!(r.poll_transmit(&mut rep));
    let rep_flags = rep[16];
    i.handle_input(&mut rep, now);
    let (ni, _) = established(&[i.poll_event().unwrap()]);
    let (nr, _) = established(&[r.poll_event().unwrap()]);
    (req_flags, rep_flags, ni.large_fpdus, nr.large_fpdus)
}

#[test]
fn large_fpdus_only_when_both_frames_carry_the_bit() {
    // C=1 S=1 is 0x50; siw's bit adds 0x08.
    assert_eq!(large_fpdus_exchange(true, true), (0x58, 0x58, true, true));
    // Offered, not accepted: the Reply does not carry it, neither side uses it.
    assert_eq!(
        large_fpdus_exchange(true, false),
        (0x58, 0x50, false, false)
    );
    // Not offered: a willing Responder never sets it on its own.
    assert_eq!(
        large_fpdus_exchange(false, true),
        (0x50, 0x50, false, false)
    );
    assert_eq!(
        large_fpdus_exchange(false, false),
        (0x50, 0x50, false, false)
    );
}

#[test]
fn insufficient_ird() {
    let block = crate::wire::enhanced::EnhancedRepr {
        p2p: false,
        rtr: RtrFlags::NONE,
        ird: 16,
        ord: 32,
    };
    let rep = FrameRepr {
        kind: FrameKind::Reply,
        markers: false,
        crc: true,
        reject: false,
        large_fpdus: false,
        rev: 2,
        enhanced: Some(block),
        extensions: Extensions::NONE,
        private_data: b"",
    };
    let (mut h, rx) = initiator_gets(cfg(), &reply_bytes(&rep));
    assert!(rx.is_empty());
    match h.poll_event() {
        Some(HandshakeEvent::Failed {
            error: MpaError::InsufficientIrd,
            negotiated: Some(n),
        }) => {
            assert_eq!((n.ird, n.peer_ord), (16, 32));
            assert_eq!(MpaError::InsufficientIrd.code(), 6);
        }
        other => panic!("{other:?}"),
    }
    assert!(h.is_done());
    // ORD 0x3FFF in the Reply: IRD left alone, no failure.
    let rep = FrameRepr {
        enhanced: Some(crate::wire::enhanced::EnhancedRepr {
            ord: NO_NEGOTIATION,
            ..block
        }),
        ..rep
    };
    let (mut h, _) = initiator_gets(cfg(), &reply_bytes(&rep));
    assert!(matches!(
        h.poll_event(),
        Some(HandshakeEvent::Established { .. })
    ));
}

#[test]
fn timeouts() {
    let t0 = Instant::now();
    let mut h = Handshake::initiator(cfg(), b"", t0).unwrap();
    assert_eq!(h.poll_timeout(), Some(t0 + Duration::from_secs(10)));
    h.handle_timeout(t0 + Duration::from_secs(9));
    assert_eq!(h.poll_event(), None);
    // A partial frame does not stop the clock (§5.7: PD_Length larger than what arrives).
    let mut rx = BytesMut::from(
        &hex("4d 50 41 20 49 44 20 52 65 70 20 46 72 61 6d 65 40 01 00 05 68 65")[..],
    );
    h.handle_input(&mut rx, t0);
    assert_eq!(
        rx.len(),
        22,
        "nothing consumed before the frame is complete"
    );
    h.handle_timeout(t0 + Duration::from_secs(10));
    assert_eq!(
        h.poll_event(),
        Some(HandshakeEvent::Failed {
            error: MpaError::ConnectionLost,
            negotiated: None
        })
    );
    assert_eq!(h.poll_timeout(), None);
    assert!(!h.is_done(), "the Request was never handed out");
    assert!(h.poll_transmit(&mut BytesMut::new()));
    assert!(h.is_done());

    let mut r = Handshake::responder(MpaConfig::for_role(Role::Responder), t0);
    assert_eq!(r.poll_timeout(), Some(t0 + Duration::from_secs(5)));
    r.handle_timeout(t0 + Duration::from_secs(5));
    assert!(matches!(
        r.poll_event(),
        Some(HandshakeEvent::Failed {
            error: MpaError::ConnectionLost,
            ..
        })
    ));
    assert!(r.is_done());
    // After the Request arrived nobody waits on the clock; the ULP decides.
    let mut p = Pair::new(cfg(), b"", cfg(), 9, 5);
    p.policy = Policy::Wait;
    p.drive();
    assert_eq!(p.resp.poll_timeout(), None);
}

#[test]
fn private_data_limits() {
    let now = Instant::now();
    // 512 octets including the 4-octet block.
    assert!(Handshake::initiator(cfg(), &[0; 508], now).is_ok());
    assert!(matches!(
        Handshake::initiator(cfg(), &[0; 509], now),
        Err(MpaError::InvalidFrame(_))
    ));
    let v1 = MpaConfig { rev: 1, ..cfg() };
    assert!(Handshake::initiator(v1.clone(), &[0; 512], now).is_ok());
    assert!(Handshake::initiator(v1, &[0; 513], now).is_err());
    assert!(Handshake::initiator(MpaConfig { rev: 3, ..cfg() }, b"", now).is_err());

    // accept() with too much private data fails and can be retried.
    let mut p = Pair::new(cfg(), b"", cfg(), 1, 100);
    p.policy = Policy::Wait;
    p.drive();
    assert!(matches!(
        p.resp.accept(&[0; 509]),
        Err(MpaError::InvalidFrame(_))
    ));
    assert!(p.resp.accept(&[0; 508]).is_ok());
    p.drive();
    assert!(matches!(
        p.outcome(),
        (
            Some(HandshakeEvent::Established { .. }),
            Some(HandshakeEvent::Established { .. })
        )
    ));
}

#[test]
fn full_flow_into_fpdu_mode() {
    // Markers in both directions, CRC on, p2p Write RTR: handshake, then FPDUs both ways.
    let init_cfg = MpaConfig {
        p2p: true,
        markers: true,
        ..cfg()
    };
    let resp_cfg = MpaConfig {
        markers: true,
        ..cfg()
    };
    let mut p = Pair::new(init_cfg, b"", resp_cfg, 77, 9);
    p.drive();
    let (
        HandshakeEvent::Established { negotiated: ni, .. },
        HandshakeEvent::Established { negotiated: nr, .. },
    ) = (p.init_events[0].clone(), p.resp_events[1].clone())
    else {
        panic!("{:?} {:?}", p.init_events, p.resp_events);
    };
    let (mut itx, mut irx) = (Framer::from_negotiated(&ni), Deframer::from_negotiated(&ni));
    let (mut rtx, mut rrx) = (Framer::from_negotiated(&nr), Deframer::from_negotiated(&nr));
    let mut wire = BytesMut::new();
    let rtr = hex("c1 40 00 00 00 01 00 00 00 00 00 00 00 00");
    itx.encode(&rtr, b"", &mut wire);
    assert_eq!(&wire[..4], &[0, 0, 0, 0], "leading marker");
    let data = vec![0x5a; 3000];
    itx.encode(&[0x41, 0x43], &data, &mut wire);
    assert_eq!(&rrx.decode(&mut wire).unwrap().unwrap()[..], &rtr[..]);
    assert_eq!(&rrx.decode(&mut wire).unwrap().unwrap()[2..], &data[..]);
    let mut back = BytesMut::new();
    rtx.encode(b"reply", b"", &mut back);
    assert_eq!(&irx.decode(&mut back).unwrap().unwrap()[..], b"reply");
}

/// Both sides' agreed extensions and private data after a run with `init` and `resp`
/// offering and accepting those sets, each side sending `pd`.
fn extensions_exchange(
    init: Extensions,
    resp: Extensions,
    pd: &[u8],
) -> (Extensions, Extensions, Bytes, Bytes) {
    let (i, r) = run(
        MpaConfig {
            extensions: init,
            ..cfg()
        },
        pd,
        MpaConfig {
            extensions: resp,
            ..cfg()
        },
        Policy::Accept(pd.to_vec()),
    );
    let (ni, pi) = established(&i);
    let (nr, pr) = established(&r);
    (ni.extensions, nr.extensions, pi, pr)
}

#[test]
fn extensions_only_when_both_sides_agree() {
    let all = Extensions::ALL;
    let none = Extensions::NONE;
    let imm = Extensions::SEND_IMMEDIATE;
    let pd = b"the application's own";
    let app = Bytes::from_static(pd);
    // Both ours: on, and each side sees exactly the other's private data.
    assert_eq!(
        extensions_exchange(all, all, pd),
        (all, all, app.clone(), app.clone())
    );
    // Disabled on either side: off for both.
    assert_eq!(
        extensions_exchange(none, all, pd),
        (none, none, app.clone(), app.clone())
    );
    assert_eq!(
        extensions_exchange(all, none, pd),
        (none, none, app.clone(), app.clone())
    );
    // Partly: only what both take.
    assert_eq!(
        extensions_exchange(all, imm, pd),
        (imm, imm, app.clone(), app)
    );
    // Private data that leaves no room for the block: the application's data wins.
    let full = vec![7u8; 508];
    let (ni, nr, pi, pr) = extensions_exchange(all, all, &full);
    assert_eq!((ni, nr), (none, none));
    assert_eq!((&pi[..], &pr[..]), (&full[..], &full[..]));
}

#[test]
fn extension_offer_and_answer_octets() {
    // Our Request to anyone: C, S and the two offer bits.
    let now = Instant::now();
    let mut i = Handshake::initiator(MpaConfig::default(), b"", now).unwrap();
    let mut req = BytesMut::new();
    assert!(i.poll_transmit(&mut req));
    assert_eq!(&req[16..], &hex("56 02 00 04 00 10 00 10")[..]);
    // A standard Responder (siw) ignores the bits and answers without them: nothing is
    // agreed.
    let siw_reply = hex("4d 50 41 20 49 44 20 52 65 70 20 46 72 61 6d 65 50 02 00 04 00 10 00 10");
    let (mut h, _) = initiator_gets(MpaConfig::default(), &siw_reply);
    let (n, pd) = established(&[h.poll_event().unwrap()]);
    assert_eq!((n.extensions, pd.len()), (Extensions::NONE, 0));
    // A standard Initiator's Request (siw: flags 0x10) gets a Reply with no extension bit
    // and no block from a Responder with every extension on.
    let mut r = Handshake::responder(MpaConfig::default(), now);
    let mut siw_req = BytesMut::from(
        &hex("4d 50 41 20 49 44 20 52 65 71 20 46 72 61 6d 65 10 02 00 04 00 01 00 01")[..],
    );
    r.handle_input(&mut siw_req, now);
    assert!(matches!(r.poll_event(), Some(HandshakeEvent::Request(_))));
    r.accept(b"").unwrap();
    let mut rep = BytesMut::new();
    assert!(r.poll_transmit(&mut rep));
    assert_eq!(&rep[16..], &hex("50 02 00 04 00 10 00 01")[..]);
    let (n, _) = established(&[r.poll_event().unwrap()]);
    assert_eq!(n.extensions, Extensions::NONE);
}

#[test]
fn a_reply_cannot_agree_to_what_was_not_offered() {
    // Our Initiator offered nothing; a Reply that claims both, block and all, is ignored.
    let rep = FrameRepr {
        kind: FrameKind::Reply,
        markers: false,
        crc: true,
        reject: false,
        large_fpdus: false,
        rev: 1,
        enhanced: None,
        extensions: Extensions::ALL,
        private_data: b"",
    };
    let (mut h, _) = initiator_gets(cfg(), &reply_bytes(&rep));
    let (n, pd) = established(&[h.poll_event().unwrap()]);
    assert_eq!((n.extensions, pd.len()), (Extensions::NONE, 0));
}
