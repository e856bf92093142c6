//! A servant writes completions back: the engine's, each mapped back to the client's
//! request (unsignaled successes dropped), held in a bounded backlog, and pushed into the
//! client's completion ring, whose doorbell it rings if the client sleeps.

use ipc::qpseg::{CQE_SIZE, Geometry, Side};
use ipc::wqe::encode_cqe;
use rdmap::{Completion, QpEnd, Queue};

use super::Run;
use super::posting::Via;
use crate::local::logs::{CLIENT_OTHER, limited};
use crate::local::recvs::{QpRecvs, RQ_ID, SRQ_ID};

/// The most completions a servant holds for its client beyond its completion ring:
/// what the client's own requests can make at most (its ring holds one per send and
/// receive it may have outstanding, and its shared receive queue's receives can complete
/// here too). Past it the client is not taking its completions (an honest library always
/// does), and the queue pair ends with [`QpEnd::CqOverrun`], as an RNIC's does when its
/// completion queue overflows: nothing grows.
pub(super) fn backlog_cap(geo: &Geometry, recvs: &QpRecvs) -> usize {
    geo.cq_depth as usize + recvs.srq().map_or(0, |q| q.depth() as usize)
}

impl Run {
    /// How the client is told its queue pair ended: the connection's end, unless the
    /// daemon ended it for what the client did.
    pub(super) fn why_ended(&self, how: QpEnd) -> QpEnd {
        if self.overran {
            QpEnd::CqOverrun
        } else if self.broken || self.recvs.garbage().is_some() {
            QpEnd::Misused
        } else {
            how
        }
    }

    /// Holds a completion for the client's ring, or ends the queue pair if the client
    /// has let more pile up than its requests can make (see [`backlog_cap`]).
    fn hold(&mut self, e: [u8; CQE_SIZE]) {
        if self.backlog.len() < self.backlog_cap {
            self.backlog.push_back(e);
            return;
        }
        if !self.overran {
            self.overran = true;
            limited!(CLIENT_OTHER, warn, qp = %self.qp.num(), held = self.backlog.len(),
                "local client does not take its completions; its queue pair is terminated");
            self.qp.terminate(rdmap::TermCode::RDMAP_LOCAL_CATASTROPHIC);
        }
    }

    pub(super) fn finish(&mut self, mut wc: Completion) {
        if wc.wr_id & (SRQ_ID | RQ_ID) != 0 {
            // A receive the engine took on demand: never in its receive queue.
            if let Some(client) = self.recvs.complete(wc.wr_id) {
                wc.wr_id = client;
                self.hold(encode_cqe(&wc));
            }
            return;
        }
        match wc.queue {
            Queue::Send => {
                self.sq_room += 1;
                self.seg.sq_retire(1);
            }
            Queue::Recv => self.rq_room += 1,
        }
        let (wc, via) = self.ids.complete(wc);
        if via == Some(Via::Push) {
            self.push.share.untrack();
        }
        if let Some(wc) = wc {
            self.hold(encode_cqe(&wc));
        }
    }

    /// Moves the engine's completions into the backlog; true if any.
    pub(super) fn collect(&mut self) -> bool {
        let mut got = std::mem::take(&mut self.completed);
        if self.cq.poll_with(usize::MAX, |w| got.push(w.wc)).is_err() {
            self.overrun();
        }
        let any = !got.is_empty();
        for wc in got.drain(..) {
            self.finish(wc);
        }
        self.completed = got;
        any
    }

    /// Cannot happen (the queue holds every request the servant let in); if it did,
    /// completions were lost: end the queue pair rather than hang the client.
    pub(super) fn overrun(&self) {
        tracing::error!(qp = %self.qp.num(), "servant completion queue overrun");
        self.qp.disconnect();
    }

    /// Pushes the backlog into the client's ring and rings it if it sleeps; true if
    /// anything went in.
    pub(super) fn deliver(&mut self) -> bool {
        let mut pushed = false;
        while let Some(e) = self.backlog.front() {
            if !self.seg.cq_push(e) {
                break;
            }
            self.backlog.pop_front();
            pushed = true;
        }
        if pushed && self.seg.must_wake(Side::Client) {
            self.to_client.ring();
        }
        pushed
    }
}
