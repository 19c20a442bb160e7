"""The package installs as a user installs it: pip (Debian's python3-pip, with setuptools, no
network) from a copy of clients/python into a folder of its own, and imports from there."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

PKG = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


class Package(unittest.TestCase):
    def test_installs_with_pip_and_imports(self):
        with tempfile.TemporaryDirectory(prefix="rl-client-py-pkg-") as tmp:
            src = os.path.join(tmp, "src")
            shutil.copytree(PKG, src, ignore=shutil.ignore_patterns(
                "tests", "__pycache__", "build", "*.egg-info"))
            target = os.path.join(tmp, "site")
            r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index",
                                "--no-deps", "--no-build-isolation", "--target", target, src],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            r = subprocess.run(
                [sys.executable, "-c", "import ratelimitd as r; print(r.__file__, r.__version__, "
                 "sorted(r.__all__))"],
                capture_output=True, text=True, cwd=tmp, env=dict(os.environ, PYTHONPATH=target))
            self.assertEqual(r.returncode, 0, r.stderr)
            where, version, names = r.stdout.split(" ", 2)
            self.assertTrue(where.startswith(target), where)
            self.assertEqual(version, "0.1.0")
            self.assertIn("'Client'", names)
            self.assertIn("'WSGIMiddleware'", names)
            dist = [d for d in os.listdir(target) if d.endswith(".dist-info")]
            self.assertEqual(dist, ["ratelimitd_client-0.1.0.dist-info"])


if __name__ == "__main__":
    unittest.main()
