"""Tests of the `tessera` command-line program (run by ctest: python3 test_cli.py <tessera>)."""
import os
import re
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

TESSERA = sys.argv[1] if len(sys.argv) > 1 else "tessera"
# hidden 128 and 2·ffn 128: whole 128-row FP8 blocks per expert in both layers (fp8_block)
SMALL = ["--experts", "4", "--hidden", "128", "--ffn", "64", "--tokens", "64"]


def run(*args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([TESSERA, *args], capture_output=True, text=True, env=e, timeout=600)


def table(stdout):
    """{recipe: [columns...]} of the demo's result table."""
    rows, inside = {}, False
    for line in stdout.splitlines():
        if line.startswith("recipe "):
            inside = True
            continue
        if inside and not line.strip():
            break
        if inside:
            cols = line.split()
            rows[cols[0]] = cols[1:]
    return rows


class BadOptions(unittest.TestCase):
    def refused(self, *args, must=(), env=None):
        with tempfile.TemporaryDirectory() as d:
            args = [a.replace("{tmp}", d) for a in args]
            r = run("demo", *args, env=env)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertEqual(r.stdout, "", "refused before any work")
            lines = r.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, r.stderr)
            msg = lines[0]
            self.assertTrue(msg.startswith("tessera demo: "), msg)
            # One plain sentence: no source paths, no check expressions, no C++ exception names.
            for bad in (".cpp", "check `", "std::", "[", "bad_alloc"):
                self.assertNotIn(bad, msg)
            for m in must:
                self.assertIn(m, msg)
            self.assertFalse(os.path.exists(os.path.join(d, "demo_loss.svg")))
            return msg

    def test_unknown_option_last(self):
        self.refused("--steps", "2", "--bogus", must=("unknown option '--bogus'",))

    def test_missing_value(self):
        self.refused("--steps", "2", "--out", must=("--out needs a value",))

    def test_not_a_number(self):
        self.refused("--steps", "x", must=("--steps", "positive integer"))
        self.refused("--tokens", "99999999999999999999999", must=("--tokens",))

    def test_absurd_size(self):
        self.refused("--tokens", "4000000000000", must=("--tokens 4000000000000", "host memory"))
        self.refused("--hidden", "9223372036854775807", must=("--hidden", "host memory"))

    def test_odd_width_fp4(self):
        for recipe in ("nvfp4", "custom"):
            self.refused("--hidden", "7", "--ffn", "5", "--recipes", recipe,
                         must=(f"--recipes {recipe}", "--hidden and --ffn must be even"))

    def test_out_checked_first(self):
        with tempfile.NamedTemporaryFile() as f:
            self.refused("--out", f.name, must=("--out",))
        self.refused("--out", "/proc/no/such", must=("--out",))

    def test_unknown_recipe_and_device(self):
        self.refused("--recipes", "fp32,foo", must=("--recipes", "'foo'", "custom"))
        self.refused("--device", "gpu", must=("--device",))
        self.refused("--topk", "9", "--experts", "8", must=("--topk 9",))


    def test_cuda_without_a_device(self):
        # With no device visible the message said "use --device cpu or cuda:0..cuda:-1".
        msg = self.refused("--device", "cuda", env={"CUDA_VISIBLE_DEVICES": ""},
                           must=("--device cuda", "use --device cpu"))
        self.assertNotIn("cuda:-1", msg)
        self.assertTrue("no CUDA device is present" in msg or "without CUDA" in msg, msg)


class Info(unittest.TestCase):
    def test_unknown_option_is_named(self):
        # `tessera info --json` printed the usage without saying which word was refused.
        r = run("info", "--json")
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stdout, "")
        self.assertIn("tessera info: unknown option '--json'", r.stderr)
        self.assertIn("usage: tessera info", r.stderr)

    def test_help_is_usage_on_stdout(self):
        r = run("info", "--help")
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        self.assertTrue(r.stdout.startswith("usage: tessera info"), r.stdout)


class Version(unittest.TestCase):
    def test_version_is_the_version_file(self):
        root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
        version = open(os.path.join(root, "VERSION")).read().strip()
        for flag in ("--version", "-V"):
            r = run(flag)
            self.assertEqual((r.returncode, r.stdout, r.stderr), (0, f"tessera {version}\n", ""))


class Demo(unittest.TestCase):
    def demo(self, *args, env=None):
        with tempfile.TemporaryDirectory() as d:
            r = run("demo", *SMALL, *args, "--out", d, env=env)
            self.assertEqual(r.returncode, 0, r.stderr)
            svg = open(os.path.join(d, "demo_loss.svg")).read()
            return r, table(r.stdout), svg

    def test_fp32_is_the_reference_in_any_order(self):
        _, a, _ = self.demo("--steps", "3", "--recipes", "mxfp8,fp32,bf16")
        _, b, _ = self.demo("--steps", "3", "--recipes", "fp32,mxfp8,bf16")
        self.assertEqual(list(a), ["mxfp8", "fp32", "bf16"])
        for t in (a, b):
            self.assertEqual(t["fp32"][1:3], ["+0.00%", "exact"])
            self.assertNotEqual(t["mxfp8"][2], "exact")
            self.assertLess(float(t["mxfp8"][2]), float(t["bf16"][2]))  # MXFP8 SQNR < BF16's
        self.assertEqual(a["mxfp8"], b["mxfp8"][:4] + a["mxfp8"][4:])  # same numbers, any order

    def test_fp32_added_when_not_listed(self):
        _, t, _ = self.demo("--steps", "2", "--recipes", "fp8_current")
        self.assertEqual(list(t), ["fp32", "fp8_current"])
        self.assertEqual(t["fp32"][1:3], ["+0.00%", "exact"])

    def test_bounded_reference(self):
        # The budget the CUDA demo applies to its host FP32 reference, forced on the CPU.
        r, t, _ = self.demo("--steps", "6", "--recipes", "bf16",
                            env={"TESSERA_DEMO_REFERENCE_FLOPS": "4e7"})
        self.assertRegex(r.stdout, r"vs FP32: (mean )?loss of steps? \d")
        self.assertRegex(r.stdout, r"grad SQNR: gradients at the initial weights on the first \d+ of")
        self.assertNotEqual(t["bf16"][1], "-")
        r, t, _ = self.demo("--steps", "2", "--recipes", "bf16",
                            env={"TESSERA_DEMO_REFERENCE_FLOPS": "8e5"})
        self.assertIn("vs FP32: not measured", r.stdout)
        self.assertEqual(t["bf16"][1], "-")
        self.assertGreater(float(t["bf16"][2]), 30)  # BF16 gradients still compared

    def test_plot(self):
        recipes = "fp32,bf16,fp8_current,fp8_delayed,fp8_rowwise,fp8_block,mxfp8,nvfp4,custom"
        _, t, svg = self.demo("--steps", "2", "--recipes", recipes)
        root = ET.fromstring(svg)
        ns = "{http://www.w3.org/2000/svg}"
        lines = root.findall(f"{ns}polyline")
        self.assertEqual(len(lines), 2 * 9)  # loss panel + relative-to-FP32 panel
        styles = {(p.get("stroke"), p.get("stroke-dasharray")) for p in lines[:9]}
        self.assertEqual(len(styles), 9)
        self.assertEqual(len({p.get("stroke") for p in lines[:9]}), 9)
        texts = [e.text for e in root.iter(f"{ns}text")]
        for name in recipes.split(","):
            self.assertIn(name, texts)
        # x ticks: integers, no repeats within a panel ("1 2", not "0 0 0 1 1 1").
        xt = [e.text for e in root.iter(f"{ns}text") if e.get("text-anchor") == "middle"
              and e.get("font-size") == "12"]
        self.assertEqual(xt, ["1", "2", "1", "2"])
        # y ticks of the log panel: at least 3 distinct labels.
        yt = [e.text for e in root.iter(f"{ns}text") if e.get("text-anchor") == "end"]
        loss_ticks = [v for v in yt if not v.endswith("%")]
        self.assertGreaterEqual(len(set(loss_ticks)), 3)
        self.assertEqual(len(set(loss_ticks)), len(loss_ticks))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
