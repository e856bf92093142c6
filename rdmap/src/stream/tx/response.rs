//! The responses owed to the peer (the IRQ): a Read Response carries the local memory the
//! Read Request names, an Atomic Response the original value.

use super::IrqEntry;
use super::message::{Done, OutMsg, Source, inline, read_v2_flag, tagged, untagged};
use crate::stream::Stream;
use crate::wire::{AtomicResponseRepr, Opcode};

impl Stream {
    /// The message answering `resp`, the oldest request the peer is owed a response to.
    pub(super) fn response_message(&mut self, resp: IrqEntry) -> OutMsg {
        match resp {
            IrqEntry::Read { req, v2 } => OutMsg {
                header: read_v2_flag(tagged(Opcode::ReadResponse, req.sink_stag, req.sink_to), v2),
                imm: None,
                len: req.size,
                src: if req.size == 0 {
                    Source::Empty
                } else {
                    Source::Remote(req)
                },
                off: 0,
                done: Done::Response,
            },
            IrqEntry::Atomic(r) => {
                let msn = self.tx.next_msn(3);
                OutMsg {
                    header: untagged(Opcode::AtomicResponse, 3, msn, 0),
                    imm: None,
                    src: inline(|b| r.emit(b), AtomicResponseRepr::buffer_len()),
                    len: AtomicResponseRepr::buffer_len() as u32,
                    off: 0,
                    done: Done::Response,
                }
            }
        }
    }
}
