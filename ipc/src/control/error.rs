//! Reply error codes: the status of a reply that failed.

/// The request is malformed or of an unknown function.
pub const MALFORMED: u16 = 1;
/// The client speaks another protocol version.
pub const VERSION: u16 = 2;
/// An object named by the request does not exist or is not the client's.
pub const NOT_FOUND: u16 = 3;
/// The engine refused (the text says why).
pub const REFUSED: u16 = 4;
/// The connection could not be made (the text says why).
pub const CONNECT: u16 = 5;
/// A limit of the daemon was reached.
pub const LIMIT: u16 = 6;
/// The connection could not be made: nothing listens at the address (TCP refused).
/// A client that does not know this code reads it as [`CONNECT`].
pub const CONNECT_REFUSED: u16 = 7;
/// The connection could not be made: no route to the host.
pub const CONNECT_UNREACHABLE: u16 = 8;
/// The connection could not be made: the host did not answer the TCP connect.
pub const CONNECT_TIMED_OUT: u16 = 9;
/// The peer rejected the connection; its private data follows the text.
pub const CONNECT_REJECTED: u16 = 10;

/// The code of a failed connect whose TCP part failed with `kind`.
pub fn of_connect(kind: std::io::ErrorKind) -> u16 {
    use std::io::ErrorKind as K;
    match kind {
        K::ConnectionRefused => CONNECT_REFUSED,
        K::HostUnreachable | K::NetworkUnreachable => CONNECT_UNREACHABLE,
        K::TimedOut => CONNECT_TIMED_OUT,
        _ => CONNECT,
    }
}

/// The TCP failure a connect code stands for (`None`: not a TCP failure).
pub fn connect_kind(code: u16) -> Option<std::io::ErrorKind> {
    use std::io::ErrorKind as K;
    match code {
        CONNECT_REFUSED => Some(K::ConnectionRefused),
        CONNECT_UNREACHABLE => Some(K::HostUnreachable),
        CONNECT_TIMED_OUT => Some(K::TimedOut),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use crate::control::error;

    #[test]
    fn a_connects_tcp_failure_crosses_as_its_kind() {
        use std::io::ErrorKind as K;
        for kind in [K::ConnectionRefused, K::HostUnreachable, K::TimedOut] {
            let code = error::of_connect(kind);
            assert_ne!(code, error::CONNECT, "{kind:?}");
            assert_eq!(error::connect_kind(code), Some(kind));
        }
        assert_eq!(
            error::of_connect(K::NetworkUnreachable),
            error::CONNECT_UNREACHABLE
        );
        assert_eq!(error::of_connect(K::ConnectionReset), error::CONNECT);
        assert_eq!(error::connect_kind(error::CONNECT), None);
    }
}
