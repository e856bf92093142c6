//! A real `iwarpd` process for tests: started on a free port, its address read from its
//! first stdout line, its log collected, killed on drop.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The daemon binary of this package.
pub(crate) const IWARPD: &str = env!("CARGO_BIN_EXE_iwarpd");

/// A running daemon; killed on drop if a test failed before it exited.
pub(crate) struct Daemon {
    pub(crate) child: Child,
    pub(crate) addr: String,
    stderr: Arc<Mutex<String>>,
    /// The thread collecting stderr; it ends at the pipe's end, after the process's last
    /// line.
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Daemon {
    /// Starts one listening on a free loopback port, with `extra` flags.
    pub(crate) fn start(extra: &[&str]) -> Self {
        let mut args = vec!["--listen", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        Self::start_with(&args)
    }

    /// Starts one with exactly these flags; returns once it printed its address. Its log
    /// level is `info`, or `IWARPD_TEST_LOG` (`debug` to see every client come and go).
    pub(crate) fn start_with(args: &[&str]) -> Self {
        let mut child = Command::new(IWARPD)
            .args(args)
            .env(
                "RUST_LOG",
                std::env::var("IWARPD_TEST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start iwarpd");
        // Collect stderr on a thread so a chatty daemon never blocks on a full pipe.
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut pipe = child.stderr.take().unwrap();
        let sink = stderr.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = [0; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("read stdout");
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("first stdout line: {line:?}"))
            .to_owned();
        Self {
            child,
            addr,
            stderr,
            reader: Some(reader),
        }
    }

    pub(crate) fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill {sig}");
    }

    /// Waits for the process to exit, then for its log to be read to the end: the log
    /// thread may still be copying its last lines when the process is gone, and a test
    /// that read the log then would miss them.
    pub(crate) fn wait(&mut self, limit: Duration) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                if let Some(reader) = self.reader.take() {
                    while !reader.is_finished() {
                        assert!(
                            start.elapsed() < limit,
                            "iwarpd's stderr stayed open after it exited"
                        );
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    reader.join().expect("the log thread");
                }
                return st;
            }
            assert!(
                start.elapsed() < limit,
                "iwarpd did not exit within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(crate) fn log(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits until the log contains `what`.
    pub(crate) fn wait_log(&self, what: &str) {
        let start = Instant::now();
        while !self.log().contains(what) {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "no `{what}` in the log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
