"""A real ratelimitd for the tests: build/ratelimitd (RL_BUILD names the build directory) on a
free loopback port, with a configuration of the test's own, in a temporary directory."""
import json
import os
import subprocess
import tempfile
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BUILD = os.path.join(ROOT, os.environ.get("RL_BUILD", "build"))


class Daemon:
    def __init__(self, config, *args):
        self.tmp = tempfile.TemporaryDirectory(prefix="rl-client-py-")
        path = os.path.join(self.tmp.name, "config.json")
        with open(path, "w") as f:
            json.dump(config, f)
        self.err = open(os.path.join(self.tmp.name, "stderr.log"), "w")
        self.proc = subprocess.Popen(
            [os.path.join(BUILD, "ratelimitd"), "--config", path, "--port", "0", *args],
            stdout=subprocess.PIPE, stderr=self.err, cwd=self.tmp.name, text=True)
        first = self.proc.stdout.readline()
        if not first.startswith("listening on "):
            self.proc.kill()
            raise RuntimeError("ratelimitd did not start: %r" % first)
        self.addr = first.split()[-1]
        self.url = "http://" + self.addr

    def metric(self, name):
        """The value of a series of /metrics: a family without labels, or with them as shown."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        raise AssertionError("no %s in /metrics" % name)

    def stop(self):
        """Stops the daemon, which must exit 0, and removes its folder."""
        self.proc.terminate()
        rc = self.proc.wait(20)
        self.proc.stdout.close()
        self.err.close()
        self.tmp.cleanup()
        if rc != 0:
            raise AssertionError("ratelimitd exited %d" % rc)
