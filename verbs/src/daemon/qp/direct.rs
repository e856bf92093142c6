//! The push path that skips the daemon, on the posting side: a lone small request is
//! offered to the queue pair's shared socket ([`SharedSocket`]); it is complete at once if
//! it went on the wire, and otherwise goes through the send queue (flagged if the socket
//! could not take it).

use std::sync::Arc;

use ipc::control::{Reply, Request};
use rdmap::pushed::PushedOp;
use rdmap::{Completion, Payload, Queue, SendFlags, SendOp, SendWr, WcStatus};

use super::super::Client;
use super::super::shared_socket::{Pushed, SharedSocket};
use super::DaemonQp;

/// The largest payload written to the shared socket from the application's thread:
/// one that a socket with room takes whole. A larger FPDU that the socket took only part
/// of would hold the posting thread until the peer drained it (and, past a second, end
/// the connection), so larger messages go through the daemon.
const DIRECT_MAX: u16 = 16 * 1024;

/// What became of a request offered to the shared socket.
pub(super) enum Direct {
    /// It ended here: on the wire (or cut short, flushed); this is its completion.
    Done(Completion),
    /// It goes through the send queue; `discarded`: its completion says the push was.
    Queue { discarded: bool },
}

impl DaemonQp {
    /// Offers `wr` to the shared socket: a Send (without Invalidate or Immediate Data)
    /// or an RDMA Write of at most [`DIRECT_MAX`] octets that fits one FPDU. `sq_empty`:
    /// every request posted before has retired.
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
        let max = seg.tx_share().framing().mulpdu.min(DIRECT_MAX);
        let mut payload = d.take_payload();
        // Behind other requests it is discarded before anything is copied.
        let pushed = if !sq_empty {
            d.push(seg, op, &[], false)
        } else if self.gather(data, &mut payload, max) {
            d.push(seg, op, &payload, true)
        } else {
            Pushed::NotForPush
        };
        d.put_payload(payload);
        match pushed {
            Pushed::Sent => Direct::Done(wc_of(wr, WcStatus::Success)),
            Pushed::Broken => Direct::Done(wc_of(wr, WcStatus::Flushed)),
            Pushed::Discarded(_) => Direct::Queue { discarded: true },
            Pushed::NotForPush => Direct::Queue { discarded: false },
        }
    }

    /// Copies the octets of `data` into `out` (emptied first) if they are at most `max`
    /// and in this process: `Bytes`, or a gather list of regions this library registered.
    fn gather(&self, data: &Payload, out: &mut Vec<u8>, max: u16) -> bool {
        out.clear();
        if data.len().is_none_or(|l| l > u32::from(max)) {
            return false;
        }
        match data {
            Payload::Bytes(b) => out.extend_from_slice(b),
            Payload::Sgl(sgl) => {
                for sge in sgl.iter() {
                    let at = out.len();
                    out.resize(at + sge.len as usize, 0);
                    if !self.client.copy_local(sge, &mut out[at..]) {
                        return false;
                    }
                }
            }
        }
        true
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
