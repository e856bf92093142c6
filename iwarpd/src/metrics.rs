//! `metrics = ADDR` (`--metrics ADDR`): the daemon's counters as a Prometheus (OpenMetrics)
//! text endpoint, `GET /metrics` over HTTP/1.1. The exposition is written by
//! `prometheus-client`, the Prometheus project's Rust client; the HTTP part is one
//! request per connection, read with a size and a time limit, so that an idle or
//! hostile scraper cannot hold the daemon's resources.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ipc::control::DeviceCounters;
use ipc::qpseg::Discard;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::stat::OPCODE_NAMES;

/// The longest request head read.
const MAX_REQUEST: usize = 8 << 10;
/// How long a scraper may take to send its request and read the answer.
const SCRAPE_LIMIT: Duration = Duration::from_secs(5);
/// Scrapes served at once; more wait for a turn.
const MAX_SCRAPES: usize = 8;

/// One scrape's numbers: each service's counters, by the name of its `service` label.
pub(crate) type Source = Arc<dyn Fn() -> Vec<(&'static str, DeviceCounters)> + Send + Sync>;

/// The metrics endpoint serving; dropping it closes the listening socket (scrapes under
/// way finish).
pub(crate) struct Endpoint {
    /// The bound address (port 0 picks one).
    pub(crate) addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Endpoint {
    /// Stops serving and returns once the listening socket is closed, so that a successor
    /// can bind the port at once (dropping it closes the socket only when the runtime next
    /// polls the aborted task).
    pub(crate) async fn close(mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Binds `addr` and serves scrapes of `source` until the returned endpoint is dropped.
pub(crate) async fn serve(addr: SocketAddr, source: Source) -> Result<Endpoint, String> {
    let listener = TcpListener::bind(addr).await.map_err(|e| {
        format!("cannot serve metrics on {addr}: {e} (is the port in use? change `metrics`)")
    })?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    let turns = Arc::new(Semaphore::new(MAX_SCRAPES));
    let task = tokio::spawn(async move {
        loop {
            let (sock, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors, for one: wait instead of spinning.
                    tracing::warn!(error = %e, "metrics: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let Ok(turn) = turns.clone().acquire_owned().await else {
                return;
            };
            let source = source.clone();
            tokio::spawn(async move {
                let answered = tokio::time::timeout(SCRAPE_LIMIT, answer(sock, &source)).await;
                if !matches!(answered, Ok(Ok(()))) {
                    tracing::debug!(%peer, "metrics request dropped (slow, malformed or gone)");
                }
                drop(turn);
            });
        }
    });
    Ok(Endpoint { addr: bound, task })
}

/// Reads one request head and answers it: the metrics for `GET /metrics`, 404 for any
/// other path, 405 for another method, 400 for what is not HTTP.
async fn answer(mut sock: TcpStream, source: &Source) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        let n = sock.read(&mut buf).await?;
        if n == 0 || head.len() + n > MAX_REQUEST {
            return reply(&mut sock, "400 Bad Request", "text/plain", "bad request\n").await;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words = line.split_whitespace();
    match (words.next(), words.next().map(|p| p.split('?').next())) {
        (Some("GET"), Some(Some("/metrics"))) => {
            let text = render(&source());
            let kind = "application/openmetrics-text; version=1.0.0; charset=utf-8";
            reply(&mut sock, "200 OK", kind, &text).await
        }
        (Some("GET"), Some(_)) => {
            let body = "iwarpd serves its counters at /metrics\n";
            reply(&mut sock, "404 Not Found", "text/plain", body).await
        }
        (Some(_), Some(_)) => {
            reply(&mut sock, "405 Method Not Allowed", "text/plain", "GET\n").await
        }
        _ => reply(&mut sock, "400 Bad Request", "text/plain", "bad request\n").await,
    }
}

async fn reply(sock: &mut TcpStream, status: &str, kind: &str, body: &str) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    sock.write_all(head.as_bytes()).await?;
    sock.write_all(body.as_bytes()).await?;
    sock.shutdown().await
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Service {
    service: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServiceOpcode {
    service: &'static str,
    opcode: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServiceReason {
    service: &'static str,
    reason: &'static str,
}

/// The exposition of `services`' counters (OpenMetrics text).
pub(crate) fn render(services: &[(&'static str, DeviceCounters)]) -> String {
    let mut reg = Registry::with_prefix("iwarpd");
    let counter = |reg: &mut Registry, name: &str, help: &str| {
        let f = Family::<Service, Counter>::default();
        reg.register(name, help, f.clone());
        f
    };
    let gauge = |reg: &mut Registry, name: &str, help: &str| {
        let f = Family::<Service, Gauge>::default();
        reg.register(name, help, f.clone());
        f
    };
    let conns = counter(
        &mut reg,
        "connections",
        "Connections that reached FPDU mode",
    );
    let closed = counter(
        &mut reg,
        "connections_closed",
        "Connections closed and released",
    );
    let open = gauge(&mut reg, "queue_pairs", "Queue pairs connected now");
    let apps = gauge(&mut reg, "applications", "Local applications attached now");
    let fpdus_tx = counter(&mut reg, "fpdus_sent", "FPDUs sent");
    let fpdus_rx = counter(&mut reg, "fpdus_received", "FPDUs received");
    let placed = counter(
        &mut reg,
        "placed_octets",
        "Payload octets placed into memory",
    );
    let terms_tx = counter(&mut reg, "terminates_sent", "Terminate messages sent");
    let terms_rx = counter(
        &mut reg,
        "terminates_received",
        "Terminate messages received",
    );
    let pushed = counter(
        &mut reg,
        "push_executed",
        "Requests run from pushed messages",
    );
    let sq = counter(&mut reg, "sq_executed", "Requests run from the send queue");
    let octets_tx = Family::<ServiceOpcode, Counter>::default();
    reg.register(
        "payload_sent_octets",
        "DDP payload octets sent, by RDMAP opcode",
        octets_tx.clone(),
    );
    let octets_rx = Family::<ServiceOpcode, Counter>::default();
    reg.register(
        "payload_received_octets",
        "DDP payload octets received in valid segments, by RDMAP opcode",
        octets_rx.clone(),
    );
    let discards = Family::<ServiceReason, Counter>::default();
    reg.register(
        "push_discards",
        "Pushed messages discarded, by reason",
        discards.clone(),
    );
    for (service, d) in services {
        let s = Service { service };
        let t = &d.totals;
        conns.get_or_create(&s).inc_by(d.connections);
        closed.get_or_create(&s).inc_by(d.connections_closed);
        open.get_or_create(&s).set(i64::from(d.device_queue_pairs));
        apps.get_or_create(&s).set(i64::from(d.clients));
        fpdus_tx.get_or_create(&s).inc_by(t.traffic.fpdus_sent);
        fpdus_rx.get_or_create(&s).inc_by(t.traffic.fpdus_received);
        placed.get_or_create(&s).inc_by(t.traffic.bytes_placed);
        terms_tx.get_or_create(&s).inc_by(t.traffic.terminates_sent);
        terms_rx
            .get_or_create(&s)
            .inc_by(t.traffic.terminates_received);
        pushed.get_or_create(&s).inc_by(t.push.executed);
        sq.get_or_create(&s).inc_by(t.push.sq_path);
        for (i, opcode) in OPCODE_NAMES.iter().enumerate() {
            let l = ServiceOpcode { service, opcode };
            octets_tx.get_or_create(&l).inc_by(t.traffic.octets_sent[i]);
            octets_rx
                .get_or_create(&l)
                .inc_by(t.traffic.octets_received[i]);
        }
        for r in Discard::ALL {
            let l = ServiceReason {
                service,
                reason: r.name(),
            };
            discards
                .get_or_create(&l)
                .inc_by(t.push.discards[r.index()]);
        }
    }
    let mut text = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut text, &reg);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends `request` to a metrics endpoint and returns the status line of the answer.
    async fn status(addr: SocketAddr, request: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(request).await.unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out).await;
        let text = String::from_utf8_lossy(&out);
        text.lines().next().unwrap_or_default().to_owned()
    }

    #[tokio::test]
    async fn what_is_not_a_scrape_gets_an_http_error() {
        let source: Source = Arc::new(|| vec![("local", DeviceCounters::default())]);
        let endpoint = serve("127.0.0.1:0".parse().unwrap(), source).await.unwrap();
        let addr = endpoint.addr;
        let get = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
        assert_eq!(status(addr, get).await, "HTTP/1.1 200 OK");
        let other = b"GET /other HTTP/1.1\r\n\r\n";
        assert_eq!(status(addr, other).await, "HTTP/1.1 404 Not Found");
        let post = b"POST /metrics HTTP/1.1\r\n\r\n";
        assert_eq!(status(addr, post).await, "HTTP/1.1 405 Method Not Allowed");
        assert_eq!(
            status(addr, b"\x16\x03\x01\r\n\r\n").await,
            "HTTP/1.1 400 Bad Request"
        );
        // A head that never ends is cut off at its limit.
        let endless = vec![b'a'; MAX_REQUEST + 1];
        assert_eq!(status(addr, &endless).await, "HTTP/1.1 400 Bad Request");
        // Scrapers that hold their connections silent take their turns, not the endpoint.
        let mut idle = Vec::new();
        for _ in 0..MAX_SCRAPES - 1 {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        assert_eq!(status(addr, get).await, "HTTP/1.1 200 OK");
        // Dropped (a daemon that handed over), the endpoint lets go of its port.
        drop(endpoint);
        let mut refused = false;
        for _ in 0..200 {
            if TcpStream::connect(addr).await.is_err() {
                refused = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(refused, "the port is still open");
    }

    #[test]
    fn every_counter_is_exposed_per_service() {
        let mut local = DeviceCounters {
            clients: 2,
            device_queue_pairs: 3,
            connections: 7,
            connections_closed: 4,
            ..DeviceCounters::default()
        };
        local.totals.traffic.fpdus_sent = 11;
        local.totals.traffic.octets_sent[0] = 4096;
        local.totals.push.discards[Discard::ALL[1].index()] = 5;
        let text = render(&[
            ("local", local),
            ("remote_memory", DeviceCounters::default()),
        ]);
        for line in [
            "iwarpd_connections_total{service=\"local\"} 7",
            "iwarpd_connections_closed_total{service=\"local\"} 4",
            "iwarpd_queue_pairs{service=\"local\"} 3",
            "iwarpd_applications{service=\"local\"} 2",
            "iwarpd_fpdus_sent_total{service=\"local\"} 11",
            "iwarpd_payload_sent_octets_total{service=\"local\",opcode=\"write\"} 4096",
            "iwarpd_connections_total{service=\"remote_memory\"} 0",
            "# TYPE iwarpd_connections counter",
            "# EOF",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} in:\n{text}");
        }
        let reason = Discard::ALL[1].name();
        let line = format!("iwarpd_push_discards_total{{service=\"local\",reason=\"{reason}\"}} 5");
        assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
    }
}
