//! The README's quick start (`examples/src/bin/quickstart.rs`) runs as the README says:
//! against a real iwarpd's built-in service, with the engine in its own process and
//! through the daemon (`IWARP_DEVICE=unix:PATH`); a typo in `IWARP_DEVICE` is refused,
//! and a missing address gets the usage line.
//! The README shows the program whole, so the text there is the file's, character for
//! character.

mod common;

use std::process::Command;

use common::*;

const QUICKSTART: &str = env!("CARGO_BIN_EXE_quickstart");

fn quickstart(addr: &str, device: Option<&str>) -> std::process::Output {
    let mut cmd = Command::new(QUICKSTART);
    cmd.arg(addr);
    match device {
        Some(d) => cmd.env("IWARP_DEVICE", d),
        None => cmd.env_remove("IWARP_DEVICE"),
    };
    cmd.output().expect("run quickstart")
}

#[test]
fn the_quick_start_runs_embedded_and_through_iwarpd() {
    let d = Iwarpd::start("quickstart", &[]);
    let through = format!("unix:{}", d.sock());
    for device in [None, Some(through.as_str())] {
        let out = quickstart(&d.addr, device);
        ok(&out, &format!("quickstart with IWARP_DEVICE={device:?}"));
        assert_eq!(
            text(&out.stdout),
            "read back: hello, iWARP\necho: ping\nclosed: closed gracefully\n",
            "IWARP_DEVICE={device:?}"
        );
    }
    let out = quickstart(&d.addr, Some("uinx:/run/iwarpd.sock"));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = text(&out.stderr);
    assert!(
        err.starts_with("quickstart: IWARP_DEVICE=") && err.contains("unix:PATH"),
        "{err}"
    );
}

#[test]
fn without_an_address_it_says_how_to_run_it() {
    for args in [&[][..], &["--help"][..]] {
        let out = Command::new(QUICKSTART).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(
            text(&out.stderr).starts_with("usage: quickstart HOST:PORT"),
            "{args:?}: {out:?}"
        );
    }
}

#[test]
fn the_readme_shows_the_quick_start_as_it_is() {
    let readme = include_str!("../../README.md");
    let file = include_str!("../src/bin/quickstart.rs");
    assert!(
        readme.contains(&format!("```rust\n{file}```\n")),
        "README.md must show examples/src/bin/quickstart.rs whole, as it is, in a rust block"
    );
}
