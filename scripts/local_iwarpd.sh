# Sourced by the scripts that measure through one local iwarpd: `start_iwarpd BIN NAME`
# starts BIN/iwarpd on a fresh control socket ($sock) and waits for it to listen; $out is a
# scratch file for the client's output. Both go (the daemon killed, the file removed) when
# the script exits.
start_iwarpd() {
    sock=$(mktemp -u "/tmp/$2-XXXXXX.sock")
    out=$(mktemp)
    "$1/iwarpd" --listen 127.0.0.1:0 --control "$sock" >/dev/null 2>&1 &
    daemon=$!
    trap 'kill $daemon 2>/dev/null; rm -f "$out"' EXIT
    sleep 0.5
}
