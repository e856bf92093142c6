//! Listening sockets: `[::]` takes IPv4 clients too (as rping's listener does), whatever
//! the system's `net.ipv6.bindv6only` default says.

use std::io;
use std::net::SocketAddr;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::TcpListener;

/// The listen backlog, tokio's (`TcpListener::bind`).
const BACKLOG: i32 = 1024;

/// Binds and listens on `addr`. The unspecified IPv6 address `[::]` is bound dual-stack
/// (`IPV6_V6ONLY` off): it takes IPv6 and IPv4 clients alike, the latter seen as IPv4
/// addresses (see [`canonical`]). Any other address is bound as tokio binds it.
pub(crate) async fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    match addr {
        SocketAddr::V6(v6) if v6.ip().is_unspecified() => {
            let sock = Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP))?;
            sock.set_only_v6(false)?;
            // As tokio's bind does: a restarted server takes its port back at once.
            sock.set_reuse_address(true)?;
            sock.bind(&addr.into())?;
            sock.listen(BACKLOG)?;
            sock.set_nonblocking(true)?;
            TcpListener::from_std(sock.into())
        }
        _ => TcpListener::bind(addr).await,
    }
}

/// `peer` as the user knows it: an IPv4 client of a dual-stack listener
/// (`[::ffff:10.0.0.1]:p`) as its IPv4 address (`10.0.0.1:p`).
pub(crate) fn canonical(peer: SocketAddr) -> SocketAddr {
    SocketAddr::new(peer.ip().to_canonical(), peer.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_unspecified_ipv6_address_takes_both_families() {
        let Ok(l) = bind("[::]:0".parse().unwrap()).await else {
            println!("SKIPPED: this host has no IPv6");
            return;
        };
        let port = l.local_addr().unwrap().port();
        for client in ["127.0.0.1", "::1"] {
            let addr = SocketAddr::new(client.parse().unwrap(), port);
            let _c = tokio::net::TcpStream::connect(addr).await.unwrap();
            let (_, peer) = l.accept().await.unwrap();
            assert_eq!(canonical(peer).ip(), addr.ip(), "{peer}");
        }
    }
}
