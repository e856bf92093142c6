//! A parked queue pair as plain data and a socket, to cross to another process (live
//! migration between processes, seed 003 §3.1), and the queue pair built from them there.
//!
//! The image holds what a move between engines (`migration/engines.rs`) moves as a value
//! inside one process: the stream (as its snapshot), the octets read and not yet consumed,
//! the octets produced and not yet written (its send queue holds requests waiting for
//! queued registrations), and completions not yet delivered. The socket crosses as a file
//! descriptor beside it, so the TCP connection is the same one.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use rdmap::{Completion, MemoryOps, QpEnd, QpNum, Stream};
use std::net::TcpStream;

use super::park::Parked;
use super::{Connection, Home};
use crate::conn::Shared;
use crate::pcap::Tap;

/// One queue pair of a domain crossing to another process.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct QpImage {
    /// Its number in the sending process (type 2 windows name it).
    pub(crate) num: u32,
    stream: Vec<u8>,
    rx: Vec<u8>,
    rx_eof: bool,
    unwritten: Vec<u8>,
    ready: Vec<Completion>,
    /// It draws on a shared receive queue.
    pub(crate) srq: bool,
}

impl Parked {
    /// The queue pair as an image and a duplicate of its socket (`None`: it has ended
    /// and has no socket, so there is nothing to move). The queue pair is unchanged.
    pub(crate) fn image(&self) -> Result<Option<(QpImage, OwnedFd)>, String> {
        let Some(sock) = self.sock() else {
            return Ok(None);
        };
        let fd = sock
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| format!("cannot duplicate the socket: {e}"))?;
        let shared = self.shared();
        let mut st = shared.lock();
        let stream = st
            .stream
            .to_snapshot(crate::conn::now())
            .map_err(|e| e.to_string())?;
        let n = st.unwritten.len();
        // Reading the unwritten octets out consumes them: put them back as they were.
        let unwritten = st.unwritten.take(n);
        st.unwritten.push_framed(unwritten.clone());
        let image = QpImage {
            num: shared.num.0,
            stream,
            rx: st.rx.to_vec(),
            rx_eof: st.rx_eof,
            unwritten: unwritten.to_vec(),
            ready: st.ready.clone(),
            srq: st.srq.is_some(),
        };
        Ok(Some((image, fd)))
    }

    /// Ends the queue pair here for good: it now runs in another process. Its driver is
    /// not restarted, its socket is closed without a FIN (the other process holds it), and
    /// [`Qp::closed`](crate::conn::Qp::closed) says [`QpEnd::MovedAway`]. Nothing is flushed:
    /// its requests complete in the other process.
    pub(crate) fn retire(mut self) {
        let shared = Arc::clone(self.shared());
        let mut st = shared.lock();
        st.end = Some(QpEnd::MovedAway);
        st.publish_end = st.end;
        // The engine it left counted it gone already (`Engine::disown`).
        st.home.totals = Arc::default();
        st.unwritten.clear();
        st.ready.clear();
        let tap = st.io.close();
        shared.unlock(st);
        drop(tap);
        self.forget();
    }
}

/// A queue pair read back from its image, with its socket, not running yet: everything
/// that can fail is done.
#[derive(Debug)]
pub(crate) struct Prepared {
    stream: Stream,
    sock: Arc<TcpStream>,
    image: QpImage,
}

impl QpImage {
    /// Reads the stream back and takes `sock`.
    pub(crate) fn prepare(self, sock: OwnedFd) -> Result<Prepared, String> {
        let stream =
            Stream::from_snapshot(&self.stream, crate::conn::now()).map_err(|e| e.to_string())?;
        let sock = TcpStream::from(sock);
        sock.set_nonblocking(true)
            .map_err(|e| format!("the socket: {e}"))?;
        Ok(Prepared {
            stream,
            sock: Arc::new(sock),
            image: self,
        })
    }
}

impl Prepared {
    /// Starts it as queue pair `num` of domain `pd`, in `home` with `mem` its view of
    /// memory, its completions going to `completions` and its receives drawn
    /// from `srq`. Its driver starts on the current runtime.
    pub(crate) fn start(
        self,
        (num, pd): (QpNum, crate::tpt::PdId),
        home: Home,
        mem: Box<dyn MemoryOps + Send>,
        completions: crate::conn::Completions,
        srq: Option<crate::srq::Srq>,
    ) -> Arc<Shared> {
        let Self {
            stream,
            sock,
            image,
        } = self;
        let rx = BytesMut::from(&image.rx[..]);
        let mut st = Connection::start(
            num,
            (stream, mem),
            (Arc::clone(&sock), Tap::off()),
            rx,
            (home, srq),
        );
        st.rx_eof = image.rx_eof;
        st.unwritten.push_framed(Bytes::from(image.unwritten));
        st.tx_busy = !st.unwritten.is_empty();
        st.ready = image.ready;
        let shared = Arc::new(Shared::new(num, pd, st, completions));
        crate::conn::spawn(Arc::clone(&shared), sock);
        shared.wake_driver();
        shared
    }
}
