//! In-process loopback: our client against our server.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use verbs::Device;

use super::{Opts, Test, run_client, serve};

async fn loopback(test: Test, size: usize, iters: u64) {
    let mut opts = Opts::parse(
        [
            test.name(),
            "-s",
            &size.to_string(),
            "-n",
            &iters.to_string(),
        ]
        .iter()
        .map(|s| s.to_string()),
    )
    .unwrap()
    .unwrap();
    opts.first_delay = Duration::ZERO;
    opts.timeout = Duration::from_secs(10);
    let dev = Device::open(opts.device_config());
    let listener = dev
        .listen(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0))
        .await
        .unwrap();
    let port = listener.local_addr().port();
    let sopts = opts.clone();
    let server = tokio::spawn(async move { serve(&dev, &listener, &sopts).await });
    let mut copts = opts;
    copts.port = port;
    copts.server = Some(IpAddr::V4(Ipv4Addr::LOCALHOST));
    let sent = run_client(&copts).await.unwrap();
    let got = server.await.unwrap().unwrap();
    if test == Test::SendBw {
        // The send_bw server reports its own measurement.
        assert_eq!((got.size, got.iters), (sent.size, sent.iters));
    } else {
        assert_eq!(got, sent);
    }
    assert_eq!((got.size, got.iters), (size as u64, iters));
    assert!(got.bw_avg > 0.0);
}

#[tokio::test]
async fn write_bw_loopback() {
    loopback(Test::WriteBw, 8192, 40).await;
}

#[tokio::test]
async fn read_bw_loopback() {
    loopback(Test::ReadBw, 8192, 40).await;
}

#[tokio::test]
async fn send_bw_loopback() {
    loopback(Test::SendBw, 8192, 40).await;
}

/// More Sends than the RX depth (512) and the TX depth (128): credits must pace them.
#[tokio::test]
async fn send_bw_loopback_credits() {
    loopback(Test::SendBw, 1024, 1500).await;
}

#[tokio::test]
async fn write_bw_loopback_deep() {
    loopback(Test::WriteBw, 1024, 1500).await;
}
