//! Where a server listens when no address is given.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

/// Every address of both families on `port`, in the order to try them: `[::]`, which
/// takes IPv4 clients too (dual-stack, as rping's listener does), then `0.0.0.0` for a
/// host without IPv6. `Device::listen` binds the first that works.
pub fn any_address(port: u16) -> [SocketAddr; 2] {
    [
        SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), port),
        SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), port),
    ]
}
