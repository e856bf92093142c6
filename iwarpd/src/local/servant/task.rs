//! A servant's task: turn after turn it takes what the client posted into the engine and
//! the engine's completions back, spinning a while after it last moved something, then
//! parking on its doorbell; until its queue pair is destroyed, or it is frozen to move.

use std::time::Duration;

use ipc::qpseg::Side;
use rdmap::{Completion, QpEnd, Queue, WcOpcode, WcStatus};

use super::{Bell, Frozen, Run};
use crate::local::logs::{CLIENT_OTHER, RING_GARBAGE, limited};

/// How long a servant keeps polling after it last moved something, before it parks and
/// sleeps on its doorbell. A client's next request or the peer's answer usually comes
/// within this, and is then taken without a thread wake-up (measured on loopback: one-way
/// small-Send latency through iwarpd 50-65 µs without it, 20-30 µs with it). Each turn
/// of the shard's runtime gives up the processor once (see [`YIELDER`]), so a
/// busy-polling application on the same processor still runs.
const SPIN: Duration = Duration::from_micros(100);

thread_local! {
    /// The servant of this shard's thread that gives up the processor while servants
    /// spin (0: none yet): one thread yield per turn of the runtime, however many
    /// servants spin on it, so that an application on the same processor runs once per
    /// turn, not once per servant.
    static YIELDER: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// A spinning servant's share of [`YIELDER`]: it yields the thread only while it holds
/// the duty, which it takes when nobody does and gives back when it parks or ends.
struct Yielder(u64);

impl Yielder {
    fn new() -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Self(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }

    /// One turn of spinning: the thread yields if this servant has the duty (taking it
    /// if nobody has it); true if it yielded.
    fn turn(&self) -> bool {
        let holder = YIELDER.with(|y| {
            if y.get() == 0 {
                y.set(self.0);
            }
            y.get()
        });
        let duty = holder == self.0;
        if duty {
            std::thread::yield_now();
        }
        duty
    }

    /// This servant stops spinning: another one takes the duty at its next turn.
    fn release(&self) {
        YIELDER.with(|y| {
            if y.get() == self.0 {
                y.set(0);
            }
        });
    }
}

impl Drop for Yielder {
    fn drop(&mut self) {
        self.release();
    }
}

/// What a servant's turn did.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Turn {
    /// Nothing moved.
    Idle,
    /// Something moved between the client's rings and the connection.
    Moved,
    /// The peer's input was read (and perhaps more moved).
    ReadInput,
}

impl Turn {
    /// Its share of the shard's thread, in turns toward [`SHARE_AFTER`]: one busy turn is
    /// the unit; an idle one counts 8, as each yield to the runtime polls its reactor (a
    /// system call); a read counts 8 too, as one may place a socket's worth of a peer's
    /// flood.
    fn cost(self) -> u32 {
        match self {
            Self::Moved => 1,
            Self::Idle | Self::ReadInput => 8,
        }
    }
}

/// A spinning servant yields to the shard's other tasks once its turns cost this much.
const SHARE_AFTER: u32 = 64;

/// Counts a turn of `cost` toward the next yield to the shard's other tasks, and yields
/// when they are due.
async fn share_shard(spent: &mut u32, cost: u32) {
    *spent += cost;
    if *spent >= SHARE_AFTER {
        *spent = 0;
        tokio::task::yield_now().await;
    }
}

impl Run {
    pub(super) async fn run(mut self, bell: Bell) -> Option<Frozen> {
        let bell = match bell {
            Bell::Async(b) => b,
            Bell::Raw(raw) => match raw.into_async() {
                Ok(b) => b,
                Err(e) => {
                    limited!(CLIENT_OTHER, warn, error = %e, "doorbell not pollable");
                    self.qp.disconnect();
                    return None;
                }
            },
        };
        let qp = self.qp.clone();
        let closed = qp.closed();
        tokio::pin!(closed);
        let mut spent = 0u32;
        let mut last_moved = std::time::Instant::now();
        let yielder = Yielder::new();
        self.ring.set_spinning(true);
        loop {
            if self
                .signals
                .freeze
                .load(std::sync::atomic::Ordering::Acquire)
            {
                self.signals
                    .freeze
                    .store(false, std::sync::atomic::Ordering::Relaxed);
                self.ring.set_spinning(false);
                return Some(Frozen { run: self, bell });
            }
            let turn = self.turn();
            if turn != Turn::Idle {
                last_moved = std::time::Instant::now();
                share_shard(&mut spent, turn.cost()).await;
                continue;
            }
            if self.stopping && self.end.is_some() && !self.ring.holds_any() {
                self.ring.set_spinning(false);
                return None;
            }
            if last_moved.elapsed() < SPIN {
                yielder.turn();
                share_shard(&mut spent, Turn::Idle.cost()).await;
                continue;
            }
            yielder.release();
            self.ring.set_spinning(false);
            self.seg.park(Side::Daemon);
            if self.work_waiting_or_signaled() {
                self.seg.unpark(Side::Daemon);
                self.ring.set_spinning(true);
                // Never a loop without an await: the shard's other tasks run meanwhile.
                tokio::task::yield_now().await;
                continue;
            }
            // The connection's driver reads the socket while this servant sleeps (only
            // then: each handover registers the socket with the runtime again).
            self.qp.stop_polling();
            self.seg.count_daemon_sleep();
            tokio::select! {
                _ = bell.wait() => {}
                how = &mut closed, if self.end.is_none() => self.ended(how),
                _ = self.signals.stop.notified(), if !self.stopping => self.stopping = true,
                _ = self.signals.wake.notified() => {}
                _ = self.ring.wake.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(1)), if self.ring.holds_any() => {}
            }
            self.seg.unpark(Side::Daemon);
            self.ring.set_spinning(true);
        }
    }

    /// One turn: what the client pushed and posted goes onto the connection, the peer's
    /// input is read, the client's misdeeds end its queue pair, and held completions go
    /// into its ring.
    fn turn(&mut self) -> Turn {
        let mut moved = false;
        let mut read = false;
        if !self.stopping && !self.broken {
            // The push region first (seed 000: before the send queue), so that a pushed
            // message meets its twin still at the head.
            moved |= self.push_pass();
            match self.take_work() {
                Ok(m) => moved |= m,
                Err(why) => self.misused(why),
            }
            if let Some(why) = self.recvs.garbage() {
                self.misused(why);
            }
            moved |= self.client_pushed();
            // A spinning servant reads its socket itself, as a spinning application does
            // (`poll_input`): the peer's message is placed and completed into the client's
            // ring on this thread, without the reactor's turn and the driver task's
            // wake-up in between.
            if self.qp.poll_input() {
                self.seg.count_daemon_read();
                read = true;
            }
        }
        if self.ring.overran() && !self.overran {
            self.overran = true;
            limited!(CLIENT_OTHER, warn, qp = %self.qp.num(),
                "local client does not take its completions; its queue pair is terminated");
            self.qp.terminate(rdmap::TermCode::RDMAP_LOCAL_CATASTROPHIC);
        }
        if self.end.is_some() {
            moved |= self.flush_recvs();
        }
        let flushed = self.ring.flush();
        self.ring.settle();
        if read {
            Turn::ReadInput
        } else if moved | flushed {
            Turn::Moved
        } else {
            Turn::Idle
        }
    }

    /// True if the client wrote onto its shared socket since the last turn. The servant
    /// then keeps spinning as it does for a posted request, so the peer's answer is read
    /// by a thread that is awake: without this, a client that pushes everything leaves
    /// the servant parked, and every answer paid a thread wake-up (one-way small-Send
    /// latency 25 µs against 16 µs through the send queue).
    fn client_pushed(&mut self) -> bool {
        let pushed = self.seg.tx_share().pushed();
        std::mem::replace(&mut self.pushed_seen, pushed) != pushed
    }

    /// The client wrote garbage (`why`) into its rings: its queue pair closes.
    fn misused(&mut self, why: &'static str) {
        if !self.broken {
            limited!(RING_GARBAGE, warn, qp = %self.qp.num(), why, "local client wrote garbage into its rings; closing its queue pair");
            self.broken = true;
            self.qp.disconnect();
        }
    }

    /// True if the client posted work (or pushed) since the last turn, or the session
    /// asked for something: the servant does not park.
    fn work_waiting_or_signaled(&self) -> bool {
        (!self.stopping
            && !self.broken
            && (self.work_waiting()
                || self.push.pd.region.any_ready_for(self.id)
                || self.seg.tx_share().pushed() != self.pushed_seen))
            || (self.end.is_some()
                && self.recvs.garbage().is_none()
                && self.seg.rq_pending().is_ok_and(|n| n > 0))
            || self
                .signals
                .freeze
                .load(std::sync::atomic::Ordering::Acquire)
    }

    /// The queue pair ended `how`: the receives left in the client's ring complete as
    /// flushed, then the client hears of the end.
    fn ended(&mut self, how: QpEnd) {
        self.end = Some(how);
        if let Some(f) = self.ended.take() {
            // Completions flushed by the end go out before the event.
            self.flush_recvs();
            self.ring.flush();
            f(self.why_ended(how));
        }
    }

    /// How the client is told its queue pair ended: the connection's end, unless the
    /// daemon ended it for what the client did.
    fn why_ended(&self, how: QpEnd) -> QpEnd {
        if self.overran {
            QpEnd::CqOverrun
        } else if self.broken || self.recvs.garbage().is_some() {
            QpEnd::Misused
        } else {
            how
        }
    }

    /// Once the queue pair ended, receives in the client's ring (which the connection
    /// will never take) complete as flushed, as the connection's own did; true if any.
    fn flush_recvs(&mut self) -> bool {
        let mut flushed = false;
        while let Ok(Some(wr)) = self.recvs.pop() {
            flushed = true;
            let wc = Completion::new(wr.wr_id, Queue::Recv, WcOpcode::Recv, WcStatus::Flushed);
            self.ring.flushed_recvs(std::iter::once(wc));
        }
        flushed
    }
}

#[cfg(test)]
mod tests {
    use super::Yielder;

    /// However many servants spin on a thread, one of them yields it per turn; when that
    /// one parks or ends, the next to spin takes the duty.
    #[test]
    fn one_spinning_servant_per_thread_yields_it() {
        let (a, b) = (Yielder::new(), Yielder::new());
        assert!(a.turn(), "the first to spin takes the duty");
        assert!(!b.turn() && !b.turn(), "the second only spins");
        assert!(a.turn());
        a.release();
        assert!(b.turn(), "a parked: b takes the duty");
        assert!(!a.turn(), "a spins again: b keeps it");
        drop(b);
        assert!(a.turn(), "b ended: a takes it");
        // Another thread has its own.
        let c = std::thread::spawn(|| Yielder::new().turn()).join().unwrap();
        assert!(c);
    }
}
