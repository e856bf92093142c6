//! `kv`: a tiny key-value store on RDMA, to read as an example of the verbs API.
//!
//! The server owns a value arena and tells the client where it is (a `RemoteBuf` in the
//! MPA private data). The data path is one-sided; only small control messages are Sends:
//!
//! * **put**: the client RDMA-Writes the value straight into the arena, then Sends
//!   `P key offset len`. RDMA ordering makes the Send's delivery prove the Write was placed,
//!   so the server can index the value without touching its octets.
//! * **get**: the client Sends `G key`; the server answers with the value's location as a
//!   16-octet `RemoteBuf` (or an empty message), and the client RDMA-Reads it.
//!
//! Run: `cargo run -p examples --bin kv`. Both sides run in this process over loopback; it
//! prints each operation and checks every value it reads back. With `--daemon PATH` (or
//! `IWARP_DEVICE=unix:PATH`) both attach to the local `iwarpd` instead.

use std::collections::HashMap;
use std::net::SocketAddr;

use bytes::{BufMut, Bytes, BytesMut};
use clap::Parser;
use verbs::{Access, Device, DeviceConfig, Listener, Mr, Pd, Qp, QpConfig, RecvWr, RemoteBuf};

type Error = Box<dyn std::error::Error + Send + Sync>;

const ARENA: usize = 1 << 20;
const MSG: usize = 256;

/// A tiny key-value store on RDMA: puts by RDMA Write, gets by RDMA Read, both sides in
/// this process over loopback; every value read back is checked.
#[derive(Debug, Parser)]
#[command(name = "kv", version)]
struct Cli {
    /// Attach both sides to the local iwarpd at PATH (daemon mode) instead of running an
    /// engine each in this process.
    #[arg(long, value_name = "PATH")]
    daemon: Option<String>,
    /// This stack's extensions to offer or accept: send_imm, read_v2, all or none
    /// (none: standard iWARP only, which Wireshark decodes; through iwarpd, the
    /// daemon's setting applies).
    #[arg(long, value_name = "LIST", default_value = "all", value_parser = examples::args::extensions)]
    extensions: verbs::Extensions,
}

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    // Errors print as sentences (`kv: ...`, exit status 1), not as Debug dumps.
    examples::run_on_worker("kv", run(cli)).await;
}

async fn run(cli: Cli) -> Result<(), Error> {
    let mut cfg = DeviceConfig::default().extensions(cli.extensions);
    if let Some(path) = cli.daemon {
        cfg = cfg.daemon(path);
    }
    let (server, client) = (Device::open(cfg.clone())?, Device::open(cfg)?);
    let listener = server.listen(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let addr = listener.local_addr();
    let store = tokio::spawn(serve(listener, server.alloc_pd()?));

    let pd = client.alloc_pd()?;
    let cq = client.create_cq(16);
    let conn = client.connect(&pd, addr, QpConfig::new(&cq), b"").await?;
    let arena = RemoteBuf::decode(&conn.private_data).ok_or("the server sent no arena")?;
    let mut kv = Client {
        qp: conn.qp,
        inbox: pd.alloc_mr(MSG, Access::LOCAL_WRITE)?,
        pd,
        arena,
        next: 0,
    };

    let entries = [
        ("alpha", "the first value"),
        ("beta", "a second, longer value"),
        ("alpha", "alpha, replaced"),
    ];
    for (key, value) in entries {
        kv.put(key, value.as_bytes()).await?;
        examples::outln!("put {key:<6} = {value:?}");
    }
    for (key, want) in [
        ("alpha", Some("alpha, replaced")),
        ("beta", Some("a second, longer value")),
        ("gamma", None),
    ] {
        let got = kv.get(key).await?;
        let shown = got.as_deref().map(String::from_utf8_lossy);
        examples::outln!("get {key:<6} -> {shown:?}");
        if got.as_deref() != want.map(str::as_bytes) {
            return Err(format!("get {key}: expected {want:?}").into());
        }
    }
    kv.qp.send(Bytes::new()).await?; // an empty request ends the server
    store.await??;
    examples::outln!("all values read back as written");
    Ok(())
}

/// The client side: a bump allocator over the server's arena, and request/reply Sends.
struct Client {
    qp: Qp,
    pd: Pd,
    inbox: Mr,
    arena: RemoteBuf,
    next: u32,
}

impl Client {
    async fn put(&mut self, key: &str, value: &[u8]) -> Result<(), Error> {
        let (off, len) = (self.next, value.len() as u32);
        if u64::from(off) + u64::from(len) > u64::from(self.arena.len) {
            return Err("the arena is full".into());
        }
        self.next += len;
        self.qp
            .write(Bytes::copy_from_slice(value), self.arena.slice(off, len))
            .await?;
        let mut msg = request(b'P', key);
        msg.put_u32(off);
        msg.put_u32(len);
        self.call(msg.freeze()).await.map(drop)
    }

    async fn get(&mut self, key: &str) -> Result<Option<Vec<u8>>, Error> {
        let reply = self.call(request(b'G', key).freeze()).await?;
        let Some(at) = RemoteBuf::decode(&reply) else {
            return Ok(None);
        };
        let sink = self.pd.alloc_mr(at.len as usize, Access::LOCAL_WRITE)?;
        self.qp.read(at, &sink).await?;
        Ok(Some(sink.read(..)?))
    }

    /// Sends `msg` and returns the server's reply (the receive is posted first).
    async fn call(&self, msg: Bytes) -> Result<Vec<u8>, Error> {
        let (reply, sent) = tokio::join!(self.qp.recv(&self.inbox), self.qp.send(msg));
        sent?;
        let len = reply?.byte_len as usize;
        Ok(self.inbox.read(..len)?)
    }
}

fn request(op: u8, key: &str) -> BytesMut {
    let mut msg = BytesMut::with_capacity(MSG);
    msg.put_u8(op);
    msg.put_u8(key.len() as u8);
    msg.put_slice(key.as_bytes());
    msg
}

/// The server side: index puts, answer gets, until an empty request.
async fn serve(listener: Listener, pd: Pd) -> Result<(), Error> {
    let arena = pd.alloc_mr(ARENA, Access::REMOTE_WRITE | Access::REMOTE_READ)?;
    let inbox = pd.alloc_mr(MSG, Access::LOCAL_WRITE)?;
    let cq = pd.device().create_cq(16);
    // A receive posted at accept time catches the first request, whenever it comes.
    let first = RecvWr {
        wr_id: 0,
        sgl: [inbox.local(..)].into(),
    };
    let incoming = listener.accept().await?;
    let qp = incoming
        .accept(
            &pd,
            QpConfig::new(&cq).recv(first),
            &arena.remote().encode(),
        )
        .await?;
    let mut index: HashMap<Vec<u8>, RemoteBuf> = HashMap::new();
    loop {
        let wc = cq.next().await?;
        let req = inbox.read(..wc.wc.byte_len as usize)?;
        qp.post_recv(RecvWr {
            wr_id: 0,
            sgl: [inbox.local(..)].into(),
        })?;
        let Some((&op, rest)) = req.split_first() else {
            return Ok(());
        };
        let (key, tail) = match rest.split_first() {
            Some((&n, body)) if body.len() >= usize::from(n) => body.split_at(usize::from(n)),
            _ => return Err("malformed request".into()),
        };
        let reply = match (op, tail) {
            (b'P', [o0, o1, o2, o3, l0, l1, l2, l3]) => {
                let off = u32::from_be_bytes([*o0, *o1, *o2, *o3]);
                let len = u32::from_be_bytes([*l0, *l1, *l2, *l3]);
                index.insert(key.to_vec(), arena.remote().slice(off, len));
                Bytes::from_static(b"ok")
            }
            (b'G', []) => index
                .get(key)
                .map_or_else(Bytes::new, |at| Bytes::copy_from_slice(&at.encode())),
            _ => return Err("unknown request".into()),
        };
        qp.send(reply).await?;
    }
}
