//! The README's quick start: a client of iwarpd's built-in service, which gives every
//! connection a region to write and read, and echoes every Send.
//! Run: `quickstart HOST:PORT` (an iwarpd listening there; its port is 4791 by default).
use verbs::bytes::Bytes;
use verbs::{Access, Device, DeviceConfig, QpConfig, RecvWr, RemoteBuf};

type Error = Box<dyn std::error::Error + Send + Sync>;

async fn run(addr: &str) -> Result<(), Error> {
    // The engine runs in this process, or in iwarpd if IWARP_DEVICE=unix:PATH is set.
    let device = Device::open(DeviceConfig::default())?;
    let (pd, cq) = (device.alloc_pd()?, device.create_cq(16));
    // Register 4 KiB, and post its first 64 octets as a receive for the daemon's echo.
    let mr = pd.alloc_mr(4096, Access::LOCAL_WRITE)?;
    let sgl = [mr.local(..64)].into();
    let config = QpConfig::new(&cq).recv(RecvWr { wr_id: 1, sgl });
    let conn = device.connect(&pd, addr, config, b"").await?;
    // iwarpd's MPA Reply names a region of its memory that we may write and read.
    let remote = RemoteBuf::decode(&conn.private_data).ok_or("the peer is no iwarpd")?;
    let qp = conn.qp;
    // RDMA Write into the daemon's memory, then RDMA Read it back into ours.
    qp.write(Bytes::from("hello, iWARP"), remote).await?;
    qp.read(remote.slice(0, 12), mr.local(64..76)).await?;
    println!("read back: {}", String::from_utf8_lossy(&mr.read(64..76)?));
    // A Send; the daemon echoes it, and the echo's completion comes from the CQ.
    qp.send(Bytes::from_static(b"ping")).await?;
    let len = cq.next().await?.wc.byte_len as usize;
    println!("echo: {}", String::from_utf8_lossy(&mr.read(..len)?));
    qp.disconnect();
    println!("closed: {}", qp.closed().await);
    Ok(())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let Some(addr) = std::env::args().nth(1).filter(|a| !a.starts_with('-')) else {
        eprintln!("usage: quickstart HOST:PORT (an iwarpd, for example 192.0.2.20:4791)");
        return std::process::ExitCode::from(2);
    };
    match run(&addr).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quickstart: {e}"); // Display: the cause and the fix
            std::process::ExitCode::FAILURE
        }
    }
}
