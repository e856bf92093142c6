//! iwarpd near its process limits: a client that registers region after region is
//! refused by name before the daemon runs out of descriptors or mappings, and goes on
//! working. Its own test binary: it lowers the process's open-file limit, and the count
//! of memory files it checks is the whole process's (the daemon runs in-process here).

use std::time::Duration;

use iwarpd::local::{LocalConfig, LocalService};
use offload_engine::EngineConfig;
use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
use verbs::{Access, Device, DeviceConfig};

/// Before the budget, the 1,486th region of a client took the daemon past a limit of
/// 3,000 descriptors: the message lost the descriptor it carried, the daemon dropped the
/// client, and the application was told iwarpd "cannot be reached (it exited or was
/// restarted)".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_past_the_daemons_file_limits_is_refused_by_name_and_carries_on() {
    const NOFILE: u64 = 400;
    let before = getrlimit(Resource::Nofile);
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(NOFILE),
            maximum: before.maximum,
        },
    )
    .expect("lower the open-file limit");
    let path = std::env::temp_dir().join(format!("iwarpd-limits-{}.sock", std::process::id()));
    LocalService::start(&path, EngineConfig::default(), LocalConfig::default(), 2).unwrap();
    let dev = Device::open(DeviceConfig::default().daemon(&path)).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let mut held = Vec::new();
    let refusal = loop {
        match pd.alloc_mr(4096, Access::LOCAL_WRITE) {
            Ok(mr) => held.push(mr),
            Err(e) => break e.to_string(),
        }
        assert!(held.len() < NOFILE as usize, "never refused");
    };
    assert!(
        refusal.contains("open-file limit (400)") && refusal.contains("ulimit -n"),
        "{refusal}"
    );
    // Half the limit, for both mappings of each region (the client's and the daemon's,
    // one process here) and the rest of what is mapped.
    assert!(held.len() > 50, "refused after {} regions", held.len());
    // A listener (a socket in the daemon) is refused as well while the share is full.
    let Err(e) = dev.listen("127.0.0.1:0").await else {
        panic!("a listener past the budget")
    };
    assert!(e.to_string().contains("ulimit -n"), "{e}");
    // So is a protection domain (its push region is a memory file), with the daemon's
    // reason; it became domain 0 before, and everything in it failed with "no
    // protection domain 0".
    let e = dev.alloc_pd().expect_err("a domain past the budget");
    assert!(e.to_string().contains("its share"), "{e}");
    // The client is still attached: with some regions given back, it registers again.
    held.truncate(held.len() - 10);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let again = pd.alloc_mr(4096, Access::LOCAL_WRITE);
    assert!(again.is_ok(), "{:?}", again.err());
    setrlimit(Resource::Nofile, before).expect("restore the open-file limit");
}
