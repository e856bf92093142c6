//! The transmit share of a queue pair (issue 33's push path that skips the daemon): when
//! iwarpd shares a connection's socket with the application that owns the queue pair,
//! the application's library writes small messages to it itself, and this block of the
//! segment's header page is what the two writers of one TCP stream agree on.
//!
//! ```text
//! 1024 u64 lock: owner (bits 0-1: OFF 0, FREE 1, DAEMON 2, CLIENT 3), then the number
//!          of the client's acquisitions (bits 2-63)
//! 1032 u64 heartbeat: CLOCK_MONOTONIC nanoseconds when the client took the lock (or
//!          last found the socket full while holding it)
//! 1040 u32 intent: octets of the FPDU the client is writing; 0 between FPDUs
//! 1088 u32 the last MSN of untagged queue 0 (Sends) on the wire
//! 1096 u64 the stream position (octets of FPDUs since SeqStart, for markers)
//! 1152 u32 framing: bit 0 CRC, bit 1 markers (the daemon's, at the grant)
//! 1156 u32 MULPDU (the daemon's, at the grant)
//! 1216 u64 messages the client pushed, 1224 u64 of them Sends, 1232 u64 their octets
//! 1240 u64 discarded: the send queue was not empty; 1248 u64: the stream was busy
//! 1256 u64 payload octets pushed in RDMA Writes, 1264 u64 in Sends, 1272 u64 in Sends
//!          with Solicited Event (the daemon adds these and the messages to its counters)
//! ```
//!
//! The rules: whoever frames an FPDU holds the lock from the moment it assigns the FPDU's
//! MSN and position until every octet of it is in the socket. The daemon holds it while
//! its stream has anything to send and releases it, with the MSN and position, once idle;
//! the client takes it only when it is free, for one FPDU, and writes the MSN and position
//! back before it lets go. OFF means the socket is not (or no longer) shared: the client
//! then does not write. A client that holds the lock past the daemon's lease is taken over;
//! if its `intent` is still set, the stream may be torn and only that connection ends.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::QpSegment;
use crate::layout::{Field, seg_u32, seg_u64};
use crate::qpseg::Discard;
use rdmap::pushed::PushedOp;
use rdmap::wire::Opcode;

/// The block's fields.
mod field {
    use crate::layout::Field;

    pub(crate) const LOCK: Field = 1024..1032;
    pub(crate) const HEARTBEAT: Field = 1032..1040;
    pub(crate) const INTENT: Field = 1040..1044;
    pub(crate) const SEND_MSN: Field = 1088..1092;
    pub(crate) const POSITION: Field = 1096..1104;
    pub(crate) const FRAMING: Field = 1152..1156;
    pub(crate) const MULPDU: Field = 1156..1160;
    pub(crate) const PUSHED: Field = 1216..1224;
    pub(crate) const PUSHED_SENDS: Field = 1224..1232;
    pub(crate) const PUSHED_OCTETS: Field = 1232..1240;
    pub(crate) const DISCARD_QUEUE: Field = 1240..1248;
    pub(crate) const DISCARD_BUSY: Field = 1248..1256;
    /// Payload octets pushed, of RDMA Writes, Sends and Sends with Solicited Event.
    pub(crate) const PAYLOAD: [Field; 3] = [1256..1264, 1264..1272, 1272..1280];
}

const OWNER: u64 = 0b11;
const OFF: u64 = 0;
const FREE: u64 = 1;
const DAEMON: u64 = 2;
const CLIENT: u64 = 3;
const CRC: u32 = 1;
const MARKERS: u32 = 2;

/// How the connection frames its FPDUs, as the daemon grants it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TxFraming {
    /// FPDUs carry a real CRC.
    pub crc: bool,
    /// Markers go into this direction of the stream.
    pub markers: bool,
    /// The largest ULPDU of one FPDU.
    pub mulpdu: u16,
}

/// Where the stream is: the last Send MSN and the stream position.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub struct TxPoint {
    /// The last MSN of untagged queue 0 on the wire.
    pub send_msn: u32,
    /// Octets of FPDUs since SeqStart.
    pub position: u64,
}

/// What the daemon found when it wanted the lock.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum DaemonLock {
    /// It holds the lock now (taken, or held already).
    Held,
    /// The client holds it: its lock word and heartbeat.
    Client {
        /// The lock word, to take over exactly this acquisition.
        word: u64,
        /// When the client took it (CLOCK_MONOTONIC nanoseconds).
        heartbeat: u64,
    },
    /// The socket is not shared.
    Off,
}

/// What the client pushed, and what it could not.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub struct TxCounts {
    /// Messages written to the socket by the client (one FPDU each).
    pub pushed: u64,
    /// Of them, Sends (each took an MSN of queue 0).
    pub sends: u64,
    /// Their octets on the wire.
    pub octets: u64,
    /// Messages that went to the send queue because it was not empty (seed 000's D3).
    pub not_at_head: u64,
    /// Messages that went to the send queue because the stream or socket was busy (D4).
    pub busy: u64,
    /// Payload octets pushed per RDMAP opcode: RDMA Write, Send, Send with Solicited
    /// Event (see [`by_opcode`](Self::by_opcode)).
    pub payload: [u64; 3],
}

impl TxCounts {
    /// The payload octets with their opcodes.
    pub fn by_opcode(&self) -> [(Opcode, u64); 3] {
        let [w, s, se] = self.payload;
        [
            (Opcode::RdmaWrite, w),
            (Opcode::Send, s),
            (Opcode::SendSe, se),
        ]
    }

    /// True if these counts (a difference, [`since`](Self::since)) can be what a client
    /// wrote in FPDUs of at most `mulpdu` octets: no more Sends than messages, no more
    /// payload than the messages hold, and each count below 2^32. The client writes them
    /// into shared memory; counts that fail this are its garbage, not traffic.
    pub fn plausible(&self, mulpdu: u16) -> bool {
        const MAX: u64 = u32::MAX as u64;
        let most = self.pushed.saturating_mul(u64::from(mulpdu));
        self.pushed <= MAX
            && self.sends <= self.pushed
            && self.not_at_head <= MAX
            && self.busy <= MAX
            && self.payload.iter().sum::<u64>() <= most
    }

    /// What was counted since `earlier`.
    pub fn since(&self, earlier: &Self) -> Self {
        let d = |a: u64, b: u64| a.wrapping_sub(b);
        Self {
            pushed: d(self.pushed, earlier.pushed),
            sends: d(self.sends, earlier.sends),
            octets: d(self.octets, earlier.octets),
            not_at_head: d(self.not_at_head, earlier.not_at_head),
            busy: d(self.busy, earlier.busy),
            payload: std::array::from_fn(|i| d(self.payload[i], earlier.payload[i])),
        }
    }
}

/// CLOCK_MONOTONIC now, in nanoseconds: the same clock in every process of the host.
pub fn now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (t.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(t.tv_nsec as u64)
}

/// A queue pair segment's transmit share, seen from either side.
#[derive(Copy, Clone, Debug)]
pub struct TxShare<'a> {
    seg: &'a QpSegment,
}

impl QpSegment {
    /// This segment's transmit share.
    pub fn tx_share(&self) -> TxShare<'_> {
        TxShare { seg: self }
    }
}

impl TxShare<'_> {
    fn word(&self, f: Field) -> &AtomicU32 {
        seg_u32(&self.seg.seg, f)
    }

    fn long(&self, f: Field) -> &AtomicU64 {
        seg_u64(&self.seg.seg, f)
    }

    fn lock(&self) -> &AtomicU64 {
        self.long(field::LOCK)
    }

    // ---- the daemon's side ----

    /// Daemon: shares the stream as it is now (`framing`, `at`), keeping the lock (it is
    /// released at the daemon's next idle moment).
    pub fn grant(&self, framing: TxFraming, at: TxPoint) {
        let bits = (u32::from(framing.crc) * CRC) | (u32::from(framing.markers) * MARKERS);
        self.word(field::FRAMING).store(bits, Ordering::Relaxed);
        self.word(field::MULPDU)
            .store(u32::from(framing.mulpdu), Ordering::Relaxed);
        self.set_point(at);
        self.word(field::INTENT).store(0, Ordering::Relaxed);
        let seq = self.lock().load(Ordering::Relaxed) & !OWNER;
        self.lock().store(seq | DAEMON, Ordering::Release);
    }

    /// Daemon: takes the lock if it is free (or keeps it).
    pub fn daemon_lock(&self) -> DaemonLock {
        let l = self.lock();
        let mut w = l.load(Ordering::Acquire);
        loop {
            match w & OWNER {
                DAEMON => return DaemonLock::Held,
                OFF => return DaemonLock::Off,
                CLIENT => {
                    return DaemonLock::Client {
                        word: w,
                        heartbeat: self.long(field::HEARTBEAT).load(Ordering::Acquire),
                    };
                }
                _ => match l.compare_exchange(
                    w,
                    (w & !OWNER) | DAEMON,
                    Ordering::Acquire,
                    Ordering::Acquire,
                ) {
                    Ok(_) => return DaemonLock::Held,
                    Err(now) => w = now,
                },
            }
        }
    }

    /// Daemon: takes the lock from the client's acquisition `word` (its lease ran out).
    /// True if taken; then [`intent`](Self::intent) says whether the stream is whole.
    pub fn take_over(&self, word: u64) -> bool {
        self.lock()
            .compare_exchange(
                word,
                (word & !OWNER) | DAEMON,
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Daemon: releases the lock with the stream at `at`.
    pub fn daemon_unlock(&self, at: TxPoint) {
        self.set_point(at);
        let l = self.lock();
        let w = l.load(Ordering::Relaxed);
        if w & OWNER == DAEMON {
            l.store((w & !OWNER) | FREE, Ordering::Release);
        }
    }

    /// Daemon: ends the share for good (the client stops writing once it sees it); true
    /// if the client held the lock then (see [`intent`](Self::intent)).
    pub fn revoke(&self) -> bool {
        let l = self.lock();
        let mut w = l.load(Ordering::Relaxed);
        loop {
            match l.compare_exchange(w, w & !OWNER, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return w & OWNER == CLIENT,
                Err(now) => w = now,
            }
        }
    }

    /// True while the socket is shared.
    pub fn is_on(&self) -> bool {
        self.lock().load(Ordering::Acquire) & OWNER != OFF
    }

    /// Octets of the FPDU a client was writing when it last held the lock (0: none).
    pub fn intent(&self) -> u32 {
        self.word(field::INTENT).load(Ordering::Acquire)
    }

    // ---- the client's side ----

    /// Client: takes the lock if it is free; the word to release it with.
    pub fn client_lock(&self) -> Option<u64> {
        let l = self.lock();
        let w = l.load(Ordering::Relaxed);
        if w & OWNER != FREE {
            return None;
        }
        let mine = ((w & !OWNER).wrapping_add(OWNER + 1)) | CLIENT;
        l.compare_exchange(w, mine, Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        self.heartbeat();
        Some(mine)
    }

    /// Client: still alive and holding the lock (a write waits for room).
    pub fn heartbeat(&self) {
        self.long(field::HEARTBEAT)
            .store(now_ns(), Ordering::Release);
    }

    /// Client: about to write an FPDU of `octets` (0: done writing it).
    pub fn set_intent(&self, octets: u32) {
        self.word(field::INTENT).store(octets, Ordering::Release);
    }

    /// True while the client's acquisition `word` holds the lock (the daemon has not
    /// taken it over, nor ended the share).
    pub fn client_holds(&self, word: u64) -> bool {
        self.lock().load(Ordering::Acquire) == word
    }

    /// Client: releases the acquisition `word`; false if the daemon took it over or
    /// revoked the share meanwhile (the stream is then not the client's to trust).
    pub fn client_unlock(&self, word: u64) -> bool {
        self.lock()
            .compare_exchange(
                word,
                (word & !OWNER) | FREE,
                Ordering::Release,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Counts a message `op` the client wrote: `payload` octets, `octets` on the wire.
    pub fn count_pushed(&self, op: &PushedOp, payload: u64, octets: u64) {
        self.long(field::PUSHED).fetch_add(1, Ordering::Relaxed);
        let kind = match op {
            PushedOp::Write { .. } => 0,
            PushedOp::Send { solicited: false } => 1,
            PushedOp::Send { solicited: true } => 2,
        };
        if op.is_send() {
            self.long(field::PUSHED_SENDS)
                .fetch_add(1, Ordering::Relaxed);
        }
        self.long(field::PUSHED_OCTETS)
            .fetch_add(octets, Ordering::Relaxed);
        self.long(field::PAYLOAD[kind].clone())
            .fetch_add(payload, Ordering::Relaxed);
    }

    /// Counts a message the client could not write itself, for `why` (`NotAtHead` or
    /// `FlowControl`; others count as the latter).
    pub fn count_discard(&self, why: Discard) {
        let f = match why {
            Discard::NotAtHead => field::DISCARD_QUEUE,
            _ => field::DISCARD_BUSY,
        };
        self.long(f).fetch_add(1, Ordering::Relaxed);
    }

    /// How many messages the client wrote itself so far (one load: what a spinning
    /// daemon watches to see that the client is active).
    pub fn pushed(&self) -> u64 {
        self.long(field::PUSHED).load(Ordering::Relaxed)
    }

    /// What the client pushed and could not.
    pub fn counts(&self) -> TxCounts {
        let get = |f| self.long(f).load(Ordering::Relaxed);
        TxCounts {
            pushed: get(field::PUSHED),
            sends: get(field::PUSHED_SENDS),
            octets: get(field::PUSHED_OCTETS),
            not_at_head: get(field::DISCARD_QUEUE),
            busy: get(field::DISCARD_BUSY),
            payload: field::PAYLOAD.map(get),
        }
    }

    // ---- both ----

    /// The framing the daemon granted.
    pub fn framing(&self) -> TxFraming {
        let bits = self.word(field::FRAMING).load(Ordering::Relaxed);
        TxFraming {
            crc: bits & CRC != 0,
            markers: bits & MARKERS != 0,
            mulpdu: u16::try_from(self.word(field::MULPDU).load(Ordering::Relaxed)).unwrap_or(0),
        }
    }

    /// Where the stream is (read by the holder of the lock).
    pub fn point(&self) -> TxPoint {
        TxPoint {
            send_msn: self.word(field::SEND_MSN).load(Ordering::Acquire),
            position: self.long(field::POSITION).load(Ordering::Acquire),
        }
    }

    /// Sets where the stream is (by the holder of the lock).
    pub fn set_point(&self, at: TxPoint) {
        self.word(field::SEND_MSN)
            .store(at.send_msn, Ordering::Release);
        self.long(field::POSITION)
            .store(at.position, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qpseg::Geometry;

    fn pair() -> (QpSegment, QpSegment) {
        let d = QpSegment::create(Geometry::default()).unwrap();
        let file = std::fs::File::from(d.fd().try_clone_to_owned().unwrap());
        let c = QpSegment::map(file, Geometry::default()).unwrap();
        (c, d)
    }

    fn octets<const N: usize>(s: &QpSegment, at: usize) -> [u8; N] {
        let mut b = [0u8; N];
        s.seg.read(at, &mut b);
        b
    }

    #[test]
    fn the_block_sits_at_its_offsets() {
        let (c, d) = pair();
        let framing = TxFraming {
            crc: true,
            markers: true,
            mulpdu: 1448,
        };
        d.tx_share().grant(
            framing,
            TxPoint {
                send_msn: 0x0102_0304,
                position: 0x1122,
            },
        );
        assert_eq!(octets::<8>(&c, 1024), [2, 0, 0, 0, 0, 0, 0, 0], "DAEMON");
        assert_eq!(octets::<4>(&c, 1088), [4, 3, 2, 1]);
        assert_eq!(octets::<8>(&c, 1096), [0x22, 0x11, 0, 0, 0, 0, 0, 0]);
        assert_eq!(octets::<8>(&c, 1152), [3, 0, 0, 0, 0xa8, 0x05, 0, 0]);
        assert_eq!(c.tx_share().framing(), framing);
        // Released: FREE; the client's first acquisition: count 1, CLIENT.
        d.tx_share().daemon_unlock(TxPoint {
            send_msn: 5,
            position: 6,
        });
        assert_eq!(octets::<8>(&c, 1024), [1, 0, 0, 0, 0, 0, 0, 0]);
        let w = c.tx_share().client_lock().unwrap();
        assert_eq!(octets::<8>(&c, 1024), [7, 0, 0, 0, 0, 0, 0, 0]);
        assert_ne!(octets::<8>(&c, 1032), [0; 8], "heartbeat");
        c.tx_share().set_intent(300);
        assert_eq!(octets::<4>(&c, 1040), [0x2c, 1, 0, 0]);
        let send = PushedOp::Send { solicited: true };
        c.tx_share().count_pushed(&send, 20, 40);
        let write = PushedOp::Write {
            stag: 1.into(),
            to: 0,
        };
        c.tx_share().count_pushed(&write, 36, 60);
        c.tx_share().count_discard(Discard::NotAtHead);
        c.tx_share().count_discard(Discard::FlowControl);
        c.tx_share().count_discard(Discard::FlowControl);
        assert_eq!(octets::<1>(&c, 1216), [2]);
        assert_eq!(octets::<1>(&c, 1224), [1]);
        assert_eq!(octets::<1>(&c, 1232), [100]);
        assert_eq!(octets::<1>(&c, 1240), [1]);
        assert_eq!(octets::<1>(&c, 1248), [2]);
        assert_eq!(octets::<1>(&c, 1256), [36], "Write payload");
        assert_eq!(octets::<1>(&c, 1264), [0], "Send payload");
        assert_eq!(octets::<1>(&c, 1272), [20], "Send SE payload");
        let counted = c.tx_share().counts().since(&TxCounts::default());
        assert!(counted.plausible(1460));
        assert!(
            !counted.plausible(20),
            "56 octets in two FPDUs of at most 20"
        );
        let backwards = TxCounts::default().since(&counted);
        assert!(!backwards.plausible(1460), "a counter that went back");
        assert!(c.tx_share().client_unlock(w));
        assert_eq!(
            octets::<8>(&c, 1024),
            [5, 0, 0, 0, 0, 0, 0, 0],
            "FREE, count 1"
        );
    }

    #[test]
    fn one_writer_at_a_time_and_a_revoked_share_stays_off() {
        let (c, d) = pair();
        let (cs, ds) = (c.tx_share(), d.tx_share());
        assert!(!cs.is_on() && cs.client_lock().is_none(), "not shared yet");
        assert_eq!(ds.daemon_lock(), DaemonLock::Off);
        ds.grant(
            TxFraming {
                crc: true,
                markers: false,
                mulpdu: 100,
            },
            TxPoint::default(),
        );
        assert!(cs.client_lock().is_none(), "the daemon holds it");
        assert_eq!(ds.daemon_lock(), DaemonLock::Held);
        ds.daemon_unlock(TxPoint {
            send_msn: 9,
            position: 99,
        });
        let w = cs.client_lock().unwrap();
        assert!(cs.client_lock().is_none(), "held");
        assert_eq!(
            cs.point(),
            TxPoint {
                send_msn: 9,
                position: 99
            }
        );
        let DaemonLock::Client { word, heartbeat } = ds.daemon_lock() else {
            panic!("the client holds it")
        };
        assert_eq!(word, w);
        assert!(heartbeat > 0 && heartbeat <= now_ns());
        // Its lease ran out: taken over; the client learns it when it lets go.
        assert!(cs.client_holds(w));
        assert!(ds.take_over(word));
        assert!(!cs.client_holds(w));
        assert!(!ds.take_over(word), "once");
        assert!(!cs.client_unlock(w));
        assert_eq!(ds.daemon_lock(), DaemonLock::Held);
        ds.daemon_unlock(TxPoint::default());
        let w2 = cs.client_lock().unwrap();
        assert_ne!(w2, w, "each acquisition its own word");
        assert!(ds.revoke(), "the client held it");
        assert!(!cs.client_unlock(w2));
        assert!(!cs.is_on() && cs.client_lock().is_none());
        assert_eq!(ds.daemon_lock(), DaemonLock::Off);
        assert!(!ds.revoke());
        ds.daemon_unlock(TxPoint::default());
        assert!(!cs.is_on(), "unlocking does not turn it back on");
    }
}
