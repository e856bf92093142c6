//! The two-endpoint harness: a real MPA handshake, then two streams joined by byte pipes
//! that re-chunk the traffic at seeded random boundaries (quinn-proto's `Pair`, for TCP).

use std::time::Instant;

use bytes::BytesMut;
use mpa::{Deframer, Framer, Handshake, HandshakeEvent, MpaConfig, Negotiated};

use crate::testing::{VecMemory, XorShift};
use crate::{Completion, Event, QpState, Stream, StreamConfig, TermCode, Transmit};

/// A rewrite of whole ULPDUs on their way from A to B (framing is redone afterwards).
pub(super) type UlpduTamper = Box<dyn FnMut(usize, &mut Vec<u8>)>;

/// A rewrite of raw octets from A to B: called with the stream offset and the octets.
pub(super) type RawTamper = Box<dyn FnMut(u64, &mut [u8])>;

/// Re-framing state for [`UlpduTamper`].
struct Reframe {
    deframer: Deframer,
    framer: Framer,
    pending: BytesMut,
    index: usize,
    f: UlpduTamper,
}

/// One endpoint.
pub(super) struct Side {
    pub(super) s: Stream,
    pub(super) mem: VecMemory,
    /// The shared receive queue this side draws on.
    pub(super) srq: std::collections::VecDeque<crate::RecvWr>,
    pub(super) inbox: BytesMut,
    pub(super) events: Vec<Event>,
    /// Every octet this side transmitted in FPDU mode.
    pub(super) sent: Vec<u8>,
    /// FPDUs produced but not yet accepted by the "socket".
    out: Transmit,
}

impl Side {
    /// Polls the stream for FPDUs, then lets the "socket" accept a random, non-empty part of
    /// what is waiting, reporting it with `handle_written`. Returns the accepted octets.
    fn transmit(&mut self, rng: &mut XorShift) -> Option<BytesMut> {
        let _ = self
            .s
            .poll_transmit(&mut self.mem, &mut self.out, rng.range(1, 8192));
        self.events
            .extend(std::iter::from_fn(|| self.s.poll_event()));
        if self.out.is_empty() {
            return None;
        }
        let k = rng.range(1, self.out.len());
        let accepted = BytesMut::from(self.out.take(k).as_ref());
        self.s.handle_written(k);
        self.sent.extend_from_slice(&accepted);
        self.events
            .extend(std::iter::from_fn(|| self.s.poll_event()));
        Some(accepted)
    }

    /// Takes the completions reported so far.
    pub(super) fn completions(&mut self) -> Vec<Completion> {
        let mut out = Vec::new();
        self.events.retain(|e| match e {
            Event::Completion(wc) => {
                out.push(wc.clone());
                false
            }
            _ => true,
        });
        out
    }

    /// The Terminate this side received, if any.
    pub(super) fn term_received(&self) -> Option<TermCode> {
        self.events.iter().find_map(|e| match e {
            Event::TerminateReceived(t) => Some(t.code),
            _ => None,
        })
    }

    /// The Terminate this side sent, if any.
    pub(super) fn term_sent(&self) -> Option<crate::wire::TerminateRepr> {
        self.events.iter().find_map(|e| match e {
            Event::TerminateSent(t) => Some(*t),
            _ => None,
        })
    }

    pub(super) fn state(&self) -> QpState {
        self.s.state()
    }
}

/// Initiator `a` and Responder `b`.
pub(super) struct Pair {
    pub(super) a: Side,
    pub(super) b: Side,
    pub(super) na: Negotiated,
    pub(super) nb: Negotiated,
    a_to_b: BytesMut,
    b_to_a: BytesMut,
    rng: XorShift,
    pub(super) max_chunk: usize,
    /// Rewrites A's raw output: it is held back until A goes idle, then passed whole.
    pub(super) raw_tamper: Option<RawTamper>,
    ulpdu_tamper: Option<Reframe>,
    /// A's output held back while a raw tamper is set, until A goes idle.
    raw_hold: BytesMut,
    a_pos: u64,
    /// Every this many steps of [`drive`](Self::drive), both streams are replaced by
    /// their snapshots read back (a live migration between processes); 0: never.
    pub(super) snapshot_every: usize,
}

impl Pair {
    /// Runs the MPA handshake between `ci` (Initiator) and `cr` (Responder) and builds the
    /// two streams.
    pub(super) fn connect(ci: MpaConfig, cr: MpaConfig, sc: StreamConfig, seed: u64) -> Self {
        let now = Instant::now();
        let mut rng = XorShift::new(seed);
        let mut hi = Handshake::initiator(ci, b"", now).expect("initiator");
        let mut hr = Handshake::responder(cr, now);
        let (mut ab, mut ba) = (BytesMut::new(), BytesMut::new());
        let (mut in_i, mut in_r) = (BytesMut::new(), BytesMut::new());
        let (mut ni, mut nr) = (None, None);
        for _ in 0..10_000 {
            let _ = hi.poll_transmit(&mut ab);
            let _ = hr.poll_transmit(&mut ba);
            if !ab.is_empty() {
                let n = rng.range(1, ab.len());
                in_r.extend_from_slice(&ab.split_to(n));
                hr.handle_input(&mut in_r, now);
            }
            if !ba.is_empty() {
                let n = rng.range(1, ba.len());
                in_i.extend_from_slice(&ba.split_to(n));
                hi.handle_input(&mut in_i, now);
            }
            while let Some(ev) = hr.poll_event() {
                match ev {
                    HandshakeEvent::Request(_) => hr.accept(b"").expect("accept"),
                    HandshakeEvent::Established { negotiated, .. } => nr = Some(negotiated),
                    other => panic!("responder handshake: {other:?}"),
                }
            }
            while let Some(ev) = hi.poll_event() {
                match ev {
                    HandshakeEvent::Established { negotiated, .. } => ni = Some(negotiated),
                    other => panic!("initiator handshake: {other:?}"),
                }
            }
            if ni.is_some() && nr.is_some() && ab.is_empty() && ba.is_empty() {
                break;
            }
        }
        let (na, nb) = (
            ni.expect("initiator established"),
            nr.expect("responder established"),
        );
        let side = |n: &Negotiated, inbox| Side {
            s: Stream::new(sc.clone(), n),
            mem: VecMemory::new(),
            srq: std::collections::VecDeque::new(),
            inbox,
            events: Vec::new(),
            sent: Vec::new(),
            out: Transmit::new(),
        };
        Self {
            a: side(&na, in_i),
            b: side(&nb, in_r),
            na,
            nb,
            a_to_b: BytesMut::new(),
            b_to_a: BytesMut::new(),
            rng,
            max_chunk: 1500,
            raw_tamper: None,
            ulpdu_tamper: None,
            raw_hold: BytesMut::new(),
            a_pos: 0,
            snapshot_every: 0,
        }
    }

    /// A plain connection: revision 2, CRC on, no markers, IRD/ORD 16.
    pub(super) fn new(seed: u64) -> Self {
        Self::connect(
            MpaConfig::default(),
            MpaConfig::default(),
            StreamConfig::default(),
            seed,
        )
    }

    /// Rewrites ULPDUs from A to B: `f(index, ulpdu)` sees every ULPDU A sends, by index.
    pub(super) fn tamper_ulpdus(&mut self, f: impl FnMut(usize, &mut Vec<u8>) + 'static) {
        self.ulpdu_tamper = Some(Reframe {
            deframer: Deframer::from_negotiated(&self.nb),
            framer: Framer::from_negotiated(&self.na),
            pending: BytesMut::new(),
            index: 0,
            f: Box::new(f),
        });
    }

    /// Puts `octets` on the wire from A to B as another writer of A's stream would (the
    /// push path that skips the daemon), between what A's stream sent.
    pub(super) fn inject_a(&mut self, octets: &[u8]) {
        self.a_pos += octets.len() as u64;
        self.a_to_b.extend_from_slice(octets);
    }

    /// Moves bytes both ways until neither side has anything left to do.
    pub(super) fn drive(&mut self) {
        for step in 1..100_000 {
            if self.snapshot_every != 0 && step % self.snapshot_every == 0 {
                for side in [&mut self.a, &mut self.b] {
                    let now = Instant::now();
                    let octets = side.s.to_snapshot(now).expect("snapshot");
                    side.s = Stream::from_snapshot(&octets, now).expect("read back");
                }
            }
            let mut progress = false;
            progress |= self.transmit_a();
            progress |= Self::transmit(&mut self.b, &mut self.b_to_a, &mut self.rng);
            progress |= self.deliver_to_b();
            progress |= Self::deliver(&mut self.a, &mut self.b_to_a, &mut self.rng, self.max_chunk);
            if !progress {
                return;
            }
        }
        panic!("pair did not converge");
    }

    fn transmit(side: &mut Side, wire: &mut BytesMut, rng: &mut XorShift) -> bool {
        match side.transmit(rng) {
            Some(out) => {
                wire.extend_from_slice(&out);
                true
            }
            None => false,
        }
    }

    fn transmit_a(&mut self) -> bool {
        let Some(mut out) = self.a.transmit(&mut self.rng) else {
            // A is idle: release what a raw tamper held back, rewritten as a whole.
            if let Some(t) = &mut self.raw_tamper
                && !self.raw_hold.is_empty()
            {
                let mut held = self.raw_hold.split();
                t(self.a_pos, &mut held);
                self.a_pos += held.len() as u64;
                self.a_to_b.extend_from_slice(&held);
                return true;
            }
            return false;
        };
        if let Some(r) = &mut self.ulpdu_tamper {
            r.pending.extend_from_slice(&out);
            out.clear();
            while let Ok(Some(ulpdu)) = r.deframer.decode(&mut r.pending) {
                let mut u = ulpdu.to_vec();
                (r.f)(r.index, &mut u);
                r.index += 1;
                r.framer.encode(&u, &[], &mut out);
            }
        }
        if self.raw_tamper.is_some() {
            self.raw_hold.extend_from_slice(&out);
        } else {
            self.a_pos += out.len() as u64;
            self.a_to_b.extend_from_slice(&out);
        }
        true
    }

    fn deliver_to_b(&mut self) -> bool {
        Self::deliver(&mut self.b, &mut self.a_to_b, &mut self.rng, self.max_chunk)
    }

    fn deliver(side: &mut Side, wire: &mut BytesMut, rng: &mut XorShift, max: usize) -> bool {
        if wire.is_empty() {
            return false;
        }
        let n = rng.range(1, max.min(wire.len()));
        side.inbox.extend_from_slice(&wire.split_to(n));
        side.s
            .handle_input_srq(&mut side.inbox, &mut side.mem, &mut side.srq);
        side.events
            .extend(std::iter::from_fn(|| side.s.poll_event()));
        true
    }
}
