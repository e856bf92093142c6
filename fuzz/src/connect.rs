//! A real MPA Request/Reply exchange in memory, to obtain the `Negotiated` of both ends.

use std::time::Instant;

use bytes::BytesMut;
use mpa::{Handshake, HandshakeEvent, MpaConfig, Negotiated, Role, RtrFlags};

/// Connection settings decoded from one input octet.
///
/// | bit | meaning |
/// |---|---|
/// | 0 | the stream under test is the MPA Responder (else the Initiator) |
/// | 1 | CRC on |
/// | 2 | the side under test asks for markers (it receives markers) |
/// | 3 | the peer asks for markers (the side under test sends markers) |
/// | 4 | peer-to-peer mode (RFC 6581 RTR) |
/// | 5-6 | RTR types the Initiator offers: Write, Read, Send, or all three |
/// | 7 | revision 1 (no enhanced block, so no peer-to-peer mode) |
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Setup {
    /// The side under test is the Responder.
    pub responder: bool,
    /// CRC in both directions.
    pub crc: bool,
    /// Markers in what the side under test receives.
    pub markers_rx: bool,
    /// Markers in what the side under test sends.
    pub markers_tx: bool,
    /// Peer-to-peer mode requested by the Initiator.
    pub p2p: bool,
    /// The RTR types the Initiator offers.
    pub rtr: RtrFlags,
    /// Revision 1 on both sides.
    pub rev1: bool,
}

impl Setup {
    /// Decodes the octet (see the type docs).
    pub fn from_byte(b: u8) -> Self {
        let rtr = match (b >> 5) & 3 {
            0 => RtrFlags::WRITE,
            1 => RtrFlags::READ,
            2 => RtrFlags::SEND,
            _ => RtrFlags::ALL,
        };
        Self {
            responder: b & 0x01 != 0,
            crc: b & 0x02 != 0,
            markers_rx: b & 0x04 != 0,
            markers_tx: b & 0x08 != 0,
            p2p: b & 0x10 != 0,
            rtr,
            rev1: b & 0x80 != 0,
        }
    }

    fn config(&self, role: Role, asks_markers: bool) -> MpaConfig {
        let mut cfg = MpaConfig::for_role(role);
        cfg.rev = if self.rev1 { 1 } else { 2 };
        cfg.crc = self.crc;
        cfg.markers = asks_markers;
        cfg.p2p = self.p2p && role == Role::Initiator;
        cfg.rtr = match role {
            Role::Initiator => self.rtr,
            Role::Responder => RtrFlags::ALL,
        };
        cfg
    }
}

/// Runs the handshake between an Initiator and a Responder configured from `setup` and
/// returns `(under_test, peer)`: the `Negotiated` of the side under test and of its peer.
/// `None` if the exchange did not establish (it always does for the settings [`Setup`]
/// can express; the crate's tests check all 256).
pub fn connect(setup: Setup) -> Option<(Negotiated, Negotiated)> {
    let (init_markers, resp_markers) = if setup.responder {
        (setup.markers_tx, setup.markers_rx)
    } else {
        (setup.markers_rx, setup.markers_tx)
    };
    let now = Instant::now();
    let mut init =
        Handshake::initiator(setup.config(Role::Initiator, init_markers), b"", now).ok()?;
    let mut resp = Handshake::responder(setup.config(Role::Responder, resp_markers), now);
    let (mut to_resp, mut to_init) = (BytesMut::new(), BytesMut::new());
    let (mut ni, mut nr) = (None, None);
    for _ in 0..8 {
        let _ = init.poll_transmit(&mut to_resp);
        resp.handle_input(&mut to_resp, now);
        while let Some(ev) = resp.poll_event() {
            match ev {
                HandshakeEvent::Request(_) => resp.accept(b"").ok()?,
                HandshakeEvent::Established { negotiated, .. } => nr = Some(negotiated),
                _ => return None,
            }
        }
        let _ = resp.poll_transmit(&mut to_init);
        init.handle_input(&mut to_init, now);
        while let Some(ev) = init.poll_event() {
            match ev {
                HandshakeEvent::Established { negotiated, .. } => ni = Some(negotiated),
                _ => return None,
            }
        }
        if let (Some(i), Some(r)) = (&ni, &nr) {
            return Some(if setup.responder {
                (r.clone(), i.clone())
            } else {
                (i.clone(), r.clone())
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_setup_connects_as_described() {
        for b in 0..=255u8 {
            let s = Setup::from_byte(b);
            let (me, peer) = connect(s).unwrap_or_else(|| panic!("setup {b:#04x} {s:?}"));
            let role = if s.responder {
                Role::Responder
            } else {
                Role::Initiator
            };
            assert_eq!(me.role, role, "{b:#04x}");
            assert_ne!(peer.role, role, "{b:#04x}");
            assert_eq!(me.crc, s.crc, "{b:#04x}");
            assert_eq!(me.markers_rx, s.markers_rx, "{b:#04x}");
            assert_eq!(me.markers_tx, s.markers_tx, "{b:#04x}");
            assert_eq!(peer.markers_tx, me.markers_rx, "{b:#04x}");
            assert_eq!(me.p2p, s.p2p && !s.rev1, "{b:#04x}");
        }
    }
}
