//! Unit tests of the rping helpers, and both roles against each other over loopback.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use verbs::Device;

use super::*;

fn args(s: &str) -> Vec<String> {
    s.split_whitespace().map(String::from).collect()
}

#[test]
fn rdma_info_is_rpings_big_endian_struct() {
    let info = RdmaInfo {
        buf: 0x0000_7f00_dead_1000,
        rkey: 0x4309_4a00,
        size: 64,
    };
    let wire = [
        0x00, 0x00, 0x7f, 0x00, 0xde, 0xad, 0x10, 0x00, 0x43, 0x09, 0x4a, 0x00, 0, 0, 0, 64,
    ];
    assert_eq!(info.encode(), wire);
    assert_eq!(RdmaInfo::decode(&wire), Some(info));
    assert_eq!(RdmaInfo::decode(&wire[..15]), None, "short advertisement");
    let r = info.remote();
    assert_eq!(
        (r.stag.to_u32(), r.to, r.len),
        (0x4309_4a00, 0x7f00_dead_1000, 64)
    );
    assert_eq!(RdmaInfo::from_remote(r), info);
}

#[test]
fn ping_buffer_matches_rping_and_the_probe() {
    // The bytes of iwarp_probe.py's rping_buffer(64) (ping 0, pattern from 'A').
    let b = ping_buffer(0, 64);
    assert_eq!(b.len(), 64);
    assert!(b.starts_with(b"rdma-ping-0: ABCDEFG"));
    assert_eq!(b[63], 0);
    assert_eq!(b[62], b'A' + 62 - 13);
    // Ping 1 starts one letter later; the pattern wraps from 'z' to 'A'.
    assert!(ping_buffer(1, 32).starts_with(b"rdma-ping-1: BCD"));
    let long = ping_buffer(0, 200);
    let z = long.iter().position(|&c| c == b'z').unwrap();
    assert_eq!(long[z + 1], b'A');
    assert_eq!(
        c_str(&b),
        "rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr"
    );
    // A buffer shorter than the prefix is truncated and still NUL-terminated.
    assert_eq!(ping_buffer(123_456, 8), b"rdma-pi\0");
}

#[test]
fn command_line() {
    let o = Opts::parse(args(
        "-c -a 10.231.0.11 -C 10 -V -v -S 100 --crc --p2p --first-delay 0",
    ))
    .unwrap();
    assert_eq!(o.role, Role::Client);
    assert_eq!(o.socket_addr().to_string(), "10.231.0.11:7174");
    assert_eq!(
        (o.count, o.size, o.validate, o.verbose),
        (10, 100, true, true)
    );
    assert!(o.crc && o.p2p && o.first_delay.is_zero());
    let e = o.device_config();
    assert_eq!((e.mpa().rev, e.mpa().ird, e.mpa().ord), (2, 1, 1));
    assert!(e.mpa().crc && e.mpa().p2p);

    let s = Opts::parse(args("-s -p 9000 -P")).unwrap();
    let at: Vec<String> = s.listen_addrs().iter().map(|a| a.to_string()).collect();
    assert_eq!(at, ["[::]:9000", "0.0.0.0:9000"], "both families");
    let v4 = Opts::parse(args("-s -a 0.0.0.0 -p 9000")).unwrap();
    assert_eq!(v4.listen_addrs(), [v4.socket_addr()]);
    assert!(s.persistent && !s.crc);
    assert_eq!(s.first_delay, Duration::from_millis(200));
    assert!(!s.device_config().mpa().crc, "CRC off unless --crc");

    let help = Opts::parse(args("-h")).unwrap_err();
    assert_eq!(help.kind(), clap::error::ErrorKind::DisplayHelp);
    assert_eq!(help.exit_code(), 0);
    // -V is rping's validate; the version is --version.
    let version = Opts::parse(args("--version")).unwrap_err();
    assert_eq!(version.kind(), clap::error::ErrorKind::DisplayVersion);
    assert_eq!(
        Opts::parse(args("-c -a 1.2.3.4 -x"))
            .unwrap_err()
            .exit_code(),
        2
    );
    assert!(Opts::parse(args("-c")).is_err(), "client without -a");
    assert!(Opts::parse(args("-a 1.2.3.4")).is_err(), "no role");
    assert!(
        Opts::parse(args("-c -a 1.2.3.4 -S 22")).is_err(),
        "too small"
    );
    assert!(
        Opts::parse(args("-c -a 1.2.3.4 -S 65536")).is_err(),
        "too large"
    );
    assert!(Opts::parse(args("-c -a nowhere")).is_err());
    assert!(
        Opts::parse(args("-c -a 1.2.3.4 -C")).is_err(),
        "missing value"
    );
    assert!(Opts::parse(args("-c -a 1.2.3.4 -x")).is_err());
}

async fn loopback(client: Opts, server: Opts) -> (client::ClientStats, server::ServerStats) {
    let dev = Device::open(server.device_config()).expect("open the device");
    let listener = dev
        .listen((IpAddr::V4(Ipv4Addr::LOCALHOST), 0))
        .await
        .unwrap();
    let port = listener.local_addr().port();
    let srv = tokio::spawn(async move { serve(&dev, &listener, &server).await.unwrap() });
    let client = Opts { port, ..client };
    let c = run_client(&client).await.unwrap();
    (c, srv.await.unwrap())
}

#[tokio::test]
async fn client_and_server_ping_over_loopback() {
    let client = Opts::parse(args("-c -a 127.0.0.1 -C 5 -V -S 1000 --first-delay 0")).unwrap();
    let server = Opts::parse(args("-s -a 127.0.0.1")).unwrap();
    let (c, s) = loopback(client, server).await;
    assert_eq!((c.pings, c.verified), (5, 5));
    assert_eq!((s.connections, s.pings), (1, 5));
}

#[tokio::test]
async fn crc_and_peer_to_peer_over_loopback() {
    let client = Opts::parse(args("-c -a 127.0.0.1 -C 3 -V --crc --p2p")).unwrap();
    let server = Opts::parse(args("-s -a 127.0.0.1 --crc --p2p")).unwrap();
    let (c, s) = loopback(client, server).await;
    assert_eq!((c.pings, c.verified), (3, 3));
    assert_eq!(s.pings, 3);
}

/// A client that goes away between the connection and its first ping (as siw's does when
/// it refuses the Reply's CRC) is a failed connection, not a served one, and the error
/// names the likely reason when the server asked for CRC.
#[tokio::test]
async fn a_client_that_leaves_before_its_first_ping_is_an_error() {
    let server = Opts::parse(args("-s -a 127.0.0.1 --crc")).unwrap();
    let dev = Device::open(server.device_config()).expect("open the device");
    let listener = dev
        .listen((IpAddr::V4(Ipv4Addr::LOCALHOST), 0))
        .await
        .unwrap();
    let addr = listener.local_addr();
    let srv = tokio::spawn(async move { serve(&dev, &listener, &server).await });
    let client = Device::open(
        Opts::parse(args("-c -a 127.0.0.1"))
            .unwrap()
            .device_config(),
    )
    .expect("open the device");
    let pd = client.alloc_pd().unwrap();
    let cq = client.create_cq(4);
    let conn = client
        .connect(&pd, addr, verbs::QpConfig::new(&cq), b"")
        .await
        .unwrap();
    conn.qp.disconnect();
    let err = srv.await.unwrap().unwrap_err().to_string();
    assert!(
        err.starts_with("the client left before its first ping (the connection: "),
        "{err}"
    );
    assert!(err.ends_with("serve without --crc"), "{err}");
}
