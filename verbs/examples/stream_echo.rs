//! A line server over RDMA with [`RdmaStream`], written as it would be for TCP: the
//! connection handling is generic over `AsyncRead + AsyncWrite`, and only the lines that
//! listen and connect differ (`--tcp` runs the very same code over `TcpStream`).
//!
//! ```sh
//! cargo run -p verbs --example stream_echo -- server 127.0.0.1:7471
//! cargo run -p verbs --example stream_echo -- client 127.0.0.1:7471 hello world
//! ```
//!
//! The server answers every line upper-cased; the client sends its words as lines and
//! prints the answers. With `IWARP_DEVICE=unix:PATH` both run through an iwarpd.

use std::error::Error;

use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::{Framed, LinesCodec};
use verbs::{RdmaListener, RdmaStream};

type Res<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// One connection, whatever carries it.
async fn serve<S: AsyncRead + AsyncWrite + Unpin>(stream: S) -> Res<()> {
    let mut lines = Framed::new(stream, LinesCodec::new_with_max_length(1 << 20));
    while let Some(line) = lines.next().await {
        lines.send(line?.to_uppercase()).await?;
    }
    Ok(())
}

async fn ask<S: AsyncRead + AsyncWrite + Unpin>(stream: S, words: &[String]) -> Res<()> {
    let mut lines = Framed::new(stream, LinesCodec::new());
    for w in words {
        lines.send(w.as_str()).await?;
        let answer = lines
            .next()
            .await
            .ok_or("the server closed the connection")??;
        println!("{w} -> {answer}");
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let tcp = args.iter().any(|a| a == "--tcp");
    let args: Vec<String> = args.into_iter().filter(|a| a != "--tcp").collect();
    match (args.first().map(String::as_str), args.get(1)) {
        (Some("server"), Some(addr)) => {
            // The one line that differs from the TCP version.
            if tcp {
                let listener = TcpListener::bind(addr).await?;
                println!("listening on {} (TCP)", listener.local_addr()?);
                loop {
                    let (s, _) = listener.accept().await?;
                    tokio::spawn(serve(s));
                }
            }
            let listener = RdmaListener::bind(addr).await?;
            println!("listening on {} (RDMA)", listener.local_addr()?);
            loop {
                let (s, peer) = listener.accept().await?;
                tokio::spawn(async move {
                    if let Err(e) = serve(s).await {
                        eprintln!("{peer}: {e}");
                    }
                });
            }
        }
        (Some("client"), Some(addr)) => {
            let words = &args[2..];
            if tcp {
                ask(TcpStream::connect(addr).await?, words).await
            } else {
                ask(RdmaStream::connect(addr).await?, words).await
            }
        }
        _ => {
            eprintln!(
                "usage: stream_echo server ADDR [--tcp] | stream_echo client ADDR WORD... [--tcp]"
            );
            std::process::exit(2);
        }
    }
}
