#!/usr/bin/env python3
"""Import circles between the files of each crate (issue 32): an edge A -> B when file A
names a module path that resolves to file B (`use crate::x::y`, `use super::z`,
`crate::x::Item` in code). A circle between a file and its parent module (mod.rs or the
crate root) is allowed: handle types name their parent, as quinn's do.

    scripts/import_cycles.py            # every circle; exit 1 if any
"""
import os, re, sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CRATES = ["mpa", "ddp", "shm", "rdmap", "cq", "ipc", "offload-engine", "iwarpd", "verbs", "examples", "dump"]


def modules(src):
    """Module path (tuple) -> file, for every .rs under src (lib.rs/main.rs are the root)."""
    out = {}
    for d, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(d, f), src)[:-3].split(os.sep)
            if rel[-1] == "mod":
                rel = rel[:-1]
            if rel in (["lib"], ["main"]):
                rel = []
            if rel and rel[0] == "bin":
                continue
            out[tuple(rel)] = os.path.join(d, f)
    return out


def strip_tests(text):
    i = re.search(r"^#\[cfg\(test\)\]\s*\n\s*mod \w+\s*\{", text, re.M)
    return text[: i.start()] if i else text


PATH = re.compile(r"\b(crate|super|self)((?:::\w+)+)")


def edges(mods):
    out = {}
    for path, f in mods.items():
        text = strip_tests(open(f).read())
        # Comments (doc links included) are not imports.
        text = re.sub(r"//[^\n]*", "", text)
        # `use a::{b, c::d}` groups: expand one level, enough for this code base.
        text = re.sub(r"::\{([^{}]*)\}", lambda m: " " + " ".join("::" + x.strip() for x in m.group(1).split(",")), text)
        targets = set()
        for m in PATH.finditer(text):
            head, rest = m.group(1), m.group(2).split("::")[1:]
            if head == "crate":
                base = []
            elif head == "super":
                # The parent module, whether this file is `x.rs` or `x/mod.rs`.
                base = list(path[:-1])
            else:
                base = list(path)
            p = base + rest
            while p and tuple(p) not in mods:
                p = p[:-1]
            t = tuple(p)
            if t != path and t in mods:
                targets.add(t)
        out[path] = targets
    return out


def cycles(g):
    found, seen = [], set()
    def walk(n, stack):
        for m in g.get(n, ()):
            if m in stack:
                c = stack[stack.index(m):]
                key = frozenset(c)
                if key not in seen:
                    seen.add(key)
                    found.append(c + [m])
            elif len(stack) < 6:
                walk(m, stack + [m])
    for n in g:
        walk(n, [n])
    return found


def allowed(c):
    # A two-file circle between a module and its parent.
    if len(c) == 3:
        a, b = c[0], c[1]
        if a == b[:-1] or b == a[:-1]:
            return True
    return False


bad = 0
for crate in CRATES:
    src = os.path.join(ROOT, crate, "src")
    g = edges(modules(src))
    for c in cycles(g):
        if allowed(c):
            continue
        bad += 1
        print(f"{crate}: " + " -> ".join("::".join(p) or "(root)" for p in c))
print(f"{bad} circles" if bad else "no import circles")
sys.exit(1 if bad else 0)
