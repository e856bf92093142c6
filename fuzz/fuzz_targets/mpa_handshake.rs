//! `mpa::Handshake` on arbitrary peer frames, for both roles.
//!
//! Input: octet 0 = TCP read size ([`iwarp_fuzz::chunk_size`]); octet 1 = local settings
//! (bit 0 revision 1, bit 1 CRC, bit 2 markers, bit 3 peer-to-peer, bits 4-6 RTR types,
//! bit 7 IRD/ORD "no negotiation"); the rest is what the peer sends.
//!
//! * A Responder takes the input as the Request and accepts any valid Request. Its Reply
//!   is then checked end to end: an Initiator configured from what the Request said
//!   re-sends it to a fresh Responder (same Request seen, same Reply bytes), then takes
//!   the Reply and must agree with the Responder on the FPDU-mode settings.
//! * An Initiator takes the input as the Reply.
//! * The input is also parsed as a frame and, if valid, re-emitted and re-parsed.
//!
//! Both roles: never panic, never consume more than one frame (20 + 512 octets), consume
//! exactly 20 + PD_Length octets or nothing, and leave the rest of the input untouched.
#![no_main]

use std::time::Instant;

use bytes::BytesMut;
use iwarp_fuzz::{chunk_size, take_byte};
use libfuzzer_sys::fuzz_target;
use mpa::wire::enhanced::NO_NEGOTIATION;
use mpa::wire::frame::{FrameKind, FrameRepr, HEADER_LEN, Packet};
use mpa::{
    Handshake, HandshakeEvent, MAX_PRIVATE_DATA, MpaConfig, MpaError, Negotiated, PeerParams, Role,
    RtrFlags,
};

fuzz_target!(|data: &[u8]| {
    let (sel, rest) = take_byte(data);
    let (settings, input) = take_byte(rest);
    let chunk = chunk_size(sel);
    let now = Instant::now();
    frame_round_trip(input);

    let cfg = config(Role::Responder, settings);
    let mut resp = Handshake::responder(cfg.clone(), now);
    drive(&mut resp, input, chunk, now, |hs, ev| {
        if let HandshakeEvent::Request(peer) = ev {
            hs.accept(b"").expect("accept after a Request");
            let mut reply = BytesMut::new();
            assert!(hs.poll_transmit(&mut reply), "no Reply after accept");
            let Some(HandshakeEvent::Established { negotiated, .. }) = hs.poll_event() else {
                panic!("accept did not establish");
            };
            check_reply(&reply, &negotiated);
            replay(&cfg, &peer, &reply, &negotiated, now);
        }
    });

    let init_cfg = config(Role::Initiator, settings);
    let mut init = Handshake::initiator(init_cfg, b"", now).expect("initiator");
    let mut request = BytesMut::new();
    assert!(init.poll_transmit(&mut request));
    drive(&mut init, input, chunk, now, |_, ev| {
        assert!(
            !matches!(ev, HandshakeEvent::Request(_)),
            "Initiator saw a Request"
        );
    });
});

fn config(role: Role, b: u8) -> MpaConfig {
    let mut cfg = MpaConfig::for_role(role);
    cfg.rev = if b & 0x01 != 0 { 1 } else { 2 };
    cfg.crc = b & 0x02 != 0;
    cfg.markers = b & 0x04 != 0;
    cfg.p2p = b & 0x08 != 0;
    cfg.rtr = RtrFlags::from_bits_truncate(b >> 4);
    if b & 0x80 != 0 {
        cfg.ird = NO_NEGOTIATION;
        cfg.ord = NO_NEGOTIATION;
    }
    cfg
}

/// Feeds `input` in `chunk`-sized reads, checking what is consumed after every read and
/// handing every event to `on_event`.
fn drive(
    hs: &mut Handshake,
    input: &[u8],
    chunk: usize,
    now: Instant,
    mut on_event: impl FnMut(&mut Handshake, HandshakeEvent),
) {
    let frame_len = input
        .get(18..20)
        .map(|b| HEADER_LEN + usize::from(u16::from_be_bytes([b[0], b[1]])));
    let mut rx = BytesMut::new();
    let mut fed = 0;
    let mut sink = BytesMut::new();
    for piece in input.chunks(chunk) {
        rx.extend_from_slice(piece);
        fed += piece.len();
        hs.handle_input(&mut rx, now);
        let consumed = fed - rx.len();
        assert!(
            consumed <= HEADER_LEN + MAX_PRIVATE_DATA,
            "consumed {consumed}"
        );
        assert!(
            consumed == 0 || Some(consumed) == frame_len,
            "consumed {consumed}"
        );
        assert_eq!(&rx[..], &input[consumed..fed], "unconsumed bytes changed");
        while let Some(ev) = hs.poll_event() {
            if let HandshakeEvent::Request(p) | HandshakeEvent::Rejected { peer: p, .. } = &ev {
                let block = if p.enhanced { 4 } else { 0 };
                assert_eq!(Some(HEADER_LEN + block + p.private_data.len()), frame_len);
            }
            on_event(hs, ev);
        }
        let _ = hs.poll_transmit(&mut sink);
    }
    let _ = hs.poll_event();
}

/// The input as a frame: parse, emit, parse again.
fn frame_round_trip(input: &[u8]) {
    let Ok(repr) = FrameRepr::parse(&Packet::new_unchecked(input)) else {
        return;
    };
    assert!(repr.pd_length() <= MAX_PRIVATE_DATA);
    let mut buf = vec![0xa5; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
    let again = FrameRepr::parse(&Packet::new_unchecked(&buf[..])).expect("re-parse");
    assert_eq!(again, repr);
    assert_eq!(&buf[..16], &input[..16], "key");
    assert_eq!(
        &buf[HEADER_LEN..],
        &input[HEADER_LEN..repr.buffer_len()],
        "private data"
    );
}

/// Our Reply is a valid Reply frame that says what we negotiated.
fn check_reply(reply: &[u8], n: &Negotiated) {
    let repr = FrameRepr::parse(&Packet::new_unchecked(reply)).expect("our Reply parses");
    assert_eq!(repr.kind, FrameKind::Reply);
    assert_eq!(repr.buffer_len(), reply.len());
    assert!(!repr.reject);
    assert_eq!(repr.crc, n.crc);
    assert_eq!(repr.markers, n.markers_rx);
    assert_eq!(repr.enhanced.is_some(), n.rev == 2);
}

/// An Initiator configured from what the fuzzed Request said replays it: a fresh Responder
/// must see the same Request and send the same Reply, and both ends must agree.
fn replay(cfg: &MpaConfig, peer: &PeerParams, reply: &[u8], nr: &Negotiated, now: Instant) {
    if peer.rev == 2 && !peer.enhanced {
        // A Rev 2 Request without the block: our Initiator always sends it at Rev 2.
        return;
    }
    let mut ic = MpaConfig::for_role(Role::Initiator);
    ic.rev = peer.rev;
    ic.crc = peer.crc;
    ic.markers = peer.markers;
    ic.p2p = peer.p2p;
    ic.rtr = peer.rtr;
    if let (Some(ird), Some(ord)) = (peer.ird, peer.ord) {
        ic.ird = ird;
        ic.ord = ord;
    }
    let mut init = Handshake::initiator(ic, &peer.private_data, now).expect("replay initiator");
    let mut req = BytesMut::new();
    assert!(init.poll_transmit(&mut req));
    let mut resp = Handshake::responder(cfg.clone(), now);
    resp.handle_input(&mut req, now);
    assert!(req.is_empty(), "replayed Request not consumed");
    match resp.poll_event() {
        Some(HandshakeEvent::Request(p)) => assert_eq!(&p, peer, "replayed Request differs"),
        other => panic!("replayed Request: {other:?}"),
    }
    resp.accept(b"").expect("accept");
    let mut reply2 = BytesMut::new();
    assert!(resp.poll_transmit(&mut reply2));
    assert_eq!(&reply2[..], reply, "same Request, different Reply");

    init.handle_input(&mut reply2, now);
    assert!(reply2.is_empty(), "Reply not consumed");
    let ni = match init.poll_event() {
        Some(HandshakeEvent::Established { negotiated, .. }) => negotiated,
        Some(HandshakeEvent::Failed {
            error: MpaError::NoMatchingRtr | MpaError::InsufficientIrd,
            negotiated: Some(negotiated),
        }) => negotiated,
        other => panic!("Initiator on our Reply: {other:?}"),
    };
    assert_eq!(ni.role, Role::Initiator);
    assert_eq!(nr.role, Role::Responder);
    assert_eq!(ni.rev, nr.rev, "rev");
    assert_eq!(ni.crc, nr.crc, "crc");
    assert_eq!(ni.markers_tx, nr.markers_rx, "markers i->r");
    assert_eq!(ni.markers_rx, nr.markers_tx, "markers r->i");
    assert_eq!(ni.p2p, nr.p2p, "p2p");
    if ni.p2p && !ni.rtr.is_empty() {
        assert!(ni.rtr.single().is_some(), "Initiator RTR {:?}", ni.rtr);
        assert!(
            nr.rtr.contains(ni.rtr),
            "RTR {:?} not in {:?}",
            ni.rtr,
            nr.rtr
        );
    }
    if ni.ord != NO_NEGOTIATION && nr.ird != NO_NEGOTIATION {
        assert!(
            ni.ord <= nr.ird,
            "Initiator ORD {} > Responder IRD {}",
            ni.ord,
            nr.ird
        );
    }
}
