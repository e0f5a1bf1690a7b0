#!/usr/bin/env bash
# Lists the file-to-file `use` edges inside each crate of the workspace and reports circles:
# file A names something of file B while B, directly or through others, names A.
#
#   bash scripts/circles.sh            # one line per module tree, then each circle found
#   bash scripts/circles.sh --edges    # also every edge, with the names that make it
#
# Exit status 1 when a circle is found.
#
# What counts as an edge (an approximation, read from the text, not from the compiler):
# - a path outside comments and strings that starts with `crate::`, `super::`, `self::` or,
#   in the file that declares it, the name of a child module (`use builder::Durability`);
#   `use` groups such as `use crate::{a::X, b::{Y, Z}}` are expanded;
# - the path goes to the file of the longest module prefix it names; when that file only
#   re-exports the item (`pub use x::Item`, also through `*`), the path is followed to the
#   file the re-export points at, so `crate::Durability` is an edge to the file that defines
#   `Durability`, not to `lib.rs`;
# - `pub use` lines themselves are not edges (a parent's facade is not a dependency);
# - `mod x;` declarations are not edges;
# - code under `#[cfg(test)]` (inline test modules, test-only files) is left out.
# Module trees start at src/lib.rs, src/main.rs, src/bin/*.rs, benches/*.rs, benches/*/main.rs
# and tests/*.rs; `#[path = "…"]` on a `mod` is followed.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 - "$@" <<'PY'
import glob, os, re, sys

SHOW_EDGES = "--edges" in sys.argv[1:]
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip(src):
    """Source with comments, strings and char literals blanked (newlines kept)."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i)); i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j): depth += 1; j += 2
                elif src.startswith("*/", j): depth -= 1; j += 2
                else: j += 1
            out.append(re.sub(r"[^\n]", " ", src[i:j])); i = j
        elif re.match(r'(b?r#*")', src[i:i + 12]) and (i == 0 or not re.match(r"\w", src[i - 1])):
            m = re.match(r'b?r(#*)"', src[i:])
            end = src.find('"' + m.group(1), i + len(m.group(0)))
            j = n if end < 0 else end + 1 + len(m.group(1))
            out.append(re.sub(r"[^\n]", " ", src[i:j])); i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append(re.sub(r"[^\n]", " ", src[i:j + 1])); i = j + 1
        elif c == "'":
            m = re.match(r"'(\\.[^']*|[^\\'])'", src[i:])
            if m:
                out.append(" " * len(m.group(0))); i += len(m.group(0))
            else:
                out.append(c); i += 1
        else:
            out.append(c); i += 1
    return "".join(out)


def expand_use(tree):
    """`a::{b, c::{d, e as f}}` -> [['a','b'], ['a','c','d'], ['a','c','e']]."""
    tree = re.sub(r"\s+", "", re.sub(r"\s+as\s+", "@", tree))
    res = []

    def walk(prefix, s):
        parts, depth, cur = [], 0, ""
        for ch in s:
            if ch == "{": depth += 1
            if ch == "}": depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur); cur = ""
            else:
                cur += ch
        parts.append(cur)
        for p in parts:
            if not p:
                continue
            if "{" in p:
                head, rest = p.split("{", 1)
                walk(prefix + [x for x in head.split("::") if x], rest[:-1])
            else:
                p = p.split("@")[0]
                res.append(prefix + [x for x in p.split("::") if x])

    walk([], tree)
    return res


def cfg_test(attrs):
    return re.search(r"#\[cfg\((all\()?\s*test\b", attrs) is not None


class Tree:
    def __init__(self, root):
        self.root = root
        self.files = {}  # module path tuple -> file
        self.text = {}   # file -> stripped text
        self.test_files = set()
        self.load(root, (), False, True)

    def load(self, path, modpath, is_test, mod_root):
        if not os.path.exists(path) or path in self.text:
            return
        self.files[modpath] = path
        if is_test:
            self.test_files.add(path)
        text = strip(open(path, encoding="utf-8").read())
        self.text[path] = text
        base = os.path.dirname(path) if mod_root else os.path.splitext(path)[0]
        for m in re.finditer(r"((?:#\[[^\]]*\]\s*)*)(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*;", text):
            attrs, name = m.group(1), m.group(2)
            raw = open(path, encoding="utf-8").read()
            pm = None
            # `#[path]` is blanked by `strip` (a string); read it back from the raw line above.
            line_no = text[: m.start(2)].count("\n")
            lines = raw.split("\n")
            for back in range(1, 4):
                if line_no - back < 0:
                    break
                pm = re.search(r'#\[path\s*=\s*"([^"]+)"\]', lines[line_no - back]) or pm
            if pm:
                child, child_root = os.path.join(os.path.dirname(path), pm.group(1)), True
            else:
                child = os.path.join(base, name + ".rs")
                child_root = False
                if not os.path.exists(child):
                    child, child_root = os.path.join(base, name, "mod.rs"), True
            self.load(child, modpath + (name,), is_test or cfg_test(attrs), child_root)

    def modpath_of(self, path):
        return next(k for k, v in self.files.items() if v == path)

    def children(self, modpath):
        return {k[-1] for k in self.files if len(k) == len(modpath) + 1 and k[:-1] == modpath}

    def reexports(self, path):
        """name -> absolute path, plus glob targets, from `pub use` in this file."""
        names, globs = {}, []
        mp = self.modpath_of(path)
        for m in re.finditer(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);", self.text[path]):
            for segs in expand_use(m.group(1)):
                alias = re.search(r"\bas\s+(" + IDENT + r")", m.group(1))
                absolute = self.absolute(segs, mp)
                if absolute is None:
                    continue
                if segs[-1] == "*":
                    globs.append(absolute[:-1])
                else:
                    names[segs[-1]] = absolute
        return names, globs

    def absolute(self, segs, modpath):
        """Path segments as seen from `modpath` -> absolute segments, or None (external)."""
        segs = list(segs)
        if not segs:
            return None
        if segs[0] == "crate":
            return segs[1:]
        cur = list(modpath)
        if segs[0] in ("self", "super"):
            while segs and segs[0] in ("self", "super"):
                if segs.pop(0) == "super":
                    if not cur:
                        return None
                    cur.pop()
            return cur + segs
        if segs[0] in self.children(tuple(modpath)):
            return cur + segs
        return None

    def defines(self, path, name):
        return re.search(r"\b(struct|enum|fn|trait|type|const|static|union|mod|macro_rules!)\s+" + name + r"\b",
                         self.text[path]) is not None

    def resolve(self, absolute, depth=0):
        """Absolute segments -> the file that holds the item."""
        k = len(absolute)
        while k and tuple(absolute[:k]) not in self.files:
            k -= 1
        path = self.files[tuple(absolute[:k])]
        rest = absolute[k:]
        if not rest or depth > 8:
            return path
        names, globs = self.reexports(path)
        if rest[0] in names:
            return self.resolve(names[rest[0]] + rest[1:], depth + 1)
        if not self.defines(path, rest[0]):
            for g in globs:
                target = self.resolve(g + [rest[0]], depth + 1)
                if target != self.files.get(tuple(g)) or self.defines(target, rest[0]):
                    return target
        return path

    def test_spans(self, text):
        """Character spans of `#[cfg(test)]`-gated inline modules and items."""
        spans = []
        for m in re.finditer(r"#\[cfg\((all\()?\s*test\b[^\]]*\]", text):
            j = m.end()
            # The gated item ends at its first `;` at depth 0 or at its closing brace.
            depth, k = 0, j
            while k < len(text):
                if text[k] == "{": depth += 1
                elif text[k] == "}":
                    depth -= 1
                    if depth == 0:
                        k += 1; break
                elif text[k] == ";" and depth == 0:
                    k += 1; break
                k += 1
            spans.append((m.start(), k))
        return spans

    def inline_mods(self, text):
        """(start, end, name) of inline `mod name { … }` blocks."""
        out = []
        for m in re.finditer(r"\bmod\s+(" + IDENT + r")\s*\{", text):
            depth, k = 0, m.end() - 1
            while k < len(text):
                if text[k] == "{": depth += 1
                elif text[k] == "}":
                    depth -= 1
                    if depth == 0:
                        break
                k += 1
            out.append((m.start(), k, m.group(1)))
        return out

    def edges(self):
        found = {}
        for path, text in self.text.items():
            if path in self.test_files:
                continue
            base = self.modpath_of(path)
            skip = self.test_spans(text)
            mods = self.inline_mods(text)
            pub_use = [(m.start(), m.end()) for m in re.finditer(r"\bpub(?:\([^)]*\))?\s+use\s+[^;]+;", text)]

            def scope(pos):
                inner = [name for s, e, name in sorted(mods) if s <= pos < e]
                return base + tuple(inner)

            def inside(pos, spans):
                return any(s <= pos < e for s, e in spans)

            uses = []
            use_spans = []
            for m in re.finditer(r"\buse\s+([^;]+);", text):
                use_spans.append((m.start(), m.end()))
                if inside(m.start(), pub_use):
                    continue
                for segs in expand_use(m.group(1)):
                    uses.append((m.start(), segs))
            heads = "crate|super|self"
            for m in re.finditer(r"(?<![\w:])((?:" + heads + "|" + IDENT + r")(?:::" + IDENT + r")+)", text):
                if inside(m.start(), use_spans):
                    continue
                uses.append((m.start(), m.group(1).split("::")))
            for pos, segs in uses:
                if inside(pos, skip):
                    continue
                mp = scope(pos)
                absolute = self.absolute([s for s in segs if s != "*"], mp)
                if absolute is None:
                    continue
                target = self.resolve(absolute)
                if target != path:
                    found.setdefault((path, target), set()).add("::".join(segs))
        return found


def cycles(nodes, adj):
    """Strongly connected components with more than one file (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]; counter[0] += 1
        stack.append(v); on.add(v)
        for w in sorted(adj.get(v, ())):
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


roots = []
for crate in sorted(glob.glob("crates/*/")) + ["benches/"]:
    for pattern in ("src/lib.rs", "src/main.rs", "src/bin/*.rs", "benches/*.rs", "benches/*/main.rs",
                    "compare/main.rs", "tests/*.rs"):
        roots += sorted(glob.glob(os.path.join(crate, pattern)))

total = 0
for root in roots:
    tree = Tree(root)
    edges = tree.edges()
    adj = {}
    for (a, b) in edges:
        adj.setdefault(a, set()).add(b)
    found = cycles(tree.text.keys(), adj)
    total += len(found)
    print(f"{root}: {len(tree.text)} files, {len(edges)} edges, {len(found)} circle(s)")
    if SHOW_EDGES:
        for (a, b), names in sorted(edges.items()):
            print(f"    {a} -> {b}  ({', '.join(sorted(names)[:4])})")
    for comp in found:
        print("  circle: " + " , ".join(comp))
        for (a, b), names in sorted(edges.items()):
            if a in comp and b in comp:
                print(f"    {a} -> {b}  ({', '.join(sorted(names)[:4])})")
print(f"{total} circle(s)")
sys.exit(1 if total else 0)
PY
