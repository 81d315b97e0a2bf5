"""Run by test_harness_partial_downloads.py as a separate process; not a test module.

    python range_server.py FOLDER PORT_FILE LOG_FILE [--no-range] [--stall NAME BYTES]

Serves the files of FOLDER over HTTP on 127.0.0.1 (a free port, written to PORT_FILE once it
listens) and appends one line per request to LOG_FILE: the path and its Range header ("-": none).
A request ``Range: bytes=N-`` gets the bytes from N on (206, ``Content-Range``; 416 from the end of
the file on) unless ``--no-range`` (then the whole file, 200, as servers without range support
answer). ``--stall NAME BYTES``: the first request of NAME gets BYTES bytes of it, then nothing
(the connection stays open), so that the test kills its client mid-download.
"""

import argparse
import http.server
import os
import re
import threading
import time
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("folder", type=Path)
parser.add_argument("port_file", type=Path)
parser.add_argument("log_file", type=Path)
parser.add_argument("--no-range", action="store_true")
parser.add_argument("--stall", nargs=2)
args = parser.parse_args()
stall = {"name": args.stall[0], "bytes": int(args.stall[1])} if args.stall else None
lock = threading.Lock()


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *_):
        pass

    def do_GET(self):
        name = self.path.lstrip("/")
        asked = self.headers.get("Range")
        with lock, open(args.log_file, "a") as log:
            log.write(f"{self.path} {asked or '-'}\n")
        path = args.folder / name
        if "/" in name or not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        start = 0
        found = re.fullmatch(r"bytes=(\d+)-", asked or "")
        if found and not args.no_range:
            start = int(found[1])
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        with lock:
            stalls = stall is not None and stall["name"] == name
            if stalls:
                globals()["stall"] = None  # only the first request of that file
        if stalls:
            self.wfile.write(data[start : start + int(args.stall[1])])
            self.wfile.flush()
            time.sleep(600)
            return
        self.wfile.write(data[start:])


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
temporary = args.port_file.with_name(args.port_file.name + ".tmp")
temporary.write_text(str(server.server_address[1]))
os.replace(temporary, args.port_file)
server.serve_forever()
