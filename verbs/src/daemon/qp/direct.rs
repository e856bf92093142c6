//! The push path that skips the daemon, on the posting side: a lone small request is
//! offered to the queue pair's shared socket ([`SharedSocket`]); it is complete at once if
//! it went on the wire, and otherwise goes through the send queue (flagged if the socket
//! could not take it).

use std::sync::Arc;

use ipc::control::{Reply, Request};
use rdmap::pushed::PushedOp;
use rdmap::{Completion, Queue, SendFlags, SendOp, SendWr, WcStatus};

use super::super::Client;
use super::super::shared_socket::{DIRECT_MAX, Pushed, SharedSocket};
use super::DaemonQp;

/// What became of a request offered to the shared socket.
pub(super) enum Direct {
    /// It ended here: on the wire (or cut short, flushed); this is its completion.
    Done(Completion),
    /// It goes through the send queue; `discarded`: its completion says the push was.
    Queue { discarded: bool },
}

impl DaemonQp {
    /// Offers `wr` to the shared socket: a Send (without Invalidate or Immediate Data)
    /// or an RDMA Write whose payload fits the socket's room (`DIRECT_MAX`) and one FPDU.
    /// `sq_empty`: every request posted before has retired.
    pub(super) fn try_direct(&self, d: &mut SharedSocket, wr: &SendWr, sq_empty: bool) -> Direct {
        let (op, data) = match &wr.op {
            SendOp::Send {
                data,
                invalidate: None,
                immediate: None,
            } => (
                PushedOp::Send {
                    solicited: wr.flags.contains(SendFlags::SOLICITED),
                },
                data,
            ),
            SendOp::Write { data, dst } if data.len().is_some_and(|l| l <= dst.len) => (
                PushedOp::Write {
                    stag: dst.stag,
                    to: dst.to,
                },
                data,
            ),
            _ => return Direct::Queue { discarded: false },
        };
        let seg = &self.shared.seg;
        let max = op
            .max_payload(seg.tx_share().framing().mulpdu)
            .min(DIRECT_MAX);
        // Longer than one FPDU (or than the room): not for this path, wherever it stands
        // in the queue, so not a discard either.
        if data.len().is_none_or(|len| len as usize > max) {
            return Direct::Queue { discarded: false };
        }
        let mut buf = d.take_payload();
        // Behind other requests it is discarded before anything is copied.
        let pushed = if !sq_empty {
            d.push(seg, op, &[], false)
        } else {
            let room = &mut buf[..max];
            match self.local_payload(data, room) {
                Some(payload) => d.push(seg, op, payload, true),
                None => Pushed::NotForPush,
            }
        };
        d.put_payload(buf);
        match pushed {
            Pushed::Sent => Direct::Done(wc_of(wr, WcStatus::Success)),
            Pushed::Broken => Direct::Done(wc_of(wr, WcStatus::Flushed)),
            Pushed::Discarded(_) => Direct::Queue { discarded: true },
            Pushed::NotForPush => Direct::Queue { discarded: false },
        }
    }
}

/// Asks the daemon to share queue pair `id`'s socket; `None` if it does not (an older
/// daemon, a privileged port, or sharing turned off): seed 000's push then goes through
/// the daemon.
pub(super) fn share_socket(client: &Arc<Client>, id: u32) -> Option<Box<SharedSocket>> {
    match client.call_with(&Request::ShareTx { qp: id }, &[]) {
        Ok((Reply::Done, mut fds)) if fds.len() == 1 => {
            fds.pop().map(|fd| Box::new(SharedSocket::new(fd)))
        }
        Ok(other) => {
            tracing::debug!(?other, "iwarpd did not share the socket");
            None
        }
        Err(e) => {
            tracing::debug!(error = %e, "iwarpd did not share the socket");
            None
        }
    }
}

/// The completion of `wr`, which ended here with `status` (its flags, and its length).
fn wc_of(wr: &SendWr, status: WcStatus) -> Completion {
    let mut wc = Completion::new(wr.wr_id, Queue::Send, wr.op.wc_opcode(), status);
    wc.flags = wr.flags | SendFlags::PUSHED;
    wc.byte_len = wr.op.payload_len();
    wc
}
