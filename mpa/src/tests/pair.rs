//! An Initiator and a Responder connected by a byte pipe that re-chunks at seeded random
//! boundaries (the quinn-proto `Pair` idea for a TCP byte stream).

use std::time::Instant;

use bytes::BytesMut;

use super::util::Rng;
use crate::{Handshake, HandshakeEvent, MpaConfig};

/// What the Responder's ULP does with a Request.
#[derive(Clone, Debug)]
pub(crate) enum Policy {
    Accept(Vec<u8>),
    Reject(Vec<u8>),
    Wait,
}

#[derive(Debug)]
pub(crate) struct Pair {
    pub(crate) init: Handshake,
    pub(crate) resp: Handshake,
    /// Bytes in flight towards each side.
    pub(crate) to_init: Vec<u8>,
    pub(crate) to_resp: Vec<u8>,
    /// Each side's receive buffer (what the handshake leaves is for the Deframer).
    pub(crate) init_rx: BytesMut,
    pub(crate) resp_rx: BytesMut,
    pub(crate) init_events: Vec<HandshakeEvent>,
    pub(crate) resp_events: Vec<HandshakeEvent>,
    pub(crate) policy: Policy,
    pub(crate) now: Instant,
    rng: Rng,
    max_chunk: usize,
}

impl Pair {
    pub(crate) fn new(
        init_cfg: MpaConfig,
        init_pd: &[u8],
        resp_cfg: MpaConfig,
        seed: u64,
        max_chunk: usize,
    ) -> Self {
        let now = Instant::now();
        Self {
            init: Handshake::initiator(init_cfg, init_pd, now).expect("initiator"),
            resp: Handshake::responder(resp_cfg, now),
            to_init: Vec::new(),
            to_resp: Vec::new(),
            init_rx: BytesMut::new(),
            resp_rx: BytesMut::new(),
            init_events: Vec::new(),
            resp_events: Vec::new(),
            policy: Policy::Accept(Vec::new()),
            now,
            rng: Rng::new(seed),
            max_chunk,
        }
    }

    /// Moves bytes and events until nothing changes (bounded).
    pub(crate) fn drive(&mut self) {
        for _ in 0..100_000 {
            if !self.step() {
                return;
            }
        }
        panic!("handshake pair did not converge");
    }

    fn step(&mut self) -> bool {
        let mut progress = false;
        let mut out = BytesMut::new();
        if self.init.poll_transmit(&mut out) {
            self.to_resp.extend_from_slice(&out);
            progress = true;
        }
        let mut out = BytesMut::new();
        if self.resp.poll_transmit(&mut out) {
            self.to_init.extend_from_slice(&out);
            progress = true;
        }
        if !self.to_resp.is_empty() {
            let n = self.rng.range(1, self.max_chunk.min(self.to_resp.len()));
            self.resp_rx.extend_from_slice(&self.to_resp[..n]);
            self.to_resp.drain(..n);
            self.resp.handle_input(&mut self.resp_rx, self.now);
            progress = true;
        }
        if !self.to_init.is_empty() {
            let n = self.rng.range(1, self.max_chunk.min(self.to_init.len()));
            self.init_rx.extend_from_slice(&self.to_init[..n]);
            self.to_init.drain(..n);
            self.init.handle_input(&mut self.init_rx, self.now);
            progress = true;
        }
        while let Some(ev) = self.resp.poll_event() {
            if let HandshakeEvent::Request(_) = ev {
                match self.policy.clone() {
                    Policy::Accept(pd) => self.resp.accept(&pd).expect("accept"),
                    Policy::Reject(pd) => self.resp.reject(&pd).expect("reject"),
                    Policy::Wait => {}
                }
            }
            self.resp_events.push(ev);
            progress = true;
        }
        while let Some(ev) = self.init.poll_event() {
            self.init_events.push(ev);
            progress = true;
        }
        progress
    }

    /// The last event of each side.
    pub(crate) fn outcome(&self) -> (Option<&HandshakeEvent>, Option<&HandshakeEvent>) {
        (self.init_events.last(), self.resp_events.last())
    }
}
