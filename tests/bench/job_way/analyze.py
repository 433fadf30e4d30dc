#!/usr/bin/env python3
"""The figures of a job's way through hatcheryd, from tracer.c's records (job_way.sh).

usage: analyze.py BINARY WINDOW TRACE...

A *step* is what runs for one wake-up of the loop or of a worker (tracer.c). Within the
window the job took, each step is put down to what woke it: the tick (on_tick), the
reconciler's timer (on_reconcile) and its answers and the runner-release check (PERIODIC),
the admin socket (the driver's own polling), libvirt calling its error handler inside a
call (not a wake-up), or the job. Per step: the project's files it entered, its *crossings* (each pair of files where a
function of the one called a function of the other, counted once a step; functions defined
in headers are not traced) and
whether it went *back and forth* (A called B and B called A in the same step). Prints the
job's way in all, each of its steps, and the tick's widest step."""
import collections
import re
import struct
import subprocess
import sys

RECORD = struct.Struct('<QQqII')

# Functions that hand a queued call over on a thread of their own (a host's libvirt
# thread, host_queue.c) or on the loop: where they call a function of another file, a
# new step begins.
DISPATCHERS = {'host_thread', 'on_calls_done'}

# Steps that enter these are the daemon's periodic work, not the job's, whenever they come:
# the reconciler's lists and their answers, the check for a newer runner release.
PERIODIC = {'controller/reconcile.c', 'controller/runner_releases.c'}


def read(paths):
    for path in paths:
        with open(path, 'rb') as f:
            data = f.read()
        for off in range(0, len(data) - RECORD.size + 1, RECORD.size):
            yield (path,) + RECORD.unpack_from(data, off)


def symbolize(binary, addrs):
    """address -> (function, project file or None)"""
    addrs = sorted(addrs)
    out = subprocess.run(['addr2line', '-f', '-C', '-e', binary] + [hex(a) for a in addrs],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    where = {}
    for i, a in enumerate(addrs):
        fn, loc = out[2 * i], out[2 * i + 1]
        m = re.search(r'((?:controller|agent|include)/[^:]+):', loc)
        where[a] = (fn, m.group(1) if m else None)
    return where


def main():
    binary, window = sys.argv[1], sys.argv[2]
    start, end = (int(x) for x in open(window).read().split())
    steps = collections.OrderedDict()  # (trace, tid, step) -> [records]
    first_t = {}
    for path, fn, site, t_ns, tid, step in read(sys.argv[3:]):
        key = (path, tid, step)
        steps.setdefault(key, []).append((fn, site - 1 if site else 0, t_ns))
    addrs = {a for recs in steps.values() for fn, site, _ in recs for a in (fn, site) if a}
    where = symbolize(binary, addrs)
    # Cut the hosts' threads' steps where their queue hands a call over.
    cut = collections.OrderedDict()
    for key, recs in steps.items():
        part, n = [], 0
        for fn, site, t_ns in recs:
            caller_fn, caller_file = where.get(site, (None, None))
            if part and caller_fn in DISPATCHERS and where[fn][1] != caller_file:
                n += 1
                part = []
            if not part:
                cut[key + (n,)] = part
                first_t[key + (n,)] = t_ns
            part.append((fn, site))
    steps = {k: v for k, v in cut.items() if start <= first_t.get(k, 0) <= end}

    def kind(recs):
        root_fn, root_file = where[recs[0][0]]
        if root_fn == 'on_tick':
            return 'tick'
        if root_fn == 'on_reconcile':
            return 'reconcile'
        if root_file in ('controller/admin.c',):
            return 'admin'
        if root_fn == 'quiet_libvirt' or root_file is None:
            return 'other'  # libvirt's error callback inside a call, or code not ours
        files = {where[fn][1] for fn, _ in recs}
        if files & PERIODIC:
            return 'periodic'
        return 'job'

    figures = []
    for key, recs in sorted(steps.items(), key=lambda kv: first_t[kv[0]]):
        files = {where[recs[0][0]][1]} - {None}
        pairs = collections.Counter()
        for fn, site in recs:
            callee = where[fn][1]
            caller = where.get(site, (None, None))[1]
            if callee:
                files.add(callee)
            if callee and caller and callee != caller:
                pairs[(caller, callee)] += 1
        back = sorted({tuple(sorted(p)) for p in pairs if (p[1], p[0]) in pairs})
        # Leaves: files the step entered that called no other file in it (the log, the
        # secret wipe, the name tables): where a step works, not where it goes.
        callers = {a for a, _ in pairs} | {where[recs[0][0]][1]}
        figures.append({'kind': kind(recs), 'root': where[recs[0][0]][0], 'files': files,
                        'working': files & callers,
                        'crossings': len(pairs), 'back': back, 't': first_t[key]})

    job = [f for f in figures if f['kind'] == 'job']
    ticks = [f for f in figures if f['kind'] == 'tick']
    files = set().union(*(f['files'] for f in job)) if job else set()
    c_files = sorted(x for x in files if x.endswith('.c'))
    # A step that comes again alike (a heartbeat, a timer) is counted once: how many come
    # depends on how long the job runs, not on the way.
    shapes = {(f['root'], tuple(sorted(f['files'])), f['crossings']): f for f in job}
    print(f'job way: {len(job)} steps ({len(shapes)} unlike), {len(c_files)} .c files, '
          f'{sum(f["crossings"] for f in shapes.values())} crossings in its unlike steps, '
          f'widest step {max((len(f["files"]) for f in job), default=0)} files '
          f'({max((len(f["working"]) for f in job), default=0)} not counting leaves), '
          f'{sum(1 for f in job if f["back"])} steps back and forth')
    print(f'tick: {len(ticks)} steps, widest {max((len(f["files"]) for f in ticks), default=0)} files '
          f'({max((len(f["working"]) for f in ticks), default=0)} not counting leaves), '
          f'most crossings {max((f["crossings"] for f in ticks), default=0)}')
    print('files: ' + ' '.join(c_files))
    print('steps of the job and a tick (root function: files, crossings, back and forth):')
    by_root = collections.OrderedDict()
    for f in job + ticks[:1]:
        sig = (f['root'], tuple(sorted(f['files'])), f['crossings'], tuple(f['back']))
        by_root[sig] = by_root.get(sig, 0) + 1
    for (root, fs, crossings, back), n in by_root.items():
        print(f'  {n:3d} x {root}: {len(fs)} files ({" ".join(x.split("/")[-1] for x in fs)}), '
              f'{crossings} crossings' + (f', back and forth {back}' if back else ''))


main()
