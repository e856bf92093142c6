//! The connection's side of seed 000's push path ([`crate::push`]): a post offers its
//! request to the queue pair's [`QpPush`] with what the push path reads of the connection,
//! then runs the request as the push path decided. This stays in `conn` because it reads
//! and changes the connection's private state (the stream, the push rules and arena) and
//! writes through the inline transmit.

use rdmap::{PostError, QpState, SendWr};

use super::{Connection, Next, inline_tx};
use crate::push::{ConnView, Offer, QpPush};

/// Posts `wr` (a lone request) by the push path if it may be pushed, else through the
/// send queue. Returns what is left to do once the lock is released.
pub(super) fn post(st: &mut Connection, push: &QpPush, wr: SendWr) -> Result<Next, PostError> {
    let view = ConnView {
        stream: &st.stream,
        idle: st.stream.state() == QpState::Rts && st.io.is_open() && !st.migrating,
        tx_busy: st.tx_busy || st.tx_claimed,
        tpt: &st.home.tpt,
        rules: &mut st.push_rules,
        arena: &mut st.push_arena,
    };
    match push.offer(view, wr) {
        Offer::Queue(wr) => inline_tx::post_queued(st, wr),
        Offer::Discarded(wr) => {
            st.stream.post_send(wr)?;
            Ok(Next::Driver)
        }
        Offer::Execute(pushed) => {
            if let Err(e) = st.stream.post_send(pushed) {
                push.untrack();
                return Err(e);
            }
            push.executed();
            let next = inline_tx::transmit(st, inline_tx::INLINE_MAX);
            // The message is produced, for this thread to write next, or with the driver:
            // its tracking entry is free again.
            push.untrack();
            Ok(next)
        }
    }
}
