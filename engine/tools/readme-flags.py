#!/usr/bin/env python3
"""README.md's flags table comes from `cachetd -h`; this keeps it so.

    readme-flags.py CACHETD README.md           check: exit 1, naming each flag whose
                                                 row differs from the help, is missing
                                                 from the table or is no longer in it
    readme-flags.py --write CACHETD README.md   regenerate the table in place

The table sits between the two `flags-table` comment lines in README.md. Its
first two columns are `cachetd -h`'s, verbatim: the flag as the help spells it
and the help's text (continuation lines joined). The third column, "details",
is the only hand-written part; regenerating keeps it, keyed by the flag's long
name, so a flag added to `cachetd -h` appears as a new row with empty details
and a flag removed from the help loses its row. The lines the help prints after
its options are quoted under the table.
"""
import re
import subprocess
import sys

BEGIN = "<!-- flags-table:begin"
END = "<!-- flags-table:end -->"
HEADER = ("<!-- flags-table:begin: generated from `cachetd -h` by tools/readme-flags.py;"
          " edit only the details column, then `make readme-flags` -->")
# "  -p, --port=NUM          text" or "      --args-file=PATH    text" (the text
# may follow after a single space when the flag is long).
OPTION = re.compile(r"^ {1,8}((?:-[A-Za-z], )?--?[A-Za-z][\w-]*(?:=\S+)?)(?:\s+(.*))?$")
CONTINUATION = re.compile(r"^ {9,}(\S.*)$")


def parse_help(text):
    """Returns ([(flag, help text)], [trailer lines]) from `cachetd -h`."""
    rows, trailer, seen_option = [], [], False
    for line in text.splitlines():
        m = OPTION.match(line)
        c = CONTINUATION.match(line)
        if m and not c:
            rows.append([m.group(1), (m.group(2) or "").strip()])
            seen_option = True
        elif c and rows:
            rows[-1][1] = (rows[-1][1] + " " + c.group(1).strip()).strip()
        elif seen_option and line.strip():
            trailer.append(line.strip())
    if not rows:
        sys.exit("readme-flags: no options found in `cachetd -h`")
    return [tuple(r) for r in rows], trailer


def key(flag):
    """The long name (`--port`), or the short one for a flag without it."""
    for part in flag.split(", "):
        if part.startswith("--"):
            return part.split("=")[0]
    return flag.split("=")[0]


def cell(s):
    return s.replace("|", "\\|")


def uncell(s):
    return s.strip().replace("\\|", "|")


def split_row(line):
    # Split on "|" not preceded by a backslash.
    parts = re.split(r"(?<!\\)\|", line.strip())
    return [uncell(p) for p in parts[1:-1]]


def block_bounds(lines, readme):
    starts = [i for i, l in enumerate(lines) if l.startswith(BEGIN)]
    ends = [i for i, l in enumerate(lines) if l.strip() == END]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        sys.exit(f"readme-flags: {readme} needs exactly one '{BEGIN} ...' line "
                 f"followed by one '{END}' line")
    return starts[0], ends[0]


def existing_rows(block):
    """{key: (flag, help, details)} from the table now in the README."""
    rows = {}
    for line in block:
        if not line.startswith("| `"):
            continue
        cols = split_row(line)
        if len(cols) != 3:
            sys.exit(f"readme-flags: a flags row needs 3 columns: {line}")
        flag = cols[0].strip("`")
        rows[key(flag)] = (flag, cols[1], cols[2])
    return rows


def render(options, trailer, details):
    out = [HEADER, "", "| flag | `cachetd -h` | details |", "|---|---|---|"]
    for flag, text in options:
        out.append(f"| `{flag}` | {cell(text)} | {cell(details.get(key(flag), ''))} |")
    if trailer:
        out += ["", "`cachetd -h` ends with:", ""]
        out += [f"> {cell(t)}" for t in trailer]
    out += ["", END]
    return out


def main(argv):
    write = argv[:1] == ["--write"]
    if write:
        argv = argv[1:]
    if len(argv) != 2:
        sys.exit(__doc__)
    cachetd, readme = argv
    helptext = subprocess.run([cachetd, "-h"], capture_output=True, text=True, timeout=10,
                              check=True).stdout
    options, trailer = parse_help(helptext)
    with open(readme, encoding="utf-8") as f:
        lines = f.read().split("\n")
    b, e = block_bounds(lines, readme)
    old = existing_rows(lines[b:e + 1])
    details = {k: v[2] for k, v in old.items()}
    new = render(options, trailer, details)
    if write:
        with open(readme, "w", encoding="utf-8") as f:
            f.write("\n".join(lines[:b] + new + lines[e + 1:]))
        return 0
    if new == lines[b:e + 1]:
        return 0
    problems = []
    help_keys = {key(f): (f, t) for f, t in options}
    for k, (f, t) in help_keys.items():
        if k not in old:
            problems.append(f"{f}: in `cachetd -h`, not in the table")
        elif old[k][:2] != (f, t):
            problems.append(f"{k}: the table says `{old[k][0]}` | {old[k][1]!r}, "
                            f"`cachetd -h` says `{f}` | {t!r}")
    for k in old:
        if k not in help_keys:
            problems.append(f"{k}: in the table, no longer in `cachetd -h`")
    if not problems:
        problems.append("the table's order, layout or trailer differs from `cachetd -h`")
    print(f"{readme}: the flags table does not match `{cachetd} -h`:", file=sys.stderr)
    for p in problems:
        print("  " + p, file=sys.stderr)
    print(f"  regenerate it: make -C engine readme-flags (tools/readme-flags.py --write)",
          file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
