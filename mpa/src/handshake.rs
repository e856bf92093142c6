//! The MPA Request/Reply exchange (RFC 5044 §7.1, RFC 6581), sans-IO, for one side.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::{Bytes, BytesMut};

use crate::negotiate;
use crate::wire::enhanced::EnhancedRepr;
use crate::wire::frame::{self, FrameKind, FrameRepr, HEADER_LEN};
use crate::{
    Extensions, MAX_PRIVATE_DATA, MpaConfig, MpaError, Negotiated, PeerParams, Role, RtrFlags,
};

/// What the handshake reports to its driver.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HandshakeEvent {
    /// Responder: a valid Request arrived; call [`Handshake::accept`] or
    /// [`Handshake::reject`].
    Request(PeerParams),
    /// Handshake complete; enter FPDU mode with these settings. `private_data` is the peer's
    /// ULP private data (without the enhanced block).
    Established {
        /// The settings of FPDU mode.
        negotiated: Negotiated,
        /// The peer's ULP private data.
        private_data: Bytes,
    },
    /// Initiator: the peer rejected (R=1). MPA is left; TCP may stay open.
    Rejected {
        /// The peer's ULP private data.
        private_data: Bytes,
        /// Everything the Reply said (IRD/ORD included, RFC 6581 §9.1).
        peer: PeerParams,
    },
    /// Fatal. `negotiated` is `Some` when FPDU mode was entered anyway and the caller must
    /// send a Terminate with `error.code()` (Layer 2 / EType 0): `InsufficientIrd` (6) or
    /// `NoMatchingRtr` (7), detected by the Initiator after a valid Reply. `None`: just
    /// close TCP.
    Failed {
        /// What went wrong.
        error: MpaError,
        /// The settings of FPDU mode, when it was entered.
        negotiated: Option<Negotiated>,
    },
}

/// The Request/Reply exchange for one side, sans-IO (the quinn-proto model).
///
/// * Inputs: [`handle_input`](Self::handle_input) with the received TCP bytes,
///   [`handle_timeout`](Self::handle_timeout) when [`poll_timeout`](Self::poll_timeout)'s
///   deadline passed, and (Responder) [`accept`](Self::accept) or
///   [`reject`](Self::reject) after a [`HandshakeEvent::Request`].
/// * Outputs, to poll after every input: [`poll_transmit`](Self::poll_transmit) (frame
///   bytes for TCP), [`poll_event`](Self::poll_event), [`poll_timeout`](Self::poll_timeout).
///
/// Reading follows RFC 5044 §7.1: exactly 20 octets are examined (key, revision and
/// PD_Length are validated as soon as they are present), then exactly PD_Length more are
/// taken. Nothing after the peer's frame is consumed: those bytes stay in the caller's
/// buffer for the [`Deframer`](crate::Deframer). Any chunking of the input gives the same
/// result. The Responder treats bytes after the Request, seen before it replied, as a
/// protocol violation (the Initiator may not send FPDUs before the Reply; siw does the same).
///
/// Time is passed in; instants must not go backwards. A spurious `handle_timeout` is a no-op.
#[derive(Debug)]
pub struct Handshake {
    role: Role,
    cfg: MpaConfig,
    state: State,
    tx: BytesMut,
    events: VecDeque<HandshakeEvent>,
}

#[derive(Debug)]
enum State {
    /// Waiting for the peer's frame until the deadline (`None`: no deadline).
    AwaitFrame { deadline: Option<Instant> },
    /// Responder: the Request arrived, the ULP decides.
    AwaitDecision { request: PeerParams },
    /// Established, rejected or failed.
    Done,
}

impl Handshake {
    /// Initiator: queues the Request (Private Data = the enhanced block when `cfg.rev` is 2,
    /// then `private_data`). `Err(InvalidFrame)` if the private data is too long (512
    /// octets including the 4-octet block) or `cfg.rev` is not 1 or 2.
    pub fn initiator(cfg: MpaConfig, private_data: &[u8], now: Instant) -> Result<Self, MpaError> {
        if !(frame::REV_MIN..=frame::REV_MAX).contains(&cfg.rev) {
            return Err(MpaError::InvalidFrame("configured revision must be 1 or 2"));
        }
        let block = (cfg.rev >= 2).then_some(EnhancedRepr {
            p2p: cfg.p2p,
            rtr: if cfg.p2p { cfg.rtr } else { RtrFlags::NONE },
            ird: cfg.ird,
            ord: cfg.ord,
        });
        let repr = FrameRepr {
            kind: FrameKind::Request,
            markers: cfg.markers,
            crc: cfg.crc,
            reject: false,
            large_fpdus: cfg.large_fpdus,
            rev: cfg.rev,
            enhanced: block,
            extensions: cfg.extensions,
            private_data,
        };
        let mut tx = BytesMut::new();
        queue_frame(&mut tx, &repr)?;
        let deadline = now.checked_add(cfg.timeout);
        tracing::debug!(
            rev = cfg.rev,
            crc = cfg.crc,
            markers = cfg.markers,
            "MPA Request queued"
        );
        Ok(Self {
            role: Role::Initiator,
            cfg,
            state: State::AwaitFrame { deadline },
            tx,
            events: VecDeque::new(),
        })
    }

    /// Responder: waits for the Request. A `cfg.rev` outside `1..=2` is taken as 2.
    pub fn responder(mut cfg: MpaConfig, now: Instant) -> Self {
        if !(frame::REV_MIN..=frame::REV_MAX).contains(&cfg.rev) {
            cfg.rev = frame::REV_MAX;
        }
        let deadline = now.checked_add(cfg.timeout);
        Self {
            role: Role::Responder,
            cfg,
            state: State::AwaitFrame { deadline },
            tx: BytesMut::new(),
            events: VecDeque::new(),
        }
    }

    /// Feeds received bytes. Consumes only the octets of the peer's frame, and only once
    /// the whole frame is present; whatever follows stays in `src`.
    pub fn handle_input(&mut self, src: &mut BytesMut, _now: Instant) {
        match &self.state {
            State::AwaitFrame { .. } => self.read_frame(src),
            State::AwaitDecision { .. } if !src.is_empty() => {
                self.fail(
                    MpaError::InvalidFrame("data received before the Reply was sent"),
                    None,
                );
            }
            State::AwaitDecision { .. } | State::Done => {}
        }
    }

    /// Fails the handshake with [`MpaError::ConnectionLost`] if `now` is at or past the
    /// deadline while waiting for the peer's frame.
    pub fn handle_timeout(&mut self, now: Instant) {
        if let State::AwaitFrame {
            deadline: Some(deadline),
        } = self.state
            && now >= deadline
        {
            tracing::debug!(role = ?self.role, "MPA handshake timed out");
            self.fail(MpaError::ConnectionLost, None);
        }
    }

    /// Responder, after [`HandshakeEvent::Request`]: sends the Reply (R=0) and finishes
    /// with [`HandshakeEvent::Established`]. `Err(InvalidFrame)` (nothing changes) if the
    /// private data is too long; `Err(LocalCatastrophic)` if no Request is pending.
    pub fn accept(&mut self, private_data: &[u8]) -> Result<(), MpaError> {
        let State::AwaitDecision { request } = &self.state else {
            return Err(MpaError::LocalCatastrophic);
        };
        let mut plan = negotiate::responder(&self.cfg, request);
        let mut repr = FrameRepr {
            kind: FrameKind::Reply,
            markers: self.cfg.markers,
            crc: plan.crc,
            reject: false,
            large_fpdus: plan.negotiated.large_fpdus,
            rev: if plan.block.is_some() { 2 } else { 1 },
            enhanced: plan.block,
            extensions: plan.negotiated.extensions,
            private_data,
        };
        if repr.pd_length() > MAX_PRIVATE_DATA {
            // No room for the extension block beside the application's private data:
            // the application's data wins, and no extension is agreed.
            repr.extensions = Extensions::NONE;
            plan.negotiated.extensions = Extensions::NONE;
        }
        queue_frame(&mut self.tx, &repr)?;
        let private_data = request.private_data.clone();
        tracing::debug!(negotiated = ?plan.negotiated, "MPA Reply queued, established");
        self.events.push_back(HandshakeEvent::Established {
            negotiated: plan.negotiated,
            private_data,
        });
        self.state = State::Done;
        Ok(())
    }

    /// Responder, after [`HandshakeEvent::Request`]: sends a Reply with R=1 (private data
    /// allowed; the enhanced block, if the Request had one, copies A and carries our IRD and
    /// ORD) and finishes without an event. MPA is left; TCP may stay open.
    pub fn reject(&mut self, private_data: &[u8]) -> Result<(), MpaError> {
        let State::AwaitDecision { request } = &self.state else {
            return Err(MpaError::LocalCatastrophic);
        };
        let block = negotiate::reject_block(&self.cfg, request);
        let repr = FrameRepr {
            kind: FrameKind::Reply,
            markers: self.cfg.markers,
            crc: self.cfg.crc || request.crc,
            reject: true,
            large_fpdus: false,
            rev: if block.is_some() { 2 } else { 1 },
            enhanced: block,
            extensions: Extensions::NONE,
            private_data,
        };
        queue_frame(&mut self.tx, &repr)?;
        tracing::debug!("MPA Reply queued, rejected");
        self.state = State::Done;
        Ok(())
    }

    /// Appends the pending frame bytes to `dst`; true if there were any.
    #[must_use]
    pub fn poll_transmit(&mut self, dst: &mut BytesMut) -> bool {
        if self.tx.is_empty() {
            return false;
        }
        dst.extend_from_slice(&self.tx);
        self.tx.clear();
        true
    }

    /// The next event, if any.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<HandshakeEvent> {
        self.events.pop_front()
    }

    /// The deadline while waiting for the peer's frame.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            State::AwaitFrame { deadline } => deadline,
            _ => None,
        }
    }

    /// True once the exchange is over (established, rejected or failed) and every frame
    /// byte was handed out by [`poll_transmit`](Self::poll_transmit). Events may still be
    /// pending in [`poll_event`](Self::poll_event).
    pub fn is_done(&self) -> bool {
        matches!(self.state, State::Done) && self.tx.is_empty()
    }

    /// Our MPA role.
    pub fn role(&self) -> Role {
        self.role
    }

    /// How long this side waits for the peer's frame (the configured MPA timeout).
    pub fn timeout(&self) -> std::time::Duration {
        self.cfg.timeout
    }

    fn fail(&mut self, error: MpaError, negotiated: Option<Negotiated>) {
        tracing::debug!(role = ?self.role, %error, "MPA handshake failed");
        self.events
            .push_back(HandshakeEvent::Failed { error, negotiated });
        self.state = State::Done;
    }

    fn read_frame(&mut self, src: &mut BytesMut) {
        let Some(head) = src.get(..HEADER_LEN) else {
            return;
        };
        let head = frame::Packet::new_unchecked(head);
        if let Err(e) = self.check_head(&head) {
            self.fail(e, None);
            return;
        }
        let total = HEADER_LEN + usize::from(head.pd_length());
        if src.len() < total {
            src.reserve(total - src.len());
            return;
        }
        let bytes = src.split_to(total).freeze();
        let (peer, reject) = match FrameRepr::parse(&frame::Packet::new_unchecked(&bytes[..])) {
            Ok(repr) => (peer_params(&repr, &bytes), repr.reject),
            Err(e) => return self.fail(e, None),
        };
        match self.role {
            Role::Initiator => self.on_reply(peer, reject),
            Role::Responder => self.on_request(peer, src),
        }
    }

    /// Header checks that need only the first 20 octets.
    fn check_head(&self, head: &frame::Packet<&[u8]>) -> Result<(), MpaError> {
        if head.kind().is_none() {
            let mut sent = [0; 16];
            if let Some(first) = head.key().get(..16) {
                sent.copy_from_slice(first);
            }
            return Err(MpaError::NotMpa { sent });
        }
        let kind = head.check_header()?;
        match (self.role, kind) {
            (Role::Initiator, FrameKind::Request) => {
                return Err(MpaError::InvalidFrame(
                    "Initiator/Initiator start: received a Request key",
                ));
            }
            (Role::Responder, FrameKind::Reply) => {
                return Err(MpaError::InvalidFrame("Responder received a Reply key"));
            }
            _ => {}
        }
        if head.rev() > self.cfg.rev {
            return Err(MpaError::InvalidFrame(match self.role {
                Role::Initiator => "Reply revision above the Request's",
                Role::Responder => "Request revision not supported",
            }));
        }
        Ok(())
    }

    fn on_request(&mut self, peer: PeerParams, rest: &BytesMut) {
        if !rest.is_empty() {
            return self.fail(
                MpaError::InvalidFrame("data received before the Reply was sent"),
                None,
            );
        }
        tracing::debug!(rev = peer.rev, p2p = peer.p2p, "MPA Request received");
        self.events.push_back(HandshakeEvent::Request(peer.clone()));
        self.state = State::AwaitDecision { request: peer };
    }

    fn on_reply(&mut self, peer: PeerParams, reject: bool) {
        if reject {
            tracing::debug!("MPA Reply: rejected");
            self.events.push_back(HandshakeEvent::Rejected {
                private_data: peer.private_data.clone(),
                peer,
            });
            self.state = State::Done;
            return;
        }
        match negotiate::initiator(&self.cfg, self.cfg.rev >= 2, &peer) {
            Ok(negotiated) => {
                tracing::debug!(?negotiated, "MPA established");
                self.events.push_back(HandshakeEvent::Established {
                    negotiated,
                    private_data: peer.private_data,
                });
                self.state = State::Done;
            }
            Err((error, negotiated)) => self.fail(error, Some(negotiated)),
        }
    }
}

/// Emits `repr` at the end of `tx` after checking the private data limit.
fn queue_frame(tx: &mut BytesMut, repr: &FrameRepr<'_>) -> Result<(), MpaError> {
    if repr.pd_length() > MAX_PRIVATE_DATA {
        return Err(MpaError::InvalidFrame(
            "private data longer than 512 octets",
        ));
    }
    let start = tx.len();
    tx.resize(start + repr.buffer_len(), 0);
    repr.emit(&mut frame::Packet::new_unchecked(&mut tx[start..]));
    Ok(())
}

/// What the peer's frame said; `private_data` is a zero-copy slice of `bytes`.
fn peer_params(repr: &FrameRepr<'_>, bytes: &Bytes) -> PeerParams {
    let pd_start = bytes.len() - repr.private_data.len();
    let p2p = repr.enhanced.is_some_and(|b| b.p2p);
    PeerParams {
        rev: repr.rev,
        markers: repr.markers,
        crc: repr.crc,
        enhanced: repr.enhanced.is_some(),
        ird: repr.enhanced.map(|b| b.ird),
        ord: repr.enhanced.map(|b| b.ord),
        p2p,
        rtr: match repr.enhanced {
            Some(b) if p2p => b.rtr,
            _ => RtrFlags::NONE,
        },
        large_fpdus: repr.large_fpdus,
        extensions: repr.extensions,
        private_data: bytes.slice(pd_start..),
    }
}
