#!/usr/bin/env python3
"""A libvirt host that can go silent: forwards each connection on LISTEN (a unix socket) to
TARGET (libvirtd's) byte for byte. SIGSTOP it and the host behind it stops answering
mid-call, as a hung libvirtd, a frozen machine or a network that drops packets does;
SIGCONT and it answers again. Used by test_provision's silent-host test."""
import os
import socket
import sys
import threading


def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def main():
    listen_path, target_path = sys.argv[1], sys.argv[2]
    try:
        os.unlink(listen_path)
    except FileNotFoundError:
        pass
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(listen_path)
    server.listen(16)
    while True:
        client, _ = server.accept()
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        upstream.connect(target_path)
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=pump, args=(a, b), daemon=True).start()


main()
