//! Socket options through socket2: the knobs an RDMA transport wants on its TCP sockets.

use std::io;

use socket2::SockRef;
use tokio::net::TcpStream;

/// TCP options applied to every connection of an engine.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SocketOptions {
    /// Disable Nagle's algorithm (on by default: RDMA messages are latency sensitive and
    /// the engine coalesces FPDUs itself).
    pub nodelay: bool,
    /// Kernel send buffer size in octets (`SO_SNDBUF`); `None` keeps the system default.
    pub send_buffer: Option<usize>,
    /// Kernel receive buffer size in octets (`SO_RCVBUF`); `None` keeps the system default.
    pub recv_buffer: Option<usize>,
    /// TCP keepalive, so a peer that vanished is noticed (`None` = off).
    pub keepalive: Option<std::time::Duration>,
    /// Busy polling, as Linux's `SO_BUSY_POLL`: for this long after a connection last
    /// answered its peer (a Read or Atomic Response: the responder's part, which no
    /// application thread does), its driver polls the socket instead of sleeping until
    /// the kernel wakes a runtime thread, which costs more than a round trip on most
    /// machines. The price is a CPU for up to this long after each response. Zero turns
    /// it off; so does a current-thread runtime (the spin would hold up every other task
    /// of the runtime, the one it waits for among them). While the application polls its
    /// own input
    /// ([`Qp::poll_input`](crate::Qp::poll_input)), the driver neither polls nor sleeps
    /// on the socket.
    pub busy_poll: std::time::Duration,
}

impl SocketOptions {
    /// Default [`busy_poll`](Self::busy_poll): Linux's suggested `busy_read` value.
    pub const BUSY_POLL: std::time::Duration = std::time::Duration::from_micros(50);
}

impl Default for SocketOptions {
    fn default() -> Self {
        Self {
            nodelay: true,
            send_buffer: None,
            recv_buffer: None,
            keepalive: Some(std::time::Duration::from_secs(60)),
            busy_poll: Self::BUSY_POLL,
        }
    }
}

impl SocketOptions {
    /// Applies the options to a connected socket.
    pub fn apply(&self, sock: &TcpStream) -> io::Result<()> {
        sock.set_nodelay(self.nodelay)?;
        let s = SockRef::from(sock);
        if let Some(n) = self.send_buffer {
            s.set_send_buffer_size(n)?;
        }
        if let Some(n) = self.recv_buffer {
            s.set_recv_buffer_size(n)?;
        }
        if let Some(t) = self.keepalive {
            s.set_tcp_keepalive(&socket2::TcpKeepalive::new().with_time(t))?;
        }
        Ok(())
    }

    /// The MSS the kernel chose for `sock`, for sizing FPDUs (RFC 5044 §4.5 EMSS).
    pub fn mss(sock: &TcpStream) -> Option<u32> {
        SockRef::from(sock).mss().ok()
    }
}
