#!/usr/bin/env python3
"""Runs Debian's Prometheus with deploy/prometheus/ the way `pdspark launch` will: the config
and rules copied into a run directory, scrape targets written to targets/*.json next to them.
A fake exporter stands in for a decode worker and a router (counters that grow at fixed
rates). Passes when Prometheus has discovered both targets through file_sd and the recording
rules give the expected acceptance rate, acceptance length and output tokens/s.

usage: prometheus_smoke.py PROMETHEUS_BINARY DEPLOY_DIR WORK_DIR   (exit 77 = skipped)
"""
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

START = time.time()
# Per-second rates: accepted/draft = 0.5, 1 + accepted/drafts = 2.5, output = 40 tokens/s.
RATES = {
    'pdspark_spec_decode_accepted_tokens_total': 30.0,
    'pdspark_spec_decode_draft_tokens_total': 60.0,
    'pdspark_spec_decode_drafts_total': 20.0,
}
ROUTER_TOKENS_PER_S = 40.0


class Exporter(http.server.BaseHTTPRequestHandler):
    role = 'decode'

    def do_GET(self):
        t = time.time() - START
        if self.role == 'decode':
            lines = [f'{name}{{model="tiny",role="decode",worker="d0"}} {rate * t:.3f}'
                     for name, rate in RATES.items()]
            lines.append('pdspark_generation_tokens_total{model="tiny",role="decode",worker="d0"} '
                         f'{2 * ROUTER_TOKENS_PER_S * t:.3f}')  # must not count as output
        else:
            lines = ['pdspark_generation_tokens_total{model="tiny",role="router"} '
                     f'{ROUTER_TOKENS_PER_S * t:.3f}',
                     'pdspark_workers{model="tiny",role="decode",state="healthy"} 1']
        body = ('\n'.join(lines) + '\n').encode()
        self.send_response(200)
        self.send_header('Content-Type', 'text/plain; version=0.0.4')
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def serve(role):
    handler = type(role, (Exporter,), {'role': role})
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def query(port, expr):
    url = f'http://127.0.0.1:{port}/api/v1/query?' + urllib.parse.urlencode({'query': expr})
    with urllib.request.urlopen(url, timeout=5) as r:
        data = json.load(r)
    return [(s['metric'], float(s['value'][1])) for s in data['data']['result']]


def main():
    prometheus, deploy, work = sys.argv[1:4]
    if not shutil.which(prometheus):
        print('SKIP: prometheus not installed')
        return 77
    run = os.path.join(work, 'prometheus_smoke')
    shutil.rmtree(run, ignore_errors=True)
    os.makedirs(os.path.join(run, 'targets'))
    for f in ('prometheus.yml', 'rules.yml'):
        shutil.copy(os.path.join(deploy, 'prometheus', f), run)
    decode, router = serve('decode'), serve('router')
    targets = [
        {'targets': [f'127.0.0.1:{router.server_address[1]}'], 'labels': {'component': 'router'}},
        {'targets': [f'127.0.0.1:{decode.server_address[1]}'], 'labels': {'component': 'decode'}},
    ]
    with open(os.path.join(run, 'targets', 'pdspark.json'), 'w') as f:
        json.dump(targets, f)

    port = free_port()
    log = open(os.path.join(run, 'prometheus.log'), 'w')
    proc = subprocess.Popen([prometheus, '--config.file=' + os.path.join(run, 'prometheus.yml'),
                             '--storage.tsdb.path=' + os.path.join(run, 'data'),
                             f'--web.listen-address=127.0.0.1:{port}'],
                            stdout=log, stderr=subprocess.STDOUT)
    want = {'pdspark:spec_decode_acceptance_rate:rate1m': 0.5,
            'pdspark:spec_decode_acceptance_length:rate1m': 2.5,
            'pdspark:output_tokens:rate1m': ROUTER_TOKENS_PER_S,
            'count(up{component=~"router|decode"} == 1)': 2}
    got = {}
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            time.sleep(3)
            if proc.poll() is not None:
                print(f'FAIL: prometheus exited ({proc.returncode}); see {log.name}')
                return 1
            try:
                got = {e: query(port, e) for e in want}
            except OSError:
                continue  # not listening yet
            if all(len(v) == 1 and abs(v[0][1] - want[e]) <= 0.05 * want[e]
                   for e, v in got.items()):
                for e, v in got.items():
                    print(f'PASS {e} = {v[0][1]:.3f}')
                return 0
        print('FAIL: Prometheus did not reach the expected values in 120 s')
        for e in want:
            print(f'  {e}: want {want[e]}, got {got.get(e)}')
        return 1
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        decode.shutdown()
        router.shutdown()


if __name__ == '__main__':
    sys.exit(main())
