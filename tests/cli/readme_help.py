#!/usr/bin/env python3
"""The README's CLI table and `tally COMMAND --help` agree.

For every command (and lab's subcommands) that `tally --help` lists:
- the README's CLI table has a row for it;
- every option its --help lists is named in one of its rows, or in the
  paragraph after the table about the flags the model-running commands
  share (an option counts as named when any of its spellings is);
- every flag the synopsis of its rows (their first cell) names is one of its
  options (no flag the command lost; the descriptions may name other
  commands' flags);
and every command the table names exists. Also: the table is one table
(a blank line inside it ends it in Markdown renderers).

    usage: readme_help.py path/to/tally path/to/README.md
"""
import re
import subprocess
import sys

FLAG = re.compile(r"(?<![\w/.$-])(--?[A-Za-z][\w+-]*)")
# llama.cpp's spellings that tally rewrites before parsing (tools/tally/usage.cpp):
# CLI11 cannot declare a one-dash name of several letters.
REWRITTEN = {"-ngl": "--n-gpu-layers", "-sys": "--system-prompt"}


def run(tally, *args):
    p = subprocess.run([tally, *args], capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise SystemExit(f"readme_help: tally {' '.join(args)} exited {p.returncode}: {p.stderr.strip()}")
    return p.stdout


def help_sections(text):
    """Options (each a set of spellings) and subcommand names of one --help."""
    options, subcommands, section = [], [], None
    for line in text.splitlines():
        if line.startswith("Options:"):
            section = "options"
            continue
        if line.startswith("Subcommands:"):
            section = "subcommands"
            continue
        if not line.startswith("  ") or line.startswith("      "):
            continue  # a wrapped description
        first = line.strip().split()[0] if line.strip() else ""
        if section == "options" and first.startswith("-"):
            names = {n for n in first.split(",") if n.startswith("-")}
            names = {n.split(":")[0] for n in names}
            if names & {"-h", "--help"}:
                continue
            options.append(names)
        elif section == "subcommands" and first:
            subcommands.append(first)
    return options, subcommands


def table(readme):
    lines = readme.splitlines()
    start = lines.index("## CLI")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("## "))
    body = lines[start:end]
    first = next(i for i, l in enumerate(body) if l.startswith("| command |"))
    rows, i = [], first + 2
    while i < len(body) and body[i].startswith("|"):
        rows.append(body[i])
        i += 1
    # The paragraphs before and after the table: the flags every command, or
    # every model-running command, takes.
    after = "\n".join(body[:first] + body[i:])
    stray = [l for l in body[i:] if l.startswith("| `tally ")]
    if stray:
        raise SystemExit(f"readme_help: the CLI table is cut by a blank line before: {stray[0][:80]}")
    # The paragraph about shared flags: the text after the table.
    return rows, after


def cells(row):
    """A table row's cells (a pipe written \\| is part of a cell)."""
    return re.split(r"(?<!\\)\|", row)[1:-1]


def row_command(row, commands):
    """The command a row documents: the longest 'tally X [Y]' that is a command."""
    cell = cells(row)[0]
    words = re.findall(r"`tally ([a-z][\w-]*)(?: ([a-z][\w-]*))?", cell)
    if not words:
        return None
    a, b = words[0]
    if b and f"{a} {b}" in commands:
        return f"{a} {b}"
    return a


def main():
    tally, readme_path = sys.argv[1], sys.argv[2]
    readme = open(readme_path, encoding="utf-8").read()
    rows, after = table(readme)
    _, top = help_sections(run(tally, "--help"))
    commands = {}
    for c in top:
        options, subs = help_sections(run(tally, c, "--help"))
        if subs:
            for s in subs:
                commands[f"{c} {s}"] = help_sections(run(tally, c, s, "--help"))[0]
        else:
            commands[c] = options
    shared = set(FLAG.findall(after))
    documented = {}
    failures = []
    for row in rows:
        cmd = row_command(row, commands)
        if cmd is None or cmd not in commands:
            failures.append(f"README row for a command tally does not have: {row[:90]}")
            continue
        named = documented.setdefault(cmd, {"row": set(), "synopsis": set()})
        named["row"].update(FLAG.findall(row))
        named["synopsis"].update(FLAG.findall(cells(row)[0]))
    for cmd, options in sorted(commands.items()):
        if cmd not in documented:
            failures.append(f"`tally {cmd}` has no row in the README's CLI table")
            continue
        spellings = set().union(*options) if options else set()
        for names in options:
            if not names & (documented[cmd]["row"] | shared):
                failures.append(f"`tally {cmd}`: {'/'.join(sorted(names))} is in --help but not in the README")
        for flag in sorted(documented[cmd]["synopsis"] - spellings):
            if REWRITTEN.get(flag) not in spellings:
                failures.append(f"`tally {cmd}`: the README names {flag}, which --help does not list")
    every = set().union(*(set().union(*o) for o in commands.values() if o)) | {"-h", "--help"}
    every |= {k for k, v in REWRITTEN.items() if v in every}
    for flag in sorted(shared - every):
        failures.append(f"the README's shared flags name {flag}, which no command takes")
    for f in failures:
        print("FAIL", f)
    print(f"readme_help: {len(commands)} commands, {sum(len(o) for o in commands.values())} options, "
          f"{len(failures)} disagreements")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
