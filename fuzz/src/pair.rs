//! Two `rdmap::Stream`s connected through an in-memory wire that the input drives
//! (structure-aware): it posts generated work requests on either side, delivers or
//! corrupts whole FPDUs in either direction, closes, and finally lets everything settle.
//!
//! Invariants: no panic; with CRC on, a delivery that makes the receiver send a Terminate
//! leaves the receiver's memory unchanged (nothing placed on a failed check); every
//! posted request of both sides completes exactly once by the end; both sides end in
//! Error or Idle after the FINs.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use mpa::Negotiated;
use rdmap::testing::VecMemory;
use rdmap::{
    Event, Payload, QpState, RecvWr, RemoteBuf, SendFlags, SendOp, SendWr, Sge, Stream,
    StreamConfig, Transmit,
};

use crate::books::Books;
use crate::harness::{memory, regions};
use crate::{Setup, connect, take_byte};

/// One end: its stream, memory, the FPDUs it sent and not yet delivered, and its books.
struct End {
    stream: Stream,
    mem: VecMemory,
    inbox: BytesMut,
    out: VecDeque<Bytes>,
    books: Books,
    terminated: bool,
    succeeded: usize,
}

impl End {
    fn new(me: &Negotiated) -> Self {
        let mut cfg = StreamConfig::default();
        cfg.sq_depth = 32;
        cfg.rq_depth = 32;
        cfg.mulpdu = 256;
        Self {
            stream: Stream::new(cfg, me),
            mem: memory(),
            inbox: BytesMut::new(),
            out: VecDeque::new(),
            books: Books::default(),
            terminated: false,
            succeeded: 0,
        }
    }

    /// Moves what the stream has to send into `out`, one FPDU per entry, and drains its
    /// events.
    fn pump(&mut self) {
        let mut t = Transmit::new();
        for _ in 0..10_000 {
            self.events();
            // At least one octet asked: exactly one whole FPDU comes out.
            let n = self.stream.poll_transmit(&mut self.mem, &mut t, 1);
            if n == 0 {
                self.events();
                return;
            }
            self.out.push_back(t.take(n));
            self.stream.handle_written(n);
        }
        panic!("poll_transmit did not go idle");
    }

    fn events(&mut self) {
        while let Some(ev) = self.stream.poll_event() {
            match ev {
                Event::Completion(wc) => {
                    self.books.completed(&wc);
                    self.succeeded += usize::from(wc.status == rdmap::WcStatus::Success);
                }
                Event::TerminateSent(_) => self.terminated = true,
                _ => {}
            }
        }
    }

    fn post_send(&mut self, op: SendOp) {
        let wr_id = self.books.next_id();
        let wr = SendWr {
            wr_id,
            op,
            flags: SendFlags::SIGNALED,
        };
        if self.stream.post_send(wr).is_ok() {
            self.books.posted(wr_id);
        }
        self.pump();
    }

    fn post_recv(&mut self, slot: u8) {
        let wr_id = self.books.next_id();
        let wr = RecvWr {
            wr_id,
            sgl: Sge {
                stag: regions::LOCAL,
                to: regions::LOCAL_BASE + u64::from(slot % 16) * 512,
                len: 512,
            }
            .into(),
        };
        if self.stream.post_recv(wr).is_ok() {
            self.books.posted(wr_id);
        }
        self.pump();
    }

    /// Takes `fpdu` as one TCP read. Returns true if it made this end send a Terminate.
    fn receive(&mut self, fpdu: &[u8]) -> bool {
        let before = self.terminated;
        self.inbox.extend_from_slice(fpdu);
        self.stream.handle_input(&mut self.inbox, &mut self.mem);
        self.pump();
        !before && self.terminated
    }
}

/// A generated send work request, from two octets: kind and size/offset.
fn work(kind: u8, arg: u8) -> SendOp {
    let len = u32::from(arg) * 3 + 1;
    let peer_all = RemoteBuf {
        stag: regions::ALL,
        to: 0x1000 + u64::from(arg) * 8,
        len,
    };
    let local = Sge {
        stag: regions::LOCAL,
        to: regions::LOCAL_BASE + 4096 + u64::from(arg),
        len,
    };
    match kind % 6 {
        0 => SendOp::Send {
            data: Payload::Bytes(Bytes::from(vec![arg; len as usize])),
            invalidate: None,
            immediate: None,
        },
        1 => SendOp::Write {
            data: Payload::Sgl(local.into()),
            dst: peer_all,
        },
        2 => SendOp::Read {
            src: peer_all,
            dst: local,
        },
        3 => SendOp::FetchAdd {
            dst: RemoteBuf {
                stag: regions::ATOMIC,
                to: 0x2000 + u64::from(arg % 8) * 8,
                len: 8,
            },
            add: u64::from(arg),
            mask: 0,
            result: Sge {
                stag: regions::LOCAL,
                to: regions::LOCAL_BASE + 8000,
                len: 8,
            },
        },
        4 => SendOp::Immediate {
            data: u64::from(arg),
        },
        _ => SendOp::Write {
            // Into the peer's write-only region, past its end when `arg` is large.
            data: Payload::Bytes(Bytes::from(vec![arg; 16])),
            dst: RemoteBuf {
                stag: regions::WRITE_ONLY,
                to: u64::from(arg),
                len: 16,
            },
        },
    }
}

/// The body of the `rdmap_pair` target. Returns how many requests completed
/// successfully (for the tests).
pub fn run_pair(data: &[u8]) -> usize {
    let (setup, mut rest) = take_byte(data);
    let setup = Setup::from_byte(setup);
    let Some((me, peer)) = connect(setup) else {
        return 0;
    };
    let crc = me.crc;
    let mut ends = [End::new(&me), End::new(&peer)];
    for e in &mut ends {
        for slot in 0..4 {
            e.post_recv(slot);
        }
    }
    let now = Instant::now();
    while let [op, arg, tail @ ..] = rest {
        rest = tail;
        let side = usize::from(op >> 7);
        let other = 1 - side;
        match (op >> 4) & 7 {
            0 | 1 => ends[side].post_send(work(*op, *arg)),
            2 => ends[side].post_recv(*arg),
            3 => ends[side].stream.close(now),
            4..=5 => {
                // Deliver the next `arg % 4 + 1` FPDUs intact.
                for _ in 0..=(arg % 4) {
                    let Some(f) = ends[side].out.pop_front() else {
                        break;
                    };
                    let before = ends[other].mem.checksum();
                    if ends[other].receive(&f) && crc {
                        assert_eq!(
                            ends[other].mem.checksum(),
                            before,
                            "placed, then Terminated"
                        );
                    }
                }
            }
            _ => {
                // Deliver the next FPDU with one bit flipped.
                let Some(f) = ends[side].out.pop_front() else {
                    continue;
                };
                let mut f = f.to_vec();
                let at = usize::from(*arg) * 7 % f.len();
                f[at] ^= 1 << (op & 7);
                let before = ends[other].mem.checksum();
                if ends[other].receive(&f) && crc {
                    assert_eq!(
                        ends[other].mem.checksum(),
                        before,
                        "a corrupt FPDU placed data before its Terminate"
                    );
                }
            }
        }
    }
    // Settle: deliver everything both ways until nothing moves.
    for _ in 0..1000 {
        let mut moved = false;
        for side in 0..2 {
            while let Some(f) = ends[side].out.pop_front() {
                ends[1 - side].receive(&f);
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
    // Then the FINs (and every timer), and the books must balance.
    for e in &mut ends {
        e.stream.handle_eof(&mut e.inbox);
        if let Some(deadline) = e.stream.poll_timeout() {
            e.stream.handle_timeout(deadline + Duration::from_secs(1));
        }
        e.pump();
        let state = e.stream.state();
        assert!(
            matches!(state, QpState::Error | QpState::Idle),
            "{state:?} after FIN"
        );
        e.books.assert_all_once(&state);
    }
    ends.iter().map(|e| e.succeeded).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_made_runs_move_data_and_balance_the_books() {
        // Setup 0x02: CRC on, Initiator under test; Send, Write, Read from the
        // Initiator, deliveries both ways, a corrupted FPDU, more deliveries.
        let mut input = vec![0x02];
        for (op, arg) in [
            (0x00u8, 10u8),
            (0x01, 20),
            (0x02, 5),
            (0x43, 3),
            (0xc3, 3),
            (0x43, 3),
            (0x03, 9),
            (0x61, 40),
            (0x43, 3),
            (0xc3, 3),
        ] {
            input.extend([op, arg]);
        }
        assert!(run_pair(&input) >= 3, "Send, Write and Read went through");
        let mut moved = 0;
        for setup in 0..=255u8 {
            moved += run_pair(&[setup, 0x00, 1, 0x41, 2, 0xc1, 2, 0x01, 3, 0x71, 9]);
        }
        assert!(moved > 256, "most setups move data");
    }
}
