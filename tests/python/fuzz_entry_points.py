"""A bounded random-call fuzzer of tessera's Python entry points: tessera.quantize (and the
QuantizedTensor it returns), encode / decode, grouped_gemm (dense and quantized operands),
GroupedTensor (construct, quantize, quantize_contiguous, member, dequantize) and tessera.nn's layers
(construct, forward, backward); and the argument contracts (fuzz_contract_steps.py: outputs aliasing
inputs, flags and names out of range with bounded echoes, read-only inputs, codes of other dtypes).
It draws extents up to 2^63 - 1 (array extents up to 2^59 with one of them 0, as NumPy allocates the
others; larger ones in GroupedTensor's metadata-only shapes), input dtypes tessera takes and
refuses, recipes, modes and options (valid, unknown and of the wrong type), contents with NaN,
+-inf, -0, subnormals and values near FLT_MAX, and non-contiguous views.

A finding is any of:
  - an exception that is not a tessera.Error (the package's contract: every error it raises is
    one), or a call that takes more than 2 s (work must scale with elements, not extents);
  - quantize: the cpu and reference backends disagree on a byte of data, scales or amax (every
    stored NaN included: they are canonical); a finite input dequantizes to a non-finite value;
    a NaN / +-inf input element does not dequantize to NaN in every copy (docs/numerics.md,
    "Non-finite input"; delayed scaling: +-inf saturates, NaN stays NaN);
  - encode / decode: decode(encode(x)) changes the shape, or is not NaN exactly where x is
    (formats with a NaN), or is not finite where x is (saturating FP8 / E2M1 formats);
  - grouped_gemm on valid dense float32 problems: differs from a float64 NumPy loop by more than
    2^-16 of sum |a||b| per output; on quantized operands of finite inputs: a non-finite output;
  - GroupedTensor: a member dequantizes differently from tessera.quantize of that member alone;
  - tessera.nn (GroupedLinear, GroupedMLP: construct, forward, backward): the fp32
    GroupedLinear's y differs from a float64 NumPy loop by more than 2^-16 of sum |x||w|; a row
    past the groups gets a non-zero y or dx (whatever it holds: NaN, inf, huge); with per-row
    activation scales (ROW_SCALED) a moderate x row gets a non-finite y row; with every scaling
    unit inside one group (GROUP_SCALED) a group of moderate x rows gets a non-finite y row, or a
    group of moderate x and dy rows a non-finite dW;
  - the argument contracts of fuzz_contract_steps.py (its docstring lists them).
A crash or hang ends the process with no summary line (the caller sees it).

Usage: python3 tests/python/fuzz_entry_points.py [calls (default 20000)] [seed (default 1)];
prints the counts and exits 1 on a finding. tests/python/test_hardening.py runs it with
TESSERA_PY_FUZZ_CALLS calls (default 3000); tools/fuzz/python_sanitized.sh runs it on an
extension built under ASan + UBSan (the summary line then says "under ASan")."""
import math
import random
import resource
import sys
import time

import ml_dtypes
import numpy as np

import tessera
import tessera.nn
from fuzz_contract_steps import REFUSED, ContractSteps, Finding

RECIPES = ["fp8_delayed", "fp8_current", "fp8_current:e4m3", "fp8_current:e5m2",
           "fp8_current:hybrid", "fp8_rowwise", "fp8_block", "mxfp8", "nvfp4", "bf16", "fp32"]
MODES = ["tensor", "rowwise", "block1x128", "block128x128", "mxfp8", "mxfp8_32x32", "nvfp4",
         "nvfp4_16x16"]
BOGUS_NAMES = ["", "none", "bogus", "fp8", "mxfp8:e2m1", "nvfp4:e4m3", ":", "fp8_block:"]
FORMATS = ["e4m3", "e5m2", "e2m1", "e8m0", "bfloat16", "float16", "float32", "int8", ""]
EXTENTS = [0, 1, 2, 3, 5, 15, 16, 17, 31, 32, 33, 64, 127, 128, 129]
HUGE = [2**31 - 1, 2**31, 2**32 + 1, 2**40, 2**59]  # x 8-byte items: NumPy takes it
META_HUGE = HUGE + [2**60, 2**62, 2**63 - 1]
MAX_ELEMS = 4096      # arrays with elements stay this small
# Recipes whose activations are scaled per row or finer (a row's scales see only that row) and
# whose every scaling unit stays in one group (the wgrad's padded layout): docs/torch_training.md.
ROW_SCALED = {"fp32", "bf16", "fp8_rowwise", "fp8_block", "mxfp8"}
# Recipes whose every scaling unit of the step stays inside one group member (docs/numerics.md,
# "Scaling units per group member"): per-expert amax of fp8_current, per-expert scale and amax
# history of fp8_delayed, per-(expert, column) scales of fp8_rowwise, NVFP4's per-expert global
# amax, blocks the padded layout keeps apart.
GROUP_SCALED = {"fp32", "bf16", "fp8_rowwise", "fp8_current", "fp8_delayed", "fp8_block",
                "mxfp8", "nvfp4"}


def NN_FACTORY(module_type, tensor_type, name):
    """A custom recipe of tessera.nn layers: MXFP8 roles with E5M2 gradients."""
    return {"mode": "mxfp8", "element": "e5m2" if tensor_type == "grad_output" else "e4m3"}
SLOW_CALL_S = 2.0


def numpy_can_hold(shape):
    """NumPy refuses a shape whose non-zero extents multiply past 2^63 bytes, even if empty."""
    return math.prod(e for e in shape if e) * 8 < 2**63


class Fuzzer(ContractSteps):
    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.np_rng = np.random.default_rng(seed)
        self.calls = 0
        self.ok = 0
        self.errors = {}
        self.findings = []
        self.slowest = (0.0, "")
        self.checks = dict.fromkeys(("cpu==reference", "finite->finite", "non-finite->NaN",
                                     "codec round trip", "gemm==float64", "grouped==alone",
                                     "nn==float64", "refused", "aliased out refused",
                                     "read-only==writable", "decode dtype rule",
                                     "nn rows past the groups", "nn finite groups, non-finite tail",
                                     "nn row isolation", "nn dx rows past the groups",
                                     "nn group isolation", "nn group y isolation"), 0)

    # ---- draws ------------------------------------------------------------------------------
    def chance(self, p):
        return self.rng.random() < p

    def extent(self, meta=False):
        if self.chance(0.1):
            return self.rng.choice(META_HUGE if meta else HUGE)
        if self.chance(0.5):
            return self.rng.choice(EXTENTS)
        return self.rng.randrange(0, 300)

    def shape2(self):
        r, c = self.extent(), self.extent()
        if r * c > MAX_ELEMS:  # NumPy allocates non-empty arrays: one extent becomes 0
            r, c = (r, 0) if self.chance(0.5) else (0, c)
        return r, c

    def values(self, shape, specials=0.3, magnitude=True):
        """float32 values: Gaussian times 2^k, sometimes with specials sprinkled in."""
        n = math.prod(shape)
        v = self.np_rng.standard_normal(n).astype(np.float32)
        if magnitude:
            v *= np.float32(2.0) ** self.np_rng.integers(-30, 30, n).astype(np.float32)
        if n and self.chance(specials):
            pool = np.array([np.nan, np.inf, -np.inf, -0.0, 1e-45, -1e-40, 3.4e38, -3.4e38,
                             65504.0, 448.0, -57344.0, 6.0], np.float32)
            k = self.rng.randrange(1, min(n, 8) + 1)
            v[self.np_rng.integers(0, n, k)] = self.np_rng.choice(pool, k)
        return v.reshape(shape)

    def as_dtype(self, v):
        """v cast to a random input dtype (mostly the three tessera takes)."""
        d = self.rng.choices(["float32", "float16", "bfloat16", "float64", "int32", "uint8",
                              "bool", "complex64"], [50, 15, 15, 5, 4, 4, 3, 4])[0]
        with np.errstate(all="ignore"):
            if d == "bfloat16":
                return v.astype(ml_dtypes.bfloat16)
            if d in ("int32", "uint8"):
                return np.nan_to_num(v).clip(-100, 100).astype(d)
            return v.astype(d)

    def maybe_strided(self, x):
        if x.ndim == 2 and x.shape[1] >= 2 and self.chance(0.1):
            return x[:, ::2]
        return x

    def options(self):
        o = {}
        pick = {
            "element": ["e4m3", "e5m2", "e2m1", "bogus", 3],
            "layout": ["compact", "swizzled", "tiled"],
            "power_of_two_scales": [True, False, "yes"],
            "e8m0_rounding": ["round_up", "floor", "up"],
            "random_hadamard": [True, False],
            "stochastic_rounding": [True, False],
            "seed": [0, 1, 2**64 - 1, 2**64, -1, "s"],
            "offset": [0, 7, 2**63, -5],
            "amax_epsilon": [0.0, 1e-3, 0.5, -1.0, math.nan, math.inf, "x"],
            "role": ["input", "weight", "grad_output", "bogus"],
            "backend": ["cpu", "reference", "cuda"],
            "elemnt": ["e4m3"],
        }
        for k, vals in pick.items():
            p = 0.01 if k == "elemnt" else (0.25 if k != "backend" else 0.1)
            if self.chance(p):
                # Mostly valid values: the first entries of each list.
                o[k] = vals[self.rng.randrange(len(vals))] if self.chance(0.3) else \
                    vals[self.rng.randrange(min(2, len(vals)))]
        return o

    # ---- the call wrapper --------------------------------------------------------------------
    def call(self, what, fn, *args, **kwargs):
        """Runs one entry-point call: its result, or REFUSED after a tessera.Error."""
        self.calls += 1
        t0 = time.perf_counter()
        try:
            out = fn(*args, **kwargs)
            self.ok += 1
            return out
        except tessera.Error as e:
            name = type(e).__name__
            self.errors[name] = self.errors.get(name, 0) + 1
            return REFUSED
        except Exception as e:  # noqa: BLE001 - the contract under test
            raise Finding(f"{what}: {type(e).__name__} (not a tessera.Error): {e}") from e
        finally:
            dt = time.perf_counter() - t0
            if dt > self.slowest[0]:
                self.slowest = (dt, what)
            if dt > SLOW_CALL_S:
                self.findings.append(f"{what}: {dt:.1f} s for one call")

    # ---- quantize ----------------------------------------------------------------------------
    def fuzz_quantize(self):
        name = self.rng.choice(RECIPES * 3 + MODES * 3 + BOGUS_NAMES)
        if self.chance(0.05):
            shape = self.rng.choice([(), (7,), (2, 3, 4), (0, 5, 2)])
        else:
            shape = self.shape2()
            if "rowwise" in name:  # one FP32 scale per (empty) row / column: outputs of GiBs
                shape = tuple(min(e, 2**16) for e in shape)
        base = self.values(shape)
        x = self.maybe_strided(self.as_dtype(base))
        opts = self.options()
        rowwise, columnwise = self.chance(0.8), self.chance(0.5)
        what = f"quantize({x.dtype}{x.shape}, {name!r}, rowwise={rowwise}, " \
               f"columnwise={columnwise}, {opts})"
        q = self.call(what, tessera.quantize, x, name, rowwise, columnwise, **opts)
        if q is REFUSED:
            return
        if tuple(q.shape) != tuple(x.shape):
            raise Finding(f"{what}: shape {q.shape}")
        # The input as tessera reads it (float32 of the array's values).
        xf = np.asarray(x, np.float32) if x.dtype != ml_dtypes.bfloat16 else x.astype(np.float32)
        compare = xf.size <= 256 or (xf.size <= 2048 and self.chance(0.3))
        if xf.size and compare and opts.get("backend", "cpu") == "cpu":
            ref = self.call(what + " [reference]", tessera.quantize, x, name, rowwise, columnwise,
                            **dict(opts, backend="reference"))
            if ref is REFUSED:
                raise Finding(f"{what}: the reference refuses what the cpu backend took")
            self.checks["cpu==reference"] += 1
            for field in ("data", "scale_inv", "columnwise_data", "columnwise_scale_inv", "amax",
                          "columnwise_amax"):
                a, b = getattr(q, field), getattr(ref, field)
                if (a is None) != (b is None) or (a is not None and (
                        a.shape != b.shape or a.tobytes() != b.tobytes())):
                    raise Finding(f"{what}: cpu and reference differ in {field}")
        copies = [cw for cw, has in ((False, q.rowwise), (True, q.columnwise)) if has]
        delayed = name.startswith("fp8_delayed")
        for cw in copies:
            y = self.call(what + f" .dequantize({cw})", q.dequantize, cw)
            if y is REFUSED:
                raise Finding(f"{what}: dequantize({cw}) of a quantized tensor refused")
            if y.shape != xf.shape:
                raise Finding(f"{what}: dequantize({cw}) shape {y.shape}")
            finite = np.isfinite(xf)
            hadamard = opts.get("random_hadamard") is True or opts.get("role") == "grad_output"
            # Values within 1/16 of FLT_MAX may round up to 2^128 in their format (x * 2^-E rounds
            # to the next power of two): their dequantized value overflows. The Hadamard
            # transform may overflow smaller values (then the copy is NaN).
            small = np.all(np.abs(xf[finite]) < (2.0**120 if hadamard else 2.0**127))
            self.checks["finite->finite"] += finite.all() and small
            if finite.all() and small and not np.isfinite(y).all():
                raise Finding(f"{what}: dequantize({cw}) of finite input has non-finite values "
                              f"at {np.argwhere(~np.isfinite(y))[:3].tolist()}")
            if q.mode != "none" and not finite.all():
                bad = ~finite if not delayed else np.isnan(xf)
                self.checks["non-finite->NaN"] += 1
                if not np.isnan(y[bad]).all():
                    at = np.argwhere(bad & ~np.isnan(y))[:3].tolist()
                    raise Finding(f"{what}: dequantize({cw}) has a non-NaN value where the input "
                                  f"is not finite, at {at}")

    # ---- encode / decode ---------------------------------------------------------------------
    def fuzz_codec(self):
        fmt = self.rng.choice(FORMATS)
        shape = self.shape2() if self.chance(0.8) else self.rng.choice([(), (9,), (2, 3, 5)])
        x = self.maybe_strided(self.as_dtype(self.values(shape)))
        what = f"encode({x.dtype}{x.shape}, {fmt!r})"
        codes = self.call(what, tessera.encode, x, fmt)
        if codes is REFUSED:
            return
        last = x.shape[-1] if x.ndim else -1
        back = self.call(what + " + decode", tessera.decode, codes, fmt,
                         last if fmt == "e2m1" else -1)
        if back is REFUSED:
            raise Finding(f"{what}: decode of encode's own codes refused")
        if back.shape != x.shape:
            raise Finding(f"{what}: decode(encode(x)) has shape {back.shape}")
        xf = x.astype(np.float32)
        self.checks["codec round trip"] += 1
        if fmt in ("e4m3", "e5m2", "bfloat16", "float16") and not np.array_equal(
                np.isnan(back), np.isnan(xf)):
            raise Finding(f"{what}: NaN positions change in decode(encode(x))")
        if fmt in ("e4m3", "e5m2", "e2m1") and not np.isfinite(back[np.isfinite(xf)]).all():
            raise Finding(f"{what}: a finite value decodes non-finite (saturating format)")
        if self.chance(0.2):  # decode of random codes, with a random last_dim
            codes = self.np_rng.integers(0, 256, self.shape2(), dtype=np.uint8)
            self.call(f"decode(random {codes.shape}, {fmt!r})", tessera.decode, codes, fmt,
                      self.rng.choice([-1, 0, 1, 7, 2**40, -3]))

    # ---- grouped GEMM ------------------------------------------------------------------------
    def offsets(self, total, groups):
        """G+1 start offsets over `total` rows, mostly valid."""
        cuts = sorted(self.rng.randrange(0, total + 1) for _ in range(max(groups - 1, 0)))
        offs = [0] + cuts + [total]
        if self.chance(0.05):
            offs[self.rng.randrange(len(offs))] = self.rng.choice([-1, total + 1, 2**40])
        small = all(-2**31 <= v < 2**31 for v in offs)
        return np.array(offs, np.int32 if small and self.chance(0.3) else np.int64)

    def fuzz_gemm(self):
        kind = self.rng.choice(["m_grouped"] * 4 + ["k_grouped"] * 2 + ["batched"] * 2 + ["x"])
        g = self.rng.choice([1, 1, 2, 3, 4])
        t, m, n, k = (self.rng.randrange(0, 24) for _ in range(4))
        dt = self.rng.choices(["float32", "float16", "bfloat16", "float64"], [60, 15, 20, 5])[0]
        mutate = self.chance(0.15)
        tb = self.chance(0.7) if kind != "k_grouped" else False
        ta = self.chance(0.5) if kind == "batched" else kind == "k_grouped"
        if kind == "k_grouped":
            sa, sb = (t, m), (t, n)
        elif kind == "batched":
            sa, sb = ((g, k, m) if ta else (g, m, k)), ((g, n, k) if tb else (g, k, n))
        else:
            sa, sb = (t, k), ((g, n, k) if tb else (g, k, n))
        if mutate:  # one extent changed, possibly huge (then the array is empty)
            which = self.rng.randrange(2)
            s = list((sa, sb)[which])
            i = self.rng.randrange(len(s))
            s[i] = self.extent()
            if math.prod(s) > MAX_ELEMS:
                s[self.rng.randrange(len(s))] = 0
            if not numpy_can_hold(s):
                s[i] = 0
            sa, sb = (tuple(s), sb) if which == 0 else (sa, tuple(s))
        cast = (lambda v: v.astype(ml_dtypes.bfloat16)) if dt == "bfloat16" else \
            (lambda v: v.astype(dt))
        a32 = self.values(sa, specials=0.05, magnitude=False)
        b32 = self.values(sb, specials=0.05, magnitude=False)
        with np.errstate(all="ignore"):
            a, b = cast(a32), cast(b32)
        a32, b32 = a.astype(np.float32), b.astype(np.float32)  # the values the GEMM gets
        offs = None if kind == "batched" else self.offsets(sa[0] if sa else 0, g)
        kw = {"kind": kind, "transpose_a": ta, "transpose_b": tb}
        if self.chance(0.2):
            kw["alpha"] = self.rng.choice([0.5, -2.0, math.nan])
        if self.chance(0.2):
            kw["group_alpha"] = np.tanh(self.values((g,), specials=0.0, magnitude=False))
        if self.chance(0.15) and kind != "k_grouped":
            kw["bias"] = cast(self.values((g, n), specials=0.0, magnitude=False))
        if self.chance(0.1):
            kw["out_dtype"] = self.rng.choice(["float32", "bfloat16", "float16", "int8"])
        if self.chance(0.05):
            kw["offsets_format"] = self.rng.choice(["end", "ends"])
        if self.chance(0.05):
            kw["max_total_rows"] = self.rng.choice([-1, 0, 5, 2**40])
        quantized = self.chance(0.15) and kind != "batched"
        if quantized:
            recipe = self.rng.choice(["fp8_current", "fp8_rowwise", "fp8_block", "mxfp8", "nvfp4",
                                      "fp8_delayed"])
            b2 = b.reshape(b.shape[0] * b.shape[1], b.shape[2]) if b.ndim == 3 else b
            if recipe == "fp8_rowwise" and max(a.shape + b2.shape) > 2**16:
                recipe = "fp8_current"  # one FP32 scale per (empty) row / column: GiBs
            qa = self.call(f"quantize A {a.shape} {recipe}", tessera.quantize, a, recipe, True,
                           True)
            qb = self.call(f"quantize B {b2.shape} {recipe}", tessera.quantize, b2, recipe, True,
                           True, role="weight")
            if qa is REFUSED or qb is REFUSED:
                return
            a, b = qa, qb
            kw["num_groups"] = g
        if 2**26 < self.out_elems(kind, sa, sb, g, ta, tb) < 2**42:
            return  # a valid problem would allocate and write GiBs (more fails to allocate)
        what = f"grouped_gemm({kind}, a {getattr(a, 'shape', None)} {dt}, b " \
               f"{getattr(b, 'shape', None)}, offsets {None if offs is None else offs.tolist()}, " \
               f"{ {k: v for k, v in kw.items() if k not in ('bias', 'group_alpha')} }, " \
               f"bias {'bias' in kw}, group_alpha {'group_alpha' in kw}, quantized {quantized})"
        out = self.call(what, tessera.grouped_gemm, a, b, offs, **kw)
        if out is REFUSED:
            return
        out = np.asarray(out, np.float32)
        # Inputs far from overflow, even of a float16 output: |a|, |b| <= 8, K < 24, |alpha| <= 2
        # (sums of products of values near FLT_MAX, or past 65504 in float16, may overflow).
        finite_in = all(np.isfinite(v).all() and (v.size == 0 or np.abs(v).max() <= 8.0)
                        for v in (a32, b32)) and math.isfinite(kw.get("alpha", 1.0))
        if quantized and finite_in and not np.isfinite(out).all() and kind == "m_grouped":
            live = np.zeros(out.shape[0], bool)
            live[int(offs[0]):int(offs[-1])] = True
            if not np.isfinite(out[live]).all():
                raise Finding(f"{what}: finite quantized inputs give a non-finite output")
        if (not quantized and not mutate and dt == "float32" and kind == "m_grouped"
                and offs.dtype == np.int64 and kw.get("offsets_format", "start") == "start"
                and kw.get("max_total_rows", -1) in (-1, t) and finite_in
                and kw.get("out_dtype", "float32") == "float32"):
            self.check_m_grouped(what, a32, b32, offs, tb, kw, out)

    @staticmethod
    def out_elems(kind, sa, sb, g, ta, tb):
        """Elements of the output tessera.grouped_gemm allocates (as its wrapper shapes it)."""
        def at(s, i):
            return s[i] if -len(s) <= i < len(s) else 1
        n = at(sb, -2 if tb else -1) if len(sb) == 3 else at(sb, -1)
        if kind == "k_grouped":
            return g * at(sa, -1) * at(sb, -1)
        if kind == "batched":
            return g * at(sa, 2 if ta else 1) * n
        return at(sa, 0) * n

    def check_m_grouped(self, what, a, b, offs, tb, kw, out):
        """out against a float64 loop: D_g = alpha * ga[g] * A_g op(B_g) + bias_g."""
        self.checks["gemm==float64"] += 1
        want = np.zeros(out.shape, np.float64)
        bound = np.zeros(out.shape, np.float64)
        alpha = kw.get("alpha", 1.0)
        for gi in range(len(offs) - 1):
            lo, hi = int(offs[gi]), int(offs[gi + 1])
            bg = (b[gi].T if tb else b[gi]).astype(np.float64)  # (K, N)
            s = alpha * (float(kw["group_alpha"][gi]) if "group_alpha" in kw else 1.0)
            want[lo:hi] = s * (a[lo:hi].astype(np.float64) @ bg)
            bound[lo:hi] = abs(s) * (np.abs(a[lo:hi]).astype(np.float64) @ np.abs(bg))
            if "bias" in kw:
                want[lo:hi] += kw["bias"][gi].astype(np.float64)
                bound[lo:hi] += np.abs(kw["bias"][gi].astype(np.float64))
        err = np.abs(out - want)
        err[bound > 2.0**120] = 0  # float32 sums may overflow there, float64 ones not
        if not np.all(err <= 2.0**-16 * bound + 1e-30):
            i = np.unravel_index(np.argmax(err - 2.0**-16 * bound), err.shape)
            raise Finding(f"{what}: output {out[i]} vs float64 {want[i]} at {i}")

    # ---- GroupedTensor -----------------------------------------------------------------------
    def fuzz_grouped(self):
        recipe = self.rng.choice(["none"] * 3 + RECIPES + MODES + ["bogus"])
        n = self.rng.randrange(0, 5)
        cols = self.rng.choice(EXTENTS[1:] + [self.extent(meta=True)])
        shapes = []
        for _ in range(n):
            r = self.extent(meta=True)
            c = cols if self.chance(0.8) else self.extent(meta=True)
            if "rowwise" in recipe:  # one FP32 scale per (empty) row / column
                r, c = min(r, 2**16), min(c, 2**16)
            if MAX_ELEMS < r * c < 2**63:  # storage would be allocated: keep it small
                r = 0 if self.chance(0.5) else 1
                c = c if r * c <= MAX_ELEMS else 0
            shapes.append((r, c))
        kw = {"recipe": recipe}
        flags = {}
        for f in ("swizzled", "e8m0_floor", "random_hadamard", "stochastic_rounding", "delayed"):
            if self.chance(0.05):
                flags[f] = True
        kw.update(flags)
        if self.chance(0.1):
            kw["dtype"] = self.rng.choice(["float16", "bfloat16", "int8"])
        if self.chance(0.3):
            kw["columnwise"] = True
        if self.chance(0.05):
            kw["capacity_rows"] = self.rng.choice([0, 3, 2**40, -5])
        what = f"GroupedTensor({shapes}, {kw})"
        gt = self.call(what, tessera.GroupedTensor, shapes, **kw)
        if gt is REFUSED:
            return
        live = [s for s in shapes if s[0] * s[1] <= MAX_ELEMS and numpy_can_hold(s)]
        if len(live) != len(shapes) or sum(r * c for r, c in shapes) > MAX_ELEMS:
            self.call(what + " .member(-1)", gt.member, self.rng.choice([-1, n, 2**40]))
            return
        xs = [self.values(s, specials=0.1) for s in shapes]
        if self.chance(0.05) and xs:  # a wrong member shape or dtype
            xs[0] = self.rng.choice([np.zeros((1, 1), np.float32), xs[0].astype(np.int32)])
        if self.call(what + " .quantize", gt.quantize, xs) is REFUSED:
            return
        if self.chance(0.2) and shapes and len({c for _, c in shapes}) == 1:
            self.call(what + " .quantize_contiguous", gt.quantize_contiguous,
                      np.concatenate(xs, axis=0) if xs else np.zeros((0, 0), np.float32))
        for cw in ([False, True] if kw.get("columnwise") else [False]):
            ys = self.call(what + f" .dequantize({cw})", gt.dequantize, cw)
            if ys is REFUSED or recipe in ("none", "bogus", "bf16", "fp32") or flags \
                    or "dtype" in kw or "capacity_rows" in kw:
                continue
            for i, (x, y) in enumerate(zip(xs, ys)):
                q = self.call(what + f" member {i} alone", tessera.quantize, x, recipe, True, cw)
                if q is REFUSED:
                    continue
                want = q.dequantize(cw)
                self.checks["grouped==alone"] += 1
                if not np.array_equal(want, y, equal_nan=True):
                    raise Finding(f"{what}: member {i} (columnwise {cw}) differs from quantizing "
                                  f"it alone")

    # ---- tessera.nn -------------------------------------------------------------------------
    def fuzz_nn(self):
        """A GroupedLinear or GroupedMLP of random (sometimes invalid) sizes and recipe, then a
        forward / backward of random (sometimes mismatched) arrays. Invariant: the fp32
        GroupedLinear's y on finite x equals a float64 NumPy loop within 2^-16 of
        sum |x||w| (+ |b|) per output, and its rows past the groups are zero."""
        mlp = self.chance(0.3)
        recipe = self.rng.choice(RECIPES * 2 + ["bogus", "", "none"] + [NN_FACTORY])
        g = self.rng.choice([1, 1, 2, 3, 5, 0, -1, 2**40])
        a, b = (self.rng.choice(EXTENTS[1:8] + [0, 2**31, 2**62]) if self.chance(0.05)
                else self.rng.choice([8, 16, 32, 48, 64]) for _ in range(2))
        bias = self.chance(0.5)
        kw = {"bias": bias, "token_alignment": self.rng.choice([0, 0, 0, 16, 32, -3])}
        if recipe is not NN_FACTORY:
            kw["token_alignment"] = 0 if self.chance(0.95) else 16
        if (1 << 24) < max(g, 0) * a * (a if mlp else b) <= (1 << 33):
            return  # a valid layer of gigabytes: slow (its init, every weight quantization), and
            # nothing the small layers and the refused huge ones do not already test
        cls = tessera.nn.GroupedMLP if mlp else tessera.nn.GroupedLinear
        what = f"nn.{cls.__name__}({g}, {a}, {b}, {recipe if isinstance(recipe, str) else 'factory'}, {kw})"
        layer = self.call(what, cls, g, a, b, recipe, **kw)
        if layer is REFUSED:
            return
        k, n = (a, a) if mlp else (a, b)
        if g > 64:
            return
        sizes = [self.rng.choice([0, 1, 5, 16, 17, 32]) for _ in range(g)]
        t = sum(sizes) + self.rng.choice([0, 0, 3])
        if t * k > 1 << 22:  # a huge K (the layer holds no weights: N or G is 0): no tokens
            sizes, t = [0] * g, 0
        if self.chance(0.1):  # bad splits: too many tokens, negative, wrong count or dtype
            sizes = self.rng.choice([[t + 1] + sizes[1:], [-1] + sizes[1:], sizes + [0],
                                     np.array(sizes, np.float32), [[1, 2]], "12"])
        x = self.values((t, k), specials=0.05, magnitude=False)
        if self.chance(0.1):
            x = self.rng.choice([x[:, :-1] if k > 1 else x[:0], x.astype(np.int32),
                                 x.astype(ml_dtypes.bfloat16), x.astype(np.complex64), "x"])
        args = [x, sizes]
        if mlp:
            args.append(self.np_rng.random(t).astype(np.float32) if self.chance(0.7) else
                        self.rng.choice([None, np.zeros(t + 1, np.float32)]))
        fwd = self.call(what + " .forward", layer.forward, *args,
                        training=self.chance(0.9), requantize_weights=self.chance(0.9))
        if fwd is REFUSED:
            return
        y, ctx = fwd
        valid = (isinstance(sizes, list) and isinstance(x, np.ndarray) and x.dtype == np.float32
                 and x.shape == (t, k))
        if recipe == "fp32" and not mlp and valid and np.isfinite(x).all():
            self.check_nn_linear(what, layer, x, sizes, y)
        if valid:
            self.check_nn_rows(what + " .forward", recipe if not mlp else None, sizes, x, y)
        dy = self.values((t, n), specials=0.05, magnitude=False)
        if self.chance(0.1):
            dy = self.rng.choice([dy[:1], dy.astype(np.float16), None])
        acc = None
        if self.chance(0.1):  # main-grad buffers of the right or a wrong shape / dtype
            acc = self.rng.choice([(np.zeros((g, n, k), np.float32),), (np.zeros(3),),
                                   {"fc1_dw": np.zeros(1, np.float32)}, "acc"])
        bwd = self.call(what + " .backward", layer.backward, ctx, dy, need_dx=self.chance(0.8),
                        accumulate_into=acc)
        if (valid and not mlp and acc is None and bwd is not REFUSED
                and isinstance(dy, np.ndarray) and dy.shape == (t, n)):
            self.check_nn_wgrad(what + " .backward", recipe, sizes, x, dy, bwd)

    @staticmethod
    def moderate_rows(a):
        """Per row: every value finite and of magnitude <= 1e6 (no overflow downstream)."""
        return np.isfinite(a).all(axis=1) & (np.abs(np.nan_to_num(a)) <= 1e6).all(axis=1)

    def check_nn_rows(self, what, recipe, sizes, x, y):
        """Rows past the groups give y = 0, whatever they hold (they take part in no scale);
        with per-row (or finer) activation scales, a moderate x row gives a finite y row, whatever
        the other rows hold (its scaling units are its own)."""
        live = sum(sizes)
        self.checks["nn rows past the groups"] += 1
        if np.any(y[live:] != 0):
            raise Finding(f"{what}: rows past the groups (from {live}) are not zero "
                          f"(sizes {sizes})")
        if (isinstance(recipe, str) and recipe.split(":")[0] in ROW_SCALED
                and self.moderate_rows(x[:live]).all()):
            self.checks["nn finite groups, non-finite tail"] += 1
            if not np.isfinite(y).all():
                raise Finding(f"{what}: non-finite y though every group row is finite "
                              f"(sizes {sizes}; the tail must take part in no scale)")
        if isinstance(recipe, str) and recipe.split(":")[0] in GROUP_SCALED:
            s = 0
            for m in sizes:  # a group of moderate rows gets finite y rows, whatever others hold
                rows = slice(s, s + m)
                s += m
                if m and self.moderate_rows(x[rows]).all():
                    self.checks["nn group y isolation"] += 1
                    if not np.isfinite(y[rows]).all():
                        raise Finding(f"{what}: a group of moderate x rows gave non-finite y "
                                      f"rows (sizes {sizes})")
        if isinstance(recipe, str) and recipe.split(":")[0] in ROW_SCALED:
            ok = self.moderate_rows(x[:live])
            self.checks["nn row isolation"] += 1
            if not np.isfinite(y[:live][ok]).all():
                raise Finding(f"{what}: a moderate x row gave a non-finite y row "
                              f"(sizes {sizes})")

    def check_nn_wgrad(self, what, recipe, sizes, x, dy, out):
        """dx rows past the groups are zero; with scaling units inside one group (GROUP_SCALED),
        a group whose x and dy rows are moderate gets a finite dW, whatever other groups hold."""
        dx, dw = out[0], out[1]
        live = sum(sizes)
        if dx is not None:
            self.checks["nn dx rows past the groups"] += 1
            if np.any(np.asarray(dx)[live:] != 0):
                raise Finding(f"{what}: dx rows past the groups are not zero (sizes {sizes})")
        if not (isinstance(recipe, str) and recipe.split(":")[0] in GROUP_SCALED) or dw is None:
            return
        s = 0
        for e, m in enumerate(sizes):
            rows = slice(s, s + m)
            s += m
            if self.moderate_rows(x[rows]).all() and self.moderate_rows(dy[rows]).all():
                self.checks["nn group isolation"] += 1
                if not np.isfinite(np.asarray(dw)[e]).all():
                    raise Finding(f"{what}: group {e}'s dW is not finite though its rows are "
                                  f"moderate (sizes {sizes})")

    def check_nn_linear(self, what, layer, x, sizes, y):
        w, bias = layer.weight.astype(np.float64), layer.bias
        bound = np.zeros_like(y, np.float64)
        want = np.zeros_like(y, np.float64)
        s = 0
        for e, m in enumerate(sizes):
            xs = x[s:s + m].astype(np.float64)
            want[s:s + m] = xs @ w[e].T + (0 if bias is None else bias[e])
            bound[s:s + m] = np.abs(xs) @ np.abs(w[e]).T + (0 if bias is None else np.abs(bias[e]))
            s += m
        # rows past the groups (capacity): zero (want and bound stay zero there)
        self.checks["nn==float64"] += 1
        err = np.abs(y - want)
        if not (err <= bound * 2.0**-16 + 1e-30).all():
            i = np.unravel_index(np.argmax(err - 2.0**-16 * bound), err.shape)
            raise Finding(f"{what}: y {y[i]} vs float64 {want[i]} at {i} (sizes {sizes})")

    # ---- the loop ----------------------------------------------------------------------------
    def run(self, calls, max_findings=20):
        steps = (self.fuzz_quantize, self.fuzz_codec, self.fuzz_gemm, self.fuzz_grouped,
                 self.fuzz_nn, self.fuzz_gemm_alias, self.fuzz_bad_arguments,
                 self.fuzz_read_only, self.fuzz_decode_dtypes)
        while self.calls < calls and len(self.findings) < max_findings:
            step = self.rng.choice(steps)
            try:
                step()
            except Finding as f:
                self.findings.append(str(f))
        return self.findings


def under_asan():
    """True when AddressSanitizer's runtime is loaded (an instrumented extension, with libasan
    preloaded into this uninstrumented interpreter)."""
    import ctypes
    return hasattr(ctypes.CDLL(None), "__asan_init")


def main(argv):
    calls = int(argv[1]) if len(argv) > 1 else 20000
    seed = int(argv[2]) if len(argv) > 2 else 1
    # A call whose (valid) output needs more than 8 GiB gets MemoryError -> tessera's
    # OutOfMemoryError, instead of the machine's OOM killer. Under AddressSanitizer the limit
    # cannot be set (its shadow memory reserves terabytes of address space): there the caller
    # caps single allocations instead (tools/fuzz/python_sanitized.sh: ASAN_OPTIONS
    # max_allocation_size_mb=8192 with allocator_may_return_null=1).
    asan = under_asan()
    if not asan:
        resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))
    f = Fuzzer(seed)
    t0 = time.perf_counter()
    findings = []
    for done in range(0, calls, 100000):  # progress every 100000 calls
        findings = f.run(min(calls, done + 100000))
        print(f"  {f.calls} calls, {time.perf_counter() - t0:.0f} s, {len(findings)} findings",
              flush=True)
        if len(findings) >= 20:
            break
    for x in findings:
        print("FINDING:", x)
    errors = " ".join(f"{k}={v}" for k, v in sorted(f.errors.items()))
    under = ", under ASan" if asan else ""
    print(f"fuzz_entry_points: {f.calls} calls (seed {seed}{under}) in "
          f"{time.perf_counter() - t0:.1f} s, "
          f"{len(findings)} findings; ok {f.ok}; errors: {errors}; slowest call "
          f"{f.slowest[0] * 1e3:.1f} ms ({f.slowest[1][:120]}); invariants checked: "
          + " ".join(f"{k} {v}" for k, v in f.checks.items()))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
