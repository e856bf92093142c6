//! The connection's side of a shared socket (issue 33's push path that skips the daemon):
//! iwarpd shares the socket with the application that owns the queue pair, which writes
//! small messages to it itself, under the lock in the queue pair segment's transmit share
//! ([`ipc::qpseg::TxShare`]).
//!
//! The connection takes that lock before its stream produces anything, continues from
//! where the application left the stream (its MSN and position), and releases it, with
//! its own point, once its stream is quiet and every octet is in the socket. If the
//! application holds the lock, the connection waits a moment; past the lease (the
//! application's heartbeat is older than [`LEASE`]) it takes the lock over, and if the
//! application was in the middle of an FPDU the stream may be torn: that connection, and
//! only it, ends.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ipc::qpseg::{DaemonLock, Discard, QpSegment, TxCounts, TxFraming, TxPoint, now_ns};
use rdmap::Stream;

use super::share::PushShare;

/// How long an application may hold the transmit lock without a heartbeat before the
/// connection takes it over. It holds it for one FPDU's write (microseconds), or while
/// its socket is full, beating all the while.
pub(crate) const LEASE: Duration = Duration::from_millis(200);
/// How long the connection spins for the lock the application holds before it tries
/// again later: a holder is one system call from letting go.
const SPIN: Duration = Duration::from_micros(20);
/// When the connection looks again after a spin that did not get the lock.
const RETRY: Duration = Duration::from_millis(1);

/// What the connection may do now.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Gate {
    /// It holds the lock (or the socket is not shared): produce and write.
    Open,
    /// The application holds the lock: look again at this instant.
    Wait(Instant),
    /// The application's lease ran out in the middle of an FPDU: the stream is torn.
    Torn,
}

/// Warnings about impossible counts: a few per interval, whichever client writes them.
static IMPOSSIBLE_COUNTS: crate::LogLimit = crate::LogLimit::new(5, Duration::from_secs(10));

/// A shared socket's transmit share, as the connection holds it.
#[derive(Debug)]
pub(crate) struct SharedTx {
    seg: Arc<QpSegment>,
    /// The connection holds the lock.
    held: bool,
    /// The application's counts as last taken into the connection's.
    seen: TxCounts,
    /// The device's push counters.
    totals: Arc<PushShare>,
    /// The MULPDU granted (read back from the segment, the client could change it).
    mulpdu: u16,
    /// When [`revoke`](Self::revoke) first found the application holding the lock.
    revoking_since: Option<Instant>,
}

impl SharedTx {
    /// Shares the stream as it is now; the connection keeps the lock until it is quiet.
    pub(crate) fn grant(seg: Arc<QpSegment>, totals: Arc<PushShare>, stream: &Stream) -> Self {
        let framing = stream.framing();
        seg.tx_share().grant(
            TxFraming {
                crc: framing.crc,
                markers: framing.markers_tx,
                mulpdu: stream.mulpdu(),
            },
            point_of(stream),
        );
        let seen = seg.tx_share().counts();
        Self {
            seg,
            held: true,
            seen,
            totals,
            mulpdu: stream.mulpdu(),
            revoking_since: None,
        }
    }

    /// Takes what the application wrote and discarded since the last count into the
    /// stream's counters (its FPDUs are the stream's as much as its own) and the device's
    /// push counters (executed from pushed messages; discarded).
    fn count(&mut self, stream: &mut Stream) {
        let now = self.seg.tx_share().counts();
        let c = now.since(&std::mem::replace(&mut self.seen, now));
        if !c.plausible(self.mulpdu) {
            // Rate-limited: the client can write garbage at every take of the lock.
            if let Some(left_out) = IMPOSSIBLE_COUNTS.allow() {
                tracing::warn!(
                    counts = ?c,
                    left_out,
                    "the application wrote impossible counts into its transmit share; not counted"
                );
            }
            return;
        }
        stream.count_pushed(c.pushed, &c.by_opcode());
        self.totals.count_executed(c.pushed, 0);
        self.totals
            .count_discards(Discard::NotAtHead, c.not_at_head);
        self.totals.count_discards(Discard::FlowControl, c.busy);
    }

    /// Before the stream produces output: takes the lock, and moves the stream to where
    /// the application left it.
    pub(crate) fn acquire(&mut self, stream: &mut Stream) -> Gate {
        if self.held {
            return Gate::Open;
        }
        let share = self.seg.tx_share();
        let start = Instant::now();
        loop {
            match share.daemon_lock() {
                DaemonLock::Held => break,
                // Revoked from outside (never by the application): this side writes alone.
                DaemonLock::Off => break,
                DaemonLock::Client { word, heartbeat } => {
                    if now_ns().saturating_sub(heartbeat) > LEASE.as_nanos() as u64 {
                        if !share.take_over(word) {
                            continue;
                        }
                        tracing::warn!(
                            "the application held its connection's transmit lock past the lease; taken back"
                        );
                        break;
                    }
                    if start.elapsed() >= SPIN {
                        return Gate::Wait(Instant::now() + RETRY);
                    }
                    std::hint::spin_loop();
                }
            }
        }
        self.take(stream)
    }

    /// This side holds the lock now: takes in what the application wrote, and moves the
    /// stream to where it left it (`Torn` if it let go, or lost the lock, in the middle of
    /// an FPDU).
    fn take(&mut self, stream: &mut Stream) -> Gate {
        self.held = true;
        let share = self.seg.tx_share();
        let (intent, at) = (share.intent(), share.point());
        self.count(stream);
        if intent != 0 {
            return Gate::Torn;
        }
        move_to(stream, at);
        Gate::Open
    }

    /// After output was written: releases the lock if the stream is quiet and nothing
    /// waits for the socket (`out_empty`).
    pub(crate) fn settle(&mut self, stream: &Stream, out_empty: bool) {
        if self.held && out_empty && stream.tx_quiet() {
            self.seg.tx_share().daemon_unlock(point_of(stream));
            self.held = false;
        }
    }

    /// Ends the share for good (the connection is leaving RTS, or moving), once this side
    /// holds the lock, so that an FPDU the application is writing is neither cut short
    /// nor followed by one of the stream's under the same MSN. `Open`: ended, the stream
    /// continues from the application's point; `Wait`: the application holds the lock,
    /// look again then; `Torn`: ended, but the application's lease ran out in the middle
    /// of an FPDU. The wait is bounded by the daemon's own clock, not the heartbeat the
    /// application writes: [`LEASE`] after the first try the share ends whatever the
    /// application does, so that it cannot hold up a migration (an upgrade of the whole
    /// daemon) by keeping its heartbeat fresh.
    pub(crate) fn revoke(&mut self, stream: &mut Stream) -> Gate {
        let since = *self.revoking_since.get_or_insert_with(Instant::now);
        let gate = match self.acquire(stream) {
            Gate::Wait(_) if since.elapsed() >= LEASE => {
                // OFF under the application: its unlock fails, and it writes no more.
                let _ = self.seg.tx_share().revoke();
                tracing::warn!(
                    "the application held its connection's transmit lock through a whole lease while the share ended; taken back"
                );
                self.take(stream)
            }
            gate => gate,
        };
        if !matches!(gate, Gate::Wait(_)) {
            // This side holds the lock: only a client that writes the lock word itself
            // can have it now, and it only tears its own stream.
            let _ = self.seg.tx_share().revoke();
        }
        gate
    }
}

/// Where `stream` stands, as the transmit share writes it.
fn point_of(stream: &Stream) -> TxPoint {
    let (send_msn, position) = stream.tx_point();
    TxPoint { send_msn, position }
}

/// Moves `stream` to where the application left it.
fn move_to(stream: &mut Stream, at: TxPoint) {
    stream.set_tx_point(at.send_msn, at.position);
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use bytes::BytesMut;
    use ipc::qpseg::{Geometry, QpSegment};
    use mpa::{Handshake, HandshakeEvent, MpaConfig};
    use rdmap::{Stream, StreamConfig};

    use super::*;
    use crate::push::PushConfig;

    /// A stream in RTS, as the initiator of an MPA exchange with default settings.
    fn stream() -> Stream {
        let now = Instant::now();
        let mut client = Handshake::initiator(MpaConfig::default(), b"", now).unwrap();
        let mut server = Handshake::responder(MpaConfig::default(), now);
        let (mut to_server, mut to_client) = (BytesMut::new(), BytesMut::new());
        let _ = client.poll_transmit(&mut to_server);
        server.handle_input(&mut to_server, now);
        assert!(matches!(
            server.poll_event(),
            Some(HandshakeEvent::Request(_))
        ));
        server.accept(b"").unwrap();
        let _ = server.poll_transmit(&mut to_client);
        client.handle_input(&mut to_client, now);
        loop {
            match client.poll_event() {
                Some(HandshakeEvent::Established { negotiated, .. }) => {
                    break Stream::new(StreamConfig::default(), &negotiated);
                }
                Some(_) => {}
                None => panic!("not established"),
            }
        }
    }

    /// The daemon's and the application's maps of one queue pair segment.
    fn segments() -> (Arc<QpSegment>, QpSegment) {
        let d = QpSegment::create(Geometry::default()).unwrap();
        let file = std::fs::File::from(d.fd().try_clone_to_owned().unwrap());
        let c = QpSegment::map(file, Geometry::default()).unwrap();
        (Arc::new(d), c)
    }

    #[test]
    fn the_share_ends_only_after_the_applications_fpdu() {
        let mut stream = stream();
        let (d, c) = segments();
        let totals = Arc::new(PushShare::new(PushConfig::default()));
        let mut share = SharedTx::grant(d, totals, &stream);
        share.settle(&stream, true);
        let (msn, position) = stream.tx_point();

        // The application takes the lock for a Send; the daemon wants the socket back
        // (a migration) before the application has even said how long its FPDU is.
        let cs = c.tx_share();
        let word = cs.client_lock().expect("released by the daemon");
        assert!(
            matches!(share.revoke(&mut stream), Gate::Wait(_)),
            "not while the application writes"
        );
        assert!(cs.client_holds(word) && cs.is_on());
        cs.set_intent(64);
        let at = TxPoint {
            send_msn: msn + 1,
            position: position + 64,
        };
        cs.set_point(at);
        cs.count_pushed(&rdmap::pushed::PushedOp::Send { solicited: false }, 40, 64);
        cs.set_intent(0);
        assert!(cs.client_unlock(word), "its FPDU is whole");

        assert_eq!(share.revoke(&mut stream), Gate::Open);
        assert_eq!(
            stream.tx_point(),
            (at.send_msn, at.position),
            "the stream goes on after the application's Send, not under its MSN"
        );
        assert!(!cs.is_on() && cs.client_lock().is_none(), "ended");
    }

    #[test]
    fn an_application_that_keeps_the_lock_loses_it_a_lease_after_the_share_ends() {
        let mut stream = stream();
        let (d, c) = segments();
        let totals = Arc::new(PushShare::new(PushConfig::default()));
        let mut share = SharedTx::grant(d, totals, &stream);
        share.settle(&stream, true);
        let cs = c.tx_share();
        let word = cs.client_lock().expect("released by the daemon");
        // The application never lets go, and beats as if it were writing.
        let start = Instant::now();
        let gate = loop {
            cs.heartbeat();
            assert!(
                start.elapsed() < 50 * LEASE,
                "the share never ended under a beating application"
            );
            match share.revoke(&mut stream) {
                Gate::Wait(_) => std::thread::sleep(RETRY),
                gate => break gate,
            }
        };
        assert!(start.elapsed() >= LEASE, "not before a whole lease");
        assert_eq!(gate, Gate::Open, "no FPDU was under way");
        assert!(
            !cs.client_unlock(word) && !cs.is_on(),
            "ended under the application"
        );
    }
}
