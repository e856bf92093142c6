//! Pure negotiation rules of RFC 5044 §7.1 and RFC 6581 §9 (no state, no IO).
//!
//! IRD/ORD (wire-format.md §2.3), with 0x3FFF meaning "no negotiation":
//! * Responder ORD = min(own ORD, Initiator IRD); unchanged (and 0x3FFF in the Reply) when
//!   the Initiator IRD is 0x3FFF.
//! * Responder IRD = own IRD, whatever the Initiator ORD asks: the configured IRD is a
//!   limit (it bounds the inbound Reads queued per connection), so the Initiator must
//!   lower its ORD to it (RFC 6581 §9.1). siw's "relaxed" negotiation raises its IRD to the
//!   Initiator ORD instead; doing that would let any peer size our queue. The Reply carries
//!   0x3FFF when the Initiator ORD is 0x3FFF. Raised to 1 when a Read RTR is selected and it
//!   is 0 (the one raise the RFC allows).
//! * Initiator ORD = min(own ORD, Responder IRD), unchanged when the Reply says 0x3FFF.
//! * Initiator IRD stays as configured; if it is below the Responder ORD (neither being
//!   0x3FFF) the result is [`MpaError::InsufficientIrd`] (Terminate code 6).
//!
//! RTR (wire-format.md §2.4): the Responder copies A and selects exactly one type: the
//! most preferred (Write, Read, Send) of those offered that it accepts, or, when none is
//! acceptable, the most preferred type it supports. The Initiator then picks the most
//! preferred of the Responder's types that it can generate; none is
//! [`MpaError::NoMatchingRtr`] (code 7).

use crate::wire::enhanced::{EnhancedRepr, NO_NEGOTIATION};
use crate::{MpaConfig, MpaError, Negotiated, PeerParams, Role, RtrFlags};

/// What the Responder puts in its Reply, and the settings it will use.
#[derive(Debug)]
pub(crate) struct ResponderPlan {
    /// The enhanced block of the Reply (`None`: Rev 1 Reply without the block).
    pub(crate) block: Option<EnhancedRepr>,
    /// C bit of the Reply.
    pub(crate) crc: bool,
    /// The settings after a successful Reply.
    pub(crate) negotiated: Negotiated,
}

/// Computes the Responder's Reply to `req` (accept case).
pub(crate) fn responder(cfg: &MpaConfig, req: &PeerParams) -> ResponderPlan {
    let crc = cfg.crc || req.crc;
    let base = Negotiated {
        rev: 1,
        crc,
        markers_tx: req.markers,
        markers_rx: cfg.markers,
        ird: cfg.ird,
        ord: cfg.ord,
        peer_ird: NO_NEGOTIATION,
        peer_ord: NO_NEGOTIATION,
        p2p: false,
        rtr: RtrFlags::NONE,
        role: Role::Responder,
        large_fpdus: cfg.large_fpdus && req.large_fpdus,
        extensions: cfg.extensions & req.extensions,
    };
    let (Some(peer_ird), Some(peer_ord)) = (req.ird, req.ord) else {
        return ResponderPlan {
            block: None,
            crc,
            negotiated: base,
        };
    };
    let (ord, ord_field) = if peer_ird == NO_NEGOTIATION {
        (cfg.ord, NO_NEGOTIATION)
    } else {
        let ord = cfg.ord.min(peer_ird);
        (ord, ord)
    };
    let (mut ird, mut ird_field) = if peer_ord == NO_NEGOTIATION {
        (cfg.ird, NO_NEGOTIATION)
    } else {
        (cfg.ird, cfg.ird)
    };
    let rtr = if req.p2p {
        responder_rtr(cfg.rtr, req.rtr)
    } else {
        RtrFlags::NONE
    };
    if rtr.contains(RtrFlags::READ) && ird == 0 {
        // RFC 6581 §9.1: the Responder MAY raise its IRD so that a Read RTR works.
        ird = 1;
        ird_field = 1;
    }
    let block = EnhancedRepr {
        p2p: req.p2p,
        rtr,
        ird: ird_field,
        ord: ord_field,
    };
    let negotiated = Negotiated {
        rev: 2,
        ird,
        ord,
        peer_ird,
        peer_ord,
        p2p: req.p2p,
        rtr,
        ..base
    };
    ResponderPlan {
        block: Some(block),
        crc,
        negotiated,
    }
}

/// The one RTR type a Responder selects. An empty `accepts` counts as `WRITE`.
fn responder_rtr(accepts: RtrFlags, offered: RtrFlags) -> RtrFlags {
    let accepts = if accepts.is_empty() {
        RtrFlags::WRITE
    } else {
        accepts
    };
    (accepts & offered)
        .preferred()
        .or_else(|| accepts.preferred())
        .map_or(RtrFlags::WRITE, RtrFlags::from)
}

/// The enhanced block of a rejecting Reply: A copied, no RTR, our own IRD/ORD.
pub(crate) fn reject_block(cfg: &MpaConfig, req: &PeerParams) -> Option<EnhancedRepr> {
    req.enhanced.then_some(EnhancedRepr {
        p2p: req.p2p,
        rtr: RtrFlags::NONE,
        ird: cfg.ird,
        ord: cfg.ord,
    })
}

/// The Initiator's settings after an accepting Reply. On failure the settings are returned
/// too: FPDU mode is entered and a Terminate with the error's code must be sent.
pub(crate) fn initiator(
    cfg: &MpaConfig,
    sent_block: bool,
    rep: &PeerParams,
) -> Result<Negotiated, (MpaError, Negotiated)> {
    let mut n = Negotiated {
        rev: 1,
        crc: cfg.crc || rep.crc,
        markers_tx: rep.markers,
        markers_rx: cfg.markers,
        ird: cfg.ird,
        ord: cfg.ord,
        peer_ird: NO_NEGOTIATION,
        peer_ord: NO_NEGOTIATION,
        p2p: false,
        rtr: RtrFlags::NONE,
        role: Role::Initiator,
        large_fpdus: cfg.large_fpdus && rep.large_fpdus,
        extensions: cfg.extensions & rep.extensions,
    };
    let (Some(peer_ird), Some(peer_ord)) = (rep.ird, rep.ord) else {
        return Ok(n);
    };
    debug_assert!(sent_block);
    n.rev = 2;
    n.peer_ird = peer_ird;
    n.peer_ord = peer_ord;
    if peer_ird != NO_NEGOTIATION {
        n.ord = cfg.ord.min(peer_ird);
    }
    n.p2p = cfg.p2p && rep.p2p;
    if peer_ord != NO_NEGOTIATION && cfg.ird != NO_NEGOTIATION && peer_ord > cfg.ird {
        return Err((MpaError::InsufficientIrd, n));
    }
    if n.p2p {
        match (rep.rtr & cfg.rtr).preferred() {
            Some(t) => n.rtr = t.into(),
            None => return Err((MpaError::NoMatchingRtr, n)),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(ird: u16, ord: u16, p2p: bool, rtr: RtrFlags) -> PeerParams {
        PeerParams {
            rev: 2,
            markers: false,
            crc: false,
            enhanced: true,
            ird: Some(ird),
            ord: Some(ord),
            p2p,
            rtr,
            large_fpdus: false,
            extensions: crate::Extensions::NONE,
            private_data: bytes::Bytes::new(),
        }
    }

    fn cfg(ird: u16, ord: u16, rtr: RtrFlags) -> MpaConfig {
        MpaConfig {
            ird,
            ord,
            rtr,
            ..MpaConfig::default()
        }
    }

    #[test]
    fn responder_ird_ord() {
        // ORD = min(own ORD, peer IRD); IRD = own IRD, however many Reads the peer asks.
        let p = responder(
            &cfg(4, 32, RtrFlags::WRITE),
            &req(8, 16, false, RtrFlags::NONE),
        );
        assert_eq!((p.negotiated.ird, p.negotiated.ord), (4, 8));
        assert_eq!(p.block.map(|b| (b.ird, b.ord)), Some((4, 8)));
        // A Request asking for ORD 16382 against IRD 0 gets IRD 0.
        let p = responder(
            &cfg(0, 16, RtrFlags::WRITE),
            &req(16, 16382, false, RtrFlags::NONE),
        );
        assert_eq!(p.negotiated.ird, 0);
        assert_eq!(p.block.map(|b| b.ird), Some(0));
        // 0x3FFF leaves the value unchanged and is echoed.
        let p = responder(
            &cfg(4, 32, RtrFlags::WRITE),
            &req(NO_NEGOTIATION, NO_NEGOTIATION, false, RtrFlags::NONE),
        );
        assert_eq!((p.negotiated.ird, p.negotiated.ord), (4, 32));
        assert_eq!(
            p.block.map(|b| (b.ird, b.ord)),
            Some((NO_NEGOTIATION, NO_NEGOTIATION))
        );
        assert_eq!(
            (p.negotiated.peer_ird, p.negotiated.peer_ord),
            (NO_NEGOTIATION, NO_NEGOTIATION)
        );
    }

    #[test]
    fn responder_rtr_choice() {
        let all = RtrFlags::ALL;
        let pick = |accepts, offered| {
            responder(&cfg(1, 1, accepts), &req(1, 1, true, offered))
                .negotiated
                .rtr
        };
        assert_eq!(pick(all, all), RtrFlags::WRITE);
        assert_eq!(pick(all, RtrFlags::READ | RtrFlags::SEND), RtrFlags::READ);
        assert_eq!(pick(all, RtrFlags::SEND), RtrFlags::SEND);
        // Send is not accepted: pick one we support although not offered.
        assert_eq!(
            pick(RtrFlags::WRITE | RtrFlags::READ, RtrFlags::SEND),
            RtrFlags::WRITE
        );
        assert_eq!(pick(RtrFlags::READ, RtrFlags::WRITE), RtrFlags::READ);
        assert_eq!(pick(RtrFlags::NONE, RtrFlags::READ), RtrFlags::WRITE);
        // Client-server: no RTR even if flags were (wrongly) set.
        let p = responder(&cfg(1, 1, all), &req(1, 1, false, all));
        assert!(p.negotiated.rtr.is_empty() && !p.negotiated.p2p);
    }

    #[test]
    fn responder_raises_ird_for_read_rtr() {
        let p = responder(&cfg(0, 0, RtrFlags::READ), &req(0, 0, true, RtrFlags::READ));
        assert_eq!(p.negotiated.ird, 1);
        assert_eq!(p.block.map(|b| b.ird), Some(1));
    }

    #[test]
    fn initiator_rules() {
        let c = MpaConfig {
            p2p: true,
            ..cfg(8, 32, RtrFlags::WRITE | RtrFlags::READ)
        };
        let n = initiator(&c, true, &req(16, 8, true, RtrFlags::READ)).unwrap();
        assert_eq!((n.ird, n.ord, n.rtr), (8, 16, RtrFlags::READ));
        assert_eq!(
            initiator(&c, true, &req(16, 9, true, RtrFlags::READ))
                .unwrap_err()
                .0,
            MpaError::InsufficientIrd
        );
        assert_eq!(
            initiator(&c, true, &req(16, 8, true, RtrFlags::SEND))
                .unwrap_err()
                .0,
            MpaError::NoMatchingRtr
        );
        let n = initiator(
            &c,
            true,
            &req(NO_NEGOTIATION, NO_NEGOTIATION, true, RtrFlags::ALL),
        )
        .unwrap();
        assert_eq!((n.ird, n.ord, n.rtr), (8, 32, RtrFlags::WRITE));
    }
}
