//! One `rdmap::Stream` under test, driven as the offload engine drives it, with invariants
//! on everything it transmits and reports.

use crate::books::Books;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use ddp::SegmentRepr;
use mpa::{Deframer, Negotiated};
use rdmap::testing::VecMemory;
use rdmap::wire::{
    Opcode, READ_V2_FLAG, RdmapControl, ReadRequestRepr, ReadV2RequestRepr, TerminateRepr,
};
use rdmap::{
    Access, Event, Payload, QpState, RecvWr, RemoteBuf, SendFlags, SendOp, SendWr, Sge, Stream,
    StreamConfig, Transmit,
};

/// The registered regions of the memory under test. Small STag values so that libFuzzer's
/// comparison tracing finds them quickly.
pub mod regions {
    use rdmap::STag;

    /// Everything allowed: 4096 octets at tagged offset 0x1000.
    pub const ALL: STag = STag::new(1, 1);
    /// Remote write only: 256 octets at tagged offset 0 (zero-based).
    pub const WRITE_ONLY: STag = STag::new(2, 2);
    /// Local access only: receive buffers and Read/Atomic sinks, 8192 octets at 0x10_0000.
    pub const LOCAL: STag = STag::new(3, 3);
    /// Remote read and atomic: 64 octets at 0x2000.
    pub const ATOMIC: STag = STag::new(4, 4);
    /// Everything allowed, 64 octets at 0: a target for Send with Invalidate.
    pub const INVALIDATE: STag = STag::new(5, 5);
    /// Registered but not associated with this queue pair (another PD).
    pub const FOREIGN: STag = STag::new(6, 6);

    /// Base tagged offset of [`LOCAL`].
    pub const LOCAL_BASE: u64 = 0x10_0000;
}

/// Which send work the side under test posts before any input, from one octet.
///
/// | bit | work request (all signaled) |
/// |---|---|
/// | 0 | RDMA Read of 300 octets of the peer's region 1 into local memory |
/// | 1 | Atomic Fetch-and-Add on the peer's region 4 |
/// | 2 | Atomic Compare-and-Swap on the peer's region 4 |
/// | 3 | Send of 5 owned octets, and a Send with Invalidate of 700 octets of local memory |
/// | 4 | RDMA Write of 100 owned octets, and one of 600 octets of local memory |
/// | 5 | Immediate Data |
/// | 6 | `close(now)` right after posting |
/// | 7 | `handle_eof` after the last input (else every timer expires instead) |
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Plan(pub u8);

impl Plan {
    fn has(self, bit: u8) -> bool {
        self.0 & (1 << bit) != 0
    }

    /// Bit 7: end the run with the peer's FIN.
    pub fn eof(self) -> bool {
        self.has(7)
    }
}

/// Receive requests kept outstanding while the input is fed (topped up after each chunk).
const RECV_OUTSTANDING: usize = 4;
/// Total receive requests posted over one run.
const RECV_TOTAL: usize = 64;
/// Octets each `poll_transmit` call may produce.
const TX_BUDGET: usize = 4096;
/// A transmit loop that has not gone idle after this many calls is a livelock.
const TX_LIMIT: usize = 100_000;

/// A stream, its memory and the checks on its output.
#[derive(Debug)]
pub struct StreamHarness {
    stream: Stream,
    mem: VecMemory,
    inbox: BytesMut,
    /// The peer's deframer: everything the stream sends must decode cleanly.
    peer_rx: Deframer,
    peer_buf: BytesMut,
    /// The peer's settings (for framing input as the peer would).
    peer: Negotiated,
    /// Every request posted, completed at most once.
    books: Books,
    recv_posted: usize,
    recv_done: usize,
    /// The clock of the run (only ever passed in; the stream reads none).
    now: Instant,
}

impl StreamHarness {
    /// A stream for `me` (whose peer negotiated `peer`) with registered memory, receive
    /// buffers and the send work of `plan` posted.
    pub fn new(me: &Negotiated, peer: &Negotiated, plan: Plan) -> Self {
        let mut cfg = StreamConfig::default();
        cfg.sq_depth = 16;
        cfg.rq_depth = 16;
        let mut h = Self {
            stream: Stream::new(cfg, me),
            mem: memory(),
            inbox: BytesMut::new(),
            peer_rx: Deframer::from_negotiated(peer),
            peer_buf: BytesMut::new(),
            peer: peer.clone(),
            books: Books::default(),
            recv_posted: 0,
            recv_done: 0,
            now: Instant::now(),
        };
        h.top_up_receives();
        for op in send_work(plan) {
            let wr_id = h.books.next_id();
            let wr = SendWr {
                wr_id,
                op,
                flags: SendFlags::SIGNALED,
            };
            if h.stream.post_send(wr).is_ok() {
                h.books.posted(wr_id);
            }
        }
        if plan.has(6) {
            h.stream.close(h.now);
        }
        h.pump();
        h
    }

    /// Feeds `bytes` as one TCP read, then transmits and drains events.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.inbox.extend_from_slice(bytes);
        self.stream.handle_input(&mut self.inbox, &mut self.mem);
        self.pump();
        self.top_up_receives();
        self.pump();
    }

    /// Ends the run: with `eof` reports the peer's FIN, else lets every timer expire. A
    /// stream that ended (Error, or Idle after a graceful close) must have completed every
    /// posted request exactly once.
    pub fn finish(&mut self, eof: bool) {
        if eof {
            self.stream.handle_eof(&mut self.inbox);
            self.pump();
            let state = self.stream.state();
            assert!(
                matches!(state, QpState::Error | QpState::Idle),
                "{state:?} after FIN"
            );
        } else if let Some(deadline) = self.stream.poll_timeout() {
            assert!(deadline >= self.now, "deadline in the past");
            self.stream
                .handle_timeout(deadline + Duration::from_secs(1));
            self.pump();
        }
        if matches!(self.stream.state(), QpState::Error | QpState::Idle) {
            self.books.assert_all_once(&self.stream.state());
        }
    }

    /// The stream under test.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// The negotiated settings of the peer.
    pub fn peer(&self) -> &Negotiated {
        &self.peer
    }

    /// Completions seen so far (send and receive queue).
    pub fn completions(&self) -> usize {
        self.books.total()
    }

    fn top_up_receives(&mut self) {
        if !matches!(self.stream.state(), QpState::Rts | QpState::Closing) {
            return;
        }
        while self.recv_posted - self.recv_done < RECV_OUTSTANDING && self.recv_posted < RECV_TOTAL
        {
            let slot = (self.recv_posted % 8) as u64 * 1024;
            let wr_id = self.books.next_id();
            let wr = RecvWr {
                wr_id,
                sgl: [
                    Sge {
                        stag: regions::LOCAL,
                        to: regions::LOCAL_BASE + slot,
                        len: 256,
                    },
                    Sge {
                        stag: regions::LOCAL,
                        to: regions::LOCAL_BASE + slot + 512,
                        len: 256,
                    },
                ]
                .into(),
            };
            if self.stream.post_recv(wr).is_err() {
                return;
            }
            self.books.posted(wr_id);
            self.recv_posted += 1;
            self.pump_events();
        }
    }

    /// Transmits until idle (every octet "written" at once) and drains events.
    fn pump(&mut self) {
        let mut out = Transmit::new();
        for _ in 0..TX_LIMIT {
            self.pump_events();
            let n = self
                .stream
                .poll_transmit(&mut self.mem, &mut out, TX_BUDGET);
            if n == 0 {
                self.pump_events();
                // Otherwise a driver that transmits while this is true would spin.
                assert!(
                    !self.stream.wants_transmit(),
                    "wants_transmit() but poll_transmit produced nothing (state {:?})",
                    self.stream.state()
                );
                return;
            }
            assert_eq!(n, out.len(), "poll_transmit count");
            let bytes = out.take(out.len());
            self.check_output(&bytes);
            self.stream.handle_written(n);
        }
        panic!("poll_transmit did not go idle after {TX_LIMIT} calls");
    }

    fn pump_events(&mut self) {
        while let Some(ev) = self.stream.poll_event() {
            match ev {
                Event::Completion(wc) => {
                    self.books.completed(&wc);
                    if wc.queue == rdmap::Queue::Recv {
                        self.recv_done += 1;
                    }
                }
                Event::TerminateSent(t) | Event::TerminateReceived(t) => check_terminate(&t),
                _ => {}
            }
        }
    }

    /// What the stream sends must be valid iWARP: it deframes with the peer's settings and
    /// every ULPDU is a DDP segment carrying RDMAP version 1 and a known opcode.
    fn check_output(&mut self, out: &[u8]) {
        self.peer_buf.extend_from_slice(out);
        loop {
            let ulpdu = match self.peer_rx.decode(&mut self.peer_buf) {
                Ok(Some(u)) => u,
                Ok(None) => return,
                Err(e) => panic!("stream output does not deframe: {e:?}"),
            };
            let (seg, payload) = SegmentRepr::parse(&ulpdu)
                .unwrap_or_else(|e| panic!("stream sent a bad DDP header: {e:?} {ulpdu:02x?}"));
            let ctrl = RdmapControl::parse(seg.rsvd_ulp());
            assert!(ctrl.is_valid_version(), "RDMAP version {ctrl:?}");
            assert!(ctrl.opcode.is_known(), "unknown opcode sent: {ctrl:?}");
            assert_eq!(seg.is_tagged(), ctrl.opcode.is_tagged(), "T bit vs opcode");
            match ctrl.opcode {
                Opcode::Terminate => {
                    let t = TerminateRepr::parse(payload).unwrap_or_else(|e| {
                        panic!("stream sent a bad Terminate: {e:?} {payload:02x?}")
                    });
                    check_terminate(&t);
                }
                // Read V2 (both sides of the harness agree to it) names no sink.
                Opcode::ReadRequest if seg.rsvd_ulp() & READ_V2_FLAG != 0 => {
                    let r = ReadV2RequestRepr::parse(payload);
                    assert!(r.is_ok(), "bad Read V2 Request");
                }
                Opcode::ReadRequest => {
                    assert!(ReadRequestRepr::parse(payload).is_ok(), "bad Read Request");
                }
                _ => {}
            }
        }
    }
}

/// A Terminate emits and re-parses to itself.
fn check_terminate(t: &TerminateRepr) {
    let mut buf = vec![0xa5; t.buffer_len()];
    t.emit(&mut buf);
    assert_eq!(
        TerminateRepr::parse(&buf).as_ref(),
        Ok(t),
        "Terminate round trip"
    );
}

pub(crate) fn memory() -> VecMemory {
    let mut m = VecMemory::new();
    m.register(regions::ALL, 0x1000, 4096, 0x11, Access::ALL);
    m.register(
        regions::WRITE_ONLY,
        0,
        256,
        0x22,
        Access::REMOTE_WRITE.union(Access::LOCAL_WRITE),
    );
    m.register(
        regions::LOCAL,
        regions::LOCAL_BASE,
        8192,
        0x33,
        Access::LOCAL_READ.union(Access::LOCAL_WRITE),
    );
    m.register(
        regions::ATOMIC,
        0x2000,
        64,
        0x44,
        Access::REMOTE_ATOMIC.union(Access::REMOTE_READ),
    );
    m.register(regions::INVALIDATE, 0, 64, 0x55, Access::ALL);
    m.register(regions::FOREIGN, 0, 64, 0x66, Access::ALL);
    if let Some(r) = m.region_mut(regions::FOREIGN) {
        r.associated = false;
    }
    m
}

fn send_work(plan: Plan) -> Vec<SendOp> {
    let local = |off: u64, len: u32| Sge {
        stag: regions::LOCAL,
        to: regions::LOCAL_BASE + off,
        len,
    };
    let remote = |stag, to, len| RemoteBuf { stag, to, len };
    let mut ops = Vec::new();
    if plan.has(0) {
        ops.push(SendOp::Read {
            src: remote(regions::ALL, 0x1000, 300),
            dst: local(4096, 300),
        });
    }
    if plan.has(1) {
        ops.push(SendOp::FetchAdd {
            dst: remote(regions::ATOMIC, 0x2000, 8),
            add: 1,
            mask: 0,
            result: local(4608, 8),
        });
    }
    if plan.has(2) {
        ops.push(SendOp::CmpSwap {
            dst: remote(regions::ATOMIC, 0x2008, 8),
            compare: 0x4444_4444_4444_4444,
            compare_mask: u64::MAX,
            swap: 7,
            swap_mask: u64::MAX,
            result: local(4616, 8),
        });
    }
    if plan.has(3) {
        ops.push(SendOp::Send {
            data: Payload::Bytes(Bytes::from_static(b"hello")),
            invalidate: None,
            immediate: None,
        });
        ops.push(SendOp::Send {
            data: Payload::Sgl([local(5000, 700)].into()),
            invalidate: Some(regions::INVALIDATE),
            immediate: None,
        });
    }
    if plan.has(4) {
        ops.push(SendOp::Write {
            data: Payload::Bytes(Bytes::from(vec![0xab; 100])),
            dst: remote(regions::WRITE_ONLY, 0, 256),
        });
        ops.push(SendOp::Write {
            data: Payload::Sgl([local(6000, 300), local(7000, 300)].into()),
            dst: remote(regions::ALL, 0x1100, 600),
        });
    }
    if plan.has(5) {
        ops.push(SendOp::Immediate {
            data: 0x0123_4567_89ab_cdef,
        });
    }
    ops
}
