#!/usr/bin/env python3
"""Which .c file of a folder names which other file's functions, and whether any of them
name each other, directly or around a loop (docs/DESIGN.md: each file calls only those
below it; a lower file reaches a higher one only through a function pointer it was given).

A function is a file's when it is defined there without `static`; another file names it
when it calls it or takes it as a value (`.open = channel_open`), not when a struct field
has the same name (`g->template_key`). Comments and strings are left out.

usage: layers.py DIR...   prints each folder's edges with -v; exits 1 on a loop."""
import os
import re
import sys

DEFINITION = re.compile(r'^(?!static\b)[a-z][a-z0-9_ *]*?\b([a-z_][a-z0-9_]*)\(', re.M)


def strip(src):
    """The code alone: comments, string and character literals blanked, in one pass so that
    a quote inside a comment or a character literal ('"') is not taken for a string."""
    token = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
    return token.sub(lambda m: ' ' if m.group(0)[0] == '/' else '""', src)


def edges(folder):
    files = sorted(f for f in os.listdir(folder) if f.endswith('.c'))
    texts = {f: strip(open(os.path.join(folder, f)).read()) for f in files}
    owner = {}
    for f in files:
        for m in DEFINITION.finditer(texts[f]):
            if m.group(1) != 'main':  # each program's own
                owner.setdefault(m.group(1), f)
    out = {f: set() for f in files}
    for f in files:
        for name, g in owner.items():
            if g != f and re.search(r'(?<![.>\w])' + name + r'\s*[(,;)}]', texts[f]):
                out[f].add(g)
    return out


def loops(graph):
    """Strongly connected components of more than one file (Tarjan)."""
    index, low, stack, on, found, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def main(argv):
    verbose = '-v' in argv
    status = 0
    for folder in [a for a in argv if a != '-v']:
        graph = edges(folder)
        if verbose:
            for f, to in graph.items():
                print(f'{folder}/{f} -> {" ".join(sorted(to)) or "-"}')
        for part in loops(graph):
            print(f'{folder}: files that call each other: {", ".join(part)}')
            status = 1
    return status


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
