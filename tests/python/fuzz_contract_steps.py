"""Steps of the Python entry-point fuzzer (fuzz_entry_points.py) for the argument contracts:
outputs aliasing inputs, flags and names out of range, read-only inputs, codes of other dtypes.
A mixin of Fuzzer: it draws with self.rng / self.np_rng and calls through self.call.

Invariants (a violation is a Finding):
  - grouped_gemm with `out` sharing memory with a, b, bias or offsets (np.shares_memory, both
    non-empty, the default capacity: every byte of both is read or written) raises a
    tessera.Error; accepted, `out` must not share memory with them;
  - a flag that is not True/False (2, -1, "yes", None) and a name that is not known raise a
    tessera.Error (never read as true, or as another name); a name's echo in the message is at
    most 64 characters of it;
  - a read-only input gives the result of the same call on a writable copy, byte for byte;
  - decode of an array that is neither raw uint8/uint16 bits of the format's width nor of the
    format's own dtype raises tessera.DTypeError; of raw bits or the own dtype, it succeeds.
The Python package has no destroy call (objects own their C++ objects), so the handle-misuse
class of the C API fuzzer has no Python counterpart."""
import ml_dtypes
import numpy as np

import tessera


class Finding(Exception):
    pass


REFUSED = object()  # what Fuzzer.call returns after a tessera.Error

BAD_FLAGS = [2, -1, "yes", None, 1.0]
LONG_NAME = "q" * 5000
OWN_DTYPES = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2,
              "e8m0": ml_dtypes.float8_e8m0fnu, "e2m1": ml_dtypes.float4_e2m1fn,
              "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}
CODE_DTYPES = [np.uint8, np.uint16, np.int8, np.int16, np.float16, np.float32, bool,
               ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2,
               ml_dtypes.float8_e8m0fnu, ml_dtypes.float4_e2m1fn]


class ContractSteps:
    def refused(self, what, fn, *args, **kwargs):
        """A call that must raise a tessera.Error."""
        if self.call(what, fn, *args, **kwargs) is not REFUSED:
            raise Finding(f"{what}: accepted")
        self.checks["refused"] += 1

    # ---- outputs aliasing inputs ------------------------------------------------------------
    def fuzz_gemm_alias(self):
        g = self.rng.choice([1, 2, 3])
        t, n, k = (self.rng.randrange(0, 12) for _ in range(3))
        a = self.values((t, k), specials=0.0, magnitude=False)
        b = self.values((g, n, k), specials=0.0, magnitude=False)
        bias = self.values((g, n), specials=0.0, magnitude=False)
        cuts = sorted(self.rng.randrange(0, t + 1) for _ in range(g - 1))
        offs = np.array([0] + cuts + [t], np.int64)
        inputs = {"a": a, "b": b, "bias": bias, "offsets": offs}
        victim = self.rng.choice(list(inputs))
        x = inputs[victim]
        off = 0 if self.chance(0.5) else 16 * self.rng.randrange(0, x.nbytes // 16 + 1)
        storage = np.zeros(max(x.nbytes, off + 4 * t * n) + 16, np.uint8)
        shared = storage[:x.nbytes].view(x.dtype).reshape(x.shape)
        shared[...] = x
        inputs[victim] = shared
        out = storage[off:off + 4 * t * n].view(np.float32).reshape(t, n)
        what = f"grouped_gemm(out over {victim} + {off} bytes, a {a.shape}, b {b.shape})"
        got = self.call(what, tessera.grouped_gemm, inputs["a"], inputs["b"], inputs["offsets"],
                        bias=inputs["bias"], out=out, beta=self.rng.choice([0.0, 1.0]))
        if got is REFUSED:
            self.checks["aliased out refused"] += 1
            return
        if np.shares_memory(out, shared) and out.size and shared.size:
            raise Finding(f"{what}: accepted an output sharing memory with {victim}")

    # ---- flags and names out of range ---------------------------------------------------------
    def fuzz_bad_arguments(self):
        x = self.values((4, 32), specials=0.0)
        a, b, offs = np.ones((4, 8), np.float32), np.ones((2, 3, 8), np.float32), np.array([0, 2, 4])
        case = self.rng.randrange(6)
        bad = self.rng.choice(BAD_FLAGS)
        if case == 0:
            self.refused(f"quantize(rowwise={bad!r})", tessera.quantize, x, "mxfp8", rowwise=bad)
        elif case == 1:
            self.refused(f"quantize(columnwise={bad!r})", tessera.quantize, x, "mxfp8",
                         columnwise=bad)
        elif case == 2:
            which = self.rng.choice(["transpose_a", "transpose_b"])
            bad = bad if bad is not None else 0  # None: the kind's default
            self.refused(f"grouped_gemm({which}={bad!r})", tessera.grouped_gemm, a, b, offs,
                         **{which: bad})
        elif case == 3:
            self.refused(f"GroupedTensor(swizzled={bad!r})", tessera.GroupedTensor, [(2, 32)],
                         recipe="mxfp8", swizzled=bad)
        else:
            name = self.rng.choice(["bogus", "", LONG_NAME, "mxfp8 ", "E4M3"])
            call = self.rng.choice([
                ("quantize", lambda: tessera.quantize(x, name)),
                ("encode", lambda: tessera.encode(x, name)),
                ("grouped_gemm kind", lambda: tessera.grouped_gemm(a, b, offs, kind=name)),
                ("quantize layout", lambda: tessera.quantize(x, "mxfp8", layout=name)),
            ])
            self.check_bounded_echo(f"{call[0]}({name[:8]!r}...)", call[1])

    def check_bounded_echo(self, what, fn):
        self.calls += 1
        try:
            fn()
        except tessera.Error as e:
            self.errors[type(e).__name__] = self.errors.get(type(e).__name__, 0) + 1
            if "q" * 65 in str(e) or len(str(e)) > 1000:
                raise Finding(f"{what}: the message echoes the name unbounded ({len(str(e))} "
                              f"characters)")
            self.checks["refused"] += 1
            return
        except Exception as e:  # noqa: BLE001 - the contract under test
            raise Finding(f"{what}: {type(e).__name__} (not a tessera.Error): {e}") from e
        raise Finding(f"{what}: accepted a name that is not known")

    # ---- read-only inputs ---------------------------------------------------------------------
    def fuzz_read_only(self):
        x = self.values(self.rng.choice([(4, 32), (3, 16), (0, 8)]), specials=0.1)
        ro = x.copy()
        ro.setflags(write=False)
        case = self.rng.randrange(4)
        if case == 0:
            fmt = self.rng.choice(["e4m3", "e5m2", "bfloat16", "e2m1"])
            want, got = (self.call(f"encode({fmt}, read-only {w})", tessera.encode, v, fmt)
                         for w, v in (("no", x), ("yes", ro)))
        elif case == 1:
            name = self.rng.choice(["mxfp8", "fp8_block", "nvfp4", "tensor"])
            q = [self.call(f"quantize({name}, read-only {w})", tessera.quantize, v, name)
                 for w, v in (("no", x), ("yes", ro))]
            want, got = (r if r is REFUSED else r.data for r in q)
        elif case == 2:
            codes = np.ascontiguousarray(self.np_rng.integers(0, 256, x.shape, dtype=np.uint8))
            ro_codes = codes.copy()
            ro_codes.setflags(write=False)
            want, got = (self.call(f"decode(read-only {w})", tessera.decode, v, "e4m3")
                         for w, v in (("no", codes), ("yes", ro_codes)))
        else:
            b = np.ones((2, 5, x.shape[1]), np.float32)
            offs = np.array([0, x.shape[0] // 2, x.shape[0]])
            ro_b, ro_offs = b.copy(), offs.copy()
            for v in (ro_b, ro_offs):
                v.setflags(write=False)
            want = self.call("grouped_gemm(writable)", tessera.grouped_gemm, x, b, offs)
            got = self.call("grouped_gemm(read-only)", tessera.grouped_gemm, ro, ro_b, ro_offs)
        if (want is REFUSED) != (got is REFUSED) or (
                want is not REFUSED and want.tobytes() != got.tobytes()):
            raise Finding(f"read-only input, case {case}: the result differs from a writable "
                          f"copy's ({'refused' if got is REFUSED else 'accepted'})")
        self.checks["read-only==writable"] += 1

    # ---- codes of other dtypes ----------------------------------------------------------------
    def fuzz_decode_dtypes(self):
        fmt = self.rng.choice(list(OWN_DTYPES))
        dtype = self.rng.choice(CODE_DTYPES)
        shape = self.rng.choice([(6,), (2, 4), (0,)])
        codes = self.np_rng.integers(0, 16 if dtype == ml_dtypes.float4_e2m1fn else 60, shape)
        arr = codes.astype(np.uint8).view(dtype) if np.dtype(dtype).itemsize == 1 else \
            codes.astype(np.uint16).view(dtype)
        raw = np.dtype(dtype) == np.dtype(np.uint16 if fmt in ("bfloat16", "float16") else np.uint8)
        own = np.dtype(dtype) == np.dtype(OWN_DTYPES[fmt])
        what = f"decode({np.dtype(dtype).name}{shape}, {fmt!r})"
        self.calls += 1
        try:
            tessera.decode(arr, fmt)
            self.ok += 1
            accepted = True
        except tessera.DTypeError:
            accepted = False
        except Exception as e:  # noqa: BLE001 - the contract under test
            if raw or own:
                raise Finding(f"{what}: {type(e).__name__}: {e}") from e
            raise Finding(f"{what}: {type(e).__name__} instead of tessera.DTypeError") from e
        if accepted != (raw or own):
            raise Finding(f"{what}: {'accepted' if accepted else 'refused'} (raw {raw}, own {own})")
        self.checks["decode dtype rule"] += 1
