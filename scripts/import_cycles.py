#!/usr/bin/env python3
"""Import circles between the files of each crate (issue 32): an edge A -> B when file A
names an item or module that is defined in file B (`use crate::x::y`, `use super::z`,
`use child::w`, `crate::x::Item` in code, or a name imported by a `use`).

Re-exports are followed: if conn/mod.rs says `pub use connection::Foo` (or
`pub(crate) use`, `pub(super) use`, a group, a rename, or a glob `pub use x::*`), then
`use crate::conn::Foo` is an edge to conn/connection/mod.rs, not to conn/mod.rs. A re-export
line is an edge of its own file only when that file's code uses the name too.

A file may name its ancestor modules (handle types name their parent, as quinn's do):
a circle that closes through such an edge is allowed when it stays inside that
ancestor's subtree (`stream -> stream::rx -> stream::direct -> stream`, where direct.rs
names its parent's `Stream`), and, with the crate root as the ancestor, only as the
two-file circle. An ancestor whose code reaches the file back through a file outside its
subtree (`m::x -> m -> y -> m::x`), and every circle without such an edge, is reported. Each
crate of the workspace is checked (its library and its binary root in src/, each file
found through `mod` declarations); tests/, benches/ and src/bin/ are other crates.

    scripts/import_cycles.py              # every circle; exit 1 if any
    scripts/import_cycles.py --self-test  # the checker finds circles through re-exports
"""
import os, re, sys, tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

def workspace_crates(root):
    """The members of the workspace's Cargo.toml that have a src/ directory."""
    text = open(os.path.join(root, "Cargo.toml")).read()
    m = re.search(r"^members\s*=\s*\[([^\]]*)\]", text, re.M)
    names = re.findall(r'"([^"]+)"', m.group(1)) if m else []
    return [n for n in names if os.path.isdir(os.path.join(root, n, "src"))]


# --- reading a file -------------------------------------------------------------------

def strip_comments(text):
    # Block comments, then line comments (doc links included): they are not imports.
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def strip_tests(text):
    i = re.search(r"^#\[cfg\(test\)\]\s*\n\s*mod \w+\s*\{", text, re.M)
    return text[: i.start()] if i else text


def code_of(f):
    return strip_tests(strip_comments(open(f).read()))


USE = re.compile(r"(?<![\w:])(pub(?:\s*\([^)]*\))?\s+)?use\s+([^;]+);")
MOD = re.compile(r"(?:^|[;}\]])\s*(?:pub(?:\s*\([^)]*\))?\s+)?mod\s+(\w+)\s*;", re.M)


def use_leaves(tree):
    """The leaves of a use tree: (segments, name it binds, glob)."""
    toks = re.findall(r"::|\{|\}|,|\*|\w+", tree)
    out, i = [], 0

    def parse(prefix):
        nonlocal i
        segs = list(prefix)
        while i < len(toks):
            t = toks[i]
            if t == "::":
                i += 1
            elif t == "{":
                i += 1
                while i < len(toks) and toks[i] != "}":
                    parse(segs)
                    if i < len(toks) and toks[i] == ",":
                        i += 1
                i += 1
                return
            elif t == "*":
                i += 1
                out.append((segs, None, True))
                return
            elif t in (",", "}"):
                break
            elif t == "as":
                i += 1
                alias = toks[i] if i < len(toks) else "_"
                i += 1
                if segs and segs[-1] == "self":
                    segs = segs[:-1]
                out.append((segs, alias, False))
                return
            else:
                segs.append(t)
                i += 1
        if segs and segs[-1] == "self":
            segs = segs[:-1]
        if len(segs) > len(prefix) or (segs and segs == list(prefix)):
            out.append((segs, segs[-1] if segs else None, False))

    while i < len(toks):
        parse([])
        if i < len(toks) and toks[i] in (",", "}"):
            i += 1
    return out


# --- a crate's module tree ------------------------------------------------------------

def module_tree(root_file):
    """Module path (tuple) -> file, for every file reached through `mod x;` from the
    crate root `root_file` (lib.rs or main.rs)."""
    out = {}

    def visit(path, f):
        if path in out or not os.path.exists(f):
            return
        out[path] = f
        d = os.path.dirname(f)
        base = os.path.basename(f)
        here = d if base in ("lib.rs", "main.rs", "mod.rs") or not path else os.path.join(d, base[:-3])
        for m in MOD.finditer(strip_comments(open(f).read())):
            name = m.group(1)
            for cand in (os.path.join(here, name + ".rs"), os.path.join(here, name, "mod.rs")):
                if os.path.exists(cand):
                    visit(path + (name,), cand)
                    break

    visit((), root_file)
    return out


class Crate:
    def __init__(self, mods):
        self.mods = mods
        self.code = {p: code_of(f) for p, f in mods.items()}
        self.uses = {p: [(bool(m.group(1)), use_leaves(m.group(2))) for m in USE.finditer(t)]
                     for p, t in self.code.items()}
        # Module -> {name: full path of what it re-exports (None: outside the crate)}.
        self.reexports = {p: {} for p in mods}
        # Module -> full paths of the modules it re-exports with a glob.
        self.globs = {p: [] for p in mods}
        for p, uses in self.uses.items():
            for public, leaves in uses:
                if not public:
                    continue
                for segs, name, glob in leaves:
                    full = self.absolute(p, segs)
                    if glob:
                        if full is not None:
                            self.globs[p].append(tuple(full))
                    elif name and name != "_":
                        self.reexports[p][name] = None if full is None else tuple(full)

    def absolute(self, here, segs):
        """The crate path `segs` names from module `here`, or None outside the crate."""
        if not segs:
            return None
        head, rest = segs[0], list(segs[1:])
        if head == "crate":
            base = []
        elif head == "self":
            base = list(here)
        elif head == "super":
            base = list(here[:-1])
            while rest and rest[0] == "super":
                base, rest = base[:-1], rest[1:]
        elif here + (head,) in self.mods:
            base, rest = list(here) + [head], rest
        else:
            return None
        return base + rest

    def defines(self, mod, name):
        kinds = r"(?:struct|enum|union|trait|type|fn|const|static|mod|macro_rules!)"
        return re.search(rf"\b{kinds}\s+{re.escape(name)}\b", self.code.get(mod, "")) is not None

    def resolve(self, full, depth=0):
        """The module (file) that defines what crate path `full` names."""
        p = list(full)
        k = len(p)
        while k > 0 and tuple(p[:k]) not in self.mods:
            k -= 1
        mod, rest = tuple(p[:k]), p[k:]
        if not rest or depth > 8:
            return mod
        name = rest[0]
        if name in self.reexports[mod]:
            target = self.reexports[mod][name]
            return mod if target is None else self.resolve(list(target) + rest[1:], depth + 1)
        if not self.defines(mod, name):
            for g in self.globs[mod]:
                if g in self.mods and (self.defines(g, name) or name in self.reexports[g]):
                    return self.resolve(list(g) + rest, depth + 1)
        return mod

    def edges(self):
        out = {}
        for here, text in self.code.items():
            targets, imported = set(), {}
            body = USE.sub(" ", text)
            for public, leaves in self.uses[here]:
                for segs, name, glob in leaves:
                    full = self.absolute(here, segs)
                    if full is None:
                        continue
                    if name and not glob:
                        imported[name] = full
                    # A re-export is a use of its own file only if the code names it.
                    if public and not (name and re.search(rf"\b{re.escape(name)}\b", body)):
                        continue
                    targets.add(self.resolve(full))
            for m in re.finditer(r"(?<![\w:.])(\w+)((?:\s*::\s*\w+)+)", body):
                head = m.group(1)
                segs = [head] + [s for s in re.split(r"\s*::\s*", m.group(2)) if s]
                if head in imported:
                    full = list(imported[head]) + segs[1:]
                else:
                    full = self.absolute(here, segs)
                if full is not None:
                    targets.add(self.resolve(full))
            targets.discard(here)
            out[here] = targets
        return out


# --- circles --------------------------------------------------------------------------

def cycles(g, limit=200):
    """Simple circles of `g`, each once (from its first node in sorted order)."""
    nodes = sorted(g)
    index = {n: i for i, n in enumerate(nodes)}
    found = []
    for s in nodes:
        stack, on = [s], {s}

        def walk(v):
            for m in sorted(g.get(v, ())):
                if len(found) >= limit:
                    return
                if m == s:
                    found.append(stack + [s])
                elif m in index and index[m] > index[s] and m not in on:
                    stack.append(m)
                    on.add(m)
                    walk(m)
                    on.discard(m)
                    stack.pop()

        walk(s)
    return found


def upward(a, b):
    """`a` names one of its ancestor modules (its parent mod.rs, or the crate root)."""
    return len(b) < len(a) and a[: len(b)] == b


def without_upward(g):
    return {a: {b for b in bs if not upward(a, b)} for a, bs in g.items()}


def inside(n, anc):
    """`n` is `anc` or lies below it."""
    return n[: len(anc)] == anc


def reach(g, start, within=None):
    """Nodes reachable from `start` in `g` (`within`: only through nodes it accepts),
    each with the path that reached it first."""
    seen, todo = {start: [start]}, [start]
    while todo:
        v = todo.pop()
        for m in sorted(g.get(v, ())):
            if m not in seen and (within is None or within(m)):
                seen[m] = seen[v] + [m]
                todo.append(m)
    return seen


def upward_circles(g):
    """Circles that close through a module naming an ancestor, and are not the allowed
    kind. A module may name its ancestor `anc` (a handle naming its parent, as quinn's
    do) when the circle stays inside `anc`'s subtree; with the crate root as the
    ancestor, only the two-file circle (the root naming the module back directly) is
    allowed. So an ancestor's code that reaches the module back through a file outside
    its subtree (or the root through any other file) is reported."""
    down = without_upward(g)
    bad = []
    for a in sorted(g):
        for anc in sorted(b for b in g[a] if upward(a, b)):
            if anc == ():
                hits = [paths[a] for m in sorted(down.get(anc, ())) if m != a
                        for paths in [reach(down, m)] if a in paths]
                hits = [[anc] + h for h in hits]
            else:
                # Not through `a` itself: a circle without the upward edge is reported
                # as a plain one.
                paths = reach(down, anc, within=lambda m: m != a)
                outside = [m for m in paths if not inside(m, anc)]
                hits = []
                for o in outside:
                    back = reach(down, o)
                    if a in back:
                        hits.append(paths[o] + back[a][1:])
                        break
            if hits:
                c = [a] + hits[0]
                bad.append(c)
    return bad


def name(p):
    return "::".join(p) or "(root)"


def check(root, crates):
    """The circles that are not allowed, as printable lines."""
    bad = []
    for crate in crates:
        src = os.path.join(root, crate, "src")
        for top in ("lib.rs", "main.rs"):
            f = os.path.join(src, top)
            if not os.path.exists(f):
                continue
            label = crate if top == "lib.rs" else f"{crate} (bin)"
            g = Crate(module_tree(f)).edges()
            for c in cycles(without_upward(g)) + upward_circles(g):
                bad.append(f"{label}: " + " -> ".join(name(p) for p in c))
    return bad


SELF_TEST = {
    "Cargo.toml": '[workspace]\nmembers = ["k"]\n',
    "k/src/lib.rs": "mod a;\nmod b;\nmod c;\nmod e;\nmod m;\nmod y;\nmod r1;\nmod r2;\n"
    "pub(crate) struct Root(crate::r1::R1);\n",
    # a -> b::inner through b's `pub(super) use`; b::inner -> a: a circle.
    "k/src/a.rs": "use crate::b::{Thing};\npub(crate) struct Other;\n",
    "k/src/b/mod.rs": "mod inner;\npub(super) use inner::Thing;\n"
    "pub(crate) struct Handle;\nfn f(_: Thing) {}\n",
    # b::inner names its parent, whose code uses it back: allowed.
    "k/src/b/inner.rs": "use crate::a::Other;\npub(crate) struct Thing(super::Handle);\n",
    # e -> c::d through a glob re-export; c::d -> e: a circle.
    "k/src/c/mod.rs": "mod d;\npub use d::*;\n",
    "k/src/c/d.rs": "pub struct Ditem(crate::e::Eitem);\n",
    "k/src/e.rs": "use crate::c::Ditem;\npub struct Eitem;\n",
    # m::x names its parent, whose code reaches x back through y, outside m: a circle.
    "k/src/m/mod.rs": "mod x;\npub(crate) struct Mt(crate::y::Yt);\n",
    "k/src/m/x.rs": "pub(crate) struct Xt(super::Mt);\n",
    "k/src/y.rs": "pub(crate) struct Yt(crate::m::x::Xt);\n",
    # r2 names the crate root, whose code reaches r2 back through r1: a circle.
    "k/src/r1.rs": "pub(crate) struct R1(crate::r2::R2);\n",
    "k/src/r2.rs": "pub(crate) struct R2(Box<crate::Root>);\n",
}


def self_test():
    with tempfile.TemporaryDirectory() as d:
        for rel, text in SELF_TEST.items():
            os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
            open(os.path.join(d, rel), "w").write(text)
        got = sorted(check(d, workspace_crates(d)))
    want = ["k: a -> b::inner -> a", "k: c::d -> e -> c::d", "k: m::x -> m -> y -> m::x",
            "k: r2 -> (root) -> r1 -> r2"]
    if got != want:
        print("import_cycles self-test failed: found", got, "expected", want)
        return 1
    print("import_cycles self-test: the circles through re-exports and around a parent found")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    bad = check(ROOT, workspace_crates(ROOT))
    for line in bad:
        print(line)
    print(f"{len(bad)} circles" if bad else "no import circles")
    sys.exit(1 if bad else 0)
