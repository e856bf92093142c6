//! Events: what the daemon tells a client on its own, with transaction context 0.

use std::net::SocketAddr;

use bytes::{BufMut, Bytes};

use super::header::{finish, start};
use super::{MAX_PRIVATE_DATA, func};
use crate::codec::{Malformed, Reader, put_addr, put_blob};

/// How a queue pair ended, as [`Event::QpEnded`] carries it.
pub mod end {
    /// Closed gracefully.
    pub const CLOSED: u8 = 0;
    /// The peer sent a Terminate.
    pub const TERMINATED_BY_PEER: u8 = 1;
    /// This side sent a Terminate.
    pub const TERMINATED: u8 = 2;
    /// The connection was lost.
    pub const CONNECTION_LOST: u8 = 3;
    /// A timeout ended it.
    pub const TIMED_OUT: u8 = 4;
    /// Its completion ring overflowed: the daemon terminated it.
    pub const CQ_OVERRUN: u8 = 5;
    /// The client wrote garbage into its rings: the daemon closed it.
    pub const MISUSED: u8 = 6;
}

/// Something the daemon tells a client on its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A connection request arrived on a listener.
    Incoming {
        /// The listener.
        listener: u32,
        /// The request's id for Accept or Reject.
        id: u32,
        /// Who asks.
        peer: SocketAddr,
        /// Their private data.
        private: Bytes,
    },
    /// A queue pair ended.
    QpEnded {
        /// The queue pair.
        qp: u32,
        /// How: one of [`end`].
        how: u8,
        /// The Terminate's two octets (layer/type, code), if one was involved.
        term: [u8; 2],
    },
}

impl Event {
    /// The whole message.
    pub fn encode(&self) -> Bytes {
        match self {
            Self::Incoming {
                listener,
                id,
                peer,
                private,
            } => {
                let mut out = start(func::EVENT_INCOMING, 0);
                out.put_u32_le(*listener);
                out.put_u32_le(*id);
                put_addr(&mut out, *peer);
                put_blob(&mut out, private);
                finish(out)
            }
            Self::QpEnded { qp, how, term } => {
                let mut out = start(func::EVENT_QP_ENDED, 0);
                out.put_u32_le(*qp);
                out.put_u8(*how);
                out.put_slice(term);
                finish(out)
            }
        }
    }

    /// Parses an event's body.
    pub fn decode(func: u16, body: &[u8]) -> Result<Self, Malformed> {
        let mut r = Reader::new(body);
        let ev = match func {
            func::EVENT_INCOMING => Self::Incoming {
                listener: r.u32("listener")?,
                id: r.u32("id")?,
                peer: r.addr()?,
                private: r.blob(MAX_PRIVATE_DATA, "private data")?,
            },
            func::EVENT_QP_ENDED => {
                let qp = r.u32("qp")?;
                let how = r.u8("how")?;
                let t = r.take(2, "terminate")?;
                Self::QpEnded {
                    qp,
                    how,
                    term: [t[0], t[1]],
                }
            }
            _ => return Err(Malformed("event code")),
        };
        if !r.is_empty() {
            return Err(Malformed("octets after the last field"));
        }
        Ok(ev)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::HEADER_LEN;

    #[test]
    fn events_round_trip() {
        let ev = Event::QpEnded {
            qp: 4,
            how: end::TERMINATED_BY_PEER,
            term: [0x12, 0x03],
        };
        let m = ev.encode();
        assert_eq!(&m[HEADER_LEN..], &[4, 0, 0, 0, 1, 0x12, 0x03]);
        assert_eq!(
            Event::decode(func::EVENT_QP_ENDED, &m[HEADER_LEN..]).unwrap(),
            ev
        );
        let inc = Event::Incoming {
            listener: 1,
            id: 2,
            peer: "10.0.0.1:5".parse().unwrap(),
            private: Bytes::from_static(b"x"),
        };
        let m = inc.encode();
        assert_eq!(
            Event::decode(func::EVENT_INCOMING, &m[HEADER_LEN..]).unwrap(),
            inc
        );
    }
}
