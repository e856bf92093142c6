//! Parking a connected queue pair for live migration (seed 003 §3.1): its driver stops at
//! the start of a turn and hands its socket over; the queue pair then waits, whole, for a
//! new home and a new driver ([`Parked::resume`]).
//!
//! Nothing of the connection is in flight while it is parked: the stream (every queue,
//! sequence number, partly received message and outstanding Read) and the octets read
//! and not yet consumed are in the state, and so are the octets produced and not yet
//! written (the driver gives them back first). While `Connection::migrating` is set only a
//! driver touches the socket and memory: posts queue their requests (no push, no inline
//! write) and busy polling reads nothing, so the application may go on posting; its
//! requests run once the new driver starts.

use std::sync::Arc;

use rdmap::{MemoryOps, QpNum, QpState};
use std::net::TcpStream;
use tokio::sync::oneshot;

use super::{Home, ParkRequest};
use crate::conn::Shared;

/// Why a queue pair could not be parked.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum ParkError {
    /// It is not connected (closing, or in error, with its driver still at work).
    NotConnected(QpNum, QpState),
    /// Another migration has it.
    Busy(QpNum),
}

/// A queue pair whose driver has stopped (or that has ended and has none). Dropped
/// without [`resume`](Self::resume), it goes on where it was.
#[derive(Debug)]
pub(crate) struct Parked {
    shared: Arc<Shared>,
    /// The socket, if the connection is still running.
    sock: Option<Arc<TcpStream>>,
    resumed: bool,
}

impl Shared {
    /// Stops the driver at the start of its next turn and takes the socket. A queue pair
    /// that has ended parks at once.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped before the driver stopped, the driver carries on.
    pub(crate) async fn park(self: &Arc<Self>) -> Result<Parked, ParkError> {
        let rx = {
            let mut st = self.lock();
            if st.migrating {
                return Err(ParkError::Busy(self.num));
            }
            if !st.io.is_open() {
                st.migrating = true;
                return Ok(self.parked(None));
            }
            let state = st.stream.state();
            if state != QpState::Rts {
                return Err(ParkError::NotConnected(self.num, state));
            }
            let (tx, rx) = oneshot::channel();
            st.migrating = true;
            st.park = Some(ParkRequest(tx));
            rx
        };
        self.wake_driver();
        // If the driver ends instead of parking, it drops the request.
        let sock = rx.await.ok();
        if sock.is_none() {
            let mut st = self.lock();
            st.migrating = false;
            return Err(ParkError::NotConnected(self.num, st.stream.state()));
        }
        Ok(self.parked(sock))
    }

    fn parked(self: &Arc<Self>, sock: Option<Arc<TcpStream>>) -> Parked {
        Parked {
            shared: Arc::clone(self),
            sock,
            resumed: false,
        }
    }
}

impl Parked {
    /// The queue pair.
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Its socket, if the connection is still running.
    pub(crate) fn sock(&self) -> Option<&Arc<TcpStream>> {
        self.sock.as_ref()
    }

    /// Lets go of the queue pair without starting its driver again (it moved to another
    /// process).
    pub(crate) fn forget(&mut self) {
        self.sock = None;
        self.resumed = true;
    }

    /// Moves it to `home`, with `mem` its new view of memory, and starts its driver on
    /// the current runtime.
    pub(crate) fn resume_in(mut self, home: Home, mem: Box<dyn MemoryOps + Send>) {
        {
            let mut st = self.shared.lock();
            st.home = home;
            st.mem = mem;
        }
        self.resume();
    }

    /// Starts its driver again, where it is.
    fn resume(&mut self) {
        if self.resumed {
            return;
        }
        self.resumed = true;
        self.shared.lock().migrating = false;
        if let Some(sock) = self.sock.take() {
            crate::conn::spawn(Arc::clone(&self.shared), sock);
        }
        // Work posted while it was parked is waiting.
        self.shared.wake_driver();
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        self.resume();
    }
}
