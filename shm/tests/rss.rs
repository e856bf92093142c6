//! Pages returned to the system, measured on this process's resident set: alone in its
//! own test binary, so that no other test allocates while it measures.

use shm::Region;

fn rss_kib() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4
}

#[test]
fn dropping_a_region_returns_its_pages() {
    const LEN: usize = 256 << 20;
    let before = rss_kib();
    let r = Region::alloc(LEN).unwrap();
    // Faulted in when allocated (as an RNIC pins a region's pages), before any touch.
    let touched = rss_kib();
    assert!(
        touched >= before + (LEN >> 10) * 9 / 10,
        "pages are resident at allocation: {before} -> {touched} KiB"
    );
    for off in (0..LEN).step_by(4096) {
        r.write_at(off, &[1]).unwrap();
    }
    drop(r);
    let after = rss_kib();
    assert!(
        after < before + (LEN >> 10) / 10,
        "pages returned on drop: {before} -> {touched} -> {after} KiB"
    );
}
