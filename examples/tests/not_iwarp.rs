//! What the tools say when the server's address is not an iWARP listener: a TCP server
//! that accepts and stays silent, an HTTP server that answers and closes, and an address
//! that cannot be reached. Each message says what happened, within what time, and names
//! the address.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Output};
use std::time::Duration;

const IWPERF: &str = env!("CARGO_BIN_EXE_iwperf");
const RPING: &str = env!("CARGO_BIN_EXE_iwarp-rping");

/// What a server of another protocol does with each connection.
#[derive(Copy, Clone)]
enum Other {
    /// Accepts and says nothing (holds the connection until the test ends).
    Silent,
    /// Reads the request, answers as an HTTP server does to a request it cannot parse,
    /// and closes.
    Http,
}

/// The HTTP answer [`Other::Http`] sends: 66 octets.
const HTTP_400: &[u8] =
    b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// A real TCP server playing `other` on a free port of 127.0.0.1; returns the port.
fn serve(other: Other) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        let mut held: Vec<TcpStream> = Vec::new();
        for sock in listener.incoming() {
            let Ok(mut sock) = sock else { continue };
            match other {
                Other::Silent => held.push(sock),
                Other::Http => {
                    let mut request = [0; 4096];
                    let _ = sock.read(&mut request);
                    let _ = sock.write_all(HTTP_400);
                    let _ = sock.shutdown(std::net::Shutdown::Write);
                    // Lingers until the client has read the answer and gone.
                    let _ = sock.set_read_timeout(Some(Duration::from_secs(5)));
                    let _ = sock.read(&mut request);
                }
            }
        }
    });
    port
}

fn run(bin: &str, args: &[&str]) -> Output {
    Command::new(bin).args(args).output().expect("run the tool")
}

/// The tool failed with status 1; its error text.
fn failure(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_silent_tcp_server_is_named_with_the_time_waited() {
    let port = serve(Other::Silent).to_string();
    let err = failure(&run(
        IWPERF,
        &["write_bw", "-p", &port, "--timeout", "2", "127.0.0.1"],
    ));
    assert!(
        err.contains(&format!(
            "connecting to the server at 127.0.0.1:{port}: no MPA Reply within 2 s: the peer \
             accepted the TCP connection and sent nothing; is an iWARP listener on that \
             address and port?"
        )),
        "{err}"
    );
    let err = failure(&run(
        RPING,
        &[
            "-c",
            "-a",
            "127.0.0.1",
            "-p",
            &port,
            "-C",
            "1",
            "--timeout",
            "2",
        ],
    ));
    assert!(
        err.contains(&format!(
            "connecting to 127.0.0.1:{port}: no MPA Reply within 2 s: the peer accepted"
        )),
        "{err}"
    );
}

#[test]
fn an_http_server_is_named_with_what_it_answered() {
    let port = serve(Other::Http).to_string();
    for (bin, args) in [
        (IWPERF, vec!["write_bw", "-p", &port, "127.0.0.1"]),
        (RPING, vec!["-c", "-a", "127.0.0.1", "-p", &port, "-C", "1"]),
    ] {
        let err = failure(&run(bin, &args));
        assert!(
            err.contains(&format!("127.0.0.1:{port}: the peer answered but is not an iWARP MPA endpoint (it sent 66 octets (\"HTTP/1.1 400 Bad Request\\r\\n")),
            "{err}"
        );
        assert!(!err.contains("NotMpa"), "no Debug form: {err}");
    }
}

#[test]
fn an_address_that_cannot_be_reached_is_named() {
    // TCP to the broadcast address: the kernel answers "network unreachable" at once.
    let err = failure(&run(IWPERF, &["write_bw", "-p", "9", "255.255.255.255"]));
    assert!(
        err.contains("connecting to the server at 255.255.255.255:9: the host cannot be reached"),
        "{err}"
    );
}
