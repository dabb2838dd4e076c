#!/usr/bin/env python3
"""The shape a newcomer sees (issue 46), checked by `./run test`:

- README.md reads in a minute: under 120 lines, its first code block the two commands
  (`./run demo`, `./run test`), every file it links to or shows there, and `.ci/run` runs the
  test command it gives;
- no files of one folder import each other in a circle (two or more): a name sibling files
  share lives in the lower one (or in the folder's mod.rs), so each folder reads bottom-up;
- a source file holds at most 900 lines before its tests (`#[cfg(test)]`); test files and
  the vendored fuser are exempt.

Imports are the paths a file names (`super::x`, `crate::a::b`, `self::x`) outside comments,
resolved to the file that holds them. Exit 1 with each finding named.
"""
import os
import re
import sys

LIMIT = 900
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
findings = []

for crate in sorted(os.listdir(os.path.join(root, "crates"))):
    src = os.path.join(root, "crates", crate, "src")
    files = {}  # module path (tuple) -> file
    for d, _, names in os.walk(src):
        for f in names:
            if f.endswith(".rs"):
                p = os.path.join(d, f)
                parts = tuple(os.path.relpath(p, src)[:-3].split(os.sep))
                if parts[-1] in ("mod", "lib", "main"):
                    parts = parts[:-1]
                files[parts] = p

    def holder(path):
        """The file that holds the item a path names: its longest module prefix."""
        for n in range(len(path), 0, -1):
            if tuple(path[:n]) in files:
                return tuple(path[:n])
        return None

    edges = {m: set() for m in files}
    for m, p in files.items():
        with open(p) as fh:
            text = fh.read()
        # the file's own test module ends what is counted (a `#[cfg(test)] mod x;`
        # declaration of a test file does not)
        body = re.split(r"\n#\[cfg\(test\)\]\s*mod \w+\s*\{", text)[0]
        code_lines = body.count("\n") + 1
        if code_lines > LIMIT:
            findings.append(f"{os.path.relpath(p, root)}: {code_lines} lines before its tests (at most {LIMIT})")
        code = "\n".join(line.split("//")[0] for line in body.split("\n"))
        here = list(m)  # the module `self::` names
        # a file that imports its parent's names (`use super::*`) names a sibling module
        # bare (`mount::parse_mount_options`)
        if re.search(r"\buse super::\*;", code):
            siblings = {k[-1] for k in files if len(k) == len(m) and k[:-1] == m[:-1] and k != m}
            for hit in re.finditer(r"(?<![\w:])(\w+)::", code):
                if hit.group(1) in siblings:
                    edges[m].add(tuple(list(m[:-1]) + [hit.group(1)]))
        for hit in re.finditer(r"\b(crate|super|self)((?:::\w+)+)", code):
            kind, rest = hit.group(1), hit.group(2).split("::")[1:]
            base = [] if kind == "crate" else here
            while kind != "crate" and rest and rest[0] == "super":
                rest = rest[1:]
                base = base[:-1]
            if kind == "super":
                base = base[:-1]
            t = holder(list(base) + rest)
            if t and t != m and len(t) == len(m) and t[:-1] == m[:-1]:
                edges[m].add(t)
    # circles: the strongly connected components of more than one file (Tarjan)
    index, low, stack, on, comps = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    for comp in comps:
        names = ", ".join("/".join(c) for c in comp)
        findings.append(
            f"crates/{crate}/src: {names} import each other in a circle "
            "(move the names they share into the lower one)"
        )

# README.md
readme_path = os.path.join(root, "README.md")
with open(readme_path) as fh:
    readme = fh.read()
lines = readme.count("\n")
if lines >= 120:
    findings.append(f"README.md: {lines} lines (under 120)")
blocks = re.findall(r"```[a-z]*\n(.*?)```", readme, re.S)
first = blocks[0] if blocks else ""
for cmd in ("./run demo", "./run test"):
    if cmd not in first:
        findings.append(f"README.md: its first code block does not give `{cmd}`")
for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme):
    if "://" not in target and not os.path.exists(os.path.join(root, target)):
        findings.append(f"README.md: links to {target}, which does not exist")
with open(os.path.join(root, ".ci", "run")) as fh:
    if "./run test" not in fh.read():
        findings.append(".ci/run does not run `./run test`, the test command README.md gives")

for f in findings:
    print(f)
sys.exit(1 if findings else 0)
