//! Where `iwarpd check` connects: `HOST`, `HOST:PORT`, an IPv6 address bare or in
//! brackets (`::1`, `[::1]`, `[::1]:4791`); the port is the daemon's usual 4791 when left
//! out.

use std::net::{IpAddr, SocketAddr};

/// The port of `iwarpd check HOST`: the one iwarpd is usually started on.
pub(crate) const DEFAULT_PORT: u16 = 4791;

/// What to look up for `addr`: an address ready to use, or a host name and a port.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Target {
    Addr(SocketAddr),
    Host(String, u16),
}

/// Reads `addr` as the user wrote it; `Err` says what to write instead.
fn target(addr: &str) -> Result<Target, String> {
    let addr = addr.trim();
    if let Ok(a) = addr.parse::<SocketAddr>() {
        return Ok(Target::Addr(a));
    }
    // A bare address, IPv6 included (`::1` has colons but no port).
    if let Ok(ip) = addr.parse::<IpAddr>() {
        return Ok(Target::Addr(SocketAddr::new(ip, DEFAULT_PORT)));
    }
    if let Some(inner) = addr.strip_prefix('[').and_then(|a| a.strip_suffix(']')) {
        return inner
            .parse::<IpAddr>()
            .map(|ip| Target::Addr(SocketAddr::new(ip, DEFAULT_PORT)))
            .map_err(|_| {
                format!("`{addr}`: `{inner}` in brackets is not an IPv6 address (e.g. [::1])")
            });
    }
    match addr.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') && !host.is_empty() => {
            let port = port.parse::<u16>().map_err(|_| {
                format!(
                    "`{addr}`: `{port}` is not a port (write HOST or HOST:PORT, e.g. \
                     {host}:{DEFAULT_PORT})"
                )
            })?;
            Ok(Target::Host(host.to_owned(), port))
        }
        Some(_) => Err(format!(
            "`{addr}` is neither HOST:PORT nor an IPv6 address: write an IPv6 address with \
             a port in brackets, e.g. [::1]:{DEFAULT_PORT}"
        )),
        None if addr.is_empty() => Err(format!(
            "no address: write HOST or HOST:PORT, e.g. 127.0.0.1:{DEFAULT_PORT}"
        )),
        None => Ok(Target::Host(addr.to_owned(), DEFAULT_PORT)),
    }
}

/// The address `iwarpd check ADDR` connects to (a host name is looked up).
pub(crate) async fn resolve(addr: &str) -> Result<SocketAddr, String> {
    let (host, port) = match target(addr)? {
        Target::Addr(a) => return Ok(a),
        Target::Host(host, port) => (host, port),
    };
    let mut addrs = tokio::net::lookup_host((host.as_str(), port))
        .await
        .map_err(|e| {
            format!(
                "cannot resolve `{host}`: {e} (write HOST or HOST:PORT, e.g. \
                 127.0.0.1:{DEFAULT_PORT})"
            )
        })?;
    addrs
        .next()
        .ok_or_else(|| format!("`{host}` resolves to no address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> Target {
        Target::Addr(s.parse().unwrap())
    }

    #[test]
    fn the_port_is_4791_unless_given() {
        assert_eq!(target("10.0.0.1"), Ok(addr("10.0.0.1:4791")));
        assert_eq!(target("10.0.0.1:18515"), Ok(addr("10.0.0.1:18515")));
        assert_eq!(target("::1"), Ok(addr("[::1]:4791")));
        assert_eq!(target("[::1]"), Ok(addr("[::1]:4791")));
        assert_eq!(target("[::1]:7"), Ok(addr("[::1]:7")));
        assert_eq!(target("fe80::1"), Ok(addr("[fe80::1]:4791")));
        assert_eq!(
            target("server"),
            Ok(Target::Host("server".into(), DEFAULT_PORT))
        );
        assert_eq!(target("server:9"), Ok(Target::Host("server".into(), 9)));
    }

    #[test]
    fn what_is_not_an_address_says_what_to_write() {
        let e = target("server:http").unwrap_err();
        assert!(e.contains("`http` is not a port"), "{e}");
        let e = target("[server]").unwrap_err();
        assert!(e.contains("not an IPv6 address"), "{e}");
        let e = target("fe80::1::2:3:4:5:6:7").unwrap_err();
        assert!(e.contains("[::1]:4791"), "{e}");
        assert!(target(":9").is_err());
        assert!(target("").is_err());
    }

    #[tokio::test]
    async fn a_host_name_is_looked_up_with_the_default_port() {
        let a = resolve("localhost").await.unwrap();
        assert_eq!(a.port(), DEFAULT_PORT);
        assert!(a.ip().is_loopback());
    }
}
