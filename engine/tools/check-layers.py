#!/usr/bin/env python3
"""check-layers.py - the engine's layering, written once and checked.

Why a script: a layer map kept as prose goes stale (the protocol wrote
c->out.len, ext_batch.c included storage_internal.h, nine storage files
called each other in a circle, and the README still said otherwise). The
layers below are the one definition: this script fails on any `#include`
or call that goes against them, and engine/README.md's map is generated
from them (`--write-readme`), then compared (`--readme`).

Rules, checked on every file of src/:
  1. every .c and .h file belongs to one layer;
  2. a file includes only headers of its own layer or of a layer below,
     never of a layer its layer forbids (`#include "..."`, headers too);
  3. an object calls (or reads) only symbols defined in its own layer or a
     layer below, never in a layer its layer forbids: each object's
     undefined symbols (`nm`) against the object that defines them;
  4. within a layer, calls form no cycle except the one inherent to the
     storage core (ALLOWED_CYCLE): an item, its bag and its page mover;
  5. no file but outbuf.c/outbuf.h touches the output queue's fields: the
     protocol (through conn.h's out_* wrappers), the network and IO layers
     use outbuf.h's functions.

Usage: check-layers.py --src src --obj build/obj [--readme README.md]
       check-layers.py --src src --write-readme README.md
stdlib only; runs in well under a second.
"""
import argparse
import os
import re
import subprocess
import sys
import textwrap
from collections import defaultdict

# Top to bottom. A layer may use itself and the layers after it, never
# what it forbids (layers or single files). (name, what it is, files
# without extension, forbidden)
LAYERS = [
    ("main", "the process: arguments, start and stop order, and the memory "
             "bound a start with those arguments can reach (--memory-budget)",
     ["main", "memory_budget"], []),
    ("net", "network layer: listening sockets and accept, worker threads and "
            "their loops, the connection state machine",
     ["net", "net_listen", "net_place", "net_worker", "net_conn", "net_internal"], []),
    ("metrics", "the metrics port: its own thread, HTTP, the probe of the engine port",
     ["metrics_server", "metrics", "http", "engine_probe"], []),
    ("proto", "protocol layer: ASCII and meta commands, answered into the output queue; "
              "the authentication gate in front of them (-Y)",
     ["proto", "proto_text", "proto_meta", "proto_reply", "testhook", "auth"], []),
    ("services", "what the network and protocol layers share: stats, latency "
                 "histograms, batched lookups, the TLS context and records (-Z)",
     ["stats", "latency", "prefetch", "tls"], []),
    ("io", "extstore's IO layer: IO threads, batched disk reads; it takes a "
           "storage context from the thread registry (epoch.c), and its "
           "completions go back through the hook table (ext_hooks.h)",
     ["ext_io", "ext_batch"], ["item code"]),
    ("server", "process state: settings, connections and workers (conn.h), the "
               "server's own stats",
     ["server", "conn"], []),
    ("output", "the output queue and deferred replies",
     ["outbuf", "reply"], []),
    ("trace", "the request-path trace of trace builds (make TRACE=1): the "
              "network, protocol, IO and output layers record into it",
     ["trace"], []),
    ("storage", "the storage core: items, hash table, bag LRU, slab allocator "
                "and page mover, extstore's item side and compactor, the "
                "config/clock/flush/CAS words, thread registry and read "
                "sections, lifecycle and stats",
     ["storage", "storage_internal", "storage_stats", "items", "bags", "slabs",
      "slabs_internal", "slabs_mover", "slabs_gain", "slabs_prefault", "assoc", "ext_items",
      "ext_compact", "clock", "epoch", "mrc"], []),
    ("config", "the command line: settings parser, process setup",
     ["settings", "proc"], []),
    ("storage_api", "the storage API's types (storage.h) and the extstore hook "
                    "table the item code and the IO layer call through",
     ["storage_h", "ext_hooks"], []),
    ("log", "the `watch` log stream: watchers' fixed rings and the thread that "
            "sends them; anything above reports events into it",
     ["logger"], []),
    ("base", "no engine state: page store, background threads, buffer budget, "
             "event loop, io_uring, request parser, miss-ratio curve estimator, "
             "syscalls without cancellation points, a TLS client round trip, "
             "the probes' connect and waits against one deadline",
     ["extstore", "ext_knob", "bgthread", "bufmem", "ae", "uring", "proto_parser", "shards", "nocancel", "tls_client",
      "probe_io"], []),
]

# Named groups a layer may forbid. Item code: every storage file but the
# thread registry and read sections (epoch.c), which any thread that reads
# items registers with.
GROUPS = {
    "item code": {"storage", "storage_internal", "storage_stats", "items", "bags",
                  "slabs", "slabs_internal", "slabs_mover", "slabs_prefault", "assoc", "ext_items",
                  "ext_compact", "clock"},
}

# The storage core's inherent knot: a store evicts from a bag, a bag frees
# items, the page mover evicts and rescues items of the page it empties.
ALLOWED_CYCLE = {"items", "bags", "slabs_mover"}

# Test hooks the storage files share (compiled out of release builds behind
# CACHET_TEST_HOOKS): not a dependency of the engine itself.
TEST_ONLY_SYMBOL = re.compile(r"^g_test_")

# The output queue's fields are its own: every other file uses outbuf.h's
# functions (the protocol through conn.h's out_* wrappers).
OUTPUT_QUEUE_UNITS = {"outbuf"}
OUTPUT_FIELD = re.compile(r"(?:->|\.)out\s*\.\s*[A-Za-z_]")

README_BEGIN = "<!-- layers:begin (generated by tools/check-layers.py --write-readme) -->"
README_END = "<!-- layers:end -->"


def layer_index():
    where, rank = {}, {}
    for i, (name, _, files, _) in enumerate(LAYERS):
        rank[name] = i
        for f in files:
            if f in where:
                sys.exit(f"check-layers.py: {f} is in two layers")
            where[f] = name
    return where, rank


def unit_of(path):
    """A file's unit: foo.c and foo.h are foo; storage.h is the storage
    API's own unit (storage_h), apart from storage.c's lifecycle."""
    base = os.path.basename(path)
    if base == "storage.h":
        return "storage_h"
    return os.path.splitext(base)[0]


def render_map(src):
    present = set(os.listdir(src))
    out = ["```"]
    for name, what, files, forbid in LAYERS:
        names = []
        for f in files:
            if f == "storage_h":
                names.append("storage.h")
                continue
            names += [f + ext for ext in (".c", ".h") if f + ext in present and unit_of(f + ext) == f]
        out += textwrap.wrap(f"{name}: {what}", 78, subsequent_indent="  ")
        line = "    "
        for n in names:
            if len(line) + len(n) > 78:
                out.append(line.rstrip())
                line = "    "
            line += n + " "
        out.append(line.rstrip())
        for f in forbid:
            group = sorted(GROUPS.get(f, ()))
            out += textwrap.wrap(f"never uses {f}" + (": " + " ".join(group) if group else ""), 78,
                                 initial_indent="    ", subsequent_indent="      ")
    out.append("```")
    out.append("")
    out += textwrap.wrap(
        "Each layer uses only itself and the layers below it, in `#include`s and in "
        "calls (each object's undefined symbols, `nm`). Within a layer calls form no "
        "cycle, except " + " ↔ ".join(sorted(ALLOWED_CYCLE)) + ". Only `outbuf.c` "
        "touches the output queue's fields; every other file uses `outbuf.h`'s functions. "
        "`tools/check-layers.py` holds this map and checks it, first in `make check`.", 75)
    return "\n".join(out) + "\n"


def readme_block(text):
    b, e = text.find(README_BEGIN), text.find(README_END)
    if b < 0 or e < b:
        return None, None, None
    return text[:b + len(README_BEGIN)] + "\n", text[b + len(README_BEGIN) + 1:e], text[e:]


def forbidden_units():
    """Per layer, the files it never uses (its forbidden layers' and groups')."""
    out = {}
    for name, _, _, forbid in LAYERS:
        units = set()
        for f in forbid:
            if f in GROUPS:
                units |= GROUPS[f]
            else:
                units |= {u for n, _, files, _ in LAYERS if n == f for u in files}
        out[name] = units
    return out


def check_includes(src, where, rank, errors):
    inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
    forbid = forbidden_units()
    for fn in sorted(os.listdir(src)):
        if not fn.endswith((".c", ".h")):
            continue
        me = where[unit_of(fn)]
        with open(os.path.join(src, fn), encoding="utf-8", errors="replace") as f:
            text = f.read()
        for h in inc.findall(text):
            u = unit_of(h)
            if u not in where:
                errors.append(f"src/{fn} includes \"{h}\", which is in no layer")
                continue
            them = where[u]
            if u in forbid[me]:
                errors.append(f"src/{fn} includes \"{h}\": layer {me} never uses {forbid_name(me, u, where)}")
            elif rank[them] < rank[me]:
                errors.append(f"src/{fn} includes \"{h}\": layer {me} may not use layer {them}, "
                              f"which is above it")


def symbols(objdir, units):
    defs, undef = {}, {}
    for u in units:
        o = os.path.join(objdir, u + ".o")
        if not os.path.exists(o):
            sys.exit(f"check-layers.py: {o} is missing: build the objects first (make all)")
        out = subprocess.run(["nm", o], capture_output=True, text=True, check=True).stdout
        undef[u] = set()
        for line in out.splitlines():
            p = line.split()
            if len(p) == 3 and p[1] in "TDBRCVWG":
                defs.setdefault(p[2], u)
            elif len(p) == 2 and p[0] == "U":
                undef[u].add(p[1])
    return defs, undef


def sccs(nodes, edges):
    """Tarjan's strongly connected components."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def forbid_name(layer, unit, where):
    """How the rule `layer` broke names what it forbids: a group or a layer."""
    for name, _, _, forbid in LAYERS:
        if name == layer:
            for f in forbid:
                if unit in GROUPS.get(f, ()):
                    return f"{f} ({unit})"
    return "layer " + where[unit]


def check_calls(src, objdir, where, rank, errors):
    forbid = forbidden_units()
    units = sorted(unit_of(f) for f in os.listdir(src) if f.endswith(".c"))
    defs, undef = symbols(objdir, units)
    edges = defaultdict(lambda: defaultdict(set))
    for u in units:
        for s in undef[u]:
            d = defs.get(s)
            if d is None or d == u or TEST_ONLY_SYMBOL.match(s):
                continue
            edges[u][d].add(s)
    for u in units:
        me = where[u]
        for d, syms in sorted(edges[u].items()):
            them = where[d]
            what = " ".join(sorted(syms))
            if d in forbid[me]:
                errors.append(f"{u}.o uses {d}.o ({what}): layer {me} never uses {forbid_name(me, d, where)}")
            elif rank[them] < rank[me]:
                errors.append(f"{u}.o uses {d}.o ({what}): layer {me} may not use layer {them}, "
                              f"which is above it")
    graph = {u: set(ds) for u, ds in edges.items()}
    for comp in sccs(units, graph):
        if len(comp) > 1 and not comp <= ALLOWED_CYCLE:
            inside = [f"{a} -> {b} ({' '.join(sorted(edges[a][b]))})"
                      for a in sorted(comp) for b in sorted(edges[a]) if b in comp]
            errors.append("call cycle " + " ↔ ".join(sorted(comp)) + " (only " +
                          " ↔ ".join(sorted(ALLOWED_CYCLE)) + " may call each other in a circle):\n      " +
                          "\n      ".join(inside))


def check_output_api(src, where, errors):
    for fn in sorted(os.listdir(src)):
        if not fn.endswith((".c", ".h")) or unit_of(fn) in OUTPUT_QUEUE_UNITS:
            continue
        with open(os.path.join(src, fn), encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                code = line.split("//")[0]
                if OUTPUT_FIELD.search(code) and not code.lstrip().startswith("*"):
                    errors.append(f"src/{fn}:{n}: touches the output queue's fields "
                                  f"(use outbuf.h's functions): {line.strip()}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
    ap.add_argument("--obj", help="the objects of a build (nm); without it calls are not checked")
    ap.add_argument("--readme", help="check this README's generated layer map")
    ap.add_argument("--write-readme", help="regenerate this README's layer map and exit")
    ap.add_argument("--print-map", action="store_true")
    a = ap.parse_args()

    if a.print_map:
        sys.stdout.write(render_map(a.src))
        return 0
    if a.write_readme:
        with open(a.write_readme, encoding="utf-8") as f:
            head, _, tail = readme_block(f.read())
        if head is None:
            sys.exit(f"check-layers.py: {a.write_readme} has no {README_BEGIN} ... {README_END} block")
        with open(a.write_readme, "w", encoding="utf-8") as f:
            f.write(head + render_map(a.src) + tail)
        return 0

    where, rank = layer_index()
    errors = []
    for fn in sorted(os.listdir(a.src)):
        if fn.endswith((".c", ".h")) and unit_of(fn) not in where:
            errors.append(f"src/{fn} is in no layer: add it to LAYERS in tools/check-layers.py")
    if errors:
        return report(errors)
    check_includes(a.src, where, rank, errors)
    if a.obj:
        check_calls(a.src, a.obj, where, rank, errors)
    check_output_api(a.src, where, errors)
    if a.readme:
        with open(a.readme, encoding="utf-8") as f:
            _, body, _ = readme_block(f.read())
        if body is None:
            errors.append(f"{a.readme} has no generated layer map ({README_BEGIN})")
        elif body != render_map(a.src):
            errors.append(f"{a.readme}'s layer map differs from tools/check-layers.py's LAYERS: "
                          f"run tools/check-layers.py --src src --write-readme {a.readme}")
    return report(errors)


def report(errors):
    if errors:
        print("check-layers: FAILED, the layering in tools/check-layers.py is broken:", file=sys.stderr)
        for e in errors:
            print("  - " + e, file=sys.stderr)
        return 1
    print("check-layers: includes, calls, cycles and output-queue access follow the layers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
