#!/usr/bin/env python3
"""Files over 800 lines and functions over 120 lines in the workspace's Rust sources
(issue 32's limits). Test code is left out: files under tests/ or benches/, a trailing
`#[cfg(test)] mod tests` block, and functions inside it.

    scripts/sizes.py            # list what is over; exit 1 if anything is
    scripts/sizes.py --all N    # the N longest functions, whatever their length
"""
import os, re, sys

FILE_MAX, FN_MAX = 800, 120
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SKIP_DIRS = {"target", "tests", "benches", ".git", "corpus", "artifacts", "seeds"}
FN = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?fn\s+(\w+)")


def sources():
    for d, dirs, files in os.walk(ROOT):
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS]
        for f in files:
            if f.endswith(".rs") and f != "tests.rs":
                yield os.path.relpath(os.path.join(d, f), ROOT)


def code_lines(text):
    """The file's lines up to its test module (if that is the last item)."""
    lines = text.split("\n")
    for i, l in enumerate(lines):
        if l.startswith("#[cfg(test)]") and i + 1 < len(lines) and re.match(r"mod \w+", lines[i + 1]):
            return lines[:i]
    return lines


def functions(lines):
    """(name, first line, length) of each fn with a body, by brace depth (strings and
    comments with braces are rare enough in this code base to ignore)."""
    out = []
    for i, l in enumerate(lines):
        m = FN.match(l)
        if not m:
            continue
        depth, started = 0, False
        for j in range(i, len(lines)):
            s = re.sub(r"//.*", "", lines[j])
            s = re.sub(r"'(\\.|[^'\\])'", "", s)
            s = re.sub(r'"(\\.|[^"\\])*"', "", s)
            if not started and ";" in s and "{" not in s:
                break  # a declaration without a body
            depth += s.count("{") - s.count("}")
            if "{" in s:
                started = True
            if started and depth <= 0:
                out.append((m.group(6), i + 1, j - i + 1))
                break
    return out


def main():
    top = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[1] == "--all" else None
    over, fns = [], []
    for p in sorted(sources()):
        lines = code_lines(open(os.path.join(ROOT, p)).read())
        if len(lines) > FILE_MAX:
            over.append(f"{p}: {len(lines)} lines (limit {FILE_MAX})")
        for name, line, n in functions(lines):
            fns.append((n, f"{p}:{line} fn {name}"))
    fns.sort(reverse=True)
    if top:
        for n, where in fns[:top]:
            print(f"{n:5} {where}")
        return 0
    over += [f"{where}: {n} lines (limit {FN_MAX})" for n, where in fns if n > FN_MAX]
    print("\n".join(over) if over else f"no file over {FILE_MAX} lines, no function over {FN_MAX}")
    return 1 if over else 0


sys.exit(main())
